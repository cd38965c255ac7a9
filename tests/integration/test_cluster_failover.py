"""Failures of a replicated cluster (issue 9, "What must be shown"): three real ``tierlog serve``
processes on a real ZooKeeper, real clients, real signals, and a TCP proxy in front of each
broker's inter-broker listener (:class:`~tests.integration.cluster_support.LinkProxy`) that cuts
followers off their leader as a network partition would.

The cluster is shared by the tests of this module (each uses its own topics); a test that
kills, stops or cuts a broker restores it and waits for every ISR it touched to be full again
before it ends. Every wait is for a state (a leader elected, the ISR full, logs identical); the
deadlines only bound a failure.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from tests import real_parts
from tests.integration import wire
from tests.integration.cluster_support import (
    LAG_TIME_MAX_MS,
    SESSION_TIMEOUT_MS,
    Cluster,
    fetcher_id,
    wait_for,
)
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = pytest.mark.cluster

#: A leader elected after its predecessor's session expired (or its ISR removal).
FAILOVER_S = SESSION_TIMEOUT_MS / 1000 + 30


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("failover"),
        f"{zookeeper.connect_string}/failover-{uuid.uuid4().hex}",
        3,
        "min.insync.replicas=2",
        "default.replication.factor=3",
        "offsets.topic.replication.factor=3",
        # The preferred leaders come back only when a test asks (it chooses its victims).
        "auto.leader.rebalance.enable=false",
        links=True,
    )
    c.start()
    try:
        yield c
    finally:
        for b in c:
            if b.alive() and b.proc is not None:
                os.kill(b.proc.pid, signal.SIGCONT)  # a failed split-brain test left it stopped
        c.stop()


# --------------------------------------------------------------------------- helpers


def _topic(cluster: Cluster, prefix: str, partitions: int = 1, assignment: Any = None) -> str:
    """A new RF 3 topic (``assignment``: replicas per partition, the first preferred)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    if assignment is not None:
        new = NewTopic(name, len(assignment), replica_assignment=assignment)
        partitions = len(assignment)
    else:
        new = NewTopic(name, partitions, 3)
    admin.create_topics([new], operation_timeout=30)[name].result(30)
    cluster.wait_healthy(name, partitions, 3)
    return name


def _new_leader(cluster: Cluster, topic: str, partition: int, old: int) -> int:
    def elected() -> int | None:
        lead = cluster.leader(topic, partition)
        return lead if lead not in (-1, old) else None

    return wait_for(f"{topic}-{partition}: a leader other than {old}", elected, FAILOVER_S)


def _isr(cluster: Cluster, topic: str, partition: int) -> set[int]:
    """The ISR as ZooKeeper has it (what the controller decides on)."""
    return set(cluster.zk_state(cluster.zk_connect, topic, partition)["isr"])


def _read_partition(cluster: Cluster, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """Every record of a partition up to its high watermark: (offset, value)."""
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 4 << 20,
        }
    )
    try:
        end = wait_for(
            "the high watermark",
            lambda: c.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)[1],
            60,
        )
        c.assign([TopicPartition(topic, partition, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 120
        while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    got.append((m.offset(), m.value()))
        assert got[-1][0] == end - 1 if got else end == 0, f"read {len(got)} of {end}"
        return got
    finally:
        c.close()


def _log_bytes(cluster: Cluster, topic: str, partition: int) -> dict[int, bytes]:
    out = {}
    for i, b in cluster.brokers.items():
        d = b.log_dir / f"{topic}-{partition}"
        out[i] = b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))
    return out


def _assert_replicas_identical(cluster: Cluster, topic: str, partitions: int) -> None:
    """Every replica's log of every partition holds the same bytes (waited for: a follower
    may be one fetch behind)."""

    def same() -> bool:
        return all(len(set(_log_bytes(cluster, topic, p).values())) == 1 for p in range(partitions))

    try:
        wait_for(f"{topic}: every replica's log identical", same, 60)
    except AssertionError:
        sizes = {p: {b: len(v) for b, v in _log_bytes(cluster, topic, p).items()}
                 for p in range(partitions)}  # fmt: skip
        raise AssertionError(f"{topic}: replicas differ, .log sizes {sizes}") from None


def _producer(cluster: Cluster, **conf: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "socket.timeout.ms": 10_000,
            "message.timeout.ms": 300_000,
            "topic.metadata.refresh.interval.ms": 1000,
            **conf,
        }
    )


