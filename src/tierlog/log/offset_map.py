"""Kafka's ``SkimpyOffsetMap``: the log cleaner's bounded map of key digest -> latest offset.

The cleaner reads the dirty section of a log once and records, for every key, the offset of
its latest record; then it rewrites the log keeping only records whose offset is at least
the one mapped for their key. Kafka stores MD5 digests of the keys (16 bytes) and an 8-byte
offset in an open-addressing table carved out of ``log.cleaner.dedupe.buffer.size`` bytes::

    slots      = buffer size // (16 + 8)
    max fill   = slots * log.cleaner.io.buffer.load.factor (0.9)

and so does this map, with the same arithmetic and the same digests; the table is a Python
dict, so memory per entry is a few times Kafka's 24 bytes (the *number* of entries, and so the
size of the dirty section one round can map, is Kafka's). A key of at most 16 bytes is its own
digest (no MD5 call); a longer key is replaced by its MD5 digest. Two keys collide only as MD5
digests collide, as in Kafka.

The table itself is :class:`DictTable` (the pure-Python reference, a dict) or its compiled
twin ``_speedups/_offset_map.c`` (an open-addressing array of 16-byte digests and offsets, as
Kafka's, with its own MD5), chosen once at import (``TIERLOG_NO_EXTENSIONS=1`` forces the
reference). Both also walk a batch's records in one call for the cleaner's two passes --
:meth:`DictTable.map_batch` (build the map) and :meth:`DictTable.filter_batch` (what stays) --
which is where the cleaner spends its time.

Not thread-safe: one map per cleaner thread. ``put`` is idempotent for the same pair.
"""

from __future__ import annotations

import hashlib
import operator
import os
from collections.abc import Callable
from itertools import compress, repeat
from typing import Protocol

from tierlog.records.record_batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    iter_headers,
)
from tierlog.records.record_keys import read_section_keys

__all__ = [
    "BYTES_PER_ENTRY",
    "DIGEST_SIZE",
    "HAS_OFFSET_MAP_SPEEDUPS",
    "DictTable",
    "OffsetTable",
    "SkimpyOffsetMap",
    "key_digest",
]

#: MD5 digest size: Kafka's ``hashSize``.
DIGEST_SIZE = 16
#: Bytes a slot takes in Kafka's table: the digest plus an 8-byte offset.
BYTES_PER_ENTRY = DIGEST_SIZE + 8

_md5 = hashlib.md5
#: The default of dict.get for every key of a batch (endless: map() stops at the keys' end).
_MINUS_ONES = repeat(-1)
_CODEC_OR_CONTROL = COMPRESSION_CODEC_MASK | CONTROL_FLAG_MASK
#: The batches filter_run leaves to the cleaner: transactional ones too (it tracks their
#: transactions, see tierlog.log.cleaned_transaction_metadata).
_CODEC_CONTROL_OR_TXN = _CODEC_OR_CONTROL | TRANSACTIONAL_FLAG_MASK


def key_digest(key: bytes) -> bytes:
    """The map key of a record key: itself up to 16 bytes, else its MD5 digest."""
    if len(key) <= DIGEST_SIZE:
        return key
    return _md5(key, usedforsecurity=False).digest()


class OffsetTable(Protocol):
    """What the cleaner needs of a table: :class:`DictTable` or its C twin."""

    def put(self, key: bytes, offset: int, /) -> None: ...

    def get(self, key: bytes, /) -> int: ...

    def clear(self) -> None: ...

    def __len__(self) -> int: ...

    def map_batch(
        self, data: bytes, pos: int, end: int, count: int, base_offset: int, position: int,
        start: int, /,
    ) -> int: ...  # fmt: skip

    def filter_batch(
        self, data: bytes, pos: int, end: int, count: int, base_offset: int, position: int,
        latest_offset: int, /,
    ) -> tuple[list[int] | None, list[int], bool, int]: ...  # fmt: skip

    def map_run(
        self, chunk: bytes, off: int, start: int, stop_offset: int, max_entries: int, /
    ) -> tuple[int, int, int]: ...

    def filter_run(
        self, chunk: bytes, off: int, latest_offset: int, upper_bound: int,
        active_producers: dict[int, tuple[int, int]], /,
    ) -> tuple[int, int, int, int, int]: ...  # fmt: skip


