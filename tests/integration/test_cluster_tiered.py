"""Tiered storage across replicas (issue 10): three real ``tierlog serve`` processes on a real
ZooKeeper sharing one remote store (a local directory, and SeaweedFS), driven by real clients.

What is shown: the replicated ``__remote_log_metadata``; only leaders upload, and every replica
drops its tiered local segments; a replica whose disk is wiped rejoins the ISR from the
leader's local log start, never fetching tiered data (the bytes it fetched, its
``ReplicationBytesInPerSec`` for the topic, are at most the leader's local part and a
segment), and so does a new replica of a reassigned partition; after the leader is SIGKILLed
the new leader serves the whole partition from offset 0, byte-identical, and keeps tiering
from where the old one stopped; a deleted topic's remote data goes, on every broker, and so
does a topic's once ``remote.storage.enable`` is turned off (KIP-950).

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
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.broker_process import BrokerProcess
from tests.integration.cluster_support import Cluster, wait_for
from tests.integration.metrics_support import scrape, value
from tests.integration.tiered_support import (
    SEGMENT_BYTES,
    TIERED_BROKER,
    RemoteStore,
    list_offsets,
    make_store,
    remote_ls,
    tiered_topic_configs,
    verify,
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
        metrics=True,  # the bytes a replica fetched: ReplicationBytesInPerSec
    )
    for b in c.brokers.values():
        # Fault hooks in the remote storage manager, acting only while their file exists.
        b.module = "tests.integration.tiered_launcher"
        b.env = {"TIERLOG_TEST_FAULTS": str(_faults(b))}
        _faults(b).mkdir(exist_ok=True)
    c.start()
    try:
        yield c, store
    finally:
        c.stop()
        store.close()


def _faults(b: BrokerProcess) -> Path:
    """The broker's fault-hook directory (tests/integration/tiered_launcher.py)."""
    return b.workdir / "faults"


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


