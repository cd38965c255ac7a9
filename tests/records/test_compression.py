"""Codecs as Kafka clients write them: gzip, snappy (raw and xerial), lz4 frames, zstd."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.errors import CorruptRecordError, UnsupportedCompressionType
from tierlog.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    compress,
    compression_name,
    decompress,
)
from tierlog.records.compression import (
    MAX_EXPANSION,
    MIN_DECOMPRESSION_BOUND,
    XERIAL_MAGIC,
    decompression_bound,
)

from .strategies import FAST

ALL_CODECS = [
    COMPRESSION_NONE,
    COMPRESSION_GZIP,
    COMPRESSION_SNAPPY,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
]
# More than one 64 KiB lz4 block / 32 KiB xerial block, partly compressible.
BIG = (os.urandom(3000) + b"tierlog " * 1000) * 12


def xerial(data: bytes, block_size: int = 32 * 1024, version: int = 1) -> bytes:
    """snappy-java's SnappyOutputStream framing (what the Java client and kafka-python write)."""
    out = bytearray(XERIAL_MAGIC + struct.pack(">ii", version, 1))
    for i in range(0, len(data), block_size):
        block = bytes(cramjam.snappy.compress_raw(data[i : i + block_size]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("data", [b"", b"x", BIG])
def test_round_trip(codec: int, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(b"junk" + packed)[4:]) == data
    assert decompress(codec, bytearray(packed)) == data


@FAST
@given(st.sampled_from(ALL_CODECS), st.binary(max_size=2000))
def test_round_trip_property(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, bytearray(data))) == data


@FAST
@given(st.sampled_from(ALL_CODECS), st.binary(max_size=2000))
def test_bounded_round_trip_property(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data), bounded=True) == data


@pytest.mark.parametrize("codec", [COMPRESSION_GZIP, COMPRESSION_ZSTD])
def test_bounded_decompress_refuses_a_compression_bomb(codec: int) -> None:
    """50 MiB of zeros is a few KiB compressed: far past MAX_EXPANSION times its size. (LZ4
    and snappy cannot expand more than about 255x and 21x.)"""
    zeros = bytes(50 << 20)
    packed = compress(codec, zeros)
    assert decompression_bound(len(packed)) < len(zeros)
    with pytest.raises(CorruptRecordError, match="or decompress to more than"):
        decompress(codec, packed, bounded=True)
    assert decompress(codec, packed) == zeros  # unbounded (the Spark decoder) still reads it


@pytest.mark.parametrize("framing", ["raw", "xerial"])
def test_bounded_snappy_refuses_a_forged_length(framing: str) -> None:
    """Snappy expands at most about 21x, but a raw block declares its length up front: a
    forged 4 GiB one is refused before anything is allocated."""
    forged = b"\xff\xff\xff\xff\x0f" + b"\x00" * 64  # uvarint 2^32 - 1, then junk
    data = forged if framing == "raw" else XERIAL_MAGIC + bytes(8) + struct.pack(">i", 69) + forged
    with pytest.raises(CorruptRecordError, match="or decompress to more than"):
        decompress(COMPRESSION_SNAPPY, data, bounded=True)


def test_decompression_bound() -> None:
    assert decompression_bound(10) == MIN_DECOMPRESSION_BOUND
    assert decompression_bound(1 << 20) == MAX_EXPANSION << 20


def test_names() -> None:
    assert [compression_name(c) for c in ALL_CODECS] == ["none", "gzip", "snappy", "lz4", "zstd"]
    with pytest.raises(UnsupportedCompressionType):
        compression_name(5)


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionType):
        compress(codec, b"abc")
    with pytest.raises(UnsupportedCompressionType):
        decompress(codec, b"abc")


def test_gzip_is_a_standard_stream() -> None:
    assert gzip.decompress(compress(COMPRESSION_GZIP, BIG)) == BIG
    # Java's GZIPOutputStream / Python's gzip module output, with an mtime and a file name.
    assert decompress(COMPRESSION_GZIP, gzip.compress(BIG, mtime=1234)) == BIG


