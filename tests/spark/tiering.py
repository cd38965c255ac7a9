"""Tiering for the Spark tests, done offline the way the broker's RemoteLogManager does it.

The broker does not tier segments yet (its RemoteLogManager is being built), and clients can
neither create nor write ``__remote_log_metadata``. So, with the broker STOPPED,
:func:`tier_rolled_segments` does what the copy task does, with tiered storage's own parts:
each rolled segment of a topic is uploaded by
:class:`~tierlog.tiered.storage.PyArrowRemoteStorageManager` (data object + one indexes
object), and Kafka's metadata records (COPY_SEGMENT_STARTED, then COPY_SEGMENT_FINISHED) are
appended to ``__remote_log_metadata`` in the broker's log dir, at the partition Kafka's
partitioner picks. The local segments stay (local retention has not deleted them yet), so
the same offsets can be read through the broker too — which is what the tests compare.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.records import build_batch, iter_headers
from tierlog.tiered import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    metadata_partition_for,
)
from tierlog.tiered.metadata_serde import serialize
from tierlog.tiered.storage import LogSegmentData, PyArrowRemoteStorageManager

METADATA_PARTITIONS = 3


def segment_metadata(
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    topic_id: uuid.UUID | None = None,
    size: int = 1000,
    max_timestamp: int = 0,
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(topic_id or uuid.UUID(int=7), topic, partition)
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(tip, uuid.uuid4()),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=max_timestamp,
        broker_id=0,
        event_timestamp_ms=int(time.time() * 1000),
        segment_size_in_bytes=size,
        segment_leader_epochs={0: start},
        state=state,
    )


def tier_rolled_segments(
    log_dir: Path,
    topic: str,
    rsm_config: dict[str, str],
    *,
    max_segments: int | None = None,
    fraction: float = 1.0,
) -> list[RemoteLogSegmentMetadata]:
    """Upload the rolled segments of every partition of ``topic`` (the broker must be stopped):
    all of them, the first ``max_segments``, or the oldest ``fraction`` of each partition's
    segments. Returns their metadata (state COPY_SEGMENT_FINISHED).
    """
    rsm = PyArrowRemoteStorageManager.from_config(rsm_config)
    lm = LogManager([log_dir], LogConfig(), node_id=0)
    lm.startup()
    out = []
    try:
        info = lm.topic(topic)
        assert info is not None, f"no topic {topic} in {log_dir}"
        if lm.topic(REMOTE_LOG_METADATA_TOPIC_NAME) is None:
            lm.create_topic(REMOTE_LOG_METADATA_TOPIC_NAME, METADATA_PARTITIONS, {})
        meta_info = lm.topic(REMOTE_LOG_METADATA_TOPIC_NAME)
        assert meta_info is not None
        empty_snapshot = log_dir / "empty.snapshot"
        empty_snapshot.write_bytes(b"")
        for partition in range(info.num_partitions):
            tip = TopicIdPartition(info.topic_id, topic, partition)
            pdir = log_dir / f"{topic}-{partition}"
            files = sorted(pdir.glob("*.log"))
            rolled = files[:-1]  # the last one is the active segment: never tiered
            if max_segments is not None:
                rolled = rolled[:max_segments]
            rolled = rolled[: min(len(rolled), round(len(files) * fraction))]
            mp = metadata_partition_for(tip, meta_info.num_partitions)
            meta_log = lm.get_log(REMOTE_LOG_METADATA_TOPIC_NAME, mp)
            assert meta_log is not None
            for seg in rolled:
                data = seg.read_bytes()
                headers = list(iter_headers(data))
                if not headers:
                    continue
                stem = seg.with_suffix("")
                txn = stem.with_suffix(".txnindex")
                md = RemoteLogSegmentMetadata(
                    remote_log_segment_id=RemoteLogSegmentId(tip, uuid.uuid4()),
                    start_offset=int(seg.stem),
                    end_offset=headers[-1].last_offset,
                    max_timestamp_ms=max(h.max_timestamp for h in headers),
                    broker_id=0,
                    event_timestamp_ms=int(time.time() * 1000),
                    segment_size_in_bytes=len(data),
                    segment_leader_epochs={0: int(seg.stem)},
                    txn_idx_empty=not (txn.exists() and txn.stat().st_size),
                )
                snapshot = stem.with_suffix(".snapshot")
                rsm.copy_log_segment_data(
                    md,
                    LogSegmentData(
                        log_segment=seg,
                        offset_index=stem.with_suffix(".index"),
                        time_index=stem.with_suffix(".timeindex"),
                        transaction_index=None if md.txn_idx_empty else txn,
                        producer_snapshot_index=snapshot if snapshot.exists() else empty_snapshot,
                        leader_epoch_index=b"",
                    ),
                )
                finished = RemoteLogSegmentMetadataUpdate(
                    remote_log_segment_id=md.remote_log_segment_id,
                    event_timestamp_ms=int(time.time() * 1000),
                    custom_metadata=None,
                    state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                    broker_id=0,
                )
                now = int(time.time() * 1000)
                for event in (md, finished):
                    meta_log.append(build_batch([(now, None, serialize(event))]))
                out.append(md.create_with_updates(finished))
    finally:
        lm.shutdown()
    return out
