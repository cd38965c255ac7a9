"""The parts of Kafka's ``RemoteLogManager`` its tasks share: the broker settings, the
leader-epoch lineage checks, the periodic tasks and their scheduler (Kafka's ``RLMTask`` and
the scheduled executor), what is kept per partition, and :class:`RemoteLogManagerCore`, the
state and helpers the copy task (:mod:`.remote_log_copy_task`), the expiration task
(:mod:`.remote_log_expiration_task`), the remote compactor (:mod:`.remote_log_compactor`) and
the manager itself (:mod:`.remote_log_manager`) all use.

Thread-safe (each class says how).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    InvalidRemoteStateTransitionError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tierlog.tiered.metrics import PartitionMetrics, RemoteStorageMetrics
from tierlog.tiered.quota import UNLIMITED, TokenBucket
from tierlog.tiered.remote_index_cache import RemoteIndexCache
from tierlog.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState
from tierlog.tiered.storage.remote_storage_manager import RemoteStorageManager

if TYPE_CHECKING:
    from tierlog.log.log import Log

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
    #: tierlog: blocks of remote data read ahead in parallel (remote_segment_prefetcher); 0
    #: (here): one ranged read per read; the broker's default turns it on.
    remote_log_reader_prefetch_max_bytes: int = 0
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
    #: tierlog: offset map memory of a remote re-compaction pass (one pass at a time per
    #: partition; see remote_log_compactor).
    remote_log_compaction_dedupe_buffer_size: int = 32 * 1024 * 1024

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
    #: What other parts keep per partition (the remote compactor's pass state).
    extra: dict[str, Any] = field(default_factory=dict)


class _CopyAborted(Exception):
    """The copy task was cancelled or lost leadership mid-run."""


# ====================================================================== shared state and helpers


class RemoteLogManagerCore:
    """What the manager's tasks share: its plugins, settings and per-partition states, and
    the helpers more than one task uses. Thread-safe."""

    config: RemoteLogManagerConfig
    rsm: RemoteStorageManager
    rlmm: RemoteLogMetadataManager
    index_cache: RemoteIndexCache
    metrics: RemoteStorageMetrics
    copy_quota: TokenBucket
    broker_id: int
    _log_lookup: Callable[[TopicIdPartition], Log | None]
    _time_ms: Callable[[], int]

    def _state(self, tp: TopicIdPartition) -> _PartitionState | None:
        raise NotImplementedError

    def _compact_remote_log(self, st: _PartitionState, lg: Log, task: _Task) -> None:
        raise NotImplementedError

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
            log.info("deleted remote segment %d-%d of %s (%s, %d bytes) from remote storage",
                     metadata.start_offset, metadata.end_offset, tp,
                     metadata.remote_log_segment_id, metadata.segment_size_in_bytes)  # fmt: skip
        except Exception as e:
            m.delete_errors.inc()
            if isinstance(e, RemoteStorageError):
                raise
            raise RemoteStorageError(f"deleting {metadata.remote_log_segment_id}: {e}") from e

    def _update_size_metrics(self, st: _PartitionState, lg: Log) -> None:
        segments = self.rlmm.list_remote_log_segments(st.tp)
        st.metrics.metadata_count.set(len(segments))
        st.metrics.remote_log_size.set(
            sum(m.segment_size_in_bytes for m in segments if m.state == _S.COPY_SEGMENT_FINISHED)
        )

    def _backoff_s(self, failures: int) -> float:
        c = self.config
        base = min(
            c.remote_log_manager_task_retry_backoff_ms * (1 << min(failures - 1, 30)),
            c.remote_log_manager_task_retry_backoff_max_ms,
        )
        jitter = c.remote_log_manager_task_retry_jitter
        return base * random.uniform(1 - jitter, 1 + jitter) / 1000


def _lineage(lg: Log) -> dict[int, int]:
    """The partition's leader-epoch lineage, without epochs that hold no record."""
    return build_filtered_leader_epoch_map(
        {e.epoch: e.start_offset for e in lg.leader_epoch_cache.epoch_entries()}
    )