def _produce_sync(cluster: Cluster, topic: str, values: list[bytes], **conf: Any) -> list[Any]:
    """Produce and flush; [(error or None, partition, offset, value)] per record."""
    out: list[Any] = []
    p = _producer(cluster, **conf)
    for v in values:
        p.produce(
            topic,
            v,
            partition=0,
            on_delivery=lambda e, m: out.append(
                (e, m.partition(), m.offset(), m.value())  # type: ignore[union-attr]
            ),
        )
    assert p.flush(120) == 0
    return out


class BackgroundProducer:
    """A confluent-kafka producer in a thread, producing numbered records to every partition
    round-robin as fast as the cluster takes them, until :meth:`stop`."""

    def __init__(self, cluster: Cluster, topic: str, partitions: int, **conf: Any) -> None:
        self.topic = topic
        self.partitions = partitions
        self.producer = _producer(cluster, **conf)
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.errors: list[KafkaError] = []
        self.failed: list[bytes] = []
        self.sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="producer")
        self._thread.start()

    def _done(self, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            if err is None:
                self.acked[msg.value()] = (msg.partition(), msg.offset())
            else:
                self.errors.append(err)
                self.failed.append(msg.value())

    def _run(self) -> None:
        p = self.producer
        i = 0
        while not self._stop.is_set():
            with self._lock:
                retry, self.failed = self.failed, []
            for v in retry:  # a retriable failure: the test produces the record again
                self._send(v, int(v.split(b"-")[1]) % self.partitions)
            try:
                self._send(f"r-{i:08d}".encode(), i % self.partitions)
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        self.sent = i

    def _send(self, v: bytes, partition: int) -> None:
        self.producer.produce(self.topic, v, partition=partition, on_delivery=self._done)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert self.producer.flush(5) >= 0
            with self._lock:
                retry, self.failed = self.failed, []
            if not retry and len(self.producer) == 0:
                break
            for v in retry:
                self._send(v, int(v.split(b"-")[1]) % self.partitions)
        assert len(self.producer) == 0, f"{len(self.producer)} records never acknowledged"


_RETRIABLE = frozenset(
    {
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,  # NOT_LEADER_OR_FOLLOWER (6)
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError._TRANSPORT,
        KafkaError._MSG_TIMED_OUT,
    }
)


def _check_read_back(
    cluster: Cluster, topic: str, partitions: int, acked: dict[bytes, tuple[int, int]]
) -> None:
    """Every acknowledged record is in the log once, at its acknowledged offset; within a
    partition, the records are in the order they were produced."""
    for p in range(partitions):
        records = _read_partition(cluster, topic, p)
        offsets = [o for o, _ in records]
        assert offsets == list(range(len(records))), f"{topic}-{p}: gaps"
        values = [v for _, v in records]
        assert len(set(values)) == len(values), f"{topic}-{p}: duplicates"
        seqs = [int(v.split(b"-")[1]) for v in values]
        assert seqs == sorted(seqs), f"{topic}-{p}: out of order"
        at = dict((v, o) for o, v in records)
        for v, (part, off) in acked.items():
            if part == p:
                assert at.get(v) == off, f"{v!r} acked at {topic}-{p}@{off}, log has {at.get(v)}"


def _restart(cluster: Cluster, broker: int) -> None:
    cluster.brokers[broker].start()


# --------------------------------------------------------------------------- 1. SIGKILL x10


def test_leaders_sigkilled_ten_times_under_full_load_lose_no_acknowledged_record(
    cluster: Cluster,
) -> None:
    """An idempotent acks=all producer at full speed; the leader of one partition after
    another is SIGKILLed (the controller among them when it leads), a new leader elected, the
    victim restarted and the ISR healed, ten times: every acknowledged record is read back
    once, in order, at its offset, the producer saw no error, every replica is identical."""
    partitions = 3
    topic = _topic(cluster, "chaos", partitions)
    conf = {"enable.idempotence": True, "queue.buffering.max.messages": 20_000}
    prod = BackgroundProducer(cluster, topic, partitions, **conf)
    try:
        for round_ in range(10):
            p = round_ % partitions
            before = prod.acked_count()
            wait_for("acks flowing", lambda b=before: prod.acked_count() > b + 100, 60)
            old = cluster.leader(topic, p)
            cluster.brokers[old].kill()
            _new_leader(cluster, topic, p, old)
            _restart(cluster, old)
            cluster.wait_healthy(topic, partitions, 3, timeout=90)
        before = prod.acked_count()
        wait_for("acks flowing after the last round", lambda: prod.acked_count() > before + 100)
    finally:
        prod.stop()
    assert not prod.errors, prod.errors[:5]
    assert prod.acked_count() >= 1000
    _check_read_back(cluster, topic, partitions, prod.acked)
    cluster.wait_healthy(topic, partitions, 3)
    _assert_replicas_identical(cluster, topic, partitions)


# --------------------------------------------------------------------------- 2. SIGTERM


def test_controlled_shutdown_of_each_broker_under_load_loses_nothing(cluster: Cluster) -> None:
    """SIGTERM each broker in turn (controlled shutdown moves its leaderships first) and
    restart it, while a producer without retries of its own (every error reaches the test)
    writes acks=all: every error is retriable, every record is eventually acknowledged, and
    none is lost."""
    partitions = 3
    topic = _topic(cluster, "cs-load", partitions)
    prod = BackgroundProducer(
        cluster, topic, partitions, **{"enable.idempotence": False, "retries": 0,
                                       "message.timeout.ms": 30_000}
    )  # fmt: skip
    try:
        for b in sorted(cluster.brokers):
            before = prod.acked_count()
            wait_for("acks flowing", lambda b0=before: prod.acked_count() > b0 + 100, 60)
            broker = cluster.brokers[b]
            assert broker.stop(signal.SIGTERM) == 0
            assert "leadership moved" in broker.log_since_start()
            _restart(cluster, b)
            cluster.wait_healthy(topic, partitions, 3, timeout=90)
        before = prod.acked_count()
        wait_for("acks flowing after the last round", lambda: prod.acked_count() > before + 100)
    finally:
        prod.stop()
    # confluent-kafka's KafkaError.retriable() is False for every delivery report: the
    # retriable ones are Kafka's RetriableException codes, and the client's own transport
    # errors (the connection closed with the request in flight: outcome unknown).
    fatal = [e for e in prod.errors if e.code() not in _RETRIABLE]
    assert not fatal, fatal[:5]
    # Nothing lost: each acknowledged record at its offset (a record the test produced again
    # after a retriable error may be there twice: the first attempt may have been written).
    for p in range(partitions):
        at = {v: o for o, v in _read_partition(cluster, topic, p)}
        for v, (part, off) in prod.acked.items():
            if part == p:
                assert at.get(v) is not None, f"{v!r} acked at {p}@{off} is lost"
    _assert_replicas_identical(cluster, topic, partitions)


# --------------------------------------------------------------------------- 3. a cut follower


def _produce_request(topic: str, value: bytes, acks: int) -> Any:
    """A Produce v9 of one record to partition 0."""
    cls = wire.request_class(0, 9)
    m = importlib.import_module(cls.__module__)
    req = cls(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=20),
        topic_data=(
            m.TopicProduceData(
                name=topic,
                partition_data=(m.PartitionProduceData(index=0, records=wire.one_record(value)),),
            ),
        ),
    )
    return req


