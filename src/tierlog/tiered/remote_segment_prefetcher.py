"""Parallel ranged reads of remote segment data, read ahead at the consumer's rate (tierlog;
Kafka reads one range per fetch and has no read-ahead).

A sequential consumer of tiered data asks for ~``max.partition.fetch.bytes`` at a time; one
ranged GET per fetch leaves the broker waiting for the store's latency at every fetch, and the
store serves one request at a time. Here a segment's data object is read in aligned blocks of
``block_size`` bytes, each one ranged read of the RemoteStorageManager, several at once on a
small pool of its own: a read ``[start, end)`` takes the blocks it covers (already read, in
flight, or read now, in parallel) and starts reading the ``depth`` blocks after them, so the
next fetch finds its bytes read or on the way.

``depth`` follows the consumer: blocks in flight = consumer rate x block read latency / block
size, + 1 (both measured, smoothed): a slow consumer costs one block ahead, a fast one up to
``max_depth`` parallel reads. Blocks wanted past the segment's end are reported to the caller,
which starts them on the next segment (:meth:`prefetch`). A store that reads a block faster
than ``direct_below_s`` (a local filesystem: measured, 0.1-0.3 ms per MiB from the page cache)
has no latency to hide: its ranges are read directly, as without the prefetcher.

Bounded: at most ``max_bytes`` of blocks held (read or in flight), least recently used
segments dropped first; blocks behind a read are dropped at once (a sequential consumer does
not come back). Remote segments never change, so a block read once is the segment's bytes for
good. A block read ahead that failed is read once more when asked for; only that failure is the
read's error. Thread-safe.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor

from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
)
from tierlog.tiered.storage.remote_storage_manager import RemoteStorageManager

__all__ = ["RemoteSegmentPrefetcher"]

_EWMA = 0.3  # weight of the newest sample in the smoothed rate and latency


class _Stream:
    """One segment's blocks and the rate it is read at."""

    __slots__ = ("blocks", "depth", "last_read", "rate")

    def __init__(self) -> None:
        self.blocks: dict[int, Future[bytes]] = {}
        self.last_read = 0.0
        self.rate = 0.0  # bytes/s handed to readers
        self.depth = 1


