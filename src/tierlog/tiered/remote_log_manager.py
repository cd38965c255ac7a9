"""Kafka's ``RemoteLogManager``: copies rolled segments to remote storage, expires them, and
serves reads and timestamp lookups from them.

Per partition with ``remote.storage.enable=true`` this broker leads, two periodic tasks run
every ``remote.log.manager.task.interval.ms`` (the first run right away), each on its own
bounded pool (``remote.log.manager.copier.thread.pool.size`` /
``remote.log.manager.expiration.thread.pool.size``): the copy task
(:mod:`.remote_log_copy_task`) and the expiration task (:mod:`.remote_log_expiration_task`,
which on compacted topics also runs the remote compactor, :mod:`.remote_log_compactor`). A
partition it follows gets a task that only tracks the highest offset already in remote
storage, so its local deletion is gated too. Tasks, scheduling and the state they share live
in :mod:`.remote_log_tasks`.

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

import logging
import threading
from collections.abc import Callable, Iterable, Set
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING

from tierlog.errors import RemoteResourceNotFoundError, RemoteStorageError
from tierlog.log.log_segment import wall_clock_ms
from tierlog.tiered.metrics import PartitionMetrics, RemoteStorageMetrics
from tierlog.tiered.quota import TokenBucket
from tierlog.tiered.remote_index_cache import RemoteIndexCache
from tierlog.tiered.remote_log_compactor import CleanerCoordination, RLMCompactor
from tierlog.tiered.remote_log_copy_task import RLMCopyTask
from tierlog.tiered.remote_log_expiration_task import RLMExpirationTask
from tierlog.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from tierlog.tiered.remote_log_reader import (
    RemoteLogReader,
    RemoteLogReadResult,
    RemoteLogReads,
    RemoteStorageFetchInfo,
)
from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState
from tierlog.tiered.remote_log_tasks import (
    RemoteLogManagerConfig,
    _lineage,
    _PartitionState,
    _Scheduler,
    _Task,
    build_filtered_leader_epoch_map,
    is_remote_segment_within_leader_epochs,
)
from tierlog.tiered.remote_segment_prefetcher import RemoteSegmentPrefetcher
from tierlog.tiered.storage.pyarrow_remote_storage_manager import PyArrowRemoteStorageManager
from tierlog.tiered.storage.remote_storage_manager import RemoteStorageManager

if TYPE_CHECKING:
    from tierlog.log.log import Log

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState


# ====================================================================== the manager


class RemoteLogManager(RLMCopyTask, RLMExpirationTask, RLMCompactor, RemoteLogReads):
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
        cleaner_coordination: the log cleaner's manager, when the broker runs one: compacted
            topics are copied only once cleaned, and re-compacted remotely (see
            :mod:`.remote_log_compactor`); without it their segments are not copied.
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
        cleaner_coordination: Callable[[], CleanerCoordination | None] | None = None,
        metadata_never_waits_on_loop: bool = True,
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
        #: Fetches read the store on the event loop, as local segments: a local directory
        #: whose plugin reads it as is (``file://``; a subclass or wrapper may not be fast),
        #: and a metadata manager whose lock is never held while waiting on the event loop
        #: (``metadata_never_waits_on_loop``). In a cluster it is: a publish holds it until
        #: the metadata partition's leader answered, a request the event loop sends, so a
        #: metadata lookup on the loop would wait for itself until the publish timed out.
        self.reads_inline = (
            metadata_never_waits_on_loop
            and type(rsm) is PyArrowRemoteStorageManager
            and rsm.is_local
        )
        #: No block reads ahead for a local directory: the kernel's read-ahead is its own, and
        #: reads on the event loop must never wait for a pool thread (and the GIL).
        self.prefetcher = (
            RemoteSegmentPrefetcher(rsm, max_bytes=config.remote_log_reader_prefetch_max_bytes)
            if config.remote_log_reader_prefetch_max_bytes > 0 and not self.reads_inline
            else None
        )
        self.copy_quota = TokenBucket(config.remote_log_manager_copy_max_bytes_per_second)
        self.fetch_quota = TokenBucket(config.remote_log_manager_fetch_max_bytes_per_second)
        self._scheduler = _Scheduler() if start_scheduler else None
        self._lock = threading.RLock()
        self._partitions: dict[TopicIdPartition, _PartitionState] = {}
        self._closed = False
        self._cleaner_coordination = cleaner_coordination or _no_cleaner

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
        if self.prefetcher is not None:
            self.prefetcher.close()
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


def _no_cleaner() -> CleanerCoordination | None:
    return None


__all__ = [
    "RemoteLogManager",
    "RemoteLogManagerConfig",
    "RemoteLogReadResult",
    "RemoteStorageFetchInfo",
    "build_filtered_leader_epoch_map",
    "is_remote_segment_within_leader_epochs",
]
