"""Kafka's ``FileRecords``: the ``.log`` file of one segment, a plain sequence of record batches.

File format (``<20-digit base offset>.log``): record batches (magic 2) back to back, exactly as
they arrived on the wire after the broker patched baseOffset and partitionLeaderEpoch; no
file header, no padding. A preallocated file (``preallocate=true``) is zero-filled past
:meth:`FileRecords.size_in_bytes` until it is trimmed on roll or close.

The file is accessed through a raw file descriptor with positional I/O (``os.pwrite``,
``os.pread``, ``os.preadv``), so concurrent readers never share a file position.

The descriptor is one entry of the broker's bounded
:class:`~tierlog.log.file_handle_cache.FileHandleCache`: when the broker holds more segment
files than ``log.max.open.files``, an idle one is closed and reopened (from its current path)
by its next read or write. Every use counts itself in the handle's ``users`` so a descriptor is
never closed under a reader.

Deletion while reading (the copy-on-write segment list of the seed): a segment removed from
the log is unlinked at once, but its descriptor is opened if needed, taken out of the cache and
stays open for as long as any reader still references this object -- POSIX keeps an unlinked
file readable through open descriptors. A ``weakref.finalize`` closes the descriptor when the
last reference goes away. Only an explicit :meth:`FileRecords.close` (log shutdown) closes it
early.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from tierlog.errors import CorruptRecordError, InvalidRecord, UnsupportedCompressionType
from tierlog.log.file_handle_cache import CachedHandle, FileHandleCache, file_handle_cache
from tierlog.records.record_batch import (
    HEADER_STRUCT,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
)

log = logging.getLogger(__name__)

#: Smallest legal batchLength (a batch with no records).
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD

#: Bytes read per ``pread`` while scanning batch headers. One read usually covers every
#: header between two offset-index entries (``index.interval.bytes`` = 4096 by default).
SCAN_BUFFER_SIZE = 8192

# baseOffset, batchLength, (11 bytes: epoch, magic, crc, attributes), lastOffsetDelta:
# the three fields an offset search needs, in one unpack.
_OFFSET_SEARCH = struct.Struct(">qi11xi")
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
_REOPEN_FLAGS = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)


class LogOffsetPosition(NamedTuple):
    """Kafka's ``LogOffsetPosition``: a batch's last offset, byte position and size."""

    offset: int
    position: int
    size: int


class TimestampAndOffset(NamedTuple):
    """Kafka's ``FileRecords.TimestampAndOffset`` (without the leader epoch)."""

    timestamp: int
    offset: int


_new_tuple = tuple.__new__


class _FdHandle(CachedHandle):
    """The descriptor of one ``.log`` file (-1 while closed by the cache)."""

    __slots__ = ("fd", "lock", "pinned", "users")

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.users = 0  # reads and writes in flight
        self.pinned = False  # unlinked: never closed before the owner goes away
        self.lock = threading.Lock()

    def try_release(self) -> bool:
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if self.users or self.pinned:
                return False
            self._close()
            return True
        finally:
            self.lock.release()

    def _close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def _finalize_handle(handle: _FdHandle, cache: FileHandleCache) -> None:
    """The finalizer: close the descriptor of a FileRecords nobody references any more.

    The garbage collector may run it on any thread at any allocation, even one that holds the
    cache's lock or this very handle's lock (an eviction in ``try_release``): it never waits.
    When the handle's lock is taken, the holder can only be that eviction (no reader is left),
    which closes the descriptor itself."""
    if handle.lock.acquire(blocking=False):
        try:
            handle._close()
        finally:
            handle.lock.release()
    cache.forget(handle)


