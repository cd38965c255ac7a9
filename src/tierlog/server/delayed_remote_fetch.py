"""Reads of remote data for Fetch (Kafka's ``DelayedRemoteFetch``), on behalf of the replica
manager (:mod:`tierlog.server.replica_manager`).

A fetch offset in [log start offset, local log start offset) of a partition with remote storage
is read from remote storage by the RemoteLogManager. Every such partition of a request is read
at once, on the manager's ``remote.log.reader.threads`` pool, and the response waits for them
up to ``remote.fetch.max.wait.ms`` (Kafka <= 4.1 served only the first one per request). Each
gets ``min(partition max bytes, what is left of the request's max bytes)`` and
``min_one_message`` only while the response holds no data yet, as a local read. Outcome per
partition, the others unaffected: data; OFFSET_OUT_OF_RANGE (1) when no remote segment holds
the offset; UNKNOWN_SERVER_ERROR (-1) when an object the read needs is missing or corrupt
(retrying cannot help: Kafka answers -1 for any failed remote read, and clients report it --
librdkafka as a consumer error, where 56 would only make it refresh its metadata and fetch
again, a silent stall); KAFKA_STORAGE_ERROR (56, retriable) when remote storage fails
otherwise (unreachable, a timeout: the consumer rides out a short outage), until the
partition's reads have all failed for ``TRANSIENT_FAILURE_ROUNDS`` x
``remote.fetch.max.wait.ms`` (10 s by default), then UNKNOWN_SERVER_ERROR until one succeeds;
empty records and no error when the read is not done by the deadline (Kafka's
DelayedRemoteFetch expiry: the client simply fetches again) or when
``remote.log.manager.fetch.max.bytes.per.second`` is exceeded. Consumers never get
OFFSET_MOVED_TO_TIERED_STORAGE (109); followers (replica id >= 0) do, as in Kafka. A failure is
logged at once, then once a minute per remote segment (:class:`LogLimiter`); every one is
counted in ``RemoteFetchErrorsPerSec`` by the reader. After each
remote read the range a sequential consumer asks for next is read ahead
(:mod:`tierlog.server.remote_read_ahead`). A ``file://`` store
(``RemoteLogManager.reads_inline``) is read on the event loop instead, as local segments are,
with the same outcomes: its reads take what a local segment's take, and the hops to a reader
thread and back (each waiting for the GIL) had halved sequential remote reads.

Runs on the event loop thread only (not thread-safe).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    KafkaStorageError,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    UnknownServerError,
)
from tierlog.server.remote_read_ahead import RemoteReadAhead
from tierlog.tiered.log_limiter import LogLimiter

if TYPE_CHECKING:
    from tierlog.cluster.partition import Partition
    from tierlog.server.fetch_path import FetchPartitionResult
    from tierlog.tiered.remote_log_manager import RemoteLogManager
    from tierlog.tiered.remote_log_reader import RemoteStorageFetchInfo
    from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition

__all__ = ["DelayedRemoteFetch"]

log = logging.getLogger(__name__)

#: A partition whose remote reads have all failed transiently for longer than this many
#: ``remote.fetch.max.wait.ms`` gets UNKNOWN_SERVER_ERROR, which consumers report, instead
#: of KAFKA_STORAGE_ERROR, which they retry silently: a long outage is not a silent stall.
TRANSIENT_FAILURE_ROUNDS = 20


class DelayedRemoteFetch:
    """The remote reads of fetches, with the read-ahead of sequential consumers."""

    def __init__(self, rlm: RemoteLogManager) -> None:
        self.rlm = rlm
        #: Read on the event loop, as local segments are: the store is a local directory
        #: (``file://``), whose reads take what a local segment's take.
        self.inline = rlm.reads_inline
        self.read_ahead = RemoteReadAhead(rlm)
        self.error_log = LogLimiter(60.0)
        self.clock = time.monotonic  # replaced in tests
        #: Partitions whose remote reads fail transiently: (first, last) failure, monotonic.
        self._failing_since: dict[TopicIdPartition, tuple[float, float]] = {}

    def plan(
        self,
        p: Partition,
        result: FetchPartitionResult,
        fetch_offset: int,
        max_bytes: int,
        min_one_message: bool,
        replica_id: int,
        isolation_level: int = 0,
    ) -> bool:
        """When ``fetch_offset`` is only in remote storage, prepare ``result`` for a remote
        read (or answer a follower with 109); True then. read_committed reads also collect
        the aborted transactions of their range."""
        rlm = self.rlm
        lg = p.log
        if p.topic_id is None or not rlm.needs_remote_read(lg, fetch_offset):
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
            isolation_level,
        )
        return True

    async def read(self, results: list[FetchPartitionResult]) -> int:
        """Fill in every result that waits for a remote read: all at once, within
        ``remote.fetch.max.wait.ms`` (see the module docstring for the outcomes). Returns
        how many were skipped because the remote fetch quota is exceeded."""
        rlm = self.rlm
        pending = [r for r in results if r.remote is not None]
        throttled = 0
        if not pending:
            return throttled
        if self.inline:
            return self._read_inline(pending)
        read_ahead = self.read_ahead
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
                self._failing_since.pop(fi.topic_id_partition, None)
                info = fut.result()
                r.records = info.records
                r.aborted_transactions = info.aborted_transactions
                read_ahead.after(fi, info)  # the consumer's next fetch, read meanwhile
            else:
                self._answer_failure(r, fi, error)
        return throttled

    def _read_inline(self, pending: list[FetchPartitionResult]) -> int:
        """:meth:`read` of a local store: each read here and now, no thread, no read-ahead
        (the kernel's page cache and read-ahead are the store's). Same outcomes."""
        rlm = self.rlm
        throttled = 0
        for r in pending:
            fi, r.remote = r.remote, None
            assert fi is not None
            if rlm.is_remote_fetch_quota_exceeded():
                throttled += 1
                continue
            try:
                info = rlm.read(fi)
            except Exception as error:
                self._answer_failure(r, fi, error)
                continue
            self._failing_since.pop(fi.topic_id_partition, None)
            r.records = info.records
            r.aborted_transactions = info.aborted_transactions
        return throttled

    def _answer_failure(
        self, r: FetchPartitionResult, fi: RemoteStorageFetchInfo, error: BaseException
    ) -> None:
        """The error code of a failed remote read (module docstring), logged."""
        if isinstance(error, OffsetOutOfRange):
            r.error_code = OffsetOutOfRange.error_code
        elif isinstance(error, RemoteStorageError):
            escalated = not error.permanent and self._failing_too_long(fi)
            r.error_code = (
                UnknownServerError.error_code
                if error.permanent or escalated
                else KafkaStorageError.error_code
            )
            self._log_failure(fi, error, escalated)
        else:
            log.error("remote read failed", exc_info=error)
            r.error_code = KafkaStorageError.error_code

    def _failing_too_long(self, fi: RemoteStorageFetchInfo) -> bool:
        """A transient failure of a partition whose remote reads have all failed for more
        than ``TRANSIENT_FAILURE_ROUNDS`` x ``remote.fetch.max.wait.ms``."""
        now = self.clock()
        limit_s = TRANSIENT_FAILURE_ROUNDS * self.rlm.config.remote_fetch_max_wait_ms / 1000
        first, last = self._failing_since.get(fi.topic_id_partition, (now, now))
        if now - last > limit_s:  # nobody read it for a while: a new run of failures
            first = now
        self._failing_since[fi.topic_id_partition] = (first, now)
        return now - first > limit_s

    def _log_failure(
        self, fi: RemoteStorageFetchInfo, error: RemoteStorageError, escalated: bool = False
    ) -> None:
        """Once per remote segment (else partition) per minute: what failed, what the
        client was answered and where to look."""
        tp = fi.topic_id_partition
        suppressed = self.error_log.admit((tp, error.segment, type(error), escalated))
        if suppressed is None:
            return
        more = f" ({suppressed} more failures since the last line)" if suppressed else ""
        if isinstance(error, RemoteResourceNotFoundError):
            log.error("remote read of %s at offset %d failed, answering UNKNOWN_SERVER_ERROR: "
                      "an object of remote segment %s is missing from remote storage "
                      "(`tierlog remote verify` lists them): %s%s",
                      tp, fi.fetch_offset, error.segment, error, more)  # fmt: skip
        elif error.permanent:
            log.error("remote read of %s at offset %d failed, answering UNKNOWN_SERVER_ERROR: "
                      "remote segment %s is corrupt: %s%s",
                      tp, fi.fetch_offset, error.segment, error, more)  # fmt: skip
        elif escalated:
            log.error("remote read of %s at offset %d failed, answering UNKNOWN_SERVER_ERROR: "
                      "remote storage has failed every read of this partition for over %d "
                      "x remote.fetch.max.wait.ms: %s%s", tp, fi.fetch_offset,
                      TRANSIENT_FAILURE_ROUNDS, error, more)  # fmt: skip
        else:
            log.warning("remote read of %s at offset %d failed, answering "
                        "KAFKA_STORAGE_ERROR (retriable): %s%s",
                        tp, fi.fetch_offset, error, more)  # fmt: skip

    async def answer(
        self, results: list[FetchPartitionResult], max_wait_ms: int
    ) -> list[FetchPartitionResult]:
        throttled = await self.read(results)
        if throttled and max_wait_ms > 0 and not any(r.size or r.error_code for r in results):
            # Only throttled partitions: answer after the long-poll wait, not at once, or
            # the consumer would spin on empty responses until the quota refills.
            await asyncio.sleep(min(max_wait_ms, 1000) / 1000)
        return results