def test_a_follower_cut_off_leaves_the_isr_and_rejoins_when_healed(cluster: Cluster) -> None:
    leader, f1, f2 = 1, 2, 3
    topic = _topic(cluster, "cut", assignment=[[leader, f1, f2]])
    assert cluster.leader(topic, 0) == leader
    link = cluster.links[leader]
    try:
        cut_at = time.monotonic()
        link.cut(fetcher_id(f2))
        # A write the cut follower cannot fetch (an idle follower at the leader's log end
        # offset is caught up, as in Kafka: only a lagging one leaves the ISR).
        assert _produce_sync(cluster, topic, [b"lag-2"], acks=1)[0][0] is None
        wait_for("the cut follower leaves the ISR", lambda: _isr(cluster, topic, 0) == {1, 2}, 60)
        # Out of the ISR only after replica.lag.time.max.ms without catching up.
        assert time.monotonic() - cut_at >= LAG_TIME_MAX_MS / 1000 * 0.9
        # Two in the ISR = min.insync.replicas: acks=all writes go on.
        out = _produce_sync(cluster, topic, [f"two-{i}".encode() for i in range(200)])
        assert [e for e, *_ in out if e is not None] == []
        # One left: acks=all is refused, NOT_ENOUGH_REPLICAS.
        link.cut(fetcher_id(f1))
        assert _produce_sync(cluster, topic, [b"lag-1"], acks=1)[0][0] is None
        wait_for("the ISR is the leader alone", lambda: _isr(cluster, topic, 0) == {leader}, 60)
        wait_for(
            "the leader knows its ISR",
            lambda: list(cluster.partitions(topic)[0].isrs) == [leader],
        )
        refused = _produce_sync(
            cluster, topic, [b"alone"],
            **{"retries": 0, "message.timeout.ms": 10_000, "enable.idempotence": False},
        )  # fmt: skip
        assert refused[0][0] is not None
        assert refused[0][0].code() == KafkaError.NOT_ENOUGH_REPLICAS, refused
        # acks=1 still works on the leader alone.
        one = _produce_sync(cluster, topic, [b"acks1"], acks=1)
        assert one[0][0] is None
    finally:
        link.heal()
    cluster.wait_healthy(topic, 1, 3)
    out = _produce_sync(cluster, topic, [f"healed-{i}".encode() for i in range(100)])
    assert [e for e, *_ in out if e is not None] == []
    values = [v for _, v in _read_partition(cluster, topic, 0)]
    assert b"alone" not in values
    assert values[-1] == b"healed-99"
    _assert_replicas_identical(cluster, topic, 1)


