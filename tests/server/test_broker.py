"""The broker in-process (event loop in a thread, listener on a free port), driven with raw
kio requests: the handler paths the real clients of tests/integration do not all reach."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from kio.index import load_request_schema

from tests.integration.wire import WireClient
from tierlog.records.default_records import build_batch
from tierlog.server.broker import Broker
from tierlog.server.kafka_config import KafkaConfig

MS = datetime.timedelta(milliseconds=100)


class Running:
    def __init__(self, tmp_path) -> None:
        self.config = KafkaConfig.from_props(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "log.dirs": str(tmp_path / "logs"),
                "offsets.topic.num.partitions": "2",
                "group.initial.rebalance.delay.ms": "0",
            }
        )
        self.broker = Broker(self.config)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)

            async def main() -> None:
                await self.broker.start()
                started.set()
                await self.broker._stopped.wait()
                await self.broker.shutdown()

            self.loop.run_until_complete(main())

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(30)
        self.bootstrap = f"127.0.0.1:{self.broker.bound[0][1]}"

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.broker.request_stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture(scope="module")
def running(tmp_path_factory) -> Iterator[Running]:
    r = Running(tmp_path_factory.mktemp("broker"))
    yield r
    r.stop()


@pytest.fixture
def client(running) -> Iterator[WireClient]:
    c = WireClient(running.bootstrap)
    yield c
    c.close()


def req(key: int, version: int, **fields):
    cls = load_request_schema(key, version)
    return cls, __import__(cls.__module__, fromlist=["x"])


def metadata(client: WireClient, *names: str, version: int = 12, auto: bool = True):
    cls, m = req(3, version)
    fields: dict = {}
    if version >= 10:
        fields["topics"] = tuple(m.MetadataRequestTopic(topic_id=None, name=n) for n in names)
    else:
        fields["topics"] = tuple(m.MetadataRequestTopic(name=n) for n in names)
    if version >= 4:
        fields["allow_auto_topic_creation"] = auto
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
    if version in (8, 9, 10):
        fields["include_cluster_authorized_operations"] = False
    return client.call(cls(**fields))


def produce(client: WireClient, topic: str, records: bytes, version: int = 9, acks: int = -1):
    cls, m = req(0, version)
    return client.call(
        cls(
            transactional_id=None,
            acks=acks,
            timeout=MS,
            topic_data=(
                m.TopicProduceData(
                    name=topic, partition_data=(m.PartitionProduceData(index=0, records=records),)
                ),
            ),
        )
    )


def batch(n: int = 2, **kw) -> bytes:
    return build_batch([(1_700_000_000_000 + i, None, b"v%d" % i) for i in range(n)], **kw)


@pytest.mark.parametrize("version", [0, 1, 4, 9, 10, 12, 13])
def test_metadata_auto_creates_with_ids_and_controller(client, version):
    name = f"meta-v{version}-{uuid.uuid4().hex[:6]}"
    resp = metadata(client, name, version=version)
    (t,) = resp.topics
    assert t.error_code == 0 and t.name == name and len(t.partitions) == 1
    assert t.partitions[0].leader_id == 0
    if version >= 10:
        assert t.topic_id is not None and t.topic_id.int != 0
    if version >= 2:
        assert resp.controller_id == 0 and len(resp.cluster_id) == 22


def test_metadata_without_auto_creation_and_bad_names(client):
    resp = metadata(client, "never-created", auto=False)
    assert resp.topics[0].error_code == 3
    resp = metadata(client, "bad/name")
    assert resp.topics[0].error_code == 17
    resp = metadata(client, "__consumer_offsets", auto=False)
    assert resp.topics[0].is_internal and len(resp.topics[0].partitions) == 2


def test_produce_fetch_by_topic_id_and_unknown_id(client):
    name = f"fid-{uuid.uuid4().hex[:6]}"
    topic_id = metadata(client, name).topics[0].topic_id
    assert produce(client, name, batch(3)).responses[0].partition_responses[0].base_offset == 0
    cls, m = req(1, 13)

    def fetch(tid):
        return client.call(
            cls(
                max_wait=MS,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=1,
                session_id=0,
                session_epoch=-1,
                forgotten_topics_data=(),
                topics=(
                    m.FetchTopic(
                        topic_id=tid,
                        partitions=(
                            m.FetchPartition(
                                partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                            ),
                        ),
                    ),
                ),
            )
        )

    part = fetch(topic_id).responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 3 and part.last_stable_offset == 3
    assert part.records and part.aborted_transactions == ()
    unknown = uuid.uuid4()
    r = fetch(unknown).responses[0]
    assert r.topic_id == unknown and r.partitions[0].error_code == 100


def test_incremental_fetch_for_an_unknown_session(client):
    cls, _ = req(1, 12)
    resp = client.call(
        cls(
            max_wait=MS,
            min_bytes=1,
            max_bytes=100,
            isolation_level=0,
            session_id=77,
            session_epoch=3,
            topics=(),
            forgotten_topics_data=(),
        )
    )
    assert resp.error_code == 70 and resp.session_id == 0


def test_produce_errors(client):
    name = f"perr-{uuid.uuid4().hex[:6]}"
    metadata(client, name)
    p = produce(client, name, batch(1), acks=2).responses[0].partition_responses[0]
    assert p.error_code == 21
    p = produce(client, "__consumer_offsets", batch(1)).responses[0].partition_responses[0]
    assert p.error_code == 17
    p = produce(client, "no-such-topic", batch(1)).responses[0].partition_responses[0]
    assert p.error_code == 3
    big = build_batch([(0, None, b"x" * 2_000_000)])
    p = produce(client, name, big).responses[0].partition_responses[0]
    assert p.error_code == 10


def test_idempotent_duplicate_gets_the_original_offset(client):
    name = f"idem-{uuid.uuid4().hex[:6]}"
    metadata(client, name)
    cls, _ = req(22, 4)
    init = client.call(
        cls(transactional_id=None, transaction_timeout=MS, producer_id=-1, producer_epoch=-1)
    )
    assert init.error_code == 0 and init.producer_epoch == 0
    pid = init.producer_id
    b0 = batch(2, producer_id=pid, producer_epoch=0, base_sequence=0)
    b1 = batch(2, producer_id=pid, producer_epoch=0, base_sequence=2)
    assert produce(client, name, b0).responses[0].partition_responses[0].base_offset == 0
    assert produce(client, name, b1).responses[0].partition_responses[0].base_offset == 2
    dup = produce(client, name, b0).responses[0].partition_responses[0]
    assert (dup.error_code, dup.base_offset) == (0, 0)
    gap = batch(1, producer_id=pid, producer_epoch=0, base_sequence=9)
    assert produce(client, name, gap).responses[0].partition_responses[0].error_code == 45
    # the next InitProducerId is a new id
    again = client.call(
        cls(transactional_id=None, transaction_timeout=MS, producer_id=pid, producer_epoch=0)
    )
    assert again.producer_id != pid


def test_transactional_init_producer_id_and_find_coordinator(client):
    cls, _ = req(10, 4)
    r = client.call(cls(key_type=1, coordinator_keys=("tx", "")))
    (tx, empty) = r.coordinators
    assert (tx.error_code, tx.node_id) == (0, 0)  # __transaction_state created on first use
    assert empty.error_code == 42
    r = client.call(cls(key_type=0, coordinator_keys=("g",)))
    assert r.coordinators[0].error_code == 0 and r.coordinators[0].node_id == 0
    cls, _ = req(22, 4)

    def init(txn_id, timeout=MS, pid=-1, epoch=-1):
        deadline = time.monotonic() + 30
        while True:  # COORDINATOR_LOAD_IN_PROGRESS while the new partitions load
            r = client.call(
                cls(
                    transactional_id=txn_id,
                    transaction_timeout=timeout,
                    producer_id=pid,
                    producer_epoch=epoch,
                )
            )
            if r.error_code != 14 or time.monotonic() > deadline:
                return r
            time.sleep(0.05)

    first = init("tx")
    assert (first.error_code, first.producer_epoch) == (0, 0)
    second = init("tx")
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    assert init("").error_code == 42
    assert init("tx", pid=first.producer_id).error_code == 42  # id without epoch
    assert init("tx", timeout=datetime.timedelta(hours=1)).error_code == 50
    # KIP-360 with a stale epoch: fenced
    assert init("tx", pid=first.producer_id, epoch=7).error_code == 90


def test_list_offsets_special_timestamps(client):
    name = f"lo-{uuid.uuid4().hex[:6]}"
    metadata(client, name)
    produce(client, name, build_batch([(1000, None, b"a"), (5000, None, b"b")]))
    produce(client, name, build_batch([(3000, None, b"c")]))
    cls, m = req(2, 8)

    def lookup(ts):
        r = client.call(
            cls(
                replica_id=-1,
                isolation_level=0,
                topics=(
                    m.ListOffsetsTopic(
                        name=name,
                        partitions=(m.ListOffsetsPartition(partition_index=0, timestamp=ts),),
                    ),
                ),
            )
        )
        p = r.topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp

    assert lookup(-1) == (0, 3, -1)
    assert lookup(-2) == (0, 0, -1)
    assert lookup(-3) == (0, 1, 5000)
    assert lookup(-4) == (0, 0, -1)
    assert lookup(2000) == (0, 1, 5000)
    assert lookup(9999) == (0, -1, -1)
    assert lookup(-7)[0] == 42


def test_describe_cluster_and_configs(client, running):
    cls, _ = req(60, 1)
    r = client.call(cls(include_cluster_authorized_operations=False, endpoint_type=1))
    assert r.controller_id == 0 and r.brokers[0].port == running.broker.bound[0][1]
    cls, m = req(32, 4)
    r = client.call(
        cls(
            resources=(
                m.DescribeConfigsResource(
                    resource_type=4, resource_name="0", configuration_keys=("num.partitions",)
                ),
            ),
            include_synonyms=True,
            include_documentation=True,
        )
    )
    (res,) = r.results
    assert res.error_code == 0 and [c.name for c in res.configs] == ["num.partitions"]
    assert res.configs[0].documentation


def test_delete_records_bounds(client):
    name = f"dr-{uuid.uuid4().hex[:6]}"
    metadata(client, name)
    produce(client, name, batch(5))
    cls, m = req(21, 2)

    def delete(offset):
        r = client.call(
            cls(
                timeout=MS,
                topics=(
                    m.DeleteRecordsTopic(
                        name=name,
                        partitions=(m.DeleteRecordsPartition(partition_index=0, offset=offset),),
                    ),
                ),
            )
        )
        p = r.topics[0].partitions[0]
        return p.error_code, p.low_watermark

    assert delete(2) == (0, 2)
    assert delete(99)[0] == 1
    assert delete(-1) == (0, 5)


def test_group_round_trip_over_the_wire(client):
    cls, m = req(11, 7)
    join = client.call(
        cls(
            group_id="wg",
            session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10),
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b"m"),),
        )
    )
    assert join.error_code == 79  # MEMBER_ID_REQUIRED (v4+)
    join = client.call(
        cls(
            group_id="wg",
            session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10),
            member_id=join.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b"m"),),
        )
    )
    assert join.error_code == 0 and join.leader == join.member_id
    cls, m = req(14, 5)
    sync = client.call(
        cls(
            group_id="wg",
            generation_id=join.generation_id,
            member_id=join.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(m.SyncGroupRequestAssignment(member_id=join.member_id, assignment=b"a"),),
        )
    )
    assert sync.error_code == 0 and sync.assignment == b"a"
    metadata(client, "x")  # auto-creates it: a commit to an unknown topic is refused
    cls, m = req(8, 8)
    commit = client.call(
        cls(
            group_id="wg",
            generation_id_or_member_epoch=join.generation_id,
            member_id=join.member_id,
            group_instance_id=None,
            topics=(
                m.OffsetCommitRequestTopic(
                    name="x",
                    partitions=(
                        m.OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=-1,
                            committed_leader_epoch=-1,
                            committed_metadata="md",
                        ),
                    ),
                ),
            ),
        )
    )
    assert commit.topics[0].partitions[0].error_code == 0
    cls, m = req(9, 8)
    fetched = client.call(
        cls(require_stable=False, groups=(m.OffsetFetchRequestGroup(group_id="wg", topics=None),))
    )
    p = fetched.groups[0].topics[0].partitions[0]
    assert (p.committed_offset, p.metadata) == (-1, "md")
    cls, _ = req(15, 5)
    d = client.call(cls(groups=("wg",), include_authorized_operations=False)).groups[0]
    assert d.group_state == "Stable" and d.members[0].member_assignment == b"a"
    cls, m = req(13, 5)
    left = client.call(
        cls(
            group_id="wg",
            members=(
                m.MemberIdentity(member_id=join.member_id, group_instance_id=None, reason=None),
            ),
        )
    )
    assert left.error_code == 0 and left.members[0].error_code == 0
    cls, _ = req(16, 5)
    groups = client.call(cls(states_filter=(), types_filter=())).groups
    assert ("wg", "Empty") in {(g.group_id, g.group_state) for g in groups}
    cls, _ = req(42, 2)
    assert client.call(cls(groups_names=("wg",))).results[0].error_code == 0


def test_acks0_produce_gets_no_answer_and_a_failure_closes_the_connection(running):
    c = WireClient(running.bootstrap)
    try:
        name = f"a0-{uuid.uuid4().hex[:6]}"
        metadata(c, name)
        cls, m = req(0, 9)

        def acks0(topic: str) -> None:
            c.send(
                cls(
                    transactional_id=None,
                    acks=0,
                    timeout=MS,
                    topic_data=(
                        m.TopicProduceData(
                            name=topic,
                            partition_data=(m.PartitionProduceData(index=0, records=batch(1)),),
                        ),
                    ),
                )
            )

        acks0(name)  # no response; the next answer on the wire is Metadata's
        assert metadata(c, name).topics[0].name == name
        acks0("no-such-topic")
        assert c.closed_by_peer()
    finally:
        c.close()
