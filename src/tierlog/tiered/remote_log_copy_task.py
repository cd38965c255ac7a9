"""Kafka's ``RLMCopyTask``: copies a leader's rolled segments to remote storage, oldest first.

Every ``remote.log.manager.task.interval.ms``, per leader partition (unless
``remote.log.copy.disable``), from ``max(highest copied offset + 1, log start offset)``: each
rolled segment whose successor starts at or below the last stable offset (the active segment
never; the log rolls it once it breaches local retention so it becomes copyable)::

    new segment id (UUID per attempt)
    COPY_SEGMENT_STARTED            published before anything is uploaded
    upload .log + offset/time/txn index + producer snapshot at the next base offset
           + leader-epoch checkpoint of the entries below the next base offset
    COPY_SEGMENT_FINISHED           only after the upload completed
    highest offset in remote storage = end offset  -> the local copy may now be deleted

A failed upload deletes whatever it left (DELETE_SEGMENT_STARTED -> delete objects ->
DELETE_SEGMENT_FINISHED), stops the run (segments go oldest first) and retries after an
exponential backoff (``remote.log.manager.task.retry.backoff.ms`` doubling up to
``...backoff.max.ms``, +-20 % jitter).

**tierlog, compacted topics** (Kafka refuses ``remote.storage.enable`` on them): a segment is
copied only once the log cleaner has cleaned it (it ends below the partition's first dirty
offset in ``cleaner-offset-checkpoint``) and its newest record is older than the topic's
tiering lag (:func:`~tierlog.tiered.remote_log_compactor.compacted_copy_lag_ms`); the local
cleaner is paused while segments are copied, so it never merges a segment being copied with
one that is not (see :mod:`.remote_log_compactor`).
"""

from __future__ import annotations

import itertools
import logging
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.errors import RemoteStorageError
from tierlog.log import log_file_utils as lfu
from tierlog.log.checkpoint_file import encode_leader_epoch_checkpoint
from tierlog.log.producer_state_manager import encode_snapshot
from tierlog.tiered.remote_log_compactor import CleanerCoordination, compacted_copy_lag_ms
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState
from tierlog.tiered.remote_log_tasks import (
    RemoteLogManagerCore,
    _CopyAborted,
    _PartitionState,
    _Task,
)
from tierlog.tiered.storage.remote_storage_manager import LogSegmentData

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.log.log_segment import LogSegment

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState


