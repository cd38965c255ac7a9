"""Kafka's ``RemoteLogManager``: copies rolled segments to remote storage, expires them, and
serves reads and timestamp lookups from them.

Per partition with ``remote.storage.enable=true`` this broker leads, two periodic tasks run
every ``remote.log.manager.task.interval.ms`` (the first run right away), each on its own
bounded pool (``remote.log.manager.copier.thread.pool.size`` /
``remote.log.manager.expiration.thread.pool.size``); a partition it follows gets a task that
only tracks the highest offset already in remote storage, so its local deletion is gated too.

Copy (leader, unless ``remote.log.copy.disable``), oldest first, from
``max(highest copied offset + 1, log start offset)``: each rolled segment whose successor starts
at or below the last stable offset (the active segment never; the log rolls it once it breaches
local retention so it becomes copyable)::

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

Expiration (leader): total retention over local + remote, as Kafka's RLMExpirationTask --
size breach = (local bytes not yet copied + COPY_SEGMENT_FINISHED bytes in the leader-epoch
lineage) - ``retention.bytes``; time breach = ``max_timestamp <= now - retention.ms``; a
segment ending below the log start offset (DeleteRecords) goes too. The new log start offset is
applied before anything is deleted. Segments being copied are never expired. Segments whose
epochs all precede the lineage (unclean election leftovers) are deleted (**tierlog:** only when
*all* their epochs precede it; Kafka deletes a segment as soon as one epoch does). Dangling
COPY_SEGMENT_STARTED segments (a crash or a failed copy of an earlier run or broker) and
dangling DELETE_SEGMENT_STARTED ones are deleted again, so a restart converges: no STARTED
state left, no orphan objects.

Local deletion gate: the manager advances ``Log.update_highest_offset_in_remote_storage``
(leader: after each COPY_SEGMENT_FINISHED; follower: from the metadata); the Log deletes a
local segment only when its last offset <= that offset, or when it lies below the log start
offset (Kafka's ``isSegmentEligibleForDeletion``).

Reads: :meth:`RemoteLogManager.read` (one partition, blocking), :meth:`read_async` (a
``concurrent.futures.Future`` from the ``remote.log.reader.threads`` pool; asyncio callers
``await asyncio.wrap_future(...)``) and :meth:`read_many` (**tierlog:** every remote
partition of a fetch at once, within ``remote.fetch.max.wait.ms``). A cold read costs exactly
two remote requests: one ``fetch_indexes`` (index cache miss) and one ranged
``fetch_log_segment`` (see :mod:`tierlog.tiered.remote_log_reader`).

Thread-safe.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    InvalidRemoteStateTransitionError,
    OffsetOutOfRange,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tierlog.log import log_file_utils as lfu
from tierlog.log.checkpoint_file import encode_leader_epoch_checkpoint
from tierlog.log.log_segment import wall_clock_ms
from tierlog.log.producer_state_manager import encode_snapshot
from tierlog.tiered.metrics import PartitionMetrics, RemoteStorageMetrics
from tierlog.tiered.quota import UNLIMITED, TokenBucket
from tierlog.tiered.remote_index_cache import RemoteIndexCache
from tierlog.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from tierlog.tiered.remote_log_reader import (
    RemoteLogReader,
    RemoteLogReadResult,
    RemoteLogReads,
    RemoteStorageFetchInfo,
)
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
)
from tierlog.tiered.storage.remote_storage_manager import LogSegmentData, RemoteStorageManager

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.log.log_segment import LogSegment

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState


# ====================================================================== configuration


@dataclass(frozen=True, slots=True)
class RemoteLogManagerConfig:
    """The broker's ``remote.*`` settings the manager uses; field names are the attribute
    names of :class:`tierlog.server.kafka_config.KafkaConfig` (dots as underscores)."""

    remote_log_manager_task_interval_ms: int = 30_000
    remote_log_reader_threads: int = 10
    remote_log_reader_max_pending_tasks: int = 100
    remote_log_manager_copier_thread_pool_size: int = 10
    remote_log_manager_expiration_thread_pool_size: int = 10
    remote_fetch_max_wait_ms: int = 500
    remote_log_index_file_cache_total_size_bytes: int = 1 << 30
    remote_log_manager_copy_max_bytes_per_second: int = UNLIMITED
    remote_log_manager_fetch_max_bytes_per_second: int = UNLIMITED
    remote_log_metadata_custom_metadata_max_bytes: int = 128
    remote_log_manager_task_retry_backoff_ms: int = 500
    remote_log_manager_task_retry_backoff_max_ms: int = 30_000
    remote_log_manager_task_retry_jitter: float = 0.2

    @classmethod
    def from_broker_config(cls, config: object) -> RemoteLogManagerConfig:
        """Read every field present as an attribute of ``config`` (a KafkaConfig)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = getattr(config, f.name, None)
            if value is not None:
                values[f.name] = value
        return cls(**values)


