"""The truncation of a UnifiedLog (Kafka's ``UnifiedLog.truncateTo`` and
``truncateFullyAndStartAt``): a follower's log cut back to where it agrees with its leader,
or emptied to start at an offset, and the follower's log rebuilt at the start of its leader's
local log from what remote storage holds (Kafka's
``ReplicaFetcherTierStateMachine.buildRemoteLogAuxState``: leader epochs, producer state, log
start offset).

The public functions are the bodies of UnifiedLog's methods of the same names, which say what
they do and raise; their helper ``_truncate_fully_and_start_at`` runs under the log's lock,
which its callers hold.

Friend of :class:`~tierlog.log.unified_log.UnifiedLog` (its lock, segments, offsets, leader
epochs and producer state): one job, kept out of that module's size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.log.checkpoint_file import EpochEntry
from tierlog.log.local_log import LogOffsetMetadata
from tierlog.log.log_loader import rebuild_producer_state
from tierlog.log.producer_state_manager import decode_snapshot

if TYPE_CHECKING:
    from tierlog.log.unified_log import UnifiedLog

__all__ = [
    "truncate_to",
    "truncate_fully_and_start_at",
    "restore_remote_log_aux_state",
]


def truncate_to(lg: UnifiedLog, target_offset: int) -> bool:
    """The body of :meth:`UnifiedLog.truncate_to`."""
    if target_offset < 0:
        raise ValueError(f"cannot truncate {lg} to a negative offset {target_offset}")
    with lg._lock:
        if target_offset >= lg._leo.offset:
            # Nothing to remove from the log, but an epoch may start at its end: this
            # broker was elected leader (the epoch assigned at its log end offset) and
            # lost leadership before appending. That entry must go, or the follower
            # keeps sending it as its last fetched epoch and diverges forever (Kafka's
            # truncateTo does the same).
            lg.leader_epoch_cache.truncate_from_end(lg._leo.offset)
            lg._latest_epoch = lg.leader_epoch_cache.latest_epoch
            return False
        first_base = lg._segments.first_segment_base_offset
        if first_base is None or first_base > target_offset:
            _truncate_fully_and_start_at(lg, target_offset)
            return True
        later = [s for s in lg._segments.values() if s.base_offset > target_offset]
        lg._remove_and_delete_segments(later)
        active = lg._segments.active_segment
        active.truncate_to(target_offset)
        lg._leo = LogOffsetMetadata(target_offset, active.base_offset, active.size)
        lg._hw_metadata = None
        lg.leader_epoch_cache.truncate_from_end(target_offset)
        lg._latest_epoch = lg.leader_epoch_cache.latest_epoch
        lg._log_start_offset = min(target_offset, lg._log_start_offset)
        lg._local_log_start_offset = min(target_offset, lg._local_log_start_offset)
        rebuild_producer_state(
            lg.producer_state_manager,
            lg._segments,
            lg._log_start_offset,
            target_offset,
            lg._time_ms(),
        )
        if lg._high_watermark > target_offset:
            lg._high_watermark = target_offset
        with lg._flush_lock:
            if lg._recovery_point > target_offset:
                lg._recovery_point = target_offset
        return True


def truncate_fully_and_start_at(lg: UnifiedLog, new_offset: int) -> None:
    """The body of :meth:`UnifiedLog.truncate_fully_and_start_at`."""
    if new_offset < 0:
        raise ValueError(f"cannot start {lg} at a negative offset {new_offset}")
    with lg._lock:
        _truncate_fully_and_start_at(lg, new_offset)


def restore_remote_log_aux_state(
    lg: UnifiedLog,
    next_offset: int,
    leader_log_start_offset: int,
    epochs: list[EpochEntry],
    producer_snapshot: bytes | None,
    expected_log_end_offset: int | None = None,
) -> bool:
    """The body of :meth:`UnifiedLog.restore_remote_log_aux_state`."""
    producers = (
        decode_snapshot(producer_snapshot, f"remote producer snapshot of {lg}")
        if producer_snapshot is not None
        else []
    )
    with lg._lock:
        if expected_log_end_offset is not None and lg._leo.offset != expected_log_end_offset:
            return False
        _truncate_fully_and_start_at(lg, next_offset)
        lg.leader_epoch_cache.assign_entries([e for e in epochs if e.start_offset < next_offset])
        lg._latest_epoch = lg.leader_epoch_cache.latest_epoch
        for entry in producers:
            lg.producer_state_manager.load_producer_entry(entry)
        lg.producer_state_manager.take_snapshot(next_offset)
        lg._log_start_offset = min(max(leader_log_start_offset, 0), next_offset)
        lg.update_highest_offset_in_remote_storage(next_offset - 1)
    return True


def _truncate_fully_and_start_at(lg: UnifiedLog, new_offset: int) -> None:
    # Unlink first: a new segment may reuse a removed one's file names, while readers
    # holding the old segment keep reading its unlinked files.
    for removed in lg._segments.clear():
        removed.delete_if_exists()
    lg._new_segment(new_offset)
    lg._leo = LogOffsetMetadata(new_offset, new_offset, 0)
    lg._hw_metadata = None
    lg.leader_epoch_cache.clear_and_flush()
    lg._latest_epoch = None
    lg.producer_state_manager.truncate_fully_and_start_at(new_offset)
    lg._log_start_offset = new_offset
    lg._local_log_start_offset = new_offset
    lg._high_watermark = new_offset
    with lg._flush_lock:
        lg._recovery_point = new_offset