class RLMCopyTask(RemoteLogManagerCore):
    """The copy side of :class:`~tierlog.tiered.remote_log_manager.RemoteLogManager` (see the
    module docstring); the manager inherits it. Thread-safe: one run per partition at a time
    (its :class:`~tierlog.tiered.remote_log_tasks._Task` lock)."""

    _cleaner_coordination: Callable[[], CleanerCoordination | None]

    def _copy_task(self, st: _PartitionState, task: _Task) -> float | None:
        lg = self._log_lookup(st.tp)
        if lg is None or not lg.remote_log_enabled or not st.leader:
            return None
        if lg.config.get("remote.log.copy.disable"):
            return None
        try:
            self._copy_log_segments_to_remote(st, lg, task)
        except _CopyAborted:
            return None
        except Exception as e:
            st.copy_failures += 1
            backoff = self._backoff_s(st.copy_failures)
            log.warning("copying segments of %s failed (attempt %d), retrying in %.2fs: %s",
                        st.tp, st.copy_failures, backoff, e)  # fmt: skip
            return backoff
        st.copy_failures = 0
        return None

    def _copy_log_segments_to_remote(self, st: _PartitionState, lg: Log, task: _Task) -> None:
        if st.copied_offset is None:
            st.copied_offset = self._find_highest_remote_offset(st.tp, lg)
        # Every run, not only after a copy: a log swapped in by a log dir move while a copy
        # of the old one was in flight learns what that copy finished.
        self._set_highest_remote_offset(st, lg, st.copied_offset)
        if not lg.config.compact:
            self._copy_candidates(st, lg, task, self._candidates(st, lg, lg.last_stable_offset))
            return
        # A compacted topic: only cleaned segments old enough, the cleaner paused meanwhile
        # (it must not merge a segment being copied with one that is not).
        coordination = self._cleaner_coordination()
        if coordination is None:
            if not st.extra.get("warned_no_cleaner"):
                st.extra["warned_no_cleaner"] = True
                log.warning(
                    "%s is compacted and tiered but the log cleaner does not run "
                    "(log.cleaner.enable): none of its segments is copied",
                    st.tp,
                )
            self._set_lag_metrics(st, [])
            return
        ktp = (st.tp.topic, st.tp.partition)
        if not self._compacted_candidates(st, lg, coordination):
            self._set_lag_metrics(st, [])
            return
        if not coordination.try_pause_cleaning(ktp):
            return  # a clean in progress: the next run copies
        try:
            self._copy_candidates(st, lg, task, self._compacted_candidates(st, lg, coordination))
        finally:
            coordination.resume_cleaning([ktp])

    def _compacted_candidates(
        self, st: _PartitionState, lg: Log, coordination: CleanerCoordination
    ) -> list[tuple[LogSegment, int]]:
        first_dirty = coordination.first_dirty_offset((st.tp.topic, st.tp.partition))
        if first_dirty is None:
            return []
        horizon = self._time_ms() - compacted_copy_lag_ms(lg.config)
        out = []
        for segment, next_base in self._candidates(st, lg, min(lg.last_stable_offset, first_dirty)):
            if segment.largest_timestamp > horizon:
                break  # oldest first: the next ones wait too
            out.append((segment, next_base))
        return out

    @staticmethod
    def _candidates(st: _PartitionState, lg: Log, upper: int) -> list[tuple[LogSegment, int]]:
        """Rolled segments from the highest copied offset whose successor starts at or below
        ``upper`` (the last stable offset), with that successor's base offset."""
        copied = st.copied_offset if st.copied_offset is not None else -1
        candidates: list[tuple[LogSegment, int]] = []
        if upper > 0 and copied < upper:
            from_offset = max(copied + 1, lg.log_start_offset)
            segments = lg.segments.values()
            for prev, nxt in itertools.pairwise(segments):
                if nxt.base_offset <= from_offset:
                    continue  # prev holds nothing at or above from_offset
                if nxt.base_offset <= upper:
                    candidates.append((prev, nxt.base_offset))
        return candidates

    @staticmethod
    def _set_lag_metrics(st: _PartitionState, candidates: list[tuple[LogSegment, int]]) -> None:
        st.metrics.copy_lag_bytes.set(sum(s.size for s, _ in candidates))
        st.metrics.copy_lag_segments.set(len(candidates))

    def _copy_candidates(
        self, st: _PartitionState, lg: Log, task: _Task, candidates: list[tuple[LogSegment, int]]
    ) -> None:
        lag_bytes = sum(s.size for s, _ in candidates)
        lag_segments = len(candidates)
        st.metrics.copy_lag_bytes.set(lag_bytes)
        st.metrics.copy_lag_segments.set(lag_segments)
        for segment, next_base in candidates:
            if task.cancelled.is_set() or not st.leader:
                raise _CopyAborted
            if not self.copy_quota.wait_until_available(cancelled=task.cancelled):
                raise _CopyAborted
            size = segment.size
            self._copy_log_segment(st, lg, segment, next_base)
            self.copy_quota.record(size)
            lag_bytes -= size
            lag_segments -= 1
            st.metrics.copy_lag_bytes.set(lag_bytes)
            st.metrics.copy_lag_segments.set(lag_segments)

    def _copy_log_segment(
        self, st: _PartitionState, lg: Log, segment: LogSegment, next_base: int
    ) -> None:
        tp = st.tp
        segment_id = RemoteLogSegmentId(tp, uuid.uuid4())
        end_offset = next_base - 1
        epochs = lg.leader_epoch_cache.epochs_between(segment.base_offset, next_base)
        if not epochs:
            raise RemoteStorageError(
                f"segment {segment.base_offset} of {tp} has no leader epoch: cannot copy it"
            )
        txn_idx_empty = segment.txn_index.is_empty()
        metadata = RemoteLogSegmentMetadata(
            remote_log_segment_id=segment_id,
            start_offset=segment.base_offset,
            end_offset=end_offset,
            max_timestamp_ms=segment.largest_timestamp,
            broker_id=self.broker_id,
            event_timestamp_ms=self._time_ms(),
            segment_size_in_bytes=segment.size,
            segment_leader_epochs=epochs,
            # Kafka's isTxnIdxEmpty: readers skip the transaction index of such segments.
            txn_idx_empty=txn_idx_empty,
        )
        m = st.metrics
        snapshot = lg.producer_state_manager.snapshot_file_for(next_base)
        no_snapshot = snapshot is None or not snapshot.exists()
        if lg.closed:
            # Swapped out by a log dir move (closed, then its dir renamed: looked at after the
            # snapshot, so a snapshot missing for that reason is seen here): the next run
            # copies the segment from the log that replaced it, with its producer snapshot.
            raise _CopyAborted
        with st.lock:
            st.being_copied.add(segment_id.id)  # before STARTED: expiration must skip it
        tmp_dir: tempfile.TemporaryDirectory[str] | None = None
        try:
            self.rlmm.add_remote_log_segment_metadata(metadata)
            if snapshot is None or no_snapshot:
                # No snapshot at the boundary (e.g. lost in a crash): ship an empty one, as a
                # follower restoring from this segment then rebuilds producer state itself.
                log.warning("%s: no producer snapshot at %d; uploading an empty one", tp, next_base)
                tmp_dir = tempfile.TemporaryDirectory(prefix="tierlog-rlm-")
                snapshot = Path(tmp_dir.name) / lfu.producer_snapshot_file(Path(), next_base).name
                snapshot.write_bytes(encode_snapshot([]))
            txn = segment.txn_index.path
            data = LogSegmentData(
                log_segment=segment.log.path,
                offset_index=segment.offset_index.path,
                time_index=segment.time_index.path,
                transaction_index=None if txn_idx_empty else txn,
                producer_snapshot_index=snapshot,
                leader_epoch_index=encode_leader_epoch_checkpoint(
                    lg.leader_epoch_cache.epoch_entries_in_range(-1, next_base)
                ),
            )
            m.copy_requests.inc()
            try:
                custom = self.rsm.copy_log_segment_data(metadata, data)
            except Exception as e:
                m.copy_errors.inc()
                log.warning("copying %s of %s failed: %s", segment, tp, e)
                self._clean_failed_copy(st, metadata)
                raise
            limit = self.config.remote_log_metadata_custom_metadata_max_bytes
            if custom is not None and len(custom) > limit:
                m.copy_errors.inc()
                self._clean_failed_copy(st, metadata)
                raise RemoteStorageError(
                    f"custom metadata of {len(custom)} bytes exceeds "
                    f"remote.log.metadata.custom.metadata.max.bytes={limit}"
                )
            self.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    segment_id, self._time_ms(), custom, _S.COPY_SEGMENT_FINISHED, self.broker_id
                )
            )
        finally:
            with st.lock:
                st.being_copied.discard(segment_id.id)
            if tmp_dir is not None:
                tmp_dir.cleanup()
        m.copy_bytes.inc(metadata.segment_size_in_bytes)
        st.copied_offset = end_offset
        self._set_highest_remote_offset(st, lg, end_offset)
        log.info("copied segment %d-%d of %s to remote storage as %s",
                 segment.base_offset, end_offset, tp, segment_id)  # fmt: skip

    def _clean_failed_copy(self, st: _PartitionState, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete what a failed upload left; on failure the segment stays STARTED (or
        DELETE_SEGMENT_STARTED) and the expiration task deletes it later."""
        try:
            self._delete_remote_log_segment(st.tp, st.metrics, metadata)
        except RemoteStorageError as e:
            log.warning("cleaning the failed copy %s failed (retried by expiration): %s",
                        metadata.remote_log_segment_id, e)  # fmt: skip