class FileRecords:
    """The record batches of one ``.log`` file.

    Thread-safety: one writer (the owning log serialises appends, truncations and renames);
    any number of concurrent readers. Readers see a prefix of the file: the size is published
    after the bytes are written. Not idempotent: appending twice writes twice.
    """

    def __init__(
        self,
        path: Path,
        file_already_exists: bool = False,
        init_file_size: int = 0,
        preallocate: bool = False,
    ) -> None:
        """Open ``path``; a new file is created (and truncated when it was left over).

        With ``preallocate`` a new file is extended (sparsely) to ``init_file_size`` and the
        records start empty. An existing file is taken whole: recovery or the caller trims
        a zero-filled tail.

        Raises:
            OSError: the file could not be opened or created.
        """
        self._path = Path(path)
        flags = _OPEN_FLAGS if file_already_exists else _OPEN_FLAGS | os.O_TRUNC
        fd = os.open(self._path, flags, 0o644)
        try:
            if preallocate and not file_already_exists and init_file_size > 0:
                os.ftruncate(fd, init_file_size)
                size = 0
            else:
                size = os.fstat(fd).st_size
        except BaseException:
            os.close(fd)
            raise
        self._size = size
        self._closed = False
        self._cache = file_handle_cache()
        handle = self._handle = _FdHandle(fd)
        with handle.lock:
            self._cache.opened(handle)
        self._finalizer = weakref.finalize(self, _finalize_handle, handle, self._cache)

    # ------------------------------------------------------------------ the descriptor

    def _acquire(self) -> int:
        """The open descriptor, reopened when the cache closed it; counts a user until
        :meth:`_release`.

        Raises:
            OSError: closed (EBADF), or the reopen failed (EMFILE, a missing file, ...).
        """
        h = self._handle
        with h.lock:
            if self._closed:
                raise OSError(errno.EBADF, f"{self._path} is closed")
            fd = h.fd
            if fd < 0:
                fd = h.fd = os.open(self._path, _REOPEN_FLAGS)
                self._cache.opened(h)
            h.referenced = True
            h.users += 1
        return fd

    def _release(self) -> None:
        h = self._handle
        with h.lock:
            h.users -= 1

    # ------------------------------------------------------------------ accessors

    @property
    def path(self) -> Path:
        return self._path

    @property
    def file(self) -> Path:
        """Kafka's name for :attr:`path`."""
        return self._path

    @property
    def fd(self) -> int:
        """The descriptor now, -1 while the cache has it closed (for tests and tools)."""
        return self._handle.fd

    @property
    def closed(self) -> bool:
        return self._closed

    def size_in_bytes(self) -> int:
        """Bytes of record batches (a preallocated tail is not counted)."""
        return self._size

    def file_length(self) -> int:
        """The length of the file on disk, preallocated tail included."""
        fd = self._acquire()
        try:
            return os.fstat(fd).st_size
        finally:
            self._release()

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"FileRecords(path={str(self._path)!r}, size={self._size})"

    # ------------------------------------------------------------------ writes

    def append(self, data: bytes | bytearray | memoryview, prefix: bytes = b"") -> int:
        """Write ``prefix`` then ``data`` at the end; returns the number of bytes written.

        The two go out with one ``pwritev``: the log passes a patched copy of a batch's
        first bytes as ``prefix`` and the rest of the producer's buffer as ``data``.

        Raises:
            OSError: the write failed (the size is then unchanged; a partial write may be
                left past it and is overwritten by the next append).
        """
        n = (data.nbytes if isinstance(data, memoryview) else len(data)) + len(prefix)
        if n == 0:
            return 0
        fd = self._acquire()
        try:
            pos = self._size
            written = os.pwritev(fd, (prefix, data), pos) if prefix else os.pwrite(fd, data, pos)
            if written < n:
                # A short write (rare for regular files): finish from a joined copy.
                with memoryview(prefix + data if prefix else data) as view:
                    while written < n:
                        written += os.pwrite(fd, view[written:], pos + written)
        finally:
            self._release()
        self._size = pos + n
        return n

    def flush(self) -> None:
        """fsync the file (Kafka's ``channel.force(true)``)."""
        fd = self._acquire()
        try:
            os.fsync(fd)
        finally:
            self._release()

    def truncate_to(self, target_size: int) -> int:
        """Cut the file to ``target_size`` bytes; returns the number of record bytes removed.

        Also cuts a preallocated tail when ``target_size`` equals the current size.

        Raises:
            ValueError: ``target_size`` is negative or larger than the current size.
            OSError: the truncation failed.
        """
        original = self._size
        if target_size < 0 or target_size > original:
            raise ValueError(
                f"attempt to truncate {self._path} to {target_size} bytes failed: "
                f"size of this file is {original} bytes"
            )
        fd = self._acquire()
        try:
            if target_size < os.fstat(fd).st_size:
                os.ftruncate(fd, target_size)
        finally:
            self._release()
        self._size = target_size
        return original - target_size

    def trim(self) -> None:
        """Cut a preallocated tail off the file."""
        self.truncate_to(self._size)

    def close(self) -> None:
        """Flush, trim and close the descriptor. Idempotent.

        Only for shutdown: a reader still holding this object afterwards gets ``OSError``.
        """
        if self._closed:
            return
        self.flush()
        self.trim()
        self.close_handlers()

    def close_handlers(self) -> None:
        """Close the descriptor without flushing or trimming. Idempotent."""
        if not self._closed:
            self._closed = True
            self._finalizer.detach()
            h = self._handle
            with h.lock:
                h._close()
            self._cache.closed(h)

    def rename_to(self, path: Path) -> None:
        """Rename the file; the descriptor stays valid.

        Raises:
            OSError: the rename failed (the object then refers to ``path`` anyway, as Kafka's).
        """
        path = Path(path)
        self._acquire()  # open across the rename: a concurrent reader never reopens a
        try:  # path that is no longer there
            self._path.replace(path)
        finally:
            self._path = path
            self._release()

    def update_parent_dir(self, parent_dir: Path) -> None:
        """Point at the same file name in ``parent_dir`` (after the directory was renamed)."""
        self._path = Path(parent_dir) / self._path.name

    def delete_if_exists(self) -> bool:
        """Unlink the file; False when it did not exist.

        The descriptor is *not* closed: it is opened if the cache had closed it and taken out
        of the cache, so readers holding this object keep reading the unlinked file; the
        finalizer closes it once they are done.
        """
        h = self._handle
        if not self._closed:
            try:
                self._acquire()
            except FileNotFoundError:
                return False
            with h.lock:
                h.pinned = True
                h.users -= 1
            self._cache.closed(h)
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    # ------------------------------------------------------------------ reads

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``, never past :meth:`size_in_bytes`."""
        end = min(position + size, self._size)
        if end <= position:
            return b""
        fd = self._acquire()
        try:
            return os.pread(fd, end - position, position)
        finally:
            self._release()

    def read_into(self, buffer: memoryview, position: int) -> int:
        """Fill ``buffer`` from ``position`` (bounded by the size); returns the bytes read."""
        n = min(buffer.nbytes, self._size - position)
        if n <= 0:
            return 0
        view = buffer[:n] if n < buffer.nbytes else buffer
        fd = self._acquire()
        try:
            got = os.preadv(fd, [view], position)
            while 0 < got < n:
                more = os.preadv(fd, [view[got:]], position + got)
                if more == 0:
                    break
                got += more
        finally:
            self._release()
        return got

    def batches_from(
        self, start: int = 0, end: int | None = None, *, buffer_size: int = SCAN_BUFFER_SIZE
    ) -> Iterator[RecordBatchHeader]:
        """Headers of the complete batches from byte ``start`` up to ``end`` (default: size).

        Positions in the headers are absolute in the file. Stops at a trailing partial batch
        or at a header whose length is impossible (the tail of a torn write); CRCs are not
        checked. Reads ``buffer_size`` bytes at a time, so closely packed small batches cost
        one system call per buffer, not per batch.
        """
        limit = self._size if end is None else min(end, self._size)
        pos = start
        unpack = HEADER_STRUCT.unpack_from
        while limit - pos >= RECORD_BATCH_OVERHEAD:
            # One read at a time: a consumer of this generator may pause it for long.
            chunk = self.read(pos, min(buffer_size, limit - pos))
            available = len(chunk)
            if available < RECORD_BATCH_OVERHEAD:
                return  # truncated under us
            off = 0
            while available - off >= RECORD_BATCH_OVERHEAD:
                fields = unpack(chunk, off)
                length = fields[1]
                if length < MIN_BATCH_LENGTH or pos + off + length + LOG_OVERHEAD > limit:
                    return
                yield RecordBatchHeader(pos + off, *fields)
                off += length + LOG_OVERHEAD
            pos += off

    def search_for_offset_from_position(
        self, target_offset: int, starting_position: int, end: int | None = None
    ) -> LogOffsetPosition | None:
        """The first batch at or after ``starting_position`` whose last offset >= target.

        Returns (its last offset, its position, its size), or None when no such batch exists
        before ``end`` (default: the size). Kafka's ``searchForOffsetWithSize``.
        """
        limit = self._size if end is None else min(end, self._size)
        pos = starting_position
        pread = os.pread
        unpack = _OFFSET_SEARCH.unpack_from
        overhead = RECORD_BATCH_OVERHEAD
        read_size = SCAN_BUFFER_SIZE
        fd = self._acquire()
        try:
            while limit - pos >= overhead:
                chunk = pread(fd, read_size if read_size < limit - pos else limit - pos, pos)
                available = len(chunk)
                if available < overhead:
                    return None
                off = 0
                size = 0
                while available - off >= overhead:
                    base_offset, length, last_offset_delta = unpack(chunk, off)
                    size = length + LOG_OVERHEAD
                    if length < MIN_BATCH_LENGTH or pos + off + size > limit:
                        return None
                    last_offset = base_offset + last_offset_delta
                    if last_offset >= target_offset:
                        # LogOffsetPosition(...) without NamedTuple's argument handling
                        return _new_tuple(LogOffsetPosition, (last_offset, pos + off, size))
                    off += size
                pos += off
                # Big batches: read just the next header instead of a buffer mostly skipped.
                read_size = SCAN_BUFFER_SIZE if size < SCAN_BUFFER_SIZE // 2 else overhead
            return None
        finally:
            self._release()

    def largest_timestamp_after(self, starting_position: int) -> TimestampAndOffset:
        """The largest batch maxTimestamp from ``starting_position`` on, with the last offset
        of its batch; (-1, -1) when there is none."""
        max_timestamp = -1
        offset = -1
        for header in self.batches_from(starting_position):
            if header.max_timestamp > max_timestamp:
                max_timestamp = header.max_timestamp
                offset = header.last_offset
        return TimestampAndOffset(max_timestamp, offset)

    def search_for_timestamp(
        self, target_timestamp: int, starting_position: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record at or after ``starting_position`` with timestamp >= target and
        offset >= ``starting_offset`` (Kafka's ``searchForTimestamp``): batch headers are
        scanned for the first batch whose maxTimestamp reaches the target, and its records
        are decoded to find the exact record. None when there is no such record."""
        for header in self.batches_from(starting_position):
            if header.max_timestamp < target_timestamp or header.last_offset < starting_offset:
                continue
            found = self._first_record_in_batch(
                header, lambda ts: ts >= target_timestamp, starting_offset
            )
            if found is not None:
                return found
        return None

    def search_for_max_timestamp(
        self, max_timestamp: int, starting_position: int
    ) -> TimestampAndOffset | None:
        """The first record holding ``max_timestamp`` in the first batch from
        ``starting_position`` whose maxTimestamp is it (ListOffsets -3); the batch's last
        offset when no record of it matches; None when no batch has it."""
        for header in self.batches_from(starting_position):
            if header.max_timestamp == max_timestamp:
                found = self._first_record_in_batch(header, lambda ts: ts == max_timestamp, 0)
                return found or TimestampAndOffset(max_timestamp, header.last_offset)
        return None

    def _first_record_in_batch(
        self, header: RecordBatchHeader, matches: Callable[[int], bool], starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record of the batch with offset >= ``starting_offset`` whose timestamp
        ``matches``; decodes (and decompresses) the batch unless it is LogAppendTime."""
        if header.attributes & TIMESTAMP_TYPE_MASK:
            # LogAppendTime: every record has the batch's max timestamp; no decoding needed.
            if matches(header.max_timestamp) and header.last_offset >= starting_offset:
                return TimestampAndOffset(
                    header.max_timestamp, max(header.base_offset, starting_offset)
                )
            return None
        from tierlog.records.default_records import read_records

        data = self.read(header.position, header.size_in_bytes)
        try:
            records = read_records(data, replace(header, position=0), bounded=True)
        except (CorruptRecordError, InvalidRecord, UnsupportedCompressionType) as e:
            log.warning("cannot decode batch at %d of %s: %s", header.position, self, e)
            if matches(header.max_timestamp) and header.last_offset >= starting_offset:
                return TimestampAndOffset(header.max_timestamp, header.last_offset)
            return None
        for record in records:
            if record.offset >= starting_offset and matches(record.timestamp):
                return TimestampAndOffset(record.timestamp, record.offset)
        return None