class DictTable:
    """The pure-Python reference table: a dict of key digest -> offset, at most ``slots``
    entries. Not thread-safe."""

    __slots__ = ("_map", "_slots")

    def __init__(self, slots: int) -> None:
        """Raises:
        ValueError: fewer than one slot.
        """
        if slots < 1:
            raise ValueError("an offset map needs at least one slot")
        self._slots = slots
        self._map: dict[bytes, int] = {}

    def put(self, key: bytes, offset: int, /) -> None:
        """Map ``key`` (its digest) to ``offset``.

        Raises:
            OverflowError: a new key and every slot taken.
        """
        digest = key_digest(key)
        if digest not in self._map and len(self._map) >= self._slots:
            raise OverflowError("the offset map is full")
        self._map[digest] = offset

    def get(self, key: bytes, /) -> int:
        """The offset mapped for ``key``, or -1."""
        return self._map.get(key_digest(key), -1)

    def clear(self) -> None:
        self._map.clear()

    def __len__(self) -> int:
        return len(self._map)

    def map_batch(
        self, data: bytes, pos: int, end: int, count: int, base_offset: int, position: int,
        start: int, /,
    ) -> int:  # fmt: skip
        """Map the key of every record of a records section (see
        :func:`~tierlog.records.record_keys.read_section_keys`) at an offset >= ``start``,
        later records winning; returns the number of records.

        Raises:
            CorruptRecordError, InvalidRecord: as ``read_section_keys``.
            OverflowError: the table filled up (the caller checks the room first).
        """
        offsets, keys, _ = read_section_keys(data, pos, end, count, base_offset, position)
        entries = self._map
        if len(entries) + len(offsets) <= self._slots and (not offsets or offsets[0] >= start):
            # Room for every key: in C through dict.update when every key is its own digest.
            if None in keys:
                at = [o for k, o in zip(keys, offsets, strict=True) if k is not None]
                present = [k for k in keys if k is not None]
            else:
                at, present = offsets, keys  # type: ignore[assignment]  # no None in it
            if max(map(len, present), default=0) <= DIGEST_SIZE:
                entries.update(zip(present, at, strict=True))
            else:
                entries.update(zip(map(key_digest, present), at, strict=True))
        else:
            for offset, key in zip(offsets, keys, strict=True):
                if key is not None and offset >= start:
                    self.put(key, offset)
        return len(offsets)

    def filter_batch(
        self, data: bytes, pos: int, end: int, count: int, base_offset: int, position: int,
        latest_offset: int, /,
    ) -> tuple[list[int] | None, list[int], bool, int]:  # fmt: skip
        """Which records of a records section stay (Kafka's ``shouldRetainRecord`` on the
        map alone): a record past ``latest_offset`` stays; one without a key goes; any other
        stays when its offset is at least its key's mapped offset. Returns (indexes of the
        records that stay, or None when all do; those of them that are tombstones within the
        map -- the caller drops them once their delete horizon passed; whether a tombstone
        past the map stays; records without a key).

        Raises:
            CorruptRecordError, InvalidRecord: as ``read_section_keys``.
        """
        offsets, keys, has_values = read_section_keys(data, pos, end, count, base_offset, position)
        entries = self._map
        if (
            offsets
            and offsets[-1] <= latest_offset
            and None not in keys
            and max(map(len, keys)) <= DIGEST_SIZE  # type: ignore[arg-type]
        ):
            # The common case, as list operations: every record is covered by the map and has
            # a key that is its own digest. offset >= map[key] for each, in C: map(),
            # operator.ge, compress().
            mapped = map(entries.get, keys, _MINUS_ONES)  # type: ignore[arg-type]
            stays = list(map(operator.ge, offsets, mapped))  # type: ignore[arg-type]
            if False not in stays:
                kept_all = range(len(offsets))
                return None, [i for i in kept_all if not has_values[i]], False, 0
            kept_some = list(compress(range(len(offsets)), stays)) if True in stays else []
            if False in has_values:
                return kept_some, [i for i in kept_some if not has_values[i]], False, 0
            return kept_some, [], False, 0
        kept: list[int] = []
        tombstones: list[int] = []
        later_tombstone = False
        invalid = 0
        for i, (offset, key) in enumerate(zip(offsets, keys, strict=True)):
            if offset > latest_offset:
                kept.append(i)
                later_tombstone = later_tombstone or not has_values[i]
                continue
            if key is None:
                invalid += 1
                continue
            if offset >= entries.get(key_digest(key), -1):
                kept.append(i)
                if not has_values[i]:
                    tombstones.append(i)
        return (None if len(kept) == len(offsets) else kept), tombstones, later_tombstone, invalid

    def map_run(
        self, chunk: bytes, off: int, start: int, stop_offset: int, max_entries: int, /
    ) -> tuple[int, int, int]:
        """The cleaner's map pass over the run of uncompressed data batches of ``chunk``
        from byte ``off``: a batch wholly below ``start`` is skipped, any other one mapped
        (:meth:`map_batch`) while the table keeps fewer than ``max_entries`` entries after
        it. Stops at the first batch it leaves to the caller (compressed, control, at or
        past ``stop_offset``, no room) or after the last complete batch; returns (where it
        stopped, records read, last offset of the last batch mapped or -1).

        Raises:
            CorruptRecordError, InvalidRecord: as ``read_section_keys``.
        """
        total, last = 0, -1
        for h in iter_headers(chunk, off):
            off = h.position
            if h.attributes & _CODEC_OR_CONTROL:
                break
            last_offset = h.base_offset + h.last_offset_delta
            if last_offset >= start:
                count = h.records_count
                if h.base_offset >= stop_offset or len(self._map) + count >= max_entries:
                    break
                pos = h.position + RECORD_BATCH_OVERHEAD
                end = h.position + h.size_in_bytes
                self.map_batch(chunk, pos, end, count, h.base_offset, h.position, start)
                total += count
                last = last_offset
            off = h.position + h.size_in_bytes
        return off, total, last

    def filter_run(
        self, chunk: bytes, off: int, latest_offset: int, upper_bound: int,
        active_producers: dict[int, tuple[int, int]], /,
    ) -> tuple[int, int, int, int, int]:  # fmt: skip
        """The cleaner's clean pass over the run of uncompressed data batches of ``chunk``
        from byte ``off`` that go entirely: none of their records stays
        (:meth:`filter_batch`) and they need not stay as an empty batch (not the round's
        last -- its last offset + 1 is ``upper_bound`` -- nor an active producer's last data
        batch) and are not transactional (the cleaner tracks their transactions). Stops at
        the first other batch, which the caller handles, or after the last complete batch;
        returns (where it stopped, bytes, records, records without a key,
        position of the last batch it dropped or -1).

        Raises:
            CorruptRecordError, InvalidRecord: as ``read_section_keys``.
        """
        size = records = invalid = 0
        last_pos = -1
        for h in iter_headers(chunk, off):
            off = h.position
            last_offset = h.base_offset + h.last_offset_delta
            if (
                h.attributes & _CODEC_CONTROL_OR_TXN
                or last_offset + 1 == upper_bound
                or last_offset > latest_offset
            ):
                break
            producer = active_producers.get(h.producer_id) if h.producer_id != -1 else None
            if producer is not None and producer[0] >= 0 and producer[0] == last_offset:
                break
            pos = h.position + RECORD_BATCH_OVERHEAD
            end = h.position + h.size_in_bytes
            kept, _, _, keyless = self.filter_batch(
                chunk, pos, end, h.records_count, h.base_offset, h.position, latest_offset
            )
            if (kept is None and h.records_count) or kept:
                break
            size += h.size_in_bytes
            records += h.records_count
            invalid += keyless
            last_pos = h.position
            off = h.position + h.size_in_bytes
        return off, size, records, invalid, last_pos


