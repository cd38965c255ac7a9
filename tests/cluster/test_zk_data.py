"""The znode paths and JSON codecs of Kafka's ZooKeeper layout (sans-IO, no server).

Golden vectors: each type decodes a znode exactly as a Kafka 3.7 broker writes it (as
``zkCli.sh get`` prints it: Kafka's key order is its hash-map order, which must not matter).
"""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.cluster import zk_data as zd
from tierlog.cluster.zk_data import (
    BrokerEndPoint,
    BrokerInfo,
    ControllerInfo,
    PartitionState,
    TopicAssignment,
)
from tierlog.log.partition_metadata_file import kafka_str_to_uuid

# --------------------------------------------------------------------------- paths


def test_paths_are_kafkas():
    assert zd.CLUSTER_ID_PATH == "/cluster/id"
    assert zd.broker_path(3) == "/brokers/ids/3"
    assert zd.topic_path("orders") == "/brokers/topics/orders"
    assert zd.partitions_path("orders") == "/brokers/topics/orders/partitions"
    assert zd.partition_path("orders", 7) == "/brokers/topics/orders/partitions/7"
    assert zd.partition_state_path("orders", 7) == "/brokers/topics/orders/partitions/7/state"
    assert zd.config_topic_path("orders") == "/config/topics/orders"
    assert zd.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert zd.controlled_shutdown_path(2) == "/admin/controlled_shutdown/2"
    assert zd.PREFERRED_REPLICA_ELECTION_PATH == "/admin/preferred_replica_election"
    assert zd.REASSIGN_PARTITIONS_PATH == "/admin/reassign_partitions"
    assert zd.ISR_CHANGE_NOTIFICATION_PATH == "/isr_change_notification"
    assert "/config/topics" in zd.PERSISTENT_ZK_PATHS
    assert "/brokers/ids" in zd.PERSISTENT_ZK_PATHS


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a b", "x" * 250, "é"])
def test_a_topic_that_is_not_one_znode_is_refused(bad):
    with pytest.raises(ValueError, match="not a legal topic name"):
        zd.topic_path(bad)


# --------------------------------------------------------------------------- golden vectors


def test_broker_registration_as_kafka_3_7_writes_it():
    data = (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT",'
        b'"PLAINTEXT_HOST":"PLAINTEXT"},"endpoints":["PLAINTEXT://kafka:9092",'
        b'"PLAINTEXT_HOST://localhost:29092"],"jmx_port":-1,"port":9092,"host":"kafka",'
        b'"version":5,"timestamp":"1736198272985","rack":"rack-a"}'
    )
    info = BrokerInfo.decode(1, data, czxid=0x10000002A)
    assert info == BrokerInfo(
        1,
        (
            BrokerEndPoint("PLAINTEXT", "kafka", 9092, "PLAINTEXT"),
            BrokerEndPoint("PLAINTEXT_HOST", "localhost", 29092, "PLAINTEXT"),
        ),
        "rack-a",
        epoch=0x10000002A,
    )
    assert info.endpoint("PLAINTEXT_HOST") == BrokerEndPoint(
        "PLAINTEXT_HOST", "localhost", 29092, "PLAINTEXT"
    )
    assert info.endpoint("SSL") is None


def test_broker_registration_of_older_versions():
    v1 = b'{"version":1,"host":"h","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
    assert BrokerInfo.decode(0, v1).endpoints == (
        BrokerEndPoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),
    )
    v3 = (
        b'{"version":3,"host":"h","port":9092,"jmx_port":9999,"timestamp":"1",'
        b'"endpoints":["PLAINTEXT://h:9092","SSL://h:9093"],"rack":"dc1"}'
    )
    info = BrokerInfo.decode(0, v3)
    assert info.endpoint("SSL") == BrokerEndPoint("SSL", "h", 9093, "SSL")
    assert info.rack == "dc1"


