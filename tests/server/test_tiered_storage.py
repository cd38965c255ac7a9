"""The broker's tiered storage parts without a broker process: the metadata topic on real
logs (publish, read back, the topic-based metadata manager over it across a restart), the
pending deletions file, the read-ahead offset arithmetic and the broker's remote config keys."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.records.default_records import build_batch
from tierlog.server.kafka_config import KafkaConfig
from tierlog.server.remote_log_metadata_publisher import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    LogMetadataPublisher,
    ensure_remote_log_metadata_topic,
)
from tierlog.server.remote_read_ahead import next_fetch_offset
from tierlog.server.tiered_storage import (
    REASON_DELETE,
    REASON_DISABLE,
    PendingDeletion,
    PendingDeletions,
    default_rsm_config,
)
from tierlog.tiered import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicBasedRemoteLogMetadataManager,
    TopicIdPartition,
)

TP = TopicIdPartition(uuid.UUID("6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5b"), "orders", 0)


def _manager(tmp_path: Path) -> LogManager:
    lm = LogManager([tmp_path / "logs"], LogConfig(), remote_log_storage_system_enable=True)
    lm.startup()
    return lm


def _segment(start: int, end: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(TP, uuid.uuid4()),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=1000 + end,
        broker_id=0,
        event_timestamp_ms=1,
        segment_size_in_bytes=100,
        segment_leader_epochs={0: start},
    )


def test_the_metadata_topic_is_created_once_with_infinite_retention(tmp_path):
    lm = _manager(tmp_path)
    try:
        assert ensure_remote_log_metadata_topic(lm, 3) == 3
        info = lm.topic(REMOTE_LOG_METADATA_TOPIC_NAME)
        assert info is not None
        assert info.config.retention_ms == -1 and info.config.retention_size == -1
        assert not info.config.remote_storage_enable
        # the partition count is fixed once created
        assert ensure_remote_log_metadata_topic(lm, 7) == 3
    finally:
        lm.shutdown()


def test_publish_is_durable_and_read_back_in_order(tmp_path):
    lm = _manager(tmp_path)
    woken: list[int] = []
    try:
        ensure_remote_log_metadata_topic(lm, 2)
        pub = LogMetadataPublisher(lm, on_append=woken.append)
        assert [pub.publish(1, b"v%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
        lg = lm.get_log(REMOTE_LOG_METADATA_TOPIC_NAME, 1)
        assert lg is not None
        assert lg.recovery_point == lg.log_end_offset == lg.high_watermark == 5  # fsynced
        assert list(pub.read_from(1, 2)) == [(2, b"v2"), (3, b"v3"), (4, b"v4")]
        assert list(pub.read_from(1, 5)) == []
        assert list(pub.read_from(0, 0)) == []
        assert woken == [1] * 5
    finally:
        lm.shutdown()


def test_topic_based_manager_over_the_broker_logs_survives_a_restart(tmp_path):
    cache_dir = tmp_path / "logs" / "remote-log-metadata-cache"
    lm = _manager(tmp_path)
    ensure_remote_log_metadata_topic(lm, 3)
    pub = LogMetadataPublisher(lm)
    rlmm = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=3, cache_dir=cache_dir)
    rlmm.on_partition_leadership_changes({TP}, set())
    first, second = _segment(0, 99), _segment(100, 199)
    for md in (first, second):
        rlmm.add_remote_log_segment_metadata(md)
        rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, 2, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0
            )
        )
    assert rlmm.highest_offset_for_epoch(TP, 0) == 199
    rlmm.close()  # writes the file cache
    lm.shutdown()

    lm = _manager(tmp_path)
    try:
        pub = LogMetadataPublisher(lm)
        rlmm = TopicBasedRemoteLogMetadataManager(
            pub, num_metadata_partitions=3, cache_dir=cache_dir
        )
        rlmm.on_partition_leadership_changes({TP}, set())
        assert pub.records_read == 0  # loaded from the file, nothing re-read
        found = rlmm.remote_log_segment_metadata(TP, 0, 150)
        assert found is not None and found.remote_log_segment_id == second.remote_log_segment_id
        rlmm.close()
        # A corrupt file: the topic is read again, same answers.
        (path,) = cache_dir.glob("orders-0-*")
        path.write_bytes(b"garbage")
        pub = LogMetadataPublisher(lm)
        rlmm = TopicBasedRemoteLogMetadataManager(
            pub, num_metadata_partitions=3, cache_dir=cache_dir
        )
        rlmm.on_partition_leadership_changes({TP}, set())
        assert pub.records_read == 4
        assert rlmm.highest_offset_for_epoch(TP, 0) == 199
        rlmm.close()
    finally:
        lm.shutdown()


def test_pending_deletions_file_round_trip(tmp_path):
    path = tmp_path / "remote-log-pending-deletions.json"
    a = PendingDeletion("orders", TP.topic_id, (0, 1, 2), REASON_DELETE)
    b = PendingDeletion("audit", uuid.uuid4(), (0,), REASON_DISABLE)
    p = PendingDeletions(path)
    p.add(a)
    p.add(b)
    p.add(a)  # idempotent
    assert PendingDeletions(path).entries() == [a, b]
    p.remove(a)
    assert PendingDeletions(path).entries() == [b]
    assert b.topic_id_partitions() == [TopicIdPartition(b.topic_id, "audit", 0)]
    path.write_text("{not json")
    assert PendingDeletions(path).entries() == []  # unreadable: logged, not fatal


def test_next_fetch_offset_skips_a_trailing_partial_batch():
    one = build_batch([(1, b"k", b"v")] * 3, base_offset=10)
    two = build_batch([(1, b"k", b"v")] * 2, base_offset=13)
    assert next_fetch_offset(one + two) == 15
    assert next_fetch_offset(one + two[:20]) == 13
    assert next_fetch_offset(two[:20]) is None
    assert next_fetch_offset(b"") is None


def test_default_remote_storage_uri_and_retry_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_rsm_config({}) == {"uri": (tmp_path / "data" / "remote").as_uri()}
    assert default_rsm_config({"uri": "s3://b/p"}) == {"uri": "s3://b/p"}
    c = KafkaConfig.from_props(
        {
            "remote.log.manager.task.retry.backoff.ms": "100",
            "remote.log.manager.task.retry.backoff.max.ms": "2000",
            "remote.log.manager.task.retry.jitter": "0.1",
        }
    )
    from tierlog.tiered.remote_log_manager import RemoteLogManagerConfig

    rc = RemoteLogManagerConfig.from_broker_config(c)
    assert (
        rc.remote_log_manager_task_retry_backoff_ms,
        rc.remote_log_manager_task_retry_backoff_max_ms,
        rc.remote_log_manager_task_retry_jitter,
    ) == (100, 2000, 0.1)


@pytest.mark.parametrize("target", ["orders", "orders-0"])
def test_remote_cli_on_a_broker_dir_without_remote_data(tmp_path, monkeypatch, target, capsys):
    from tierlog.cli import main

    monkeypatch.chdir(tmp_path)
    lm = _manager(tmp_path)
    lm.create_topic("orders", 1, {})
    lm.shutdown()
    args = ["--override", f"log.dirs={tmp_path / 'logs'}"]
    assert main(["remote", "ls", target, *args]) == 0
    assert "orders-0" in capsys.readouterr().out
    assert main(["remote", "verify", target, *args]) == 0
    assert "OK: 0 finished segments" in capsys.readouterr().out
    assert main(["remote", "ls", "nope", *args]) == 2
