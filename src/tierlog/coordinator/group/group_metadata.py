"""A classic consumer group's state: members, generation, protocol, committed offsets.

Kafka's ``GroupMetadata`` (``ClassicGroup`` in Kafka 4); its members are
:class:`~tierlog.coordinator.group.member_metadata.MemberMetadata`. The coordinator
(:mod:`tierlog.coordinator.group.group_coordinator`) drives it; this module holds the
bookkeeping and the state machine and does no I/O and no timing of its own.

Group states (Kafka's ``validPreviousStates``, :data:`VALID_PREVIOUS_STATES`)::

            first join                  join phase ends             leader's SyncGroup stored
    Empty ------------> PreparingRebalance ---------> CompletingRebalance ---------> Stable
      ^                  |  ^        ^                        |                         |
      |  join phase ends |  |        +------------------------+                         |
      +------------------+  |   join, leave, session expiry, sync timeout, store error  |
         with no members    +-----------------------------------------------------------+
                                join, leave, session expiry, leader or metadata change

    any state ---> Dead   (DeleteGroups of an Empty group; a Dead group is never used again)

* **Empty**: no members; may still hold committed offsets (simple consumers, or all left).
* **PreparingRebalance**: waiting for members to (re)join; a JoinGroup is parked until the
  join phase ends.
* **CompletingRebalance**: join responses sent; waiting for the leader's SyncGroup.
* **Stable**: the leader's assignment was stored and handed out.
* **Dead**: removed; requests get COORDINATOR_NOT_AVAILABLE and rediscover the coordinator.

Not thread-safe: one asyncio event loop owns every group. Nothing here is idempotent.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tierlog.coordinator.group.group_records import GroupMetadataValue, MemberMetadataValue
from tierlog.coordinator.group.member_metadata import (
    JoinCallback,
    JoinResult,
    MemberMetadata,
    SyncResult,
)
from tierlog.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    IllegalGeneration,
    RebalanceInProgress,
    TierlogError,
    UnknownMemberId,
)

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "VALID_PREVIOUS_STATES",
    "CommittedOffset",
    "GroupMetadata",
    "GroupState",
    "IllegalGroupStateTransition",
]


class GroupState(enum.Enum):
    """The five states of a classic group; the value is Kafka's wire name."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}
"""Kafka's ``validPreviousStates``: a transition to the key is legal from these states."""


class IllegalGroupStateTransition(TierlogError):
    """A coordinator bug: a transition not in :data:`VALID_PREVIOUS_STATES`."""


# --------------------------------------------------------------------------- offsets


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A committed offset as kept in memory (metadata None is stored as "", as Kafka does)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


# --------------------------------------------------------------------------- group


