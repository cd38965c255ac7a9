"""The remote read path: request/result values, the byte-range arithmetic and batch checks
(sans-IO), the bounded reader thread pool (Kafka's ``RemoteLogReader`` +
``remote.log.reader.threads`` / ``remote.log.reader.max.pending.tasks``), and
:class:`RemoteLogReads`, the read side the RemoteLogManager inherits (reads, parallel reads,
timestamp lookups).

One remote read of offset X in a segment costs exactly one ranged read of the data object:

1. The offset index (from the index cache) gives ``floor``, the position of the greatest
   indexed offset <= X, and the positions ``next`` and ``after_next`` of the two index entries
   after it (:meth:`~tierlog.tiered.remote_index_cache.Entry.position_bounds`).
2. An index entry marks the start of an append whose largest offset it names. So the batch
   holding X starts before ``after_next``; if it starts before ``next`` it also ends there,
   otherwise it lies in the append starting at ``next`` and ends by ``after_next``.
3. Hence reading ``[floor, max(next + max_bytes, after_next))`` returns ``max_bytes`` from
   the batch holding X (or less, which a fetch allows) and always that first batch whole.
   Without a ``next`` entry the batch lies in the unindexed tail of the segment: read to the
   end (at most ``index.interval.bytes`` plus one append past ``floor``). In the common case
   of one batch per append, ``after_next - next`` is one batch, so the read is at most
   ``index.interval.bytes`` + one batch more than ``max_bytes``.
4. Batches whose last offset is below X are skipped; the bytes returned start at the batch
   holding X (:func:`slice_batches`).

Nothing wrong is ever returned: every complete batch handed back is checked -- magic 2, a
possible length, offsets inside the segment's range and increasing, and its CRC-32C -- and a
failure is a :class:`RemoteStorageError` for that partition (the broker answers with a
retriable error; the client retries). A trailing partial batch (cut by ``max_bytes``) is
returned unchecked, as a local read returns it; clients discard it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from tierlog.errors import (
    CorruptIndexError,
    CorruptRecordError,
    CorruptRemoteDataError,
    InvalidRecord,
    OffsetOutOfRange,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RequestTimedOut,
    UnsupportedCompressionType,
)
from tierlog.log.file_records import TimestampAndOffset
from tierlog.log.log_segment import FetchDataInfo
from tierlog.log.transaction_index import AbortedTxn
from tierlog.records.default_records import read_records
from tierlog.records.record_batch import (
    CRC_START,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
    compute_crc,
    crc32c,
    iter_headers,
)
from tierlog.tiered.metrics import PartitionMetrics, RemoteStorageMetrics
from tierlog.tiered.quota import TokenBucket
from tierlog.tiered.remote_index_cache import RemoteIndexCache
from tierlog.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from tierlog.tiered.remote_log_segment_metadata import RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState
from tierlog.tiered.remote_segment_prefetcher import RemoteSegmentPrefetcher
from tierlog.tiered.storage.remote_storage_manager import RemoteStorageManager

if TYPE_CHECKING:
    from tierlog.log.leader_epoch_file_cache import LeaderEpochFileCache
    from tierlog.log.log import Log
    from tierlog.tiered.remote_log_manager import RemoteLogManagerConfig

log = logging.getLogger(__name__)

T = TypeVar("T")

#: FetchRequest.isolation_level of read_committed.
READ_COMMITTED = 1

_MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD


@dataclass(frozen=True, slots=True)
class RemoteStorageFetchInfo:
    """One partition of a fetch to serve from remote storage (Kafka's class of that name).

    ``max_bytes`` is already min(partition max bytes, what is left of the request's max
    bytes). ``min_one_message``: return the first batch whole even if it is larger.
    """

    topic_id_partition: TopicIdPartition
    fetch_offset: int
    max_bytes: int
    min_one_message: bool = True
    #: 1 (read_committed): also collect the aborted transactions of the range read.
    isolation_level: int = 0


@dataclass(frozen=True, slots=True)
class RemoteLogReadResult:
    """The outcome of one remote read: ``info`` or ``error`` (Kafka's RemoteLogReadResult).

    ``throttled``: skipped because ``remote.log.manager.fetch.max.bytes.per.second`` was
    exceeded (``info`` holds no records; the client comes back later).
    """

    fetch_info: RemoteStorageFetchInfo
    info: FetchDataInfo | None = None
    error: BaseException | None = None
    throttled: bool = False


def read_range(
    floor: int,
    next_position: int | None,
    after_next_position: int | None,
    segment_size: int,
    max_bytes: int,
) -> tuple[int, int]:
    """``[start, end)`` byte range of the segment to read for ``max_bytes`` from the batch
    holding the target offset, that batch always whole (see the module docstring)."""
    if next_position is None:
        return floor, segment_size
    end = max(
        next_position + max_bytes,
        segment_size if after_next_position is None else after_next_position,
    )
    return floor, max(min(end, segment_size), floor)


def _corrupt(metadata: RemoteLogSegmentMetadata, position: int, why: str) -> RemoteStorageError:
    return CorruptRemoteDataError(
        f"corrupt data in remote segment {metadata.remote_log_segment_id} "
        f"[{metadata.start_offset}, {metadata.end_offset}] at byte {position}: {why}"
    )


def _check_header(
    data: bytes, pos: int, base: int, metadata: RemoteLogSegmentMetadata, fields: tuple[int, ...]
) -> None:
    length, magic = fields[1], fields[3]
    if length < _MIN_BATCH_LENGTH:
        raise _corrupt(metadata, base + pos, f"impossible batch length {length}")
    if magic != CURRENT_MAGIC:
        raise _corrupt(metadata, base + pos, f"magic {magic}, expected 2")
    first, last = fields[0], fields[0] + fields[6]
    if fields[6] < 0 or first < metadata.start_offset or last > metadata.end_offset:
        raise _corrupt(
            metadata, base + pos, f"batch offsets [{first}, {last}] outside the segment's range"
        )


def slice_batches(
    data: bytes,
    base_position: int,
    fetch_offset: int,
    max_bytes: int,
    min_one_message: bool,
    metadata: RemoteLogSegmentMetadata,
) -> FetchDataInfo | None:
    """From bytes read at ``base_position`` of a segment: the batches from the one holding
    ``fetch_offset``, at most ``max_bytes`` (the first batch whole when ``min_one_message``;
    nothing when it does not fit otherwise, as Kafka answers fetch v3+). None when no batch
    in ``data`` reaches ``fetch_offset``.

    Raises:
        RemoteStorageError: a corrupt batch (header, offsets or CRC).
    """
    n = len(data)
    unpack = HEADER_STRUCT.unpack_from
    pos = 0
    while True:
        if n - pos < RECORD_BATCH_OVERHEAD:
            return None
        fields = unpack(data, pos)
        _check_header(data, pos, base_position, metadata, fields)
        if fields[0] + fields[6] >= fetch_offset:
            break
        pos += fields[1] + LOG_OVERHEAD
    first_size = fields[1] + LOG_OVERHEAD
    if not min_one_message and first_size > max_bytes:
        return FetchDataInfo(fetch_offset, b"")
    limit = max(max_bytes, first_size) if min_one_message else max_bytes
    out = data[pos : pos + limit]
    if len(out) < first_size:
        # The range computed from the offset index always holds the first batch whole.
        raise _corrupt(metadata, base_position + pos, "batch is cut short: inconsistent index")
    _check_batches(out, base_position + pos, metadata)
    return FetchDataInfo(fetch_offset, out)


def _check_batches(out: bytes, base_position: int, metadata: RemoteLogSegmentMetadata) -> None:
    """Header sanity, increasing offsets and CRC-32C of every complete batch in ``out``."""
    unpack = HEADER_STRUCT.unpack_from
    view = memoryview(out)
    pos = 0
    n = len(out)
    expected_min = metadata.start_offset
    while n - pos >= RECORD_BATCH_OVERHEAD:
        fields = unpack(out, pos)
        _check_header(out, pos, base_position, metadata, fields)
        size = fields[1] + LOG_OVERHEAD
        if pos + size > n:
            return  # trailing partial batch
        if fields[0] < expected_min:
            raise _corrupt(metadata, base_position + pos, "batch offsets go backwards")
        if crc32c(view[pos + CRC_START : pos + size]) != fields[4]:
            raise _corrupt(metadata, base_position + pos, "batch fails its CRC-32C")
        expected_min = fields[0] + fields[6] + 1
        pos += size


class RemoteLogReader:
    """A bounded thread pool for remote reads. Thread-safe.

    At most ``threads`` reads run at once and at most ``max_pending_tasks`` are queued or
    running; more are refused with :class:`RemoteStorageError` (Kafka's
    RejectedExecutionException), so a slow object store cannot pile up unbounded work.
    """

    def __init__(
        self,
        threads: int,
        max_pending_tasks: int,
        metrics: RemoteStorageMetrics | None = None,
    ) -> None:
        if threads <= 0 or max_pending_tasks <= 0:
            raise ValueError("remote reader threads and max pending tasks must be positive")
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="remote-log-reader")
        self._max_pending = max_pending_tasks
        self._pending = 0
        self._lock = threading.Lock()
        self._metrics = metrics
        self._closed = False

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """Run ``fn(*args)`` on the pool.

        Raises:
            RemoteStorageError: too many reads pending, or the reader is closed.
        """
        with self._lock:
            if self._closed:
                raise RemoteStorageError("the remote log reader is closed")
            if self._pending >= self._max_pending:
                raise RemoteStorageError(
                    f"too many remote reads pending ({self._pending}, "
                    f"remote.log.reader.max.pending.tasks={self._max_pending})"
                )
            self._pending += 1
            if self._metrics is not None:
                self._metrics.reader_task_queue_size.set(self._pending)

        try:
            future = self._pool.submit(fn, *args)
        except RuntimeError as e:  # pool shut down concurrently
            self._done()
            raise RemoteStorageError(f"the remote log reader is closed: {e}") from e
        # On completion and on cancellation alike (a read cancelled before it started never
        # runs, so counting in the task itself would leak).
        future.add_done_callback(lambda _f: self._done())
        return future

    def _done(self) -> None:
        with self._lock:
            self._pending -= 1
            if self._metrics is not None:
                self._metrics.reader_task_queue_size.set(self._pending)

    def close(self, wait: bool = True) -> None:
        """Stop accepting reads; wait for running ones when ``wait``. Idempotent."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=wait, cancel_futures=True)


class RemoteLogReads:
    """The read side of :class:`~tierlog.tiered.remote_log_manager.RemoteLogManager`
    (Kafka's ``RemoteLogManager.read``, ``asyncRead`` and ``findOffsetByTimestamp``), kept in
    this module so each stays readable; the manager inherits it. Thread-safe."""

    config: RemoteLogManagerConfig
    rsm: RemoteStorageManager
    rlmm: RemoteLogMetadataManager
    index_cache: RemoteIndexCache
    prefetcher: RemoteSegmentPrefetcher | None
    metrics: RemoteStorageMetrics
    fetch_quota: TokenBucket
    _reader: RemoteLogReader
    _log_lookup: Callable[[TopicIdPartition], Log | None]

    def _partition_metrics(self, tp: TopicIdPartition) -> PartitionMetrics:
        raise NotImplementedError

    def read(self, fetch_info: RemoteStorageFetchInfo) -> FetchDataInfo:
        """Read one partition's records from remote storage (Kafka's ``RemoteLogManager.read``).

        Returns raw batches from the batch holding ``fetch_offset``: at most ``max_bytes``
        (the first batch whole when ``min_one_message``), every complete batch CRC-checked.

        Raises:
            OffsetOutOfRange: no remote segment holds the offset.
            RemoteResourceNotFoundError: the segment's objects are gone from remote storage.
            RemoteStorageError: remote storage failed or returned corrupt data (retriable).
        """
        tp = fetch_info.topic_id_partition
        m = self._partition_metrics(tp)
        m.fetch_requests.inc()
        t0 = time.monotonic()
        try:
            lg = self._log_lookup(tp)
            if lg is None:
                raise RemoteStorageError(f"no log for {tp} on this broker")
            try:
                info = self._read(tp, lg, fetch_info)
            except RemoteResourceNotFoundError:
                # The read may have raced the deletion of its segment (retention, or a
                # compacted topic's remote swap superseding it): the segment leaves the
                # metadata before its objects go, so looking the offset up again finds what
                # holds it now. An object that is really missing fails the same way again.
                info = self._read(tp, lg, fetch_info)
        except OffsetOutOfRange:
            # Not a storage failure (Kafka's RemoteLogReader does not count it either): the
            # offset is past remote storage -- e.g. the read ahead after a clean read of the
            # last remote segment (remote_read_ahead), which counted 1 error per consumer.
            raise
        except Exception:
            m.fetch_errors.inc()
            raise
        finally:
            self.metrics.reader_fetch_time_ms.observe((time.monotonic() - t0) * 1000)
        m.fetch_bytes.inc(len(info.records))
        self.fetch_quota.record(len(info.records))
        return info

    def _read(self, tp: TopicIdPartition, lg: Log, fi: RemoteStorageFetchInfo) -> FetchDataInfo:
        offset = fi.fetch_offset
        epoch = lg.leader_epoch_cache.epoch_for_offset(offset)
        md = None if epoch is None else self.rlmm.remote_log_segment_metadata(tp, epoch, offset)
        if md is None:
            raise OffsetOutOfRange(
                f"offset {offset} of {tp} (leader epoch {epoch}) is not in remote storage"
            )
        while md is not None:
            try:
                info, overflow = self._read_segment(md, fi)
            except RemoteStorageError as e:
                if e.segment is None:  # the object the broker's error log names
                    e.segment = str(md.remote_log_segment_id)
                raise
            if overflow and self.prefetcher is not None:
                # The read-ahead runs past this segment: start on the next one.
                nxt = self._next_segment(tp, lg, md)
                if nxt is not None:
                    self.prefetcher.prefetch(nxt, overflow, partial(self._warm_indexes, nxt))
            if info is not None:
                if fi.isolation_level == READ_COMMITTED:
                    aborted = self.collect_aborted_transactions(
                        tp, lg, md, fi.fetch_offset, md.end_offset + 1
                    )
                    info = dataclasses.replace(info, aborted_transactions=aborted)
                return info
            md = self._next_segment(tp, lg, md)
        return FetchDataInfo(offset, b"", aborted_transactions=[])

    def collect_aborted_transactions(
        self,
        tp: TopicIdPartition,
        lg: Log,
        md: RemoteLogSegmentMetadata,
        start_offset: int,
        upper_bound_offset: int,
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``
        (Kafka's ``RemoteLogManager.collectAbortedTransactions``): from the transaction index
        of ``md`` and of the later remote segments (those whose metadata says
        ``txn_idx_empty`` are skipped without a request), then the local log's, until a
        search is complete. A transaction whose marker is in a later segment, remote or
        local, is found there.

        Raises:
            RemoteStorageError: an index could not be fetched.
        """
        found: list[AbortedTxn] = []
        nxt: RemoteLogSegmentMetadata | None = md
        while nxt is not None:
            if not nxt.txn_idx_empty:
                with self.index_cache.get_index_entry(nxt) as entry:
                    try:
                        result = entry.collect_aborted_txns(start_offset, upper_bound_offset)
                    except CorruptIndexError as e:
                        raise RemoteStorageError(str(e)) from e
                found.extend(result.aborted_transactions)
                if result.is_complete:
                    return found
            nxt = self._next_segment(tp, lg, nxt)
        found.extend(lg.collect_aborted_transactions(start_offset, upper_bound_offset))
        return found

    def _read_segment(
        self, md: RemoteLogSegmentMetadata, fi: RemoteStorageFetchInfo
    ) -> tuple[FetchDataInfo | None, int]:
        """The read of ``fi`` in ``md`` (None: no batch reaches the offset), and how many
        blocks the prefetcher wants read from the next segment."""
        size = md.segment_size_in_bytes
        prefetcher = self.prefetcher
        for attempt in (1, 2):
            with self.index_cache.get_index_entry(md) as entry:
                floor, nxt, after = entry.position_bounds(fi.fetch_offset)
            start, end = read_range(floor, nxt, after, size, max(fi.max_bytes, 0))
            overflow = 0
            if end <= start:
                data = b""
            elif prefetcher is not None:
                data, overflow = prefetcher.fetch(md, start, end)
            else:
                data = self.rsm.fetch_log_segment(md, start, end - 1)
            try:
                info = slice_batches(
                    data, start, fi.fetch_offset, fi.max_bytes, fi.min_one_message, md
                )
                if info is None and end < size:
                    raise CorruptRemoteDataError(
                        f"offset {fi.fetch_offset} not found in bytes [{start}, {end}) of "
                        f"{md.remote_log_segment_id}: inconsistent offset index"
                    )
                return info, overflow
            except RemoteStorageError:
                if prefetcher is not None:
                    prefetcher.forget(md.remote_log_segment_id)
                if attempt == 2:
                    raise
                # Maybe a bad cached index (positions that do not match the data): drop it and
                # try once more with indexes fetched afresh.
                self.index_cache.remove(md.remote_log_segment_id.id)
        raise AssertionError("unreachable")  # pragma: no cover

    def _warm_indexes(self, md: RemoteLogSegmentMetadata) -> None:
        with self.index_cache.get_index_entry(md):
            pass

    def _next_segment(
        self, tp: TopicIdPartition, lg: Log, md: RemoteLogSegmentMetadata
    ) -> RemoteLogSegmentMetadata | None:
        nxt = md.end_offset + 1
        epoch = lg.leader_epoch_cache.epoch_for_offset(nxt)
        return None if epoch is None else self.rlmm.remote_log_segment_metadata(tp, epoch, nxt)

    def read_async(self, fetch_info: RemoteStorageFetchInfo) -> Future[FetchDataInfo]:
        """:meth:`read` on the ``remote.log.reader.threads`` pool.

        Raises:
            RemoteStorageError: ``remote.log.reader.max.pending.tasks`` reads are pending.
        """
        return self._reader.submit(self.read, fetch_info)

    def read_many(
        self, fetch_infos: Sequence[RemoteStorageFetchInfo], timeout_ms: int | None = None
    ) -> list[RemoteLogReadResult]:
        """Read every partition at once on the reader pool and wait at most ``timeout_ms``
        (default ``remote.fetch.max.wait.ms``); one result per request, in order.

        A partition whose read fails gets its error (OffsetOutOfRange, RemoteStorageError);
        one still running at the deadline gets :class:`RequestTimedOut` (retriable); one
        skipped because the fetch quota is exceeded comes back empty with ``throttled``.
        """
        timeout = self.config.remote_fetch_max_wait_ms if timeout_ms is None else timeout_ms
        results: list[RemoteLogReadResult | None] = [None] * len(fetch_infos)
        futures: dict[int, Future[FetchDataInfo]] = {}
        for i, fi in enumerate(fetch_infos):
            if self.fetch_quota.is_quota_exceeded():
                results[i] = RemoteLogReadResult(
                    fi, FetchDataInfo(fi.fetch_offset, b""), throttled=True
                )
                continue
            try:
                futures[i] = self.read_async(fi)
            except RemoteStorageError as e:
                results[i] = RemoteLogReadResult(fi, error=e)
        if futures:
            concurrent.futures.wait(futures.values(), timeout=timeout / 1000)
        for i, fut in futures.items():
            fi = fetch_infos[i]
            if fut.done() and not fut.cancelled():
                error = fut.exception()
                results[i] = (
                    RemoteLogReadResult(fi, fut.result())
                    if error is None
                    else RemoteLogReadResult(fi, error=error)
                )
            else:
                fut.cancel()
                results[i] = RemoteLogReadResult(
                    fi,
                    error=RequestTimedOut(
                        f"remote read of {fi.topic_id_partition} at {fi.fetch_offset} did not "
                        f"finish within remote.fetch.max.wait.ms={timeout}"
                    ),
                )
        return [r for r in results if r is not None]

    # ================================================================== timestamps

    def find_offset_by_timestamp(
        self,
        tp: TopicIdPartition,
        timestamp: int,
        start_offset: int,
        leader_epoch_cache: LeaderEpochFileCache,
    ) -> TimestampAndOffset | None:
        """The first remote record with timestamp >= ``timestamp`` and offset >=
        ``start_offset`` (Kafka's ``findOffsetByTimestamp``); None when remote storage has
        none -- then search the local log.

        Per epoch from the one holding ``start_offset``: the first COPY_SEGMENT_FINISHED
        segment with max timestamp >= ``timestamp`` and end offset >= ``start_offset``; its
        time index, offset index and one ranged read find the record.

        Raises:
            RemoteStorageError: remote storage failed or returned corrupt data.
        """
        epoch = leader_epoch_cache.epoch_for_offset(start_offset)
        if epoch is None:
            earliest = leader_epoch_cache.earliest_entry
            epoch = earliest.epoch if earliest is not None else None
        while epoch is not None:
            for md in self.rlmm.list_remote_log_segments(tp, epoch):
                if (
                    md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                    and md.max_timestamp_ms >= timestamp
                    and md.end_offset >= start_offset
                ):
                    found = self._lookup_timestamp(md, timestamp, start_offset)
                    if found is not None:
                        return found
            epoch = leader_epoch_cache.next_epoch(epoch)
        return None

    def _lookup_timestamp(
        self, md: RemoteLogSegmentMetadata, timestamp: int, start_offset: int
    ) -> TimestampAndOffset | None:
        size = md.segment_size_in_bytes
        with self.index_cache.get_index_entry(md) as entry:
            scan_from = entry.lookup_timestamp(timestamp, start_offset)
            if scan_from is None:
                return None
            # The first time index entry past the target names an offset whose record is
            # later than the target: the answer is at or before it -- read up to its batch.
            bound = entry.time_entry_after(timestamp)
            end = size
            if bound is not None and bound >= start_offset:
                after = entry.position_bounds(bound)[2]
                end = size if after is None else after
        position = scan_from.position
        while position < size:
            data = self.rsm.fetch_log_segment(md, position, max(end, position + 1) - 1)
            consumed = 0
            for header in iter_headers(data):
                consumed = header.position + header.size_in_bytes
                if header.max_timestamp < timestamp or header.last_offset < start_offset:
                    continue
                if header.magic != CURRENT_MAGIC or compute_crc(data, header) != header.crc:
                    raise CorruptRemoteDataError(
                        f"corrupt batch at byte {position + header.position} of remote segment "
                        f"{md.remote_log_segment_id}"
                    )
                found = _first_record(data, header, timestamp, start_offset)
                if found is not None:
                    return found
            if end >= size or consumed == 0:
                return None
            position += consumed  # the bound was short (should not happen): read on
            end = size
        return None


def _first_record(
    data: bytes, header: RecordBatchHeader, timestamp: int, start_offset: int
) -> TimestampAndOffset | None:
    """The first record of a batch with timestamp >= ``timestamp`` and offset >=
    ``start_offset`` (decodes the batch unless it is LogAppendTime)."""
    if header.attributes & TIMESTAMP_TYPE_MASK:
        return TimestampAndOffset(header.max_timestamp, max(header.base_offset, start_offset))
    try:
        records = read_records(data, header, bounded=True)
    except (CorruptRecordError, InvalidRecord, UnsupportedCompressionType) as e:
        # As the local lookup does: a batch that cannot (or must not) be decoded - a
        # compression bomb - answers with its header's max timestamp and last offset.
        log.warning("cannot decode the remote batch at offset %d: %s", header.base_offset, e)
        if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
            return TimestampAndOffset(header.max_timestamp, header.last_offset)
        return None
    for record in records:
        if record.offset >= start_offset and record.timestamp >= timestamp:
            return TimestampAndOffset(record.timestamp, record.offset)
    return None


__all__ = [
    "RemoteLogReadResult",
    "RemoteLogReads",
    "RemoteLogReader",
    "RemoteStorageFetchInfo",
    "read_range",
    "slice_batches",
]
