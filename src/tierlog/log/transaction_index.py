"""Kafka's ``TransactionIndex``: the aborted transactions whose ABORT marker is in a segment.

File ``<20-digit base offset>.txnindex``, a sequence of 34-byte entries (Kafka's
``AbortedTxn``), all integers big-endian, in the order the markers were written::

    Version           int16    0
    ProducerId        int64
    FirstOffset       int64    first offset of the transaction
    LastOffset        int64    offset of its ABORT marker
    LastStableOffset  int64    the partition's last stable offset right after the marker

A read_committed Fetch returns the aborted transactions of the range it read
(:meth:`TransactionIndex.collect_aborted_txns`); consumers drop those producers' records from
the first offset until they meet the marker. The ``LastStableOffset`` column lets a search
stop early: an entry whose LSO is at or past the fetch's upper bound proves every transaction
that started below the bound is already listed.

Files: the index holds no descriptor. Aborts are rare, so an append opens the file, writes
one entry and closes it (the flush fsyncs it if it was written since the last flush), and a
search reads the whole file once and keeps its entries in memory. A segment without aborts has
no ``.txnindex`` file at all and costs no system call after its first search.

Searches: every read_committed Fetch searches the index of the segment it reads, so a search
costs O(log n + k), not a scan of the segment's n entries: the entries' last offsets increase
(markers are appended in log order), so a bisection finds the first entry that can overlap the
range; the ones before it end below the fetch offset, and only their largest LSO matters (kept
as a running maximum): at or past the upper bound, Kafka's scan would have stopped there, with
nothing found. The result is Kafka's ``collectAbortedTxns`` exactly (:func:`collect_aborted_txns`
is that scan, the reference).

Thread-safety: one writer (under the log's lock) and any number of readers, without a lock:
an append adds to the in-memory lists in place (the search keys before the entry, so a reader
that took the number of entries finds their keys), a truncation replaces them.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tierlog.errors import CorruptIndexError
from tierlog.records.control_records import read_end_txn_marker
from tierlog.records.record_batch import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatchHeader,
)

__all__ = [
    "ABORTED_TXN_SIZE",
    "AbortedTxn",
    "AbortedTxnFilter",
    "TransactionIndex",
    "TxnIndexSearchResult",
]

ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
#: Bytes of one entry.
ABORTED_TXN_SIZE = _ENTRY.size


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One ``.txnindex`` entry (Kafka's ``AbortedTxn``). Immutable value."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            ABORTED_TXN_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """The aborted transactions a search found, and whether later segments need no search."""

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


def decode_aborted_txns(data: bytes | memoryview, location: str = "<bytes>") -> list[AbortedTxn]:
    """Every entry of a ``.txnindex`` file's bytes.

    Raises:
        CorruptIndexError: a size that is not a multiple of 34, or an unknown version.
    """
    if len(data) % ABORTED_TXN_SIZE:
        raise CorruptIndexError(
            f"transaction index {location} has a size of {len(data)} bytes, not a multiple "
            f"of {ABORTED_TXN_SIZE}"
        )
    out = []
    for version, pid, first, last, lso in _ENTRY.iter_unpack(data):
        if version != ABORTED_TXN_VERSION:
            raise CorruptIndexError(
                f"transaction index {location} has an entry of unexpected version {version}"
            )
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def collect_aborted_txns(
    entries: list[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> TxnIndexSearchResult:
    """Kafka's ``collectAbortedTxns`` over a list of entries: those that overlap
    ``[fetch_offset, upper_bound_offset)``; complete once an entry's last stable offset
    reaches ``upper_bound_offset``."""
    found = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(found, True)
    return TxnIndexSearchResult(found, False)


class AbortedTxnFilter:
    """Which batches of a range belong to aborted transactions (the offset map's half of
    Kafka's ``CleanedTransactionMetadata``). Feed it every batch of the range in offset order.
    Not thread-safe."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        #: (first offset, producer id) of the aborted transactions not reached yet.
        self._pending = sorted((t.first_offset, t.producer_id) for t in aborted)
        heapq.heapify(self._pending)
        self._aborted_producers: set[int] = set()

    def is_aborted(self, chunk: bytes, header: RecordBatchHeader) -> bool:
        """True for a transactional data batch inside an aborted transaction.

        Raises:
            InvalidRecord: a control batch whose record is malformed.
        """
        last_offset = header.base_offset + header.last_offset_delta
        pending = self._pending
        while pending and pending[0][0] <= last_offset:
            self._aborted_producers.add(heapq.heappop(pending)[1])
        if header.attributes & CONTROL_FLAG_MASK:
            marker = read_end_txn_marker(chunk, header)
            if marker is not None and marker.is_abort:
                self._aborted_producers.discard(header.producer_id)
            return False
        return (
            bool(header.attributes & TRANSACTIONAL_FLAG_MASK)
            and header.producer_id in self._aborted_producers
        )


class _SearchableTxns:
    """A segment's aborted transactions, in marker order, with their search keys: the last
    offsets and the running maximum of the LSOs (see the module docstring)."""

    __slots__ = ("entries", "last_offsets", "max_lso", "ordered")

    def __init__(self, entries: list[AbortedTxn]) -> None:
        self.last_offsets = [t.last_offset for t in entries]
        self.max_lso: list[int] = []
        top = -1
        for t in entries:
            top = max(top, t.last_stable_offset)
            self.max_lso.append(top)
        # A file whose markers do not increase (not one this log or Kafka writes) is searched
        # by Kafka's scan.
        self.ordered = all(a < b for a, b in itertools.pairwise(self.last_offsets))
        self.entries = entries

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry whose last offset is above every other's (the caller checked)."""
        self.last_offsets.append(txn.last_offset)
        self.max_lso.append(max(txn.last_stable_offset, self.max_lso[-1] if self.max_lso else -1))
        self.entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        entries = self.entries
        n = len(entries)  # first: an append meanwhile has added its keys before its entry
        if not self.ordered:
            return collect_aborted_txns(entries[:n], fetch_offset, upper_bound_offset)
        start = bisect.bisect_left(self.last_offsets, fetch_offset, 0, n)
        if start and self.max_lso[start - 1] >= upper_bound_offset:
            return TxnIndexSearchResult([], True)
        found = []
        for i in range(start, n):
            txn = entries[i]
            if txn.first_offset < upper_bound_offset:  # (its last offset is >= fetch_offset)
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)