class GroupMetadata:
    """A classic group (Kafka's ``GroupMetadata``): the state machine plus member bookkeeping.

    ``members`` keeps join order (the first member is the first leader). Counters are kept
    incrementally so that "have all members joined?" and protocol support checks are O(1) per
    protocol. Offsets live here too, keyed by (topic, partition). ``join_timer``/``sync_timer``
    and ``pending_members``' timers belong to the coordinator.

    Not thread-safe: one asyncio event loop owns it.
    """

    def __init__(
        self,
        group_id: str,
        time_ms: Callable[[], int],
        state: GroupState = GroupState.EMPTY,
    ) -> None:
        self.group_id = group_id
        self._time_ms = time_ms
        self.state = state
        self.previous_state = state
        self.state_timestamp = time_ms()
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        # members told MEMBER_ID_REQUIRED that have not joined yet -> their expiry timer
        self.pending_members: dict[str, asyncio.TimerHandle | None] = {}
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        self.new_member_added = False
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        self.join_timer: asyncio.TimerHandle | None = None
        self.sync_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ state machine

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState) -> None:
        """Move to ``target``, recording the previous state and the time.

        Raises:
            IllegalGroupStateTransition: ``target`` is not reachable from the current state.
        """
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalGroupStateTransition(
                f"group {self.group_id}: {self.state.value} -> {target.value} is not allowed"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp = self._time_ms()

    # ------------------------------------------------------------------ members

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        """Kafka's ``{client_id or group_instance_id}-{uuid4}``."""
        prefix = client_id if group_instance_id is None else group_instance_id
        return f"{prefix}-{uuid.uuid4()}"

    def add(self, member: MemberMetadata, callback: JoinCallback | None) -> None:
        """Add a member (awaiting join when ``callback`` is set); the first member becomes
        leader and fixes the group's protocol type.

        Raises:
            ValueError: the member id or its group instance id is already in use.
        """
        if member.member_id in self.members:
            raise ValueError(f"member {member.member_id} is already in group {self.group_id}")
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"static member {member.group_instance_id} already exists")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.supported_protocols.update(name for name, _ in member.protocols)
        member.awaiting_join = callback
        if callback is not None:
            self.num_members_awaiting_join += 1
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> MemberMetadata | None:
        """Forget a member (its callbacks are the caller's business); elect a new leader if it
        led. Returns the removed member."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(name for name, _ in member.protocols)
            if member.awaiting_join is not None:
                self.num_members_awaiting_join -= 1
            if (
                member.group_instance_id is not None
                and self.static_members.get(member.group_instance_id) == member_id
            ):
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> JoinCallback | None:
        """Replace a member's protocols and timeouts and set its join callback. Returns the
        callback it replaces (a duplicate JoinGroup), which the caller must answer."""
        self.supported_protocols.subtract(name for name, _ in member.protocols)
        member.protocols = protocols
        self.supported_protocols.update(name for name, _ in protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        old = member.awaiting_join
        if callback is not None and old is None:
            self.num_members_awaiting_join += 1
        elif callback is None and old is not None:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = callback
        return old

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> MemberMetadata:
        """Give a static member a new member id; fence parked requests of the old id.

        Raises:
            KeyError: ``old_member_id`` is not a member (a coordinator bug).
        """
        member = self.members.pop(old_member_id)
        fenced = FencedInstanceId.error_code
        self.maybe_invoke_join_callback(member, JoinResult(fenced, member_id=old_member_id))
        self.maybe_invoke_sync_callback(member, SyncResult(fenced))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    def validate_member(self, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's ``validateCurrentMember``: 0, FENCED_INSTANCE_ID or UNKNOWN_MEMBER_ID."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return UnknownMemberId.error_code
            if current != member_id:
                return FencedInstanceId.error_code
            return 0
        return 0 if member_id in self.members else UnknownMemberId.error_code

    def validate_offset_commit(
        self, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        """Who may commit offsets now (Kafka's ``validateOffsetCommit``): 0 or an error code.
        Generation -1 without a member commits to an Empty group (admin client, or a consumer
        without group management)."""
        if self.is_(GroupState.DEAD):
            return CoordinatorNotAvailable.error_code
        if generation_id < 0 and self.is_(GroupState.EMPTY):
            return 0  # admin client or a consumer without group management
        if generation_id >= 0 or member_id or group_instance_id is not None:
            if err := self.validate_member(member_id, group_instance_id):
                return err
            if generation_id != self.generation_id:
                return IllegalGeneration.error_code
        elif not self.is_(GroupState.EMPTY):
            return UnknownMemberId.error_code  # only members commit to a live group
        if self.is_(GroupState.COMPLETING_REBALANCE):
            return RebalanceInProgress.error_code
        return 0

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinResult) -> bool:
        callback = member.awaiting_join
        if callback is None:
            return False
        member.awaiting_join = None
        self.num_members_awaiting_join -= 1
        callback(result)
        return True

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncResult) -> bool:
        callback = member.awaiting_sync
        if callback is None:
            return False
        member.awaiting_sync = None
        callback(result)
        return True

    # ------------------------------------------------------------------ rebalance

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members (0 for no members)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any member that did. False when nobody
        (or no leader) is there to lead."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Can a member with these protocols join? An Empty group takes any non-empty set;
        otherwise the type must match and one protocol must be supported by every member."""
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocol_names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols[name] == n for name in protocol_names
        )

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (each member votes for
        its first supported candidate); ties go to the protocol voted for first.

        Raises:
            ValueError: the group has no members (a coordinator bug).
        """
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        n = len(self.members)
        candidates = {name for name, count in self.supported_protocols.items() if count == n}
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]

    def init_next_generation(self) -> None:
        """End the join phase: bump the generation and go CompletingRebalance (or Empty)."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, group instance id, metadata of the selected protocol) of every member:
        what the leader's JoinGroup response carries."""
        protocol = self.protocol_name
        if protocol is None:
            raise ValueError(f"group {self.group_id} has no selected protocol")
        return [
            (m.member_id, m.group_instance_id, m.metadata(protocol)) for m in self.members.values()
        ]

    def all_members(self) -> Iterator[MemberMetadata]:
        return iter(list(self.members.values()))

    # ------------------------------------------------------------------ persistence

    def to_record(self, assignment: dict[str, bytes]) -> GroupMetadataValue:
        """The GroupMetadataValue of the current generation with ``assignment``."""
        protocol = self.protocol_name
        members: tuple[MemberMetadataValue, ...] = ()
        if protocol is not None:
            members = tuple(
                MemberMetadataValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(protocol),
                    assignment=assignment.get(m.member_id, b""),
                )
                for m in self.members.values()
            )
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=protocol,
            leader=self.leader_id if protocol is not None else None,
            current_state_timestamp=self.state_timestamp,
            members=members,
        )

    @classmethod
    def load(
        cls, group_id: str, value: GroupMetadataValue, time_ms: Callable[[], int]
    ) -> GroupMetadata:
        """Rebuild a group from its last GroupMetadataValue: Stable with those members (they
        must heartbeat within their session timeout) or Empty."""
        has_members = bool(value.members) and value.protocol is not None
        group = cls(group_id, time_ms, GroupState.STABLE if has_members else GroupState.EMPTY)
        group.generation_id = value.generation
        if value.current_state_timestamp >= 0:
            group.state_timestamp = value.current_state_timestamp
        if has_members and value.protocol is not None:
            group.protocol_name = value.protocol
            for m in value.members:
                member = MemberMetadata(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout,
                    m.session_timeout,
                    value.protocol_type,
                    [(value.protocol, m.subscription)],
                )
                member.assignment = m.assignment
                group.add(member, None)
            if value.leader in group.members:
                group.leader_id = value.leader
        group.protocol_type = value.protocol_type or None
        return group

    def __repr__(self) -> str:
        return (
            f"GroupMetadata({self.group_id!r}, {self.state.value}, generation="
            f"{self.generation_id}, members={len(self.members)})"
        )
