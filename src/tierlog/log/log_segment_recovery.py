"""The scan of Kafka's ``LogSegment.recover``: every batch of a segment validated, its
indexes rebuilt, its leader epochs and producer state replayed, and the end of its valid
data found.

:meth:`tierlog.log.log_segment.LogSegment.recover` empties the indexes, runs
:func:`scan_segment`, then cuts the files at :attr:`RecoveryScan.valid_bytes` and takes its
in-memory state (largest timestamp, bytes since the last index entry) from the result.

A batch is valid when it is complete, has magic 2, a length in ``[49, max_batch_size]``, a
matching CRC-32C, non-negative counts, and offsets that increase and fit the segment. (A
valid CRC with an out-of-range baseOffset -- the CRC does not cover it -- is treated as
corruption, where Kafka would split the segment.)

The file is read in large chunks (:data:`RECOVERY_CHUNK_SIZE`) into one reusable buffer and
CRCs are checked on memoryview slices, so no batch is copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tierlog.log.file_records import MIN_BATCH_LENGTH, FileRecords
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.time_index import TimeIndex
from tierlog.records.record_batch import (
    CRC_START,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    crc32c,
)

if TYPE_CHECKING:
    from tierlog.log.leader_epoch_file_cache import LeaderEpochFileCache
    from tierlog.log.producer_state_manager import ProducerStateManager

__all__ = ["RECOVERY_CHUNK_SIZE", "RecoveryScan", "grow", "scan_segment"]

INT32_MAX = 2**31 - 1
#: Bytes read per system call while recovering a segment.
RECOVERY_CHUNK_SIZE = 8 << 20


@dataclass(frozen=True, slots=True)
class RecoveryScan:
    """Where a segment's valid data ends, and what the scan learnt on the way."""

    #: Bytes of valid batches from the start of the file.
    valid_bytes: int
    #: Why the scan stopped before the end of the file ("" when it did not).
    reason: str
    #: The largest batch timestamp (-1: none) and the last offset of its batch.
    max_timestamp: int
    offset_of_max_timestamp: int
    #: Position of the batch that got the last index entry.
    last_index_entry: int


def grow(index: OffsetIndex | TimeIndex) -> None:
    """Grow an index back to its maximum size (it may have been trimmed)."""
    if index.max_index_size > index.file_length:
        index.resize(index.max_index_size)


def scan_segment(
    log: FileRecords,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    base: int,
    interval: int,
    producer_state_manager: ProducerStateManager | None,
    leader_epoch_cache: LeaderEpochFileCache | None,
    max_batch_size: int,
) -> RecoveryScan:
    """Validate the batches of ``log`` (a segment with base offset ``base``) from its start,
    appending an entry to the (emptied) indexes every ``interval`` bytes and feeding leader
    epochs and producer state of valid batches to the given cache and manager; stop at the
    first invalid batch.

    Raises:
        OSError: the file could not be read.
    """
    file_size = log.size_in_bytes()
    max_ts = -1
    offset_of_max_ts = base
    valid = 0
    last_index_entry = 0
    next_expected = base
    latest_epoch = leader_epoch_cache.latest_epoch if leader_epoch_cache is not None else None

    buf = bytearray(min(RECOVERY_CHUNK_SIZE, max(file_size, RECORD_BATCH_OVERHEAD)))
    view = memoryview(buf)
    buf_start = 0
    buf_end = 0  # file positions covered by buf
    unpack = HEADER_STRUCT.unpack_from
    reason = ""
    try:
        while True:
            remaining = file_size - valid
            if remaining < RECORD_BATCH_OVERHEAD:
                if remaining:
                    reason = "a partial batch header"
                break
            if valid + RECORD_BATCH_OVERHEAD > buf_end:
                buf_start = valid
                buf_end = valid + log.read_into(view, valid)
                if buf_end - valid < RECORD_BATCH_OVERHEAD:
                    reason = "a short read"
                    break
            off = valid - buf_start
            fields = unpack(buf, off)
            (
                base_offset,
                length,
                epoch,
                magic,
                crc,
                _attributes,
                last_offset_delta,
                _base_ts,
                batch_max_ts,
                producer_id,
                _producer_epoch,
                _base_sequence,
                records_count,
            ) = fields
            size = length + LOG_OVERHEAD
            if length < MIN_BATCH_LENGTH or size > max_batch_size:
                reason = f"an impossible batch length {length}"
                break
            if magic != CURRENT_MAGIC:
                reason = f"magic {magic}"
                break
            if size > remaining:
                reason = f"a batch of {size} bytes with {remaining} bytes left"
                break
            if valid + size > buf_end:
                if size > len(buf):
                    buf = bytearray(size)
                    view = memoryview(buf)
                buf_start = valid
                buf_end = valid + log.read_into(view, valid)
                if buf_end - valid < size:
                    reason = "a short read"
                    break
                off = 0
            if crc32c(view[off + CRC_START : off + size]) != crc:
                reason = "a CRC mismatch"
                break
            last_offset = base_offset + last_offset_delta
            if last_offset_delta < 0 or records_count < 0:
                reason = "negative counts"
                break
            if base_offset < next_expected or last_offset - base > INT32_MAX:
                reason = f"offsets [{base_offset}, {last_offset}] out of order or range"
                break

            if batch_max_ts > max_ts:
                max_ts = batch_max_ts
                offset_of_max_ts = last_offset
            if valid - last_index_entry > interval:
                if offset_index.is_full():
                    grow(offset_index)
                if not offset_index.is_full():  # else: sparser, still correct
                    offset_index.append(last_offset, valid)
                    if time_index.is_full():
                        grow(time_index)
                    if not time_index.is_full():
                        time_index.maybe_append(max_ts, offset_of_max_ts)
                    last_index_entry = valid
            if (
                leader_epoch_cache is not None
                and epoch >= 0
                and (latest_epoch is None or epoch > latest_epoch)
            ):
                leader_epoch_cache.assign(epoch, base_offset)
                latest_epoch = epoch
            if producer_state_manager is not None:
                if producer_id != NO_PRODUCER_ID:
                    header = RecordBatchHeader(valid, *fields)
                    producer_state_manager.update(header, base_offset, last_offset, batch_max_ts)
                producer_state_manager.update_map_end_offset(last_offset + 1)
            next_expected = last_offset + 1
            valid += size
    finally:
        view.release()

    return RecoveryScan(valid, reason, max_ts, offset_of_max_ts, last_index_entry)
