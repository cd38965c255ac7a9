"""Read-ahead for sequential remote fetches (tierlog; Kafka has none).

A consumer reading tiered data fetches offset X, gets batches up to offset Y, and comes back
for Y + 1 -- one round trip to the object store per fetch, during which the consumer waits
(librdkafka keeps one fetch in flight per broker). So after serving a remote read, the
broker starts reading the next range at once, on the remote log reader pool; when the
consumer's next fetch asks for exactly that offset, it is served from the read in flight or
already done, and the store's latency overlaps the consumer's work.

Safe because records never change once below the high watermark: the bytes read for an
offset are the bytes any later read of it returns. A read-ahead is used only when the
replica manager has already decided that the offset is remote (so it is still >= the log
start offset), only for the same partition, offset and at least the same byte budget.

Speculative, so its failure never fails the fetch: a read ahead that failed before the fetch
came is dropped and the fetch reads afresh; one still in flight is awaited and, should it
fail, followed by a fresh read of the fetch's own request -- only when that fails too does the
partition answer KAFKA_STORAGE_ERROR (56).

Bounded: at most ``max_entries`` reads ahead (oldest dropped first), each forgotten after
``ttl_s``. Event-loop only (not thread-safe).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING

from tierlog.errors import RemoteStorageError
from tierlog.records.record_batch import iter_headers

if TYPE_CHECKING:
    from tierlog.log.log_segment import FetchDataInfo
    from tierlog.tiered.remote_log_manager import RemoteLogManager
    from tierlog.tiered.remote_log_reader import RemoteStorageFetchInfo
    from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition

__all__ = ["RemoteReadAhead", "next_fetch_offset"]


def next_fetch_offset(records: bytes | memoryview) -> int | None:
    """The offset a consumer fetches after receiving ``records``: one past the last complete
    batch (a trailing partial batch is dropped by clients); None without a complete batch."""
    last = None
    for header in iter_headers(records):
        last = header
    return None if last is None else last.next_offset


class RemoteReadAhead:
    """Reads started ahead of the fetches expected next (see the module docstring)."""

    def __init__(self, rlm: RemoteLogManager, *, max_entries: int = 64, ttl_s: float = 10.0):
        self._rlm = rlm
        self._max_entries = max_entries
        self._ttl_s = ttl_s
        self._entries: OrderedDict[
            tuple[TopicIdPartition, int],
            tuple[Future[FetchDataInfo], RemoteStorageFetchInfo, float],
        ] = OrderedDict()
        #: Counters (tests, benchmarks): fetches served from a read ahead, reads started.
        self.hits = 0
        self.started = 0

    def take(self, fi: RemoteStorageFetchInfo) -> Future[FetchDataInfo] | None:
        """The read of exactly this fetch, if a usable one was started ahead; it is forgotten
        either way. A read still in flight is returned as a future that, should the read ahead
        fail, completes with a fresh read of ``fi`` instead (see the module docstring)."""
        entry = self._entries.pop((fi.topic_id_partition, fi.fetch_offset), None)
        if entry is None:
            return None
        future, ahead, at = entry
        if (
            time.monotonic() - at > self._ttl_s
            or ahead.max_bytes > fi.max_bytes
            or ahead.isolation_level != fi.isolation_level
        ):
            future.cancel()
            return None
        if future.done():
            if future.cancelled() or future.exception() is not None:
                return None  # the caller reads afresh
            self.hits += 1
            return future
        self.hits += 1
        return self._or_fresh_read(future, fi)

    def _or_fresh_read(
        self, ahead: Future[FetchDataInfo], fi: RemoteStorageFetchInfo
    ) -> Future[FetchDataInfo]:
        """A future of ``ahead``'s result or, when it fails, of a fresh read of ``fi``.
        Cancelling it cancels the read it waits on. The callbacks run on the reader threads
        (``read_async`` is thread-safe) and touch no state of this object."""
        out: Future[FetchDataInfo] = Future()
        rlm = self._rlm

        def ahead_done(f: Future[FetchDataInfo]) -> None:
            if out.cancelled():
                return
            if not f.cancelled() and f.exception() is None:
                _settle(out, f)
                return
            try:
                fresh = rlm.read_async(fi)
            except RemoteStorageError as e:  # the reader pool is busy or closed
                _fail(out, e)
                return
            out.add_done_callback(lambda o: fresh.cancel() if o.cancelled() else None)
            fresh.add_done_callback(lambda g: _settle(out, g))

        out.add_done_callback(lambda o: ahead.cancel() if o.cancelled() else None)
        ahead.add_done_callback(ahead_done)
        return out

    def after(self, fi: RemoteStorageFetchInfo, info: FetchDataInfo) -> None:
        """A remote read for ``fi`` returned ``info``: read the range after it ahead."""
        nxt = next_fetch_offset(info.records)
        if nxt is None or fi.max_bytes <= 0:
            return
        from tierlog.tiered.remote_log_reader import RemoteStorageFetchInfo

        ahead = RemoteStorageFetchInfo(
            fi.topic_id_partition, nxt, fi.max_bytes, True, fi.isolation_level
        )
        key = (fi.topic_id_partition, nxt)
        if key in self._entries:
            return
        if self._rlm.is_remote_fetch_quota_exceeded():
            return
        try:
            future = self._rlm.read_async(ahead)
        except RemoteStorageError:  # the reader pool is busy: no read ahead
            return
        self.started += 1
        self._entries[key] = (future, ahead, time.monotonic())
        while len(self._entries) > self._max_entries:
            _, (old, _, _) = self._entries.popitem(last=False)
            old.cancel()

    def clear(self) -> None:
        for future, _, _ in self._entries.values():
            future.cancel()
        self._entries.clear()


def _settle(out: Future[FetchDataInfo], src: Future[FetchDataInfo]) -> None:
    """Complete ``out`` as ``src`` completed (unless ``out`` was cancelled meanwhile); ``out``
    is cancelled only by its caller, so a read cancelled under it (the reader pool shutting
    down) is a failure."""
    if src.cancelled():
        _fail(out, RemoteStorageError("the remote read was cancelled: shutting down"))
    elif (error := src.exception()) is not None:
        _fail(out, error)
    else:
        try:
            out.set_result(src.result())
        except InvalidStateError:  # cancelled concurrently (the fetch's deadline)
            pass


def _fail(out: Future[FetchDataInfo], error: BaseException) -> None:
    try:
        out.set_exception(error)
    except InvalidStateError:  # cancelled concurrently
        pass
