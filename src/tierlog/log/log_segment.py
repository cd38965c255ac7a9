"""Kafka's ``LogSegment``: one ``.log`` file plus its offset index and time index.

Files of a segment with base offset B (all named by :mod:`tierlog.log.log_file_utils`)::

    <B>.log          record batches, as FileRecords
    <B>.index        sparse offset index: an entry (last offset of an append, its position)
                     after every ``index.interval.bytes`` of log
    <B>.timeindex    sparse time index: (largest timestamp so far, offset of the batch holding
                     it), written together with the offset index entries, plus a final entry
                     when the segment is rolled or closed

Every offset in the segment is in ``[B, B + 2**31 - 1]`` so the indexes can store 4-byte
relative offsets; the log rolls a new segment before an append would overflow.

Reading offset X: the offset index gives the position of the largest indexed offset <= X,
then batch headers are scanned forward to the first batch whose last offset >= X
(:meth:`LogSegment.translate_offset`). Reads return raw bytes starting at that batch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.errors import (
    LogSegmentOffsetOverflowError,
)
from tierlog.log import log_file_utils as lfu
from tierlog.log.file_records import (
    FileRecords,
    LogOffsetPosition,
    TimestampAndOffset,
)
from tierlog.log.log_segment_recovery import grow, scan_segment
from tierlog.log.offset_index import OffsetIndex, OffsetPosition
from tierlog.log.time_index import TimeIndex
from tierlog.log.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult
from tierlog.records.record_batch import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
)

if TYPE_CHECKING:
    from tierlog.log.leader_epoch_file_cache import LeaderEpochFileCache
    from tierlog.log.log_config import LogConfig
    from tierlog.log.producer_state_manager import CompletedTxn, ProducerStateManager

__all__ = ["FetchDataInfo", "LogSegment", "RollParams", "TimestampAndOffset"]

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
#: Bytes read at a time when walking batch headers to cut a follower's read at a batch end.
_CUT_SCAN_BYTES = 4096
#: Bytes read per system call while scanning headers to the end of a segment.
TAIL_SCAN_BUFFER_SIZE = 64 << 10


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class RollParams:
    """What :meth:`LogSegment.should_roll` needs to know about an incoming append."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The result of a read: raw batch bytes starting at the batch holding ``fetch_offset``.

    ``records`` may end with a partial batch (cut by the size limit);
    ``first_entry_incomplete`` is True when even the first batch did not fit.
    """

    fetch_offset: int
    records: bytes
    first_entry_incomplete: bool = False
    #: read_committed reads of remote storage: the aborted transactions of the range (None:
    #: not asked for; local reads leave it to the replica manager).
    aborted_transactions: list[AbortedTxn] | None = None


# A frozen dataclass's __init__ goes through object.__setattr__ per field; the read path
# fills the slots through their descriptors instead (the same object, a third cheaper).
_FETCH_DATA_INFO_SETTERS: tuple[Callable[[FetchDataInfo, object], None], ...] = tuple(
    FetchDataInfo.__dict__[f.name].__set__ for f in dataclasses.fields(FetchDataInfo)
)
_F0, _F1, _F2, _F3 = _FETCH_DATA_INFO_SETTERS


def _fetch_data_info(
    fetch_offset: int, records: bytes, first_entry_incomplete: bool
) -> FetchDataInfo:
    """``FetchDataInfo(...)`` for the read path."""
    info = object.__new__(FetchDataInfo)
    _F0(info, fetch_offset)
    _F1(info, records)
    _F2(info, first_entry_incomplete)
    _F3(info, None)
    return info


def random_segment_jitter(config: LogConfig) -> int:
    """Kafka's ``LogConfig.randomSegmentJitter``: a random ms in [0, min(jitter, segment.ms))."""
    jitter = config.segment_jitter_ms
    if jitter == 0:
        return 0
    return random.randrange(min(jitter, config.segment_ms))


def _replace_suffix(path: Path, old: str, new: str) -> Path:
    name = path.name
    if not name.endswith(old):
        raise ValueError(f"expected {path} to end with {old!r}")
    return path.with_name(name[: len(name) - len(old)] + new)


