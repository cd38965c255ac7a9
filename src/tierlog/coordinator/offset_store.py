"""What a coordinator needs from its internal topic: :class:`OffsetStore`.

The broker implements it on the replicated logs of the topic
(:class:`tierlog.server.offset_store.OffsetStore`: ``__consumer_offsets`` for the group
coordinator, ``__transaction_state`` for the transaction coordinator);
:class:`InMemoryOffsetStore` keeps the records in a dict, for tests. Records are
``(key, value)`` pairs in Kafka's formats (:mod:`tierlog.coordinator.group.group_records`,
:mod:`tierlog.coordinator.transaction.transaction_log`); a value of ``None`` is a tombstone.

Transactional offset commits (TxnOffsetCommit) are appended as a transactional batch of the
producer; the transaction coordinator's COMMIT or ABORT marker ends it.
:meth:`OffsetStore.replay_batches` gives the batches with their producer and control type so
that a load applies committed transactional offsets and drops aborted ones, as Kafka's
GroupMetadataManager does.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["InMemoryOffsetStore", "OffsetStore", "Record", "StoredBatch"]

Record = tuple[bytes, bytes | None]

#: Control record types (the int16 ``type`` of a control record's key).
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """One batch of the internal topic as replayed: its records, its producer (-1: none),
    whether it is transactional, and for a control batch its type (0 ABORT, 1 COMMIT)."""

    records: list[Record]
    producer_id: int = -1
    is_transactional: bool = False
    control_type: int | None = None


class OffsetStore(Protocol):
    """Where the coordinator persists ``__consumer_offsets`` records (key, value or None)."""

    async def append(
        self,
        partition: int,
        records: list[Record],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        """Append records to ``partition``; they are durable when this returns.
        A value of ``None`` is a tombstone. With ``transactional`` the batch belongs to the
        producer's ongoing transaction. Raises on failure (nothing or all appended)."""
        ...

    def replay(self, partition: int) -> Iterable[Record]:
        """Every record of ``partition``, oldest first (compaction may have dropped some)."""
        ...

    def replay_batches(self, partition: int) -> Iterable[StoredBatch]:
        """Every batch of ``partition``, oldest first, with control batches."""
        ...


class InMemoryOffsetStore:
    """An :class:`OffsetStore` in a dict, for tests. ``fail_with`` makes appends raise it;
    ``append_delay`` (seconds) makes them slow. Not thread-safe."""

    def __init__(self) -> None:
        #: Per partition: plain records, and the transactional and control batches as
        #: :class:`StoredBatch` items, in log order.
        self.partitions: dict[int, list[Record | StoredBatch]] = defaultdict(list)
        self.fail_with: BaseException | None = None
        self.append_delay = 0.0

    async def append(
        self,
        partition: int,
        records: list[Record],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        if self.append_delay:
            await asyncio.sleep(self.append_delay)
        if self.fail_with is not None:
            raise self.fail_with
        if transactional:
            self.partitions[partition].append(StoredBatch(list(records), producer_id, True))
        else:
            self.partitions[partition].extend(records)

    def write_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """Append a COMMIT or ABORT control batch (what the transaction coordinator's marker
        does to the real topic)."""
        control = CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT
        self.partitions[partition].append(StoredBatch([], producer_id, True, control))

    def replay(self, partition: int) -> Iterable[Record]:
        return [r for b in self.replay_batches(partition) if b.control_type is None
                for r in b.records]  # fmt: skip

    def replay_batches(self, partition: int) -> Iterable[StoredBatch]:
        return [
            item if isinstance(item, StoredBatch) else StoredBatch([item])
            for item in self.partitions.get(partition, ())
        ]
