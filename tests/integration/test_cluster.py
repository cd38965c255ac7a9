"""A replicated cluster (issue 9): three real ``tierlog serve`` processes on a real ZooKeeper,
driven by real Kafka clients.

The cluster is shared by the tests of this module (each uses its own topics); a test that
kills or stops a broker starts it again and waits for the ISRs to heal before it ends.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.broker_process import BrokerProcess
from tests.integration.cluster_support import SESSION_TIMEOUT_MS, Cluster, wait_for
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("cluster"),
        f"{zookeeper.connect_string}/cluster-{uuid.uuid4().hex}",
        3,
        "min.insync.replicas=2",
        "default.replication.factor=3",
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _producer(bootstrap: str, **conf: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            **conf,
        }
    )


def _produce(
    bootstrap: str, topic: str, values: list[bytes], partitions: int
) -> dict[bytes, tuple[int, int]]:
    """Produce with acks=all; {value: (partition, offset)} of every acknowledged record."""
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []

    def done(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())

    p = _producer(bootstrap)
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % partitions, on_delivery=done)
        p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:5]
    return acked


def _consume_all(
    bootstrap: str, topic: str, partitions: int, count: int
) -> dict[int, list[tuple[int, bytes]]]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    c.subscribe([topic])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    n = 0
    try:
        deadline = 120.0
        import time

        end = time.monotonic() + deadline
        while n < count and time.monotonic() < end:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            got[m.partition()].append((m.offset(), m.value()))
            n += 1
    finally:
        c.close()
    return got


def test_a_replicated_topic_has_leaders_replicas_and_full_isrs(cluster: Cluster) -> None:
    topic = f"rf3-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=6, rf=3)
    parts = cluster.partitions(topic)
    assert sorted(parts) == list(range(6))
    leaders = [p.leader for p in parts.values()]
    for p in parts.values():
        assert sorted(p.replicas) == [1, 2, 3]
        assert sorted(p.isrs) == [1, 2, 3]
        assert p.leader == p.replicas[0]  # the preferred replica leads a new partition
    # Kafka's round-robin spreads the leaders: 6 partitions on 3 brokers, 2 each.
    assert sorted(leaders.count(b) for b in (1, 2, 3)) == [2, 2, 2]


def test_acks_all_records_are_read_back_exactly_once_from_every_replica(cluster: Cluster) -> None:
    topic = f"acks-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=3, rf=3)
    values = [f"v{i}".encode() for i in range(3000)]
    acked = _produce(cluster.bootstrap, topic, values, 3)
    assert len(acked) == len(values)
    got = _consume_all(cluster.bootstrap, topic, 3, len(values))
    for p, records in got.items():
        offsets = [o for o, _ in records]
        assert offsets == list(range(len(records))), f"partition {p}: gaps or duplicates"
        for o, v in records:
            assert acked[v] == (p, o)
    assert sum(len(r) for r in got.values()) == len(values)
    # Every replica holds the same bytes: each broker's log of each partition is identical.
    _assert_replicas_identical(cluster, topic, 3)


def _assert_replicas_identical(cluster: Cluster, topic: str, partitions: int) -> None:
    def same() -> bool:
        for p in range(partitions):
            dumps = set()
            for b in cluster:
                d = b.log_dir / f"{topic}-{p}"
                data = b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))
                dumps.add(data)
            if len(dumps) != 1:
                return False
        return True

    wait_for(f"{topic}: every replica's log identical", same, 60)


def test_leader_sigkill_fails_over_and_loses_no_acknowledged_record(cluster: Cluster) -> None:
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, rf=3)
    first = _produce(cluster.bootstrap, topic, [f"a{i}".encode() for i in range(500)], 1)
    old = cluster.leader(topic, 0)
    victim = cluster.brokers[old]
    victim.kill()
    new = wait_for(
        "a new leader",
        lambda: (lambda lead: lead if lead not in (-1, old) else None)(cluster.leader(topic, 0)),
        SESSION_TIMEOUT_MS / 1000 + 30,
    )
    assert new != old
    second = _produce(cluster.bootstrap, topic, [f"b{i}".encode() for i in range(500)], 1)
    victim.start()
    cluster.wait_healthy(topic, 1, 3)
    got = _consume_all(cluster.bootstrap, topic, 1, 1000)[0]
    assert [o for o, _ in got] == list(range(1000))
    acked = {**first, **second}
    for o, v in got:
        assert acked[v] == (0, o)
    _assert_replicas_identical(cluster, topic, 1)


def test_below_min_insync_replicas_acks_all_is_refused(cluster: Cluster) -> None:
    topic = f"minisr-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, rf=2, **{"min.insync.replicas": "2"})
    leader = cluster.leader(topic, 0)
    follower = next(r for r in cluster.partitions(topic)[0].replicas if r != leader)
    cluster.brokers[follower].kill()
    try:
        wait_for(
            "the ISR shrinks to the leader",
            lambda: list(cluster.partitions(topic)[0].isrs) == [leader],
            SESSION_TIMEOUT_MS / 1000 + 30,
        )
        errors: list[str] = []
        p = _producer(
            cluster.bootstrap,
            **{"enable.idempotence": False, "message.timeout.ms": 3000, "retries": 0},
        )
        p.produce(topic, b"x", partition=0, on_delivery=lambda e, m: errors.append(str(e)))
        p.flush(30)
        assert errors and "NOT_ENOUGH_REPLICAS" in errors[0], errors
    finally:
        cluster.brokers[follower].start()
    cluster.wait_healthy(topic, 1, 2)


def test_controlled_shutdown_moves_leadership_before_the_broker_stops(cluster: Cluster) -> None:
    topic = f"cs-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=3, rf=3)
    leader = cluster.leader(topic, 0)
    b = cluster.brokers[leader]
    assert b.stop(signal.SIGTERM) == 0
    assert "leadership moved" in b.log_since_start()
    parts = cluster.partitions(topic)
    assert all(p.leader not in (-1, leader) for p in parts.values())
    b.start()
    cluster.wait_healthy(topic, 3, 3)


def test_topics_describe_shows_leader_replicas_and_isr(cluster: Cluster, tmp_path: Path) -> None:
    topic = f"desc-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=2, rf=3)
    out = subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "topics", "describe", topic,
         "--bootstrap-server", cluster.bootstrap],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    for p, meta in cluster.partitions(topic).items():
        line = next(x for x in out.splitlines() if f"Partition: {p}\t" in x)
        assert f"Leader: {meta.leader}" in line
        assert "Replicas: " + ",".join(map(str, meta.replicas)) in line
        assert "Isr: " + ",".join(map(str, meta.isrs)) in line


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica(cluster: Cluster) -> None:
    from confluent_kafka import ElectionType, TopicPartition

    topic = f"elect-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, rf=3)
    preferred = cluster.partitions(topic)[0].replicas[0]
    assert cluster.leader(topic, 0) == preferred
    cluster.brokers[preferred].kill()
    wait_for(
        "another leader",
        lambda: cluster.leader(topic, 0) not in (-1, preferred),
        SESSION_TIMEOUT_MS / 1000 + 30,
    )
    cluster.brokers[preferred].start()
    cluster.wait_healthy(topic, 1, 3)
    admin = cluster.admin()
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(60)
    # 0: elected now; ELECTION_NOT_NEEDED: the periodic rebalance (5 s here) got there first.
    error = result[TopicPartition(topic, 0)]
    assert error is None or error.code() == 84, error
    # The broker that answered saw it; the others' metadata follows within a watch.
    wait_for("every broker naming the preferred leader",
             lambda: cluster.leader(topic, 0) == preferred, 30)  # fmt: skip


def test_reassignment_moves_a_replica_and_drops_the_old_copy(cluster: Cluster) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition

    topic = f"move-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, rf=2)
    before = list(cluster.partitions(topic)[0].replicas)
    leaving = before[-1]
    joining = next(b for b in (1, 2, 3) if b not in before)
    target = [before[0], joining]
    acked = _produce(cluster.bootstrap, topic, [f"m{i}".encode() for i in range(2000)], 1)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.alter_partition_reassignments({KTopicPartition(topic, 0): target})

        def moved() -> bool:
            p = cluster.partitions(topic)[0]
            ongoing = admin.list_partition_reassignments([KTopicPartition(topic, 0)])
            return list(p.replicas) == target and sorted(p.isrs) == sorted(target) and not ongoing

        wait_for("the reassignment to finish", moved, 90)
    finally:
        admin.close()
    # The new replica has every record; the old one's copy is gone from its log dir.
    wait_for(
        "the leaving replica's copy deleted",
        lambda: not (cluster.brokers[leaving].log_dir / f"{topic}-0").exists(),
        60,
    )
    got = _consume_all(cluster.bootstrap, topic, 1, len(acked))[0]
    assert [o for o, _ in got] == list(range(len(acked)))
    _assert_replicas_identical_on(cluster, topic, 0, target)


def _assert_replicas_identical_on(cluster: Cluster, topic: str, p: int, brokers: list[int]) -> None:
    def same() -> bool:
        datas = set()
        for b in brokers:
            d = cluster.brokers[b].log_dir / f"{topic}-{p}"
            datas.add(b"".join(f.read_bytes() for f in sorted(d.glob("*.log"))))
        return len(datas) == 1

    wait_for(f"{topic}-{p}: identical on {brokers}", same, 60)


def test_topic_configs_live_in_zookeeper_and_reach_every_replica(cluster: Cluster) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, rf=3, **{"retention.ms": "3600000"})
    first, second = list(cluster.brokers.values())[:2]
    admin = AdminClient({"bootstrap.servers": first.bootstrap})

    def incremental(key: str, value: str) -> ConfigResource:
        entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        return ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])

    res = incremental("retention.ms", "7200000")
    admin.incremental_alter_configs([res])[res].result(30)

    def described(b: BrokerProcess) -> str | None:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        r = ConfigResource(ConfigResource.Type.TOPIC, topic)
        return a.describe_configs([r])[r].result(30)["retention.ms"].value  # type: ignore[no-any-return]

    # Any broker describes what ZooKeeper holds...
    wait_for("the new retention everywhere", lambda: described(second) == "7200000", 30)

    # ...and every replica's broker applied it to its log (its topic registry says so).
    def applied() -> bool:
        for b in cluster:
            reg = json.loads((b.log_dir / "__tierlog_topics.json").read_text())
            if reg["topics"][topic]["configs"].get("retention.ms") != "7200000":
                return False
        return True

    wait_for("the registry of every replica", applied, 30)
    bad = incremental("retention.mss", "1")
    with pytest.raises(Exception, match=r"retention\.mss"):
        admin.incremental_alter_configs([bad])[bad].result(30)


def test_a_produce_to_another_broker_names_the_leader_kip_951(cluster: Cluster) -> None:
    import datetime

    from tests.integration import wire

    topic = f"kip951-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, rf=2)
    replicas = list(cluster.partitions(topic)[0].replicas)
    # A broker without a replica: its answer does not depend on where leadership is now.
    other = next(b for i, b in cluster.brokers.items() if i not in replicas)
    cls = wire.request_class(0, 10)
    m = wire._module(cls)
    req = cls(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            m.TopicProduceData(
                name=topic,
                partition_data=(m.PartitionProduceData(index=0, records=wire.one_record(b"x")),),
            ),
        ),
    )
    c = wire.WireClient(other.bootstrap)
    try:
        resp = c.call(req)
    finally:
        c.close()
    (p,) = resp.responses[0].partition_responses
    assert int(p.error_code) == 6  # NOT_LEADER_OR_FOLLOWER, retriable
    leader = int(p.current_leader.leader_id)
    assert leader in replicas
    assert int(p.current_leader.leader_epoch) >= 0
    endpoints = {int(e.node_id): int(e.port) for e in resp.node_endpoints}
    assert endpoints == {leader: cluster.brokers[leader].port}


def test_deleting_and_growing_topics_reach_every_broker(cluster: Cluster) -> None:
    from confluent_kafka.admin import NewPartitions

    topic = f"life-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=2, rf=3)
    admin = cluster.admin()
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(30)
    cluster.wait_healthy(topic, 5, 3)
    wait_for(
        "every broker hosting the new partitions",
        lambda: all((b.log_dir / f"{topic}-{p}").is_dir() for b in cluster for p in range(5)),
        30,
    )
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)

    def gone_everywhere() -> bool:
        return all(not list(b.log_dir.glob(f"{topic}-*")) for b in cluster) and (
            topic not in cluster.admin().list_topics(timeout=5).topics
        )

    wait_for(f"{topic} deleted on every broker", gone_everywhere, 60)
    # The name can be used again: a new topic, with a new id.
    cluster.create_topic(topic, partitions=1, rf=3)
    acked = _produce(cluster.bootstrap, topic, [b"again"], 1)
    assert acked[b"again"] == (0, 0)


def test_dynamic_broker_configs_live_in_zookeeper_and_reach_every_broker(
    cluster: Cluster,
) -> None:
    """The cluster-wide default written through one broker is in force on every broker
    (each watches /config/brokers/<default>); a broker's own config reaches only it; both
    are in ZooKeeper as Kafka's ZooKeeper mode keeps them, with change notifications."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
    from kazoo.client import KazooClient

    from tests.integration import wire

    ids = sorted(cluster.brokers)
    first, second = cluster.brokers[ids[0]], cluster.brokers[ids[1]]
    # The default ("") over the wire: librdkafka refuses a BROKER resource named "".
    cls = wire.request_class(44, 1)
    m = wire._module(cls)
    c = wire.WireClient(first.bootstrap)
    try:
        r = c.call(cls(
            resources=(m.AlterConfigsResource(resource_type=4, resource_name="", configs=(
                m.AlterableConfig(name="log.retention.ms", config_operation=0,
                                  value="5400000"),
            )),),
            validate_only=False,
        ))  # fmt: skip
    finally:
        c.close()
    assert r.responses[0].error_code == 0, r.responses[0].error_message
    # The second broker's own log.cleaner.backoff.ms, through confluent-kafka (sent to it).
    entry = ConfigEntry(
        "log.cleaner.backoff.ms", "1234", incremental_operation=AlterConfigOpType.SET
    )
    res = ConfigResource(ConfigResource.Type.BROKER, str(ids[1]), incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.incremental_alter_configs([res])[res].result(30)

    def described(b: BrokerProcess, broker_id: int) -> dict:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        r = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        return a.describe_configs([r])[r].result(30)

    default_source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    for i in ids:
        b = cluster.brokers[i]
        wait_for(
            f"the default on broker {i}",
            lambda b=b, i=i: described(b, i)["log.retention.ms"].source == default_source,
            30,
        )
        backoff = described(b, i)["log.cleaner.backoff.ms"]
        if i == ids[1]:
            assert (backoff.value, backoff.source) == (
                "1234",
                ConfigSource.DYNAMIC_BROKER_CONFIG.value,
            )
        else:
            assert backoff.source != ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert described(second, ids[1])["log.retention.ms"].value == "5400000"

    hosts, _, chroot = cluster.zk_connect.partition("/")
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    try:
        default, _ = zk.get(f"/{chroot}/config/brokers/<default>")
        own, _ = zk.get(f"/{chroot}/config/brokers/{ids[1]}")
        changes = [
            json.loads(zk.get(f"/{chroot}/config/changes/{n}")[0])
            for n in zk.get_children(f"/{chroot}/config/changes")
        ]
    finally:
        zk.stop()
        zk.close()
    assert json.loads(default) == {"version": 1, "config": {"log.retention.ms": "5400000"}}
    assert json.loads(own) == {"version": 1, "config": {"log.cleaner.backoff.ms": "1234"}}
    paths = {ch["entity_path"] for ch in changes}
    assert {"brokers/<default>", f"brokers/{ids[1]}"} <= paths

    # A restarted broker reads both from ZooKeeper before it starts its parts.
    second.restart()
    after = described(second, ids[1])
    assert (after["log.retention.ms"].value, after["log.retention.ms"].source) == (
        "5400000",
        default_source,
    )
    assert after["log.cleaner.backoff.ms"].value == "1234"
    assert "dynamic broker configs: " in second.log_since_start()


def _lone_cluster_broker(
    zk: ZooKeeperProcess, tmp_path: Path, connection_timeout_ms: int
) -> BrokerProcess:
    """Broker 1 alone in a cluster of its own chroot on ``zk`` (a test that kills it)."""
    (tmp_path / "b").mkdir()
    return BrokerProcess(
        tmp_path / "b",
        f"zookeeper.connect={zk.connect_string}/lone-{uuid.uuid4().hex}",
        "broker.id=1",
        f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
        f"zookeeper.connection.timeout.ms={connection_timeout_ms}",
    )


def test_a_broker_whose_zookeeper_is_gone_stops_within_the_connection_timeout(
    own_zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    """SIGTERM with ZooKeeper dead: the controlled shutdown gives up after
    ``zookeeper.connection.timeout.ms``, the controller does not wait again to resign, and
    the broker exits 0. It took four times the timeout: every ZooKeeper request waited for
    its answer, then again for the connection, and the resignation was one more request."""
    import time

    timeout_ms = 3000
    b = _lone_cluster_broker(own_zookeeper, tmp_path, timeout_ms)
    b.start()
    try:
        # elected just after the start line: wait, so the resignation path is the one taken
        wait_for("the controller", lambda: "is the controller" in b.log_since_start(), 30)
        own_zookeeper.kill()
        started = time.monotonic()
        code = b.stop(timeout=60)
        took = time.monotonic() - started
    finally:
        if b.alive():
            b.stop(sig=signal.SIGKILL)
    log = b.log_since_start()
    assert code == 0, log[-3000:]
    assert "controlled shutdown failed, shutting down anyway: no connection to ZooKeeper" in log
    assert "not resigning as controller: no connection to ZooKeeper" in log
    assert "tierlog broker stopped cleanly" in log
    # 4.4 s on a quiet machine; before, 12 s and more (twice the timeout a request), or never
    assert timeout_ms / 1000 <= took < timeout_ms / 1000 + 6.0, f"stopped in {took:.1f} s"


def test_a_broker_serves_while_zookeeper_is_away(
    own_zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    """ZooKeeper away, nothing waits for it on the event loop:

    * a cluster broker claims its producer id block ahead of need, in a thread, so a new
      idempotent producer still gets its id and writes. Before, the claim was a ZooKeeper
      request on the event loop at the first InitProducerId: each one froze the broker for
      zookeeper.connection.timeout.ms and failed, and the producer's records timed out;
    * an AlterConfigs writes ZooKeeper in a thread: the broker answers others meanwhile,
      and the alter gets the failure in its resource's result (it froze the broker, then
      failed the whole request as UNKNOWN_SERVER_ERROR without a reason)."""
    import time

    b = _lone_cluster_broker(own_zookeeper, tmp_path, 3000)
    b.start()
    try:
        wait_for("the block", lambda: "claimed producer id block" in b.log_since_start(), 30)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("away", 1, 1)])["away"].result(30)
        own_zookeeper.kill()
        acked: list[int] = []
        errors: list[str] = []

        def done(err: object, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked.append(msg.offset())

        p = _producer(b.bootstrap, **{"message.timeout.ms": 20_000})
        started = time.monotonic()
        for i in range(100):
            p.produce("away", f"v{i}".encode(), on_delivery=done)
        assert p.flush(30) == 0
        took = time.monotonic() - started
        assert not errors, errors[:3]
        assert acked == list(range(100))
        assert took < 10.0, f"took {took:.1f} s"

        res = ConfigResource(
            ConfigResource.Type.TOPIC,
            "away",
            incremental_configs=[
                ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        started = time.monotonic()
        altering = admin.incremental_alter_configs([res], request_timeout=30)[res]
        answered = []
        other = AdminClient({"bootstrap.servers": b.bootstrap})  # a connection of its own
        while not altering.done():
            t0 = time.monotonic()
            other.list_topics("away", timeout=5)
            answered.append(time.monotonic() - t0)
            time.sleep(0.2)
        with pytest.raises(KafkaException, match="no connection to ZooKeeper"):
            altering.result()
        assert 3.0 <= time.monotonic() - started < 15.0
        assert len(answered) >= 5 and max(answered) < 1.0, answered
    finally:
        b.stop(sig=signal.SIGKILL)
