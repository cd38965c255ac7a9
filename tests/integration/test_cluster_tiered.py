"""Tiered storage across replicas (issue 10): three real ``tierlog serve`` processes on a real
ZooKeeper sharing one remote store (a local directory, and SeaweedFS), driven by real clients.

What is shown: the replicated ``__remote_log_metadata``; only leaders upload, and every replica
drops its tiered local segments; a replica whose disk is wiped rejoins the ISR from the
leader's local log start, never fetching tiered data; after the leader is SIGKILLed the new
leader serves the whole partition from offset 0, byte-identical, and keeps tiering from where
the old one stopped; a deleted topic's remote data goes, on every broker.

The cluster is shared by the tests of a store kind (each uses its own topics); a test that
kills or wipes a broker starts it again and waits for the ISRs to heal before it ends.
"""

from __future__ import annotations

import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.cluster_support import Cluster, wait_for
from tests.integration.tiered_support import (
    SEGMENT_BYTES,
    TIERED_BROKER,
    RemoteStore,
    list_offsets,
    make_store,
    tiered_topic_configs,
)
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = pytest.mark.cluster

RECORD = 1000  # bytes per value: ~32 records per segment
#: local.retention.bytes: the leader keeps about two segments locally.
LOCAL_BYTES = 2 * SEGMENT_BYTES


@pytest.fixture(
    scope="module", params=["file", pytest.param("s3", marks=pytest.mark.s3)], name="env"
)
def env_fixture(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeperProcess,
) -> Iterator[tuple[Cluster, RemoteStore]]:
    kind = request.param
    sw = request.getfixturevalue("seaweedfs") if kind == "s3" else None
    root = tmp_path_factory.mktemp(f"tiered-cluster-{kind}")
    store = make_store(kind, root, sw)
    c = Cluster(
        root,
        f"{zookeeper.connect_string}/tiered-{uuid.uuid4().hex}",
        3,
        *TIERED_BROKER,
        *store.overrides(),
        "min.insync.replicas=2",
        "default.replication.factor=3",
    )
    c.start()
    try:
        yield c, store
    finally:
        c.stop()
        store.close()


def _values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:06d}-".encode().ljust(RECORD, b"x") for i in range(n)]


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    """acks=all, idempotent, to partition 0; the offsets, in order."""
    offsets: list[int] = []
    errors: list[str] = []

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets.append(msg.offset())

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": SEGMENT_BYTES // 4,  # a batch must fit a segment
            "message.timeout.ms": 120_000,
        }
    )
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=done)
        p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:5]
    return offsets


