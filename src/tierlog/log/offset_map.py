"""Kafka's ``SkimpyOffsetMap``: the log cleaner's bounded map of key digest -> latest offset.

The cleaner reads the dirty section of a log once and records, for every key, the offset of
its latest record; then it rewrites the log keeping only records whose offset is at least
the one mapped for their key. Kafka stores MD5 digests of the keys (16 bytes) and an 8-byte
offset in an open-addressing table carved out of ``log.cleaner.dedupe.buffer.size`` bytes::

    slots      = buffer size // (16 + 8)
    max fill   = slots * log.cleaner.io.buffer.load.factor (0.9)

and so does this map, with the same arithmetic and the same digests; the table is a Python
dict, so memory per entry is a few times Kafka's 24 bytes (the *number* of entries, and so the
size of the dirty section one round can map, is Kafka's). A key of at most 16 bytes is its own
digest (no MD5 call); a longer key is replaced by its MD5 digest. Two keys collide only as MD5
digests collide, as in Kafka.

Not thread-safe: one map per cleaner thread. ``put`` is idempotent for the same pair.
"""

from __future__ import annotations

import hashlib

__all__ = ["BYTES_PER_ENTRY", "DIGEST_SIZE", "SkimpyOffsetMap"]

#: MD5 digest size: Kafka's ``hashSize``.
DIGEST_SIZE = 16
#: Bytes a slot takes in Kafka's table: the digest plus an 8-byte offset.
BYTES_PER_ENTRY = DIGEST_SIZE + 8

_md5 = hashlib.md5


def key_digest(key: bytes) -> bytes:
    """The map key of a record key: itself up to 16 bytes, else its MD5 digest."""
    if len(key) <= DIGEST_SIZE:
        return key
    return _md5(key, usedforsecurity=False).digest()


class SkimpyOffsetMap:
    """A key -> offset map with a fixed number of slots (Kafka's ``SkimpyOffsetMap``).

    Thread-safety: none (each cleaner thread owns one).
    """

    __slots__ = ("_latest_offset", "_map", "_slots")

    def __init__(self, memory: int) -> None:
        """``memory``: this map's share of ``log.cleaner.dedupe.buffer.size``.

        Raises:
            ValueError: less memory than one slot.
        """
        slots = memory // BYTES_PER_ENTRY
        if slots < 1:
            raise ValueError(f"an offset map of {memory} bytes has no slot")
        self._slots = slots
        self._map: dict[bytes, int] = {}
        self._latest_offset = -1

    @property
    def slots(self) -> int:
        """How many entries the memory holds (Kafka's ``slots``)."""
        return self._slots

    @property
    def size(self) -> int:
        """Entries in use."""
        return len(self._map)

    def __len__(self) -> int:
        return len(self._map)

    @property
    def utilization(self) -> float:
        """Fraction of the slots in use."""
        return len(self._map) / self._slots

    @property
    def latest_offset(self) -> int:
        """The latest offset the map covers (-1 when empty): records past it are newer than
        every mapped key (Kafka's ``latestOffset``)."""
        return self._latest_offset

    def update_latest_offset(self, offset: int) -> None:
        """Kafka's ``updateLatestOffset``: the map now covers offsets up to ``offset``."""
        self._latest_offset = offset

    def put(self, key: bytes, offset: int) -> None:
        """Map ``key`` to ``offset`` (a later put for the same key wins)."""
        self._map[key if len(key) <= DIGEST_SIZE else _md5(key, usedforsecurity=False).digest()] = (
            offset
        )
        if offset > self._latest_offset:
            self._latest_offset = offset

    def get(self, key: bytes) -> int:
        """The offset mapped for ``key``, or -1 (Kafka's ``get``)."""
        return self._map.get(
            key if len(key) <= DIGEST_SIZE else _md5(key, usedforsecurity=False).digest(), -1
        )

    def clear(self) -> None:
        """Forget every entry and the latest offset."""
        self._map.clear()
        self._latest_offset = -1

    def __repr__(self) -> str:
        return f"SkimpyOffsetMap(slots={self._slots}, size={len(self._map)})"
