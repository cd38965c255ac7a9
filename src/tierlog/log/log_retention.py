"""The retention and the log start offset of a UnifiedLog (Kafka's
``UnifiedLog.deleteOldSegments`` and ``maybeIncrementLogStartOffset``): the segments retention
deletes -- older than ``retention.ms``, beyond ``retention.bytes``, or entirely below the log
start offset; with tiered storage by the local retention settings, only once in remote
storage, moving the local log start offset -- and the log start offset DeleteRecords, remote
expiration and followers raise.

The public functions are the bodies of UnifiedLog's methods of the same names, which say what
they do and raise; the private ones are their helpers and run under the log's lock, which
their callers hold; reads never take it (see :mod:`~tierlog.log.unified_log`).

Friend of :class:`~tierlog.log.unified_log.UnifiedLog` (its lock, segments and offsets): one
job, kept out of that module's size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from tierlog.errors import OffsetOutOfRange
from tierlog.log.log_segment import LogSegment

if TYPE_CHECKING:
    from tierlog.log.unified_log import UnifiedLog

__all__ = [
    "DELETE_TO_HIGH_WATERMARK",
    "delete_old_segments",
    "maybe_increment_log_start_offset",
    "delete_records_before",
]

log = logging.getLogger(__name__)

#: DeleteRecords: delete up to the high watermark.
DELETE_TO_HIGH_WATERMARK = -1


def delete_old_segments(lg: UnifiedLog, now_ms: int | None = None) -> int:
    """The body of :meth:`UnifiedLog.delete_old_segments`."""
    with lg._lock:
        if lg._closed:
            return 0
        now = lg._time_ms() if now_ms is None else now_ms
        deleted = _delete_log_start_offset_breached_segments(
            lg,
        )
        # A tiered compacted log (tierlog) applies local retention to what is tiered.
        if lg._config.delete_enabled or lg.remote_log_copy_enabled:
            deleted += _delete_retention_size_breached_segments(
                lg,
            )
            deleted += _delete_retention_ms_breached_segments(lg, now)
        return deleted


def _delete_retention_ms_breached_segments(lg: UnifiedLog, now: int) -> int:
    config = lg._config
    retention_ms = config.local_retention_ms if lg.remote_log_copy_enabled else config.retention_ms
    if retention_ms < 0:
        return 0
    return _delete_segments(
        lg,
        lambda segment, _next: now - segment.largest_timestamp > retention_ms,
        f"retention time {retention_ms}ms breach",
    )


def _delete_retention_size_breached_segments(lg: UnifiedLog) -> int:
    config = lg._config
    retention_size = (
        config.local_retention_bytes if lg.remote_log_copy_enabled else config.retention_size
    )
    size = lg._segments.size_in_bytes()
    if retention_size < 0 or size < retention_size:
        return 0
    excess = size - retention_size

    def should_delete(segment: LogSegment, _next: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size >= 0:
            excess -= segment.size
            return True
        return False

    return _delete_segments(lg, should_delete, f"retention size {retention_size} breach")


def _delete_log_start_offset_breached_segments(lg: UnifiedLog) -> int:
    bound = lg._local_log_start_offset if lg.remote_log_copy_enabled else lg._log_start_offset
    return _delete_segments(
        lg,
        lambda _segment, next_segment: (
            next_segment is not None and next_segment.base_offset <= bound
        ),
        f"log start offset {bound} breach",
    )


def _delete_segments(
    lg: UnifiedLog, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
) -> int:
    deletable = _deletable_segments(lg, predicate)
    if not deletable:
        return 0
    to_delete = list(deletable)
    if len(to_delete) == lg._segments.number_of_segments:
        # Always keep a segment: roll a new one before deleting them all.
        new_segment = lg._roll(None)
        if to_delete[-1].base_offset == new_segment.base_offset:
            to_delete.pop()
    if not to_delete:
        return 0
    log.info("%s: deleting segments %s due to %s", lg, [s.base_offset for s in to_delete], reason)
    kept = lg._segments.higher_segment(to_delete[-1].base_offset)
    assert kept is not None  # the active segment is never deleted
    first_base = kept.base_offset
    # The start offset moves before the segments leave the lookup: a lock-free fetch in
    # between finds each offset either below the local log start (a tiered one is then
    # read from remote storage) or in a segment, never in neither -- that answered
    # OFFSET_OUT_OF_RANGE, and consumers reset to the earliest offset.
    _increment_start_offset(lg, first_base)
    lg._remove_and_delete_segments(to_delete)
    lg.producer_state_manager.delete_snapshots_before(first_base)
    return len(to_delete)


def _deletable_segments(
    lg: UnifiedLog, predicate: Callable[[LogSegment, LogSegment | None], bool]
) -> list[LogSegment]:
    segments = lg._segments.values()
    leo = lg._leo.offset
    high_watermark = lg._high_watermark
    hook = lg.can_delete_local_segment
    tiered = lg.remote_log_copy_enabled
    deletable: list[LogSegment] = []
    should_roll = False
    for i, segment in enumerate(segments):
        next_segment = segments[i + 1] if i + 1 < len(segments) else None
        upper_bound = next_segment.base_offset if next_segment is not None else leo
        is_last_and_empty = next_segment is None and segment.size == 0
        matched = high_watermark >= upper_bound and predicate(segment, next_segment)
        if matched and tiered and next_segment is None and segment.size > 0:
            should_roll = True  # roll so the segment can be copied, then deleted
        if (
            matched
            and not is_last_and_empty
            and (not tiered or _is_segment_eligible_for_deletion(lg, next_segment, upper_bound))
            and (hook is None or hook(segment))
        ):
            deletable.append(segment)
        else:
            break
    if should_roll:
        lg._roll(None)
    return deletable


def _is_segment_eligible_for_deletion(
    lg: UnifiedLog, next_segment: LogSegment | None, upper_bound: int
) -> bool:
    """Tiered: a local segment goes only once it is in remote storage (its last offset
    <= the highest offset in remote storage) or below the log start offset (Kafka's
    ``isSegmentEligibleForDeletion``)."""
    if upper_bound > 0 and upper_bound - 1 <= lg._highest_offset_in_remote_storage:
        return True
    return next_segment is not None and lg._log_start_offset >= next_segment.base_offset


def _increment_start_offset(lg: UnifiedLog, start_offset: int) -> None:
    if lg.remote_log_copy_enabled:
        if start_offset > lg._local_log_start_offset:
            lg._local_log_start_offset = start_offset
    else:
        _maybe_increment_log_start_offset(lg, start_offset)


def _maybe_increment_log_start_offset(lg: UnifiedLog, new_log_start_offset: int) -> bool:
    if new_log_start_offset > lg._high_watermark:
        raise OffsetOutOfRange(
            f"cannot increment the log start offset to {new_log_start_offset} of "
            f"{lg._topic}-{lg._partition}: it is larger than the high watermark "
            f"{lg._high_watermark}"
        )
    if lg.remote_log_enabled:
        lg._local_log_start_offset = max(new_log_start_offset, lg._local_log_start_offset)
    if new_log_start_offset <= lg._log_start_offset:
        return False
    lg._log_start_offset = new_log_start_offset
    lg._local_log_start_offset = max(new_log_start_offset, lg._local_log_start_offset)
    earliest = lg.leader_epoch_cache.earliest_entry
    if earliest is not None and earliest.start_offset < new_log_start_offset:
        lg.leader_epoch_cache.truncate_from_start(new_log_start_offset)
    lg.producer_state_manager.on_log_start_offset_incremented(new_log_start_offset)
    return True


def maybe_increment_log_start_offset(lg: UnifiedLog, new_log_start_offset: int) -> bool:
    """The body of :meth:`UnifiedLog.maybe_increment_log_start_offset`."""
    with lg._lock:
        return _maybe_increment_log_start_offset(lg, new_log_start_offset)


def delete_records_before(lg: UnifiedLog, offset: int) -> int:
    """The body of :meth:`UnifiedLog.delete_records_before`."""
    with lg._lock:
        if offset == DELETE_TO_HIGH_WATERMARK:
            offset = lg._high_watermark
        if offset < 0:
            raise OffsetOutOfRange(f"cannot delete records before negative offset {offset}")
        _maybe_increment_log_start_offset(lg, offset)
        return lg._log_start_offset
