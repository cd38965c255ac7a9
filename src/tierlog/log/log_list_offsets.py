"""ListOffsets on a UnifiedLog (Kafka's ``UnifiedLog.fetchOffsetByTimestamp``): the offset
of a timestamp, or of one of the special timestamps below (the log start offset, the local
log start offset, the log end offset, the highest offset in remote storage, the record with
the largest timestamp).

:func:`offset_for_timestamp` is the body of UnifiedLog's method of the same name, which says
what it does and raises. Lock-free, as every read of the log: it works on the segment list
and offsets as published (see :mod:`~tierlog.log.unified_log`).

Friend of :class:`~tierlog.log.unified_log.UnifiedLog` (its segments and offsets): one job,
kept out of that module's size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.log.log_segment import LogSegment
from tierlog.log.time_index import TimestampOffset
from tierlog.records.record_batch import NO_TIMESTAMP

if TYPE_CHECKING:
    from tierlog.log.unified_log import UnifiedLog

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "offset_for_timestamp",
]

#: ListOffsets special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


def offset_for_timestamp(lg: UnifiedLog, target_timestamp: int) -> TimestampOffset | None:
    """The body of :meth:`UnifiedLog.offset_for_timestamp`."""
    if target_timestamp == EARLIEST_TIMESTAMP:
        return TimestampOffset(NO_TIMESTAMP, lg._log_start_offset)
    if target_timestamp == EARLIEST_LOCAL_TIMESTAMP:
        return TimestampOffset(NO_TIMESTAMP, lg._local_log_start_offset)
    if target_timestamp == LATEST_TIMESTAMP:
        return TimestampOffset(NO_TIMESTAMP, lg._leo.offset)
    if target_timestamp == LATEST_TIERED_TIMESTAMP:
        tiered = lg._highest_offset_in_remote_storage if lg.remote_log_enabled else -1
        return TimestampOffset(NO_TIMESTAMP, tiered)
    segments = lg._segments.values()
    if target_timestamp == MAX_TIMESTAMP:
        best: LogSegment | None = None
        for segment in segments:
            if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                best = segment
        if best is None or best.max_timestamp_so_far < 0:
            return None
        found = best.offset_of_max_timestamp()
        return TimestampOffset(*found) if found is not None else None
    if target_timestamp < 0:
        raise ValueError(f"unsupported special timestamp {target_timestamp}")
    start = lg._log_start_offset
    for segment in segments:
        if segment.largest_timestamp >= target_timestamp:
            found = segment.find_offset_by_timestamp(target_timestamp, start)
            if found is not None:
                return TimestampOffset(*found)
    return None