def test_topic_assignment_as_kafka_3_7_writes_it():
    data = (
        b'{"removing_replicas":{},"partitions":{"2":[2,1],"1":[1,3],"0":[3,2]},'
        b'"topic_id":"RSZ--odYRlSOPGRgukKnAQ","adding_replicas":{},"version":3}'
    )
    a = TopicAssignment.decode("test-topic", data, zk_version=4)
    assert a == TopicAssignment(
        "test-topic",
        kafka_str_to_uuid("RSZ--odYRlSOPGRgukKnAQ"),
        {0: (3, 2), 1: (1, 3), 2: (2, 1)},
        zk_version=4,
    )
    # the same topic id string comes back out
    assert json.loads(a.encode())["topic_id"] == "RSZ--odYRlSOPGRgukKnAQ"


def test_topic_assignment_during_a_reassignment():
    data = (
        b'{"version":3,"partitions":{"0":[1,2,3,4]},"adding_replicas":{"0":[4]},'
        b'"removing_replicas":{"0":[1]}}'
    )
    a = TopicAssignment.decode("t", data)
    assert a.topic_id is None
    assert (a.partitions, a.adding, a.removing) == ({0: (1, 2, 3, 4)}, {0: (4,)}, {0: (1,)})


def test_partition_state_as_kafka_3_7_writes_it():
    data = b'{"controller_epoch":1,"leader":3,"version":1,"leader_epoch":55,"isr":[1,2,3]}'
    assert PartitionState.decode(data, zk_version=60) == PartitionState(
        leader=3, leader_epoch=55, isr=(1, 2, 3), controller_epoch=1, zk_version=60
    )
    recovering = (
        b'{"controller_epoch":4,"leader":2,"version":1,"leader_epoch":9,"isr":[2],'
        b'"leader_recovery_state":1}'
    )
    state = PartitionState.decode(recovering, 3)
    assert state.leader_recovery_state == zd.RECOVERING
    assert json.loads(state.encode())["leader_recovery_state"] == 1
    # only written when recovering, as Kafka does
    assert "leader_recovery_state" not in json.loads(PartitionState(1, 0, (1,), 1).encode())


def test_controller_as_kafka_3_7_writes_it():
    data = b'{"version":2,"brokerid":1,"timestamp":"1704032949256","kraftControllerEpoch":-1}'
    assert ControllerInfo.decode(data) == ControllerInfo(1, 1704032949256)
    assert ControllerInfo(1, 1704032949256).encode() == data
    v1 = b'{"version":1,"brokerid":2,"timestamp":"1673382716473"}'
    assert ControllerInfo.decode(v1) == ControllerInfo(2, 1673382716473)


def test_controller_epoch_is_plain_text():
    assert zd.decode_controller_epoch(b"1") == 1
    assert zd.encode_controller_epoch(17) == b"17"
    with pytest.raises(ValueError, match="/controller_epoch"):
        zd.decode_controller_epoch(b'{"epoch":1}')


def test_cluster_id_as_kafka_writes_it():
    data = b'{"version":"1","id":"eQzK4lYlQ9y8P21IScOl_g"}'
    assert zd.decode_cluster_id(data) == "eQzK4lYlQ9y8P21IScOl_g"
    assert zd.encode_cluster_id("eQzK4lYlQ9y8P21IScOl_g") == data


def test_topic_config_as_kafka_writes_it():
    data = b'{"version":1,"config":{"retention.ms":"86400000","cleanup.policy":"compact"}}'
    config = {"retention.ms": "86400000", "cleanup.policy": "compact"}
    assert zd.decode_topic_config(data) == config
    assert zd.encode_topic_config(config) == data
    assert zd.decode_topic_config(b"") == {}
    assert zd.decode_topic_config(b'{"version":1,"config":null}') == {}


def test_admin_and_notification_znodes_as_kafka_writes_them():
    assert zd.decode_config_change_notification(b'{"version":2,"entity_path":"topics/t1"}') == (
        "topics/t1"
    )
    assert (
        zd.decode_config_change_notification(
            b'{"version":1,"entity_type":"topics","entity_name":"t1"}'
        )
        == "topics/t1"
    )
    election = (
        b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"u","partition":3}]}'
    )
    assert zd.decode_preferred_replica_election(election) == {("t", 0), ("u", 3)}
    isr_change = b'{"version":1,"partitions":[{"topic":"t","partition":1}]}'
    assert zd.decode_isr_change_notification(isr_change) == {("t", 1)}
    reassign = b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[4,5,6]}]}'
    assert zd.decode_reassign_partitions(reassign) == {("t", 0): (4, 5, 6)}
    assert zd.decode_controlled_shutdown(zd.encode_controlled_shutdown(1234)) == 1234


