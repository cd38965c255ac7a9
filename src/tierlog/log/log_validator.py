"""Validation of an append's batches: Kafka's ``LogValidator`` and ``analyzeAndValidateRecords``.

:meth:`tierlog.log.log.Log.append` never decodes records. It reads each batch's 61-byte
header (see :mod:`tierlog.records.record_batch`), checks it against the log's configuration,
verifies the CRC-32C, and then patches only what the CRC does not cover::

    baseOffset            bytes 0-8    the offset assigned by the log
    batchLength           bytes 8-12   rewritten unchanged (one 16-byte pack)
    partitionLeaderEpoch  bytes 12-16  the leader's epoch

LogAppendTime (``message.timestamp.type``) also rewrites attributes and maxTimestamp, which
are covered, so that path recomputes the CRC (:func:`assign_offsets_in_place`).

Everything here is pure: bytes in, header tuples or exceptions out.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import NamedTuple

from crc32c import crc32c as _crc32c

from tierlog.errors import (
    CorruptRecordError,
    InvalidRecord,
    InvalidTimestamp,
    MessageTooLarge,
    UnsupportedCompressionType,
)
from tierlog.log.log_config import LogConfig
from tierlog.records.record_batch import (
    COMPRESSION_CODEC_MASK,
    COMPRESSION_ZSTD,
    CONTROL_FLAG_MASK,
    CRC_START,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

__all__ = [
    "BATCH_PREFIX",
    "AppendConfig",
    "BatchFields",
    "LogAppendInfo",
    "analyze_and_validate_records",
    "append_info",
    "assign_offsets_in_place",
    "check_timestamps",
    "to_batch_header",
    "validate_keys",
]

_MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD

#: baseOffset, batchLength (rewritten unchanged), partitionLeaderEpoch: bytes 0-15 of a batch,
#: outside the CRC. One pack instead of record_batch's two setters on the hot path.
BATCH_PREFIX = struct.Struct(">qii")

#: One validated batch: its position in the append, then the 13 header fields of
#: ``HEADER_STRUCT`` (baseOffset at [1], batchLength [2], partitionLeaderEpoch [3], magic [4],
#: crc [5], attributes [6], lastOffsetDelta [7], baseTimestamp [8], maxTimestamp [9],
#: producerId [10], producerEpoch [11], baseSequence [12], recordsCount [13]).
BatchFields = tuple[int, ...]


class LogAppendInfo(NamedTuple):
    """The outcome of :meth:`Log.append <tierlog.log.log.Log.append>`.

    For a duplicate (an idempotent producer's retry) nothing was written and the offsets
    are those of the original append. Immutable. A NamedTuple rather than a frozen
    dataclass: the append path builds one per call and a frozen dataclass's ``__init__``
    costs four times as much (see :func:`append_info`).
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    records_count: int
    valid_bytes: int
    duplicate: bool = False


_new_tuple = tuple.__new__


def append_info(
    first_offset: int,
    last_offset: int,
    max_timestamp: int,
    offset_of_max_timestamp: int,
    log_append_time: int,
    log_start_offset: int,
    records_count: int,
    valid_bytes: int,
    duplicate: bool,
) -> LogAppendInfo:
    """``LogAppendInfo(...)`` without the keyword-handling ``__new__`` (the same object)."""
    return _new_tuple(
        LogAppendInfo,
        (
            first_offset,
            last_offset,
            max_timestamp,
            offset_of_max_timestamp,
            log_append_time,
            log_start_offset,
            records_count,
            valid_bytes,
            duplicate,
        ),
    )


# The slot setters of RecordBatchHeader, a frozen dataclass whose __init__ goes through
# object.__setattr__ for each of its 14 fields: filling the slots directly halves the cost.
(_H0, _H1, _H2, _H3, _H4, _H5, _H6, _H7, _H8, _H9, _H10, _H11, _H12, _H13) = (
    RecordBatchHeader.__dict__[f.name].__set__ for f in dataclasses.fields(RecordBatchHeader)
)


def to_batch_header(fields: BatchFields) -> RecordBatchHeader:
    """``RecordBatchHeader(*fields)`` for the :data:`BatchFields` of one batch (the same
    object, built in half the time: the append path builds one per idempotent batch)."""
    header: RecordBatchHeader = object.__new__(RecordBatchHeader)
    _H0(header, fields[0])
    _H1(header, fields[1])
    _H2(header, fields[2])
    _H3(header, fields[3])
    _H4(header, fields[4])
    _H5(header, fields[5])
    _H6(header, fields[6])
    _H7(header, fields[7])
    _H8(header, fields[8])
    _H9(header, fields[9])
    _H10(header, fields[10])
    _H11(header, fields[11])
    _H12(header, fields[12])
    _H13(header, fields[13])
    return header


class AppendConfig(NamedTuple):
    """The configs the append path reads, resolved once per LogConfig."""

    segment_size: int
    segment_ms: int
    max_message_size: int
    log_append_time: bool
    flush_interval: int
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    #: cleanup.policy includes compact: every record needs a key (see validate_keys).
    compact: bool = False

    @classmethod
    def of(cls, config: LogConfig) -> AppendConfig:
        return cls(
            config.segment_size,
            config.segment_ms,
            config.max_message_size,
            config.log_append_time,
            config.flush_interval,
            int(config.get("message.timestamp.before.max.ms")),
            int(config.get("message.timestamp.after.max.ms")),
            config.compact,
        )


def analyze_and_validate_records(
    records: bytes | bytearray | memoryview,
    n: int,
    config: AppendConfig,
    origin_client: bool,
    now: int,
) -> tuple[list[BatchFields], int, bool]:
    """Validate every batch of an append of ``n`` bytes (Kafka's
    ``analyzeAndValidateRecords``); returns the :data:`BatchFields` of each batch, the total
    record count and whether any batch has a producer id.

    Checks: whole batches with a possible length, none larger than ``max.message.bytes``,
    magic 2, CRC-32C, a known codec; from a client (``origin_client``) also no control
    batch, a record count that matches lastOffsetDelta and, with CreateTime, timestamps
    within ``message.timestamp.before/after.max.ms`` of ``now``.

    Raises:
        InvalidRecord: empty input, a count that contradicts lastOffsetDelta, a control
            batch from a client.
        CorruptRecordError: a truncated batch, trailing bytes, bad magic or CRC.
        MessageTooLarge: a batch larger than ``max.message.bytes``.
        UnsupportedCompressionType: an unknown codec id.
        InvalidTimestamp: LogAppendTime set by a client, or a CreateTime out of bounds.
    """
    if n == 0:
        raise InvalidRecord("no record batches in the append")
    max_message_size = config.max_message_size
    check_ts = origin_client and not config.log_append_time
    min_timestamp = now - config.timestamp_before_max_ms
    max_timestamp = now + config.timestamp_after_max_ms
    unpack = HEADER_STRUCT.unpack_from
    batches: list[BatchFields] = []
    records_count = 0
    has_producer_ids = False
    pos = 0
    with memoryview(records) as view:
        while pos < n:
            if n - pos < RECORD_BATCH_OVERHEAD:
                raise CorruptRecordError(
                    f"{n - pos} trailing bytes at position {pos}: not a whole batch header"
                )
            fields = unpack(view, pos)
            (
                _base_offset,
                length,
                _epoch,
                magic,
                crc,
                attributes,
                last_offset_delta,
                base_timestamp,
                batch_max_timestamp,
                producer_id,
                _producer_epoch,
                _base_sequence,
                count,
            ) = fields
            batch_size = length + LOG_OVERHEAD
            if length < _MIN_BATCH_LENGTH:
                raise CorruptRecordError(
                    f"record batch at position {pos} has an impossible length {length}"
                )
            if batch_size > max_message_size:
                raise MessageTooLarge(
                    f"record batch of {batch_size} bytes exceeds max.message.bytes "
                    f"{max_message_size}"
                )
            if pos + batch_size > n:
                raise CorruptRecordError(
                    f"record batch at position {pos} is truncated: size {batch_size}, "
                    f"{n - pos} bytes available"
                )
            if magic != CURRENT_MAGIC:
                raise CorruptRecordError(
                    f"record batch at position {pos} has magic {magic}, expected 2"
                )
            # The C function itself (record_batch.crc32c wraps it): one call less per batch.
            if _crc32c(view[pos + CRC_START : pos + batch_size]) != crc:
                raise CorruptRecordError(f"record batch at position {pos} failed its CRC")
            if attributes & COMPRESSION_CODEC_MASK > COMPRESSION_ZSTD:
                raise UnsupportedCompressionType(
                    f"unknown compression type id {attributes & COMPRESSION_CODEC_MASK}"
                )
            if origin_client:
                if attributes & CONTROL_FLAG_MASK:
                    raise InvalidRecord("clients are not allowed to write control records")
                if last_offset_delta + 1 != count or last_offset_delta < 0:
                    raise InvalidRecord(
                        f"record batch at position {pos} has lastOffsetDelta {last_offset_delta} "
                        f"but {count} records"
                    )
            # CreateTime bounds on the first and max timestamps: without decoding, these
            # bound the batch from both sides when records are in timestamp order, as
            # producers write them. NO_TIMESTAMP (-1) is not checked, as in Kafka.
            if check_ts and (
                attributes & TIMESTAMP_TYPE_MASK
                or not min_timestamp <= base_timestamp <= max_timestamp
                or not min_timestamp <= batch_max_timestamp <= max_timestamp
            ):
                check_timestamps(fields, attributes, min_timestamp, max_timestamp)
            records_count += count
            if producer_id != NO_PRODUCER_ID:
                has_producer_ids = True
            batches.append((pos, *fields))
            pos += batch_size
    return batches, records_count, has_producer_ids


def check_timestamps(
    fields: tuple[int, ...], attributes: int, min_timestamp: int, max_timestamp: int
) -> None:
    """Raise for a LogAppendTime flag from a producer or a CreateTime out of bounds
    (``fields``: the :data:`HEADER_STRUCT` fields of one batch).

    Raises:
        InvalidTimestamp: either of those.
    """
    if attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestamp(
            "invalid timestamp type in a batch: producers must not set LogAppendTime"
        )
    for ts in (fields[7], fields[8]):  # baseTimestamp, maxTimestamp
        if ts != NO_TIMESTAMP and not min_timestamp <= ts <= max_timestamp:
            raise InvalidTimestamp(
                f"timestamp {ts} of a record batch is out of range "
                f"[{min_timestamp}, {max_timestamp}] (message.timestamp.before.max.ms, "
                f"message.timestamp.after.max.ms)"
            )


def assign_offsets_in_place(
    buf: bytearray,
    batches: list[BatchFields],
    first_offset: int,
    leader_epoch: int,
    log_append_time: int | None,
) -> tuple[int, int, int]:
    """Patch baseOffset and partitionLeaderEpoch of every batch in ``buf`` (and, with
    ``log_append_time``, mark it LogAppendTime and recompute its CRC); returns (max
    timestamp, offset of max timestamp, last offset). Kafka's ``assignOffsetsNonCompressed``
    and the in-place part of ``validateMessagesAndAssignOffsetsCompressed``."""
    max_timestamp = NO_TIMESTAMP
    offset_of_max_timestamp = -1
    offset = first_offset
    for fields in batches:
        position = fields[0]
        set_base_offset(buf, position, offset)
        set_partition_leader_epoch(buf, position, leader_epoch)
        offset += fields[7] + 1
        if log_append_time is not None:
            set_log_append_time(buf, position, log_append_time)
            batch_max_timestamp = log_append_time
        else:
            batch_max_timestamp = fields[9]
        if batch_max_timestamp > max_timestamp:
            max_timestamp = batch_max_timestamp
            offset_of_max_timestamp = offset - 1
    return max_timestamp, offset_of_max_timestamp, offset - 1


def validate_keys(
    records: bytes | bytearray | memoryview, batches: list[BatchFields], topic_partition: str
) -> None:
    """Kafka's ``LogValidator.validateKey``: a compacted topic refuses records without a key.

    The only place the append path decodes records, and only for compacted topics (the caller
    checks ``AppendConfig.compact``): batches are decompressed (bounded) and every record is
    looked at. Every offending record is reported with its index in its batch, as the
    ``record_errors`` of the Produce response.

    Raises:
        InvalidRecord: a record without a key (``record_errors`` lists them).
        CorruptRecordError, UnsupportedCompressionType: records that cannot be decoded.
    """
    from tierlog.records.default_records import read_records

    message = (
        f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
    )
    record_errors: list[tuple[int, str | None]] = []
    for fields in batches:
        if fields[13] == 0:
            continue
        header = to_batch_header(fields)
        for index, record in enumerate(read_records(records, header, bounded=True)):
            if record.key is None:
                record_errors.append((index, message))
    if record_errors:
        # Kafka's LogValidator.processRecordErrors
        shown = ", ".join(
            f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3]
        )
        raise InvalidRecord(
            f"One or more records have been rejected due to {len(record_errors)} record "
            f"errors in total, and only showing the first three errors at most: [{shown}]",
            record_errors=record_errors,
        )
