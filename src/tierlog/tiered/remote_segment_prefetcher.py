"""Parallel ranged reads of remote segment data, read ahead at the consumer's rate (tierlog;
Kafka reads one range per fetch and has no read-ahead).

A sequential consumer of tiered data asks for ~``max.partition.fetch.bytes`` at a time; one
ranged GET per fetch leaves the broker waiting for the store's latency at every fetch, and the
store serves one request at a time. Here a segment's data object is held in aligned blocks of
``block_size`` bytes, read several at once on a small pool of its own: a read ``[start, end)``
takes the blocks it covers (already read, in flight, or read now, in parallel) and starts
reading the ``depth`` blocks after them, so the next fetch finds its bytes read or on the way.

Blocks are read in aligned runs of ``blocks_per_read`` (4 x 1 MiB), each run ONE ranged read
of the RemoteStorageManager: the read-ahead window is rounded up to the end of a run. Every
request to an object store has a fixed cost besides its bytes, in the store and in the broker
(signing, a thread, the HTTP exchange); SeaweedFS, the test S3 server, even reads a whole 4 MiB
chunk of its own for any range within it. Measured there (ranged GETs, sequential): 1 MiB
reads cost the server 7-9 ms of CPU per MiB, 4 MiB reads 2 ms, and a consumer of tiered data
shares the machine's cores with it. Blocks stay 1 MiB for what is held and dropped.

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
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor

from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
)
from tierlog.tiered.storage.remote_storage_manager import RemoteStorageManager

__all__ = ["RemoteSegmentPrefetcher"]

_EWMA = 0.3  # weight of the newest sample in the smoothed rate and latency

#: A block's bytes: a view of its run's read, or bytes read alone.
_Data = bytes | memoryview


class _Stream:
    """One segment's blocks and the rate it is read at."""

    __slots__ = ("blocks", "depth", "last_read", "rate")

    def __init__(self) -> None:
        self.blocks: dict[int, Future[_Data]] = {}
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
        blocks_per_read: int = 4,
        max_depth: int = 8,
        max_bytes: int = 64 << 20,
        threads: int = 8,
        direct_below_s: float = 0.001,
    ) -> None:
        if min(block_size, blocks_per_read, max_depth, threads) <= 0 or max_bytes < block_size:
            raise ValueError(
                "prefetch block size, blocks per read, depth and threads must be positive and "
                f"max bytes at least one block: {block_size=} {blocks_per_read=} {max_depth=} "
                f"{threads=} {max_bytes=}"
            )
        self._rsm = rsm
        self.block_size = block_size
        self.blocks_per_read = blocks_per_read
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
        #: Ranged reads of runs of blocks (tests, benchmarks).
        self.reads = 0
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
            # read + one data read); the blocks ahead start from the run holding ``end``, whole
            # (the next read starts at the last batch of this one, maybe a block before ``end``).
            run = self.blocks_per_read
            cold = not st.last_read and all(k not in st.blocks for k in range(first, last + 1))
            ahead_first = (
                (n_blocks if end == size else end // bs // run * run) if cold else last + 1
            )
            if st.last_read:
                elapsed = max(now - st.last_read, 1e-4)
                sample = (end - start) / elapsed
                st.rate = sample if st.rate == 0.0 else _EWMA * sample + (1 - _EWMA) * st.rate
            st.last_read = now
            if st.rate and self._latency:
                st.depth = min(self.max_depth, math.ceil(st.rate * self._latency / bs) + 1)
            # The window ahead ends at the end of a run: reads are whole aligned runs.
            stop = min(n_blocks, -(-(ahead_first + st.depth) // run) * run)
            futures = self._blocks(md, st, [*([] if cold else range(first, last + 1)),
                                            *range(ahead_first, stop)])  # fmt: skip
            wanted = [] if cold else [(k, futures[k]) for k in range(first, last + 1)]
            overflow = max(0, ahead_first + st.depth - n_blocks)
        if cold:
            t0 = time.monotonic()
            data = self._rsm.fetch_log_segment(md, start, end - 1)
            self._observe((time.monotonic() - t0) * bs / max(len(data), 1))
            return data, overflow
        parts = []
        for k, fut in wanted:
            block = self._result(md, k, fut)
            lo = k * bs
            parts.append(block[max(start - lo, 0) : end - lo])
        return (bytes(parts[0]) if len(parts) == 1 else b"".join(parts)), overflow

    def prefetch(
        self, md: RemoteLogSegmentMetadata, blocks: int, first: Callable[[], object] | None = None
    ) -> None:
        """Start reading the first ``blocks`` blocks of ``md`` (the next segment of a read),
        each after ``first()`` (the caller fetches the segment's indexes there: they tell the
        store the data's layout; concurrent fetches of them are one)."""
        n_blocks = -(-md.segment_size_in_bytes // self.block_size)
        run = self.blocks_per_read
        with self._lock:
            st = self._stream(md.remote_log_segment_id)
            stop = min(n_blocks, -(-min(blocks, self.max_depth) // run) * run)
            self._blocks(md, st, range(stop), first)

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

    def _blocks(
        self,
        md: RemoteLogSegmentMetadata,
        st: _Stream,
        ks: Iterable[int],
        first: Callable[[], object] | None = None,
    ) -> dict[int, Future[_Data]]:
        """The futures of blocks ``ks`` (increasing); those not held are read now, each run of
        consecutive ones within one aligned run of ``blocks_per_read`` in ONE ranged read, after
        ``first()`` when given (lock held)."""
        out: dict[int, Future[_Data]] = {}
        runs: list[list[tuple[int, Future[_Data]]]] = []
        run = self.blocks_per_read
        for k in ks:
            fut = st.blocks.get(k)
            if fut is not None:
                self.blocks_hit += 1
                out[k] = fut
                continue
            if self._closed:  # read in the caller's thread, held nowhere
                out[k] = self._direct(md, k)
                continue
            self._make_room(st)
            fut = out[k] = st.blocks[k] = Future()
            self._held += 1
            self.blocks_read += 1
            if runs and runs[-1][-1][0] == k - 1 and (k - 1) // run == k // run:
                runs[-1].append((k, fut))
            else:
                runs.append([(k, fut)])
        for blocks in runs:
            self.reads += 1
            task = self._pool.submit(self._read_run, md, blocks, first)
            # Shutting down cancels the task: the blocks' readers must not wait for it.
            task.add_done_callback(_cancel_with([f for _, f in blocks]))
        return out

    def _direct(self, md: RemoteLogSegmentMetadata, k: int) -> Future[_Data]:
        fut: Future[_Data] = Future()
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

    def _read_run(
        self,
        md: RemoteLogSegmentMetadata,
        blocks: list[tuple[int, Future[_Data]]],
        first: Callable[[], object] | None,
    ) -> None:
        """Read consecutive blocks in one ranged read; each block's future gets its part (a
        view of the read's bytes, not a copy) or the read's error."""
        live = [(k, f) for k, f in blocks if f.set_running_or_notify_cancel()]
        if not live:
            return  # all dropped before the read started
        try:
            if first is not None:
                first()
            bs = self.block_size
            k0 = blocks[0][0]
            lo = k0 * bs
            hi = min((blocks[-1][0] + 1) * bs, md.segment_size_in_bytes)
            t0 = time.monotonic()
            data = self._rsm.fetch_log_segment(md, lo, hi - 1)
            self._observe((time.monotonic() - t0) * bs / max(len(data), 1))
        except BaseException as e:
            for _, f in live:
                f.set_exception(e)
            return
        view = memoryview(data)
        for k, f in live:
            f.set_result(view[(k - k0) * bs : (k - k0 + 1) * bs])

    def _read_block(self, md: RemoteLogSegmentMetadata, k: int) -> bytes:
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

    def _result(self, md: RemoteLogSegmentMetadata, k: int, fut: Future[_Data]) -> _Data:
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


def _cancel_with(futures: list[Future[_Data]]) -> Callable[[Future[None]], None]:
    """A done callback of a run's task: cancel the run's blocks if the task was cancelled."""

    def done(task: Future[None]) -> None:
        if task.cancelled():
            for f in futures:
                f.cancel()

    return done
