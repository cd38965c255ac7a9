"""Kafka's classic consumer-group coordinator, on asyncio: the membership protocol.

What it does (Kafka's ``GroupCoordinator``, classic protocol): JoinGroup / SyncGroup /
Heartbeat / LeaveGroup drive each group through the state machine of
:mod:`tierlog.coordinator.group.group_metadata`; OffsetCommit checks the committing member.
The groups, their persistence in ``__consumer_offsets``, the partitions this broker owns, and
ListGroups / DescribeGroups / DeleteGroups are the
:class:`~tierlog.coordinator.group.group_metadata_manager.GroupMetadataManager`'s
(:attr:`GroupCoordinator.group_manager`); storing offsets, OffsetFetch and OffsetDelete the
:class:`~tierlog.coordinator.group.offset_metadata_manager.OffsetMetadataManager`'s
(:attr:`GroupCoordinator.offset_manager`). The API takes and returns plain Python values; the
request handlers translate kio messages to and from them.

Timing: the join and sync phases and their timers are
:mod:`~tierlog.coordinator.group.group_rebalance`'s, members' sessions
:mod:`~tierlog.coordinator.group.session_timers`'.

Group generations and offset commits are answered only after the store has them (see
:mod:`~tierlog.coordinator.group.group_metadata_manager` for the order of appends).

Thread-safety: none. Every method must be called from the one asyncio event loop that called
:meth:`GroupCoordinator.start`; state changes happen between awaits, so each request's
checks and updates are atomic with respect to the others. Requests are not idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from tierlog.coordinator.group.consumer_group import ConsumerGroupConfig, TopicImage
from tierlog.coordinator.group.consumer_group_coordinator import ConsumerGroupCoordinator
from tierlog.coordinator.group.group_metadata import GroupMetadata, GroupState
from tierlog.coordinator.group.group_metadata_manager import GroupMetadataManager
from tierlog.coordinator.group.group_rebalance import GroupRebalance, JoinRequest
from tierlog.coordinator.group.member_metadata import (
    JoinResult,
    SyncCallback,
    SyncResult,
    dedupe_protocols,
)
from tierlog.coordinator.group.offset_metadata_manager import (
    OFFSET_METADATA_MAX_SIZE,
    OffsetMetadataManager,
)
from tierlog.coordinator.offset_store import OffsetStore
from tierlog.errors import (
    ApiError,
    CoordinatorNotAvailable,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    NotCoordinator,
    RebalanceInProgress,
    UnknownMemberId,
)

__all__ = ["NEW_MEMBER_JOIN_TIMEOUT_MS", "GroupCoordinator"]

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
"""Kafka's ``group.classic.new.member.join.timeout.ms``: a new member's first join expires."""

_EMPTY = GroupState.EMPTY
_PREPARING = GroupState.PREPARING_REBALANCE
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD

TopicPartition = tuple[str, int]


def _resolver(future: asyncio.Future[Any]) -> Callable[[Any], None]:
    def resolve(result: Any) -> None:
        if not future.done():  # the request may have been cancelled (connection closed)
            future.set_result(result)

    return resolve


class GroupCoordinator:
    """The classic group coordinator. See the module docstring for thread-safety (single event
    loop, not thread-safe)."""

    def __init__(
        self,
        store: OffsetStore,
        *,
        initial_rebalance_delay_ms: int = 3000,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 1_800_000,
        offsets_topic_num_partitions: int = 50,
        offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_SIZE,
        new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS,
        time_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        consumer_group_config: ConsumerGroupConfig | None = None,
        topics: Callable[[], Mapping[str, TopicImage]] = dict,
    ) -> None:
        #: The groups and their persistence (Kafka's ``groupManager``).
        self.group_manager = GroupMetadataManager(
            store,
            spawn=self._spawn,
            offsets_topic_num_partitions=offsets_topic_num_partitions,
            time_ms=time_ms,
            topics=topics,
        )
        #: The groups' committed and pending offsets (Kafka's ``OffsetMetadataManager``).
        self.offset_manager = OffsetMetadataManager(
            self.group_manager,
            offset_metadata_max_bytes=offset_metadata_max_bytes,
            time_ms=time_ms,
        )
        #: KIP-848 consumer groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe).
        self.consumer_groups = ConsumerGroupCoordinator(
            self.group_manager, consumer_group_config or ConsumerGroupConfig(), self._spawn
        )
        self._min_session_ms = min_session_timeout_ms
        self._max_session_ms = max_session_timeout_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The classic groups' join and sync phases, and their members' sessions.
        self._rebalance = GroupRebalance(
            self.group_manager,
            running_loop=self._running_loop,
            spawn=self._spawn,
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            new_member_join_timeout_ms=new_member_join_timeout_ms,
        )
        self._sessions = self._rebalance.sessions

    # ================================================================== lifecycle

    async def start(self, *, cluster: bool = False) -> None:
        """Load every group and committed offset by replaying the store; then serve.

        In a cluster (``cluster=True``) nothing is loaded here: a partition of
        ``__consumer_offsets`` is loaded when this broker becomes its leader
        (:meth:`on_election`) and dropped when it stops leading it (:meth:`on_resignation`).

        Raises:
            RuntimeError: called twice.
        """
        self._loop = asyncio.get_running_loop()
        self.consumer_groups.start(self._loop)
        await self.group_manager.startup(cluster=cluster, on_group_loaded=self._on_group_loaded)

    def on_election(self, partition: int) -> None:
        """This broker leads ``__consumer_offsets-<partition>`` (Kafka's onElection): replay
        it; its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile."""
        self.group_manager.schedule_load_group_and_offsets(partition, self._on_group_loaded)

    def on_resignation(self, partition: int) -> None:
        """This broker no longer leads the partition (Kafka's onResignation): its groups are
        dropped; parked joins and syncs get NOT_COORDINATOR and their clients look again."""
        self.group_manager.remove_groups_for_partition(partition, self._on_group_unloaded)

    async def stop(self) -> None:
        """Stop serving: cancel timers, answer parked requests with NOT_COORDINATOR (clients
        rediscover the coordinator), wait for in-flight appends."""
        self.group_manager.shutdown()
        self.consumer_groups.stop()
        for group in self.group_manager.current_groups():
            self._on_group_unloaded(group)
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        """A group read from the store: its members must heartbeat within their session."""
        for member in group.members.values():
            self._sessions.schedule(group, member)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        """Kafka's onGroupUnloaded: no more timers; parked requests get NOT_COORDINATOR."""
        not_coordinator = NotCoordinator.error_code
        for timer in (group.join_timer, group.sync_timer, *group.pending_members.values()):
            if timer is not None:
                timer.cancel()
        group.join_timer = group.sync_timer = None
        for member in group.all_members():
            self._sessions.cancel(member)
            group.maybe_invoke_join_callback(
                member, JoinResult(not_coordinator, member_id=member.member_id)
            )
            group.maybe_invoke_sync_callback(member, SyncResult(not_coordinator))

    # ================================================================== JoinGroup

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
        reason: str | None = None,
        *,
        supports_skip_assignment: bool = False,
    ) -> JoinResult:
        """JoinGroup. Parks until the join phase ends (or answers at once on errors, for
        MEMBER_ID_REQUIRED, and for rejoins that change nothing). JoinGroup v0 has no
        rebalance timeout: pass the session timeout. ``require_known_member_id`` is JoinGroup
        v4+; ``supports_skip_assignment`` is v9+ (static leader rejoining a Stable group)."""
        if err := self.group_manager.validate_group_status(group_id, allow_empty=False):
            return JoinResult(err, member_id=member_id)
        if not self._min_session_ms <= session_timeout_ms <= self._max_session_ms:
            return JoinResult(InvalidSessionTimeout.error_code, member_id=member_id)
        req = JoinRequest(
            member_id,
            group_instance_id,
            protocol_type,
            dedupe_protocols(protocols),
            session_timeout_ms,
            rebalance_timeout_ms,
            client_id,
            client_host,
            require_known_member_id,
            reason,
            supports_skip_assignment,
        )
        consumer_group = self.group_manager.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                # A consumer (KIP-848) group with members: no online migration here.
                return JoinResult(InconsistentGroupProtocol.error_code, member_id=member_id)
            self.group_manager.convert_to_classic_group(group_id)
        group = self.group_manager.get_group(group_id)
        if group is None:
            if member_id:
                return JoinResult(UnknownMemberId.error_code, member_id=member_id)
            group = self.group_manager.add_group(group_id)
        future: asyncio.Future[JoinResult] = self._running_loop().create_future()
        callback = _resolver(future)
        if member_id:
            self._rebalance.join_current_member(group, req, callback)
        else:
            self._rebalance.join_new_member(group, req, callback)
        self._rebalance.maybe_complete_join(group)
        return await future

    # ================================================================== SyncGroup

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        """SyncGroup. Followers park until the leader's assignment is stored; the leader's
        ``assignments`` (member id -> bytes) is ignored from anyone else. ``protocol_type`` and
        ``protocol_name`` (v5+) are checked when not None."""
        if err := self.group_manager.validate_group_status(group_id, allow_empty=False):
            return SyncResult(err)
        group = self.group_manager.get_group(group_id)
        if group is None:
            return SyncResult(UnknownMemberId.error_code)
        if group.is_(_DEAD):
            return SyncResult(CoordinatorNotAvailable.error_code)
        if err := group.validate_member(member_id, group_instance_id):
            return SyncResult(err)
        if generation_id != group.generation_id:
            return SyncResult(IllegalGeneration.error_code)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(InconsistentGroupProtocol.error_code)
        member = group.members[member_id]
        if group.is_(_EMPTY):
            return SyncResult(UnknownMemberId.error_code)
        if group.is_(_PREPARING):
            return SyncResult(RebalanceInProgress.error_code)
        if group.is_(_STABLE):
            self._rebalance.remove_pending_sync_member(group, member_id)
            self._sessions.schedule(group, member)
            return SyncResult(0, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: park until the leader's assignment is stored
        future: asyncio.Future[SyncResult] = self._running_loop().create_future()
        old: SyncCallback | None = member.awaiting_sync
        member.awaiting_sync = _resolver(future)
        if old is not None:  # a duplicate SyncGroup replaces the parked one
            old(SyncResult(RebalanceInProgress.error_code))
        self._rebalance.remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            log.info(
                "group %s: assignment from leader %s for generation %d",
                group.group_id,
                member_id,
                generation_id,
            )
            stored = self.group_manager.store_group(group, full)
            self._spawn(self._rebalance.store_assignment(group, generation_id, full, stored))
        return await future

    # ================================================================== Heartbeat, LeaveGroup

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        """Heartbeat: 0, or REBALANCE_IN_PROGRESS (rejoin), ILLEGAL_GENERATION,
        UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, COORDINATOR_NOT_AVAILABLE. While loading the
        answer is 0, as Kafka's (the group is not known yet)."""
        if not group_id:
            return InvalidGroupId.error_code
        if err := self.group_manager.availability_error():
            return err if err == CoordinatorNotAvailable.error_code else 0
        if not self.group_manager.owns(group_id):
            return self.group_manager.validate_group_status(group_id, allow_empty=False)
        group = self.group_manager.get_group(group_id)
        if group is None:
            return UnknownMemberId.error_code
        if group.is_(_DEAD):
            return CoordinatorNotAvailable.error_code
        if err := group.validate_member(member_id, group_instance_id):
            return err
        if generation_id != group.generation_id:
            return IllegalGeneration.error_code
        if group.is_(_EMPTY):
            return UnknownMemberId.error_code
        self._sessions.schedule(group, group.members[member_id])
        return RebalanceInProgress.error_code if group.is_(_PREPARING) else 0

    async def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """LeaveGroup for (member id, group instance id) pairs; an empty member id removes the
        static member by instance id (admin use). Returns (top-level error, per member).
        LeaveGroup v0-v2 carry one member and only the top-level error: use its member error."""
        if err := self.group_manager.validate_group_status(group_id, allow_empty=False):
            return err, []
        group = self.group_manager.get_group(group_id)
        unknown = UnknownMemberId.error_code
        if group is None:
            return 0, [(mid, iid, unknown) for mid, iid in members]
        if group.is_(_DEAD):
            return CoordinatorNotAvailable.error_code, []
        results: list[tuple[str, str | None, int]] = []
        for member_id, instance_id in members:
            if not member_id:
                current = (
                    None if instance_id is None else group.current_static_member_id(instance_id)
                )
                if current is None:
                    results.append((member_id, instance_id, unknown))
                    continue
                member_id_to_remove = current
            elif group.is_pending_member(member_id):
                timer = group.pending_members.pop(member_id)
                if timer is not None:
                    timer.cancel()
                self._rebalance.maybe_complete_join(group)
                results.append((member_id, instance_id, 0))
                continue
            elif err := group.validate_member(member_id, instance_id):
                results.append((member_id, instance_id, err))
                continue
            else:
                member_id_to_remove = member_id
            member = group.members[member_id_to_remove]
            log.info("group %s: member %s left", group.group_id, member_id_to_remove)
            self._rebalance.remove_member_and_update_group(
                group, member, f"{member_id_to_remove} left"
            )
            results.append((member_id, instance_id, 0))
        return 0, results

    # ================================================================== OffsetCommit

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, int]:
        """OffsetCommit: (topic, partition) -> (offset, leader epoch, metadata); returns an error
        code per partition. Generation -1 commits to an Empty or unknown group (created Empty).
        Offsets are stored as given, negative ones too. Answers after the store is durable."""
        manager = self.group_manager
        if err := manager.validate_group_status(group_id, allow_empty=True):
            return dict.fromkeys(offsets, err)
        consumer_group = manager.consumer_groups.get(group_id)
        if consumer_group is not None:
            # KIP-848: generation_id is the member epoch.
            try:
                consumer_group.validate_offset_commit(member_id, generation_id)
            except ApiError as exc:
                return dict.fromkeys(offsets, exc.error_code)
            return await self.offset_manager.store_offsets(consumer_group, offsets)
        group = manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, IllegalGeneration.error_code)
            group = manager.add_group(group_id)
        if err := group.validate_offset_commit(generation_id, member_id, group_instance_id):
            return dict.fromkeys(offsets, err)
        member = group.members.get(member_id)
        if member is not None:
            self._sessions.schedule(group, member)
        return await self.offset_manager.store_offsets(group, offsets)

    async def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets): offsets in the producer's
        transaction, committed with it. A member id or generation, when given (KIP-447), must
        match the group's; an unknown group is created Empty."""
        manager = self.group_manager
        if err := manager.validate_group_status(group_id, allow_empty=False):
            return dict.fromkeys(offsets, err)
        group = manager.get_group(group_id) or manager.add_group(group_id)
        if group.is_(_DEAD):
            return dict.fromkeys(offsets, CoordinatorNotAvailable.error_code)
        if (member_id or group_instance_id is not None) and (
            err := group.validate_member(member_id, group_instance_id)
        ):
            return dict.fromkeys(offsets, err)
        if generation_id >= 0 and generation_id != group.generation_id:
            return dict.fromkeys(offsets, IllegalGeneration.error_code)
        return await self.offset_manager.store_txn_offsets(
            group, producer_id, producer_epoch, offsets
        )

    def on_transaction_completed(
        self, producer_id: int, partitions: list[int], commit: bool
    ) -> None:
        """The transaction coordinator's marker reached these ``__consumer_offsets``
        partitions (ReplicaManager's ``txn_completion_listeners``)."""
        self.offset_manager.handle_txn_completion(producer_id, partitions, commit)

    # ================================================================== helpers

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("GroupCoordinator.start() was not called")
        return self._loop

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here; callers that await it handle it
