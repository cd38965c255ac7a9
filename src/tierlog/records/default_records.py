"""Records inside a magic-2 batch: build and decode them (Kafka's ``DefaultRecord``), sans-IO.

The 61-byte batch header is :mod:`tierlog.records.record_batch`'s business; this module owns
what follows it. Kafka's schema (``DefaultRecord.java``)::

    Record =>
      length: varint            bytes of the record after this field
      attributes: int8          unused, always 0
      timestampDelta: varlong   timestamp - batch baseTimestamp
      offsetDelta: varint       offset - batch baseOffset
      keyLength: varint         -1 for a null key
      key: byte[keyLength]
      valueLength: varint       -1 for a null value
      value: byte[valueLength]
      headerCount: varint       >= 0
      Header =>
        headerKeyLength: varint >= 0
        headerKey: String       UTF-8
        headerValueLength: varint   -1 for a null value
        headerValue: byte[headerValueLength]

When the batch is compressed the whole run of records is one compressed stream.

A record's offset is ``baseOffset + offsetDelta``; its timestamp is ``baseTimestamp +
timestampDelta``, except in a LogAppendTime batch, where every record takes the batch's
maxTimestamp. Control batches (transaction markers) decode like any other: key and value are
raw bytes, see :func:`control_record_type`.

Errors, following Kafka's split: bytes that cannot be parsed (truncated, a length that runs
past its record or batch, a bad CRC, undecompressable data) raise
:class:`~tierlog.errors.CorruptRecordError`; well-formed bytes that contradict themselves
(record count, record length, bytes left over, negative header counts) raise
:class:`~tierlog.errors.InvalidRecord`.

This is the pure-Python reference implementation. The decoder inlines the one-byte case of
every varint (nearly all of them in practice) and only calls :mod:`.varint` for longer ones.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import crc32c as _crc32c

from tierlog.errors import CorruptRecordError, InvalidRecord, UnsupportedCompressionType
from tierlog.records.compression import compress, decompress

# Control records live in their own module; re-exported here for existing importers.
from tierlog.records.control_records import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    control_record_type,
    end_transaction_marker,
)
from tierlog.records.record_batch import (
    COMPRESSION_CODEC_MASK,
    COMPRESSION_NAMES,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CRC_START,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatchHeader,
    iter_headers,
    read_header,
    validate_batch,
)
from tierlog.records.varint import _encode_unsigned as _uvarint
from tierlog.records.varint import append_varint, decode_varint, decode_varlong

__all__ = [
    "Header",
    "Record",
    "RecordBatchBuilder",
    "build_batch",
    "build_empty_batch",
    "decode_records",
    "iter_records",
    "read_records",
    "CONTROL_TYPE_ABORT",
    "CONTROL_TYPE_COMMIT",
    "control_record_type",
    "end_transaction_marker",
]

Buffer = bytes | bytearray | memoryview
#: One record header: a UTF-8 key and a nullable value.
Header = tuple[str, bytes | None]

_RecordTuple = (
    tuple[int, bytes | None, bytes | None]
    | tuple[int, bytes | None, bytes | None, Sequence[Header]]
)

_NO_HEADERS: tuple[Header, ...] = ()
# attributes + timestampDelta + offsetDelta + keyLength + valueLength + headerCount, 1 byte each
_MIN_RECORD_BODY = 6
_INT32_MAX = 2**31 - 1
_UINT64_MAX = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record. Immutable value; ``offset`` and ``timestamp`` are absolute.

    ``headers`` is a tuple of ``(key, value)`` pairs in wire order (keys may repeat).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


# A frozen dataclass's __init__ goes through object.__setattr__ once per field, which made
# Record creation ~30% of decoding. The decoder fills the slots through their descriptors
# instead (as object.__setattr__ does underneath, minus the name lookups): the same object,
# about 250 ns cheaper per record. Tests check it equals Record(...).
_RECORD_SLOT_SETTERS: tuple[Callable[[Record, Any], None], ...] = tuple(
    Record.__dict__[field.name].__set__ for field in fields(Record)
)
assert len(_RECORD_SLOT_SETTERS) == 5


# --------------------------------------------------------------------------- building


class RecordBatchBuilder:
    """Accumulates records and writes one complete magic-2 batch with a valid CRC-32C.

    Offset deltas count up from 0 unless given; the first record's timestamp becomes
    baseTimestamp, except with ``delete_horizon_ms`` (KIP-534: the log cleaner marks a batch
    holding tombstones with the time after which they may be removed), which sets the
    hasDeleteHorizonMs attribute and becomes baseTimestamp itself; record timestamps stay
    exact (their deltas are relative to it, negative ones too). Not thread-safe; :meth:`build`
    may be called repeatedly (it is pure).
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_base_timestamp",
        "_buf",
        "_compression_type",
        "_count",
        "_fixed_base_timestamp",
        "_last_offset_delta",
        "_max_timestamp",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
    )

    def __init__(
        self,
        compression_type: int = 0,
        *,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        timestamp_type: int = 0,
        delete_horizon_ms: int = -1,
    ) -> None:
        """Raises:
        UnsupportedCompressionType: unknown ``compression_type``.
        ValueError: ``timestamp_type`` is not 0 (CreateTime) or 1 (LogAppendTime).
        """
        if not 0 <= compression_type < len(COMPRESSION_NAMES):
            raise UnsupportedCompressionType(f"unknown compression type id {compression_type}")
        if timestamp_type not in (0, 1):
            raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type}")
        attributes = compression_type
        if timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if is_transactional:
            attributes |= TRANSACTIONAL_FLAG_MASK
        if is_control:
            attributes |= CONTROL_FLAG_MASK
        if delete_horizon_ms >= 0:
            attributes |= DELETE_HORIZON_FLAG_MASK
        self._attributes = attributes
        self._compression_type = compression_type
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._buf = bytearray()
        self._count = 0
        self._last_offset_delta = -1
        self._fixed_base_timestamp = delete_horizon_ms >= 0
        self._base_timestamp = delete_horizon_ms if delete_horizon_ms >= 0 else 0
        self._max_timestamp = -1

    def __len__(self) -> int:
        """Number of records appended so far."""
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Size the batch would have uncompressed: header plus the records written so far."""
        return RECORD_BATCH_OVERHEAD + len(self._buf)

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
        *,
        offset_delta: int | None = None,
    ) -> int:
        """Append one record and return its absolute offset.

        ``offset_delta`` defaults to one past the previous record's; an explicit one must
        still increase (compacted batches have gaps).

        Raises:
            ValueError: a decreasing ``offset_delta``, or a value out of its wire range.
            UnicodeEncodeError: a header key that is not encodable as UTF-8.
        """
        if offset_delta is None:
            offset_delta = self._last_offset_delta + 1
        elif offset_delta <= self._last_offset_delta:
            raise ValueError(
                f"offset_delta {offset_delta} does not follow {self._last_offset_delta}"
            )
        if self._count == 0:
            if not self._fixed_base_timestamp:
                self._base_timestamp = timestamp
            self._max_timestamp = timestamp
        elif timestamp > self._max_timestamp:
            self._max_timestamp = timestamp

        # Kafka's DefaultRecord.writeTo: the size of the body leads, so compute it first.
        timestamp_delta = timestamp - self._base_timestamp
        zigzag_timestamp = (timestamp_delta << 1) ^ (timestamp_delta >> 63)
        if zigzag_timestamp > _UINT64_MAX:
            raise ValueError(f"timestamp delta {timestamp_delta} is out of int64 range")
        if offset_delta > _INT32_MAX:
            raise ValueError(f"offset delta {offset_delta} is out of int32 range")
        if key is None:
            key, key_length = b"", b"\x01"  # varint(-1): null
        else:
            key_length = _uvarint(len(key) << 1)  # ZigZag of n >= 0 is 2n
        if value is None:
            value, value_length = b"", b"\x01"
        else:
            value_length = _uvarint(len(value) << 1)
        encoded_headers = _encode_headers(headers) if headers else b"\x00"
        head = b"\x00" + _uvarint(zigzag_timestamp) + _uvarint(offset_delta << 1) + key_length
        size = len(head) + len(key) + len(value_length) + len(value) + len(encoded_headers)

        buf = self._buf
        buf += _uvarint(size << 1)
        buf += head  # attributes, timestampDelta, offsetDelta, keyLength
        buf += key
        buf += value_length
        buf += value
        buf += encoded_headers  # headerCount, headers
        self._count += 1
        self._last_offset_delta = offset_delta
        return self._base_offset + offset_delta

    def override_last_offset(self, last_offset: int) -> None:
        """Make the batch end at ``last_offset`` even when its last record is earlier (Kafka's
        ``overrideLastOffset``): a cleaned batch keeps its original lastOffsetDelta, so the
        producer's last sequence survives compaction.

        Raises:
            ValueError: ``last_offset`` is before the last record's offset.
        """
        delta = last_offset - self._base_offset
        if delta < self._last_offset_delta or delta > _INT32_MAX:
            raise ValueError(f"last offset {last_offset} is before the last record or out of range")
        self._last_offset_delta = delta

    def build(self) -> bytes:
        """The complete batch: header, (compressed) records, CRC-32C over bytes 21..end.

        Raises:
            ValueError: no record was appended, or a header field is out of its wire range.
        """
        if self._count == 0:
            raise ValueError("cannot build a record batch without records")
        payload = compress(self._compression_type, self._buf)
        try:
            header = HEADER_STRUCT.pack(
                self._base_offset,
                RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),  # batchLength
                self._partition_leader_epoch,
                CURRENT_MAGIC,
                0,  # crc, computed below over the bytes that follow it
                self._attributes,
                self._last_offset_delta,
                self._base_timestamp,
                self._max_timestamp,
                self._producer_id,
                self._producer_epoch,
                self._base_sequence,
                self._count,
            )
        except struct.error as exc:
            raise ValueError(f"record batch header field out of range: {exc}") from None
        crc = _crc32c.crc32c(payload, value=_crc32c.crc32c(header[CRC_START:]))
        return b"".join((header[:CRC_OFFSET], crc.to_bytes(4, "big"), header[CRC_START:], payload))


def _encode_headers(headers: Sequence[Header]) -> bytes:
    """headerCount and the headers of one record."""
    out = bytearray()
    append_varint(out, len(headers))
    for h_key, h_value in headers:
        raw_key = h_key.encode()
        append_varint(out, len(raw_key))
        out += raw_key
        if h_value is None:
            out.append(1)
        else:
            append_varint(out, len(h_value))
            out += h_value
    return bytes(out)


def build_batch(
    records: Iterable[Record | _RecordTuple],
    compression_type: int = 0,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
) -> bytes:
    """Build one batch in one call; the keywords are :class:`RecordBatchBuilder`'s.

    Each item is a :class:`Record` (its offset minus ``base_offset`` becomes the offset delta,
    so decoded records rebuild the same batch) or a ``(timestamp, key, value)`` /
    ``(timestamp, key, value, headers)`` tuple (offset deltas 0, 1, 2 ...).

    Raises:
        ValueError: no records, or a field out of range (see :meth:`RecordBatchBuilder.append`).
        UnsupportedCompressionType: unknown ``compression_type``.
    """
    builder = RecordBatchBuilder(
        compression_type,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        timestamp_type=timestamp_type,
    )
    for item in records:
        if isinstance(item, Record):
            builder.append(
                item.timestamp,
                item.key,
                item.value,
                item.headers,
                offset_delta=item.offset - base_offset,
            )
        else:
            builder.append(*item)
    return builder.build()


def build_empty_batch(
    *,
    base_offset: int,
    last_offset: int,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    max_timestamp: int,
    timestamp_type: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """A batch with a header and no records (Kafka's ``DefaultRecordBatch.writeEmptyHeader``).

    The log cleaner leaves one where it removed every record of a producer's last batch: the
    offsets, producer id, epoch and sequence range survive, so the producer's state is rebuilt
    the same after a restart. Uncompressed, baseTimestamp -1, recordsCount 0.

    Raises:
        ValueError: ``last_offset`` below ``base_offset`` or a field out of its wire range.
    """
    if last_offset < base_offset:
        raise ValueError(f"last offset {last_offset} is below base offset {base_offset}")
    attributes = 0
    if timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    try:
        header = HEADER_STRUCT.pack(
            base_offset,
            RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
            partition_leader_epoch,
            CURRENT_MAGIC,
            0,
            attributes,
            last_offset - base_offset,
            -1,  # baseTimestamp
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            0,  # recordsCount
        )
    except struct.error as exc:
        raise ValueError(f"record batch header field out of range: {exc}") from None
    crc = _crc32c.crc32c(header[CRC_START:])
    return b"".join((header[:CRC_OFFSET], crc.to_bytes(4, "big"), header[CRC_START:]))


# --------------------------------------------------------------------------- decoding


def read_records(buf: Buffer, header: RecordBatchHeader, *, bounded: bool = False) -> list[Record]:
    """Decode the records of the batch ``header`` describes (header already validated).

    Use after :func:`~tierlog.records.record_batch.validate_batch` or ``iter_headers``.
    ``bounded``: cap the decompressed size (see :func:`~.compression.decompress`); the broker
    decodes clients' batches only this way.

    Raises:
        CorruptRecordError: records that cannot be parsed or decompressed.
        InvalidRecord: records that contradict the header or themselves.
        UnsupportedCompressionType: unknown codec in the attributes.
    """
    start = header.position + RECORD_BATCH_OVERHEAD
    end = header.position + header.size_in_bytes
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if start == end:
        # No records section at all: an empty batch, as compaction leaves behind to keep a
        # producer's state. Its codec bits are irrelevant.
        return _decode(b"", 0, 0, header)
    if codec:
        data = decompress(codec, memoryview(buf)[start:end], bounded=bounded)
        pos, end = 0, len(data)
    elif isinstance(buf, bytes):
        data, pos = buf, start  # decode in place: no copy of the batch
    else:
        # Indexing bytes is the fastest; one memcpy is cheap next to the per-record work.
        data, pos = bytes(memoryview(buf)[start:end]), 0
        end -= start
    return _decode(data, pos, end, header)


def _decode(data: bytes, pos: int, end: int, header: RecordBatchHeader) -> list[Record]:
    """The inner loop: ``header.records_count`` records from ``data[pos:end]``, exactly."""
    count = header.records_count
    if count < 0:
        raise InvalidRecord(f"record batch at {header.position} has records count {count}")
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.attributes & TIMESTAMP_TYPE_MASK
    max_timestamp = header.max_timestamp
    records: list[Record] = []
    append = records.append
    new_record = object.__new__
    set_offset, set_timestamp, set_key, set_value, set_headers = _RECORD_SLOT_SETTERS
    i = 0  # bound for the error messages below
    try:
        for i in range(count):
            if pos >= end:
                raise InvalidRecord(
                    f"record batch at {header.position} declares {count} records "
                    f"but its data ends after {i}"
                )
            # length: varint
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = decode_varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_BODY or record_end > end:
                raise CorruptRecordError(
                    f"record {i} of batch at {header.position} has length {length}, "
                    f"{end - pos} bytes remain"
                )
            # attributes: int8 (unused)
            pos += 1
            # timestampDelta: varlong
            b = data[pos]
            if b < 0x80:
                timestamp_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                timestamp_delta, pos = decode_varlong(data, pos)
            # offsetDelta: varint
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = decode_varint(data, pos)
            # keyLength: varint, key
            b = data[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                size, pos = decode_varint(data, pos)
            if size < 0:
                key = None
            else:
                field_end = pos + size
                if field_end > record_end:
                    raise CorruptRecordError(
                        f"key of {size} bytes runs past record {i} of batch at {header.position}"
                    )
                key = data[pos:field_end]
                pos = field_end
            # valueLength: varint, value
            b = data[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                size, pos = decode_varint(data, pos)
            if size < 0:
                value = None
            else:
                field_end = pos + size
                if field_end > record_end:
                    raise CorruptRecordError(
                        f"value of {size} bytes runs past record {i} of batch at {header.position}"
                    )
                value = data[pos:field_end]
                pos = field_end
            # headerCount: varint, headers
            b = data[pos]
            if b == 0:
                headers = _NO_HEADERS
                pos += 1
            else:
                headers, pos = _decode_headers(data, pos, record_end)
            if pos != record_end:
                raise InvalidRecord(
                    f"invalid record size: record {i} of batch at {header.position} "
                    f"declares {length} bytes but {length + pos - record_end} were read"
                )
            # Record(offset, timestamp, key, value, headers), minus the frozen __init__.
            record = new_record(Record)
            set_offset(record, base_offset + offset_delta)
            set_timestamp(
                record, max_timestamp if log_append_time else base_timestamp + timestamp_delta
            )
            set_key(record, key)
            set_value(record, value)
            set_headers(record, headers)
            append(record)
    except IndexError:
        raise CorruptRecordError(f"record {i} of batch at {header.position} is truncated") from None
    if pos != end:
        raise InvalidRecord(
            f"record batch at {header.position} has {end - pos} bytes after its {count} records"
        )
    return records


def _decode_headers(data: bytes, pos: int, record_end: int) -> tuple[tuple[Header, ...], int]:
    """headerCount and the headers of one record (the rare path: most records have none)."""
    count, pos = decode_varint(data, pos)
    # Each header takes at least 2 bytes: bounds the loop on garbage counts.
    if count < 0 or count * 2 > record_end - pos:
        raise InvalidRecord(f"found invalid number of record headers {count}")
    headers = []
    for _ in range(count):
        size, pos = decode_varint(data, pos)
        if size < 0 or pos + size > record_end:
            raise InvalidRecord(f"invalid header key size {size}")
        # Java decodes with replacement characters rather than failing; so do we.
        h_key = data[pos : pos + size].decode("utf-8", "replace")
        pos += size
        size, pos = decode_varint(data, pos)
        if size < 0:
            h_value = None
        else:
            if pos + size > record_end:
                raise CorruptRecordError(f"header value of {size} bytes runs past its record")
            h_value = data[pos : pos + size]
            pos += size
        headers.append((h_key, h_value))
    return tuple(headers), pos


def decode_records(batch: Buffer, position: int = 0, *, check_crc: bool = True) -> list[Record]:
    """Validate the batch at ``position`` and decode (decompressing) all its records.

    ``check_crc=False`` skips the CRC-32C (for bytes validated once already) but still
    checks the header's magic and bounds.

    Raises:
        CorruptRecordError: truncated batch, wrong magic, CRC mismatch, unparseable records.
        InvalidRecord: records inconsistent with the header or with themselves.
        UnsupportedCompressionType: unknown codec in the attributes.
    """
    if check_crc:
        header = validate_batch(batch, position)
    else:
        header = read_header(batch, position)
        if header.magic != CURRENT_MAGIC:
            raise CorruptRecordError(
                f"record batch at position {position} has magic {header.magic}, expected 2"
            )
        if position + header.size_in_bytes > len(batch):
            raise CorruptRecordError(
                f"record batch at position {position} is truncated: size "
                f"{header.size_in_bytes}, {len(batch) - position} bytes available"
            )
    return read_records(batch, header)


def iter_records(
    buf: Buffer, start: int = 0, end: int | None = None, *, check_crc: bool = True
) -> Iterator[tuple[RecordBatchHeader, list[Record]]]:
    """``(header, records)`` for each complete batch in ``buf[start:end]``.

    A trailing partial batch ends the iteration silently (see ``iter_headers``); a complete
    batch that fails validation raises.

    Raises:
        CorruptRecordError, InvalidRecord, UnsupportedCompressionType: as :func:`decode_records`.
    """
    for header in iter_headers(buf, start, end):
        if check_crc:
            header = validate_batch(buf, header.position)
        elif header.magic != CURRENT_MAGIC:
            raise CorruptRecordError(
                f"record batch at position {header.position} has magic {header.magic}, expected 2"
            )
        yield header, read_records(buf, header)
