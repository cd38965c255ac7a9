"""Names and formats of a remote segment's two objects (sans-IO).

Object names under the storage root (architecture.md)::

    <topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.log       segment data
    <topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.indexes   all indexes

Ids are Kafka's UUID strings (URL-safe base64, no padding), as Kafka's tools print them.

The ``.indexes`` object (big-endian) — everything seed 001 wants from ONE GET::

    magic       4   b"TLIX"
    version     u16 = 1
    flags       u16   bit 0: the .log object's chunks are zstd-compressed (see below)
                      bit 1: the .log object's chunks are AES-256-GCM encrypted
                             (:mod:`object_encryption`; this whole object is then
                             the body of an encrypted envelope)
    count       u16   number of sections
    toc         count x (type u8, offset u64 from the object start, length u64, crc32c u32)
    toc crc     u32   CRC-32C of all bytes above
    sections    type 0-4 = IndexType (offset, time, producer snapshot, transaction,
                leader-epoch checkpoint; a missing transaction index has no section),
                type 16 = chunk index of a compressed .log object

Chunked compression (``rsm.config.compression=zstd``): segments whose record batches are
all uncompressed are cut into ``chunk_size`` pieces of the original bytes, each compressed with
zstd on its own, and concatenated; the chunk index section holds ``original size u64,
chunk size u32, count u32, count x compressed length u32``. A ranged read of original bytes
[a, b] maps to chunks a // chunk_size .. b // chunk_size, i.e. one contiguous byte range of the
object: still ONE ranged GET (like Aiven's plugin, whose chunk index lives in a manifest).
Segments holding compressed batches are stored as they are: compressing them again gains
nothing. Encryption (``rsm.config.encryption.enabled``) always chunks, compressed or not: each
chunk is then the encrypted (possibly compressed) piece, still one contiguous range per read.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Mapping
from dataclasses import dataclass

import crc32c

from tierlog.errors import CorruptRemoteDataError, RemoteStorageError
from tierlog.records.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
)
from tierlog.tiered.remote_log_segment_metadata import RemoteLogSegmentMetadata, kafka_uuid_str
from tierlog.tiered.storage.remote_storage_manager import IndexType

LOG_SUFFIX = ".log"
INDEXES_SUFFIX = ".indexes"

INDEXES_MAGIC = b"TLIX"
INDEXES_VERSION = 1
FLAG_ZSTD_CHUNKED = 0x01
FLAG_ENCRYPTED_CHUNKS = 0x02
SECTION_CHUNK_INDEX = 16

_HEAD = struct.Struct(">4sHHH")
_TOC_ENTRY = struct.Struct(">BQQI")
_U32 = struct.Struct(">I")
_CHUNK_HEAD = struct.Struct(">QII")


def _corrupt(msg: str) -> RemoteStorageError:
    return CorruptRemoteDataError(f"corrupt remote indexes object: {msg}")


def segment_object_prefix(metadata: RemoteLogSegmentMetadata) -> str:
    """``<topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>`` (no suffix)."""
    sid = metadata.remote_log_segment_id
    tp = sid.topic_id_partition
    return (
        f"{tp.topic}-{kafka_uuid_str(tp.topic_id)}/{tp.partition}/"
        f"{metadata.start_offset:020d}-{kafka_uuid_str(sid.id)}"
    )


# ------------------------------------------------------------------ chunk index


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    """Where each ``chunk_size`` piece of the original segment lies in the compressed object."""

    original_size: int
    chunk_size: int
    positions: array[
        int
    ]  # len = chunks + 1; chunk i is object bytes [positions[i], positions[i+1])

    def encode(self) -> bytes:
        lengths = array(
            "I", (b - a for a, b in zip(self.positions, self.positions[1:], strict=False))
        )
        if lengths.itemsize != 4:  # pragma: no cover - exotic platforms
            raise RuntimeError("array('I') is not 32-bit")
        if struct.pack("=I", 1) != struct.pack(">I", 1):
            lengths.byteswap()
        return (
            _CHUNK_HEAD.pack(self.original_size, self.chunk_size, len(lengths)) + lengths.tobytes()
        )

    @classmethod
    def decode(cls, data: bytes) -> ChunkIndex:
        if len(data) < _CHUNK_HEAD.size:
            raise _corrupt("chunk index truncated")
        original, chunk_size, n = _CHUNK_HEAD.unpack_from(data)
        if len(data) != _CHUNK_HEAD.size + 4 * n or chunk_size == 0:
            raise _corrupt("chunk index has an inconsistent size")
        lengths = array("I")
        lengths.frombytes(data[_CHUNK_HEAD.size :])
        if struct.pack("=I", 1) != struct.pack(">I", 1):
            lengths.byteswap()
        positions = array("Q", [0])
        total = 0
        for n_bytes in lengths:
            total += n_bytes
            positions.append(total)
        if n != -(-original // chunk_size):
            raise _corrupt("chunk index does not cover the segment")
        return cls(original, chunk_size, positions)

    def object_range(self, start: int, end: int) -> tuple[int, int, int]:
        """(first chunk, object start, object end exclusive) covering original [start, end]."""
        first = start // self.chunk_size
        last = end // self.chunk_size
        return first, self.positions[first], self.positions[last + 1]


def segment_is_compressed(path: os.PathLike[str] | str) -> bool:
    """Whether any record batch of a segment file carries a compression codec.

    Reads only the batch headers. A file that does not parse as batches counts as
    uncompressed (it may still compress well).
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos + ATTRIBUTES_OFFSET + 2 <= size:
            head = os.pread(f.fileno(), ATTRIBUTES_OFFSET + 2, pos)
            (batch_length,) = struct.unpack_from(">i", head, LENGTH_OFFSET)
            (attributes,) = struct.unpack_from(">h", head, ATTRIBUTES_OFFSET)
            if batch_length < ATTRIBUTES_OFFSET + 2 - LOG_OVERHEAD:
                return False
            if attributes & COMPRESSION_CODEC_MASK:
                return True
            pos += LOG_OVERHEAD + batch_length
    return False


