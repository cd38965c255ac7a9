"""Record-batch compression codecs, byte-compatible with what Kafka clients write (sans-IO).

The compression type is bits 0-2 of a batch's attributes; the whole records section
(everything after the 61-byte header) is compressed as one stream. All codecs go through
``cramjam``.

======  ==  =====================================================================
codec   id  wire format
======  ==  =====================================================================
none    0   records as is
gzip    1   a standard gzip stream (Java's ``GZIPOutputStream``); default level 6
snappy  2   *write*: raw snappy (librdkafka; every client reads it - snappy-java's
            ``SnappyInputStream`` falls back to raw when the xerial magic is absent).
            *read*: raw snappy, or the xerial block framing that snappy-java's
            ``SnappyOutputStream`` (the Java client), kafka-python and aiokafka write:
            ``\\x82SNAPPY\\x00`` + int32 version + int32 compat, then blocks of
            [int32 big-endian length][raw snappy]
lz4     3   the LZ4 *frame* format that Kafka's ``Lz4BlockInputStream`` reads: 64 KiB
            independent blocks (Java decompresses each block on its own, so linked blocks
            would not decode), no content checksum, fast compressor - as Java's
            ``Lz4BlockOutputStream`` writes, except that cramjam always adds the optional
            per-block xxhash32 checksums, which Java and LZ4F readers verify
zstd    4   a zstd frame; default level 3 (KIP-390)
======  ==  =====================================================================

Errors: an unknown codec id raises :class:`~tierlog.errors.UnsupportedCompressionType`; data
that does not decompress raises :class:`~tierlog.errors.CorruptRecordError`.
"""

from __future__ import annotations

import struct

import cramjam

from tierlog.errors import CorruptRecordError, UnsupportedCompressionType
from tierlog.records.record_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)

__all__ = [
    "compress",
    "compression_name",
    "decompress",
    "XERIAL_MAGIC",
]

Buffer = bytes | bytearray | memoryview

#: Kafka's default levels (KIP-390): gzip = zlib's default, lz4 = the fast compressor, zstd 3.
_DEFAULT_GZIP_LEVEL = 6
_DEFAULT_ZSTD_LEVEL = 3

#: The first 8 bytes of snappy-java's stream header (marker -126, "SNAPPY", NUL).
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic, int32 version, int32 min compatible version
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")


def compression_name(compression_type: int) -> str:
    """Kafka's name of a compression type id (``"none"``, ``"gzip"`` ...).

    Raises:
        UnsupportedCompressionType: unknown id.
    """
    if not 0 <= compression_type < len(COMPRESSION_NAMES):
        raise UnsupportedCompressionType(f"unknown compression type id {compression_type}")
    return COMPRESSION_NAMES[compression_type]


def compress(compression_type: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress a records section with the codec ``compression_type`` (0 returns ``data``).

    ``level`` is the codec's own level; None picks Kafka's default.

    Raises:
        UnsupportedCompressionType: unknown codec id.
    """
    if compression_type == COMPRESSION_NONE:
        return bytes(data)
    if compression_type == COMPRESSION_GZIP:
        return bytes(
            cramjam.gzip.compress(data, level=_DEFAULT_GZIP_LEVEL if level is None else level)
        )
    if compression_type == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if compression_type == COMPRESSION_LZ4:
        # cramjam.lz4.compress() links blocks and adds a content checksum: not Kafka's format.
        compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        # The streaming Compressor accepts only bytes.
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    if compression_type == COMPRESSION_ZSTD:
        return bytes(
            cramjam.zstd.compress(data, level=_DEFAULT_ZSTD_LEVEL if level is None else level)
        )
    raise UnsupportedCompressionType(f"unknown compression type id {compression_type}")


def decompress(compression_type: int, data: Buffer) -> bytes:
    """Decompress a records section written with codec ``compression_type``.

    Raises:
        UnsupportedCompressionType: unknown codec id.
        CorruptRecordError: the data is not a valid stream of that codec.
    """
    try:
        if compression_type == COMPRESSION_NONE:
            return bytes(data)
        if compression_type == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if compression_type == COMPRESSION_SNAPPY:
            if bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
                return _xerial_decompress(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if compression_type == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if compression_type == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(
            f"{COMPRESSION_NAMES[compression_type]} records do not decompress: {exc}"
        ) from None
    raise UnsupportedCompressionType(f"unknown compression type id {compression_type}")


def _xerial_decompress(data: Buffer) -> bytes:
    """Decode snappy-java's block framing: a 16-byte header, then length-prefixed raw blocks.

    The version fields are not checked (kafka-python does not either: some producers write
    them little-endian).
    """
    view = memoryview(data)
    end = len(view)
    if end < _XERIAL_HEADER_SIZE:
        raise CorruptRecordError(f"xerial snappy stream of {end} bytes has a truncated header")
    pos = _XERIAL_HEADER_SIZE
    blocks: list[bytes] = []
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"xerial snappy block length at {pos} is truncated")
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(
                f"xerial snappy block at {pos} has length {length}, {end - pos} bytes remain"
            )
        blocks.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(blocks)
