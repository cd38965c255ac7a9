"""Kafka's ``RemoteIndexCache``: the indexes of remote segments, cached on local disk.

Directory ``<log.dir>/remote-log-index-cache/``, three files per remote segment::

    <startOffset>_<segmentId>.index       offset index (Kafka's format, see OffsetIndex)
    <startOffset>_<segmentId>.timeindex   time index (see TimeIndex)
    <startOffset>_<segmentId>.txnindex    aborted transactions, 34-byte entries (may be empty)
    *.tmp                                 a download in progress
    *.<n>.deleted                         an evicted or removed entry, still open by a reader

``segmentId`` is Kafka's base64 UUID string (it may contain ``_`` and ``-``, never ``.``),
``startOffset`` is decimal, as Kafka names them. The leader-epoch checkpoint and the producer
snapshot of a segment are not cached: the read path does not need them.

Behaviour:

* A miss fetches all three indexes of the segment in ONE remote request
  (``RemoteStorageManager.fetch_indexes``, seed 001), checks every entry of every index
  (a corrupt index from remote storage is a :class:`RemoteStorageError`, never cached), writes
  each to ``.tmp`` and renames it into place. Concurrent misses of one segment fetch once
  (single flight); the others wait for that fetch and share its result or its error.
* Bounded by ``max_size_bytes`` (``remote.log.index.file.cache.total.size.bytes``): least
  recently used entries are evicted, by bytes. The newest entry is kept even if alone it is
  larger than the bound.
* Readers hold a reference (:meth:`RemoteIndexCache.get_index_entry` is a context manager).
  Eviction or :meth:`RemoteIndexCache.remove` takes the entry out of the map and renames its
  files to unique ``.deleted`` names under the cache lock, so a new download of the same
  segment can never collide with them (KAFKA-15481); the mmaps are closed and the files
  unlinked only when the last reader releases it, so a reader never sees a closed index
  (KAFKA-17184). :meth:`RemoteIndexCache.remove` of a segment whose download is in flight makes
  that download's entry die with its reader instead of entering the map (no stale entries
  after a remote deletion).
* Startup: ``.tmp`` and ``.deleted`` leftovers are deleted; an entry is kept only if its three
  files exist and pass the O(1) sanity checks, and every entry loaded from disk gets the full
  check (every index entry in order) on first use -- a corrupt one is deleted and fetched
  again (:class:`CorruptIndexError` is recoverable, KAFKA-15511).

Thread-safe. Lookups of different segments never block each other; a remote fetch holds no
lock.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tierlog.errors import (
    CorruptIndexError,
    CorruptRemoteDataError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tierlog.log.offset_index import OffsetIndex, OffsetPosition
from tierlog.log.time_index import TimeIndex
from tierlog.log.transaction_index import (
    AbortedTxn,
    TxnIndexSearchResult,
    collect_aborted_txns,
    decode_aborted_txns,
)
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    kafka_uuid_from_str,
    kafka_uuid_str,
)
from tierlog.tiered.storage.remote_storage_manager import IndexType, RemoteStorageManager

log = logging.getLogger(__name__)

DIR_NAME = "remote-log-index-cache"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
TMP_FILE_SUFFIX = ".tmp"
DELETED_FILE_SUFFIX = ".deleted"

#: The indexes the cache keeps, and their file suffixes.
CACHED_INDEX_TYPES: tuple[IndexType, ...] = (
    IndexType.OFFSET,
    IndexType.TIMESTAMP,
    IndexType.TRANSACTION,
)
_SUFFIXES = {
    IndexType.OFFSET: INDEX_FILE_SUFFIX,
    IndexType.TIMESTAMP: TIME_INDEX_FILE_SUFFIX,
    IndexType.TRANSACTION: TXN_INDEX_FILE_SUFFIX,
}

# Kafka's TransactionIndex entry: version int16 (0), producerId int64, firstOffset int64,
# lastOffset int64, lastStableOffset int64.
_ABORTED_TXN = struct.Struct(">hqqqq")
_TXN_VERSION = 0


def file_name_prefix(metadata: RemoteLogSegmentMetadata) -> str:
    """``<startOffset>_<segmentId>`` (Kafka's ``generateFileNamePrefixForIndex``)."""
    return f"{metadata.start_offset}_{kafka_uuid_str(metadata.remote_log_segment_id.id)}"


def _parse_prefix(prefix: str) -> tuple[int, uuid.UUID] | None:
    start, sep, sid = prefix.partition("_")
    if not sep or not start.isdigit():
        return None
    try:
        return int(start), kafka_uuid_from_str(sid)
    except ValueError:
        return None


def _check_txn_index(data: bytes, what: object) -> None:
    if len(data) % _ABORTED_TXN.size:
        raise CorruptIndexError(
            f"transaction index {what} has {len(data)} bytes, not a multiple of {_ABORTED_TXN.size}"
        )
    for i, (version, _pid, first, last, _lso) in enumerate(_ABORTED_TXN.iter_unpack(data)):
        if version != _TXN_VERSION or last < first:
            raise CorruptIndexError(f"transaction index {what} entry {i} is corrupt")


class Entry:
    """The cached indexes of one remote segment (Kafka's ``RemoteIndexCache.Entry``).

    Use only inside :meth:`RemoteIndexCache.get_index_entry`; lookups are thread-safe.
    """

    def __init__(
        self,
        segment_id: uuid.UUID,
        start_offset: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_path: Path,
        *,
        verified: bool,
    ) -> None:
        self.segment_id = segment_id
        self.start_offset = start_offset
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_path = txn_path
        self.size_bytes = offset_index.file_length + time_index.file_length + _file_size(txn_path)
        # Guarded by the cache lock:
        self._refs = 0
        self._retired = False  # out of the map; close when the last reader releases it
        self._delete_files = False
        self._closed = False
        # Full check of an entry loaded from disk, once, on first use.
        self._verified = verified
        self._verify_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"Entry({self.start_offset}_{kafka_uuid_str(self.segment_id)}, {self.size_bytes} bytes)"
        )

    # ------------------------------------------------------------------ lookups

    def lookup_offset(self, offset: int) -> OffsetPosition:
        """The offset index floor: greatest indexed offset <= ``offset`` and its position."""
        return self.offset_index.lookup(offset)

    def lookup_timestamp(self, timestamp: int, start_offset: int) -> OffsetPosition | None:
        """Where to start scanning for the first record with timestamp >= ``timestamp`` and
        offset >= ``start_offset`` (Kafka's ``Entry.lookupTimestamp``), or None when the time
        index shows no record of the segment is that late."""
        last = self.time_index.last_entry()
        if self.time_index.entries and last.timestamp < timestamp:
            return None
        found = self.time_index.lookup(timestamp)
        return self.offset_index.lookup(max(start_offset, found.offset))

    def position_bounds(self, offset: int) -> tuple[int, int | None, int | None]:
        """``(floor, next, after_next)`` positions for a read of ``offset``.

        ``floor`` is the position of the offset index floor entry (0 without one); ``next``
        and ``after_next`` the positions of the two index entries after it (None past the
        end). Every batch holding an offset <= ``offset`` ends at or before ``after_next``
        (or the segment end), and every batch before the one holding the entry ``next``
        ends at or before ``next``: an index entry is the start of an append whose largest
        offset it names.
        """
        idx = self.offset_index
        n = idx.entries
        lo, hi = 0, n  # first slot whose offset > target
        while lo < hi:
            mid = (lo + hi) // 2
            if idx.entry(mid).offset <= offset:
                lo = mid + 1
            else:
                hi = mid
        floor = idx.entry(lo - 1).position if lo > 0 else 0
        nxt = idx.entry(lo).position if lo < n else None
        after = idx.entry(lo + 1).position if lo + 1 < n else None
        return floor, nxt, after

    def time_entry_after(self, timestamp: int) -> int | None:
        """Offset of the first time index entry with a timestamp > ``timestamp``."""
        idx = self.time_index
        n = idx.entries
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if idx.entry(mid).timestamp <= timestamp:
                lo = mid + 1
            else:
                hi = mid
        return idx.entry(lo).offset if lo < n else None

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_bound_offset)``."""
        return self.collect_aborted_txns(start_offset, upper_bound_offset).aborted_transactions

    def collect_aborted_txns(
        self, start_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Kafka's ``TransactionIndex.collectAbortedTxns`` over the cached ``.txnindex``.

        Raises:
            CorruptIndexError: the cached file is corrupt (the caller fetches it again).
        """
        try:
            data = self.txn_path.read_bytes()
        except FileNotFoundError:
            data = b""
        return collect_aborted_txns(
            decode_aborted_txns(data, str(self.txn_path)), start_offset, upper_bound_offset
        )

    # ------------------------------------------------------------------ checks and files

    def verify(self) -> None:
        """The full check (every entry in order), once.

        Raises:
            CorruptIndexError: an index is corrupt.
        """
        if self._verified:
            return
        with self._verify_lock:
            if self._verified:
                return
            self.offset_index.sanity_check(full=True)
            self.time_index.sanity_check(full=True)
            _check_txn_index(self.txn_path.read_bytes(), self.txn_path)
            self._verified = True

    def _paths(self) -> list[Path]:
        return [self.offset_index.path, self.time_index.path, self.txn_path]

    def _rename_to_deleted(self, n: int) -> None:
        """Rename every file to ``<name>.<n>.deleted`` (unique: never clashes with a new
        download of the same segment, nor with another retired copy)."""
        suffix = f".{n}{DELETED_FILE_SUFFIX}"
        with suppress(OSError):
            self.offset_index.rename_to(self.offset_index.path.with_name(
                self.offset_index.path.name + suffix))  # fmt: skip
        with suppress(OSError):
            self.time_index.rename_to(self.time_index.path.with_name(
                self.time_index.path.name + suffix))  # fmt: skip
        target = self.txn_path.with_name(self.txn_path.name + suffix)
        with suppress(OSError):
            self.txn_path.replace(target)
        self.txn_path = target

    def _close(self, delete_files: bool) -> None:
        self.offset_index.close_handler()
        self.time_index.close_handler()
        if delete_files:
            for path in self._paths():
                path.unlink(missing_ok=True)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class _Flight:
    """A download in progress; other readers of the segment wait for it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None


def _open_entry(
    segment_id: uuid.UUID,
    start_offset: int,
    paths: dict[IndexType, Path],
    *,
    full_check: bool,
    end_offset: int | None = None,
) -> Entry:
    """Map the files of an entry read-only and check them.

    Raises:
        CorruptIndexError: a file fails its check.
        OSError: a file cannot be opened.
    """
    offset_index = OffsetIndex(paths[IndexType.OFFSET], start_offset, writable=False)
    try:
        time_index = TimeIndex(paths[IndexType.TIMESTAMP], start_offset, writable=False)
    except BaseException:
        offset_index.close_handler()
        raise
    try:
        offset_index.sanity_check(full=full_check)
        time_index.sanity_check(full=full_check)
        txn = paths[IndexType.TRANSACTION]
        if full_check:
            _check_txn_index(txn.read_bytes(), txn)
        elif _file_size(txn) % _ABORTED_TXN.size:
            raise CorruptIndexError(f"transaction index {txn} has a partial entry")
        if end_offset is not None:
            for name, last in (
                ("offset", offset_index.last_entry().offset),
                ("time", time_index.last_entry().offset),
            ):
                if last > end_offset:
                    raise CorruptIndexError(
                        f"{name} index of segment {kafka_uuid_str(segment_id)} names offset "
                        f"{last}, beyond the segment's end offset {end_offset}"
                    )
    except BaseException:
        offset_index.close_handler()
        time_index.close_handler()
        raise
    return Entry(segment_id, start_offset, offset_index, time_index, txn, verified=full_check)


class RemoteIndexCache:
    """Kafka's RemoteIndexCache (see the module docstring). Thread-safe.

    Args:
        rsm: where indexes are fetched from.
        cache_dir: ``<log.dir>/remote-log-index-cache`` (created if missing).
        max_size_bytes: bound on the bytes of all cached index files.
    """

    def __init__(self, rsm: RemoteStorageManager, cache_dir: Path, max_size_bytes: int) -> None:
        if max_size_bytes <= 0:
            raise ValueError(f"cache size must be positive, got {max_size_bytes}")
        self._rsm = rsm
        self._dir = Path(cache_dir)
        self._max_size = max_size_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[uuid.UUID, Entry] = OrderedDict()  # LRU order, oldest first
        self._size = 0
        self._inflight: dict[uuid.UUID, _Flight] = {}
        self._cancelled: set[uuid.UUID] = set()  # removed while their download was in flight
        self._closed = False
        self._seq = itertools.count()
        #: Counters for tests and metrics.
        self.hits = 0
        self.misses = 0
        self.remote_fetches = 0
        self._dir.mkdir(parents=True, exist_ok=True)
        self._load_existing()

    # ------------------------------------------------------------------ properties

    @property
    def cache_dir(self) -> Path:
        return self._dir

    @property
    def max_size_bytes(self) -> int:
        return self._max_size

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._size

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, segment_id: object) -> bool:
        with self._lock:
            return segment_id in self._entries

    # ------------------------------------------------------------------ public API

    @contextmanager
    def get_index_entry(self, metadata: RemoteLogSegmentMetadata) -> Iterator[Entry]:
        """The cached indexes of a segment, fetched on a miss; held until the block exits.

        Raises:
            RemoteResourceNotFoundError: the segment's objects are gone from remote storage.
            RemoteStorageError: the fetch failed, the remote indexes are corrupt, or the cache
                is closed.
        """
        entry = self._acquire(metadata)
        try:
            yield entry
        finally:
            self._release(entry)

    def lookup_offset(self, metadata: RemoteLogSegmentMetadata, offset: int) -> int:
        """Position in the segment of the offset index floor entry of ``offset``.

        Raises:
            RemoteStorageError: see :meth:`get_index_entry`.
        """
        with self.get_index_entry(metadata) as entry:
            return entry.lookup_offset(offset).position

    def lookup_timestamp(
        self, metadata: RemoteLogSegmentMetadata, timestamp: int, start_offset: int
    ) -> OffsetPosition | None:
        """The offset index entry (offset, position) to scan from for the first record with
        timestamp >= ``timestamp`` and offset >= ``start_offset``; None when the segment has
        no record that late.

        Raises:
            RemoteStorageError: see :meth:`get_index_entry`.
        """
        with self.get_index_entry(metadata) as entry:
            return entry.lookup_timestamp(timestamp, start_offset)

    def remove(self, segment_id: uuid.UUID) -> None:
        """Forget a segment (deleted remotely); its files go when the last reader is done."""
        self.remove_all((segment_id,))

    def remove_all(self, segment_ids: Iterable[uuid.UUID]) -> None:
        to_close: list[Entry] = []
        with self._lock:
            for sid in segment_ids:
                entry = self._entries.pop(sid, None)
                if entry is not None:
                    self._size -= entry.size_bytes
                    if self._retire_locked(entry, delete_files=True):
                        to_close.append(entry)
                if sid in self._inflight:
                    self._cancelled.add(sid)
        for entry in to_close:
            entry._close(delete_files=True)

    def close(self) -> None:
        """Release every mmap (files stay for the next start); idempotent. Entries held by
        readers close when released."""
        to_close: list[Entry] = []
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for entry in self._entries.values():
                if self._retire_locked(entry, delete_files=False, rename=False):
                    to_close.append(entry)
            self._entries.clear()
            self._size = 0
        for entry in to_close:
            entry._close(delete_files=False)

    # ------------------------------------------------------------------ acquire / release

    def _acquire(self, metadata: RemoteLogSegmentMetadata) -> Entry:
        key = metadata.remote_log_segment_id.id
        while True:
            owner = False
            with self._lock:
                if self._closed:
                    raise RemoteStorageError("the remote index cache is closed")
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    entry._refs += 1
                    self.hits += 1
                    flight = None
                else:
                    flight = self._inflight.get(key)
                    if flight is None:
                        owner = True
                        flight = self._inflight[key] = _Flight()
                        self.misses += 1
            if entry is not None:
                try:
                    entry.verify()
                    return entry
                except (CorruptIndexError, OSError) as e:
                    log.warning("remote index cache entry %s is corrupt, fetching it again: %s",
                                entry, e)  # fmt: skip
                    self._release(entry)
                    self.remove(key)
                    continue
            assert flight is not None
            if not owner:
                flight.done.wait()
                if flight.error is not None:
                    err = flight.error
                    if isinstance(err, (RemoteResourceNotFoundError, CorruptRemoteDataError)):
                        raise type(err)(str(err)) from err
                    raise RemoteStorageError(str(err)) from err
                continue  # the entry is in the map now (or already evicted: fetch again)
            return self._fill(metadata, key, flight)

    def _fill(self, metadata: RemoteLogSegmentMetadata, key: uuid.UUID, flight: _Flight) -> Entry:
        try:
            entry = self._load(metadata)
        except BaseException as e:
            with self._lock:
                self._inflight.pop(key, None)
                self._cancelled.discard(key)
            flight.error = e
            flight.done.set()
            raise
        to_close: list[Entry] = []
        with self._lock:
            self._inflight.pop(key, None)
            cancelled = key in self._cancelled or self._closed
            self._cancelled.discard(key)
            entry._refs = 1
            if cancelled:
                # Removed (deleted remotely) while downloading: serve this reader only.
                self._retire_locked(entry, delete_files=True)
            else:
                self._entries[key] = entry
                self._size += entry.size_bytes
                to_close = self._evict_locked(keep=key)
        flight.done.set()
        for old in to_close:
            old._close(delete_files=True)
        return entry

    def _release(self, entry: Entry) -> None:
        with self._lock:
            entry._refs -= 1
            close = entry._refs == 0 and entry._retired and not entry._closed
            if close:
                entry._closed = True
        if close:
            entry._close(entry._delete_files)

    def _retire_locked(self, entry: Entry, *, delete_files: bool, rename: bool = True) -> bool:
        """Mark an entry that left the map; True when the caller must close it now (no
        reader holds it). Renames its files out of the way first (cache lock held)."""
        entry._retired = True
        entry._delete_files = delete_files
        if delete_files and rename:
            entry._rename_to_deleted(next(self._seq))
        if entry._refs == 0 and not entry._closed:
            entry._closed = True
            return True
        return False

    def _evict_locked(self, keep: uuid.UUID) -> list[Entry]:
        to_close: list[Entry] = []
        while self._size > self._max_size and len(self._entries) > 1:
            sid = next(iter(self._entries))
            if sid == keep:
                self._entries.move_to_end(sid)
                sid = next(iter(self._entries))
            entry = self._entries.pop(sid)
            self._size -= entry.size_bytes
            log.debug("evicting remote index cache entry %s", entry)
            if self._retire_locked(entry, delete_files=True):
                to_close.append(entry)
        return to_close

    # ------------------------------------------------------------------ loading

    def _paths(self, prefix: str) -> dict[IndexType, Path]:
        return {t: self._dir / (prefix + _SUFFIXES[t]) for t in CACHED_INDEX_TYPES}

    def _load(self, metadata: RemoteLogSegmentMetadata) -> Entry:
        """Open the entry from disk when its files are there and sound, else fetch it."""
        sid = metadata.remote_log_segment_id.id
        paths = self._paths(file_name_prefix(metadata))
        if all(p.exists() for p in paths.values()):
            try:
                return _open_entry(
                    sid, metadata.start_offset, paths, full_check=True,
                    end_offset=metadata.end_offset,
                )  # fmt: skip
            except (CorruptIndexError, OSError) as e:
                log.warning("deleting corrupt remote index cache files of %s: %s", sid, e)
                for p in paths.values():
                    p.unlink(missing_ok=True)
        return self._fetch(metadata, paths)

    def _fetch(self, metadata: RemoteLogSegmentMetadata, paths: dict[IndexType, Path]) -> Entry:
        sid = metadata.remote_log_segment_id.id
        self.remote_fetches += 1
        indexes = self._rsm.fetch_indexes(metadata, CACHED_INDEX_TYPES)  # ONE remote request
        for required in (IndexType.OFFSET, IndexType.TIMESTAMP):
            if required not in indexes:
                raise CorruptRemoteDataError(
                    f"remote indexes of {metadata.remote_log_segment_id} lack the "
                    f"{required.name} index"
                )
        tmps = {t: p.with_name(p.name + TMP_FILE_SUFFIX) for t, p in paths.items()}
        try:
            for t, tmp in tmps.items():
                _write(tmp, indexes.get(t, b""))
            try:
                # Check what came from remote storage before it enters the cache.
                probe = _open_entry(
                    sid, metadata.start_offset, tmps, full_check=True,
                    end_offset=metadata.end_offset,
                )  # fmt: skip
            except CorruptIndexError as e:
                raise CorruptRemoteDataError(
                    f"corrupt index in remote storage for {metadata.remote_log_segment_id}: {e}"
                ) from e
            probe._close(delete_files=False)
            for t, tmp in tmps.items():
                tmp.replace(paths[t])
        except OSError as e:
            raise RemoteStorageError(
                f"cannot write remote index cache files of {metadata.remote_log_segment_id}: {e}"
            ) from e
        finally:
            for tmp in tmps.values():
                tmp.unlink(missing_ok=True)
        try:
            entry = _open_entry(sid, metadata.start_offset, paths, full_check=False)
        except (CorruptIndexError, OSError) as e:
            raise RemoteStorageError(f"cannot open remote index cache files of {sid}: {e}") from e
        entry._verified = True
        return entry

    def _load_existing(self) -> None:
        """Startup: drop leftovers, keep every complete entry that passes the quick checks."""
        groups: dict[str, dict[str, Path]] = {}
        for path in self._dir.iterdir():
            name = path.name
            if not path.is_file():
                continue
            if name.endswith((TMP_FILE_SUFFIX, DELETED_FILE_SUFFIX)):
                path.unlink(missing_ok=True)
                continue
            prefix, dot, suffix = name.partition(".")
            if dot and f".{suffix}" in _SUFFIXES.values():
                groups.setdefault(prefix, {})[f".{suffix}"] = path
        loaded: list[tuple[float, Entry]] = []
        for prefix, files in groups.items():
            parsed = _parse_prefix(prefix)
            paths = self._paths(prefix)
            if parsed is None or len(files) != len(_SUFFIXES):
                for p in files.values():
                    p.unlink(missing_ok=True)
                continue
            start, sid = parsed
            try:
                entry = _open_entry(sid, start, paths, full_check=False)
            except (CorruptIndexError, OSError, ValueError) as e:
                log.warning("deleting corrupt remote index cache entry %s: %s", prefix, e)
                for p in paths.values():
                    p.unlink(missing_ok=True)
                continue
            loaded.append((_mtime(paths[IndexType.OFFSET]), entry))
        loaded.sort(key=lambda item: item[0])
        to_close: list[Entry] = []
        with self._lock:
            for _, entry in loaded:
                self._entries[entry.segment_id] = entry
                self._size += entry.size_bytes
            if loaded:
                to_close = self._evict_locked(keep=loaded[-1][1].segment_id)
        for entry in to_close:
            entry._close(delete_files=True)
        if loaded:
            log.info("loaded %d remote index cache entries from %s", len(loaded), self._dir)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


__all__ = [
    "CACHED_INDEX_TYPES",
    "DIR_NAME",
    "AbortedTxn",
    "Entry",
    "RemoteIndexCache",
    "file_name_prefix",
]
