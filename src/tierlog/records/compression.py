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

import mmap
import struct
from collections.abc import Callable
from typing import Any, Final

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
    "MAX_EXPANSION",
    "MIN_DECOMPRESSION_BOUND",
    "compress",
    "compression_name",
    "decompress",
    "decompression_bound",
    "XERIAL_MAGIC",
]

Buffer = bytes | bytearray | memoryview

#: Kafka's default levels (KIP-390): gzip = zlib's default, lz4 = the fast compressor, zstd 3.
_DEFAULT_GZIP_LEVEL = 6
_DEFAULT_ZSTD_LEVEL = 3

#: A bounded :func:`decompress` refuses more than this many times the compressed size...
MAX_EXPANSION: Final = 256
#: ...but always allows this much (small batches of very repetitive records).
MIN_DECOMPRESSION_BOUND: Final = 16 << 20

_DECOMPRESS: Final[dict[int, Callable[[Any], Any]]] = {
    COMPRESSION_GZIP: cramjam.gzip.decompress,
    COMPRESSION_SNAPPY: cramjam.snappy.decompress_raw,
    COMPRESSION_LZ4: cramjam.lz4.decompress,
    COMPRESSION_ZSTD: cramjam.zstd.decompress,
}
_DECOMPRESS_INTO: Final[dict[int, Callable[[Any, Any], int]]] = {
    COMPRESSION_GZIP: cramjam.gzip.decompress_into,
    COMPRESSION_SNAPPY: cramjam.snappy.decompress_raw_into,
    COMPRESSION_LZ4: cramjam.lz4.decompress_into,
    COMPRESSION_ZSTD: cramjam.zstd.decompress_into,
}

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


def decompression_bound(compressed_size: int) -> int:
    """The most a bounded :func:`decompress` of ``compressed_size`` bytes may produce:
    :data:`MAX_EXPANSION` times as much, and at least :data:`MIN_DECOMPRESSION_BOUND`."""
    return max(MIN_DECOMPRESSION_BOUND, MAX_EXPANSION * compressed_size)


def decompress(compression_type: int, data: Buffer, *, bounded: bool = False) -> bytes:
    """Decompress a records section written with codec ``compression_type``.

    ``bounded``: refuse output larger than :func:`decompression_bound` of the input, for the
    places where the broker itself decodes a client's batch (50 MiB of zeros are 1.6 KiB of
    zstd: without a bound, one small batch could exhaust the broker's memory). The output is
    written into a lazily mapped buffer of that size, so only what is produced is touched.

    Raises:
        UnsupportedCompressionType: unknown codec id.
        CorruptRecordError: the data is not a valid stream of that codec, or (``bounded``) it
            decompresses to more than the bound.
    """
    if not 0 <= compression_type < len(COMPRESSION_NAMES):
        raise UnsupportedCompressionType(f"unknown compression type id {compression_type}")
    name = COMPRESSION_NAMES[compression_type]
    if compression_type == COMPRESSION_NONE:
        return bytes(data)
    limit = decompression_bound(len(data)) if bounded else None
    try:
        if compression_type == COMPRESSION_SNAPPY and bytes(data[:8]) == XERIAL_MAGIC:
            return _xerial_decompress(data, limit)
        if limit is None:
            return bytes(_DECOMPRESS[compression_type](data))
        with mmap.mmap(-1, limit) as out:
            n = _DECOMPRESS_INTO[compression_type](data, out)
            return out[:n]
    except cramjam.DecompressionError as exc:
        bound = f" (or decompress to more than {limit} bytes)" if limit is not None else ""
        raise CorruptRecordError(f"{name} records do not decompress{bound}: {exc}") from None


def _xerial_decompress(data: Buffer, limit: int | None = None) -> bytes:
    """Decode snappy-java's block framing: a 16-byte header, then length-prefixed raw blocks;
    at most ``limit`` bytes in all when given.

    The version fields are not checked (kafka-python does not either: some producers write
    them little-endian).
    """
    view = memoryview(data)
    end = len(view)
    if end < _XERIAL_HEADER_SIZE:
        raise CorruptRecordError(f"xerial snappy stream of {end} bytes has a truncated header")
    pos = _XERIAL_HEADER_SIZE
    blocks: list[bytes] = []
    produced = 0
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"xerial snappy block length at {pos} is truncated")
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(
                f"xerial snappy block at {pos} has length {length}, {end - pos} bytes remain"
            )
        block = view[pos : pos + length]
        if limit is None:
            blocks.append(bytes(cramjam.snappy.decompress_raw(block)))
        else:
            with mmap.mmap(-1, max(1, limit - produced)) as out:
                blocks.append(out[: cramjam.snappy.decompress_raw_into(block, out)])
            produced += len(blocks[-1])
        pos += length
    return b"".join(blocks)