# --------------------------------------------------------------------------- 4. split brain


def test_a_leader_stopped_past_its_session_acknowledges_nothing_and_truncates(
    cluster: Cluster,
) -> None:
    """SIGSTOP the leader past the ZooKeeper session timeout: another leader is elected and
    acks=all writes go on there. An acks=all Produce sent straight to the stopped broker,
    resumed, must not succeed; the old leader truncates to the new leader's log."""
    old = 2
    topic = _topic(cluster, "zombie", assignment=[[old, 3, 1]])
    assert cluster.leader(topic, 0) == old
    first = _produce_sync(cluster, topic, [f"before-{i}".encode() for i in range(100)])
    assert all(e is None for e, *_ in first)
    victim = cluster.brokers[old]
    assert victim.proc is not None
    os.kill(victim.proc.pid, signal.SIGSTOP)
    resumed = False
    try:
        new = _new_leader(cluster, topic, 0, old)
        after = _produce_sync(cluster, topic, [f"after-{i}".encode() for i in range(100)])
        assert all(e is None for e, *_ in after), after[:3]
        assert {p for _, p, _, _ in after} == {0}
        # A client pinned to the old leader: the request waits in its socket.
        req = _produce_request(topic, b"zombie", acks=-1)
        c = wire.WireClient(victim.bootstrap, timeout=60)
        cid = c.send(req)
        os.kill(victim.proc.pid, signal.SIGCONT)
        resumed = True
        got, resp = c.recv(0, 9)
        c.close()
        assert got == cid
        code = resp.responses[0].partition_responses[0].error_code
        assert code != 0, "the deposed leader acknowledged an acks=all write"
    finally:
        if not resumed:
            os.kill(victim.proc.pid, signal.SIGCONT)
    cluster.wait_healthy(topic, 1, 3, timeout=90)
    assert cluster.leader(topic, 0) == new
    values = [v for _, v in _read_partition(cluster, topic, 0)]
    assert b"zombie" not in values
    assert values == [v for *_, v in first] + [v for *_, v in after]
    _assert_replicas_identical(cluster, topic, 1)


# --------------------------------------------------------------------------- 5. divergence


def test_an_unreplicated_suffix_of_a_dead_leader_is_truncated_everywhere(
    cluster: Cluster,
) -> None:
    """acks=1 writes on a leader whose followers are cut off, the leader SIGKILLed before it
    could replicate them, a new leader elected and written to, the old one restarted: every
    replica's log is byte-identical and the unreplicated suffix is gone."""
    old, a, b = 3, 1, 2
    topic = _topic(cluster, "diverge", assignment=[[old, a, b]])
    assert cluster.leader(topic, 0) == old
    base = _produce_sync(cluster, topic, [f"base-{i}".encode() for i in range(50)])
    assert all(e is None for e, *_ in base)
    cluster.wait_healthy(topic, 1, 3)
    link = cluster.links[old]
    try:
        link.cut(fetcher_id(a), fetcher_id(b))
        lost = _produce_sync(
            cluster, topic, [f"lost-{i}".encode() for i in range(20)],
            acks=1, **{"enable.idempotence": False},
        )  # fmt: skip
        assert all(e is None for e, *_ in lost), lost[:3]
        # The followers still in the ISR (killed well within replica.lag.time.max.ms): a
        # clean election is possible.
        assert _isr(cluster, topic, 0) == {old, a, b}
        cluster.brokers[old].kill()
    finally:
        link.heal()
    new = _new_leader(cluster, topic, 0, old)
    assert new in (a, b)
    after = _produce_sync(cluster, topic, [f"after-{i}".encode() for i in range(30)])
    assert all(e is None for e, *_ in after)
    # The new leader wrote at the offsets the lost records had on the old one.
    assert min(o for _, _, o, _ in after) == 50
    _restart(cluster, old)
    cluster.wait_healthy(topic, 1, 3, timeout=90)
    values = [v for _, v in _read_partition(cluster, topic, 0)]
    assert values == [v for *_, v in base] + [v for *_, v in after]
    _assert_replicas_identical(cluster, topic, 1)


