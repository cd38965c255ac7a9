"""Kafka's ``ReplicaManager``: the partitions this broker hosts, the produce and fetch paths
over their logs, and leadership changes.

A single node is a cluster of one: it is the leader and only replica of every partition
(created on first use from the log manager), the ISR is itself, so the high watermark moves to
the log end offset right after each append and ``acks=all`` is satisfied at once. In a cluster
(:mod:`tierlog.cluster`) a partition is hosted once the controller's state names this broker a
replica (:meth:`ReplicaManager.become_leader_or_follower`): leaders take produces and serve
fetches (consumers up to the high watermark, followers up to the log end offset, with epoch
fencing and divergence answers), followers fetch from their leader
(:mod:`tierlog.cluster.replica_fetcher`); requests for a partition led elsewhere get
NOT_LEADER_OR_FOLLOWER. ``acks=all`` waits until the ISR has the batch (Kafka's
DelayedProduce, :meth:`ReplicaManager.wait_for_acks`); followers that fall behind for
``replica.lag.time.max.ms`` leave the ISR (:meth:`ReplicaManager.shrink_isrs`).

This module keeps the hosted partitions, leadership and the ISR, and the high watermark
checkpoints. The produce path (Kafka's appendRecords and DelayedProduce) is
:mod:`tierlog.server.produce_path`'s, the fetch path (fetchMessages, readFromLog and
DelayedFetch: the long-poll) :mod:`tierlog.server.fetch_path`'s: the ReplicaManager's methods
of those paths keep their docstrings and delegate. Remote reads (tiered storage) are
:mod:`tierlog.server.delayed_remote_fetch`'s.

Runs on the event loop thread only (not thread-safe). The log calls made here are the cheap
ones and are called directly: an append is a page-cache write (~1 ms of CPU per MB measured,
the CRC and copies included) and a read a page-cache read. fsyncs never happen here: the log
flushes rolled segments in its own thread and the LogManager's background thread applies
``flush.ms``; ``flush.messages`` flushes inline in ``Log.append`` (set it only if you want
that trade).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.cluster.partition import Partition
from tierlog.errors import (
    ApiError,
    CorruptCheckpointError,
    KafkaStorageError,
    NotLeaderOrFollower,
    UnknownTopicOrPartition,
)
from tierlog.log.checkpoint_file import OffsetCheckpointFile
from tierlog.log.log_config import LONG_MAX
from tierlog.log.log_file_utils import REPLICATION_OFFSET_CHECKPOINT_FILENAME
from tierlog.log.transaction_marker import TxnMarker
from tierlog.server import fetch_path, produce_path
from tierlog.server.delayed_remote_fetch import DelayedRemoteFetch
from tierlog.server.produce_path import TXN_MARKER_TIMEOUT_MS

if TYPE_CHECKING:
    from tierlog.cluster.cluster_link import ClusterLink, PartitionChange
    from tierlog.log.log_manager import LogManager
    from tierlog.server.broker_metrics import BrokerTopicStats
    from tierlog.server.fetch_path import (
        FetchPartitionRequest,
        FetchPartitionResult,
        _FetchRead,
    )
    from tierlog.server.produce_path import ProducePartitionResult
    from tierlog.server.replica_alter_log_dirs import ReplicaAlterLogDirsManager
    from tierlog.tiered.remote_log_manager import RemoteLogManager

__all__ = ["ReplicaManager", "TxnVerifier"]

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


#: (transactional id, producer id, producer epoch, topic, partition) -> error code.
TxnVerifier = Callable[[str, int, int, str, int], Awaitable[int]]


class ReplicaManager:
    """Produce and fetch over the hosted partitions; leadership changes (cluster mode).

    The produce and fetch paths' bodies are :mod:`~tierlog.server.produce_path`'s and
    :mod:`~tierlog.server.fetch_path`'s (friends: they use the partitions, the clock, the
    metrics and the remote reads kept here)."""

    def __init__(
        self,
        log_manager: LogManager,
        *,
        remote_log_manager: RemoteLogManager | None = None,
        local_broker_id: int = 0,
        replica_lag_time_max_ms: int = 30_000,
        cluster: ClusterLink | None = None,
        time_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.log_manager = log_manager
        self.local_broker_id = local_broker_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        #: ZooKeeper and the replica fetchers; None on a single node (a cluster of one).
        self.cluster = cluster
        self._time_ms = time_ms
        self._partitions: dict[tuple[str, int], Partition] = {}
        #: High watermarks read at startup, applied when the partition is hosted.
        self._checkpointed_hw: dict[tuple[str, int], int] = {}
        #: Serves offsets below the local log start offset (None: no tiered storage).
        self.remote_log_manager = remote_log_manager
        self._remote = (
            DelayedRemoteFetch(remote_log_manager) if remote_log_manager is not None else None
        )
        #: BrokerTopicMetrics' counters (None: metrics off), plain ints (see broker_metrics).
        self.topic_stats: BrokerTopicStats | None = None
        #: Moves between log dirs (AlterReplicaLogDirs); set by the broker once started.
        self.alter_log_dirs_manager: ReplicaAlterLogDirsManager | None = None
        #: Called with (producer id, ``__consumer_offsets`` partition indexes, commit) once
        #: markers have landed there (the group coordinator's pending transactional offsets).
        self.txn_completion_listeners: list[Callable[[int, list[int], bool], None]] = []
        #: KIP-890's check that a transactional produce's partition was added to its
        #: transaction: awaited with (transactional id, producer id, producer epoch, topic,
        #: partition), returns an error code (0: go on). None: no check.
        self.txn_verifier: TxnVerifier | None = None

    # ----------------------------------------------------------------- partitions

    def get_partition(self, topic: str, index: int) -> Partition | None:
        """The hosted partition. On a single node it is created on first use from the log
        manager's log (which opens the log on its first use); in a cluster partitions exist
        once the metadata made this broker a replica (:meth:`become_leader_or_follower`).

        Raises:
            KafkaStorageError: the log could not be opened (EMFILE, ENOSPC, a failing disk):
                the request answers KAFKA_STORAGE_ERROR for this partition.
        """
        key = (topic, index)
        p = self._partitions.get(key)
        if p is not None or self.cluster is not None:
            return p
        try:
            lg = self.log_manager.get_log(topic, index)
        except KafkaStorageError:
            raise
        except (ApiError, KeyError, ValueError):
            return None
        if lg is None:
            return None
        info = self.log_manager.topic(topic)
        topic_id = getattr(info, "topic_id", None) if info is not None else None
        p = Partition(topic, index, lg, topic_id, local_broker_id=self.local_broker_id)
        self._partitions[key] = p
        return p

    def not_here_error(self, topic: str, index: int) -> int:
        """The error for a partition this broker does not host: NOT_LEADER_OR_FOLLOWER when
        the cluster has it elsewhere (the client refreshes its metadata), else
        UNKNOWN_TOPIC_OR_PARTITION."""
        if self.cluster is not None and self.cluster.has_partition(topic, index):
            return NotLeaderOrFollower.error_code
        return UnknownTopicOrPartition.error_code

    def become_leader_or_follower(self, change: PartitionChange) -> Partition | None:
        """Apply one partition's state from the controller (ZooKeeper): host it (creating
        its log when new), then lead or follow. Returns the partition (None when this broker
        is not a replica, or the log cannot be created: it is then logged).

        Kafka's ReplicaManager.becomeLeaderOrFollower for one partition: a stale epoch is
        ignored; leaders stop fetching and set the epoch at their log end offset; followers
        fail their parked acks=all produces and fetch from the new leader.
        """
        key = (change.topic, change.partition)
        p = self._partitions.get(key)
        if self.local_broker_id not in change.replicas:
            if p is not None:  # moved away (a reassignment): its copy here goes
                log.info("%s-%d moved to %s: deleting the replica here",
                         change.topic, change.partition, list(change.replicas))  # fmt: skip
                self.stop_replica(change.topic, change.partition, delete=True)
            return None
        if p is None:
            try:
                lg = self.log_manager.ensure_replica(
                    change.topic, change.topic_id, change.partition, change.configs
                )
            except (ApiError, OSError) as e:
                log.error("cannot host %s-%d: %s", change.topic, change.partition, e)
                return None
            p = Partition(
                change.topic,
                change.partition,
                lg,
                change.topic_id,
                local_broker_id=self.local_broker_id,
            )
            p.leader_id = -1  # until the state below
            hw = self._checkpointed_hw.pop(key, None)
            if hw is not None and hw > lg.high_watermark:
                lg.update_high_watermark(hw)
            self._partitions[key] = p
        now = self._time_ms()
        if change.leader == self.local_broker_id:
            if p.make_leader(
                change.leader_epoch, change.isr, change.replicas, change.partition_epoch, now
            ):
                if self.cluster is not None:
                    self.cluster.remove_fetcher(p)
                log.info(
                    "leader of %s-%d in epoch %d, isr %s",
                    p.topic, p.index, p.leader_epoch, sorted(p.isr),
                )  # fmt: skip
        else:
            was_leader = p.is_leader
            if (
                p.make_follower(
                    change.leader,
                    change.leader_epoch,
                    change.isr,
                    change.replicas,
                    change.partition_epoch,
                )
                or was_leader
            ):
                if self.cluster is not None:
                    self.cluster.add_fetcher(p)
                log.info(
                    "follower of %s-%d: leader %d, epoch %d",
                    p.topic, p.index, p.leader_id, p.leader_epoch,
                )  # fmt: skip
        p.wake_waiters()
        return p

    def stop_replica(self, topic: str, index: int, *, delete: bool) -> None:
        """Stop hosting a partition (moved away, or its topic deleted): stop fetching, fail
        what waits on it, and with ``delete`` remove its log."""
        p = self._partitions.pop((topic, index), None)
        if p is not None:
            if self.cluster is not None:
                self.cluster.remove_fetcher(p)
            p.leader_id = -1
            p.close()
        if delete:
            self.log_manager.delete_replica(topic, index)

    async def shrink_isrs(self) -> None:
        """Kafka's maybeShrinkIsr, for every partition this broker leads: followers that
        have not caught up for ``replica.lag.time.max.ms`` leave the ISR."""
        if self.cluster is None:
            return
        now = self._time_ms()
        for p in list(self._partitions.values()):
            if not p.is_leader or p.isr_change_pending or len(p.isr) <= 1:
                continue
            out = p.out_of_sync_replicas(now, self.replica_lag_time_max_ms)
            if out:
                log.info(
                    "shrinking the ISR of %s-%d from %s to %s: %s not caught up for %d ms",
                    p.topic, p.index, sorted(p.isr), sorted(p.isr - out), sorted(out),
                    self.replica_lag_time_max_ms,
                )  # fmt: skip
                await self.cluster.alter_isr(p, p.isr - out)
                p.maybe_increment_high_watermark()

    # ----------------------------------------------------------------- HW checkpoints

    def load_high_watermarks(self) -> None:
        """Read each log dir's ``replication-offset-checkpoint`` (Kafka's format: version,
        count, ``topic partition offset`` lines); a partition hosted later starts with its
        checkpointed high watermark. An unreadable file is logged and ignored (the leader's
        high watermark comes back with the first fetches)."""
        for d in self.log_manager.log_dirs:
            path = d / REPLICATION_OFFSET_CHECKPOINT_FILENAME
            try:
                self._checkpointed_hw.update(OffsetCheckpointFile(path).read())
            except FileNotFoundError:
                continue
            except (OSError, CorruptCheckpointError) as e:
                log.warning("ignoring unreadable %s: %s", path, e)

    def high_watermarks(self) -> dict[Path, dict[tuple[str, int], int]]:
        """Every hosted partition's high watermark, by log dir (on the loop thread)."""
        out: dict[Path, dict[tuple[str, int], int]] = {d: {} for d in self.log_manager.log_dirs}
        for p in self._partitions.values():
            out.setdefault(Path(p.log.dir).parent, {})[(p.topic, p.index)] = p.log.high_watermark
        return out

    @staticmethod
    def write_high_watermarks(by_dir: dict[Path, dict[tuple[str, int], int]]) -> None:
        """Write ``replication-offset-checkpoint`` in each log dir (blocking: a worker
        thread; Kafka's checkpointHighWatermarks every
        ``replica.high.watermark.checkpoint.interval.ms`` and at shutdown)."""
        for d, offsets in by_dir.items():
            try:
                OffsetCheckpointFile(d / REPLICATION_OFFSET_CHECKPOINT_FILENAME).write(offsets)
            except OSError as e:
                log.warning("cannot write the high watermark checkpoint in %s: %s", d, e)

    def wake(self, topic: str, index: int) -> None:
        """Complete the fetches parked on a partition (an append that did not come through
        :meth:`append_records`, e.g. the remote log metadata)."""
        p = self._partitions.get((topic, index))
        if p is not None:
            p.wake_waiters()

    def forget_topic(self, topic: str) -> None:
        """Drop the cached partitions of a deleted (or re-created) topic (single node; a
        cluster stops its replicas with :meth:`stop_replica`); wake their fetches."""
        if self.cluster is not None:
            return
        for key in [k for k in self._partitions if k[0] == topic]:
            self._partitions.pop(key).close()

    def partitions(self) -> Iterable[Partition]:
        return list(self._partitions.values())

    # ----------------------------------------------------------------- produce

    def append_records(
        self,
        topic: str,
        index: int,
        records: bytes | None,
        *,
        internal: bool = False,
        required_acks: int = 1,
    ) -> ProducePartitionResult:
        """Append one produced batch to the leader log and advance the high watermark.

        Validation that needs no log state happens here (exactly one magic-2 batch, no
        control batches from clients); the log checks the CRC, sizes, timestamps and
        producer sequences. With ``required_acks=-1`` an ISR smaller than the topic's
        ``min.insync.replicas`` refuses the batch (NOT_ENOUGH_REPLICAS) and the caller waits
        with :meth:`wait_for_acks`. Errors come back as a result, never raised.
        """
        return produce_path.append_records(
            self, topic, index, records, internal=internal, required_acks=required_acks
        )

    def append_in_thread(self, topic: str, index: int) -> bool:
        """Whether appends to this partition may fsync inline (``flush.messages`` set), so
        they must run in a thread, not on the event loop."""
        try:
            p = self.get_partition(topic, index)
        except KafkaStorageError:
            return False  # the append answers the error
        return p is not None and p.log.config.flush_interval < LONG_MAX

    async def append_records_in_thread(
        self,
        topic: str,
        index: int,
        records: bytes | None,
        *,
        internal: bool = False,
        required_acks: int = 1,
    ) -> ProducePartitionResult:
        """:meth:`append_records` with the append (and its fsync) in a worker thread.

        Appends to one partition stay in request order: they queue on the partition's
        lock (asyncio locks are FIFO) before entering the thread.
        """
        return await produce_path.append_records_in_thread(
            self, topic, index, records, internal=internal, required_acks=required_acks
        )

    # ----------------------------------------------------------------- transaction markers

    async def append_txn_markers(
        self, markers: Sequence[TxnMarker], timeout_ms: int = TXN_MARKER_TIMEOUT_MS
    ) -> dict[tuple[int, str, int], int]:
        """Append one COMMIT/ABORT control batch per marker to the leader logs here (Kafka's
        ``ReplicaManager.appendRecords`` with origin COORDINATOR), wait until the ISR has
        them (acks=all) and return the error code per (producer id, topic, partition):
        NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION for partitions not led here,
        INVALID_PRODUCER_EPOCH for a marker older than the producer's epoch,
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch, 0 when written.

        Markers are appended in the given order (one partition's stay in order); then every
        :attr:`txn_completion_listeners` callable is told about the ``__consumer_offsets``
        partitions each (producer, result) reached.
        """
        return await produce_path.append_txn_markers(self, markers, timeout_ms)

    def must_wait_for_acks(self, topic: str, index: int, result: ProducePartitionResult) -> bool:
        """Whether an acks=all append must wait: the high watermark has not passed it yet
        (never on a single node, where it moves with the append)."""
        p = self._partitions.get((topic, index))
        return p is not None and p.log.high_watermark <= result.last_offset

    async def wait_for_acks(
        self, topic: str, index: int, result: ProducePartitionResult, timeout_ms: int
    ) -> ProducePartitionResult:
        """acks=all (Kafka's DelayedProduce): wait until the high watermark passes the
        appended batch. NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR fell below
        ``min.insync.replicas`` meanwhile, NOT_LEADER_OR_FOLLOWER when leadership moved,
        REQUEST_TIMED_OUT after ``timeout_ms``."""
        return await produce_path.wait_for_acks(self, topic, index, result, timeout_ms)

    # ----------------------------------------------------------------- fetch

    def read_partition(
        self,
        p: Partition,
        fetch_offset: int,
        max_bytes: int,
        *,
        min_one_message: bool,
        isolation_level: int,
        replica_id: int = -1,
    ) -> FetchPartitionResult:
        """Read up to ``max_bytes`` from ``fetch_offset`` (whole batches; see Log.read).

        Consumers read up to the high watermark (or the last stable offset), followers
        (``replica_id >= 0``) up to the log end offset. An offset held only in remote storage
        comes back with :attr:`FetchPartitionResult.remote` set (no records yet: :meth:`fetch`
        reads them), or OFFSET_MOVED_TO_TIERED_STORAGE for a follower.
        """
        return fetch_path.read_partition(
            self,
            p,
            fetch_offset,
            max_bytes,
            min_one_message=min_one_message,
            isolation_level=isolation_level,
            replica_id=replica_id,
        )

    async def read_remote(self, results: list[FetchPartitionResult]) -> int:
        """Fill in the results that wait for a remote read; how many were throttled."""
        return 0 if self._remote is None else await self._remote.read(results)

    def fetch_once(
        self,
        requests: list[FetchPartitionRequest],
        *,
        max_bytes: int,
        isolation_level: int,
        replica_id: int = -1,
    ) -> tuple[list[FetchPartitionResult], int, bool, list[Partition]]:
        """Read every requested partition once, honouring the response-level ``max_bytes``.

        Returns (results, total bytes, any error, the partitions read). As in Kafka, the first
        partition that returns data may exceed the limits by one batch (``min_one_message``)
        so that a consumer always makes progress. Partitions to read from remote storage come
        back with ``remote`` set (see :meth:`read_remote`).
        """
        return fetch_path.fetch_once(
            self,
            requests,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            replica_id=replica_id,
        )

    def fetch_at_once(
        self,
        requests: list[FetchPartitionRequest],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        replica_id: int = -1,
    ) -> list[FetchPartitionResult] | Awaitable[list[FetchPartitionResult]]:
        """:meth:`fetch` without a task when the first read answers it (Kafka's
        fetchMessages answers at once without the purgatory): the results, else an
        awaitable of them that goes on from this first read (waits for appends, reads
        remote data). A follower that is behind always gets its answer here: no task, no
        trip through the event loop between its request and the response."""
        return fetch_path.fetch_at_once(
            self,
            requests,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            replica_id=replica_id,
        )

    async def fetch(
        self,
        requests: list[FetchPartitionRequest],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        replica_id: int = -1,
        first: _FetchRead | None = None,
    ) -> list[FetchPartitionResult]:
        """Kafka's fetchMessages (:func:`~tierlog.server.fetch_path._fetch`), counted in
        BrokerTopicMetrics (once per partition, as Kafka; unknown topics are not counted, so a
        client cannot grow the series with made-up names). ``first``: the first read, already
        made (:meth:`fetch_at_once`)."""
        return await fetch_path.fetch(
            self,
            requests,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            replica_id=replica_id,
            first=first,
        )

    def wake_all(self) -> None:
        """Complete every parked fetch and drop the remote reads ahead (shutdown)."""
        for p in list(self._partitions.values()):
            p.wake_waiters()
        if self._remote is not None:
            self._remote.read_ahead.clear()
