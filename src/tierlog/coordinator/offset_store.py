"""What the group coordinator needs from ``__consumer_offsets``: :class:`OffsetStore`.

The broker implements it on the replicated logs of the topic
(:class:`tierlog.server.offset_store.OffsetStore`); :class:`InMemoryOffsetStore` keeps the
records in a dict, for tests. Records are ``(key, value)`` pairs in Kafka's formats
(:mod:`tierlog.coordinator.group.group_records`); a value of ``None`` is a tombstone.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

__all__ = ["InMemoryOffsetStore", "OffsetStore", "Record"]

Record = tuple[bytes, bytes | None]


class OffsetStore(Protocol):
    """Where the coordinator persists ``__consumer_offsets`` records (key, value or None)."""

    async def append(self, partition: int, records: list[Record]) -> None:
        """Append records to ``partition``; they are durable when this returns.
        A value of ``None`` is a tombstone. Raises on failure (nothing or all appended)."""
        ...

    def replay(self, partition: int) -> Iterable[Record]:
        """Every record of ``partition``, oldest first (compaction may have dropped some)."""
        ...


class InMemoryOffsetStore:
    """An :class:`OffsetStore` in a dict, for tests. ``fail_with`` makes appends raise it;
    ``append_delay`` (seconds) makes them slow. Not thread-safe."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[Record]] = defaultdict(list)
        self.fail_with: BaseException | None = None
        self.append_delay = 0.0

    async def append(self, partition: int, records: list[Record]) -> None:
        if self.append_delay:
            await asyncio.sleep(self.append_delay)
        if self.fail_with is not None:
            raise self.fail_with
        self.partitions[partition].extend(records)

    def replay(self, partition: int) -> Iterable[Record]:
        return list(self.partitions.get(partition, ()))