# --------------------------------------------------------------------------- 6. a group


def test_a_consumer_group_survives_the_death_of_its_coordinator(cluster: Cluster) -> None:
    """Three members of a group, their coordinator's broker SIGKILLed: the coordinator moves
    with the leadership of the group's ``__consumer_offsets`` partition, the group
    rebalances with every partition assigned again, and the offsets committed before are
    still there."""
    partitions = 6
    topic = _topic(cluster, "group", partitions)
    for p in range(partitions):
        out = _produce_sync_to(cluster, topic, p, [f"g{p}-{i}".encode() for i in range(20)])
        assert all(e is None for e, *_ in out)
    group = f"survivors-{uuid.uuid4().hex[:8]}"
    members = [
        Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        for _ in range(3)
    ]
    for m in members:
        m.subscribe([topic])
    consumed: dict[int, list[int]] = {p: [] for p in range(partitions)}

    def poll_all() -> None:
        for m in members:
            for msg in m.consume(100, 0.05):
                if msg.error() is None:
                    consumed[msg.partition()].append(msg.offset())

    def assigned_everywhere() -> bool:
        poll_all()
        got = [tp.partition for m in members for tp in m.assignment()]
        return sorted(got) == list(range(partitions)) and all(m.assignment() for m in members)

    try:
        wait_for("every partition assigned to the three members", assigned_everywhere, 90)
        wait_for("20 records of every partition", lambda: (poll_all(), all(
            len(v) >= 20 for v in consumed.values()))[1], 60)  # fmt: skip
        # Each member commits what it was given (synchronously: acknowledged by the ISR).
        for m in members:
            offsets = [TopicPartition(topic, tp.partition, 15) for tp in m.assignment()]
            m.commit(offsets=offsets, asynchronous=False)
        committed = _group_offsets(cluster, group, topic, partitions)
        assert committed == {p: 15 for p in range(partitions)}
        coordinator = _coordinator(cluster, group)
        cluster.brokers[coordinator].kill()
        try:
            wait_for(
                "a new coordinator",
                lambda: (lambda c: c if c not in (coordinator, -1) else None)(
                    _coordinator(cluster, group)
                ),
                FAILOVER_S,
            )
            # The members find it and the group is stable again with every partition.
            wait_for(
                "the group stable with every partition assigned",
                lambda: assigned_everywhere() and _group_state(cluster, group) == "Stable",
                90,
            )
            assert _group_offsets(cluster, group, topic, partitions) == committed
            # The group goes on: new records reach the members, commits still work.
            for p in range(partitions):
                _produce_sync_to(cluster, topic, p, [f"g{p}-late".encode()])
            wait_for("the new records", lambda: (poll_all(), all(
                max(v) >= 20 for v in consumed.values()))[1], 60)  # fmt: skip
            for m in members:
                offsets = [TopicPartition(topic, tp.partition, 21) for tp in m.assignment()]
                m.commit(offsets=offsets, asynchronous=False)
            assert _group_offsets(cluster, group, topic, partitions) == {
                p: 21 for p in range(partitions)
            }
        finally:
            _restart(cluster, coordinator)
    finally:
        for m in members:
            m.close()
    cluster.wait_healthy("__consumer_offsets", 6, 3, timeout=90)
    cluster.wait_healthy(topic, partitions, 3, timeout=90)


def _produce_sync_to(
    cluster: Cluster, topic: str, partition: int, values: list[bytes]
) -> list[Any]:
    out: list[Any] = []
    p = _producer(cluster)
    for v in values:
        p.produce(topic, v, partition=partition, on_delivery=lambda e, m: out.append((e, m)))
    assert p.flush(120) == 0
    return out


def _coordinator(cluster: Cluster, group: str) -> int:
    """The group's coordinator as a live broker answers FindCoordinator, over the raw wire:
    librdkafka (confluent-kafka 2.16.1) aborts the whole process when an AdminClient
    DescribeConsumerGroups times out against a coordinator that died ("rd_kafka_queue.h:
    rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed",
    reproduced outside the suite with two calls after the kill)."""
    return int(_wire_call(cluster, wire.request_class(10, 1)(key=group, key_type=0)).node_id)