class LogSegment:
    """A segment of the log: FileRecords + OffsetIndex + TimeIndex (Kafka's ``LogSegment``).

    Thread-safety: not thread-safe for writers -- the owning log serialises appends,
    truncation, recovery, rolls and renames. Reads (:meth:`read`, :meth:`translate_offset`,
    :meth:`find_offset_by_timestamp`) may run concurrently with one writer and with deletion.
    """

    def __init__(
        self,
        log_records: FileRecords,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        base_offset: int,
        index_interval_bytes: int,
        roll_jitter_ms: int = 0,
        time_ms: Callable[[], int] = wall_clock_ms,
        txn_index: TransactionIndex | None = None,
    ) -> None:
        self.log = log_records
        self.offset_index = offset_index
        self.time_index = time_index
        #: Aborted transactions whose marker is here; its file exists only once one is.
        self.txn_index = txn_index or TransactionIndex(
            lfu.transaction_index_file(log_records.path.parent, base_offset), base_offset
        )
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self._time_ms = time_ms
        self.created_ms = time_ms()
        #: Max timestamp of the first batch: segment.ms counts from it (None: not loaded).
        self._rolling_based_timestamp: int | None = None
        last = time_index.last_entry()
        self._max_timestamp_so_far = last.timestamp
        self._offset_of_max_timestamp_so_far = last.offset
        self._bytes_since_last_index_entry = 0
        self._lock = threading.Lock()  # only for the lazy first-batch timestamp

    @classmethod
    def open(
        cls,
        dir: Path,
        base_offset: int,
        config: LogConfig,
        file_already_exists: bool = False,
        init_file_size: int = 0,
        preallocate: bool = False,
        *,
        file_suffix: str = "",
        time_ms: Callable[[], int] = wall_clock_ms,
    ) -> LogSegment:
        """Open (or create) the segment at ``base_offset`` in ``dir``.

        A new segment (``file_already_exists=False``) replaces stale files of the same name.
        For an existing one, missing index files are created empty; the loader notices and
        rebuilds them (:meth:`recover`).

        Raises:
            OSError: a file could not be opened or created.
        """
        dir = Path(dir)
        index_path = lfu.offset_index_file(dir, base_offset, file_suffix)
        time_index_path = lfu.time_index_file(dir, base_offset, file_suffix)
        if not file_already_exists:
            index_path.unlink(missing_ok=True)
            time_index_path.unlink(missing_ok=True)
            lfu.transaction_index_file(dir, base_offset, file_suffix).unlink(missing_ok=True)
        records = FileRecords(
            lfu.log_file(dir, base_offset, file_suffix),
            file_already_exists,
            init_file_size,
            preallocate,
        )
        max_index_size = config.max_index_size
        offset_index = OffsetIndex(index_path, base_offset, max_index_size)
        time_index = TimeIndex(time_index_path, base_offset, max_index_size)
        txn_index = TransactionIndex(
            lfu.transaction_index_file(dir, base_offset, file_suffix),
            base_offset,
            exists=None if file_already_exists else False,
        )
        return cls(
            records,
            offset_index,
            time_index,
            base_offset,
            config.index_interval,
            random_segment_jitter(config),
            time_ms,
            txn_index,
        )

    # ------------------------------------------------------------------ state

    @property
    def size(self) -> int:
        """Bytes of record batches in the segment."""
        return self.log._size

    def size_in_bytes(self) -> int:
        return self.log._size

    @property
    def max_timestamp_so_far(self) -> int:
        """The largest batch maxTimestamp in the segment, or -1."""
        return self._max_timestamp_so_far

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        """The last offset of the (first) batch holding :attr:`max_timestamp_so_far`."""
        return self._offset_of_max_timestamp_so_far

    def read_max_timestamp_and_offset_so_far(self) -> TimestampAndOffset:
        return TimestampAndOffset(self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far)

    @property
    def largest_record_timestamp(self) -> int | None:
        """The largest timestamp in the segment, or None when no batch had one."""
        ts = self._max_timestamp_so_far
        return ts if ts >= 0 else None

    @property
    def largest_timestamp(self) -> int:
        """The timestamp time-based retention uses: the largest batch timestamp, or the file's
        modification time when no batch carries one (Kafka's ``largestTimestamp``)."""
        ts = self._max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified

    @property
    def last_modified(self) -> int:
        """Modification time of the ``.log`` file in ms (0 when it is gone)."""
        try:
            return self.log.path.stat().st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return 0

    def set_last_modified(self, ms: int) -> None:
        """Set the modification time of the segment's files (tests, tools)."""
        ns = ms * 1_000_000
        for path in (self.log.path, self.offset_index.path, self.time_index.path):
            try:
                os.utime(path, ns=(ns, ns))
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self.size}, "
            f"largest_record_timestamp={self._max_timestamp_so_far})"
        )

    # ------------------------------------------------------------------ writes

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview,
        prefix: bytes = b"",
    ) -> None:
        """Append batches (offsets already assigned) and index them every interval bytes;
        ``prefix`` is written just before ``records`` (see :meth:`FileRecords.append`).

        Kafka semantics: an index entry (largest offset of this append, position of its first
        byte) is added when more than ``index.interval.bytes`` were appended since the last
        entry, together with a time index entry for the max timestamp so far.

        Raises:
            LogSegmentOffsetOverflowError: ``largest_offset`` does not fit this segment.
            OSError: the write failed.
        """
        n = (records.nbytes if isinstance(records, memoryview) else len(records)) + len(prefix)
        if n == 0:
            return
        log_records = self.log
        physical_position = log_records._size
        if physical_position == 0:
            self._rolling_based_timestamp = largest_timestamp
        if not 0 <= largest_offset - self.base_offset <= INT32_MAX:
            raise LogSegmentOffsetOverflowError(self, largest_offset)
        log_records.append(records, prefix)
        if largest_timestamp > self._max_timestamp_so_far:
            self._max_timestamp_so_far = largest_timestamp
            self._offset_of_max_timestamp_so_far = offset_of_max_timestamp
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, physical_position)
            # maybe_append skips a timestamp that is not larger than its last entry: skip the
            # call too (the common case with several batches per millisecond)
            if self._max_timestamp_so_far > self.time_index.last_entry().timestamp:
                self.time_index.maybe_append(
                    self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far
                )
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += n

    def recover(
        self,
        producer_state_manager: ProducerStateManager | None = None,
        leader_epoch_cache: LeaderEpochFileCache | None = None,
        *,
        max_batch_size: int = INT32_MAX,
    ) -> int:
        """Validate every batch, rebuild both indexes and cut the log at the first bad batch
        (:func:`~tierlog.log.log_segment_recovery.scan_segment` says which batches are
        valid). Leader epochs and producer state seen in valid batches are fed to the given
        cache and manager. Returns the number of bytes truncated.

        Raises:
            OSError: the file could not be read or truncated.
        """
        offset_index = self.offset_index
        time_index = self.time_index
        # Empty both indexes but grow them only once they fill up: a trimmed index rebuilt
        # for the same data fits exactly, and every resize remaps the file.
        offset_index.truncate()
        time_index.truncate()
        # Rebuilt by the log's replay of producer state (log_loader.rebuild_producer_state).
        self.txn_index.reset()
        scan = scan_segment(
            self.log,
            offset_index,
            time_index,
            self.base_offset,
            self.index_interval_bytes,
            producer_state_manager,
            leader_epoch_cache,
            max_batch_size,
        )
        valid = scan.valid_bytes
        max_ts, offset_of_max_ts = scan.max_timestamp, scan.offset_of_max_timestamp
        truncated = self.log.size_in_bytes() - valid
        if truncated > 0:
            log.warning(
                "found invalid data in %s at byte %d (%s): truncating %d bytes",
                self.log.path,
                valid,
                scan.reason,
                truncated,
            )
        # Also cuts a preallocated tail (file longer than the data) left by a crash.
        if valid < self.log.file_length() or truncated:
            self.log.truncate_to(valid)
        offset_index.trim_to_valid_size()
        if time_index.entries >= time_index.max_entries:
            grow(time_index)
        if time_index.entries < time_index.max_entries:
            time_index.maybe_append(max_ts, offset_of_max_ts, skip_full_check=True)
        time_index.trim_to_valid_size()
        self._max_timestamp_so_far = max_ts
        self._offset_of_max_timestamp_so_far = offset_of_max_ts
        self._bytes_since_last_index_entry = valid - scan.last_index_entry
        self._rolling_based_timestamp = None
        return truncated

    def update_txn_index(self, completed: CompletedTxn, last_stable_offset: int) -> None:
        """Index ``completed`` when it was aborted (its marker was appended here).

        Raises:
            OSError: the index could not be written.
        """
        if completed.is_aborted:
            self.txn_index.append(
                AbortedTxn(
                    completed.producer_id,
                    completed.first_offset,
                    completed.last_offset,
                    last_stable_offset,
                )
            )

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """This segment's aborted transactions overlapping ``[fetch_offset,
        upper_bound_offset)`` (see :meth:`TransactionIndex.collect_aborted_txns`)."""
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset`` (the whole batch containing
        ``offset`` goes) and the index entries pointing there; returns bytes removed.

        The indexes are grown back to their maximum size: the segment becomes active.
        """
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.resize_indexes(self.offset_index.max_index_size)
        bytes_truncated = 0 if mapping is None else self.log.truncate_to(mapping.position)
        if self.log.size_in_bytes() == 0:
            self.created_ms = self._time_ms()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        if self._max_timestamp_so_far >= 0:
            self._read_largest_timestamp()
        return bytes_truncated

    def _read_largest_timestamp(self) -> None:
        last_entry = self.time_index.last_entry()
        position = self.offset_index.lookup(last_entry.offset).position
        after = self.log.largest_timestamp_after(position)
        if after.timestamp > last_entry.timestamp:
            self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far = after
        else:
            self._max_timestamp_so_far = last_entry.timestamp
            self._offset_of_max_timestamp_so_far = last_entry.offset

    def on_become_inactive_segment(self) -> None:
        """The segment was rolled: record its final max timestamp, trim the indexes and a
        preallocated tail of the log. The time index entry decides its retention."""
        self.time_index.maybe_append(
            self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def sanity_check(self) -> None:
        """Check both index files.

        Raises:
            CorruptIndexError: an index cannot belong to this segment.
        """
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    def flush(self) -> None:
        """fsync the log and the transaction index, msync both offset and time indexes."""
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Record the final max timestamp, trim and close every file."""
        try:
            if self._max_timestamp_so_far >= 0:
                self.time_index.maybe_append(
                    self._max_timestamp_so_far,
                    self._offset_of_max_timestamp_so_far,
                    skip_full_check=True,
                )
        except (ValueError, OSError) as e:  # closing must go on
            log.warning("could not append the final time index entry of %s: %s", self, e)
        self.offset_index.close()
        self.time_index.close()
        self.log.close()

    def close_handlers(self) -> None:
        """Release every file handle without writing anything."""
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self.log.close_handlers()

    def delete_if_exists(self) -> None:
        """Unlink the segment's files.

        Handles are *not* closed: a reader that took this segment from an older snapshot of
        the segment list keeps reading the unlinked files; descriptors and mappings are
        released when the last reference goes away.
        """
        self.log.delete_if_exists()
        self.offset_index.path.unlink(missing_ok=True)
        self.time_index.path.unlink(missing_ok=True)
        self.txn_index.delete_if_exists()

    @property
    def deleted(self) -> bool:
        return not (
            self.log.path.exists()
            or self.offset_index.path.exists()
            or self.time_index.path.exists()
        )

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment, e.g. ``""`` -> ``".deleted"``.

        Raises:
            OSError: a rename failed.
        """
        self.log.rename_to(_replace_suffix(self.log.path, old_suffix, new_suffix))
        self.offset_index.rename_to(_replace_suffix(self.offset_index.path, old_suffix, new_suffix))
        self.time_index.rename_to(_replace_suffix(self.time_index.path, old_suffix, new_suffix))
        self.txn_index.rename_to(_replace_suffix(self.txn_index.path, old_suffix, new_suffix))

    def has_suffix(self, suffix: str) -> bool:
        return all(
            p.name.endswith(suffix)
            for p in (self.log.path, self.offset_index.path, self.time_index.path)
        )

    def update_parent_dir(self, dir: Path) -> None:
        self.log.update_parent_dir(dir)
        self.offset_index.update_parent_dir(dir)
        self.time_index.update_parent_dir(dir)
        self.txn_index.update_parent_dir(dir)

    # ------------------------------------------------------------------ rolling

    def should_roll(self, params: RollParams) -> bool:
        """Kafka's roll rules for an incoming append (see :meth:`should_roll_for`)."""
        return self.should_roll_for(
            params.max_segment_ms,
            params.max_segment_bytes,
            params.max_timestamp_in_messages,
            params.max_offset_in_messages,
            params.messages_size,
            params.now,
        )

    def should_roll_for(
        self,
        max_segment_ms: int,
        max_segment_bytes: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        messages_size: int,
        now: int,
    ) -> bool:
        """True when the append must go to a new segment: it would grow the segment past
        ``segment.bytes``; ``segment.ms`` (minus jitter) passed since the first batch's
        timestamp (or since creation when batches have none); an index is full; or its
        largest offset would not fit a 32-bit relative offset.
        """
        size = self.log._size
        if size > max_segment_bytes - messages_size:
            return True
        if size > 0:
            first_timestamp = self._rolling_based_timestamp
            if first_timestamp is None:
                self._load_first_batch_timestamp()
                first_timestamp = self._rolling_based_timestamp
            if first_timestamp is not None and first_timestamp >= 0:
                waited = max_timestamp_in_messages - first_timestamp
            else:
                waited = now - self.created_ms
            if waited > max_segment_ms - self.roll_jitter_ms:
                return True
        if self.offset_index.is_full() or self.time_index.is_full():
            return True
        return not 0 <= max_offset_in_messages - self.base_offset <= INT32_MAX

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None:
            with self._lock:
                if self._rolling_based_timestamp is None:
                    for header in self.log.batches_from(0, buffer_size=RECORD_BATCH_OVERHEAD):
                        self._rolling_based_timestamp = header.max_timestamp
                        break

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        """How long the segment has waited to roll: by record timestamps when the first
        batch has one (new batch's timestamp - first batch's), else by the wall clock."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now - self.created_ms

    def first_batch_timestamp(self) -> int | None:
        """The first batch's max timestamp, or None when unknown."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        return ts if ts is not None and ts >= 0 else None

    def has_overflow(self) -> bool:
        """True when the last offset does not fit a 32-bit offset relative to the base."""
        next_offset = self.read_next_offset()
        return next_offset > self.base_offset and not (
            0 <= next_offset - 1 - self.base_offset <= INT32_MAX
        )

    # ------------------------------------------------------------------ reads

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The batch holding the smallest offset >= ``offset``: (its last offset, position,
        size), or None when ``offset`` is past the end of the segment."""
        mapping = self.offset_index.lookup(offset)
        return self.log.search_for_offset_from_position(
            offset, max(mapping.position, starting_position)
        )

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
        whole_batches: bool = False,
    ) -> FetchDataInfo | None:
        """Up to ``max_size`` bytes from the batch holding ``start_offset``, not past byte
        ``max_position``; None when ``start_offset`` is past the end of the segment.

        With ``min_one_message`` the first batch is returned whole even when it is larger
        than ``max_size``. Otherwise the data may end with a partial batch, unless
        ``whole_batches``: then it ends at the last batch it holds whole (a follower's read:
        the follower drops a partial batch and fetches it again, so sending it is waste).

        Raises:
            ValueError: negative ``max_size``.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for log read from segment {self}")
        log_records = self.log
        size_snapshot = log_records._size
        found = log_records.search_for_offset_from_position(
            start_offset, self.offset_index.lookup(start_offset).position, size_snapshot
        )
        if found is None:
            return None
        _, start_position, batch_size = found
        adjusted_max_size = max(max_size, batch_size) if min_one_message else max_size
        if adjusted_max_size == 0:
            return _fetch_data_info(start_offset, b"", False)
        limit = size_snapshot if max_position is None else min(max_position, size_snapshot)
        fetch_size = min(limit - start_position, adjusted_max_size)
        if whole_batches and fetch_size > batch_size:
            # Walk the headers from the last index entry before the end (at most
            # index.interval.bytes and one batch away): the first batch always fits here.
            end = start_position + fetch_size
            cut = max(self.offset_index.position_floor(end), start_position)
            for header in log_records.batches_from(cut, end, buffer_size=_CUT_SCAN_BYTES):
                cut = header.position + header.size_in_bytes
            fetch_size = cut - start_position
        data = log_records.read(start_position, fetch_size) if fetch_size > 0 else b""
        return _fetch_data_info(start_offset, data, adjusted_max_size < batch_size)

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty). Scans from the last
        offset index entry to the end."""
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        last: RecordBatchHeader | None = None
        for header in self.log.batches_from(start, buffer_size=TAIL_SCAN_BUFFER_SIZE):
            last = header
        return last.next_offset if last is not None else self.base_offset

    def fetch_upper_bound_offset(self, start_offset_position: int, fetch_size: int) -> int | None:
        """An offset known to lie past ``fetch_size`` bytes from the position, via the index."""
        found = self.offset_index.fetch_upper_bound_offset(
            OffsetPosition(self.base_offset, start_offset_position), fetch_size
        )
        return found.offset if found is not None else None

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int = 0
    ) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``timestamp`` and offset >= ``starting_offset``.

        Kafka's semantics, record by record: the time index and offset index give a start
        position, from which :meth:`FileRecords.search_for_timestamp` finds the record
        (ListOffsets is not the hot path). Returns None when no such record is in this
        segment.
        """
        timestamp_offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(timestamp_offset.offset, starting_offset)).position
        return self.log.search_for_timestamp(timestamp, position, starting_offset)

    def offset_of_max_timestamp(self) -> TimestampAndOffset | None:
        """The first record holding the segment's max timestamp (ListOffsets -3)."""
        max_ts = self._max_timestamp_so_far
        if max_ts < 0:
            return None
        position = self.offset_index.lookup(self._offset_of_max_timestamp_so_far).position
        found = self.log.search_for_max_timestamp(max_ts, position)
        return found or TimestampAndOffset(max_ts, self._offset_of_max_timestamp_so_far)
