"""The entry-format-agnostic part of Kafka's segment indexes: mmap, resizing and search.

An index file is a flat array of fixed-size, big-endian entries sorted by key, with no header
and no checksum (after a crash it is rebuilt from the log). A writable index is preallocated to
``max_index_size`` rounded down to a whole number of entries; the unused tail is zero bytes
and is cut off (:meth:`AbstractIndex.trim_to_valid_size`) when the segment is rolled or
closed. An existing file is therefore assumed to hold exactly ``file length / entry size``
entries when it is opened -- an untrimmed file left by a crash fails the subclasses' sanity
check and is rebuilt.

The search is a pure function over a buffer (:func:`largest_lower_bound_slot`,
:func:`smallest_upper_bound_slot`) so it can be tested without files; the class owns the mmap.

The mapping is lazy (Kafka's ``LazyIndex``): made on the first lookup or append, and one entry
of the broker's bounded :class:`~tierlog.log.file_handle_cache.FileHandleCache` (CPython's
mmap holds a descriptor), which unmaps an idle index when the broker holds more segment files
than ``log.max.open.files``; the next use maps it again. Dirty pages of an unmapped index stay
in the page cache, and :meth:`AbstractIndex.flush` then fsyncs the file instead of msync.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from tierlog.errors import IndexOffsetOverflowError
from tierlog.log.file_handle_cache import CachedHandle, FileHandleCache, file_handle_cache

#: Anything :meth:`struct.Struct.unpack_from` can read an index from.
IndexBuffer = bytes | bytearray | memoryview | mmap.mmap
_UnpackFrom = Callable[[IndexBuffer, int], tuple[Any, ...]]

INT32_MAX = 2**31 - 1
#: Disk space given to an index ahead of its appends: one page (512 offset-index entries,
#: about 2 MB of log at the default index.interval.bytes), so 100,000 active partitions hold
#: at most 800 MB of blocks ahead while a fallocate stays rare.
_ALLOCATE_AHEAD = 4096
_INT32 = struct.Struct(">i")

# Kafka's AbstractIndex reasoning, restated:
#
# Index files are read through the page cache, which evicts least-recently-used pages. Nearly
# every lookup (in-sync followers, consumers at the tail) targets the last few entries. A plain
# binary search over the whole file touches pages spread across the file -- #0, #6, #9, #11,
# #12 for a target on page 12 of 13 -- and the set of pages changes whenever the index grows
# onto a new page: with 14 pages the same lookup needs #0, #7, #10, #12, #13, and pages 7 and 10
# may have been cold for a long time. That page fault stalls a produce/fetch for up to a
# second on a busy disk.
#
# So the search first checks whether the target lies in the last N entries (the "warm"
# section) and if so searches only there; otherwise it searches the rest. All lookups near the
# tail then touch the same few pages, which stay warm. N covers 8192 bytes: small enough that
# the three entries every warm search reads (first of the warm section, middle, last) touch
# every one of its pages on a 4 KiB-page machine (so the whole section really stays hot),
# large enough that in-sync lookups land in it (8 KiB of offset index covers ~4 MB of log with
# the default index.interval.bytes).
WARM_SECTION_BYTES = 8192


def warm_entries(entry_size: int) -> int:
    """Number of entries in the warm section of an index with ``entry_size``-byte entries."""
    return WARM_SECTION_BYTES // entry_size


def _binary_search(
    buf: IndexBuffer,
    target: int,
    entry_size: int,
    key_offset: int,
    unpack_from: _UnpackFrom,
    begin: int,
    end: int,
) -> tuple[int, bool]:
    """Kafka's loop over slots ``[begin, end]``: (slot, exact) for the largest key <= target.

    Precondition: key(begin) <= target, so ``lo`` is always a valid lower bound.
    """
    lo = begin
    hi = end
    while lo < hi:
        mid = (lo + hi + 1) // 2
        found = unpack_from(buf, mid * entry_size + key_offset)[0]
        if found > target:
            hi = mid - 1
        elif found < target:
            lo = mid
        else:
            return mid, True
    return lo, False


def _index_slot_range_for(
    buf: IndexBuffer,
    entries: int,
    target: int,
    entry_size: int,
    key_offset: int,
    key_struct: struct.Struct,
    largest_lower_bound: bool,
) -> int:
    if entries <= 0:
        return -1
    unpack_from: _UnpackFrom = key_struct.unpack_from
    first_hot_entry = max(0, entries - 1 - warm_entries(entry_size))
    # Is the target in the warm section?
    if unpack_from(buf, first_hot_entry * entry_size + key_offset)[0] < target:
        slot, exact = _binary_search(
            buf, target, entry_size, key_offset, unpack_from, first_hot_entry, entries - 1
        )
    elif unpack_from(buf, key_offset)[0] > target:
        # Smaller than the least key.
        return -1 if largest_lower_bound else 0
    else:
        slot, exact = _binary_search(
            buf, target, entry_size, key_offset, unpack_from, 0, first_hot_entry
        )
    if largest_lower_bound or exact:
        return slot
    # Kafka's loop never compares its final `lo` when the range shrinks to one slot, so for a
    # target equal to the first key Kafka answers with the *next* slot (or -1). Still an upper
    # bound, but not the smallest: tierlog checks that slot so the answer is exact.
    if unpack_from(buf, slot * entry_size + key_offset)[0] == target:
        return slot
    return -1 if slot == entries - 1 else slot + 1


def largest_lower_bound_slot(
    buf: IndexBuffer,
    entries: int,
    target: int,
    entry_size: int,
    key_offset: int,
    key_struct: struct.Struct,
) -> int:
    """The slot of the largest key <= ``target`` among the first ``entries`` entries of ``buf``.

    Each entry is ``entry_size`` bytes; its key is ``key_struct`` (one field) at ``key_offset``
    within the entry. Keys must be sorted ascending. Returns -1 when every key is larger than
    the target or there are no entries.
    """
    return _index_slot_range_for(buf, entries, target, entry_size, key_offset, key_struct, True)


def smallest_upper_bound_slot(
    buf: IndexBuffer,
    entries: int,
    target: int,
    entry_size: int,
    key_offset: int,
    key_struct: struct.Struct,
) -> int:
    """The slot of the smallest key >= ``target``, or -1 when every key is smaller.

    Same arguments as :func:`largest_lower_bound_slot`.
    """
    return _index_slot_range_for(buf, entries, target, entry_size, key_offset, key_struct, False)


def round_down_to_exact_multiple(number: int, factor: int) -> int:
    """The greatest multiple of ``factor`` <= ``number``, and 0 for negative numbers.

    ``round_down_to_exact_multiple(67, 8) == 64``.
    """
    return factor * (max(0, number) // factor)


class _MapHandle(CachedHandle):
    """The mapping of one index file; ``lock`` is the index's remap lock, held by every use of
    the mapping."""

    __slots__ = ("dirty", "evicted_dirty", "lock", "mmap")

    def __init__(self) -> None:
        super().__init__()
        self.mmap: mmap.mmap | None = None
        self.lock = threading.Lock()
        self.dirty = False  # written since the last flush
        self.evicted_dirty = False  # unmapped while dirty: flush() fsyncs the file

    def try_release(self) -> bool:
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self.unmap()
            return True
        finally:
            self.lock.release()

    def unmap(self) -> None:
        m, self.mmap = self.mmap, None
        if m is not None:
            m.close()
            if self.dirty:
                self.evicted_dirty = True
                self.dirty = False


def _first_hole(fd: int, length: int) -> int:
    """Where the first hole of the file starts (``length`` when it has none, or when the
    filesystem cannot tell)."""
    try:
        return min(os.lseek(fd, 0, os.SEEK_HOLE), length)
    except OSError:
        return length


def _forget_handle(handle: _MapHandle, cache: FileHandleCache) -> None:
    """The finalizer of an index dropped without close(): unmap and leave the cache. It never
    waits (see ``_finalize_handle`` in file_records.py): a lock it cannot take is held by an
    eviction, which unmaps."""
    if handle.lock.acquire(blocking=False):
        try:
            handle.unmap()
        finally:
            handle.lock.release()
    cache.forget(handle)


class AbstractIndex(ABC):
    """A memory-mapped index file of fixed-size entries (Kafka's ``AbstractIndex``).

    Subclasses define ``ENTRY_SIZE``, the entry format, ``truncate_to`` and ``sanity_check``.

    Thread-safety: one writer at a time -- appends, truncation, resize, close and rename are
    made by the owning segment under its log's lock (and additionally serialised here by an
    internal lock). Lookups may run concurrently from any thread: a lookup reads ``entries``
    once and searches only that prefix, and an append writes its entry before it publishes the
    new count, so a concurrent lookup sees either the old or the new last entry, never a torn
    one. Lookups and remaps (resize, close) exclude each other through a second lock, so a
    lookup never touches an unmapped or shrunk buffer. Not idempotent: appending twice fails.
    """

    ENTRY_SIZE: ClassVar[int]

    def __init__(
        self, path: Path, base_offset: int, max_index_size: int = -1, writable: bool = True
    ) -> None:
        """Open (or create and preallocate) the index file at ``path``.

        Raises:
            FileNotFoundError: the file does not exist and ``writable`` is False.
            ValueError: a new file would have ``max_index_size`` smaller than one entry.
            OSError: the file could not be opened or mapped.
        """
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        # Serialises mutations (Kafka's `lock`).
        self._lock = threading.RLock()
        # Held by every use of the mapping (Kafka's `remapLock`): lookups, appends, remaps.
        self._handle = _MapHandle()
        self._remap_lock = self._handle.lock
        self._cache = file_handle_cache()
        self._closed = False
        # An index dropped without close() gives its mapping back (cache entry included).
        weakref.finalize(self, _forget_handle, self._handle, self._cache)

        entry_size = self.ENTRY_SIZE
        newly_created = False
        if writable:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                newly_created = True
            except FileExistsError:
                fd = os.open(self._path, os.O_RDWR)
        else:
            fd = os.open(self._path, os.O_RDONLY)
        try:
            if newly_created:
                if max_index_size < entry_size:
                    os.close(fd)
                    fd = -1
                    self._path.unlink(missing_ok=True)
                    raise ValueError(f"invalid max index size {max_index_size} for {self._path}")
                os.ftruncate(fd, round_down_to_exact_multiple(max_index_size, entry_size))
            length = os.fstat(fd).st_size
            data_end = length if newly_created else _first_hole(fd, length)
        finally:
            if fd >= 0:
                os.close(fd)
        self._file_length = length
        # Bytes known to have disk blocks: the valid entries (a new file's tail is a hole).
        self._allocated = 0 if newly_created else data_end
        self._max_entries = length // entry_size
        # A pre-existing index is assumed full of valid entries (it was trimmed on close),
        # up to its first hole: an untrimmed, preallocated file left by a crash is sparse, and
        # a read of a hole through a mapping on a full tmpfs is SIGBUS. The entries before it
        # end in zeros, which the subclasses' sanity check rejects (the index is rebuilt).
        self._entries = 0 if newly_created else data_end // entry_size

    # ------------------------------------------------------------------ mapping

    def _mapping(self) -> mmap.mmap | None:
        """The mapping, made now if the index has none (no mapping for an empty file: mmap
        rejects it); call with ``_remap_lock`` held.

        Raises:
            OSError: the file could not be opened or mapped (EMFILE, ENOMEM, ...).
        """
        h = self._handle
        m = h.mmap
        if m is not None:
            h.referenced = True
            return m
        if self._file_length == 0:
            return None
        flags = os.O_RDWR if self._writable else os.O_RDONLY
        fd = os.open(self._path, flags | getattr(os, "O_CLOEXEC", 0))
        try:
            access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
            m = h.mmap = mmap.mmap(fd, self._file_length, access=access)
        finally:
            os.close(fd)
        self._cache.opened(h)
        return m

    def _buffer(self) -> IndexBuffer:
        """The mapped bytes; call with ``_remap_lock`` held."""
        if self._closed:
            raise ValueError(f"index {self._path} is closed")
        if self._entries == 0:
            return b""  # nothing to read: an empty index costs no mapping (no descriptor)
        m = self._mapping()
        return m if m is not None else b""

    def _write_buffer(self, slot: int) -> mmap.mmap:
        """The writable mapping, with disk space allocated for entry ``slot``; call with
        ``_lock`` and ``_remap_lock`` held and a free slot checked.

        Raises:
            OSError: no space for the entry (ENOSPC): raised here, before the write.
        """
        m = None if self._closed or not self._writable else self._mapping()
        if m is None:
            raise ValueError(f"index {self._path} is closed, empty or read-only")
        end = (slot + 1) * self.ENTRY_SIZE
        if end > self._allocated:
            self._allocate(end)
        self._handle.dirty = True
        return m

    def _allocate(self, end: int) -> None:
        """Give the file real blocks up to ``end`` (and a little more) before the mapping is
        written there.

        A preallocated index is sparse (Kafka's ``setLength``); a store through the mapping
        into a hole on a full disk raises SIGBUS and kills the broker. Allocating ahead with
        ``posix_fallocate`` turns that into an ``OSError(ENOSPC)`` for one append; it runs once
        per :data:`_ALLOCATE_AHEAD` bytes of entries.
        """
        target = min(self._file_length, max(end, self._allocated + _ALLOCATE_AHEAD))
        fd = os.open(self._path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            try:
                os.posix_fallocate(fd, self._allocated, target - self._allocated)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                # No fallocate here (some filesystems): write the zeros instead.
                os.pwrite(fd, bytes(target - self._allocated), self._allocated)
        finally:
            os.close(fd)
        self._allocated = target

    # ------------------------------------------------------------------ accessors

    @property
    def path(self) -> Path:
        return self._path

    @property
    def file(self) -> Path:
        """Kafka's name for :attr:`path`."""
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def entries(self) -> int:
        """The number of valid entries."""
        return self._entries

    @property
    def max_entries(self) -> int:
        """How many entries the current file (mapping) can hold."""
        return self._max_entries

    @property
    def length(self) -> int:
        """Bytes of valid entries (``entries * ENTRY_SIZE``); Kafka's ``sizeInBytes()``."""
        return self._entries * self.ENTRY_SIZE

    @property
    def size_in_bytes(self) -> int:
        """Same as :attr:`length`."""
        return self._entries * self.ENTRY_SIZE

    @property
    def file_length(self) -> int:
        """Current length of the file, preallocated tail included; Kafka's ``length()``."""
        return self._file_length

    @property
    def is_closed(self) -> bool:
        return self._closed

    def is_full(self) -> bool:
        """True when no slot is left for another entry."""
        return self._entries >= self._max_entries

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``, the 4-byte form stored in the file.

        Raises:
            IndexOffsetOverflowError: the result is outside ``[0, 2**31 - 1]``.
        """
        relative = offset - self._base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(
                f"integer overflow for offset {offset} relative to base offset "
                f"{self._base_offset} ({self._path})"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """True when ``offset`` fits this index's 32-bit relative offsets."""
        return 0 <= offset - self._base_offset <= INT32_MAX

    # ------------------------------------------------------------------ subclass hooks

    @abstractmethod
    def sanity_check(self) -> None:
        """Detect obvious corruption.

        Raises:
            CorruptIndexError: the file cannot be a valid index of this segment.
        """

    @abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Remove all entries with an offset >= ``offset`` (no effect past the last entry)."""

    @abstractmethod
    def _refresh_last_entry(self) -> None:
        """Recompute cached state from the last entry after a truncation or a resize."""

    # ------------------------------------------------------------------ mutations

    def _truncate_to_offset(self, offset: int, relative_offset_at: int) -> None:
        """Remove every entry with an offset >= ``offset``; the entry's relative offset is an
        int32 at ``relative_offset_at`` (offsets never decrease from entry to entry)."""
        with self._lock:
            with self._remap_lock:
                buf = self._buffer()
                relative_target = offset - self._base_offset
                entry_size = self.ENTRY_SIZE
                slot = largest_lower_bound_slot(
                    buf, self._entries, relative_target, entry_size, relative_offset_at, _INT32
                )
                # 1) no entry <= offset: remove everything;
                # 2) an entry for exactly this offset: remove it and everything after;
                # 3) otherwise keep the entry below the offset and remove everything after it.
                if slot < 0:
                    new_entries = 0
                elif _INT32.unpack_from(buf, slot * entry_size + relative_offset_at)[0] == (
                    relative_target
                ):
                    new_entries = slot
                else:
                    new_entries = slot + 1
            self._truncate_to_entries(new_entries)

    def _truncate_to_entries(self, entries: int) -> None:
        with self._lock:
            self._entries = max(0, min(entries, self._max_entries))
            self._refresh_last_entry()

    def truncate(self) -> None:
        """Remove all entries (the file keeps its length)."""
        self._truncate_to_entries(0)

    def resize(self, new_size: int) -> bool:
        """Set the file (and mapping) length to ``new_size`` rounded down to whole entries.

        Used to trim on roll/close and to grow a segment's index back to ``max_index_size``
        when it becomes active again. Entries beyond the new size are dropped. Returns False
        when the size was already right.

        Raises:
            OSError: the file could not be resized or remapped.
        """
        with self._lock:
            rounded = round_down_to_exact_multiple(new_size, self.ENTRY_SIZE)
            if self._closed or self._file_length == rounded:
                return False
            with self._remap_lock:
                self._handle.unmap()
                fd = os.open(self._path, os.O_RDWR)
                try:
                    os.ftruncate(fd, rounded)
                    self._file_length = rounded
                    self._allocated = min(self._allocated, rounded, self._entries * self.ENTRY_SIZE)
                finally:
                    os.close(fd)
                self._max_entries = rounded // self.ENTRY_SIZE
                self._entries = min(self._entries, self._max_entries)
            self._refresh_last_entry()
            return True

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail off the file so it holds exactly the valid entries."""
        with self._lock:
            if not self._closed:
                self.resize(self._entries * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Remove all entries and grow the file back to ``max_index_size``."""
        with self._lock:
            self.truncate()
            self.resize(self._max_index_size)

    def flush(self) -> None:
        """Write dirty pages of the mapping to disk (msync; fsync when the cache unmapped the
        index since it was written)."""
        with self._lock, self._remap_lock:
            h = self._handle
            if not self._writable or self._closed:
                return
            if h.mmap is not None and h.dirty:
                h.mmap.flush()
                h.dirty = False
            if h.evicted_dirty:
                fd = os.open(self._path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                h.evicted_dirty = False

    def close(self) -> None:
        """Trim the file to its valid entries (writable indexes) and release the mapping."""
        with self._lock:
            if self._writable:
                self.trim_to_valid_size()
            self.close_handler()

    def close_handler(self) -> None:
        """Release the mapping without touching the file. Idempotent."""
        with self._lock, self._remap_lock:
            self._handle.unmap()
            self._closed = True
        self._cache.closed(self._handle)

    def delete_if_exists(self) -> bool:
        """Release the mapping and delete the file; False when it did not exist."""
        self.close_handler()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, path: Path) -> None:
        """Rename the backing file (e.g. to add ``.deleted``); the mapping stays valid.

        Raises:
            OSError: the rename failed; the index then refers to ``path`` anyway, as Kafka's.
        """
        path = Path(path)
        try:
            self._path.replace(path)
        finally:
            self._path = path

    def update_parent_dir(self, parent_dir: Path) -> None:
        """Point at the same file name in ``parent_dir`` (after the directory was renamed)."""
        self._path = Path(parent_dir) / self._path.name

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries})"
        )
