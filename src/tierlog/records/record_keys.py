"""The log cleaner's view of a batch: each record's offset, key and whether it has a value,
without decoding values, timestamps or headers (Kafka's cleaner reads only ``record.key()``
and ``record.hasValue()`` to decide what stays). Sans-IO, like the rest of :mod:`tierlog.records`.

The record schema is :mod:`.default_records`'; only length, offsetDelta, keyLength, key and the
first byte of valueLength are read. :func:`read_keys_py` is the pure-Python reference;
:func:`read_keys` uses the compiled twin of its record loop (``_speedups/_keys.c``) when it is
built, chosen once at import (``TIERLOG_NO_EXTENSIONS=1`` forces the reference). Errors follow
the decoder's split: :class:`~tierlog.errors.CorruptRecordError` for bytes that cannot be
parsed, :class:`~tierlog.errors.InvalidRecord` for counts the data contradicts.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tierlog.errors import CorruptRecordError, InvalidRecord
from tierlog.records.compression import decompress
from tierlog.records.record_batch import (
    COMPRESSION_CODEC_MASK,
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
)
from tierlog.records.varint import decode_varint

__all__ = [
    "HAS_KEYS_SPEEDUPS",
    "read_keys",
    "read_keys_py",
    "read_section_keys",
    "read_section_keys_py",
    "records_section",
]

Buffer = bytes | bytearray | memoryview
# attributes + timestampDelta + offsetDelta + keyLength + valueLength + headerCount, 1 byte each
_MIN_RECORD_BODY = 6

# The C twin of read_keys' record loop, chosen once here: TIERLOG_NO_EXTENSIONS=1 or a
# missing build means the pure-Python reference (read_keys_py).
_read_keys_c: Callable[..., tuple[list[int], list[bytes | None], list[bool]]] | None
try:
    if os.environ.get("TIERLOG_NO_EXTENSIONS", "") == "1":
        raise ImportError("TIERLOG_NO_EXTENSIONS=1")
    from tierlog.records._speedups._keys import read_keys as _read_keys_c
except ImportError:  # pragma: no cover - depends on the build
    _read_keys_c = None

#: Whether :func:`read_keys` uses the compiled record loop.
HAS_KEYS_SPEEDUPS = _read_keys_c is not None


def read_keys(
    buf: Buffer, header: RecordBatchHeader, *, bounded: bool = False
) -> tuple[list[int], list[bytes | None], list[bool]]:
    """The offsets, keys and "has a value" flags of the records of one batch (see
    :func:`read_keys_py`), through the compiled twin of its record loop when it is built."""
    if _read_keys_c is None:
        return read_keys_py(buf, header, bounded=bounded)
    data, pos, end = records_section(buf, header, bounded)
    return _read_keys_c(data, pos, end, header.records_count, header.base_offset, header.position)


def read_section_keys(
    data: bytes, pos: int, end: int, count: int, base_offset: int, position: int
) -> tuple[list[int], list[bytes | None], list[bool]]:
    """:func:`read_section_keys_py` through the compiled record loop when it is built."""
    if _read_keys_c is None:
        return read_section_keys_py(data, pos, end, count, base_offset, position)
    return _read_keys_c(data, pos, end, count, base_offset, position)


def records_section(
    buf: Buffer, header: RecordBatchHeader, bounded: bool
) -> tuple[bytes, int, int]:
    """(bytes, start, end) of the batch's records, decompressed when needed."""
    start = header.position + RECORD_BATCH_OVERHEAD
    end = header.position + header.size_in_bytes
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if start == end:
        return b"", 0, 0
    if codec:
        data = decompress(codec, memoryview(buf)[start:end], bounded=bounded)
        return data, 0, len(data)
    if isinstance(buf, bytes):
        return buf, start, end
    return bytes(memoryview(buf)[start:end]), 0, end - start


def read_keys_py(
    buf: Buffer, header: RecordBatchHeader, *, bounded: bool = False
) -> tuple[list[int], list[bytes | None], list[bool]]:
    """The offsets, keys and "has a value" flags of the records of one batch, without
    decoding values, timestamps or headers: what the log cleaner needs (Kafka's cleaner reads
    only ``record.key()`` and ``record.hasValue()`` to decide). Each record's own length
    bounds it; the fields read must stay inside it.

    Raises:
        CorruptRecordError: records that cannot be parsed or decompressed.
        InvalidRecord: a record count the data contradicts.
        UnsupportedCompressionType: unknown codec in the attributes.
    """
    data, pos, end = records_section(buf, header, bounded)
    return read_section_keys_py(
        data, pos, end, header.records_count, header.base_offset, header.position
    )


def read_section_keys_py(
    data: bytes, pos: int, end: int, count: int, base_offset: int, position: int
) -> tuple[list[int], list[bytes | None], list[bool]]:
    """:func:`read_keys_py` on a records section (``data[pos:end]``, decompressed, as
    :func:`records_section` gives it) of ``count`` records from ``base_offset``, of the
    batch at byte ``position`` (for error messages).

    Raises:
        CorruptRecordError: records that cannot be parsed.
        InvalidRecord: a record count the data contradicts.
    """
    offsets: list[int] = []
    keys: list[bytes | None] = []
    has_values: list[bool] = []
    i = 0
    try:
        for i in range(count):
            if pos >= end:
                raise InvalidRecord(
                    f"record batch at {position} declares {count} records "
                    f"but its data ends after {i}"
                )
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = decode_varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_BODY or record_end > end:
                raise CorruptRecordError(
                    f"record {i} of batch at {position} has length {length}, "
                    f"{end - pos} bytes remain"
                )
            pos += 1  # attributes
            while data[pos] >= 0x80:  # timestampDelta: varlong, skipped
                pos += 1
            pos += 1
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = decode_varint(data, pos)
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
                        f"key of {size} bytes runs past record {i} of batch at {position}"
                    )
                key = data[pos:field_end]
                pos = field_end
            b = data[pos]
            if pos >= record_end:
                raise CorruptRecordError(f"record {i} of batch at {position} is truncated")
            offsets.append(base_offset + offset_delta)
            keys.append(key)
            # valueLength is -1 (ZigZag 0x01) for a null value
            has_values.append(b != 1)
            pos = record_end
    except IndexError:
        raise CorruptRecordError(f"record {i} of batch at {position} is truncated") from None
    if pos != end:
        raise InvalidRecord(
            f"record batch at {position} has {end - pos} bytes after its {count} records"
        )
    return offsets, keys, has_values