# ====================================================================== leader epoch lineage


def build_filtered_leader_epoch_map(epochs: Mapping[int, int]) -> dict[int, int]:
    """``{epoch: start offset}`` sorted by epoch, without the epochs that hold no record
    (an epoch starting where the next one starts). Kafka's ``buildFilteredLeaderEpochMap``."""
    items = sorted(epochs.items())
    return {e: o for i, (e, o) in enumerate(items) if i + 1 == len(items) or items[i + 1][1] != o}


def is_remote_segment_within_leader_epochs(
    metadata: RemoteLogSegmentMetadata, log_end_offset: int, lineage: Mapping[int, int]
) -> bool:
    """Whether a remote segment belongs to the partition's leader-epoch lineage (Kafka's
    ``isRemoteSegmentWithinLeaderEpochs``; ``lineage`` as from
    :func:`build_filtered_leader_epoch_map`, non-empty).

    The segment's first epoch in the lineage may start anywhere in that epoch (only the first
    lineage epoch may start earlier: the log start offset cut it); every later epoch of the
    segment must start where the lineage says; the segment must end before the lineage's next
    epoch and before the log end offset.
    """
    segment = build_filtered_leader_epoch_map(metadata.segment_leader_epochs)
    if not segment or not lineage:
        return False
    epochs = sorted(lineage)
    seg_epochs = sorted(segment)
    seg_last = seg_epochs[-1]
    if seg_last < epochs[0] or seg_last > epochs[-1]:
        return False
    seg_first = next((e for e in seg_epochs if e >= epochs[0]), None)
    if seg_first is None:
        return False
    for i, epoch in enumerate(seg_epochs):
        if epoch < seg_first:
            continue
        if epoch not in lineage:
            return False
        if epoch == seg_first and epoch != epochs[0] and segment[epoch] < lineage[epoch]:
            return False
        j = epochs.index(epoch)
        if epoch == seg_last:
            if j + 1 < len(epochs) and metadata.end_offset > lineage[epochs[j + 1]] - 1:
                return False
        else:
            nxt = seg_epochs[i + 1]
            if j + 1 >= len(epochs) or (epochs[j + 1], lineage[epochs[j + 1]]) != (
                nxt,
                segment[nxt],
            ):
                return False
    return metadata.end_offset < log_end_offset


# ====================================================================== tasks and scheduling