def test_snappy_writes_raw_and_reads_xerial() -> None:
    raw = compress(COMPRESSION_SNAPPY, BIG)
    assert not raw.startswith(XERIAL_MAGIC)
    assert bytes(cramjam.snappy.decompress_raw(raw)) == BIG
    framed = xerial(BIG)
    assert decompress(COMPRESSION_SNAPPY, framed) == BIG
    # Some producers (redpanda) write the version fields little-endian: ignored, as in Java.
    assert decompress(COMPRESSION_SNAPPY, xerial(BIG, version=0x01000000)) == BIG
    assert decompress(COMPRESSION_SNAPPY, xerial(b"")) == b""


@pytest.mark.parametrize("cut", [8, 15, 17, 19, 20, -1, -100])
def test_truncated_xerial(cut: int) -> None:
    framed = xerial(BIG)
    with pytest.raises(CorruptRecordError, match="snappy"):
        decompress(COMPRESSION_SNAPPY, framed[:cut])


def test_xerial_negative_block_length() -> None:
    framed = XERIAL_MAGIC + struct.pack(">iii", 1, 1, -5) + b"abcde"
    with pytest.raises(CorruptRecordError, match="length -5"):
        decompress(COMPRESSION_SNAPPY, framed)


def test_lz4_frame_is_kafkas() -> None:
    """What Kafka's Lz4BlockInputStream reads: independent 64 KiB blocks.

    Java writes no checksums; cramjam always adds block checksums, which Java (and every
    LZ4F decoder) verifies.
    """
    packed = compress(COMPRESSION_LZ4, BIG)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # frame magic
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 0b01  # version
    assert flg & 0x20  # block independence
    assert flg & 0x10  # block checksums: 4 bytes after each block
    assert not flg & 0x04  # no content checksum
    assert bd == 0x40  # 64 KiB blocks
    # Walk the blocks and decompress each on its own, as Java does.
    pos = 7 + (8 if flg & 0x08 else 0)
    out = bytearray()
    while True:
        (size,) = struct.unpack_from("<I", packed, pos)
        pos += 4
        if size == 0:
            break
        block, pos = packed[pos : pos + (size & 0x7FFFFFFF)], pos + (size & 0x7FFFFFFF) + 4
        if size & 0x80000000:
            out += block  # stored uncompressed
        else:
            dest = bytearray(65536)
            n = cramjam.lz4.decompress_block_into(block, dest)
            out += dest[:n]
    assert bytes(out) == BIG
    assert pos == len(packed)


def test_lz4_reads_linked_blocks_and_checksums() -> None:
    """librdkafka and lz4 defaults: a frame with a content checksum still decodes."""
    assert decompress(COMPRESSION_LZ4, bytes(cramjam.lz4.compress(BIG))) == BIG


def test_zstd_streaming_frame_without_content_size() -> None:
    """zstd-jni's ZstdOutputStream writes frames without a content size."""
    compressor = cramjam.zstd.Compressor()
    compressor.compress(BIG)
    frame = bytes(compressor.finish())
    assert decompress(COMPRESSION_ZSTD, frame) == BIG


@pytest.mark.parametrize(
    "codec", [COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
)
@pytest.mark.parametrize(
    "garbage", [b"", b"\x00", b"not compressed at all", bytes(range(256)), os.urandom(64)]
)
def test_garbage_raises_corrupt(codec: int, garbage: bytes) -> None:
    try:
        result = decompress(codec, garbage)
    except CorruptRecordError as exc:
        assert compression_name(codec) in str(exc)
    else:
        # Some codecs have valid empty / tiny streams (b"" for raw snappy is not one).
        assert isinstance(result, bytes)


@pytest.mark.parametrize(
    "codec", [COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
)
def test_truncated_stream_raises_corrupt(codec: int) -> None:
    packed = compress(codec, BIG)
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2])


@FAST
@given(st.sampled_from(ALL_CODECS[1:]), st.binary(max_size=300))
def test_random_input_never_escapes(codec: int, data: bytes) -> None:
    """Whatever the bytes, decompress returns bytes or raises CorruptRecordError."""
    try:
        assert isinstance(decompress(codec, data), bytes)
    except CorruptRecordError:
        pass