def _group_state(cluster: Cluster, group: str) -> str:
    c = wire.WireClient(cluster.brokers[_coordinator(cluster, group)].bootstrap, timeout=10)
    try:
        return str(c.call(wire.request_class(15, 0)(groups=(group,))).groups[0].group_state)
    finally:
        c.close()


def _wire_call(cluster: Cluster, req: Any) -> Any:
    """``req`` answered without error by a live broker."""
    for b in cluster:
        if not b.alive():
            continue
        try:
            c = wire.WireClient(b.bootstrap, timeout=10)
        except OSError:
            continue
        try:
            resp = c.call(req)
        except OSError:
            continue
        finally:
            c.close()
        if getattr(resp, "error_code", 0) == 0:
            return resp
    raise RuntimeError(f"no live broker answered {type(req).__name__}")


def _group_offsets(cluster: Cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = cluster.admin()

    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = admin.list_consumer_group_offsets([req], request_timeout=10)[group].result(15)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


# --------------------------------------------------------------------------- 7. four clients


_JS = Path(__file__).parent / "js"


def test_four_clients_produce_and_consume_across_a_leader_failover(
    cluster: Cluster, tmp_path: Path
) -> None:
    """kafka-python, confluent-kafka, aiokafka and kafkajs (each in its own process:
    failover_client.py, js/failover_client.js) each produce half their records, the leader of
    their topics is SIGKILLed, the same producers write the other half (they must find the
    new leader), and each library's consumer reads them all back: once each, in order, at
    the acknowledged offsets."""
    if not (_JS / "node_modules" / "kafkajs").is_dir():
        real_parts.missing("kafkajs", f"npm ci --prefix {_JS} (make test does it)")
    victim = 1
    count = 100
    names = ["kafka-python", "confluent", "aiokafka", "kafkajs"]
    topics = {n: _topic(cluster, n, assignment=[[victim, 2, 3]]) for n in names}
    # The consumers need __consumer_offsets, which (as in Kafka) is created only with
    # offsets.topic.replication.factor live brokers: before the kill.
    wait_for("a group coordinator", lambda: _coordinator(cluster, "warm-up") >= 0, 60)
    cluster.wait_healthy("__consumer_offsets", 6, 3)
    go_file = tmp_path / "go"
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    procs: dict[str, subprocess.Popen[str]] = {}
    for n in names:
        args = [cluster.bootstrap, topics[n], str(count), str(go_file)]
        if n == "kafkajs":
            cmd = ["node", str(_JS / "failover_client.js"), *args]
        else:
            cmd = [sys.executable, "-m", "tests.integration.failover_client", n, *args]
        with open(tmp_path / f"{n}.stderr", "w") as err:
            procs[n] = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=root
            )
    real_parts.used("kafkajs", "kafkajs 2.2.4 (node)")
    results: dict[str, Any] = {}
    try:
        for n, proc in procs.items():
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line == "HALF", f"{n}: {line!r} {_tail(tmp_path / f'{n}.stderr')}"
        cluster.brokers[victim].kill()
        go_file.touch()
        for n in names:
            _new_leader(cluster, topics[n], 0, victim)
        deadline = time.monotonic() + 200
        for n, proc in procs.items():
            try:
                out, _ = proc.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"{n} did not finish: {_tail(tmp_path / f'{n}.stderr')}"
                ) from None
            assert proc.returncode == 0, f"{n}: {_tail(tmp_path / f'{n}.stderr')}"
            got = json.loads(out.strip().splitlines()[-1])
            results[n] = ([(v, o) for v, o in got["acked"]], [(o, v) for o, v in got["consumed"]])
    finally:
        go_file.touch()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        _restart(cluster, victim)
    for n, (acked, consumed) in results.items():
        assert [v for v, _ in acked] == [f"{n}-{i}" for i in range(count)], n
        assert [o for _, o in acked] == list(range(count)), f"{n}: acked offsets {acked}"
        assert consumed == [(o, v) for v, o in acked], f"{n}: read back {consumed[:5]}..."
    assert set(results) == set(names)
    for n in names:
        cluster.wait_healthy(topics[n], 1, 3, timeout=90)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _hw(cluster: Cluster, topic: str) -> int:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "hw"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1])
    finally:
        c.close()
