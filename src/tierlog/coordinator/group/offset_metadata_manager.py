"""Committed offsets of the groups this broker coordinates (Kafka's ``OffsetMetadataManager``).

OffsetCommit and TxnOffsetCommit (after the coordinator checked the committing member),
OffsetFetch and OffsetDelete. The offsets live on their group
(:attr:`GroupMetadata.offsets <tierlog.coordinator.group.group_metadata.GroupMetadata>`,
:attr:`ConsumerGroup.offsets`) and reach ``__consumer_offsets`` through the
:class:`~tierlog.coordinator.group.group_metadata_manager.GroupMetadataManager`'s appends, in
log order; a commit is answered after its append returned.

Transactional offset commits (TxnOffsetCommit, Kafka's ``storeOffsets`` with a producer id):
the records go to the log as a transactional batch of the producer and wait, per producer id,
in a pending table; the transaction coordinator's COMMIT marker on the partition makes them the
group's committed offsets (:meth:`OffsetMetadataManager.handle_txn_completion`), an ABORT drops
them. Loading a partition fills the table with the transactional offsets whose producer's
control batch is not in the log yet; unloading one drops its groups' entries.

Thread-safety: none; one asyncio event loop, the coordinator's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tierlog.coordinator.group.consumer_group import ConsumerGroup
from tierlog.coordinator.group.consumer_protocol import PROTOCOL_TYPE, subscribed_topics
from tierlog.coordinator.group.group_metadata import CommittedOffset, GroupMetadata, GroupState
from tierlog.coordinator.group.group_metadata_manager import GroupMetadataManager
from tierlog.coordinator.group.group_records import OffsetCommitKey, OffsetCommitValue
from tierlog.coordinator.offset_store import Record
from tierlog.errors import (
    ApiError,
    GroupIdNotFound,
    GroupSubscribedToTopic,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
)

__all__ = ["OFFSET_METADATA_MAX_SIZE", "OffsetMetadataManager"]

OFFSET_METADATA_MAX_SIZE = 4096
"""Kafka's ``offset.metadata.max.bytes`` (compared with the Java string length)."""

_EMPTY = GroupState.EMPTY
_DEAD = GroupState.DEAD

TopicPartition = tuple[str, int]
#: group id -> (topic, partition) -> offset
GroupOffsets = dict[str, dict[TopicPartition, CommittedOffset]]


