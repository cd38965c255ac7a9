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

Fetch long-poll (Kafka's ``DelayedFetch``): a fetch that does not reach ``min_bytes`` parks
one future on every partition it reads; the next append to any of them completes the future
and the fetch reads again, until ``min_bytes`` is reached or ``max_wait_ms`` expires. Appends
pay one list check per partition for this. Remote reads (tiered storage) are
:mod:`tierlog.server.delayed_remote_fetch`'s.

Runs on the event loop thread only (not thread-safe). The log calls made here are the cheap
ones and are called directly: an append is a page-cache write (~1 ms of CPU per MB measured,
the CRC and copies included) and a read a page-cache read. fsyncs never happen here: the log
flushes rolled segments in its own thread and the LogManager's background thread applies
``flush.ms``; ``flush.messages`` flushes inline in ``Log.append`` (set it only if you want
that trade).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlog.cluster.partition import Partition
from tierlog.errors import (
    ApiError,
    CorruptCheckpointError,
    CorruptRecordError,
    InvalidRecord,
    InvalidTopic,
    KafkaStorageError,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from tierlog.log.checkpoint_file import OffsetCheckpointFile
from tierlog.log.log_config import LONG_MAX
from tierlog.log.log_file_utils import REPLICATION_OFFSET_CHECKPOINT_FILENAME
from tierlog.log.transaction_index import AbortedTxn
from tierlog.log.transaction_marker import TxnMarker
from tierlog.records.control_records import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from tierlog.records.record_batch import LOG_OVERHEAD, read_header
from tierlog.server.delayed_remote_fetch import DelayedRemoteFetch

if TYPE_CHECKING:
    from tierlog.cluster.cluster_link import ClusterLink, PartitionChange
    from tierlog.log.log_manager import LogManager
    from tierlog.server.broker_metrics import BrokerTopicStats
    from tierlog.server.replica_alter_log_dirs import ReplicaAlterLogDirsManager
    from tierlog.tiered.remote_log_manager import RemoteLogManager
    from tierlog.tiered.remote_log_reader import RemoteStorageFetchInfo

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


#: Internal topics that clients may read but never produce to.
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
INTERNAL_TOPICS = frozenset(
    {GROUP_METADATA_TOPIC_NAME, "__remote_log_metadata", "__transaction_state"}
)

#: (transactional id, producer id, producer epoch, topic, partition) -> error code.
TxnVerifier = Callable[[str, int, int, str, int], Awaitable[int]]

#: How long markers wait for the ISR (Kafka: request.timeout.ms of the inter-broker path).
TXN_MARKER_TIMEOUT_MS = 30_000

#: Fetch isolation levels (FetchRequest.isolation_level).
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@dataclass(slots=True)
class ProducePartitionResult:
    """What a Produce response says about one partition."""

    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    #: INVALID_RECORD: (index of the record in its batch, message), Kafka's RecordError.
    record_errors: tuple[tuple[int, str | None], ...] = ()
    #: The last offset of the appended batch (acks=all waits for the high watermark past it).
    last_offset: int = -1


@dataclass(slots=True)
class FetchPartitionResult:
    """What a Fetch response says about one partition."""

    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | None = None
    #: Set while the records must still be read from remote storage.
    remote: RemoteStorageFetchInfo | None = None
    #: For a follower whose log diverged: (epoch, end offset) of the leader's log (KIP-595).
    diverging_epoch: tuple[int, int] | None = None
    #: read_committed: the aborted transactions of the range read (None: read_uncommitted).
    aborted_transactions: list[AbortedTxn] | None = None

    @property
    def size(self) -> int:
        return len(self.records) if self.records is not None else 0


@dataclass(slots=True)
class FetchPartitionRequest:
    """One partition of a Fetch, resolved to a topic name."""

    topic: str | None  # None: unknown topic id
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    error_code: int = 0  # set when the topic could not be resolved (UNKNOWN_TOPIC_ID)
    #: The fetcher's view of the leader epoch (KIP-320); -1: not checked.
    current_leader_epoch: int = -1
    #: A follower's epoch of its last batch (KIP-595); -1: no divergence check.
    last_fetched_epoch: int = -1


#: What :meth:`ReplicaManager.fetch_once` returns.
_FetchRead = tuple[list[FetchPartitionResult], int, bool, list[Partition]]


class ReplicaManager:
    """Produce and fetch over the hosted partitions; leadership changes (cluster mode)."""

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
        checked = self._check_append(topic, index, records, internal, required_acks)
        if isinstance(checked, ProducePartitionResult):
            return checked
        assert records is not None  # _check_append refused empty input
        try:
            info = checked.log.append(records, leader_epoch=checked.leader_epoch)
        except (ApiError, OSError) as e:
            return self._append_failed(checked, e)
        return self._appended(checked, info)

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
        checked = self._check_append(topic, index, records, internal, required_acks)
        if isinstance(checked, ProducePartitionResult):
            return checked
        assert records is not None  # _check_append refused empty input
        async with checked.append_lock():
            if not checked.is_leader:
                return self._refused(
                    checked, ProducePartitionResult(NotLeaderOrFollower.error_code)
                )
            try:
                info = await asyncio.to_thread(
                    checked.log.append, records, leader_epoch=checked.leader_epoch
                )
            except (ApiError, OSError) as e:
                return self._append_failed(checked, e)
        return self._appended(checked, info)

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
        appended: list[tuple[TxnMarker, Awaitable[ProducePartitionResult]]] = []
        results: dict[tuple[int, str, int], int] = {}
        for m in markers:
            key = (m.producer_id, m.topic, m.partition)
            try:
                p = self.get_partition(m.topic, m.partition)
            except KafkaStorageError as e:
                results[key] = e.error_code
                continue
            if p is None:
                results[key] = self.not_here_error(m.topic, m.partition)
                continue
            if not p.is_leader:
                results[key] = NotLeaderOrFollower.error_code
                continue
            control_type = CONTROL_TYPE_COMMIT if m.commit else CONTROL_TYPE_ABORT
            try:
                batch = build_end_txn_marker_batch(
                    EndTransactionMarker(control_type, m.coordinator_epoch),
                    producer_id=m.producer_id,
                    producer_epoch=m.producer_epoch,
                    timestamp=self._time_ms(),
                )
            except ValueError as e:
                results[key] = self._append_failed(p, InvalidRecord(str(e))).error_code
                continue
            result = await self._append_marker(p, batch)
            appended.append((m, self.wait_for_acks(m.topic, m.partition, result, timeout_ms)))
        acked = await asyncio.gather(*(aw for _, aw in appended))
        completed: dict[tuple[int, bool], list[int]] = {}
        for (m, _), r in zip(appended, acked, strict=True):
            results[(m.producer_id, m.topic, m.partition)] = r.error_code
            if not r.error_code and m.topic == GROUP_METADATA_TOPIC_NAME:
                completed.setdefault((m.producer_id, m.commit), []).append(m.partition)
        for (producer_id, commit), partitions in completed.items():
            for listener in list(self.txn_completion_listeners):
                try:
                    listener(producer_id, partitions, commit)
                except Exception:
                    log.exception("transaction completion listener %r failed", listener)
        return results

    async def _append_marker(self, p: Partition, batch: bytes) -> ProducePartitionResult:
        def append() -> Any:
            return p.log.append(
                batch, leader_epoch=p.leader_epoch, origin_client=False, origin_coordinator=True
            )

        try:
            if p.log.config.flush_interval < LONG_MAX:  # may fsync: in a thread, in order
                async with p.append_lock():
                    if not p.is_leader:
                        return ProducePartitionResult(NotLeaderOrFollower.error_code)
                    info = await asyncio.to_thread(append)
            else:
                info = append()
        except (ApiError, OSError) as e:
            return self._append_failed(p, e)
        return self._appended(p, info)

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
        if result.error_code or result.last_offset < 0:
            return result
        p = self._partitions.get((topic, index))
        if p is None:
            return ProducePartitionResult(self.not_here_error(topic, index))
        if not await p.wait_for_high_watermark(result.last_offset + 1, timeout_ms / 1000):
            code = RequestTimedOut.error_code if p.is_leader else NotLeaderOrFollower.error_code
            return ProducePartitionResult(code, log_start_offset=_safe_log_start(p))
        if len(p.isr) < p.log.config.min_in_sync_replicas:
            return ProducePartitionResult(
                NotEnoughReplicasAfterAppend.error_code,
                log_start_offset=_safe_log_start(p),
                error_message=f"the ISR {sorted(p.isr)} is smaller than min.insync.replicas "
                f"{p.log.config.min_in_sync_replicas}",
            )
        return result

    def _check_append(
        self, topic: str, index: int, records: bytes | None, internal: bool, required_acks: int
    ) -> Partition | ProducePartitionResult:
        if not internal and topic in INTERNAL_TOPICS:
            return ProducePartitionResult(
                InvalidTopic.error_code, error_message=f"cannot append to internal topic {topic}"
            )
        try:
            p = self.get_partition(topic, index)
        except KafkaStorageError as e:
            return ProducePartitionResult(e.error_code, error_message=e.message)
        if p is None:
            return ProducePartitionResult(self.not_here_error(topic, index))
        if not p.is_leader:
            return self._refused(p, ProducePartitionResult(NotLeaderOrFollower.error_code))
        if not records:
            return self._refused(
                p,
                ProducePartitionResult(
                    InvalidRecord.error_code, error_message="produce request without records"
                ),
            )
        if required_acks == -1:
            min_isr = p.log.config.min_in_sync_replicas
            if len(p.isr) < min_isr:
                return self._refused(
                    p,
                    ProducePartitionResult(
                        NotEnoughReplicas.error_code,
                        log_start_offset=_safe_log_start(p),
                        error_message=f"the ISR {sorted(p.isr)} of {topic}-{index} is smaller "
                        f"than min.insync.replicas {min_isr}",
                    ),
                )
        try:
            header = read_header(records)
            size = header.batch_length + LOG_OVERHEAD
            if size > len(records):
                raise CorruptRecordError(
                    f"record batch is truncated: size {size}, {len(records)} bytes sent"
                )
            if size < len(records):
                raise InvalidRecord(
                    "produce requests v3+ must carry exactly one record batch per partition"
                )
            if header.is_control_batch and not internal:
                raise InvalidRecord("clients may not write control batches")
        except ApiError as e:
            return self._append_failed(p, e)
        return p

    def _refused(self, p: Partition, result: ProducePartitionResult) -> ProducePartitionResult:
        """A produce to a hosted partition refused before the append: counted as failed."""
        if self.topic_stats is not None:
            self.topic_stats.produced(p.topic, 0, 0, True)
        return result

    def _append_failed(self, p: Partition, e: Exception) -> ProducePartitionResult:
        if self.topic_stats is not None:
            self.topic_stats.produced(p.topic, 0, 0, True)
        if isinstance(e, ApiError):
            return ProducePartitionResult(
                e.error_code,
                log_start_offset=_safe_log_start(p),
                error_message=e.message,
                record_errors=e.record_errors if isinstance(e, InvalidRecord) else (),
            )
        log.error("append to %s-%d failed: %s", p.topic, p.index, e)
        return ProducePartitionResult(KafkaStorageError.error_code, error_message=str(e))

    def _appended(self, p: Partition, info: Any) -> ProducePartitionResult:
        stats = self.topic_stats
        if stats is not None:  # a duplicate batch (a producer's retry) was not appended again
            dup = info.duplicate
            stats.produced(
                p.topic, 0 if dup else info.valid_bytes, 0 if dup else info.records_count, False
            )
        p.maybe_increment_high_watermark()
        p.wake_waiters()  # followers long-poll on the log end offset
        return ProducePartitionResult(
            0,
            info.first_offset,
            info.log_append_time if info.log_append_time is not None else -1,
            info.log_start_offset,
            last_offset=info.last_offset,
        )

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
        lg = p.log
        hw = lg.high_watermark
        if replica_id >= 0:
            upper = lg.log_end_offset
        else:
            upper = lg.last_stable_offset if isolation_level == READ_COMMITTED else hw
        result = FetchPartitionResult(0, hw, lg.last_stable_offset, lg.log_start_offset)
        if upper <= fetch_offset <= lg.log_end_offset:
            result.records = b""
            return result
        if self._plan_remote_read(
            p, result, fetch_offset, max_bytes, min_one_message, replica_id, isolation_level
        ):
            return result
        try:
            data = lg.read(
                fetch_offset, max_bytes, max_offset=upper, min_one_message=min_one_message
            )
        except OffsetOutOfRange:
            # The local segment may have been deleted (tiered) since the check above.
            if self._plan_remote_read(
                p, result, fetch_offset, max_bytes, min_one_message, replica_id, isolation_level
            ):
                return result
            result.error_code = OffsetOutOfRange.error_code
            result.records = b""
            return result
        except ApiError as e:
            # Never OFFSET_MOVED_TO_TIERED_STORAGE (109) to consumers: it is for followers,
            # and kafkajs treats unknown codes as fatal.
            code = e.error_code
            if code == OffsetMovedToTieredStorage.error_code:
                code = KafkaStorageError.error_code
            result.error_code = code
            result.records = b""
            return result
        except OSError as e:
            log.error("read of %s-%d failed: %s", p.topic, p.index, e)
            result.error_code = KafkaStorageError.error_code
            result.records = b""
            return result
        result.records = data.records
        if isolation_level == READ_COMMITTED and replica_id < 0:
            try:
                result.aborted_transactions = (
                    _aborted_transactions(lg, fetch_offset, data.records, upper)
                    if data.records
                    else []
                )
            except (ApiError, OSError) as e:
                log.error("reading the transaction index of %s-%d failed: %s", p.topic, p.index, e)
                result.error_code = KafkaStorageError.error_code
                result.records = b""
        return result

    def _check_fetch(
        self, p: Partition, r: FetchPartitionRequest, replica_id: int
    ) -> FetchPartitionResult | None:
        """Leadership, epoch fencing (KIP-320) and, for a follower, divergence (KIP-595) and
        its fetch state; a result to answer at once, or None to read."""
        code = p.leader_epoch_error(r.current_leader_epoch)
        if code:
            return FetchPartitionResult(code)
        if replica_id < 0:
            return None
        lg = p.log
        if r.last_fetched_epoch >= 0:
            end_epoch, end_offset = lg.leader_epoch_cache.end_offset_for(
                r.last_fetched_epoch, lg.log_end_offset
            )
            diverged = end_epoch < r.last_fetched_epoch or end_offset < r.fetch_offset
            if end_epoch >= 0 and diverged:
                result = FetchPartitionResult(
                    0, lg.high_watermark, lg.last_stable_offset, lg.log_start_offset, b""
                )
                result.diverging_epoch = (end_epoch, end_offset)
                return result
        joins = p.update_follower_fetch_state(replica_id, r.fetch_offset, self._time_ms())
        if joins and self.cluster is not None:
            p.isr_change_pending = True
            self.cluster.expand_isr(p, replica_id)
        return None

    def _plan_remote_read(
        self,
        p: Partition,
        result: FetchPartitionResult,
        fetch_offset: int,
        max_bytes: int,
        min_one_message: bool,
        replica_id: int,
        isolation_level: int = 0,
    ) -> bool:
        remote = self._remote
        return remote is not None and remote.plan(
            p, result, fetch_offset, max_bytes, min_one_message, replica_id, isolation_level
        )

    async def read_remote(self, results: list[FetchPartitionResult]) -> int:
        """Fill in the results that wait for a remote read; how many were throttled."""
        return 0 if self._remote is None else await self._remote.read(results)

    async def _answer_remote(
        self, results: list[FetchPartitionResult], max_wait_ms: int
    ) -> list[FetchPartitionResult]:
        assert self._remote is not None  # only partitions with remote data get here
        return await self._remote.answer(results, max_wait_ms)

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
        results: list[FetchPartitionResult] = []
        partitions: list[Partition] = []
        remaining = max_bytes
        total = 0
        min_one = True
        error = False
        for r in requests:
            if r.topic is None:
                results.append(FetchPartitionResult(r.error_code or 100))
                error = True
                continue
            try:
                p = self.get_partition(r.topic, r.partition)
            except KafkaStorageError as e:
                results.append(FetchPartitionResult(e.error_code))
                error = True
                continue
            if p is None:
                results.append(FetchPartitionResult(self.not_here_error(r.topic, r.partition)))
                error = True
                continue
            answer = self._check_fetch(p, r, replica_id)
            if answer is not None:
                results.append(answer)
                error = True
                continue
            limit = min(r.partition_max_bytes, remaining)
            partitions.append(p)
            if limit <= 0 and not min_one:
                res = self.read_partition(
                    p,
                    r.fetch_offset,
                    0,
                    min_one_message=False,
                    isolation_level=isolation_level,
                    replica_id=replica_id,
                )
                res.records = b""
                res.remote = None
            else:
                res = self.read_partition(
                    p,
                    r.fetch_offset,
                    max(limit, 0),
                    min_one_message=min_one,
                    isolation_level=isolation_level,
                    replica_id=replica_id,
                )
            size = res.size
            if size:
                min_one = False
                remaining -= size
                total += size
            if res.error_code:
                error = True
            results.append(res)
        return results, total, error, partitions

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
        first = self.fetch_once(
            requests, max_bytes=max_bytes, isolation_level=isolation_level, replica_id=replica_id
        )
        results, total, error, _parts = first
        if not any(r.remote is not None for r in results) and (
            max_wait_ms <= 0 or total >= max(min_bytes, 1) or error or not requests
        ):
            self._count_fetched(requests, results, replica_id)
            return results
        return self.fetch(
            requests,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            replica_id=replica_id,
            first=first,
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
        """:meth:`_fetch`, counted in BrokerTopicMetrics (once per partition, as Kafka; unknown
        topics are not counted, so a client cannot grow the series with made-up names).
        ``first``: the first read, already made (:meth:`fetch_at_once`)."""
        results = await self._fetch(
            requests,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            replica_id=replica_id,
            first=first,
        )
        self._count_fetched(requests, results, replica_id)
        return results

    def _count_fetched(
        self,
        requests: list[FetchPartitionRequest],
        results: list[FetchPartitionResult],
        replica_id: int,
    ) -> None:
        stats = self.topic_stats
        if stats is not None:
            unknown = UnknownTopicOrPartition.error_code
            for r, res in zip(requests, results, strict=False):
                if r.topic is not None and res.error_code != unknown:
                    stats.fetched(r.topic, res.size, bool(res.error_code), replica_id < 0)

    async def _fetch(
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
        """Kafka's fetchMessages: answer at once when ``min_bytes`` are there (or on an
        error, or after remote reads), else wait for appends to the requested partitions up
        to ``max_wait_ms``."""
        if first is not None and any(r.remote is not None for r in first[0]):
            return await self._answer_remote(first[0], max_wait_ms)
        # Read (again, after fetch_at_once's first read): the read and the parking on the
        # partitions below must be one step of this task, or an append in between (another
        # connection's produce, before this task first ran) would wake nobody.
        results, total, error, parts = self.fetch_once(
            requests, max_bytes=max_bytes, isolation_level=isolation_level, replica_id=replica_id
        )
        if any(r.remote is not None for r in results):
            return await self._answer_remote(results, max_wait_ms)
        if max_wait_ms <= 0 or total >= max(min_bytes, 1) or error or not requests:
            return results
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + max_wait_ms / 1000.0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return results
            fut: asyncio.Future[None] = loop.create_future()
            for p in parts:
                p.add_waiter(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                pass
            finally:
                for p in parts:
                    p.remove_waiter(fut)
            results, total, error, parts = self.fetch_once(
                requests,
                max_bytes=max_bytes,
                isolation_level=isolation_level,
                replica_id=replica_id,
            )
            if any(r.remote is not None for r in results):
                return await self._answer_remote(results, max_wait_ms)
            if total >= max(min_bytes, 1) or error:
                return results

    def wake_all(self) -> None:
        """Complete every parked fetch and drop the remote reads ahead (shutdown)."""
        for p in list(self._partitions.values()):
            p.wake_waiters()
        if self._remote is not None:
            self._remote.read_ahead.clear()


def _aborted_transactions(
    lg: Any, fetch_offset: int, records: bytes | memoryview, upper: int
) -> list[AbortedTxn]:
    """The aborted transactions of a read_committed read that returned ``records``: those
    overlapping [fetch offset, end of the segment read) (a read skips segments left with
    only empty batches by the cleaner, so the segment is the first batch's)."""
    first = int.from_bytes(records[:8], "big", signed=True) if len(records) >= 8 else -1
    read_offset = max(fetch_offset, first)
    bound = lg.fetch_upper_bound_offset(read_offset, upper)
    return list(lg.collect_aborted_transactions(fetch_offset, bound))


def _safe_log_start(p: Partition) -> int:
    try:
        return int(p.log.log_start_offset)
    except Exception:  # pragma: no cover - diagnostics only
        return -1