# The C twin of DictTable, chosen once here: TIERLOG_NO_EXTENSIONS=1 or a missing build means
# the pure-Python reference.
_Table: Callable[[int], OffsetTable]
#: The compiled record rewrite of the cleaner's retained batches (None: not built; see
#: tierlog.log.cleaner.retained_batch).
rebuild_records: Callable[..., tuple[bytes, int, int]] | None
try:
    if os.environ.get("TIERLOG_NO_EXTENSIONS", "") == "1":
        raise ImportError("TIERLOG_NO_EXTENSIONS=1")
    from tierlog.records._speedups._offset_map import OffsetMap as _Table
    from tierlog.records._speedups._offset_map import rebuild_records
except ImportError:  # pragma: no cover - depends on the build
    _Table = DictTable
    rebuild_records = None

#: Whether :class:`SkimpyOffsetMap` uses the compiled table.
HAS_OFFSET_MAP_SPEEDUPS = _Table is not DictTable


class SkimpyOffsetMap:
    """A key -> offset map with a fixed number of slots (Kafka's ``SkimpyOffsetMap``).

    Thread-safety: none (each cleaner thread owns one).
    """

    __slots__ = ("_latest_offset", "_slots", "table")

    def __init__(self, memory: int, *, table: Callable[[int], OffsetTable] | None = None) -> None:
        """``memory``: this map's share of ``log.cleaner.dedupe.buffer.size``; ``table``:
        the table class (default: the compiled one when built, else :class:`DictTable`).

        Raises:
            ValueError: less memory than one slot.
        """
        slots = memory // BYTES_PER_ENTRY
        if slots < 1:
            raise ValueError(f"an offset map of {memory} bytes has no slot")
        self._slots = slots
        #: The table: the cleaner's passes call it directly.
        self.table: OffsetTable = (table or _Table)(slots)
        self._latest_offset = -1

    @property
    def slots(self) -> int:
        """How many entries the memory holds (Kafka's ``slots``)."""
        return self._slots

    @property
    def size(self) -> int:
        """Entries in use."""
        return len(self.table)

    def __len__(self) -> int:
        return len(self.table)

    @property
    def utilization(self) -> float:
        """Fraction of the slots in use."""
        return len(self.table) / self._slots

    @property
    def latest_offset(self) -> int:
        """The latest offset the map covers (-1 when empty): records past it are newer than
        every mapped key (Kafka's ``latestOffset``)."""
        return self._latest_offset

    def update_latest_offset(self, offset: int) -> None:
        """Kafka's ``updateLatestOffset``: the map now covers offsets up to ``offset``."""
        self._latest_offset = offset

    def put(self, key: bytes, offset: int) -> None:
        """Map ``key`` to ``offset`` (a later put for the same key wins).

        Raises:
            OverflowError: a new key and every slot taken.
        """
        self.table.put(key, offset)
        if offset > self._latest_offset:
            self._latest_offset = offset

    def get(self, key: bytes) -> int:
        """The offset mapped for ``key``, or -1 (Kafka's ``get``)."""
        return self.table.get(key)

    def clear(self) -> None:
        """Forget every entry and the latest offset."""
        self.table.clear()
        self._latest_offset = -1

    def __repr__(self) -> str:
        return f"SkimpyOffsetMap(slots={self._slots}, size={len(self.table)})"
