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

Timing (all timers are ``loop.call_later``/``call_at``; ``time_ms`` only stamps records):

* **initial rebalance delay** - an Empty group's first join phase lasts
  ``initial_rebalance_delay_ms`` and is extended by the same step while new members keep
  arriving, up to the rebalance timeout (Kafka's ``InitialDelayedJoin``). A lone consumer thus
  waits the delay; a burst of consumers waits the delay plus the time they take to arrive.
* **join phase of a non-empty group** - ends as soon as every known member has rejoined and
  no member told MEMBER_ID_REQUIRED is still pending, or when the largest rebalance timeout
  expires; dynamic members that did not rejoin are then removed.
* **sync phase** - members that did not send SyncGroup within the rebalance timeout are removed
  and the group rebalances again.
* **session timeout** - a member that does not heartbeat within its session timeout is removed
  (members awaiting a join or sync response are exempt; new members get 5 minutes to finish
  their first join). Each member has one timer and a deadline: a heartbeat only moves the
  deadline (O(1)), the timer re-arms itself when it finds the deadline moved.

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
from dataclasses import dataclass, replace
from typing import Any

from tierlog.coordinator.group.consumer_group import ConsumerGroupConfig, TopicImage
from tierlog.coordinator.group.consumer_group_coordinator import ConsumerGroupCoordinator
from tierlog.coordinator.group.group_metadata import GroupMetadata, GroupState
from tierlog.coordinator.group.group_metadata_manager import GroupMetadataManager
from tierlog.coordinator.group.member_metadata import (
    JoinCallback,
    JoinResult,
    MemberMetadata,
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
    MemberIdRequired,
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
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool
    reason: str | None
    supports_skip_assignment: bool


def _resolver(future: asyncio.Future[Any]) -> Callable[[Any], None]:
    def resolve(result: Any) -> None:
        if not future.done():  # the request may have been cancelled (connection closed)
            future.set_result(result)

    return resolve


class GroupCoordinator:
    """The classic group coordinator. See the module docstring for timing and thread-safety
    (single event loop, not thread-safe)."""

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
        #: The groups, their offsets and their persistence (Kafka's ``groupManager``).
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
        self._initial_delay_ms = initial_rebalance_delay_ms
        self._min_session_ms = min_session_timeout_ms
        self._max_session_ms = max_session_timeout_ms
        self._new_member_timeout_ms = new_member_join_timeout_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

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
            self._schedule_heartbeat(group, member)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        """Kafka's onGroupUnloaded: no more timers; parked requests get NOT_COORDINATOR."""
        not_coordinator = NotCoordinator.error_code
        for timer in (group.join_timer, group.sync_timer, *group.pending_members.values()):
            if timer is not None:
                timer.cancel()
        group.join_timer = group.sync_timer = None
        for member in group.all_members():
            self._cancel_heartbeat(member)
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
        req = _JoinRequest(
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
            self._join_current_member(group, req, callback)
        else:
            self._join_new_member(group, req, callback)
        self._maybe_complete_join(group)
        return await future

    def _join_new_member(self, group: GroupMetadata, req: _JoinRequest, cb: JoinCallback) -> None:
        if group.is_(_DEAD):
            cb(JoinResult(CoordinatorNotAvailable.error_code, member_id=req.member_id))
        elif not group.supports_protocols(req.protocol_type, [p for p, _ in req.protocols]):
            cb(JoinResult(InconsistentGroupProtocol.error_code, member_id=req.member_id))
        else:
            new_id = group.generate_member_id(req.client_id, req.group_instance_id)
            if req.group_instance_id is not None:
                old_id = group.current_static_member_id(req.group_instance_id)
                if old_id is None:
                    self._add_member_and_rebalance(group, new_id, req, cb)
                else:
                    self._update_static_member_and_rebalance(group, old_id, new_id, req, cb)
            elif req.require_known_member_id:
                # KIP-394: hand out the id first; the member counts as pending until it joins
                # with it (or its session timeout passes), and a join phase waits for it.
                group.pending_members[new_id] = self._running_loop().call_later(
                    req.session_timeout_ms / 1000, self._expire_pending_member, group, new_id
                )
                cb(JoinResult(MemberIdRequired.error_code, member_id=new_id))
            else:
                self._add_member_and_rebalance(group, new_id, req, cb)

    def _join_current_member(
        self, group: GroupMetadata, req: _JoinRequest, cb: JoinCallback
    ) -> None:
        member_id = req.member_id
        if group.is_(_DEAD):
            cb(JoinResult(CoordinatorNotAvailable.error_code, member_id=member_id))
        elif not group.supports_protocols(req.protocol_type, [p for p, _ in req.protocols]):
            cb(JoinResult(InconsistentGroupProtocol.error_code, member_id=member_id))
        elif group.is_pending_member(member_id):
            if req.group_instance_id is not None:  # static members are never pending
                cb(JoinResult(UnknownMemberId.error_code, member_id=member_id))
            else:
                self._add_member_and_rebalance(group, member_id, req, cb)
        elif err := group.validate_member(member_id, req.group_instance_id):
            cb(JoinResult(err, member_id=member_id))
        else:
            member = group.members[member_id]
            unchanged = member.matches(req.protocols)
            if group.is_(_PREPARING):
                self._update_member_and_rebalance(group, member, req, cb)
            elif group.is_(_COMPLETING) and unchanged:
                # it probably missed the JoinGroup response: send it again
                cb(self._current_join_result(group, member, group.is_leader(member_id)))
            elif group.is_(_STABLE) and unchanged and not group.is_leader(member_id):
                cb(self._current_join_result(group, member, False))
            elif group.state in (_COMPLETING, _STABLE):
                # changed metadata, or the leader asks for a rebalance
                self._update_member_and_rebalance(group, member, req, cb)
            else:
                cb(JoinResult(UnknownMemberId.error_code, member_id=member_id))

    def _current_join_result(
        self, group: GroupMetadata, member: MemberMetadata, with_members: bool
    ) -> JoinResult:
        return JoinResult(
            0,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            member.member_id,
            group.current_member_metadata() if with_members else [],
        )

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, req: _JoinRequest, cb: JoinCallback
    ) -> None:
        member = MemberMetadata(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            req.protocols,
        )
        member.is_new = True
        if group.is_(_PREPARING) and group.previous_state is _EMPTY:
            group.new_member_added = True  # extends the initial rebalance delay
        pending_timer = group.pending_members.get(member_id)
        if pending_timer is not None:
            pending_timer.cancel()
        group.add(member, cb)
        # New members cannot heartbeat yet; expire their JoinGroup after a long timeout so
        # that abandoned joins (client gave up and retried) do not accumulate.
        self._schedule_heartbeat(group, member, self._new_member_timeout_ms)
        self._maybe_prepare_rebalance(group, f"new member {member_id} joined ({req.reason})")

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, req: _JoinRequest, cb: JoinCallback
    ) -> None:
        old = group.update_member(
            member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, cb
        )
        if old is not None:  # a duplicate JoinGroup replaces the parked one
            old(JoinResult(RebalanceInProgress.error_code, member_id=member.member_id))
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined ({req.reason})")

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_id: str,
        new_id: str,
        req: _JoinRequest,
        cb: JoinCallback,
    ) -> None:
        """A static member rejoined with an unknown member id (e.g. after a restart): it takes
        over the old member's place; a Stable group keeps its assignment without a rebalance
        unless the selected protocol would change."""
        assert req.group_instance_id is not None
        instance_id = req.group_instance_id
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._schedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_timeouts = (member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(
            member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, cb
        )
        if group.is_(_STABLE):
            if group.select_protocol() != group.protocol_name:
                self._maybe_prepare_rebalance(group, f"static member {instance_id} changed")
                return
            assignment = {m.member_id: m.assignment for m in group.members.values()}
            generation = group.generation_id
            stored = self.group_manager.store_group(group, assignment)

            async def persist() -> None:
                try:
                    await stored
                    error = 0
                except Exception as exc:
                    error = self.group_manager.storage_error(exc, commit=False)
                still_waiting = group.members.get(new_id) is member and member.is_awaiting_join
                if not (still_waiting and group.is_(_STABLE)):
                    return  # a rebalance started meanwhile: it answers the member
                if generation != group.generation_id:
                    return
                if error:
                    callback = group.update_member(member, old_protocols, *old_timeouts, None)
                    group.replace_static_member(instance_id, new_id, old_id)
                    self._schedule_heartbeat(group, member)
                    if callback is not None:
                        callback(
                            JoinResult(
                                error,
                                group.generation_id,
                                group.protocol_type,
                                group.protocol_name,
                                current_leader or "",
                            )
                        )
                elif req.supports_skip_assignment:
                    # JoinGroup v9+: the leader learns it leads but must not reassign
                    is_leader = group.is_leader(new_id)
                    result = self._current_join_result(group, member, is_leader)
                    result = replace(result, skip_assignment=is_leader)
                    group.maybe_invoke_join_callback(member, result)
                else:
                    # Older clients: report the old leader id so that a rejoining leader does
                    # not run an assignment the Stable group would ignore.
                    result = self._current_join_result(group, member, False)
                    result = replace(result, leader_id=current_leader or "")
                    group.maybe_invoke_join_callback(member, result)

            self._spawn(persist())
        elif group.is_(_COMPLETING):
            # the leader may have been given the old member id: assign again
            self._prepare_rebalance(group, f"static member {instance_id} rejoined while syncing")
        elif not group.is_(_PREPARING):
            group.maybe_invoke_join_callback(
                member, JoinResult(UnknownMemberId.error_code, member_id=new_id)
            )

    # ================================================================== rebalance machinery

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(_COMPLETING):
            self._reset_and_propagate_assignment_error(group, RebalanceInProgress.error_code)
        self._cancel_timer(group, "sync_timer")
        self._cancel_timer(group, "join_timer")
        initial = group.is_(_EMPTY)
        group.transition_to(_PREPARING)
        log.info(
            "group %s preparing rebalance (generation %d): %s",
            group.group_id,
            group.generation_id,
            reason,
        )
        loop = self._running_loop()
        if initial:
            group.new_member_added = False
            delay = self._initial_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_timer = loop.call_later(
                delay / 1000, self._on_initial_join_timer, group, delay, remaining
            )
        else:
            group.join_timer = loop.call_later(
                group.rebalance_timeout_ms() / 1000, self._on_join_timer, group
            )
            self._maybe_complete_join(group)

    def _on_initial_join_timer(
        self, group: GroupMetadata, delay_ms: int, remaining_ms: int
    ) -> None:
        group.join_timer = None
        if not group.is_(_PREPARING):
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self._initial_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            group.join_timer = self._running_loop().call_later(
                new_delay / 1000, self._on_initial_join_timer, group, new_delay, new_remaining
            )
        else:
            self._complete_join(group)

    def _on_join_timer(self, group: GroupMetadata) -> None:
        group.join_timer = None
        if group.is_(_PREPARING):
            self._complete_join(group)

    def _maybe_complete_join(self, group: GroupMetadata) -> None:
        """End the join phase early when everyone is in (never the initial, delayed one)."""
        if (
            group.is_(_PREPARING)
            and group.previous_state is not _EMPTY
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        self._cancel_timer(group, "join_timer")
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                log.info("group %s: removing member %s (did not rejoin)", group.group_id, member)
                self._remove_member(group, member)
        if group.is_(_DEAD):
            return
        loop = self._running_loop()
        if not group.maybe_elect_new_joined_leader() and group.members:
            # only static members that did not rejoin: wait for them (or their session)
            group.join_timer = loop.call_later(
                group.rebalance_timeout_ms() / 1000, self._on_join_timer, group
            )
            return
        group.init_next_generation()
        if group.is_(_EMPTY):
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            self._spawn(self.group_manager.store_empty_group(group))
            return
        log.info(
            "group %s stabilizing generation %d with %d members, protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        leader_view = group.current_member_metadata()
        for member in group.all_members():
            result = self._current_join_result(group, member, False)
            if group.is_leader(member.member_id):
                result = replace(result, members=leader_view)
            group.maybe_invoke_join_callback(member, result)
            self._schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_timer = loop.call_later(
            group.rebalance_timeout_ms() / 1000,
            self._on_sync_timer,
            group,
            group.generation_id,
        )

    def _on_sync_timer(self, group: GroupMetadata, generation: int) -> None:
        group.sync_timer = None
        if generation != group.generation_id or not group.pending_sync_members:
            return
        if group.state in (_COMPLETING, _STABLE):
            missing = sorted(group.pending_sync_members)
            for member_id in missing:
                member = group.members.get(member_id)
                if member is not None:
                    self._remove_member(group, member)
            self._prepare_rebalance(group, f"members {missing} did not send SyncGroup in time")

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.all_members():
            member.assignment = b""
            if group.maybe_invoke_sync_callback(member, SyncResult(error)):
                self._schedule_heartbeat(group, member)

    def _set_and_propagate_assignment(
        self, group: GroupMetadata, assignment: dict[str, bytes]
    ) -> None:
        for member in group.all_members():
            member.assignment = assignment.get(member.member_id, b"")
        for member in group.all_members():
            result = SyncResult(0, group.protocol_type, group.protocol_name, member.assignment)
            if group.maybe_invoke_sync_callback(member, result):
                # its session may have lapsed while it waited: start it afresh
                self._schedule_heartbeat(group, member)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.remove(member.member_id)
        self._cancel_heartbeat(member)

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        unknown = UnknownMemberId.error_code
        group.maybe_invoke_join_callback(member, JoinResult(unknown))
        group.maybe_invoke_sync_callback(member, SyncResult(unknown))
        self._remove_member(group, member)
        if group.state in (_STABLE, _COMPLETING):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(_PREPARING):
            self._maybe_complete_join(group)

    def _expire_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            log.info("group %s: pending member %s expired", group.group_id, member_id)
            self._maybe_complete_join(group)

    # ------------------------------------------------------------------ session timers

    def _schedule_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        """Kafka's ``completeAndScheduleNextHeartbeatExpiration``: O(1) unless the deadline
        moves earlier than the armed timer (then one cancel + one schedule)."""
        loop = self._running_loop()
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        deadline = loop.time() + timeout / 1000
        member.heartbeat_deadline = deadline
        timer = member.heartbeat_timer
        if timer is not None:
            if timer.when() <= deadline:
                return  # it will fire first and re-arm itself for the new deadline
            timer.cancel()
        member.heartbeat_timer = loop.call_at(deadline, self._on_heartbeat_timer, group, member)

    def _on_heartbeat_timer(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_timer = None
        if group.is_(_DEAD) or group.members.get(member.member_id) is not member:
            return
        loop = self._running_loop()
        if loop.time() + 0.001 < member.heartbeat_deadline:
            member.heartbeat_timer = loop.call_at(
                member.heartbeat_deadline, self._on_heartbeat_timer, group, member
            )
            return
        # Members parked in JoinGroup or SyncGroup cannot heartbeat: their session restarts
        # when the response is sent. New members are the exception (first join timeout).
        if member.is_new or not (member.is_awaiting_join or member.is_awaiting_sync):
            log.info("group %s: member %s session expired", group.group_id, member.member_id)
            self._remove_member_and_update_group(
                group, member, f"member {member.member_id} session expired"
            )

    def _cancel_heartbeat(self, member: MemberMetadata) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None

    @staticmethod
    def _cancel_timer(group: GroupMetadata, name: str) -> None:
        timer: asyncio.TimerHandle | None = getattr(group, name)
        if timer is not None:
            timer.cancel()
            setattr(group, name, None)

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
            self._remove_pending_sync_member(group, member_id)
            self._schedule_heartbeat(group, member)
            return SyncResult(0, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: park until the leader's assignment is stored
        future: asyncio.Future[SyncResult] = self._running_loop().create_future()
        old: SyncCallback | None = member.awaiting_sync
        member.awaiting_sync = _resolver(future)
        if old is not None:  # a duplicate SyncGroup replaces the parked one
            old(SyncResult(RebalanceInProgress.error_code))
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            log.info(
                "group %s: assignment from leader %s for generation %d",
                group.group_id,
                member_id,
                generation_id,
            )
            stored = self.group_manager.store_group(group, full)
            self._spawn(self._store_assignment(group, generation_id, full, stored))
        return await future

    async def _store_assignment(
        self,
        group: GroupMetadata,
        generation: int,
        assignment: dict[str, bytes],
        stored: asyncio.Future[None],
    ) -> None:
        try:
            await stored
            error = 0
        except Exception as exc:
            error = self.group_manager.storage_error(exc, commit=False)
        # a member may have joined meanwhile: only finish the generation we stored
        if group.is_(_COMPLETING) and group.generation_id == generation:
            if error:
                self._reset_and_propagate_assignment_error(group, error)
                self._maybe_prepare_rebalance(group, "storing the assignment failed")
            else:
                self._set_and_propagate_assignment(group, assignment)
                group.transition_to(_STABLE)
                log.info("group %s stable at generation %d", group.group_id, generation)

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel_timer(group, "sync_timer")

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
        self._schedule_heartbeat(group, group.members[member_id])
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
                self._maybe_complete_join(group)
                results.append((member_id, instance_id, 0))
                continue
            elif err := group.validate_member(member_id, instance_id):
                results.append((member_id, instance_id, err))
                continue
            else:
                member_id_to_remove = member_id
            member = group.members[member_id_to_remove]
            log.info("group %s: member %s left", group.group_id, member_id_to_remove)
            self._remove_member_and_update_group(group, member, f"{member_id_to_remove} left")
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
            self._schedule_heartbeat(group, member)
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
