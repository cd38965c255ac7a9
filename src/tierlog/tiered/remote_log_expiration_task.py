"""Kafka's ``RLMExpirationTask``: total retention over local + remote, and the cleanup of
dangling remote segments, for the partitions this broker leads; and the deletion of a deleted
topic's remote partitions.

Expiration, as Kafka's RLMExpirationTask -- size breach = (local bytes not yet copied +
COPY_SEGMENT_FINISHED bytes in the leader-epoch lineage) - ``retention.bytes``; time breach =
``max_timestamp <= now - retention.ms``; a segment ending below the log start offset
(DeleteRecords) goes too. The new log start offset is applied before anything is deleted.
Segments being copied are never expired. Segments whose epochs all precede the lineage
(unclean election leftovers) are deleted (**tierlog:** only when *all* their epochs precede
it; Kafka deletes a segment as soon as one epoch does). **tierlog:** finished segments in
epochs the leader knows that are not in its lineage (offsets an uncleanly elected leader never
had) are deleted too, where Kafka leaves them until total retention; segments of a later epoch
than the leader's own stay (a newer leader's). Dangling COPY_SEGMENT_STARTED segments
(a crash or a failed copy of an earlier run or broker) and dangling DELETE_SEGMENT_STARTED ones
are deleted again, so a restart converges: no STARTED state left, no orphan objects. Such a
segment is dangling only if no copy has it in flight and its state, read again after that check,
is still STARTED (a copy that finished after the listing is COPY_SEGMENT_FINISHED by then, and
may be the only copy of its offsets left).

**tierlog:** on compacted topics the same run then lets the remote compactor
(:mod:`.remote_log_compactor`) finish an interrupted swap and re-compact the remote segments:
one task per partition, so expiration and re-compaction never work on the same segments at
once.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from tierlog.errors import (
    InvalidRemoteStateTransitionError,
    OffsetOutOfRange,
    RemoteStorageError,
)
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
)
from tierlog.tiered.remote_log_tasks import (
    RemoteLogManagerCore,
    _lineage,
    _PartitionState,
    _Task,
    is_remote_segment_within_leader_epochs,
)

if TYPE_CHECKING:
    from tierlog.log.log import Log

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState


class RLMExpirationTask(RemoteLogManagerCore):
    """The retention side of :class:`~tierlog.tiered.remote_log_manager.RemoteLogManager` (see
    the module docstring); the manager inherits it. Thread-safe: one run per partition at a
    time."""

    def _delete_remote_partition(self, tp: TopicIdPartition, st: _PartitionState | None) -> None:
        m = st.metrics if st is not None else self.metrics.partition(tp)
        if st is None:  # e.g. resuming a deletion after a restart: load its metadata first
            self.rlmm.on_partition_leadership_changes(set(), {tp})
        for state in (
            RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        ):
            try:
                self.rlmm.put_remote_partition_delete_metadata(
                    RemotePartitionDeleteMetadata(tp, state, self._time_ms(), self.broker_id)
                )
            except InvalidRemoteStateTransitionError:
                pass  # a resumed deletion: already further along
        failed = 0
        for metadata in self.rlmm.list_remote_log_segments(tp):
            try:
                self._delete_remote_log_segment(tp, m, metadata)
            except RemoteStorageError as e:
                failed += 1
                log.warning("deleting %s of deleted partition %s failed: %s",
                            metadata.remote_log_segment_id, tp, e)  # fmt: skip
        if failed:
            raise RemoteStorageError(f"{failed} remote segments of {tp} could not be deleted")
        self.rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(
                tp, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, self._time_ms(),
                self.broker_id,
            )
        )  # fmt: skip

    def _expiration_task(self, st: _PartitionState, task: _Task) -> float | None:
        lg = self._log_lookup(st.tp)
        if lg is None or not st.leader:
            return None
        self._cleanup_expired_remote_log_segments(st, lg, task)
        if lg.config.compact and not task.cancelled.is_set():
            self._compact_remote_log(st, lg, task)
        return None

    def _cleanup_expired_remote_log_segments(
        self, st: _PartitionState, lg: Log, task: _Task
    ) -> None:
        tp, m = st.tp, st.metrics
        lineage = _lineage(lg)
        config = lg.config
        now = self._time_ms()
        to_delete: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        new_log_start: int | None = None
        if lineage and config.delete_enabled:
            retention_ms, retention_bytes = config.retention_ms, config.retention_size
            leo, log_start = lg.log_end_offset, lg.log_start_offset
            remaining = 0
            if retention_bytes > -1:
                local_only = sum(
                    s.size for s in lg.segments.values() if s.base_offset > st.highest_remote_offset
                )
                remote = sum(
                    x.segment_size_in_bytes for x in self._finished_in_lineage(tp, lg, lineage)
                )
                remaining = max(0, local_only + remote - retention_bytes)
            cleanup_until = now - retention_ms if retention_ms > -1 else None
            first_epoch = next(iter(lineage))
            can_process = True
            for epoch in lineage:
                if not can_process:
                    break
                for md in self.rlmm.list_remote_log_segments(tp, epoch):
                    if task.cancelled.is_set():
                        return
                    sid = md.remote_log_segment_id.id
                    with st.lock:
                        copying = sid in st.being_copied
                    if copying:
                        can_process = False
                        break
                    if md.state != _S.COPY_SEGMENT_FINISHED or sid in to_delete:
                        continue  # dangling states are handled below
                    delete = md.end_offset < log_start and all(
                        e <= first_epoch for e in md.segment_leader_epochs
                    )
                    valid = False
                    if not delete:
                        valid = is_remote_segment_within_leader_epochs(md, leo, lineage)
                        if valid:
                            if cleanup_until is not None and md.max_timestamp_ms <= cleanup_until:
                                delete = True
                                remaining = max(0, remaining - md.segment_size_in_bytes)
                            elif remaining > 0 and remaining - md.segment_size_in_bytes >= 0:
                                delete = True
                                remaining -= md.segment_size_in_bytes
                            if delete:
                                end = md.end_offset + 1
                                new_log_start = end if new_log_start is None else max(
                                    new_log_start, end)  # fmt: skip
                    if delete:
                        to_delete[sid] = md
                    elif valid:
                        # Kafka's canProcess: stop at the first valid segment that stays.
                        can_process = False
                        break
        # The new log start offset first: readers stop asking for what is about to go.
        if new_log_start is not None and new_log_start > lg.log_start_offset:
            try:
                lg.maybe_increment_log_start_offset(new_log_start)
            except OffsetOutOfRange as e:
                log.warning("%s: cannot move the log start offset to %d: %s",
                            tp, new_log_start, e)  # fmt: skip
        # Unreferenced: every epoch of the segment precedes the lineage.
        earliest = lg.leader_epoch_cache.earliest_entry
        all_segments = self.rlmm.list_remote_log_segments(tp)
        if earliest is not None:
            for md in all_segments:
                if (
                    md.state == _S.COPY_SEGMENT_FINISHED
                    and max(md.segment_leader_epochs) < earliest.epoch
                ):
                    to_delete.setdefault(md.remote_log_segment_id.id, md)
        # Diverged: finished segments in epochs this leader knows that are not in its lineage
        # (written by a leader whose later offsets this one never had: an unclean election).
        # No reader is ever sent there, so they go. A segment of a later epoch than this
        # leader's (a newer leader's, seen by a leader that has not learnt it lost) stays.
        if lineage:
            latest_epoch = max(lineage)
            for md in all_segments:
                if (
                    md.state == _S.COPY_SEGMENT_FINISHED
                    and md.end_offset >= lg.log_start_offset
                    and max(md.segment_leader_epochs) <= latest_epoch
                    and not is_remote_segment_within_leader_epochs(md, lg.log_end_offset, lineage)
                    and md.remote_log_segment_id.id not in to_delete
                ):
                    log.warning(
                        "%s: remote segment %s [%d, %d] (epochs %s) is not in the leader epoch "
                        "lineage %s (an unclean leader election): deleting it",
                        tp, md.remote_log_segment_id, md.start_offset, md.end_offset,
                        dict(md.segment_leader_epochs), lineage,
                    )  # fmt: skip
                    to_delete[md.remote_log_segment_id.id] = md
        # Dangling COPY_SEGMENT_STARTED (not ours in flight) and DELETE_SEGMENT_STARTED. A
        # segment listed STARTED that is no longer being copied may have finished since it was
        # listed -- COPY_SEGMENT_FINISHED, its local segment perhaps deleted already: deleting
        # it would lose its offsets. Its state is read again after the in-flight check: a copy
        # leaves being_copied only after it published its last state, so the second listing
        # shows that state.
        dangling_states = (_S.COPY_SEGMENT_STARTED, _S.DELETE_SEGMENT_STARTED)
        with st.lock:
            in_flight = set(st.being_copied)
        dangling = {
            md.remote_log_segment_id.id
            for md in all_segments
            if md.state in dangling_states and md.remote_log_segment_id.id not in in_flight
        }
        if dangling:
            for md in self.rlmm.list_remote_log_segments(tp):
                sid = md.remote_log_segment_id.id
                if sid in dangling and md.state in dangling_states:
                    to_delete.setdefault(sid, md)
        lag_bytes = sum(x.segment_size_in_bytes for x in to_delete.values())
        lag_segments = len(to_delete)
        m.delete_lag_bytes.set(lag_bytes)
        m.delete_lag_segments.set(lag_segments)
        for md in to_delete.values():
            if task.cancelled.is_set() or not st.leader:
                return
            try:
                self._delete_remote_log_segment(tp, m, md)
            except RemoteStorageError as e:
                log.warning("deleting remote segment %s of %s failed (retried next run): %s",
                            md.remote_log_segment_id, tp, e)  # fmt: skip
                continue
            lag_bytes -= md.segment_size_in_bytes
            lag_segments -= 1
            m.delete_lag_bytes.set(lag_bytes)
            m.delete_lag_segments.set(lag_segments)
        self._update_size_metrics(st, lg)
