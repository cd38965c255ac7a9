"""Kafka's ``LogCleanerManager``: which compacted log to clean next, and where cleaning stopped.

Per log dir it keeps Kafka's ``cleaner-offset-checkpoint`` (the text format of
:class:`~tierlog.log.checkpoint_file.OffsetCheckpointFile`)::

    0
    2
    my-topic 0 40211        <topic> <partition> <first dirty offset>
    __consumer_offsets 7 88

Everything below a log's first dirty offset has been cleaned at least once ("clean"); from it
to the first uncleanable offset is "dirty" and cleanable::

    log start        first dirty               first uncleanable      active segment
    |---- clean ----|---------- dirty ---------|------ too recent -----|=========>

The first uncleanable offset is the lowest of the last stable offset (the high watermark
here), the active segment's base offset, and the base offset of the first dirty segment whose
largest timestamp is within ``min.compaction.lag.ms`` of now -- then rounded down to a segment
boundary, as Kafka's ``calculateCleanableBytes`` does, so a round never rewrites a segment
that holds offsets it may not clean. A log's dirty ratio is dirty bytes / (clean + dirty
bytes); :meth:`LogCleanerManager.grab_filthiest_compacted_log` picks the log with the highest
ratio among those above ``min.cleanable.dirty.ratio``, or with a dirty segment whose
first batch is older than ``max.compaction.lag.ms``.

Cleaning states of a partition (Kafka's ``LogCleaningState``)::

    (none) --grab--> IN_PROGRESS --done--> (none)
                          |
                   abort_and_pause
                          v
                       ABORTED --done--> PAUSED(n) --resume (n times)--> (none)
    (none) --abort_and_pause--> PAUSED(1)

Thread-safe: every method takes the manager's lock; :meth:`abort_and_pause_cleaning` waits on
its condition until the cleaner thread lets go of the partition.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tierlog.errors import CorruptCheckpointError, LogCleaningAbortedError
from tierlog.log.checkpoint_file import OffsetCheckpointFile
from tierlog.log.log import Log
from tierlog.log.log_segment import wall_clock_ms

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT_FILENAME",
    "LogCleanerManager",
    "LogToClean",
    "OffsetsToClean",
    "cleanable_offsets",
]

log = logging.getLogger(__name__)

#: Per log dir: first dirty offset of every compacted partition (Kafka's name).
CLEANER_OFFSET_CHECKPOINT_FILENAME = "cleaner-offset-checkpoint"

TopicPartition = tuple[str, int]

_IN_PROGRESS = "LogCleaningInProgress"
_ABORTED = "LogCleaningAborted"


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    """The cleanable range of a log: [first dirty offset, first uncleanable offset), and
    whether the checkpointed first dirty offset was invalid and must be rewritten."""

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A log chosen for cleaning and its byte counts (Kafka's ``LogToClean``). Immutable."""

    topic_partition: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0


def cleanable_offsets(log_: Log, last_clean_offset: int | None, now: int) -> OffsetsToClean:
    """Kafka's ``LogCleanerManager.cleanableOffsets``, with the upper bound rounded down to a
    segment boundary (see the module docstring)."""
    log_start_offset = log_.log_start_offset
    checkpoint = log_start_offset if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < log_start_offset:
        if not log_.config.delete_enabled:
            log.warning(
                "%s: resetting the first dirty offset to the log start offset %d: the "
                "checkpointed offset %d is below it",
                log_,
                log_start_offset,
                checkpoint,
            )
        first_dirty, force = log_start_offset, True
    elif checkpoint > log_.log_end_offset:
        log.warning(
            "%s: the checkpointed first dirty offset %d is above the log end offset %d; "
            "resetting it to the log start offset %d",
            log_,
            checkpoint,
            log_.log_end_offset,
            log_start_offset,
        )
        first_dirty, force = log_start_offset, True
    else:
        first_dirty = checkpoint

    snapshot = log_.segments.snapshot()
    segments = snapshot.segments
    bounds = [log_.last_stable_offset, segments[-1].base_offset]
    min_lag = max(int(log_.config.get("min.compaction.lag.ms")), 0)
    if min_lag > 0:
        for segment in log_.non_active_log_segments_from(first_dirty):
            if segment.largest_timestamp > now - min_lag:
                bounds.append(segment.base_offset)
                break
    uncleanable = min(bounds)
    # Round down to the base offset of the segment holding it: only whole segments below.
    i = snapshot.floor_index(uncleanable)
    if i >= 0:
        segment = segments[i]
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if following is None or following > uncleanable:
            uncleanable = segment.base_offset
    return OffsetsToClean(first_dirty, max(first_dirty, uncleanable), force)


