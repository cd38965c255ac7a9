"""ListOffsets (2): offsets by timestamp and the special timestamps.

-1 LATEST: the high watermark (the last stable offset for read_committed);
-2 EARLIEST: the log start offset (remote data included);
-3 MAX_TIMESTAMP (v7+): the offset of the record with the largest timestamp;
-4 EARLIEST_LOCAL (v8+): the local log start offset;
-5 LATEST_TIERED (v9+): the highest offset in remote storage (-1 when none);
t >= 0: the first offset whose timestamp is >= t, or offset -1 / timestamp -1 when none.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import ApiError, InvalidRequest, KafkaStorageError, UnknownTopicOrPartition
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class
from tierlog.server.replica_manager import READ_COMMITTED

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.server.kafka_apis import KafkaApis, Request

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
        # The highest offset in remote storage; nothing is tiered by the local log.
        return -1, -1
    if timestamp < LATEST_TIERED_TIMESTAMP:
        raise InvalidRequest(f"unknown special timestamp {timestamp}")
    found = _offset_for_timestamp(lg, timestamp)
    if found is None:
        return -1, -1
    ts, offset = found
    limit = lg.last_stable_offset if isolation_level == READ_COMMITTED else lg.high_watermark
    if offset >= limit:
        return -1, -1
    return ts, offset


def _offset_for_timestamp(lg: Log, timestamp: int) -> tuple[int, int] | None:
    r = lg.offset_for_timestamp(timestamp)
    if r is None:
        return None
    return int(r.timestamp), int(r.offset)


def handle_list_offsets(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    isolation = getattr(req, "isolation_level", 0)
    rm = apis.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            part = rm.get_partition(t.name, p.partition_index)
            if part is None:
                parts.append(
                    {
                        "partition_index": p.partition_index,
                        "error_code": UnknownTopicOrPartition.error_code,
                        "old_style_offsets": [],
                    }
                )
                continue
            try:
                ts, offset = lookup_offset(part.log, p.timestamp, isolation)
                code = 0
            except ApiError as e:
                ts, offset, code = -1, -1, e.error_code
            except OSError as e:
                log.error("ListOffsets on %s-%d failed: %s", t.name, p.partition_index, e)
                ts, offset, code = -1, -1, KafkaStorageError.error_code
            parts.append(
                {
                    "partition_index": p.partition_index,
                    "error_code": code,
                    "timestamp": ts,
                    "offset": offset,
                    "leader_epoch": 0 if offset >= 0 else -1,
                    "old_style_offsets": [offset] if offset >= 0 else [],
                }
            )
        topics.append({"name": t.name, "partitions": parts})
    return build(
        response_class(LIST_OFFSETS, ev.api_version), {"throttle_time": 0, "topics": topics}
    )
