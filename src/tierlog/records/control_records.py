"""Control records: the COMMIT / ABORT markers that end a transaction (sans-IO).

A transaction coordinator ends a producer's transaction on each partition it wrote to by
appending one *control batch* (Kafka's ``MemoryRecords.withEndTransactionMarker``)::

    batch header (61 bytes, see record_batch)
      magic 2, compression none, CreateTime,
      attributes: isTransactional (0x10) | isControlBatch (0x20)
      producerId, producerEpoch: the producer's; baseSequence -1
      baseTimestamp = maxTimestamp = the marker's timestamp; lastOffsetDelta 0; 1 record
    one record (17 bytes)
      length varint 16, attributes 0, timestampDelta 0, offsetDelta 0,
      key   (4 bytes): version int16 (0), type int16 (0 = ABORT, 1 = COMMIT)
      value (6 bytes): version int16 (0), coordinatorEpoch int32      -- EndTxnMarker v0
      headers: 0

78 bytes in all. Control batches are read by the log (producer state, the transaction index)
and by consumers (which skip them); their key's ``type`` says what kind of control record
they hold (ControlRecordType: ABORT 0, COMMIT 1; KRaft's own types start at 2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c as _crc32c

from tierlog.errors import InvalidRecord
from tierlog.records.compression import decompress
from tierlog.records.record_batch import (
    COMPRESSION_CODEC_MASK,
    COMPRESSION_NONE,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CRC_START,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatchHeader,
)
from tierlog.records.varint import decode_varint, decode_varlong

__all__ = [
    "CONTROL_TYPE_ABORT",
    "CONTROL_TYPE_COMMIT",
    "END_TXN_MARKER_BATCH_SIZE",
    "EndTransactionMarker",
    "build_end_txn_marker_batch",
    "control_record_key",
    "control_record_type",
    "end_transaction_marker",
    "read_end_txn_marker",
]

#: ControlRecordType ids (the int16 ``type`` in a control record's key).
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1

CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_CONTROL_KEY = struct.Struct(">hh")  # version (0), type
_END_TXN_MARKER_VALUE = struct.Struct(">hi")  # version (0), coordinatorEpoch
# The record of a marker batch after its length: attributes 0, timestampDelta 0,
# offsetDelta 0, keyLength 4 (zigzag 8), then the key; valueLength 6 (zigzag 12).
_RECORD_BODY_SIZE = 1 + 1 + 1 + 1 + _CONTROL_KEY.size + 1 + _END_TXN_MARKER_VALUE.size + 1
#: Bytes of one end-transaction-marker batch.
END_TXN_MARKER_BATCH_SIZE = RECORD_BATCH_OVERHEAD + 1 + _RECORD_BODY_SIZE


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker (Kafka's ``EndTransactionMarker``). Immutable value."""

    control_type: int
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type == CONTROL_TYPE_COMMIT

    @property
    def is_abort(self) -> bool:
        return self.control_type == CONTROL_TYPE_ABORT


def control_record_key(control_type: int) -> bytes:
    """The key of a control record of ``control_type`` (version 0)."""
    return _CONTROL_KEY.pack(CONTROL_RECORD_KEY_VERSION, control_type)


def control_record_type(key: bytes | bytearray | memoryview | None) -> int:
    """The ControlRecordType of a control record, from its key (version int16, type int16).

    Raises:
        InvalidRecord: a key shorter than 4 bytes (Kafka's "Invalid type or null key"), or a
            negative key version.
    """
    if key is None or len(key) < _CONTROL_KEY.size:
        raise InvalidRecord(f"control record key {bytes(key) if key else key!r} is too short")
    version, control_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecord(f"control record key has a negative version {version}")
    return int(control_type)


def end_transaction_marker(control_type: int, coordinator_epoch: int) -> tuple[bytes, bytes]:
    """``(key, value)`` of a COMMIT/ABORT marker record.

    Raises:
        ValueError: ``control_type`` is neither ABORT nor COMMIT, or the epoch is not an int32.
    """
    if control_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        raise ValueError(f"a transaction marker is ABORT (0) or COMMIT (1), not {control_type}")
    try:
        value = _END_TXN_MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    except struct.error as e:
        raise ValueError(f"coordinator epoch {coordinator_epoch} is not an int32") from e
    return control_record_key(control_type), value