class TransactionIndex:
    """The ``.txnindex`` of one segment. See the module docstring for thread-safety."""

    def __init__(self, path: Path, base_offset: int, *, exists: bool | None = None) -> None:
        """``exists``: whether the file is known to exist (None: look on first use)."""
        self._path = Path(path)
        self.base_offset = base_offset
        #: The file's entries, loaded on first use (None: not read yet).
        self._txns: _SearchableTxns | None = None if exists is not False else _SearchableTxns([])
        self._dirty = False

    @property
    def path(self) -> Path:
        return self._path

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self._path)!r})"

    def _searchable(self) -> _SearchableTxns:
        txns = self._txns
        if txns is None:
            try:
                data = self._path.read_bytes()
            except FileNotFoundError:
                data = b""
            txns = _SearchableTxns(decode_aborted_txns(data, str(self._path)))
            self._txns = txns
        return txns

    def _load(self) -> list[AbortedTxn]:
        """The entries (appended to in place: copy before iterating where that matters)."""
        return self._searchable().entries

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry, in file order.

        Raises:
            CorruptIndexError: the file is corrupt.
            OSError: it cannot be read.
        """
        return list(self._load())

    def is_empty(self) -> bool:
        return not self._load()

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (its marker follows every earlier entry's).

        Raises:
            ValueError: ``txn.last_offset`` is not above the last entry's.
            OSError: the write failed.
        """
        txns = self._searchable()
        entries = txns.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"the last offset of appended transactions must increase sequentially, but "
                f"{txn.last_offset} is not greater than the current last offset "
                f"{entries[-1].last_offset} of {self._path}"
            )
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, txn.encode())
        finally:
            os.close(fd)
        txns.append(txn)
        self._dirty = True

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """The entries overlapping ``[fetch_offset, upper_bound_offset)`` (Kafka's
        ``collectAbortedTxns``).

        Raises:
            CorruptIndexError: the file is corrupt.
            OSError: it cannot be read.
        """
        return self._searchable().collect(fetch_offset, upper_bound_offset)

    def __iter__(self) -> Iterator[AbortedTxn]:
        return iter(list(self._load()))

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or after ``offset``.

        Raises:
            OSError: the file could not be rewritten.
        """
        entries = self._load()
        kept = [t for t in entries if t.last_offset < offset]
        if len(kept) != len(entries):
            self._rewrite(kept)

    def reset(self) -> None:
        """Remove every entry (the segment is being recovered). Raises OSError."""
        self._rewrite([])

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if entries:
            with self._path.open("r+b" if self._path.exists() else "wb") as f:
                f.write(b"".join(t.encode() for t in entries))
                f.truncate()
        else:
            self._path.unlink(missing_ok=True)
        self._txns = _SearchableTxns(entries)
        self._dirty = True

    def flush(self) -> None:
        """fsync the file when it changed since the last flush. Raises OSError."""
        if not self._dirty:
            return
        self._dirty = False
        try:
            fd = os.open(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def sanity_check(self) -> None:
        """Raises:
        CorruptIndexError: the size is not a multiple of 34 or an entry's version is unknown.
        """
        self._txns = None
        self._load()

    def rename_to(self, path: Path) -> None:
        """Rename the file (when it exists). Raises OSError."""
        path = Path(path)
        try:
            self._path.rename(path)
        except FileNotFoundError:
            pass
        self._path = path

    def update_parent_dir(self, parent_dir: Path) -> None:
        self._path = Path(parent_dir) / self._path.name

    def delete_if_exists(self) -> bool:
        """Unlink the file; True when it existed."""
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def read_bytes(self) -> bytes:
        """The file's bytes as Kafka writes them (b"" without a file): what tiered storage
        ships. Raises OSError."""
        return b"".join(t.encode() for t in self._load())