def _consume_all(bootstrap: str, topic: str, n: int, offset: int = 0) -> list[tuple[int, bytes]]:
    """(offset, value) of the first ``n`` records of partition 0, read from ``offset``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, 0, offset)])
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


def _replication_bytes_in(c: Cluster, broker_id: int, topic: str) -> float:
    """The record bytes broker ``broker_id``'s replica fetchers received for ``topic`` since
    it started."""
    samples = scrape(c.brokers[broker_id])
    return value(
        samples, "kafka_server_BrokerTopicMetrics_ReplicationBytesInPerSec_total", topic=topic
    )


def _assert_fetched_only_the_local_part(
    fetched: float, held: int, leader_local: int, partition_bytes: int
) -> None:
    """A new or rebuilt replica ``fetched`` (record bytes received) at most the leader's
    local part and a segment, and at least what it ``held`` (read before ``fetched``: it holds
    only fetched bytes). The bound is well below the partition's size, so fetching the tiered
    part would fail it."""
    assert leader_local + SEGMENT_BYTES < partition_bytes // 2, (leader_local, partition_bytes)
    assert 0 < held <= fetched <= leader_local + SEGMENT_BYTES, (fetched, held, leader_local)


def _remote_segment_keys(store: RemoteStore, topic: str) -> list[str]:
    return [k for k in store.list_keys() if k.startswith(f"{topic}-") and k.endswith(".log")]


def _tiered_topic(c: Cluster, topic: str) -> None:
    c.create_topic(
        topic,
        1,
        3,
        **tiered_topic_configs(local_retention_bytes=str(LOCAL_BYTES)),
    )


def _wait_tiered_everywhere(
    c: Cluster, topic: str, end: int, replicas: tuple[int, ...] = (1, 2, 3)
) -> int:
    """Until the leader has tiered all but its last few segments and every replica dropped
    its tiered local segments; the highest offset in remote storage."""

    def settled() -> int | None:
        tiered = _list_offset(c.bootstrap, topic, -5)
        if tiered < end - 4 * (SEGMENT_BYTES // RECORD):
            return None
        for b in replicas:
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
    c.brokers[follower].start()  # a new process: its counters start at 0
    c.wait_healthy(topic, 1, 3)
    leader_local = _local_segments(c, leader, topic)
    rebuilt = _local_segments(c, follower, topic)
    # Rebuilt from remote metadata: its log starts within the leader's local part ...
    assert rebuilt and rebuilt[0] >= leader_local[0] - SEGMENT_BYTES // RECORD, (
        rebuilt,
        leader_local,
    )
    # ... and, back in the ISR, it has fetched about what the leader holds locally, not the
    # partition's 400 KB.
    held = _local_bytes(c, follower, topic)
    fetched = _replication_bytes_in(c, follower, topic)
    _assert_fetched_only_the_local_part(
        fetched, held, _local_bytes(c, leader, topic), len(values) * RECORD
    )
    log = c.brokers[follower].log_since_start()
    assert any(f"{topic}-0 rebuilt from remote segment" in line for line in log.splitlines()), log[
        -3000:
    ]
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
        # Metadata lists a departed broker for a few seconds more (never as a leader; see
        # tierlog.cluster.metadata_cache), and kafka-python's admin sends ListOffsets'
        # Metadata to any listed broker without trying another: wait until it is unlisted.
        wait_for(f"Metadata to stop listing broker {old}", lambda: old not in c.live_ids(), 30)
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


def test_disabling_remote_storage_deletes_the_remote_data_on_every_broker(
    env: tuple[Cluster, RemoteStore],
) -> None:
    """KIP-950 in a cluster: turning ``remote.storage.enable`` off is refused without
    ``remote.log.delete.on.disable=true`` (INVALID_CONFIG, the data stays); with it, the
    remote data goes (deleted by the active controller's broker) and every replica's log
    starts at its local log start, which a consumer from the earliest offset then reads."""
    c, store = env
    topic = f"disabled-{uuid.uuid4().hex[:8]}"
    _tiered_topic(c, topic)
    values = _values("x", 300)
    _produce(c.bootstrap, topic, values)
    _wait_tiered_everywhere(c, topic, 300)
    keys = _remote_segment_keys(store, topic)
    assert keys
    admin = c.admin()  # kept alive until the results are in

    def alter(**configs: str) -> None:
        entries = [
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ]
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
        for f in admin.incremental_alter_configs([res]).values():
            f.result(30)

    with pytest.raises(KafkaException) as refused:
        alter(remote_storage_enable="false")
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "delete.on.disable" in refused.value.args[0].str()
    assert _remote_segment_keys(store, topic) == keys
    alter(remote_storage_enable="false", remote_log_delete_on_disable="true")
    wait_for(
        f"{topic}: remote objects gone",
        lambda: not any(k.startswith(f"{topic}-") for k in store.list_keys()),
        120,
    )

    def starts_locally() -> int | None:
        earliest = _list_offset(c.bootstrap, topic, -2)
        local = _list_offset(c.bootstrap, topic, -4)
        return earliest if earliest == local > 0 else None

    earliest = wait_for(f"{topic}: the log start at the local log start", starts_locally, 60)
    # Every replica: its log starts at its first local segment, none below it.
    for b in c.brokers:
        segments = _local_segments(c, b, topic)
        assert segments and segments[0] > 0, (b, segments)
    assert (
        _consume_all(c.bootstrap, topic, 300 - earliest, offset=earliest)
        == list(enumerate(values))[earliest:]
    )


def test_leader_killed_mid_upload_leaves_no_orphan(env: tuple[Cluster, RemoteStore]) -> None:
    """The leader dies between a segment's two objects (COPY_SEGMENT_STARTED published, the
    ``.log`` object written, the ``.indexes`` not): once the cluster converges, the new leader
    has deleted the dangling copy, every object in the store belongs to a finished segment, and
    ``tierlog remote verify`` is clean."""
    c, store = env
    topic = f"midcopy-{uuid.uuid4().hex[:8]}"
    _tiered_topic(c, topic)
    leader = c.leader(topic, 0)
    hang = _faults(c.brokers[leader]) / "hang-indexes-upload"
    hanging = _faults(c.brokers[leader]) / "hanging"
    hanging.unlink(missing_ok=True)
    hang.write_text("")
    values = _values("m", 300)
    try:
        _produce(c.bootstrap, topic, values)
        wait_for("the upload to hang", hanging.exists, 60)
        c.brokers[leader].stop(sig=signal.SIGKILL)
    finally:
        hang.unlink(missing_ok=True)
        hanging.unlink(missing_ok=True)
    try:
        wait_for("a new leader", lambda: c.leader(topic, 0) not in (leader, -1), 60)
        more = _values("n", 100)
        _produce(c.bootstrap, topic, more)
    finally:
        c.brokers[leader].start()
        c.wait_healthy(topic, 1, 3)
    _wait_tiered_everywhere(c, topic, 400)
    new = c.leader(topic, 0)

    def converged() -> bool:
        parts = remote_ls(c.brokers[new], topic, all_segments=True)
        segs = [p for p in parts if p["partition"] == 0 and p["current"]]
        states = {s["state"] for p in segs for s in p["segments"]}
        if states - {"COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_FINISHED"}:
            return False
        live = {
            obj
            for p in segs
            for s in p["segments"]
            if s["state"] == "COPY_SEGMENT_FINISHED"
            for obj in (s["log_object"], s["indexes_object"])
        }
        keys = [k for k in store.list_keys() if k.startswith(f"{topic}-")]
        return all(any(obj.endswith("/" + k) for obj in live) for k in keys)

    wait_for(f"{topic}: no dangling copy, no orphan object", converged, 120)
    rc, out = verify(c.brokers[new], topic)
    assert rc == 0, out
    assert _consume_all(c.bootstrap, topic, 400) == list(enumerate(values + more))


def test_consumer_reading_remote_data_crosses_a_leader_death(
    env: tuple[Cluster, RemoteStore],
) -> None:
    """A consumer in the middle of the remote part when the leader dies continues from the new
    leader: every offset exactly once, in order."""
    c, _store = env
    topic = f"reader-{uuid.uuid4().hex[:8]}"
    _tiered_topic(c, topic)
    values = _values("r", 400)
    _produce(c.bootstrap, topic, values)
    tiered = _wait_tiered_everywhere(c, topic, 400)
    consumer = Consumer(
        {
            "bootstrap.servers": c.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 4 * RECORD,  # a batch or two per fetch
            "message.max.bytes": 4 * RECORD,
            "fetch.max.bytes": 4 * RECORD,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    old = c.leader(topic, 0)
    try:

        def read(until: int) -> bool:
            for m in consumer.consume(10, timeout=1.0):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
            return len(got) >= until

        wait_for("the first remote records", lambda: read(tiered // 3), 60)
        assert got[-1][0] < tiered  # still in the remote part
        c.brokers[old].stop(sig=signal.SIGKILL)
        try:
            wait_for("the rest through the new leader", lambda: read(400), 180)
        finally:
            c.brokers[old].start()
    finally:
        consumer.close()
    c.wait_healthy(topic, 1, 3)
    assert got[:400] == list(enumerate(values))


def test_unclean_election_deletes_remote_segments_of_the_lost_epochs(
    env: tuple[Cluster, RemoteStore],
) -> None:
    """The leader writes and tiers data alone (its only follower shut down), then dies; the
    stale follower is elected uncleanly. The segments of offsets it never had are not in its
    leader epoch lineage: its expiration deletes them, and reads return its own history.

    The topic has two replicas (brokers 1 and 2) so that the metadata topic keeps an in-sync
    replica (broker 3) through all of it."""
    c, _store = env
    topic = f"unclean-{uuid.uuid4().hex[:8]}"
    leader, stale = 1, 2
    admin = c.admin()
    configs = tiered_topic_configs(
        local_retention_bytes=str(LOCAL_BYTES),
        unclean_leader_election_enable="true",
        min_insync_replicas="1",
    )
    admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[[leader, stale]], config=configs)],
        operation_timeout=30,
    )[topic].result(30)
    c.wait_healthy(topic, 1, 2)
    kept = _values("k", 200)
    _produce(c.bootstrap, topic, kept)
    _wait_tiered_everywhere(c, topic, 200, replicas=(leader, stale))
    c.brokers[stale].stop()  # controlled shutdown: out of the ISR at once
    try:
        wait_for(
            "the leader alone in the ISR",
            lambda: list(c.partitions(topic)[0].isrs) == [leader],
            60,
        )
        lost = _values("l", 300)
        _produce(c.bootstrap, topic, lost)
        wait_for(
            "the leader's solo data tiered",
            lambda: _list_offset(c.bootstrap, topic, -5) >= 400,
            120,
        )
        lost_segments = {
            s["segment_id"]
            for p in remote_ls(c.brokers[leader], topic)
            if p["partition"] == 0 and p["current"]
            for s in p["segments"]
            if s["end_offset"] >= 200
        }
        assert lost_segments
        c.brokers[leader].stop(sig=signal.SIGKILL)
        c.brokers[stale].start()
        wait_for(f"{stale} elected uncleanly", lambda: c.leader(topic, 0) == stale, 60)
        again = _values("a", 100)
        _produce(c.bootstrap, topic, again)

        def expired() -> bool:
            segs = [
                s
                for p in remote_ls(c.brokers[stale], topic, all_segments=True)
                if p["partition"] == 0 and p["current"]
                for s in p["segments"]
                if s["segment_id"] in lost_segments
            ]
            return all(s["state"] == "DELETE_SEGMENT_FINISHED" for s in segs)

        wait_for("the lost epochs' remote segments deleted", expired, 120)
        assert _consume_all(c.bootstrap, topic, 300) == list(enumerate(kept + again))
    finally:
        for b in c.brokers.values():
            if not b.alive():
                b.start()
    c.wait_healthy(topic, 1, 2)


def test_reassignment_of_a_tiered_partition_moves_only_its_local_part(
    env: tuple[Cluster, RemoteStore],
) -> None:
    """A tiered partition on brokers 1 and 2 moves to 1 and 3: broker 3 rebuilds its log from
    remote metadata and fetches only the leader's local part (the bytes it fetched, at most
    the local size and one segment), and the partition stays whole for readers."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition

    c, _store = env
    topic = f"moved-{uuid.uuid4().hex[:8]}"
    admin = c.admin()
    admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=1,
                replica_assignment=[[1, 2]],
                config=tiered_topic_configs(local_retention_bytes=str(LOCAL_BYTES)),
            )
        ],
        operation_timeout=30,
    )[topic].result(30)
    c.wait_healthy(topic, 1, 2)
    values = _values("v", 400)
    _produce(c.bootstrap, topic, values)
    _wait_tiered_everywhere(c, topic, 400, replicas=(1, 2))
    fetched_before = _replication_bytes_in(c, 3, topic)
    kp = KafkaAdminClient(bootstrap_servers=c.bootstrap)
    try:
        kp.alter_partition_reassignments({KTopicPartition(topic, 0): [1, 3]})

        def moved() -> bool:
            p = c.partitions(topic)[0]
            ongoing = kp.list_partition_reassignments([KTopicPartition(topic, 0)])
            return list(p.replicas) == [1, 3] and sorted(p.isrs) == [1, 3] and not ongoing

        wait_for("the reassignment to finish", moved, 120)
    finally:
        kp.close()
    leader = c.leader(topic, 0)
    # Never fetched below the leader's local part: its log starts far from 0 ...
    assert _local_segments(c, 3, topic)[0] > 0
    # ... and what it fetched is about what the leader holds locally.
    held = _local_bytes(c, 3, topic)
    fetched = _replication_bytes_in(c, 3, topic) - fetched_before
    _assert_fetched_only_the_local_part(
        fetched, held, _local_bytes(c, leader, topic), len(values) * RECORD
    )
    wait_for(
        "the leaving replica's copy deleted",
        lambda: not _partition_dir(c, 2, topic).exists(),
        60,
    )
    assert _consume_all(c.bootstrap, topic, 400) == list(enumerate(values))


