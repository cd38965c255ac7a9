"""Kafka's offset index: offset -> byte position in the segment's ``.log`` file.

File format (``<20-digit base offset>.index``), a series of 8-byte entries, big-endian::

    relativeOffset: int32    offset - base offset of the segment (so 4 bytes suffice)
    position:       int32    byte position of the batch holding that offset in the .log file

The index is sparse: the segment adds an entry every ``index.interval.bytes`` of log. Entries
are sorted by offset and by position. A lookup finds the greatest indexed offset <= the target;
the reader then scans batch headers forward from that position. The file is preallocated to
``segment.index.bytes`` and trimmed when the segment is rolled; no checksum is kept -- after a
crash the index is rebuilt from the log.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from tierlog.errors import CorruptIndexError, InvalidOffsetError
from tierlog.log.abstract_index import (
    INT32_MAX,
    AbstractIndex,
    IndexBuffer,
    largest_lower_bound_slot,
    smallest_upper_bound_slot,
)

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">ii")
_INT32 = struct.Struct(">i")
_RELATIVE_OFFSET_AT = 0
_POSITION_AT = 4


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An offset and the byte position of the batch containing it."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """The ``.index`` file of one segment. See :class:`AbstractIndex` for thread-safety."""

    ENTRY_SIZE = ENTRY_SIZE

    def __init__(
        self, path: Path, base_offset: int, max_index_size: int = -1, writable: bool = True
    ) -> None:
        self._last_offset = base_offset
        super().__init__(path, base_offset, max_index_size, writable)
        self._refresh_last_entry()

    # ------------------------------------------------------------------ reads

    def _parse_entry(self, buf: IndexBuffer, slot: int) -> OffsetPosition:
        relative, position = _ENTRY.unpack_from(buf, slot * ENTRY_SIZE)
        return OffsetPosition(self._base_offset + relative, position)

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or ``base_offset`` when the index is empty."""
        return self._last_offset

    def last_entry(self) -> OffsetPosition:
        """The last entry, or ``OffsetPosition(base_offset, 0)`` when the index is empty."""
        with self._remap_lock:
            n = self._entries
            if n == 0:
                return OffsetPosition(self._base_offset, 0)
            return self._parse_entry(self._buffer(), n - 1)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the greatest offset <= ``target_offset``.

        Returns ``OffsetPosition(base_offset, 0)`` when the target is below the first entry or
        the index is empty: the scan then starts at the beginning of the segment.
        """
        with self._remap_lock:
            buf = self._buffer()
            slot = largest_lower_bound_slot(
                buf,
                self._entries,
                target_offset - self._base_offset,
                ENTRY_SIZE,
                _RELATIVE_OFFSET_AT,
                _INT32,
            )
            if slot == -1:
                return OffsetPosition(self._base_offset, 0)
            return self._parse_entry(buf, slot)

    def position_floor(self, position: int) -> int:
        """The byte position of the last entry at or before ``position`` (0 when there is
        none): a batch starts there."""
        with self._remap_lock:
            buf = self._buffer()
            slot = largest_lower_bound_slot(
                buf, self._entries, position, ENTRY_SIZE, _POSITION_AT, _INT32
            )
            return 0 if slot == -1 else self._parse_entry(buf, slot).position

    def fetch_upper_bound_offset(
        self, fetch_offset: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """An entry at or after byte ``fetch_offset.position + fetch_size``, or None.

        Its offset is guaranteed to lie outside the fetched byte range (it is an upper bound,
        not generally the smallest one).
        """
        with self._remap_lock:
            buf = self._buffer()
            slot = smallest_upper_bound_slot(
                buf,
                self._entries,
                fetch_offset.position + fetch_size,
                ENTRY_SIZE,
                _POSITION_AT,
                _INT32,
            )
            if slot == -1:
                return None
            return self._parse_entry(buf, slot)

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry.

        Raises:
            IndexError: ``n`` is not below :attr:`entries`.
        """
        with self._remap_lock:
            if not 0 <= n < self._entries:
                raise IndexError(
                    f"attempt to fetch entry {n} from index {self._path}, "
                    f"which has {self._entries} entries"
                )
            return self._parse_entry(self._buffer(), n)

    def entries_list(self) -> list[OffsetPosition]:
        """All entries, oldest first (for tests, tools and uploads)."""
        with self._remap_lock:
            buf = self._buffer()
            return [self._parse_entry(buf, i) for i in range(self._entries)]

    # ------------------------------------------------------------------ writes

    def append(self, offset: int, position: int) -> None:
        """Append an entry; ``offset`` must be larger than every offset in the index.

        Raises:
            ValueError: the index is full or read-only, or ``position`` is not an int32 >= 0
                (caller bugs: the segment rolls before its index fills up).
            InvalidOffsetError: ``offset`` is not larger than :attr:`last_offset`.
            IndexOffsetOverflowError: ``offset - base_offset`` does not fit 31 bits.
        """
        with self._lock:
            if not self._writable:
                raise ValueError(f"attempt to append to read-only index {self._path}")
            n = self._entries
            if n >= self._max_entries:
                raise ValueError(f"attempt to append to a full index {self._path} (size = {n})")
            if n != 0 and offset <= self._last_offset:
                raise InvalidOffsetError(
                    f"attempt to append an offset {offset} to position {n} no larger than the "
                    f"last offset appended ({self._last_offset}) to {self._path}"
                )
            relative = self.relative_offset(offset)
            if not 0 <= position <= INT32_MAX:
                raise ValueError(f"position {position} does not fit an index entry")
            # Write the entry first, then publish it: concurrent lookups read `_entries` once.
            with self._remap_lock:
                _ENTRY.pack_into(self._write_buffer(n), n * ENTRY_SIZE, relative, position)
            self._last_offset = offset
            self._entries = n + 1

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with an offset >= ``offset``."""
        self._truncate_to_offset(offset, _RELATIVE_OFFSET_AT)

    def _refresh_last_entry(self) -> None:
        self._last_offset = self.last_entry().offset

    # ------------------------------------------------------------------ checks

    def sanity_check(self, *, full: bool = False) -> None:
        """Kafka's checks plus one O(1) monotonicity check; ``full=True`` checks every entry.

        Raises:
            CorruptIndexError: the file length is not a multiple of 8, the last offset is below
                the base offset, or offsets do not increase (e.g. a preallocated, zero-filled
                file left untrimmed by a crash).
        """
        if self._file_length % ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"index file {self._path} is corrupt, found {self._file_length} bytes which is "
                f"neither positive nor a multiple of {ENTRY_SIZE}"
            )
        with self._remap_lock:
            n = self._entries
            if n == 0:
                return
            buf = self._buffer()
            last = self._parse_entry(buf, n - 1).offset
            if last < self._base_offset:
                raise CorruptIndexError(
                    f"corrupt index found, index file {self._path} has non-zero size but the "
                    f"last offset is {last} which is less than the base offset "
                    f"{self._base_offset}"
                )
            if n > 1 and last <= self._parse_entry(buf, 0).offset:
                raise CorruptIndexError(
                    f"corrupt index found, index file {self._path} has {n} entries but the last "
                    f"offset {last} is not larger than the first {self._parse_entry(buf, 0).offset}"
                )
            if full:
                self._check_all_increasing(buf, n)

    def _check_all_increasing(self, buf: IndexBuffer, n: int) -> None:
        previous_offset = -1
        previous_position = -1
        # A copy, not a memoryview: an exported buffer would block closing the mmap.
        data = bytes(buf[: n * ENTRY_SIZE])
        for i, (relative, position) in enumerate(_ENTRY.iter_unpack(data)):
            if relative <= previous_offset or position < previous_position or relative < 0:
                raise CorruptIndexError(
                    f"corrupt index found, index file {self._path} entry {i} "
                    f"(offset {self._base_offset + relative}, position {position}) does not "
                    f"follow the previous entry"
                )
            previous_offset, previous_position = relative, position
