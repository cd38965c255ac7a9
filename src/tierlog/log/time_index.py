"""Kafka's time index: timestamp -> the offset from which to scan for that timestamp.

File format (``<20-digit base offset>.timeindex``), a series of 12-byte entries, big-endian::

    timestamp:      int64    largest record timestamp seen up to and including `offset`
    relativeOffset: int32    offset - base offset of the segment

An entry (T, O) means: any record with a timestamp > T comes after offset O. Timestamps
increase strictly from entry to entry; offsets never decrease. A lookup finds the entry with
the greatest timestamp <= the target. Preallocated and trimmed like the offset index; the
last slot is reserved so the segment can always record its final max timestamp when rolled
(:meth:`TimeIndex.maybe_append` with ``skip_full_check=True``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from tierlog.errors import CorruptIndexError, InvalidOffsetError
from tierlog.log.abstract_index import AbstractIndex, IndexBuffer, largest_lower_bound_slot

ENTRY_SIZE = 12
NO_TIMESTAMP = -1
_ENTRY = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_TIMESTAMP_AT = 0
_RELATIVE_OFFSET_AT = 8


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A timestamp and the offset at which it was reached."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """The ``.timeindex`` file of one segment. See :class:`AbstractIndex` for thread-safety."""

    ENTRY_SIZE = ENTRY_SIZE

    def __init__(
        self, path: Path, base_offset: int, max_index_size: int = -1, writable: bool = True
    ) -> None:
        self._last_entry = TimestampOffset(NO_TIMESTAMP, base_offset)
        super().__init__(path, base_offset, max_index_size, writable)
        self._refresh_last_entry()

    def is_full(self) -> bool:
        """True when only the slot reserved for the roll-time entry is left."""
        return self._entries >= self._max_entries - 1

    # ------------------------------------------------------------------ reads

    def _parse_entry(self, buf: IndexBuffer, slot: int) -> TimestampOffset:
        timestamp, relative = _ENTRY.unpack_from(buf, slot * ENTRY_SIZE)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def _last_entry_from_file(self) -> TimestampOffset:
        with self._remap_lock:
            n = self._entries
            if n == 0:
                return TimestampOffset(NO_TIMESTAMP, self._base_offset)
            return self._parse_entry(self._buffer(), n - 1)

    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``TimestampOffset(-1, base_offset)`` when the index is empty."""
        return self._last_entry

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry.

        Raises:
            IndexError: ``n`` is not below :attr:`entries`.
        """
        with self._remap_lock:
            if not 0 <= n < self._entries:
                raise IndexError(
                    f"attempt to fetch entry {n} from time index {self._path}, "
                    f"which has {self._entries} entries"
                )
            return self._parse_entry(self._buffer(), n)

    def entries_list(self) -> list[TimestampOffset]:
        """All entries, oldest first (for tests, tools and uploads)."""
        with self._remap_lock:
            buf = self._buffer()
            return [self._parse_entry(buf, i) for i in range(self._entries)]

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the greatest timestamp <= ``target_timestamp``.

        Returns ``TimestampOffset(-1, base_offset)`` when the target is below the first entry
        or the index is empty: scan from the beginning of the segment.
        """
        with self._remap_lock:
            buf = self._buffer()
            slot = largest_lower_bound_slot(
                buf, self._entries, target_timestamp, ENTRY_SIZE, _TIMESTAMP_AT, _INT64
            )
            if slot == -1:
                return TimestampOffset(NO_TIMESTAMP, self._base_offset)
            return self._parse_entry(buf, slot)

    # ------------------------------------------------------------------ writes

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append (timestamp, offset) if ``timestamp`` is larger than the last entry's.

        A timestamp that is not larger is skipped silently: the segment calls this with its
        running max timestamp after every indexed batch, and again on roll and close, so
        repeats are normal. (Kafka raises IllegalStateException for a *smaller* timestamp;
        tierlog skips it too, so a caller passing a batch's own max timestamp stays safe.)
        ``skip_full_check`` is for the final entry written when the segment is rolled or
        closed; it may use the slot :meth:`is_full` keeps in reserve.

        Raises:
            ValueError: the index is full (and ``skip_full_check`` is False) or read-only.
            InvalidOffsetError: ``offset`` is smaller than the last entry's offset.
            IndexOffsetOverflowError: ``offset - base_offset`` does not fit 31 bits.
        """
        with self._lock:
            if not self._writable:
                raise ValueError(f"attempt to append to read-only time index {self._path}")
            n = self._entries
            if not skip_full_check and self.is_full():
                raise ValueError(
                    f"attempt to append to a full time index {self._path} (size = {n})"
                )
            last = self._last_entry
            # An equal offset is allowed: it re-states the last entry (roll, close).
            if n != 0 and offset < last.offset:
                raise InvalidOffsetError(
                    f"attempt to append an offset ({offset}) to slot {n} no larger than the "
                    f"last offset appended ({last.offset}) to {self._path}"
                )
            # Only a strictly larger timestamp is indexed. Batches without timestamps
            # (NO_TIMESTAMP = -1) therefore never add entries.
            if timestamp <= last.timestamp:
                return
            relative = self.relative_offset(offset)
            if n >= self._max_entries:
                raise ValueError(f"time index {self._path} has no slot left (size = {n})")
            with self._remap_lock:
                _ENTRY.pack_into(self._write_buffer(n), n * ENTRY_SIZE, timestamp, relative)
            self._last_entry = TimestampOffset(timestamp, offset)
            self._entries = n + 1

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with an offset >= ``offset``."""
        self._truncate_to_offset(offset, _RELATIVE_OFFSET_AT)

    def _refresh_last_entry(self) -> None:
        self._last_entry = self._last_entry_from_file()

    # ------------------------------------------------------------------ checks

    def sanity_check(self, *, full: bool = False) -> None:
        """Kafka's checks; ``full=True`` also checks that every entry follows the previous.

        Raises:
            CorruptIndexError: the file length is not a multiple of 12, the last timestamp is
                below the first, or the last offset is below the base offset.
        """
        if self._file_length % ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"time index file {self._path} is corrupt, found {self._file_length} bytes "
                f"which is neither positive nor a multiple of {ENTRY_SIZE}"
            )
        with self._remap_lock:
            n = self._entries
            if n == 0:
                return
            buf = self._buffer()
            first = self._parse_entry(buf, 0)
            last = self._parse_entry(buf, n - 1)
            if last.timestamp < first.timestamp:
                raise CorruptIndexError(
                    f"corrupt time index found, time index file ({self._path}) has non-zero "
                    f"size but the last timestamp is {last.timestamp} which is less than the "
                    f"first timestamp {first.timestamp}"
                )
            if last.offset < self._base_offset:
                raise CorruptIndexError(
                    f"corrupt time index found, time index file ({self._path}) has non-zero "
                    f"size but the last offset is {last.offset} which is less than the first "
                    f"offset {self._base_offset}"
                )
            if full:
                self._check_all_increasing(buf, n)

    def _check_all_increasing(self, buf: IndexBuffer, n: int) -> None:
        previous_timestamp: int | None = None
        previous_offset = 0
        # A copy, not a memoryview: an exported buffer would block closing the mmap.
        data = bytes(buf[: n * ENTRY_SIZE])
        for i, (timestamp, relative) in enumerate(_ENTRY.iter_unpack(data)):
            if relative < previous_offset or (
                previous_timestamp is not None and timestamp <= previous_timestamp
            ):
                raise CorruptIndexError(
                    f"corrupt time index found, time index file {self._path} entry {i} "
                    f"(timestamp {timestamp}, offset {self._base_offset + relative}) does not "
                    f"follow the previous entry"
                )
            previous_timestamp, previous_offset = timestamp, relative
