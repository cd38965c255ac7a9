"""The partitions this node leads (all of them) and the produce/fetch paths over their logs.

A single tierlog node is the leader and only replica of every partition, so ``acks=1`` and
``acks=all`` are satisfied once the batch is in the log, and the high watermark moves to the
log end offset right after each append (Kafka's ``Partition.appendRecordsToLeader`` followed
by ``maybeIncrementLeaderHW`` with an ISR of one).

Fetch long-poll (Kafka's ``DelayedFetch``): a fetch that does not reach ``min_bytes`` parks
one future on every partition it reads; the next append to any of them completes the future
and the fetch reads again, until ``min_bytes`` is reached or ``max_wait_ms`` expires. Appends
pay one list check per partition for this.

Remote reads (tiered storage, KIP-405): a fetch offset in [log start offset, local log start
offset) of a partition with remote storage is read from remote storage by the
RemoteLogManager. Every such partition of a request is read at once, on the manager's
``remote.log.reader.threads`` pool, and the response waits for them up to
``remote.fetch.max.wait.ms`` (Kafka <= 4.1 served only the first one per request). Each gets
``min(partition max bytes, what is left of the request's max bytes)`` and ``min_one_message``
only while the response holds no data yet, as a local read. Outcome per partition, the others
unaffected: data; OFFSET_OUT_OF_RANGE (1) when no remote segment holds the offset;
KAFKA_STORAGE_ERROR (56, retriable) when remote storage fails or returns corrupt data;
empty records and no error when the read is not done by the deadline (Kafka's
DelayedRemoteFetch expiry: the client simply fetches again) or when
``remote.log.manager.fetch.max.bytes.per.second`` is exceeded. Consumers never get
OFFSET_MOVED_TO_TIERED_STORAGE (109); followers (replica id >= 0) do, as in Kafka. After each
remote read the range a sequential consumer asks for next is read ahead
(:mod:`tierlog.server.remote_read_ahead`).

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
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    ApiError,
    CorruptRecordError,
    InvalidRecord,
    InvalidTopic,
    KafkaStorageError,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    UnknownTopicOrPartition,
)
from tierlog.log.log_config import LONG_MAX
from tierlog.records.record_batch import LOG_OVERHEAD, read_header

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.log.log_manager import LogManager
    from tierlog.server.remote_read_ahead import RemoteReadAhead
    from tierlog.tiered.remote_log_manager import RemoteLogManager
    from tierlog.tiered.remote_log_reader import RemoteStorageFetchInfo

log = logging.getLogger(__name__)

#: Internal topics that clients may read but never produce to.
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, "__remote_log_metadata"})

#: Fetch isolation levels (FetchRequest.isolation_level).
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class Partition:
    """One partition this node leads: its log plus the fetches waiting for its next append."""

    __slots__ = ("_lock", "_waiters", "index", "log", "topic", "topic_id")

    def __init__(self, topic: str, index: int, log: Log, topic_id: uuid.UUID | None) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.topic_id = topic_id
        self._waiters: list[asyncio.Future[None]] = []
        self._lock: asyncio.Lock | None = None

    def append_lock(self) -> asyncio.Lock:
        """Serialises appends that run in threads (FIFO: request order is kept)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def add_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.append(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass

    def wake_waiters(self) -> None:
        """Complete every parked fetch (after an append, a truncation or a deletion)."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"


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


class ReplicaManager:
    """Leader-side produce and fetch over the LogManager's logs."""

    def __init__(
        self, log_manager: LogManager, *, remote_log_manager: RemoteLogManager | None = None
    ) -> None:
        self.log_manager = log_manager
        self._partitions: dict[tuple[str, int], Partition] = {}
        #: Serves offsets below the local log start offset (None: no tiered storage).
        self.remote_log_manager = remote_log_manager
        self._read_ahead: RemoteReadAhead | None = None

    # ----------------------------------------------------------------- partitions

    def get_partition(self, topic: str, index: int) -> Partition | None:
        """The partition object, created on first use from the log manager's log (which
        opens the log on its first use).

        Raises:
            KafkaStorageError: the log could not be opened (EMFILE, ENOSPC, a failing disk):
                the request answers KAFKA_STORAGE_ERROR for this partition.
        """
        key = (topic, index)
        p = self._partitions.get(key)
        if p is not None:
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
        p = Partition(topic, index, lg, topic_id)
        self._partitions[key] = p
        return p

    def wake(self, topic: str, index: int) -> None:
        """Complete the fetches parked on a partition (an append that did not come through
        :meth:`append_records`, e.g. the remote log metadata)."""
        p = self._partitions.get((topic, index))
        if p is not None:
            p.wake_waiters()

    def forget_topic(self, topic: str) -> None:
        """Drop the cached partitions of a deleted (or re-created) topic; wake their fetches."""
        for key in [k for k in self._partitions if k[0] == topic]:
            self._partitions.pop(key).wake_waiters()

    def partitions(self) -> Iterable[Partition]:
        return list(self._partitions.values())

    # ----------------------------------------------------------------- produce

    def append_records(
        self, topic: str, index: int, records: bytes | None, *, internal: bool = False
    ) -> ProducePartitionResult:
        """Append one produced batch to the leader log and advance the high watermark.

        Validation that needs no log state happens here (exactly one magic-2 batch, no
        control batches from clients); the log checks the CRC, sizes, timestamps and
        producer sequences. Errors come back as a result, never raised.
        """
        checked = self._check_append(topic, index, records, internal)
        if isinstance(checked, ProducePartitionResult):
            return checked
        assert records is not None  # _check_append refused empty input
        try:
            info = checked.log.append(records, leader_epoch=0)
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
        self, topic: str, index: int, records: bytes | None, *, internal: bool = False
    ) -> ProducePartitionResult:
        """:meth:`append_records` with the append (and its fsync) in a worker thread.

        Appends to one partition stay in request order: they queue on the partition's
        lock (asyncio locks are FIFO) before entering the thread.
        """
        checked = self._check_append(topic, index, records, internal)
        if isinstance(checked, ProducePartitionResult):
            return checked
        assert records is not None  # _check_append refused empty input
        async with checked.append_lock():
            try:
                info = await asyncio.to_thread(checked.log.append, records, leader_epoch=0)
            except (ApiError, OSError) as e:
                return self._append_failed(checked, e)
        return self._appended(checked, info)

    def _check_append(
        self, topic: str, index: int, records: bytes | None, internal: bool
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
            return ProducePartitionResult(UnknownTopicOrPartition.error_code)
        if not records:
            return ProducePartitionResult(
                InvalidRecord.error_code, error_message="produce request without records"
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

    def _append_failed(self, p: Partition, e: Exception) -> ProducePartitionResult:
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
        lg = p.log
        lg.update_high_watermark(lg.log_end_offset)
        p.wake_waiters()
        return ProducePartitionResult(
            0,
            info.first_offset,
            info.log_append_time if info.log_append_time is not None else -1,
            info.log_start_offset,
        )

    # ----------------------------------------------------------------- fetch

    def read_partition(
        self,
        p: Partition | None,
        fetch_offset: int,
        max_bytes: int,
        *,
        min_one_message: bool,
        isolation_level: int,
        replica_id: int = -1,
    ) -> FetchPartitionResult:
        """Read up to ``max_bytes`` from ``fetch_offset`` (whole batches; see Log.read).

        An offset held only in remote storage comes back with :attr:`FetchPartitionResult.remote`
        set (no records yet: :meth:`fetch` reads them), or OFFSET_MOVED_TO_TIERED_STORAGE for a
        follower (``replica_id >= 0``).
        """
        if p is None:
            return FetchPartitionResult(UnknownTopicOrPartition.error_code)
        lg = p.log
        hw = lg.high_watermark
        lso = lg.last_stable_offset if isolation_level == READ_COMMITTED else hw
        result = FetchPartitionResult(0, hw, lg.last_stable_offset, lg.log_start_offset)
        if lso <= fetch_offset <= lg.log_end_offset:
            result.records = b""
            return result
        if self._plan_remote_read(p, result, fetch_offset, max_bytes, min_one_message, replica_id):
            return result
        try:
            data = lg.read(fetch_offset, max_bytes, max_offset=lso, min_one_message=min_one_message)
        except OffsetOutOfRange:
            # The local segment may have been deleted (tiered) since the check above.
            if self._plan_remote_read(
                p, result, fetch_offset, max_bytes, min_one_message, replica_id
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
        return result

    def _plan_remote_read(
        self,
        p: Partition,
        result: FetchPartitionResult,
        fetch_offset: int,
        max_bytes: int,
        min_one_message: bool,
        replica_id: int,
    ) -> bool:
        """When ``fetch_offset`` is only in remote storage, prepare ``result`` for a remote
        read (or answer a follower with 109); True then."""
        rlm = self.remote_log_manager
        lg = p.log
        if rlm is None or p.topic_id is None or not rlm.needs_remote_read(lg, fetch_offset):
            return False
        result.records = b""
        if replica_id >= 0:
            result.error_code = OffsetMovedToTieredStorage.error_code
            return True
        from tierlog.tiered.remote_log_reader import RemoteStorageFetchInfo
        from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition

        result.remote = RemoteStorageFetchInfo(
            TopicIdPartition(p.topic_id, p.topic, p.index),
            fetch_offset,
            max_bytes,
            min_one_message,
        )
        return True

    async def read_remote(self, results: list[FetchPartitionResult]) -> int:
        """Fill in every result that waits for a remote read: all at once, within
        ``remote.fetch.max.wait.ms`` (see the module docstring for the outcomes). Returns
        how many were skipped because the remote fetch quota is exceeded."""
        rlm = self.remote_log_manager
        pending = [r for r in results if r.remote is not None]
        throttled = 0
        if rlm is None or not pending:
            return throttled
        if self._read_ahead is None:
            from tierlog.server.remote_read_ahead import RemoteReadAhead

            self._read_ahead = RemoteReadAhead(rlm)
        read_ahead = self._read_ahead
        futures: dict[asyncio.Future[Any], tuple[FetchPartitionResult, RemoteStorageFetchInfo]] = {}
        for r in pending:
            fi, r.remote = r.remote, None
            assert fi is not None
            if rlm.is_remote_fetch_quota_exceeded():
                throttled += 1  # empty records, no error; the client comes back later
                continue
            future = read_ahead.take(fi)
            try:
                if future is None:
                    future = rlm.read_async(fi)
            except RemoteStorageError as e:  # too many reads pending, or shutting down
                log.warning("remote read of %s at %d refused: %s",
                            fi.topic_id_partition, fi.fetch_offset, e)  # fmt: skip
                r.error_code = KafkaStorageError.error_code
                continue
            futures[asyncio.wrap_future(future)] = (r, fi)
        if not futures:
            return throttled
        wait_s = rlm.config.remote_fetch_max_wait_ms / 1000
        done, not_done = await asyncio.wait(futures, timeout=wait_s)
        for fut in not_done:
            fut.cancel()  # the read is dropped; the partition answers empty (Kafka's expiry)
        for fut, (r, fi) in futures.items():  # submission order: deterministic results
            if fut not in done:
                continue
            error = fut.exception()
            if error is None:
                info = fut.result()
                r.records = info.records
                read_ahead.after(fi, info)  # the consumer's next fetch, read meanwhile
            elif isinstance(error, OffsetOutOfRange):
                r.error_code = OffsetOutOfRange.error_code
            elif isinstance(error, RemoteResourceNotFoundError):
                log.error("remote read failed, an object is missing from remote storage "
                          "(`tierlog remote verify` lists them): %s", error)  # fmt: skip
                r.error_code = KafkaStorageError.error_code
            elif isinstance(error, RemoteStorageError):
                log.warning("remote read failed: %s", error)
                r.error_code = KafkaStorageError.error_code
            else:
                log.error("remote read failed", exc_info=error)
                r.error_code = KafkaStorageError.error_code
        return throttled

    async def _answer_remote(
        self, results: list[FetchPartitionResult], max_wait_ms: int
    ) -> list[FetchPartitionResult]:
        throttled = await self.read_remote(results)
        if throttled and max_wait_ms > 0 and not any(r.size or r.error_code for r in results):
            # Only throttled partitions: answer after the long-poll wait, not at once, or
            # the consumer would spin on empty responses until the quota refills.
            await asyncio.sleep(min(max_wait_ms, 1000) / 1000)
        return results

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
            limit = min(r.partition_max_bytes, remaining)
            if p is not None:
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

    async def fetch(
        self,
        requests: list[FetchPartitionRequest],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        replica_id: int = -1,
    ) -> list[FetchPartitionResult]:
        """Kafka's fetchMessages: answer at once when ``min_bytes`` are there (or on an
        error, or after remote reads), else wait for appends to the requested partitions up
        to ``max_wait_ms``."""
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
        if self._read_ahead is not None:
            self._read_ahead.clear()


def _safe_log_start(p: Partition) -> int:
    try:
        return int(p.log.log_start_offset)
    except Exception:  # pragma: no cover - diagnostics only
        return -1
