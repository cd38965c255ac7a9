"""The group coordinator's groups and their persistence in ``__consumer_offsets``.

Kafka's ``GroupMetadataManager``: the cache of groups this broker coordinates, the partitions
of ``__consumer_offsets`` it owns (loading one replays it), the appends to them (group
generations here; offsets for the
:class:`~tierlog.coordinator.group.offset_metadata_manager.OffsetMetadataManager`), and the
group APIs that need no membership protocol: ListGroups, DescribeGroups, DeleteGroups. The
membership protocol is :class:`~tierlog.coordinator.group.group_coordinator.GroupCoordinator`'s,
which owns this manager, the offset manager and the event loop.

Persistence goes through an :class:`~tierlog.coordinator.offset_store.OffsetStore` (the broker
implements it on its ``__consumer_offsets`` log): record formats are Kafka's
(:mod:`tierlog.coordinator.group.group_records`). Offset commits and group generations are
answered only after :meth:`OffsetStore.append` returned. Appends to one store partition are
serialized by a lock and their in-memory effect is applied under it, so memory always matches
the order of the log. Loading a partition replays it, last writer wins per key (tombstones
delete).

A load replays transactional offset records (TxnOffsetCommit) as the log ended them: a
COMMIT marker makes them the group's offsets, an ABORT drops them, and those whose producer's
control batch is not in the log yet go to the offset manager's pending table
(:attr:`GroupMetadataManager.on_txn_offsets_loaded`).

Ownership: on a single node every partition is loaded at startup and owned (``None``); in a
cluster a partition is loaded when this broker becomes its leader
(:meth:`GroupMetadataManager.schedule_load_group_and_offsets`) and its groups are dropped when
it stops leading it (:meth:`GroupMetadataManager.remove_groups_for_partition`).

Thread-safety: none; one asyncio event loop, the coordinator's. Background work (appends,
loads) runs as tasks made by the ``spawn`` the coordinator supplies, so that its ``stop()``
waits for them.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.coordinator.group.consumer_group import ConsumerGroup, TopicImage
from tierlog.coordinator.group.consumer_group_records import (
    CONSUMER_GROUP_METADATA_KEY_TYPE,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_TYPE,
    ConsumerGroupKey,
    decode_consumer_group_key,
)
from tierlog.coordinator.group.group_metadata import CommittedOffset, GroupMetadata, GroupState
from tierlog.coordinator.group.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
)
from tierlog.coordinator.offset_store import (
    CONTROL_TYPE_COMMIT,
    OffsetStore,
    Record,
    StoredBatch,
)
from tierlog.errors import (
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    GroupIdNotFound,
    InvalidCommitOffsetSize,
    InvalidGroupId,
    LocalProtocolError,
    MessageTooLarge,
    NonEmptyGroup,
    NotCoordinator,
    NotLeaderOrFollower,
    RecordListTooLarge,
    UnknownServerError,
)

__all__ = [
    "GroupDescription",
    "GroupMetadataManager",
    "java_string_hash",
]

log = logging.getLogger(__name__)

_EMPTY = GroupState.EMPTY
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD

TopicPartition = tuple[str, int]
GroupCallback = Callable[[GroupMetadata], None]
ConsumerGroupCallback = Callable[[ConsumerGroup], None]
TxnOffsetsCallback = Callable[[int, dict[str, dict[TopicPartition, CommittedOffset]]], None]
TopicsProvider = Callable[[], Mapping[str, TopicImage]]
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """DescribeGroups for one group. ``members``: (member id, group instance id, client id,
    client host, metadata, assignment); metadata and assignment are only filled when Stable."""

    error_code: int
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[tuple[str, str | None, str, str, bytes, bytes]]


class _Status(enum.Enum):
    NEW = "new"
    LOADING = "loading"
    ACTIVE = "active"
    STOPPED = "stopped"


@functools.lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 arithmetic)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


class GroupMetadataManager:
    """The groups and offsets of the ``__consumer_offsets`` partitions this broker owns. See
    the module docstring for persistence, ownership and thread-safety (single event loop)."""

    def __init__(
        self,
        store: OffsetStore,
        *,
        spawn: Spawn,
        offsets_topic_num_partitions: int,
        time_ms: Callable[[], int],
        topics: TopicsProvider = dict,
    ) -> None:
        if offsets_topic_num_partitions < 1:
            raise ValueError("offsets_topic_num_partitions must be at least 1")
        self._store = store
        self._spawn = spawn
        self._num_partitions = offsets_topic_num_partitions
        self._time_ms = time_ms
        self._groups: dict[str, GroupMetadata] = {}
        #: KIP-848 consumer groups; a group id is in at most one of the two dicts.
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        #: The topics as they are now (name -> id and partition count), for consumer groups.
        self.topics = topics
        #: Told of each consumer group loaded from the store (session timers to start).
        self.on_consumer_group_loaded: ConsumerGroupCallback = lambda _g: None
        #: Told of each consumer group dropped from the cache (timers to cancel).
        self.on_consumer_group_unloaded: ConsumerGroupCallback = lambda _g: None
        self._status = _Status.NEW
        self._locks: dict[int, asyncio.Lock] = {}
        #: The __consumer_offsets partitions this coordinator serves (None: all, a single
        #: node); in a cluster those this broker leads, loaded on election.
        self._owned: set[int] | None = None
        self._loading: set[int] = set()
        #: Told of the transactional offsets a load found without their producer's marker
        #: (producer id, group id -> offsets); the offset manager keeps them pending.
        self.on_txn_offsets_loaded: TxnOffsetsCallback = lambda _p, _o: None
        #: Told of each partition whose groups were dropped (after them).
        self.on_partition_unloaded: Callable[[int], None] = lambda _p: None

    # ================================================================== lifecycle

    async def startup(self, *, cluster: bool, on_group_loaded: GroupCallback) -> None:
        """Load every group and committed offset by replaying the store; then serve. In a
        cluster nothing is loaded here: see :meth:`schedule_load_group_and_offsets`.

        Raises:
            RuntimeError: called twice.
        """
        if self._status is not _Status.NEW:
            raise RuntimeError("GroupCoordinator.start() called twice")
        if cluster:
            self._owned = set()
            self._status = _Status.ACTIVE
            return
        self._status = _Status.LOADING
        for partition in range(self._num_partitions):
            self._load_partition(partition, on_group_loaded)
            await asyncio.sleep(0)  # let other work run between partitions
        self._status = _Status.ACTIVE
        log.info("group coordinator loaded %d groups", len(self._groups))

    def shutdown(self) -> None:
        """Stop serving: every API answers COORDINATOR_NOT_AVAILABLE from now on."""
        self._status = _Status.STOPPED

    def schedule_load_group_and_offsets(
        self, partition: int, on_group_loaded: GroupCallback
    ) -> None:
        """This broker leads ``__consumer_offsets-<partition>`` (Kafka's onElection): replay
        it; its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile."""
        if self._owned is None or partition in self._owned or partition in self._loading:
            return
        self._loading.add(partition)

        async def load() -> None:
            await asyncio.sleep(0)
            try:
                if partition in self._loading:
                    self._load_partition(partition, on_group_loaded)
                    self._owned.add(partition)  # type: ignore[union-attr]
                    log.info("group coordinator: loaded __consumer_offsets-%d", partition)
            finally:
                self._loading.discard(partition)

        self._spawn(load())

    def remove_groups_for_partition(self, partition: int, on_group_unloaded: GroupCallback) -> None:
        """This broker no longer leads the partition (Kafka's onResignation): its groups are
        dropped from the cache, each handed to ``on_group_unloaded``."""
        if self._owned is None:
            return
        self._loading.discard(partition)
        if partition not in self._owned:
            return
        self._owned.discard(partition)
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            on_group_unloaded(self._groups.pop(group_id))
        for group_id in [g for g in self.consumer_groups if self.partition_for(g) == partition]:
            self.on_consumer_group_unloaded(self.consumer_groups.pop(group_id))
        self.on_partition_unloaded(partition)
        log.info("group coordinator: unloaded __consumer_offsets-%d", partition)

    # ================================================================== ownership

    def owns(self, group_id: str) -> bool:
        """Whether this coordinator serves ``group_id`` now."""
        return self._owned is None or self.partition_for(group_id) in self._owned

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group: ``Utils.abs(hashCode) % n``."""
        h = java_string_hash(group_id)
        return (0 if h == -(1 << 31) else abs(h)) % self._num_partitions

    def availability_error(self) -> int:
        """0 when serving, else COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE
        (for top-level error codes such as ListGroups')."""
        if self._status is _Status.ACTIVE:
            return 0
        if self._status is _Status.STOPPED:
            return CoordinatorNotAvailable.error_code
        return CoordinatorLoadInProgress.error_code

    def validate_group_status(self, group_id: str, *, allow_empty: bool) -> int:
        """Kafka's order: INVALID_GROUP_ID, COORDINATOR_NOT_AVAILABLE, then (in a cluster)
        COORDINATOR_LOAD_IN_PROGRESS while its partition loads, NOT_COORDINATOR when another
        broker leads it."""
        if not group_id and not allow_empty:
            return InvalidGroupId.error_code
        if err := self.availability_error():
            return err
        if self._owned is not None:
            partition = self.partition_for(group_id)
            if partition in self._loading:
                return CoordinatorLoadInProgress.error_code
            if partition not in self._owned:
                return NotCoordinator.error_code
        return 0

    # ================================================================== the groups cache

    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self._groups.get(group_id)

    def add_group(self, group_id: str) -> GroupMetadata:
        """A new Empty group in the cache."""
        group = GroupMetadata(group_id, self._time_ms)
        self._groups[group_id] = group
        return group

    def current_groups(self) -> Iterable[GroupMetadata]:
        return self._groups.values()

    def convert_to_consumer_group(self, group_id: str) -> ConsumerGroup:
        """A new consumer group in the cache, taking the offsets of an empty classic group of
        that id (whose metadata record is then tombstoned, with the consumer group's first
        records). The caller checked the classic group has no members."""
        group = ConsumerGroup(group_id)
        classic = self._groups.pop(group_id, None)
        if classic is not None:
            group.offsets = classic.offsets
            group.records.append((GroupMetadataKey(group_id).encode(), None))
        self.consumer_groups[group_id] = group
        return group

    def convert_to_classic_group(self, group_id: str) -> GroupMetadata:
        """An empty consumer group becomes a classic one (JoinGroup), keeping its offsets;
        its consumer group records are tombstoned in the background. The caller checked the
        consumer group has no members."""
        consumer = self.consumer_groups.pop(group_id)
        self.on_consumer_group_unloaded(consumer)
        group = self.add_group(group_id)
        group.offsets = consumer.offsets
        tombstones: list[Record] = [
            (ConsumerGroupKey(t, group_id).encode(), None)
            for t in (
                CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_TYPE,
                CONSUMER_GROUP_METADATA_KEY_TYPE,
            )
        ]

        async def store() -> None:
            try:
                await self._append(self.partition_for(group_id), tombstones)
            except Exception as exc:
                log.warning("group %s: failed to tombstone its consumer group: %r", group_id, exc)

        self._spawn(store())
        return group

    def append_group_records(
        self,
        group_id: str,
        records: list[Record],
        apply: Callable[[], None] | None = None,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> asyncio.Future[None]:
        """Append a group's records to its partition (in call order); durable when done.
        ``apply`` runs right after, in log order; a producer id makes a transactional batch."""
        return self._append(
            self.partition_for(group_id),
            records,
            apply,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )

    # ================================================================== admin

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
        """ListGroups: (group id, protocol type, state); the filter is case-insensitive.
        Empty while not serving: see :meth:`availability_error` for the error code."""
        if self._status is not _Status.ACTIVE:
            return []
        wanted = {s.lower() for s in states_filter} if states_filter else None
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self._groups.values()
            if not g.is_(_DEAD) and (wanted is None or g.state.value.lower() in wanted)
        ]

    def list_consumer_groups(self, states_filter: Iterable[str] | None = None) -> list[str]:
        """ListGroups of KIP-848 groups (type "consumer", protocol type "consumer"): their
        ids; the state filter is case-insensitive."""
        if self._status is not _Status.ACTIVE:
            return []
        wanted = {s.lower() for s in states_filter} if states_filter else None
        return [
            g.group_id
            for g in self.consumer_groups.values()
            if not g.dead and (wanted is None or g.state.value.lower() in wanted)
        ]

    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups for one group; an unknown group is reported as Dead (error 0)."""
        if err := self.validate_group_status(group_id, allow_empty=True):
            return GroupDescription(err, group_id, "", "", "", [])
        if group_id in self.consumer_groups:
            # Kafka 4: "Group <id> is not a classic group." (ConsumerGroupDescribe describes it)
            return GroupDescription(GroupIdNotFound.error_code, group_id, _DEAD.value, "", "", [])
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(0, group_id, _DEAD.value, "", "", [])
        protocol = group.protocol_name if group.is_(_STABLE) else None
        return GroupDescription(
            0,
            group_id,
            group.state.value,
            group.protocol_type or "",
            protocol or "",
            [
                (
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(protocol) if protocol is not None else b"",
                    m.assignment if protocol is not None else b"",
                )
                for m in group.members.values()
            ],
        )

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """DeleteGroups: only Empty groups go (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND for
        unknown ones). Tombstones for the group and each offset are stored before answering."""
        results: dict[str, int] = {}
        by_partition: dict[int, list[GroupMetadata]] = defaultdict(list)
        consumer_by_partition: dict[int, list[ConsumerGroup]] = defaultdict(list)
        for group_id in group_ids:
            if group_id in results:
                continue
            if err := self.validate_group_status(group_id, allow_empty=True):
                results[group_id] = err
                continue
            consumer_group = self.consumer_groups.get(group_id)
            if consumer_group is not None:
                if consumer_group.members:
                    results[group_id] = NonEmptyGroup.error_code
                else:
                    consumer_group.dead = True
                    results[group_id] = 0
                    consumer_by_partition[self.partition_for(group_id)].append(consumer_group)
                continue
            group = self._groups.get(group_id)
            if group is None or group.is_(_DEAD):
                results[group_id] = GroupIdNotFound.error_code
            elif not group.is_(_EMPTY):
                results[group_id] = NonEmptyGroup.error_code
            else:
                group.transition_to(_DEAD)
                for timer in group.pending_members.values():
                    if timer is not None:
                        timer.cancel()
                group.pending_members.clear()
                results[group_id] = 0
                by_partition[self.partition_for(group_id)].append(group)

        async def tombstone(partition: int, groups: list[GroupMetadata]) -> None:
            records: list[Record] = []
            for g in groups:
                records.append((GroupMetadataKey(g.group_id).encode(), None))
                records.extend(
                    (OffsetCommitKey(g.group_id, t, p).encode(), None) for t, p in g.offsets
                )
            try:
                await self._append(partition, records)
            except Exception as exc:
                code = self.storage_error(exc, commit=False)
                results.update((g.group_id, code) for g in groups)
            for g in groups:
                if self._groups.get(g.group_id) is g:
                    del self._groups[g.group_id]

        async def tombstone_consumer(partition: int, groups: list[ConsumerGroup]) -> None:
            records: list[Record] = []
            for g in groups:
                records += [
                    (ConsumerGroupKey(t, g.group_id).encode(), None)
                    for t in (
                        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_TYPE,
                        CONSUMER_GROUP_METADATA_KEY_TYPE,
                    )
                ]
                records.extend(
                    (OffsetCommitKey(g.group_id, t, p).encode(), None) for t, p in g.offsets
                )
            try:
                await self._append(partition, records)
            except Exception as exc:
                code = self.storage_error(exc, commit=False)
                results.update((g.group_id, code) for g in groups)
            for g in groups:
                if self.consumer_groups.get(g.group_id) is g:
                    del self.consumer_groups[g.group_id]

        await asyncio.gather(
            *(tombstone(p, gs) for p, gs in by_partition.items()),
            *(tombstone_consumer(p, gs) for p, gs in consumer_by_partition.items()),
        )
        return results

    # ================================================================== persistence

    def _load_partition(self, partition: int, on_group_loaded: GroupCallback) -> None:
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        metadata: dict[str, GroupMetadataValue] = {}
        seen: dict[str, None] = {}  # group ids in first-seen order
        consumer: dict[str, ConsumerGroup] = {}
        # producer id -> its transactional offsets not yet ended by a marker
        pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        for batch in self._store.replay_batches(partition):
            if batch.control_type is not None:
                ended = pending.pop(batch.producer_id, {})
                if batch.control_type == CONTROL_TYPE_COMMIT:
                    for group_id, tps in ended.items():
                        seen.setdefault(group_id)
                        offsets.setdefault(group_id, {}).update(tps)
                continue
            self._load_batch(partition, batch, offsets, metadata, seen, pending, consumer)
        for producer_id, by_group in pending.items():
            self.on_txn_offsets_loaded(producer_id, by_group)
            for group_id in by_group:
                seen.setdefault(group_id)
        topics = self.topics() if consumer else {}
        for group_id in seen:
            value = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            cg = consumer.get(group_id)
            if cg is not None and cg.group_epoch > 0:
                cg.finish_loading(topics)
                cg.offsets = group_offsets
                self.consumer_groups[group_id] = cg
                self._groups.pop(group_id, None)
                self.on_consumer_group_loaded(cg)
                continue
            if value is None and not group_offsets:
                continue  # deleted
            if value is not None:
                group = GroupMetadata.load(group_id, value, self._time_ms)
            else:
                group = GroupMetadata(group_id, self._time_ms)
            group.offsets = group_offsets
            self._groups[group_id] = group
            on_group_loaded(group)

    def _load_batch(
        self,
        partition: int,
        batch: StoredBatch,
        offsets: dict[str, dict[TopicPartition, CommittedOffset]],
        metadata: dict[str, GroupMetadataValue],
        seen: dict[str, None],
        pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]],
        consumer: dict[str, ConsumerGroup],
    ) -> None:
        for key_bytes, value_bytes in batch.records:
            try:
                key = decode_key(key_bytes)
                if key is None:
                    ckey = decode_consumer_group_key(key_bytes)
                    if ckey is not None:
                        seen.setdefault(ckey.group_id)
                        cg = consumer.get(ckey.group_id)
                        if cg is None:
                            cg = consumer[ckey.group_id] = ConsumerGroup(ckey.group_id)
                        cg.replay(ckey, value_bytes)
                    continue
                if isinstance(key, OffsetCommitKey):
                    tp = (key.topic, key.partition)
                    if batch.is_transactional and value_bytes is not None:
                        v = OffsetCommitValue.decode(value_bytes)
                        by_group = pending.setdefault(batch.producer_id, {})
                        by_group.setdefault(key.group, {})[tp] = CommittedOffset(
                            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                        )
                        continue
                    seen.setdefault(key.group)
                    group_offsets = offsets.setdefault(key.group, {})
                    if value_bytes is None:
                        group_offsets.pop(tp, None)
                    else:
                        v = OffsetCommitValue.decode(value_bytes)
                        group_offsets[tp] = CommittedOffset(
                            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                        )
                elif isinstance(key, GroupMetadataKey):
                    seen.setdefault(key.group)
                    if value_bytes is None:
                        metadata.pop(key.group, None)
                    else:
                        metadata[key.group] = GroupMetadataValue.decode(value_bytes)
            except LocalProtocolError as exc:
                log.warning("__consumer_offsets-%d: skipping bad record: %s", partition, exc)

    def store_group(
        self, group: GroupMetadata, assignment: dict[str, bytes]
    ) -> asyncio.Future[None]:
        """Persist the group's current generation: the record is built now, from the state at
        call time (not when the append gets its turn)."""
        key = GroupMetadataKey(group.group_id).encode()
        value = group.to_record(assignment).encode()
        return self._append(self.partition_for(group.group_id), [(key, value)])

    async def store_empty_group(self, group: GroupMetadata) -> None:
        """Persist an empty generation; a failure is only logged."""
        stored = self.store_group(group, {})
        try:
            await stored
        except Exception as exc:
            # Safe to ignore: an empty generation has no members that could be confused.
            log.warning("group %s: failed to store empty generation: %r", group.group_id, exc)

    def storage_error(self, exc: BaseException, *, commit: bool) -> int:
        """The error code a request gets when its append failed with ``exc``."""
        log.warning("__consumer_offsets append failed: %r", exc)
        if isinstance(exc, MessageTooLarge | RecordListTooLarge):
            return InvalidCommitOffsetSize.error_code if commit else UnknownServerError.error_code
        if isinstance(exc, NotLeaderOrFollower):
            return NotCoordinator.error_code
        return CoordinatorNotAvailable.error_code

    def _append(
        self,
        partition: int,
        records: list[Record],
        apply: Callable[[], None] | None = None,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> asyncio.Future[None]:
        """Append under the partition's lock and run ``apply`` right after, in log order.
        The append is queued now (appends of a partition happen in call order); awaiting the
        result is shielded: a cancelled request does not cancel a half-done append."""
        return asyncio.shield(
            self._spawn(self._append_locked(partition, records, apply, producer_id, producer_epoch))
        )

    async def _append_locked(
        self,
        partition: int,
        records: list[Record],
        apply: Callable[[], None] | None,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        lock = self._locks.get(partition)
        if lock is None:
            lock = self._locks[partition] = asyncio.Lock()
        async with lock:
            if producer_id >= 0:
                await self._store.append(
                    partition,
                    records,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transactional=True,
                )
            else:
                await self._store.append(partition, records)
            if apply is not None:
                apply()