def test_remote_ls_and_verify_over_the_wire(env: tuple[Cluster, RemoteStore]) -> None:
    """``tierlog remote ls/verify --bootstrap-server`` read the topic and its remote log
    metadata from the running cluster (no log dir at hand) and agree with the offline form
    run on a broker's own dirs; a dead address is a clear error and exit 3."""
    import json as json_
    import subprocess
    import sys

    c, _store = env
    topic = f"wire-{uuid.uuid4().hex[:8]}"
    _tiered_topic(c, topic)
    _produce(c.bootstrap, topic, _values("t", 300))
    _wait_tiered_everywhere(c, topic, 300)
    rsm = [o for o in c.brokers[1].overrides if o.startswith("rsm.config.")]
    args = [a for o in rsm for a in ("--override", o)]

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tierlog.cli", "remote", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=c.brokers[1].workdir.parent,  # not a broker's dir: nothing local to read
        )

    ls = cli("ls", topic, "--json", "--bootstrap-server", c.bootstrap, *args)
    assert ls.returncode == 0, ls.stderr
    assert f"reading broker {c.bootstrap}" in ls.stderr
    wire = [p for p in json_.loads(ls.stdout) if p["current"]]
    offline = [p for p in remote_ls(c.brokers[1], topic) if p["current"]]
    assert [s["segment_id"] for p in wire for s in p["segments"]] == [
        s["segment_id"] for p in offline for s in p["segments"]
    ]
    assert sum(len(p["segments"]) for p in wire) >= 8
    verify_ = cli("verify", topic, "--bootstrap-server", c.bootstrap, *args)
    assert verify_.returncode == 0, verify_.stdout + verify_.stderr
    dead = cli("ls", topic, "--bootstrap-server", "127.0.0.1:1", *args)
    assert dead.returncode == 3 and "cannot read from 127.0.0.1:1" in dead.stderr, dead.stderr