class _Task:
    """A periodic task; ``fn`` returns an earlier next-run delay in seconds, or None.

    One run at a time (``run_once`` holds a lock); :attr:`cancelled` also interrupts quota
    waits of a running copy.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[[_Task], float | None],
        interval_s: float,
        executor: ThreadPoolExecutor,
    ) -> None:
        self.name = name
        self.fn = fn
        self.interval_s = interval_s
        self.executor = executor
        self.cancelled = threading.Event()
        self._lock = threading.Lock()

    def run_once(self) -> float | None:
        with self._lock:
            if self.cancelled.is_set():
                return None
            return self.fn(self)

    def cancel_and_wait(self, timeout: float | None = None) -> None:
        """Cancel, then wait (up to ``timeout``) for a run in progress to end."""
        self.cancelled.set()
        if self._lock.acquire(timeout=-1 if timeout is None else timeout):
            self._lock.release()

    def __repr__(self) -> str:
        return f"_Task({self.name})"


class _Scheduler:
    """Kafka's fixed-delay scheduling on a heap: one daemon thread hands due tasks to their
    pools; each is scheduled again when its run ends (never overlapping itself)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Task]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="remote-log-scheduler", daemon=True)
        self._thread.start()

    def schedule(self, task: _Task, delay_s: float) -> None:
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), task))
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(None if not self._heap else self._heap[0][0] - now)
                if self._stopped:
                    return
                _, _, task = heapq.heappop(self._heap)
            if task.cancelled.is_set():
                continue
            try:
                task.executor.submit(self._run, task)
            except RuntimeError:  # pool shut down: we are closing
                return

    def _run(self, task: _Task) -> None:
        delay: float | None = None
        try:
            delay = task.run_once()
        except Exception:
            log.exception("remote log manager task %s failed", task.name)
        if not task.cancelled.is_set():
            self.schedule(task, task.interval_s if delay is None else min(delay, task.interval_s))

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify_all()
        self._thread.join(timeout=5)


@dataclass(eq=False)
class _PartitionState:
    """What the manager keeps per partition (Kafka's RLMTask fields + the log's
    ``highestOffsetInRemoteStorage``)."""

    tp: TopicIdPartition
    metrics: PartitionMetrics
    leader: bool = False
    #: Highest offset copied, as the copy task knows it (None: look it up next run).
    copied_offset: int | None = None
    #: Kafka's ``UnifiedLog.highestOffsetInRemoteStorage``: gates local deletion.
    highest_remote_offset: int = -1
    being_copied: set[uuid.UUID] = field(default_factory=set)
    copy_failures: int = 0
    tasks: list[_Task] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _CopyAborted(Exception):
    """The copy task was cancelled or lost leadership mid-run."""


# ====================================================================== the manager