def test_values_are_hashable():
    a = TopicAssignment("t", uuid.UUID(int=1), {0: (1, 2)})
    b = BrokerInfo(1, (BrokerEndPoint("PLAINTEXT", "h", 1, "PLAINTEXT"),), None, 5, {"f": (1, 2)})
    s = PartitionState(1, 0, (1,), 1, zk_version=3)
    assert len({a, TopicAssignment("t", uuid.UUID(int=1), {0: (1, 2)})}) == 1
    assert len({b, BrokerInfo.decode(1, b.encode(), 5)}) == 1
    assert len({s, PartitionState.decode(s.encode(), 3)}) == 1


# --------------------------------------------------------------------------- encoders


def test_broker_registration_json_fields():
    info = BrokerInfo(
        2,
        (
            BrokerEndPoint("INTERNAL", "10.0.0.2", 9091, "SSL"),
            BrokerEndPoint("CLIENT", "::1", 9092, "PLAINTEXT"),
        ),
        None,
    )
    obj = json.loads(info.encode(timestamp_ms=1700000000000))
    assert obj == {
        "version": 5,
        "host": "::1",  # the first PLAINTEXT endpoint, for pre-0.10 clients
        "port": 9092,
        "jmx_port": -1,
        "timestamp": "1700000000000",
        "endpoints": ["INTERNAL://10.0.0.2:9091", "CLIENT://[::1]:9092"],
        "listener_security_protocol_map": {"INTERNAL": "SSL", "CLIENT": "PLAINTEXT"},
        "features": {},
    }
    assert "rack" not in obj
    no_plaintext = BrokerInfo(1, (BrokerEndPoint("SSL", "h", 1, "SSL"),), "r")
    obj = json.loads(no_plaintext.encode())
    assert (obj["host"], obj["port"], obj["rack"]) == (None, -1, "r")


def test_topic_assignment_json_fields():
    tid = uuid.UUID(int=1)
    a = TopicAssignment("t", tid, {1: (2, 3), 0: (1, 2)}, adding={1: (3,)})
    assert json.loads(a.encode()) == {
        "version": 3,
        "partitions": {"0": [1, 2], "1": [2, 3]},
        "adding_replicas": {"1": [3]},
        "removing_replicas": {},
        "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
    }


# --------------------------------------------------------------------------- round trips

ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
small = st.integers(min_value=0, max_value=2**31 - 1)
names = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12)
hosts = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True),
    st.ip_addresses().map(str),
)
endpoints = st.builds(
    BrokerEndPoint,
    names,
    hosts,
    st.integers(min_value=0, max_value=65535),
    st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
)


@st.composite
def broker_infos(draw: st.DrawFn) -> BrokerInfo:
    eps = draw(st.lists(endpoints, max_size=4, unique_by=lambda e: e.listener))
    features = draw(st.dictionaries(st.text(min_size=1, max_size=8), st.tuples(small, small)))
    rack = draw(st.none() | st.text(max_size=10))
    return BrokerInfo(draw(small), tuple(eps), rack, draw(ints), features)


@given(broker_infos())
def test_broker_info_round_trips(info):
    assert BrokerInfo.decode(info.id, info.encode(), info.epoch) == info


replica_lists = st.lists(small, max_size=5).map(tuple)
partition_maps = st.dictionaries(st.integers(0, 10_000), replica_lists, max_size=20)


@given(
    st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True).filter(lambda t: t not in (".", "..")),
    st.none() | st.uuids(),
    partition_maps,
    st.dictionaries(st.integers(0, 10_000), replica_lists.filter(bool), max_size=3),
    st.dictionaries(st.integers(0, 10_000), replica_lists.filter(bool), max_size=3),
    small,
)
def test_topic_assignment_round_trips(name, topic_id, partitions, adding, removing, version):
    a = TopicAssignment(name, topic_id, partitions, adding, removing, version)
    assert TopicAssignment.decode(name, a.encode(), version) == a


