"""ListOffsets (2): offsets by timestamp and the special timestamps.

-1 LATEST: the high watermark (the last stable offset for read_committed);
-2 EARLIEST: the log start offset (remote data included);
-3 MAX_TIMESTAMP (v7+): the offset of the record with the largest timestamp;
-4 EARLIEST_LOCAL (v8+): the local log start offset;
-5 LATEST_TIERED (v9+): the highest offset in remote storage (-1 when none);
t >= 0: the first offset whose timestamp is >= t, or offset -1 / timestamp -1 when none. With
tiered storage the remote segments are searched first (their time indexes, on a worker
thread: remote reads block), then the local log (Kafka's ``fetchOffsetByTimestamp``); a
remote storage failure answers KAFKA_STORAGE_ERROR (56, retriable) for that partition.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    ApiError,
    InvalidRequest,
    KafkaStorageError,
    RemoteStorageError,
)
from tierlog.security.acl_checks import topic_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.fetch_path import READ_COMMITTED
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.cluster.partition import Partition
    from tierlog.log.log import Log
    from tierlog.server.kafka_apis import KafkaApis, Request
    from tierlog.tiered.remote_log_manager import RemoteLogManager

log = logging.getLogger(__name__)

LIST_OFFSETS = 2
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


def lookup_offset(lg: Log, timestamp: int, isolation_level: int) -> tuple[int, int]:
    """(timestamp, offset) that ListOffsets returns for ``timestamp`` on ``lg``."""
    if timestamp == LATEST_TIMESTAMP:
        end = lg.last_stable_offset if isolation_level == READ_COMMITTED else lg.high_watermark
        return -1, int(end)
    if timestamp == EARLIEST_TIMESTAMP:
        return -1, int(lg.log_start_offset)
    if timestamp == EARLIEST_LOCAL_TIMESTAMP:
        return -1, int(lg.local_log_start_offset)
    if timestamp == LATEST_TIERED_TIMESTAMP:
        # The highest offset in remote storage (-1: nothing tiered, or no tiered storage).
        found = lg.offset_for_timestamp(LATEST_TIERED_TIMESTAMP)
        return -1, -1 if found is None else int(found.offset)
    if timestamp < LATEST_TIERED_TIMESTAMP:
        raise InvalidRequest(f"unknown special timestamp {timestamp}")
    return _limited(lg, _offset_for_timestamp(lg, timestamp), isolation_level)


def _limited(lg: Log, found: tuple[int, int] | None, isolation_level: int) -> tuple[int, int]:
    if found is None:
        return -1, -1
    ts, offset = found
    limit = lg.last_stable_offset if isolation_level == READ_COMMITTED else lg.high_watermark
    if offset >= limit:
        return -1, -1
    return ts, offset


def _needs_remote_search(rlm: RemoteLogManager | None, part: Partition, timestamp: int) -> bool:
    return (
        rlm is not None
        and timestamp >= 0
        and part.topic_id is not None
        and part.log.remote_log_enabled
        and part.log.log_start_offset < part.log.local_log_start_offset
    )


def lookup_offset_tiered(
    rlm: RemoteLogManager, part: Partition, timestamp: int, isolation_level: int
) -> tuple[int, int]:
    """:func:`lookup_offset` for a timestamp of a tiered partition: remote segments first,
    then the local log. Blocking (remote reads).

    Raises:
        RemoteStorageError: remote storage failed.
    """
    from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition

    lg = part.log
    assert part.topic_id is not None
    tp = TopicIdPartition(part.topic_id, part.topic, part.index)
    remote = rlm.find_offset_by_timestamp(tp, timestamp, lg.log_start_offset, lg.leader_epoch_cache)
    if remote is not None:
        return _limited(lg, (int(remote.timestamp), int(remote.offset)), isolation_level)
    return lookup_offset(lg, timestamp, isolation_level)


def _offset_for_timestamp(lg: Log, timestamp: int) -> tuple[int, int] | None:
    r = lg.offset_for_timestamp(timestamp)
    if r is None:
        return None
    return int(r.timestamp), int(r.offset)


def _entry(index: int, code: int, ts: int, offset: int) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "timestamp": ts,
        "offset": offset,
        "leader_epoch": 0 if offset >= 0 else -1,
        "old_style_offsets": [offset] if offset >= 0 else [],
    }


def handle_list_offsets(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    isolation = getattr(req, "isolation_level", 0)
    rm = apis.replica_manager
    rlm = rm.remote_log_manager
    topics = []
    #: (entry to fill, partition, timestamp) of the remote timestamp searches
    remote: list[tuple[dict[str, Any], Partition, int]] = []
    for t in req.topics:
        parts = []
        denied = topic_error(apis, AclOperation.DESCRIBE, t.name)
        for p in t.partitions:
            try:
                part = rm.get_partition(t.name, p.partition_index) if not denied else None
                if denied:
                    code = denied
                elif part is None:
                    code = rm.not_here_error(t.name, p.partition_index)
                else:
                    code = part.leader_epoch_error(getattr(p, "current_leader_epoch", -1))
            except KafkaStorageError as e:
                part, code = None, e.error_code
            if part is None or code:
                parts.append(
                    {
                        "partition_index": p.partition_index,
                        "error_code": code,
                        "old_style_offsets": [],
                    }
                )
                continue
            if _needs_remote_search(rlm, part, p.timestamp):
                entry = _entry(p.partition_index, 0, -1, -1)
                parts.append(entry)
                remote.append((entry, part, p.timestamp))
                continue
            try:
                ts, offset = lookup_offset(part.log, p.timestamp, isolation)
                code = 0
            except ApiError as e:
                ts, offset, code = -1, -1, e.error_code
            except OSError as e:
                log.error("ListOffsets on %s-%d failed: %s", t.name, p.partition_index, e)
                ts, offset, code = -1, -1, KafkaStorageError.error_code
            parts.append(_entry(p.partition_index, code, ts, offset))
        topics.append({"name": t.name, "partitions": parts})
    cls = response_class(LIST_OFFSETS, ev.api_version)
    if not remote:
        return build(cls, {"throttle_time": 0, "topics": topics})
    assert rlm is not None

    async def search_remote() -> Any:
        loop = asyncio.get_running_loop()
        results = await asyncio.gather(
            *(
                loop.run_in_executor(None, lookup_offset_tiered, rlm, part, ts, isolation)
                for _, part, ts in remote
            ),
            return_exceptions=True,
        )
        for (entry, part, _), result in zip(remote, results, strict=True):
            if isinstance(result, BaseException):
                if isinstance(result, ApiError):
                    code = result.error_code
                else:
                    if isinstance(result, RemoteStorageError | OSError):
                        log.warning("ListOffsets on %s-%d failed: %s", part.topic, part.index,
                                    result)  # fmt: skip
                    else:
                        log.error("ListOffsets on %s-%d failed", part.topic, part.index,
                                  exc_info=result)  # fmt: skip
                    code = KafkaStorageError.error_code
                entry.update(_entry(entry["partition_index"], code, -1, -1))
            else:
                entry.update(_entry(entry["partition_index"], 0, *result))
        return build(cls, {"throttle_time": 0, "topics": topics})

    return search_remote()
