"""Tiering for the Spark tests and the Spark bench: done by the broker itself.

The broker runs with tiered storage on (:func:`tiering_overrides`), the topic has
``remote.storage.enable=true`` and ``local.retention.bytes=1``, and the broker's
RemoteLogManager copies every rolled segment to remote storage and then deletes the local
copy. Size-based retention never deletes (or rolls) the active segment, so the tail stays local
only. (A time-based local retention would roll and tier the active segment too: every record
here carries an old timestamp.) :func:`wait_until_tiered` waits until that is done (every
partition's local log is down to its active segment and the remote segments reach up to it)
and returns the remote segments (from ``__remote_log_metadata``, as the data source itself
lists them).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from tierlog.spark.options import parse_source_options
from tierlog.spark.planning import Planner
from tierlog.tiered import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

#: Topic configs that make the broker tier a topic and keep only its active segment locally.
TIERED_TOPIC_CONFIGS = {"remote.storage.enable": "true", "local.retention.bytes": "1"}


def tiering_overrides(rsm_config: Mapping[str, str]) -> list[str]:
    """``tierlog serve --override`` values: tiered storage on ``rsm_config``, tasks run often."""
    return [
        "remote.log.storage.system.enable=true",
        "remote.log.manager.task.interval.ms=200",
        "log.retention.check.interval.ms=200",
        *(f"rsm.config.{k}={v}" for k, v in rsm_config.items()),
    ]


def wait_until_tiered(
    bootstrap: str,
    topic: str,
    log_dir: Path,
    rsm_config: Mapping[str, str],
    *,
    timeout: float = 120.0,
) -> list[RemoteLogSegmentMetadata]:
    """Wait until the broker has tiered every rolled segment of ``topic`` and deleted its local
    copies; returns the remote segments of all partitions, in (partition, offset) order.

    Raises:
        AssertionError: not done within ``timeout`` seconds.
    """
    options = parse_source_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            **{f"tierlog.remote.{k}": v for k, v in rsm_config.items()},
        },
        streaming=False,
    )
    deadline = time.monotonic() + timeout
    state: dict[int, tuple[int, int]] = {}
    with Planner(options) as planner:
        while True:
            tps = planner.partitions()
            layouts = planner.layouts(tps, with_remote=True)
            done = bool(tps)
            for tp in tps:
                local = sorted((log_dir / f"{tp[0]}-{tp[1]}").glob("*.log"))
                active_base = int(local[-1].stem) if local else -1
                segs = layouts[tp].remote_segments
                tiered_to = segs[-1].end_offset + 1 if segs else 0
                state[tp[1]] = (len(local), tiered_to)
                done = done and len(local) == 1 and tiered_to == active_base
            if done:
                return [s for tp in sorted(layouts) for s in layouts[tp].remote_segments]
            assert time.monotonic() < deadline, (
                f"{topic} not tiered within {timeout} s: (local segments, tiered up to) per "
                f"partition {state}"
            )
            time.sleep(0.2)


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
    """Metadata of a remote segment for planning tests (no objects behind it)."""
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