class RemoteLogManager(RemoteLogReads):
    """Kafka's RemoteLogManager (see the module docstring). Thread-safe.

    The read side (:meth:`read`, :meth:`read_async`, :meth:`read_many`,
    :meth:`find_offset_by_timestamp`) is inherited from
    :class:`~tierlog.tiered.remote_log_reader.RemoteLogReads`.

    Args:
        config: the broker's remote settings.
        rsm: remote storage.
        rlmm: remote log metadata.
        index_cache: ``RemoteIndexCache(rsm, <log.dir>/remote-log-index-cache, ...)``.
        log_lookup: the partition's Log on this broker, or None.
        broker_id: written into the metadata events.
        time_ms: wall clock in ms (event timestamps, retention).
        metrics: where to count (a fresh :class:`RemoteStorageMetrics` by default).
        start_scheduler: False runs no periodic task; call :meth:`run_copy`,
            :meth:`run_expiration`, :meth:`run_follower` (tests, tools).
    """

    def __init__(
        self,
        config: RemoteLogManagerConfig,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        index_cache: RemoteIndexCache,
        log_lookup: Callable[[TopicIdPartition], Log | None],
        broker_id: int,
        *,
        time_ms: Callable[[], int] = wall_clock_ms,
        metrics: RemoteStorageMetrics | None = None,
        start_scheduler: bool = True,
    ) -> None:
        self.config = config
        self.rsm = rsm
        self.rlmm = rlmm
        self.index_cache = index_cache
        self._log_lookup = log_lookup
        self.broker_id = broker_id
        self._time_ms = time_ms
        self.metrics = metrics if metrics is not None else RemoteStorageMetrics()
        self._copier_pool = ThreadPoolExecutor(
            config.remote_log_manager_copier_thread_pool_size,
            thread_name_prefix="remote-log-copier",
        )
        self._expiration_pool = ThreadPoolExecutor(
            config.remote_log_manager_expiration_thread_pool_size,
            thread_name_prefix="remote-log-expiration",
        )
        self._reader = RemoteLogReader(
            config.remote_log_reader_threads,
            config.remote_log_reader_max_pending_tasks,
            self.metrics,
        )
        self.copy_quota = TokenBucket(config.remote_log_manager_copy_max_bytes_per_second)
        self.fetch_quota = TokenBucket(config.remote_log_manager_fetch_max_bytes_per_second)
        self._scheduler = _Scheduler() if start_scheduler else None
        self._lock = threading.RLock()
        self._partitions: dict[TopicIdPartition, _PartitionState] = {}
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    def on_leadership_change(
        self, leaders: Set[TopicIdPartition], followers: Set[TopicIdPartition]
    ) -> None:
        """This broker now leads ``leaders`` and follows ``followers``.

        Partitions whose log is missing or has remote storage disabled are ignored. Leaders
        get a copy task and an expiration task, followers a task that tracks the highest
        offset in remote storage (which gates the log's local deletion). Call it again after
        a topic's ``remote.storage.enable`` turns on.

        Raises:
            RemoteStorageError: the metadata manager could not take the partitions.
        """

        def tiered(tps: Iterable[TopicIdPartition]) -> dict[TopicIdPartition, Log]:
            out = {}
            for tp in tps:
                lg = self._log_lookup(tp)
                if lg is not None and lg.remote_log_enabled:
                    out[tp] = lg
            return out

        leader_logs, follower_logs = tiered(leaders), tiered(followers)
        if not leader_logs and not follower_logs:
            return
        self.rlmm.on_partition_leadership_changes(set(leader_logs), set(follower_logs))
        with self._lock:
            if self._closed:
                raise RemoteStorageError("the remote log manager is closed")
            for logs, leader in ((follower_logs, False), (leader_logs, True)):
                for tp, lg in logs.items():
                    self._become(tp, lg, leader)

    def _become(self, tp: TopicIdPartition, lg: Log, leader: bool) -> None:
        st = self._partitions.get(tp)
        if st is None:
            st = self._partitions[tp] = _PartitionState(tp, self.metrics.partition(tp))
        elif st.leader == leader and st.tasks:
            return
        for task in st.tasks:
            task.cancelled.set()
        st.leader = leader
        st.copied_offset = None
        interval = self.config.remote_log_manager_task_interval_ms / 1000
        if leader:
            st.tasks = [
                _Task(f"copy-{tp}", partial(self._copy_task, st), interval, self._copier_pool),
                _Task(f"expire-{tp}", partial(self._expiration_task, st), interval,
                      self._expiration_pool),
            ]  # fmt: skip
        else:
            st.tasks = [
                _Task(f"follow-{tp}", partial(self._follower_task, st), interval,
                      self._expiration_pool),
            ]  # fmt: skip
        try:
            self._set_highest_remote_offset(st, lg, self._find_highest_remote_offset(tp, lg))
        except RemoteStorageError as e:  # metadata still loading: the tasks find it later
            log.info("%s: highest offset in remote storage not known yet: %s", tp, e)
        if self._scheduler is not None:
            for task in st.tasks:
                self._scheduler.schedule(task, 0)

    def stop_partitions(self, tps: Iterable[TopicIdPartition], delete: bool) -> None:
        """Stop managing partitions (they moved away, or their topic is deleted).

        Cancels their tasks (waiting for a run in progress). With ``delete`` every remote
        segment of each partition is deleted: DELETE_PARTITION_MARKED ->
        DELETE_PARTITION_STARTED -> delete every segment's objects ->
        DELETE_PARTITION_FINISHED. Blocking; idempotent (call again after a failure or a
        restart to finish a deletion).

        Raises:
            RemoteStorageError: a deletion failed (the partition stays
                DELETE_PARTITION_STARTED; call again).
        """
        tps = list(tps)
        with self._lock:
            states = [self._partitions.pop(tp, None) for tp in tps]
        for st in states:
            if st is not None:
                for task in st.tasks:
                    task.cancel_and_wait()
        errors: list[str] = []
        if delete:
            for tp, st in zip(tps, states, strict=True):
                try:
                    self._delete_remote_partition(tp, st)
                except RemoteStorageError as e:
                    errors.append(f"{tp}: {e}")
        for tp in tps:
            self.metrics.remove_partition(tp)
        self.rlmm.on_stop_partitions(set(tps))
        if errors:
            raise RemoteStorageError("remote partition deletion failed: " + "; ".join(errors))

    def close(self) -> None:
        """Cancel every task, stop the pools and close the index cache, the reader and the
        plugins. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            states = list(self._partitions.values())
        for st in states:
            for task in st.tasks:
                task.cancelled.set()
        if self._scheduler is not None:
            self._scheduler.close()
        self._reader.close(wait=False)
        self._copier_pool.shutdown(wait=True, cancel_futures=True)
        self._expiration_pool.shutdown(wait=True, cancel_futures=True)
        self.index_cache.close()
        for plugin in (self.rsm, self.rlmm):
            try:
                plugin.close()
            except Exception as e:
                log.warning("closing %s failed: %s", type(plugin).__name__, e)

    # ------------------------------------------------------------------ state queries

    def _state(self, tp: TopicIdPartition) -> _PartitionState | None:
        with self._lock:
            return self._partitions.get(tp)

    def highest_offset_in_remote_storage(self, tp: TopicIdPartition) -> int:
        """The highest offset copied to remote storage (-1: none). ListOffsets -5 (latest
        tiered) answers this."""
        st = self._state(tp)
        if st is not None:
            return st.highest_remote_offset
        lg = self._log_lookup(tp)
        return -1 if lg is None else self._find_highest_remote_offset(tp, lg)

    def remote_log_size(self, tp: TopicIdPartition) -> int:
        """Bytes of the partition's COPY_SEGMENT_FINISHED segments in its epoch lineage."""
        lg = self._log_lookup(tp)
        if lg is None:
            return sum(
                m.segment_size_in_bytes
                for m in self.rlmm.list_remote_log_segments(tp)
                if m.state == _S.COPY_SEGMENT_FINISHED
            )
        lineage = _lineage(lg)
        return sum(m.segment_size_in_bytes for m in self._finished_in_lineage(tp, lg, lineage))

    def earliest_offset(self, tp: TopicIdPartition) -> int | None:
        """Start offset of the earliest COPY_SEGMENT_FINISHED segment in the lineage."""
        lg = self._log_lookup(tp)
        if lg is None:
            return None
        segments = self._finished_in_lineage(tp, lg, _lineage(lg))
        return min((m.start_offset for m in segments), default=None)

    def is_remote_fetch_quota_exceeded(self) -> bool:
        return self.fetch_quota.is_quota_exceeded()

    @staticmethod
    def needs_remote_read(lg: Log, offset: int) -> bool:
        """Whether a fetch of ``offset`` must be served from remote storage: remote storage
        is on and the offset lies in [log start offset, local log start offset)."""
        return lg.remote_log_enabled and lg.log_start_offset <= offset < lg.local_log_start_offset

    def _finished_in_lineage(
        self, tp: TopicIdPartition, lg: Log, lineage: Mapping[int, int]
    ) -> list[RemoteLogSegmentMetadata]:
        seen: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        leo = lg.log_end_offset
        for epoch in lineage:
            for m in self.rlmm.list_remote_log_segments(tp, epoch):
                sid = m.remote_log_segment_id.id
                if (
                    m.state == _S.COPY_SEGMENT_FINISHED
                    and sid not in seen
                    and is_remote_segment_within_leader_epochs(m, leo, lineage)
                ):
                    seen[sid] = m
        return list(seen.values())

    def _find_highest_remote_offset(self, tp: TopicIdPartition, lg: Log) -> int:
        """Kafka's ``findHighestRemoteOffset``: from the latest epoch back, the highest offset
        of that epoch in remote storage, bounded by where the epoch ends in this log."""
        entries = lg.leader_epoch_cache.epoch_entries()
        for i in range(len(entries) - 1, -1, -1):
            highest = self.rlmm.highest_offset_for_epoch(tp, entries[i].epoch)
            if highest is not None:
                end = entries[i + 1].start_offset if i + 1 < len(entries) else lg.log_end_offset
                return min(highest, end - 1)
        return -1

    @staticmethod
    def _set_highest_remote_offset(st: _PartitionState, lg: Log, offset: int) -> None:
        """Kafka's ``log.updateHighestOffsetInRemoteStorage``: only grows; gates local
        deletion in the Log."""
        if offset > st.highest_remote_offset:
            st.highest_remote_offset = offset
        lg.update_highest_offset_in_remote_storage(st.highest_remote_offset)

    # ------------------------------------------------------------------ manual runs

    def _run_tasks(self, tp: TopicIdPartition, prefix: str) -> None:
        st = self._state(tp)
        if st is None:
            raise RemoteResourceNotFoundError(f"{tp} is not managed by the remote log manager")
        for task in st.tasks:
            if task.name.startswith(prefix):
                task.run_once()

    def run_copy(self, tp: TopicIdPartition) -> None:
        """Run the copy task of a leader partition now (ignores the retry backoff)."""
        self._run_tasks(tp, "copy-")

    def run_expiration(self, tp: TopicIdPartition) -> None:
        """Run the expiration task of a leader partition now."""
        self._run_tasks(tp, "expire-")

    def run_follower(self, tp: TopicIdPartition) -> None:
        """Run the follower task (highest remote offset tracking) of a partition now."""
        self._run_tasks(tp, "follow-")

    # ================================================================== copy

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

    def _backoff_s(self, failures: int) -> float:
        c = self.config
        base = min(
            c.remote_log_manager_task_retry_backoff_ms * (1 << min(failures - 1, 30)),
            c.remote_log_manager_task_retry_backoff_max_ms,
        )
        jitter = c.remote_log_manager_task_retry_jitter
        return base * random.uniform(1 - jitter, 1 + jitter) / 1000

    def _copy_log_segments_to_remote(self, st: _PartitionState, lg: Log, task: _Task) -> None:
        if st.copied_offset is None:
            st.copied_offset = self._find_highest_remote_offset(st.tp, lg)
            self._set_highest_remote_offset(st, lg, st.copied_offset)
        lso = lg.last_stable_offset
        copied = st.copied_offset
        candidates: list[tuple[LogSegment, int]] = []
        if lso > 0 and copied < lso:
            from_offset = max(copied + 1, lg.log_start_offset)
            segments = lg.segments.values()
            for prev, nxt in itertools.pairwise(segments):
                if nxt.base_offset <= from_offset:
                    continue  # prev holds nothing at or above from_offset
                if nxt.base_offset <= lso:
                    candidates.append((prev, nxt.base_offset))
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
        metadata = RemoteLogSegmentMetadata(
            remote_log_segment_id=segment_id,
            start_offset=segment.base_offset,
            end_offset=end_offset,
            max_timestamp_ms=segment.largest_timestamp,
            broker_id=self.broker_id,
            event_timestamp_ms=self._time_ms(),
            segment_size_in_bytes=segment.size,
            segment_leader_epochs=epochs,
        )
        m = st.metrics
        with st.lock:
            st.being_copied.add(segment_id.id)  # before STARTED: expiration must skip it
        tmp_dir: tempfile.TemporaryDirectory[str] | None = None
        try:
            self.rlmm.add_remote_log_segment_metadata(metadata)
            snapshot = lg.producer_state_manager.snapshot_file_for(next_base)
            if snapshot is None or not snapshot.exists():
                # No snapshot at the boundary (e.g. lost in a crash): ship an empty one, as a
                # follower restoring from this segment then rebuilds producer state itself.
                log.warning("%s: no producer snapshot at %d; uploading an empty one", tp, next_base)
                tmp_dir = tempfile.TemporaryDirectory(prefix="tierlog-rlm-")
                snapshot = Path(tmp_dir.name) / lfu.producer_snapshot_file(Path(), next_base).name
                snapshot.write_bytes(encode_snapshot([]))
            txn = lfu.transaction_index_file(lg.dir, segment.base_offset)
            data = LogSegmentData(
                log_segment=segment.log.path,
                offset_index=segment.offset_index.path,
                time_index=segment.time_index.path,
                transaction_index=txn if txn.exists() else None,
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

    # ================================================================== deletion

    def _update_state(
        self, metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
    ) -> None:
        self.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                metadata.remote_log_segment_id,
                self._time_ms(),
                metadata.custom_metadata,
                state,
                self.broker_id,
            )
        )

    def _delete_remote_log_segment(
        self, tp: TopicIdPartition, m: PartitionMetrics, metadata: RemoteLogSegmentMetadata
    ) -> None:
        """DELETE_SEGMENT_STARTED -> delete objects -> DELETE_SEGMENT_FINISHED. Idempotent.

        Raises:
            RemoteStorageError: a step failed.
        """
        m.delete_requests.inc()
        try:
            if metadata.state != _S.DELETE_SEGMENT_STARTED:
                try:
                    self._update_state(metadata, _S.DELETE_SEGMENT_STARTED)
                except RemoteResourceNotFoundError:
                    pass  # forgotten already (deleted by someone else); objects may remain
            self.index_cache.remove(metadata.remote_log_segment_id.id)
            self.rsm.delete_log_segment_data(metadata)
            try:
                self._update_state(metadata, _S.DELETE_SEGMENT_FINISHED)
            except (RemoteResourceNotFoundError, InvalidRemoteStateTransitionError):
                pass
        except Exception as e:
            m.delete_errors.inc()
            if isinstance(e, RemoteStorageError):
                raise
            raise RemoteStorageError(f"deleting {metadata.remote_log_segment_id}: {e}") from e

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

    # ================================================================== expiration

    def _expiration_task(self, st: _PartitionState, task: _Task) -> float | None:
        lg = self._log_lookup(st.tp)
        if lg is None or not st.leader:
            return None
        self._cleanup_expired_remote_log_segments(st, lg, task)
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
        # Dangling COPY_SEGMENT_STARTED (not ours in flight) and DELETE_SEGMENT_STARTED.
        for md in all_segments:
            sid = md.remote_log_segment_id.id
            with st.lock:
                copying = sid in st.being_copied
            if not copying and md.state in (_S.COPY_SEGMENT_STARTED, _S.DELETE_SEGMENT_STARTED):
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

    def _update_size_metrics(self, st: _PartitionState, lg: Log) -> None:
        segments = self.rlmm.list_remote_log_segments(st.tp)
        st.metrics.metadata_count.set(len(segments))
        st.metrics.remote_log_size.set(
            sum(m.segment_size_in_bytes for m in segments if m.state == _S.COPY_SEGMENT_FINISHED)
        )

    # ================================================================== follower

    def _follower_task(self, st: _PartitionState, task: _Task) -> float | None:
        lg = self._log_lookup(st.tp)
        if lg is None or st.leader:
            return None
        self._set_highest_remote_offset(st, lg, self._find_highest_remote_offset(st.tp, lg))
        self._update_size_metrics(st, lg)
        return None

    # ================================================================== reads

    def _partition_metrics(self, tp: TopicIdPartition) -> PartitionMetrics:
        st = self._state(tp)
        return st.metrics if st is not None else self.metrics.partition(tp)


def _lineage(lg: Log) -> dict[int, int]:
    """The partition's leader-epoch lineage, without epochs that hold no record."""
    return build_filtered_leader_epoch_map(
        {e.epoch: e.start_offset for e in lg.leader_epoch_cache.epoch_entries()}
    )


__all__ = [
    "RemoteLogManager",
    "RemoteLogManagerConfig",
    "RemoteLogReadResult",
    "RemoteStorageFetchInfo",
    "build_filtered_leader_epoch_map",
    "is_remote_segment_within_leader_epochs",
]
