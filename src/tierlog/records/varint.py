"""Kafka's variable-length integers (``org.apache.kafka.common.utils.ByteUtils``), sans-IO.

Two encodings, both little-endian base-128 (LEB128: 7 payload bits per byte, the high bit
set on every byte but the last):

* **unsigned varint** - a uint32 in 1..5 bytes (flexible-version lengths, tagged fields);
* **varint / varlong** - a signed int32 / int64 first mapped by ZigZag
  (``0, -1, 1, -2, 2 ...`` -> ``0, 1, 2, 3, 4 ...``: ``(n << 1) ^ (n >> 31)``), so small
  negative numbers stay short; 1..5 bytes for int32, 1..10 bytes for int64.

Golden encodings (Kafka's ``ByteUtilsTest``)::

    0 -> 00    -1 -> 01    1 -> 02    63 -> 7e    -64 -> 7f    64 -> 80 01    300 -> d8 04

Decoders take ``(buf, pos)`` and return ``(value, new_pos)``. They raise
:class:`~tierlog.errors.CorruptRecordError` on a truncated buffer, on a fifth (int32) or
tenth (int64) byte that still has its continuation bit set (Kafka's "Varint is too long"),
and - stricter than Java, which silently wraps - on a last byte whose bits overflow 32/64 bits.

This is the pure-Python reference and the inner loop of record decoding: each decoder
returns from a one-byte fast path before any loop, and the two- to five-byte cases are
unrolled. ``default_records`` inlines the one-byte fast path again at its call sites.
"""

from __future__ import annotations

from tierlog.errors import CorruptRecordError

__all__ = [
    "append_unsigned_varint",
    "append_varint",
    "append_varlong",
    "decode_unsigned_varint",
    "decode_varint",
    "decode_varlong",
    "encode_unsigned_varint",
    "encode_varint",
    "encode_varlong",
    "size_of_unsigned_varint",
    "size_of_varint",
    "size_of_varlong",
    "zigzag_decode",
    "zigzag_encode32",
    "zigzag_encode64",
]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT32_MAX = 2**32 - 1
_UINT64_MAX = 2**64 - 1

# bytes objects for every one-byte encoding, so the common case allocates nothing.
_ONE_BYTE = tuple(bytes((i,)) for i in range(0x80))

Buffer = bytes | bytearray | memoryview


# --------------------------------------------------------------------------- zigzag


def zigzag_encode32(value: int) -> int:
    """ZigZag-map an int32 to a uint32 (``(n << 1) ^ (n >> 31)``)."""
    return (value << 1) ^ (value >> 31)


def zigzag_encode64(value: int) -> int:
    """ZigZag-map an int64 to a uint64 (``(n << 1) ^ (n >> 63)``)."""
    return (value << 1) ^ (value >> 63)


def zigzag_decode(value: int) -> int:
    """Inverse of ZigZag for both widths: ``(n >>> 1) ^ -(n & 1)``."""
    return (value >> 1) ^ -(value & 1)


# --------------------------------------------------------------------------- encoding


def _encode_unsigned(value: int) -> bytes:
    """LEB128 of a non-negative int, no range check."""
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_unsigned_varint(value: int) -> bytes:
    """Encode a uint32 as an unsigned varint (1..5 bytes).

    Raises:
        ValueError: ``value`` is outside ``[0, 2**32 - 1]``.
    """
    if not 0 <= value <= _UINT32_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _encode_unsigned(value)