def _consume_all(bootstrap: str, topic: str, n: int) -> list[tuple[int, bytes]]:
    """(offset, value) of the first ``n`` records of partition 0, read from offset 0."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    try:

        def more() -> bool:
            for m in c.consume(500, timeout=1.0):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.value()))
            return len(out) >= n

        wait_for(f"{n} records of {topic}", more, 120)
    finally:
        c.close()
    return out[:n]


def _list_offset(bootstrap: str, topic: str, spec: int) -> int:
    """ListOffsets of partition 0 with a special timestamp (-2 earliest, -4 earliest local,
    -5 latest tiered), through kafka-python."""
    return list_offsets(bootstrap, topic, spec)


def _partition_dir(c: Cluster, broker_id: int, topic: str) -> Path:
    return c.brokers[broker_id].log_dir / f"{topic}-0"


def _local_segments(c: Cluster, broker_id: int, topic: str) -> list[int]:
    d = _partition_dir(c, broker_id, topic)
    if not d.is_dir():
        return []
    return sorted(int(p.stem) for p in d.glob("*.log"))


def _local_bytes(c: Cluster, broker_id: int, topic: str) -> int:
    d = _partition_dir(c, broker_id, topic)
    return sum(p.stat().st_size for p in d.glob("*.log")) if d.is_dir() else 0


def _remote_segment_keys(store: RemoteStore, topic: str) -> list[str]:
    return [k for k in store.list_keys() if k.startswith(f"{topic}-") and k.endswith(".log")]


def _tiered_topic(c: Cluster, topic: str) -> None:
    c.create_topic(
        topic,
        1,
        3,
        **tiered_topic_configs(local_retention_bytes=str(LOCAL_BYTES)),
    )


def _wait_tiered_everywhere(c: Cluster, topic: str, end: int) -> int:
    """Until the leader has tiered all but its last few segments and every replica dropped
    its tiered local segments; the highest offset in remote storage."""

    def settled() -> int | None:
        tiered = _list_offset(c.bootstrap, topic, -5)
        if tiered < end - 4 * (SEGMENT_BYTES // RECORD):
            return None
        for b in c.brokers:
            segments = _local_segments(c, b, topic)
            if not segments or segments[0] == 0 or len(segments) > 4:
                return None
        return tiered

    return wait_for(f"{topic} tiered and dropped locally on every replica", settled, 120)


def test_replicas_drop_tiered_segments_and_reads_span_both_tiers(
    env: tuple[Cluster, RemoteStore],
) -> None:
    c, store = env
    topic = f"tiered-{uuid.uuid4().hex[:8]}"
    _tiered_topic(c, topic)
    values = _values("a", 400)
    offsets = _produce(c.bootstrap, topic, values)
    assert offsets == list(range(400))
    _wait_tiered_everywhere(c, topic, 400)
    # Uploaded once, by the leader: one object per segment, never one per replica.
    keys = _remote_segment_keys(store, topic)
    starts = [k.rsplit("/", 1)[-1].split("-", 1)[0] for k in keys]
    assert len(starts) == len(set(starts)) >= 8, keys
    assert _list_offset(c.bootstrap, topic, -2) == 0
    assert _consume_all(c.bootstrap, topic, 400) == list(enumerate(values))


def test_wiped_follower_rejoins_from_the_leaders_local_start(
    env: tuple[Cluster, RemoteStore],
) -> None:
    c, _store = env
    topic = f"wiped-{uuid.uuid4().hex[:8]}"
    _tiered_topic(c, topic)
    values = _values("w", 400)
    _produce(c.bootstrap, topic, values)
    _wait_tiered_everywhere(c, topic, 400)
    leader = c.leader(topic, 0)
    follower = next(b for b in c.brokers if b != leader)
    c.brokers[follower].stop()
    shutil.rmtree(_partition_dir(c, follower, topic))
    c.brokers[follower].start()
    c.wait_healthy(topic, 1, 3)
    leader_local = _local_segments(c, leader, topic)
    rebuilt = _local_segments(c, follower, topic)
    # Rebuilt from remote metadata: its log starts within the leader's local part, and it
    # holds about what the leader holds locally, not the partition's 400 KB.
    assert rebuilt and rebuilt[0] >= leader_local[0] - SEGMENT_BYTES // RECORD, (
        rebuilt,
        leader_local,
    )
    assert _local_bytes(c, follower, topic) <= _local_bytes(c, leader, topic) + SEGMENT_BYTES
    log = c.brokers[follower].log_since_start()
    assert any(
        f"{topic}-0 rebuilt from remote segment" in line for line in log.splitlines()
    ), log[-3000:]
    # It can lead: make it the only choice and read everything through it.
    for b in c.brokers:
        if b != follower:
            c.brokers[b].stop()
    try:
        wait_for(f"{follower} leads {topic}", lambda: c.leader(topic, 0) == follower, 60)
        assert _consume_all(c.brokers[follower].bootstrap, topic, 400) == list(enumerate(values))
    finally:
        for b in c.brokers:
            if not c.brokers[b].alive():
                c.brokers[b].start()
        c.wait_healthy(topic, 1, 3)


def test_new_leader_after_sigkill_serves_everything_and_keeps_tiering(
    env: tuple[Cluster, RemoteStore],
) -> None:
    c, store = env
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    _tiered_topic(c, topic)
    first = _values("f", 300)
    _produce(c.bootstrap, topic, first)
    tiered_before = _wait_tiered_everywhere(c, topic, 300)
    old = c.leader(topic, 0)
    c.brokers[old].stop(sig=signal.SIGKILL)
    try:
        new = wait_for(
            "a new leader",
            lambda: (lead := c.leader(topic, 0)) not in (old, -1) and lead,
            60,
        )
        # The whole partition from offset 0 through the new leader, byte for byte.
        assert _consume_all(c.bootstrap, topic, 300) == list(enumerate(first))
        segments_before = len(_remote_segment_keys(store, topic))
        second = _values("s", 300)
        assert _produce(c.bootstrap, topic, second) == list(range(300, 600))

        def tiering_went_on() -> bool:
            return _list_offset(c.bootstrap, topic, -5) >= 600 - 4 * (SEGMENT_BYTES // RECORD)

        wait_for(f"broker {new} tiers the new segments", tiering_went_on, 120)
        assert len(_remote_segment_keys(store, topic)) > segments_before
        assert _list_offset(c.bootstrap, topic, -5) > tiered_before
    finally:
        c.brokers[old].start()
        c.wait_healthy(topic, 1, 3)
    assert _consume_all(c.bootstrap, topic, 600) == list(enumerate(first + second))


def test_deleted_topic_leaves_nothing_remote_or_cached(
    env: tuple[Cluster, RemoteStore],
) -> None:
    c, store = env
    topic = f"deleted-{uuid.uuid4().hex[:8]}"
    _tiered_topic(c, topic)
    _produce(c.bootstrap, topic, _values("d", 300))
    _wait_tiered_everywhere(c, topic, 300)
    assert _remote_segment_keys(store, topic)
    admin = c.admin()  # kept alive until the result is in
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)

    def gone() -> bool:
        if any(k.startswith(f"{topic}-") for k in store.list_keys()):
            return False
        for b in c.brokers.values():
            caches = b.log_dir / "remote-log-metadata-cache"
            if caches.is_dir() and any(p.name.startswith(f"{topic}-") for p in caches.iterdir()):
                return False
            if (b.log_dir / f"{topic}-0").exists():
                return False
        return True

    wait_for(f"{topic}: remote objects, caches and local logs gone", gone, 120)