def _decode_marker_value(value: bytes | bytearray | memoryview | None) -> int:
    if value is None or len(value) < _END_TXN_MARKER_VALUE.size:
        raise InvalidRecord(
            f"end transaction marker value of {0 if value is None else len(value)} bytes is "
            f"too short (needs {_END_TXN_MARKER_VALUE.size})"
        )
    version, coordinator_epoch = _END_TXN_MARKER_VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecord(f"end transaction marker has a negative version {version}")
    # Kafka reads newer versions too (their extra fields are ignored).
    return int(coordinator_epoch)


def build_end_txn_marker_batch(
    marker: EndTransactionMarker,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch holding ``marker``, byte for byte as Kafka's
    ``MemoryRecords.withEndTransactionMarker(base_offset, timestamp, partition_leader_epoch,
    producer_id, producer_epoch, marker)`` writes it.

    Raises:
        ValueError: a field out of its wire range, or a control type other than ABORT/COMMIT.
    """
    key, value = end_transaction_marker(marker.control_type, marker.coordinator_epoch)
    body = bytes((0, 0, 0, 2 * len(key))) + key + bytes((2 * len(value),)) + value + b"\x00"
    record = bytes((2 * len(body),)) + body
    attributes = COMPRESSION_NONE | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
    try:
        header = HEADER_STRUCT.pack(
            base_offset,
            RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(record),
            partition_leader_epoch,
            CURRENT_MAGIC,
            0,  # crc, below
            attributes,
            0,  # lastOffsetDelta
            timestamp,  # baseTimestamp
            timestamp,  # maxTimestamp
            producer_id,
            producer_epoch,
            NO_SEQUENCE,
            1,  # recordsCount
        )
    except struct.error as e:
        raise ValueError(f"end transaction marker field out of range: {e}") from e
    batch = bytearray(header + record)
    struct.pack_into(">I", batch, CRC_OFFSET, _crc32c.crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def read_end_txn_marker(
    buf: bytes | bytearray | memoryview, header: RecordBatchHeader
) -> EndTransactionMarker | None:
    """The marker held by the control batch ``header`` describes in ``buf``; None for a
    control batch of another type (KRaft's) or one without records.

    Reads only the first record (a marker batch has one), decompressing when the batch is
    compressed (Kafka's coordinator never compresses them, but the format allows it).

    Raises:
        InvalidRecord: ``header`` is not a control batch, or its record is malformed.
        CorruptRecordError: the record bytes are truncated or undecompressable.
    """
    if not header.attributes & CONTROL_FLAG_MASK:
        raise InvalidRecord(f"batch at offset {header.base_offset} is not a control batch")
    if header.records_count < 1:
        return None
    start = header.position + RECORD_BATCH_OVERHEAD
    end = header.position + header.size_in_bytes
    data: bytes | bytearray | memoryview = memoryview(buf)[start:end]
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if codec != COMPRESSION_NONE:
        data = decompress(codec, data)
    pos = 0
    length, pos = decode_varint(data, pos)
    record_end = pos + length
    if length < 6 or record_end > len(data):
        raise InvalidRecord(f"control record of length {length} in {len(data)} bytes")
    pos += 1  # attributes
    _, pos = decode_varlong(data, pos)  # timestampDelta
    _, pos = decode_varint(data, pos)  # offsetDelta
    key_length, pos = decode_varint(data, pos)
    if key_length < 0 or pos + key_length > record_end:
        raise InvalidRecord(f"control record key length {key_length} is invalid")
    control_type = control_record_type(data[pos : pos + key_length])
    pos += key_length
    if control_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        return None
    value_length, pos = decode_varint(data, pos)
    if value_length < 0 or pos + value_length > record_end:
        raise InvalidRecord(f"end transaction marker value length {value_length} is invalid")
    return EndTransactionMarker(control_type, _decode_marker_value(data[pos : pos + value_length]))