def encode_varint(value: int) -> bytes:
    """Encode an int32 as a ZigZag varint (1..5 bytes).

    Raises:
        ValueError: ``value`` is outside the int32 range.
    """
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_unsigned((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Encode an int64 as a ZigZag varlong (1..10 bytes).

    Raises:
        ValueError: ``value`` is outside the int64 range.
    """
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_unsigned((value << 1) ^ (value >> 63))


def append_unsigned_varint(out: bytearray, value: int) -> None:
    """Append the unsigned varint of a uint32 to ``out`` (see :func:`encode_unsigned_varint`)."""
    if 0 <= value < 0x80:
        out.append(value)
    else:
        out += encode_unsigned_varint(value)


def append_varint(out: bytearray, value: int) -> None:
    """Append the ZigZag varint of an int32 to ``out`` (see :func:`encode_varint`)."""
    if -64 <= value < 64:
        out.append((value << 1) ^ (value >> 31))
    else:
        out += encode_varint(value)


def append_varlong(out: bytearray, value: int) -> None:
    """Append the ZigZag varlong of an int64 to ``out`` (see :func:`encode_varlong`)."""
    if -64 <= value < 64:
        out.append((value << 1) ^ (value >> 63))
    else:
        out += encode_varlong(value)


def _size_unsigned(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def size_of_unsigned_varint(value: int) -> int:
    """Bytes taken by the unsigned varint of ``value`` (a uint32)."""
    return _size_unsigned(value & _UINT32_MAX)


def size_of_varint(value: int) -> int:
    """Bytes taken by the ZigZag varint of ``value`` (an int32)."""
    return _size_unsigned(((value << 1) ^ (value >> 31)) & _UINT32_MAX)


def size_of_varlong(value: int) -> int:
    """Bytes taken by the ZigZag varlong of ``value`` (an int64)."""
    return _size_unsigned(((value << 1) ^ (value >> 63)) & _UINT64_MAX)


# --------------------------------------------------------------------------- decoding


def _truncated(pos: int) -> CorruptRecordError:
    return CorruptRecordError(f"varint at position {pos} is truncated")


def decode_unsigned_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read an unsigned varint (uint32) at ``pos``; return ``(value, new_pos)``.

    Raises:
        CorruptRecordError: truncated, longer than 5 bytes, or above ``2**32 - 1``.
    """
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        value = b & 0x7F
        b = buf[pos + 1]
        if b < 0x80:
            return value | (b << 7), pos + 2
        value |= (b & 0x7F) << 7
        b = buf[pos + 2]
        if b < 0x80:
            return value | (b << 14), pos + 3
        value |= (b & 0x7F) << 14
        b = buf[pos + 3]
        if b < 0x80:
            return value | (b << 21), pos + 4
        value |= (b & 0x7F) << 21
        b = buf[pos + 4]
    except IndexError:
        raise _truncated(pos) from None
    if b > 0x0F:
        # Only 4 bits remain of 32; a set high bit is Kafka's "Varint is too long".
        raise CorruptRecordError(
            f"varint at position {pos} is too long or overflows 32 bits (5th byte {b:#04x})"
        )
    return value | (b << 28), pos + 5


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read a ZigZag varint (int32) at ``pos``; return ``(value, new_pos)``.

    Raises:
        CorruptRecordError: truncated, longer than 5 bytes, or overflowing 32 bits.
    """
    try:
        b = buf[pos]
    except IndexError:
        raise _truncated(pos) from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    value, pos = decode_unsigned_varint(buf, pos)
    return (value >> 1) ^ -(value & 1), pos


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Read a ZigZag varlong (int64) at ``pos``; return ``(value, new_pos)``.

    Raises:
        CorruptRecordError: truncated, longer than 10 bytes, or overflowing 64 bits.
    """
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        value = b & 0x7F
        b = buf[pos + 1]
        if b < 0x80:
            value |= b << 7
            return (value >> 1) ^ -(value & 1), pos + 2
        value |= (b & 0x7F) << 7
        # Typical timestamp deltas are small; beyond two bytes a loop is fine.
        shift = 14
        i = pos + 2
        while True:
            b = buf[i]
            i += 1
            if b < 0x80:
                break
            if shift == 63:
                raise CorruptRecordError(f"varlong at position {pos} is longer than 10 bytes")
            value |= (b & 0x7F) << shift
            shift += 7
    except IndexError:
        raise _truncated(pos) from None
    if shift == 63 and b > 0x01:
        raise CorruptRecordError(f"varlong at position {pos} overflows 64 bits")
    value |= b << shift
    return (value >> 1) ^ -(value & 1), i