# ------------------------------------------------------------------ indexes object


@dataclass(frozen=True, slots=True)
class IndexesObject:
    """A parsed ``.indexes`` object. ``compressed`` defaults to "chunked" (a chunk index
    without encryption means zstd chunks, as before encryption existed)."""

    indexes: Mapping[IndexType, bytes]
    chunk_index: ChunkIndex | None
    compressed: bool | None = None
    encrypted: bool = False

    def __post_init__(self) -> None:
        if self.compressed is None:  # resolved, so equal objects compare equal
            object.__setattr__(
                self, "compressed", self.chunk_index is not None and not self.encrypted
            )

    @property
    def zstd(self) -> bool:
        """Whether the data object's chunks are zstd-compressed."""
        return bool(self.compressed)

    def encode(self) -> bytes:
        sections: list[tuple[int, bytes]] = [
            (int(t), self.indexes[t]) for t in sorted(self.indexes)
        ]
        flags = 0
        if self.chunk_index is not None:
            sections.append((SECTION_CHUNK_INDEX, self.chunk_index.encode()))
        if self.zstd:
            flags |= FLAG_ZSTD_CHUNKED
        if self.encrypted:
            flags |= FLAG_ENCRYPTED_CHUNKS
        header_size = _HEAD.size + _TOC_ENTRY.size * len(sections) + 4
        toc = [_HEAD.pack(INDEXES_MAGIC, INDEXES_VERSION, flags, len(sections))]
        pos = header_size
        for kind, payload in sections:
            toc.append(_TOC_ENTRY.pack(kind, pos, len(payload), crc32c.crc32c(payload)))
            pos += len(payload)
        head = b"".join(toc)
        return head + _U32.pack(crc32c.crc32c(head)) + b"".join(p for _, p in sections)

    @classmethod
    def decode(cls, data: bytes) -> IndexesObject:
        """Parse and verify every section.

        Raises:
            RemoteStorageError: bad magic, version, TOC or section CRC, or inconsistent sizes.
        """
        if len(data) < _HEAD.size + 4:
            raise _corrupt(f"indexes object of {len(data)} bytes is truncated")
        magic, version, flags, count = _HEAD.unpack_from(data)
        if magic != INDEXES_MAGIC:
            raise _corrupt(f"bad indexes object magic {magic!r}")
        if version != INDEXES_VERSION:
            raise _corrupt(f"unsupported indexes object version {version}")
        toc_end = _HEAD.size + _TOC_ENTRY.size * count
        if len(data) < toc_end + 4:
            raise _corrupt("indexes object table of contents is truncated")
        if crc32c.crc32c(data[:toc_end]) != _U32.unpack_from(data, toc_end)[0]:
            raise _corrupt("indexes object table of contents fails its CRC")
        indexes: dict[IndexType, bytes] = {}
        chunk_index = None
        view = memoryview(data)
        for i in range(count):
            kind, pos, length, crc = _TOC_ENTRY.unpack_from(data, _HEAD.size + i * _TOC_ENTRY.size)
            if pos + length > len(data):
                raise _corrupt(f"section {kind} lies beyond the object's end")
            payload = bytes(view[pos : pos + length])
            if crc32c.crc32c(payload) != crc:
                raise _corrupt(f"section {kind} fails its CRC")
            if kind == SECTION_CHUNK_INDEX:
                chunk_index = ChunkIndex.decode(payload)
            elif kind <= max(IndexType):
                indexes[IndexType(kind)] = payload
            # unknown section types are skipped: newer writers may add some
        chunked = bool(flags & (FLAG_ZSTD_CHUNKED | FLAG_ENCRYPTED_CHUNKS))
        if chunked != (chunk_index is not None):
            raise _corrupt("compression/encryption flags and chunk index disagree")
        return cls(
            indexes,
            chunk_index,
            compressed=bool(flags & FLAG_ZSTD_CHUNKED),
            encrypted=bool(flags & FLAG_ENCRYPTED_CHUNKS),
        )


__all__ = [
    "ChunkIndex",
    "INDEXES_SUFFIX",
    "IndexesObject",
    "LOG_SUFFIX",
    "segment_is_compressed",
    "segment_object_prefix",
]