@given(ints, ints, replica_lists, ints, st.sampled_from([0, 1]), small)
def test_partition_state_round_trips(leader, epoch, isr, controller_epoch, recovery, version):
    s = PartitionState(leader, epoch, isr, controller_epoch, recovery, version)
    assert PartitionState.decode(s.encode(), version) == s


@given(ints, st.integers(min_value=0, max_value=2**63 - 1), ints)
def test_controller_info_round_trips(broker_id, timestamp, kraft_epoch):
    c = ControllerInfo(broker_id, timestamp, kraft_epoch)
    assert ControllerInfo.decode(c.encode()) == c


@given(ints)
def test_controller_epoch_round_trips(epoch):
    assert zd.decode_controller_epoch(zd.encode_controller_epoch(epoch)) == epoch


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=20)))
@settings(max_examples=50)
def test_topic_config_round_trips(config):
    assert zd.decode_topic_config(zd.encode_topic_config(config)) == config


@given(st.sets(st.tuples(st.from_regex(r"[a-z]{1,5}", fullmatch=True), small), max_size=10))
def test_partition_lists_round_trip(tps):
    assert zd.decode_preferred_replica_election(zd.encode_preferred_replica_election(tps)) == tps
    assert zd.decode_isr_change_notification(zd.encode_isr_change_notification(tps)) == tps


# --------------------------------------------------------------------------- bad znodes


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (None, "no data"),
        (b"", "not JSON"),
        (b"\xff", "not JSON"),
        (b"[1]", "not an object"),
        (b'{"leader":1}', "no 'leader_epoch' field"),
        (b'{"leader":"1","leader_epoch":0,"isr":[],"controller_epoch":0}', "not an integer"),
        (b'{"leader":true,"leader_epoch":0,"isr":[],"controller_epoch":0}', "not an integer"),
        (b'{"leader":1,"leader_epoch":0,"isr":[1.5],"controller_epoch":0}', "element of 'isr'"),
        (b'{"leader":1,"leader_epoch":0,"isr":1,"controller_epoch":0}', "not a list"),
        (b'{"leader":NaN,"leader_epoch":0,"isr":[],"controller_epoch":0}', "not JSON"),
        (
            b'{"leader":1,"leader_epoch":0,"isr":[],"controller_epoch":0,'
            b'"leader_recovery_state":7}',
            "not 0 or 1",
        ),
    ],
)
def test_a_bad_partition_state_names_the_znode(data, match):
    path = zd.partition_state_path("t", 0)
    with pytest.raises(ValueError, match=match) as e:
        PartitionState.decode(data, 0, path)
    assert path in str(e.value)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b'{"version":5,"endpoints":["nonsense"]}', "not LISTENER://host:port"),
        (
            b'{"version":5,"endpoints":["X://h:1"],"listener_security_protocol_map":{}}',
            "no security protocol",
        ),
        (b'{"version":0}', "unsupported registration version"),
        (b'{"version":5,"endpoints":"PLAINTEXT://h:1"}', "not a string list"),
        (b'{"version":5,"endpoints":[],"rack":7}', "'rack'"),
    ],
)
def test_a_bad_broker_registration_names_the_znode(data, match):
    with pytest.raises(ValueError, match=match) as e:
        BrokerInfo.decode(4, data)
    assert "/brokers/ids/4" in str(e.value)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b'{"version":3,"partitions":{"zero":[1]}}', "not a partition number"),
        (b'{"version":3,"partitions":{"0":[1]},"topic_id":"nope"}', "'topic_id'"),
        (b'{"version":3,"partitions":[]}', "not an object"),
    ],
)
def test_a_bad_topic_assignment_names_the_znode(data, match):
    with pytest.raises(ValueError, match=match) as e:
        TopicAssignment.decode("t", data)
    assert "/brokers/topics/t" in str(e.value)


def test_bad_controller_and_config_znodes():
    with pytest.raises(ValueError, match="/controller: no 'brokerid'"):
        ControllerInfo.decode(b'{"version":2}')
    with pytest.raises(ValueError, match="'timestamp'"):
        ControllerInfo.decode(b'{"version":2,"brokerid":1,"timestamp":1}')
    with pytest.raises(ValueError, match="/config/topics/t: config 'a' is 1"):
        zd.decode_topic_config(b'{"version":1,"config":{"a":1}}', "/config/topics/t")