class RemoteSegmentPrefetcher:
    """Aligned blocks of remote segment data, read in parallel and ahead (module docstring)."""

    def __init__(
        self,
        rsm: RemoteStorageManager,
        *,
        block_size: int = 1 << 20,
        max_depth: int = 8,
        max_bytes: int = 64 << 20,
        threads: int = 8,
        direct_below_s: float = 0.001,
    ) -> None:
        if block_size <= 0 or max_depth <= 0 or threads <= 0 or max_bytes < block_size:
            raise ValueError(
                "prefetch block size, depth and threads must be positive and max bytes at "
                f"least one block: {block_size=} {max_depth=} {threads=} {max_bytes=}"
            )
        self._rsm = rsm
        self.block_size = block_size
        self.max_depth = max_depth
        #: Block reads faster than this (smoothed): read ranges directly, nothing ahead.
        self.direct_below_s = direct_below_s
        self._max_blocks = max_bytes // block_size
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="remote-log-prefetch")
        self._lock = threading.Lock()
        self._streams: OrderedDict[RemoteLogSegmentId, _Stream] = OrderedDict()
        self._held = 0  # blocks in all streams
        self._latency = 0.0  # seconds per block read, smoothed
        self._closed = False
        #: Counters (tests, benchmarks): blocks read, blocks found read or in flight.
        self.blocks_read = 0
        self.blocks_hit = 0

    # ------------------------------------------------------------------ reading

    def fetch(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> tuple[bytes, int]:
        """Bytes ``[start, end)`` of ``md``'s data (cut at the segment's size), and how many
        blocks the read-ahead wanted past the segment's end (for :meth:`prefetch` of the
        next segment).

        Raises:
            RemoteStorageError: remote storage failed (the read of a block this call needed).
        """
        size = md.segment_size_in_bytes
        end = min(end, size)
        if end <= start:
            return b"", 0
        bs = self.block_size
        first, last = start // bs, (end - 1) // bs
        if self._latency and self._latency < self.direct_below_s:
            # A store that answers a block in well under a millisecond (a local filesystem,
            # with the kernel's own read-ahead) has no latency to hide: blocks and threads
            # would only add copies. Read the range itself, still timed.
            t0 = time.monotonic()
            data = self._rsm.fetch_log_segment(md, start, end - 1)
            self._observe((time.monotonic() - t0) * bs / max(len(data), 1))
            return data, 0
        n_blocks = -(-size // bs)
        now = time.monotonic()
        with self._lock:
            st = self._stream(md.remote_log_segment_id)
            for k in [k for k in st.blocks if k < first]:
                del st.blocks[k]  # behind the reader: a sequential consumer is past them
                self._held -= 1
            # A segment's first read (nothing of it held or read before) is one ranged read
            # of exactly its range, as without the prefetcher (a cold read costs one indexes
            # read + one data read); the blocks ahead start from the one holding ``end``.
            cold = not st.last_read and all(k not in st.blocks for k in range(first, last + 1))
            wanted = [] if cold else [(k, self._block(md, st, k)) for k in range(first, last + 1)]
            ahead_first = (n_blocks if end == size else end // bs) if cold else last + 1
            if st.last_read:
                elapsed = max(now - st.last_read, 1e-4)
                sample = (end - start) / elapsed
                st.rate = sample if st.rate == 0.0 else _EWMA * sample + (1 - _EWMA) * st.rate
            st.last_read = now
            if st.rate and self._latency:
                st.depth = min(self.max_depth, math.ceil(st.rate * self._latency / bs) + 1)
            for k in range(ahead_first, min(ahead_first + st.depth, n_blocks)):
                self._block(md, st, k)
            overflow = max(0, ahead_first + st.depth - n_blocks)
        if cold:
            t0 = time.monotonic()
            data = self._rsm.fetch_log_segment(md, start, end - 1)
            self._observe((time.monotonic() - t0) * bs / max(len(data), 1))
            return data, overflow
        parts = []
        for k, fut in wanted:
            data = self._result(md, k, fut)
            lo = k * bs
            parts.append(data[max(start - lo, 0) : end - lo])
        return (parts[0] if len(parts) == 1 else b"".join(parts)), overflow

    def prefetch(
        self, md: RemoteLogSegmentMetadata, blocks: int, first: Callable[[], object] | None = None
    ) -> None:
        """Start reading the first ``blocks`` blocks of ``md`` (the next segment of a read),
        each after ``first()`` (the caller fetches the segment's indexes there: they tell the
        store the data's layout; concurrent fetches of them are one)."""
        n_blocks = -(-md.segment_size_in_bytes // self.block_size)
        with self._lock:
            st = self._stream(md.remote_log_segment_id)
            for k in range(min(blocks, n_blocks, self.max_depth)):
                self._block(md, st, k, first)

    def forget(self, segment_id: RemoteLogSegmentId) -> None:
        """Drop a segment's blocks (its data may have been wrong, or it is deleted)."""
        with self._lock:
            st = self._streams.pop(segment_id, None)
            if st is not None:
                self._drop(st)

    def close(self) -> None:
        """Cancel the reads in flight and drop every block. Idempotent."""
        with self._lock:
            self._closed = True
            for st in self._streams.values():
                self._drop(st)
            self._streams.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ internals

    def _stream(self, segment_id: RemoteLogSegmentId) -> _Stream:
        st = self._streams.get(segment_id)
        if st is None:
            st = self._streams[segment_id] = _Stream()
        else:
            self._streams.move_to_end(segment_id)
        return st

    def _drop(self, st: _Stream) -> None:
        for fut in st.blocks.values():
            fut.cancel()
        self._held -= len(st.blocks)
        st.blocks.clear()

    def _block(
        self,
        md: RemoteLogSegmentMetadata,
        st: _Stream,
        k: int,
        first: Callable[[], object] | None = None,
    ) -> Future[bytes]:
        """Block ``k``'s future, read now if not held (lock held)."""
        fut = st.blocks.get(k)
        if fut is not None:
            self.blocks_hit += 1
            return fut
        if self._closed:  # read in the caller's thread, held nowhere
            return self._direct(md, k)
        self._make_room(st)
        fut = self._pool.submit(self._read_block, md, k, first)
        st.blocks[k] = fut
        self._held += 1
        self.blocks_read += 1
        return fut

    def _direct(self, md: RemoteLogSegmentMetadata, k: int) -> Future[bytes]:
        fut: Future[bytes] = Future()
        try:
            fut.set_result(self._read_block(md, k))
        except Exception as e:
            fut.set_exception(e)
        return fut

    def _make_room(self, keep: _Stream) -> None:
        """Drop least recently used segments' blocks until one more fits (lock held)."""
        while self._held >= self._max_blocks:
            victim = next((s for s in self._streams.values() if s is not keep and s.blocks), None)
            if victim is None:  # only ``keep`` holds blocks: drop its farthest one
                k = max(keep.blocks)
                keep.blocks.pop(k).cancel()
                self._held -= 1
                return
            self._drop(victim)

    def _read_block(
        self, md: RemoteLogSegmentMetadata, k: int, first: Callable[[], object] | None = None
    ) -> bytes:
        if first is not None:
            first()
        bs = self.block_size
        lo = k * bs
        hi = min(lo + bs, md.segment_size_in_bytes)
        t0 = time.monotonic()
        data = self._rsm.fetch_log_segment(md, lo, hi - 1)
        self._observe((time.monotonic() - t0) * bs / max(len(data), 1))
        return data

    def _observe(self, took: float) -> None:
        """One more sample of the seconds a block read takes."""
        with self._lock:
            old = self._latency
            self._latency = took if not old else _EWMA * took + (1 - _EWMA) * old

    def _result(self, md: RemoteLogSegmentMetadata, k: int, fut: Future[bytes]) -> bytes:
        """The block's bytes; a failed or cancelled read ahead is read once more here."""
        try:
            return fut.result()
        except (Exception, CancelledError):
            with self._lock:
                st = self._streams.get(md.remote_log_segment_id)
                if st is not None and st.blocks.get(k) is fut:
                    del st.blocks[k]
                    self._held -= 1
            return self._read_block(md, k)
