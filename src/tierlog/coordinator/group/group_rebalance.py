"""A classic group's rebalance (Kafka's ``GroupCoordinator`` join and sync handling).

JoinGroup's effect on a group (new, known and static members: ``doNewMemberJoinGroup``,
``doCurrentMemberJoinGroup``, ``updateStaticMemberAndRebalance``), the join phase and its
timers (``prepareRebalance``, ``InitialDelayedJoin``, ``DelayedJoin``, ``onCompleteJoin``), the
sync phase (``DelayedSync``, storing the leader's assignment and propagating it), and removing
members. :class:`~tierlog.coordinator.group.group_coordinator.GroupCoordinator` validates the
requests and calls in here; members' sessions are
:class:`~tierlog.coordinator.group.session_timers.SessionTimers`' (owned here: a session
that expires removes its member and may start a rebalance).

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

Thread-safety: none; the coordinator's one asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from tierlog.coordinator.group.group_metadata import GroupMetadata, GroupState
from tierlog.coordinator.group.group_metadata_manager import GroupMetadataManager
from tierlog.coordinator.group.member_metadata import (
    JoinCallback,
    JoinResult,
    MemberMetadata,
    SyncResult,
)
from tierlog.coordinator.group.session_timers import SessionTimers
from tierlog.errors import (
    CoordinatorNotAvailable,
    InconsistentGroupProtocol,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)

__all__ = ["GroupRebalance", "JoinRequest"]

log = logging.getLogger(__name__)

_EMPTY = GroupState.EMPTY
_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """One JoinGroup request's values, as the join handling needs them."""

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


class GroupRebalance:
    """The join and sync phases of the classic groups of one coordinator. See the module
    docstring for timing and thread-safety (single event loop)."""

    def __init__(
        self,
        group_manager: GroupMetadataManager,
        *,
        running_loop: Callable[[], asyncio.AbstractEventLoop],
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        initial_rebalance_delay_ms: int,
        new_member_join_timeout_ms: int,
    ) -> None:
        self._group_manager = group_manager
        self._running_loop = running_loop
        self._spawn = spawn
        self._initial_delay_ms = initial_rebalance_delay_ms
        self._new_member_timeout_ms = new_member_join_timeout_ms
        #: The members' session timers; an expired session removes its member.
        self.sessions = SessionTimers(running_loop, self._on_session_expired)

    # ================================================================== JoinGroup

    def join_new_member(self, group: GroupMetadata, req: JoinRequest, cb: JoinCallback) -> None:
        """JoinGroup without a member id (Kafka's doNewMemberJoinGroup): a new member, a
        static member's return, or MEMBER_ID_REQUIRED (KIP-394); ``cb`` gets the answer."""
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

    def join_current_member(self, group: GroupMetadata, req: JoinRequest, cb: JoinCallback) -> None:
        """JoinGroup of a known or pending member (Kafka's doCurrentMemberJoinGroup): a
        rebalance, or the current generation again; ``cb`` gets the answer."""
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
        self, group: GroupMetadata, member_id: str, req: JoinRequest, cb: JoinCallback
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
        self.sessions.schedule(group, member, self._new_member_timeout_ms)
        self._maybe_prepare_rebalance(group, f"new member {member_id} joined ({req.reason})")

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, req: JoinRequest, cb: JoinCallback
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
        req: JoinRequest,
        cb: JoinCallback,
    ) -> None:
        """A static member rejoined with an unknown member id (e.g. after a restart): it takes
        over the old member's place; a Stable group keeps its assignment without a rebalance
        unless the selected protocol would change."""
        assert req.group_instance_id is not None
        instance_id = req.group_instance_id
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        self.sessions.schedule(group, member)
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
            stored = self._group_manager.store_group(group, assignment)

            async def persist() -> None:
                try:
                    await stored
                    error = 0
                except Exception as exc:
                    error = self._group_manager.storage_error(exc, commit=False)
                still_waiting = group.members.get(new_id) is member and member.is_awaiting_join
                if not (still_waiting and group.is_(_STABLE)):
                    return  # a rebalance started meanwhile: it answers the member
                if generation != group.generation_id:
                    return
                if error:
                    callback = group.update_member(member, old_protocols, *old_timeouts, None)
                    group.replace_static_member(instance_id, new_id, old_id)
                    self.sessions.schedule(group, member)
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

    # ================================================================== join and sync phases

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
            self.maybe_complete_join(group)

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

    def maybe_complete_join(self, group: GroupMetadata) -> None:
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
            self._spawn(self._group_manager.store_empty_group(group))
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
            self.sessions.schedule(group, member)
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

    async def store_assignment(
        self,
        group: GroupMetadata,
        generation: int,
        assignment: dict[str, bytes],
        stored: asyncio.Future[None],
    ) -> None:
        """Finish the generation with the leader's ``assignment`` once ``stored`` (its
        append) is done, or reset it and rebalance when the append failed."""
        try:
            await stored
            error = 0
        except Exception as exc:
            error = self._group_manager.storage_error(exc, commit=False)
        # a member may have joined meanwhile: only finish the generation we stored
        if group.is_(_COMPLETING) and group.generation_id == generation:
            if error:
                self._reset_and_propagate_assignment_error(group, error)
                self._maybe_prepare_rebalance(group, "storing the assignment failed")
            else:
                self._set_and_propagate_assignment(group, assignment)
                group.transition_to(_STABLE)
                log.info("group %s stable at generation %d", group.group_id, generation)

    def remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        """The member sent SyncGroup; the sync timer stops once every member did."""
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel_timer(group, "sync_timer")

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.all_members():
            member.assignment = b""
            if group.maybe_invoke_sync_callback(member, SyncResult(error)):
                self.sessions.schedule(group, member)

    def _set_and_propagate_assignment(
        self, group: GroupMetadata, assignment: dict[str, bytes]
    ) -> None:
        for member in group.all_members():
            member.assignment = assignment.get(member.member_id, b"")
        for member in group.all_members():
            result = SyncResult(0, group.protocol_type, group.protocol_name, member.assignment)
            if group.maybe_invoke_sync_callback(member, result):
                # its session may have lapsed while it waited: start it afresh
                self.sessions.schedule(group, member)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.remove(member.member_id)
        self.sessions.cancel(member)

    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        """Remove a member (it left or its session expired) and rebalance, or end the join
        phase when it was the one awaited."""
        unknown = UnknownMemberId.error_code
        group.maybe_invoke_join_callback(member, JoinResult(unknown))
        group.maybe_invoke_sync_callback(member, SyncResult(unknown))
        self._remove_member(group, member)
        if group.state in (_STABLE, _COMPLETING):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(_PREPARING):
            self.maybe_complete_join(group)

    def _expire_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            log.info("group %s: pending member %s expired", group.group_id, member_id)
            self.maybe_complete_join(group)

    @staticmethod
    def _cancel_timer(group: GroupMetadata, name: str) -> None:
        timer: asyncio.TimerHandle | None = getattr(group, name)
        if timer is not None:
            timer.cancel()
            setattr(group, name, None)

    def _on_session_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self.remove_member_and_update_group(
            group, member, f"member {member.member_id} session expired"
        )
