"""Zero-copy view over Kafka record batches, magic 2 (sans-IO).

On-disk and on-wire layout of one batch (all integers big-endian)::

    baseOffset: int64                 0
    batchLength: int32                8   bytes after this field; batch size = batchLength + 12
    partitionLeaderEpoch: int32      12
    magic: int8 (= 2)                16
    crc: uint32                      17   CRC-32C of bytes [21, end)
    attributes: int16                21   bits 0-2 compression, 3 timestampType (LogAppendTime),
                                          4 isTransactional, 5 isControlBatch, 6 hasDeleteHorizonMs
    lastOffsetDelta: int32           23
    baseTimestamp: int64             27
    maxTimestamp: int64              35
    producerId: int64                43
    producerEpoch: int16             51
    baseSequence: int32              53
    recordsCount: int32              57
    records: [Record]                61   compressed as a whole when compression != 0

baseOffset and partitionLeaderEpoch sit outside the CRC, so the broker patches them on append
without recomputing it. This module never decodes records: it reads the 61 header bytes only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c as _crc32c

from tierlog.errors import CorruptRecordError, InvalidRecord

# Field offsets, Kafka's DefaultRecordBatch names.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORD_BATCH_OVERHEAD = 61  # header size
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted by batchLength
CRC_START = ATTRIBUTES_OFFSET

CURRENT_MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

#: Kafka's compression type ids.
COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

#: timestampType values as Kafka exposes them.
TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1

# One struct for the whole header: q i i b I h i q q q h i i
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_LENGTH_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``, hardware-accelerated through the crc32c package."""
    return int(_crc32c.crc32c(data))


@dataclass(frozen=True, slots=True)
class RecordBatchHeader:
    """The decoded 61-byte header of one batch, plus its position in the buffer it came from."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control_batch(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> RecordBatchHeader:
    """Decode the header of the batch starting at ``position``.

    Raises:
        CorruptRecordError: fewer than 61 bytes remain, or the batch length is impossible.
    """
    if len(buf) - position < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"record batch at position {position} is truncated: "
            f"{len(buf) - position} bytes, header needs {RECORD_BATCH_OVERHEAD}"
        )
    fields = HEADER_STRUCT.unpack_from(buf, position)
    if fields[1] < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"record batch at position {position} has batchLength {fields[1]}, "
            f"smaller than the minimum {RECORD_BATCH_OVERHEAD - LOG_OVERHEAD}"
        )
    return RecordBatchHeader(position, *fields)


def compute_crc(buf: bytes | bytearray | memoryview, header: RecordBatchHeader) -> int:
    """CRC-32C over the CRC-covered part of the batch described by ``header``."""
    start = header.position + CRC_START
    end = header.position + header.size_in_bytes
    return crc32c(memoryview(buf)[start:end])


def validate_batch(
    buf: bytes | bytearray | memoryview, position: int = 0, *, max_size: int | None = None
) -> RecordBatchHeader:
    """Check one whole batch at ``position``: complete, magic 2, consistent counts, CRC-32C.

    Raises:
        CorruptRecordError: truncated, wrong magic, or CRC mismatch.
        InvalidRecord: header fields that contradict each other.
    """
    header = read_header(buf, position)
    if header.magic != CURRENT_MAGIC:
        raise CorruptRecordError(
            f"record batch at position {position} has magic {header.magic}, expected 2"
        )
    if max_size is not None and header.size_in_bytes > max_size:
        raise CorruptRecordError(
            f"record batch at position {position} has size {header.size_in_bytes} > {max_size}"
        )
    if position + header.size_in_bytes > len(buf):
        raise CorruptRecordError(
            f"record batch at position {position} is truncated: size {header.size_in_bytes}, "
            f"{len(buf) - position} bytes available"
        )
    actual = compute_crc(buf, header)
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at position {position} is corrupt: stored crc {header.crc:#010x}, "
            f"computed {actual:#010x}"
        )
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise InvalidRecord(f"record batch at position {position} has negative counts")
    return header


def iter_headers(
    buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None
) -> Iterator[RecordBatchHeader]:
    """Headers of the complete batches in ``buf[start:end]``; stops at a trailing partial batch.

    Does not check CRCs; a batch whose declared length is impossible ends the iteration
    (it cannot be told apart from a torn tail).
    """
    end = len(buf) if end is None else end
    pos = start
    while end - pos >= RECORD_BATCH_OVERHEAD:
        _, length = _LENGTH_PREFIX.unpack_from(buf, pos)
        size = length + LOG_OVERHEAD
        if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or pos + size > end:
            return
        yield RecordBatchHeader(pos, *HEADER_STRUCT.unpack_from(buf, pos))
        pos += size


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Patch baseOffset in place (outside the CRC)."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Patch partitionLeaderEpoch in place (outside the CRC)."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, position: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp`` as maxTimestamp, and recompute the CRC.

    Clients verify CRCs, so unlike the offset/epoch patches this one must rewrite it.
    """
    attrs = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)[0]
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    length = _INT32.unpack_from(buf, position + LENGTH_OFFSET)[0]
    crc = crc32c(memoryview(buf)[position + CRC_START : position + length + LOG_OVERHEAD])
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)