def max_compaction_delay(log_: Log, first_dirty_offset: int, now: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty segment is (0: not yet);
    Kafka's ``maxCompactionDelay``."""
    earliest = None
    for segment in log_.non_active_log_segments_from(first_dirty_offset):
        ts = segment.first_batch_timestamp()
        if ts is not None and ts > 0 and (earliest is None or ts < earliest):
            earliest = ts
    if earliest is None:
        return 0
    clean_until = now - max(int(log_.config.get("max.compaction.lag.ms")), 0)
    return clean_until - earliest if earliest < clean_until else 0


class LogCleanerManager:
    """Chooses logs to clean and keeps ``cleaner-offset-checkpoint`` (see the module docstring).

    Thread-safe.
    """

    def __init__(
        self,
        log_dirs: Iterable[Path],
        logs: Callable[[], Mapping[TopicPartition, Log]],
        *,
        time_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._logs = logs
        self._time_ms = time_ms
        self._checkpoints = {
            Path(d): OffsetCheckpointFile(Path(d) / CLEANER_OFFSET_CHECKPOINT_FILENAME)
            for d in log_dirs
        }
        self._lock = threading.RLock()
        self._paused = threading.Condition(self._lock)
        #: topic partition -> _IN_PROGRESS, _ABORTED or the pause count (an int >= 1).
        self._in_progress: dict[TopicPartition, str | int] = {}
        self._uncleanable: set[TopicPartition] = set()
        #: Cleanable ratio of the dirtiest log at the last grab (Kafka's max-dirty-percent).
        self.dirtiest_log_cleanable_ratio = 0.0
        #: When a cleaner thread last looked for work, ms (-1: never); Kafka's timeOfLastRun.
        self.time_of_last_run_ms = -1

    # ------------------------------------------------------------------ checkpoints

    def _read(self, checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read()
        except (OSError, CorruptCheckpointError) as e:
            log.error("cannot read %s: %s", checkpoint.path, e)
            return {}

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        """First dirty offset of every partition, over all log dirs."""
        with self._lock:
            out: dict[TopicPartition, int] = {}
            for checkpoint in self._checkpoints.values():
                out.update(self._read(checkpoint))
            return out

    def update_checkpoints(
        self,
        log_dir: Path,
        update: tuple[TopicPartition, int] | None = None,
        remove: TopicPartition | None = None,
    ) -> None:
        """Add, update or remove one partition's entry in ``log_dir``'s checkpoint; entries
        of partitions no longer in the log manager are dropped."""
        with self._lock:
            self._update_checkpoints(Path(log_dir), update, remove)

    def _update_checkpoints(
        self,
        log_dir: Path,
        update: tuple[TopicPartition, int] | None,
        remove: TopicPartition | None,
    ) -> None:
        checkpoint = self._checkpoints.get(log_dir)
        if checkpoint is None:
            return
        logs = self._logs()
        entries = {tp: o for tp, o in self._read(checkpoint).items() if tp in logs}
        if remove is not None:
            entries.pop(remove, None)
        if update is not None and update[0] in logs:
            entries[update[0]] = update[1]
        try:
            checkpoint.write(entries)
        except OSError as e:
            log.error("cannot write %s: %s", checkpoint.path, e)

    # ------------------------------------------------------------------ choosing

    def grab_filthiest_compacted_log(self, now: int | None = None) -> LogToClean | None:
        """The compacted log most in need of cleaning, marked in progress; None when no log
        reaches its ``min.cleanable.dirty.ratio`` or ``max.compaction.lag.ms``."""
        now = self._time_ms() if now is None else now
        with self._lock:
            self.time_of_last_run_ms = now
            last_clean: dict[TopicPartition, int] = {}
            for checkpoint in self._checkpoints.values():
                last_clean.update(self._read(checkpoint))
            candidates: list[LogToClean] = []
            for tp, lg in self._logs().items():
                if not lg.config.compact or lg.closed:
                    continue
                if tp in self._in_progress or tp in self._uncleanable:
                    continue
                offsets = cleanable_offsets(lg, last_clean.get(tp), now)
                if offsets.force_update_checkpoint:
                    self._update_checkpoints(lg.dir.parent, (tp, offsets.first_dirty_offset), None)
                ltc = _log_to_clean(tp, lg, offsets, now)
                if ltc.total_bytes > 0:
                    candidates.append(ltc)
            self.dirtiest_log_cleanable_ratio = max(
                (c.cleanable_ratio for c in candidates), default=0.0
            )
            cleanable = [
                c
                for c in candidates
                if (c.need_compaction_now and c.cleanable_bytes > 0)
                or (
                    c.cleanable_bytes > 0
                    and c.cleanable_ratio > float(c.log.config.get("min.cleanable.dirty.ratio"))
                )
            ]
            if not cleanable:
                return None
            filthiest = max(cleanable, key=lambda c: c.cleanable_ratio)
            self._in_progress[filthiest.topic_partition] = _IN_PROGRESS
            return filthiest

    # ------------------------------------------------------------------ states

    def done_cleaning(self, tp: TopicPartition, log_dir: Path, end_offset: int) -> None:
        """The cleaner let go of ``tp``: checkpoint ``end_offset`` unless it was aborted."""
        with self._lock:
            state = self._in_progress.get(tp)
            if state == _IN_PROGRESS:
                self._update_checkpoints(Path(log_dir), (tp, end_offset), None)
                del self._in_progress[tp]
            elif state == _ABORTED:
                self._in_progress[tp] = 1
                self._paused.notify_all()
            else:
                raise RuntimeError(f"cleaning state of {tp} is {state!r}, not in progress")

    def abort_and_pause_cleaning(self, tp: TopicPartition, timeout: float | None = None) -> None:
        """Stop a clean of ``tp`` in progress and keep it from starting again until
        :meth:`resume_cleaning`; waits until the cleaner let go of it."""
        with self._lock:
            state = self._in_progress.get(tp)
            if state is None:
                self._in_progress[tp] = 1
            elif state == _IN_PROGRESS:
                self._in_progress[tp] = _ABORTED
            elif isinstance(state, int):
                self._in_progress[tp] = state + 1
            self._paused.wait_for(lambda: isinstance(self._in_progress.get(tp), int), timeout)

    def resume_cleaning(self, tps: Iterable[TopicPartition]) -> None:
        """Undo one :meth:`abort_and_pause_cleaning` of each partition."""
        with self._lock:
            for tp in tps:
                state = self._in_progress.get(tp)
                if not isinstance(state, int):
                    raise RuntimeError(f"cleaning of {tp} is not paused ({state!r})")
                if state <= 1:
                    del self._in_progress[tp]
                else:
                    self._in_progress[tp] = state - 1

    def try_pause_cleaning(self, tp: TopicPartition) -> bool:
        """Keep the cleaner off ``tp`` until :meth:`resume_cleaning`, without waiting or
        aborting: False (nothing changed) when a clean of ``tp`` is in progress. The remote
        log manager pauses a tiered compacted log while it copies its segments or reads them
        for remote re-compaction (see :mod:`tierlog.tiered.remote_log_compactor`)."""
        with self._lock:
            state = self._in_progress.get(tp)
            if state is None:
                self._in_progress[tp] = 1
                return True
            if isinstance(state, int):
                self._in_progress[tp] = state + 1
                return True
            return False

    def first_dirty_offset(self, tp: TopicPartition) -> int | None:
        """``tp``'s checkpointed first dirty offset (None: never cleaned): every offset below
        it has been cleaned at least once."""
        with self._lock:
            for checkpoint in self._checkpoints.values():
                offset = self._read(checkpoint).get(tp)
                if offset is not None:
                    return offset
            return None

    def abort_cleaning(self, tp: TopicPartition, timeout: float | None = None) -> None:
        """Stop a clean of ``tp`` in progress (it may start again later)."""
        with self._lock:
            self.abort_and_pause_cleaning(tp, timeout)
            self.resume_cleaning([tp])

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        """Raises:
        LogCleaningAbortedError: the clean of ``tp`` was aborted.
        """
        with self._lock:
            if self._in_progress.get(tp) == _ABORTED:
                raise LogCleaningAbortedError(f"cleaning of {tp} was aborted")

    def mark_partition_uncleanable(self, tp: TopicPartition) -> None:
        """Never pick ``tp`` again (an unexpected error while cleaning it)."""
        with self._lock:
            self._uncleanable.add(tp)

    def time_since_last_run_ms(self) -> int:
        """Since a cleaner thread last looked for work (0: never); Kafka's
        time-since-last-run-ms."""
        last = self.time_of_last_run_ms
        return max(0, self._time_ms() - last) if last >= 0 else 0

    def uncleanable_by_log_dir(self) -> dict[Path, tuple[int, int]]:
        """Per log dir: (uncleanable partitions, their bytes); Kafka's
        uncleanable-partitions-count and uncleanable-bytes. Every log dir appears."""
        with self._lock:
            out = {d: (0, 0) for d in self._checkpoints}
            logs = self._logs()
            for tp in self._uncleanable:
                lg = logs.get(tp)
                if lg is None:
                    continue
                n, b = out.get(lg.dir.parent, (0, 0))
                out[lg.dir.parent] = (n + 1, b + lg.segments.size_in_bytes())
            return out

    def uncleanable_partitions(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._uncleanable)

    def cleaning_state(self, tp: TopicPartition) -> str | int | None:
        with self._lock:
            return self._in_progress.get(tp)


def _log_to_clean(tp: TopicPartition, lg: Log, offsets: OffsetsToClean, now: int) -> LogToClean:
    first_dirty = offsets.first_dirty_offset
    first_uncleanable = offsets.first_uncleanable_dirty_offset
    clean_bytes = sum(s.size for s in lg.segments.values() if s.base_offset < first_dirty)
    cleanable_bytes = sum(
        s.size for s in lg.segments.values_between(first_dirty, first_uncleanable)
    )
    return LogToClean(
        tp,
        lg,
        first_dirty,
        first_uncleanable,
        clean_bytes,
        cleanable_bytes,
        max_compaction_delay(lg, first_dirty, now) > 0,
    )