def _java_length(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-16-le")) // 2


class OffsetMetadataManager:
    """The committed and pending offsets of the groups of a
    :class:`~tierlog.coordinator.group.group_metadata_manager.GroupMetadataManager`. See the
    module docstring for transactional offsets and thread-safety (single event loop)."""

    def __init__(
        self,
        group_manager: GroupMetadataManager,
        *,
        offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_SIZE,
        time_ms: Callable[[], int],
    ) -> None:
        self._group_manager = group_manager
        self._metadata_max = offset_metadata_max_bytes
        self._time_ms = time_ms
        #: Transactional offsets awaiting their producer's marker:
        #: producer id -> group id -> (topic, partition) -> offset (Kafka's
        #: pendingTransactionalOffsetCommits and openGroupsForProducer).
        self._pending_txn: dict[int, GroupOffsets] = {}
        group_manager.on_txn_offsets_loaded = self._on_txn_offsets_loaded
        group_manager.on_partition_unloaded = self._on_partition_unloaded

    def _offset_records(
        self, group_id: str, offsets: dict[TopicPartition, tuple[int, int, str | None]]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, CommittedOffset], list[Record]]:
        """The records of an offset commit (plain or transactional): OFFSET_METADATA_TOO_LARGE
        per oversized partition, the offsets to keep, and their records."""
        now = self._time_ms()
        results: dict[TopicPartition, int] = {}
        valid: dict[TopicPartition, CommittedOffset] = {}
        records: list[Record] = []
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            md = metadata or ""
            if _java_length(md) > self._metadata_max:
                results[tp] = OffsetMetadataTooLarge.error_code
                continue
            valid[tp] = CommittedOffset(offset, leader_epoch, md, now)
            key = OffsetCommitKey(group_id, tp[0], tp[1]).encode()
            records.append((key, OffsetCommitValue(offset, leader_epoch, md, now).encode()))
        return results, valid, records

    async def store_offsets(
        self,
        group: GroupMetadata | ConsumerGroup,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, int]:
        """Store offsets (topic, partition) -> (offset, leader epoch, metadata) of a group
        whose commit was validated: an error code per partition (OFFSET_METADATA_TOO_LARGE
        for oversized metadata). Answers after the store is durable."""
        results, valid, records = self._offset_records(group.group_id, offsets)
        if records:
            try:
                await self._group_manager.append_group_records(
                    group.group_id,
                    records,
                    lambda: group.offsets.update(valid),
                )
                code = 0
            except Exception as exc:
                code = self._group_manager.storage_error(exc, commit=True)
            results.update(dict.fromkeys(valid, code))
        return {tp: results[tp] for tp in offsets}

    async def store_txn_offsets(
        self,
        group: GroupMetadata,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: store offsets in the producer's transaction (a transactional
        batch); they become committed when the transaction commits. An error code per
        partition, as :meth:`store_offsets`."""
        results, valid, records = self._offset_records(group.group_id, offsets)
        if records:

            def pend() -> None:
                by_group = self._pending_txn.setdefault(producer_id, {})
                by_group.setdefault(group.group_id, {}).update(valid)

            try:
                await self._group_manager.append_group_records(
                    group.group_id,
                    records,
                    pend,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                )
                code = 0
            except Exception as exc:
                code = self._group_manager.storage_error(exc, commit=True)
            results.update(dict.fromkeys(valid, code))
        return {tp: results[tp] for tp in offsets}

    def handle_txn_completion(self, producer_id: int, partitions: list[int], commit: bool) -> None:
        """The producer's marker is on these ``__consumer_offsets`` partitions: its pending
        offsets of the groups there become committed (``commit``) or are dropped (Kafka's
        GroupCoordinator.onTransactionCompleted)."""
        by_group = self._pending_txn.get(producer_id)
        if not by_group:
            return
        wanted = set(partitions)
        for group_id in [g for g in by_group if self._group_manager.partition_for(g) in wanted]:
            pending = by_group.pop(group_id)
            group = self._group_manager.get_group(group_id)
            if not commit:
                continue
            if group is None:
                group = self._group_manager.add_group(group_id)
            if not group.is_(_DEAD):
                group.offsets.update(pending)
        if not by_group:
            del self._pending_txn[producer_id]

    def has_pending_txn_offsets(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of the group's partition (OffsetFetch
        with require_stable answers UNSTABLE_OFFSET_COMMIT then)."""
        return any(tp in by_group.get(group_id, ()) for by_group in self._pending_txn.values())

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[int, dict[TopicPartition, tuple[int, int, str]]]:
        """OffsetFetch: (error, (topic, partition) -> (offset, leader epoch, metadata)).
        ``None`` asks for every committed partition; unknown ones get (-1, -1, "").
        ``member_id``/``member_epoch`` (v9+) are checked against a consumer group's member
        (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH)."""
        if err := self._group_manager.validate_group_status(group_id, allow_empty=True):
            return err, {}
        consumer_group = self._group_manager.consumer_groups.get(group_id)
        if consumer_group is not None:
            try:
                consumer_group.validate_offset_fetch(member_id, member_epoch)
            except ApiError as exc:
                return exc.error_code, {}
        group = self._group_manager.get_group(group_id)
        committed = group.offsets if group is not None and not group.is_(_DEAD) else {}
        consumer_group = self._group_manager.consumer_groups.get(group_id)
        if consumer_group is not None:
            committed = consumer_group.offsets
        if partitions is None:
            return 0, {tp: (o.offset, o.leader_epoch, o.metadata) for tp, o in committed.items()}
        out: dict[TopicPartition, tuple[int, int, str]] = {}
        for tp in partitions:
            o = committed.get(tp)
            out[tp] = (-1, -1, "") if o is None else (o.offset, o.leader_epoch, o.metadata)
        return 0, out

    async def delete_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete (Kafka's ``GroupCoordinator.handleDeleteOffsets``): the group's error
        and each partition's. A consumer group with members keeps the offsets of the topics
        its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC); an Empty group loses any; a
        non-consumer group with members refuses (NON_EMPTY_GROUP). Tombstones are stored
        before answering; a partition without an offset simply succeeds."""
        wanted = list(dict.fromkeys(partitions))
        if err := self._group_manager.validate_group_status(group_id, allow_empty=False):
            return err, {}
        group = self._group_manager.get_group(group_id)
        if group is None or group.is_(_DEAD):
            return GroupIdNotFound.error_code, {}
        codes: dict[tuple[str, int], int] = {}
        if not group.is_(_EMPTY):
            if group.protocol_type != PROTOCOL_TYPE:
                return NonEmptyGroup.error_code, {}
            subscribed = _subscribed(group)
            for tp in wanted:
                if subscribed is None or tp[0] in subscribed:
                    codes[tp] = GroupSubscribedToTopic.error_code
        deletable = [tp for tp in wanted if tp not in codes]
        gone = [tp for tp in deletable if tp in group.offsets]
        for tp in deletable:
            codes[tp] = 0
        if not gone:
            return 0, codes

        def apply() -> None:
            for tp in gone:
                group.offsets.pop(tp, None)

        records: list[Record] = [(OffsetCommitKey(group_id, t, p).encode(), None) for t, p in gone]
        try:
            await self._group_manager.append_group_records(group_id, records, apply)
        except Exception as exc:
            code = self._group_manager.storage_error(exc, commit=False)
            return code, {}
        return 0, codes

    # ================================================================== loading

    def _on_txn_offsets_loaded(self, producer_id: int, by_group: GroupOffsets) -> None:
        """A load found the producer's transactional offsets without their marker."""
        self._pending_txn.setdefault(producer_id, {}).update(by_group)

    def _on_partition_unloaded(self, partition: int) -> None:
        """The partition's groups are gone: so are their pending transactional offsets."""
        partition_for = self._group_manager.partition_for
        for by_group in self._pending_txn.values():
            for group_id in [g for g in by_group if partition_for(g) == partition]:
                del by_group[group_id]


def _subscribed(group: GroupMetadata) -> frozenset[str] | None:
    """Every topic a member of a consumer group subscribes to (None: one did not parse)."""
    protocol = group.protocol_name
    if protocol is None:
        return None
    out: set[str] = set()
    for m in group.members.values():
        topics = subscribed_topics(m.metadata(protocol))
        if topics is None:
            return None
        out |= topics
    return frozenset(out)
