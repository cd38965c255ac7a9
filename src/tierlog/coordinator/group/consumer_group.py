"""A KIP-848 consumer group and its heartbeat state machine, sans-IO.

Kafka's ``ConsumerGroup`` plus the consumer-group half of its ``GroupMetadataManager``
(``consumerGroupHeartbeat``): :meth:`ConsumerGroup.heartbeat` takes one ConsumerGroupHeartbeat
(as a :class:`HeartbeatRequest`) and the topics as they are now, updates the group, and
returns the answer; every change is also queued as ``__consumer_offsets`` records
(:mod:`~tierlog.coordinator.group.consumer_group_records`) in :attr:`ConsumerGroup.records`
for the caller to append before answering. No I/O, no clock: session and rebalance timeouts
are the caller's (it calls :meth:`ConsumerGroup.fence_member`).

One heartbeat, in Kafka's order:

1. validate the request (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION);
2. find the member: epoch 0 joins (a new member, or a static member taking over its
   ``group.instance.id``: UNRELEASED_INSTANCE_ID while the old one is still active), -1 leaves,
   -2 is a static member leaving for a while (it keeps its partitions until its session
   expires); otherwise UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH unless the epoch is the
   member's, or its previous one with owned partitions a subset of its assignment (the answer
   that bumped it was lost);
3. update the member's subscription; a changed subscription, or changed partition counts of
   subscribed topics, bumps the *group epoch*;
4. a group epoch ahead of the *assignment epoch* computes a new *target assignment* with the
   server assignor (the one most members prefer, else the first of ``group.consumer.assignors``);
5. reconcile the member towards its target
   (:func:`~tierlog.coordinator.group.current_assignment_builder.reconcile`): partitions are
   revoked by their old owner before they are given to a new one.

Group states (Kafka's names)::

    Empty        no members
    Assigning    group epoch > assignment epoch (never seen here: the assignment is computed
                 in the same heartbeat)
    Reconciling  some member's epoch is not the assignment epoch, or it is not STABLE
    Stable       every member is STABLE at the assignment epoch
    Dead         deleted

Subscriptions by regex use Python's :mod:`re` with ``fullmatch`` (Kafka uses RE2/J, also full
match; the syntaxes agree on the common subset).

Not thread-safe: one event loop owns every group. Heartbeats are not idempotent.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from tierlog.coordinator.group.assignors import ASSIGNORS, MemberSubscription
from tierlog.coordinator.group.consumer_group_member import (
    ConsumerGroupConfig,
    ConsumerGroupMember,
    HeartbeatRequest,
    HeartbeatResult,
    TopicImage,
    compile_regex,
    is_subset,
)
from tierlog.coordinator.group.consumer_group_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_TYPE as _CURRENT_ASSIGNMENT,
)
from tierlog.coordinator.group.consumer_group_records import (
    CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE as _MEMBER_METADATA,
)
from tierlog.coordinator.group.consumer_group_records import (
    CONSUMER_GROUP_METADATA_KEY_TYPE as _GROUP_METADATA,
)
from tierlog.coordinator.group.consumer_group_records import (
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE as _TARGET_MEMBER,
)
from tierlog.coordinator.group.consumer_group_records import (
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_TYPE as _TARGET_METADATA,
)
from tierlog.coordinator.group.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataValue,
    decode_assignment_value,
    decode_epoch_value,
    encode_assignment_value,
    encode_epoch_value,
)
from tierlog.coordinator.group.current_assignment_builder import (
    MemberAssignment,
    MemberState,
    reconcile,
)
from tierlog.coordinator.group.group_metadata import CommittedOffset
from tierlog.errors import (
    FencedInstanceId,
    FencedMemberEpoch,
    GroupMaxSizeReached,
    InvalidRequest,
    StaleMemberEpoch,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
)

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "HeartbeatRequest",
    "HeartbeatResult",
    "TopicImage",
    "validate_heartbeat",
]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Assignment = Mapping[uuid.UUID, frozenset[int]]
Record = tuple[bytes, bytes | None]
TopicPartition = tuple[str, int]


class ConsumerGroupState(enum.Enum):
    """Kafka's ``ConsumerGroup.ConsumerGroupState``; the value is the wire name."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def validate_heartbeat(req: HeartbeatRequest, config: ConsumerGroupConfig) -> None:
    """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``: checks that need no group.

    Raises:
        InvalidRequest, UnsupportedAssignor, InvalidRegularExpression.
    """
    if not req.member_id:
        raise InvalidRequest("MemberId can't be empty.")
    if req.instance_id is not None and not req.instance_id:
        raise InvalidRequest("InstanceId can't be empty.")
    if req.rack_id is not None and not req.rack_id:
        raise InvalidRequest("RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise InvalidRequest("RebalanceTimeoutMs must be provided in first request.")
        if req.owned_topic_partitions is None or any(req.owned_topic_partitions.values()):
            raise InvalidRequest("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise InvalidRequest(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise InvalidRequest(
                "InstanceId can't be null when MemberEpoch is -2 (static member leaving)."
            )
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise InvalidRequest(f"MemberEpoch {req.member_epoch} is invalid.")
    if req.server_assignor is not None and req.server_assignor not in config.assignors:
        raise UnsupportedAssignor(
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
            + ", ".join(config.assignors)
            + "."
        )
    if req.subscribed_topic_regex:
        compile_regex(req.subscribed_topic_regex)


class ConsumerGroup:
    """A consumer group: members, epochs, target assignment, partition owners, offsets.

    ``partition_epochs`` maps every owned (topic id, partition) to its owner's member id and
    epoch (Kafka's ``currentPartitionEpoch``): a partition is in it at most once, which is how
    a partition is never given to a member before its previous owner revoked it. ``records``
    is the outbox of ``__consumer_offsets`` records, in the order the changes happened.

    Not thread-safe.
    """

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target_assignment: dict[str, Assignment] = {}
        self.partition_epochs: dict[tuple[uuid.UUID, int], tuple[str, int]] = {}
        #: subscribed topic name -> (id, partitions) when the target assignment was computed
        self.subscription_metadata: dict[str, TopicImage] = {}
        self.offsets: dict[TopicPartition, CommittedOffset] = {}
        self.records: list[Record] = []
        self.dead = False

    # ================================================================== state

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def preferred_assignor(self, config: ConsumerGroupConfig) -> str:
        """The server assignor most members ask for (ties: the first configured), else the
        first of ``group.consumer.assignors``."""
        counts = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not counts:
            return config.assignors[0]
        best = max(counts.values())
        return next(a for a in (*config.assignors, *sorted(counts)) if counts.get(a) == best)

    # ================================================================== heartbeat

    def heartbeat(
        self,
        req: HeartbeatRequest,
        topics: Mapping[str, TopicImage],
        config: ConsumerGroupConfig,
    ) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat (see the module docstring for the steps).

        Raises:
            InvalidRequest, UnsupportedAssignor, InvalidRegularExpression, UnknownMemberId,
            FencedMemberEpoch, FencedInstanceId, UnreleasedInstanceId, GroupMaxSizeReached:
                the request's error; the group is unchanged.
        """
        validate_heartbeat(req, config)
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(req, topics, config)
        member, bump = self._member_for(req, config)
        old_assigned = member.assignment.assigned
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=(
                req.rebalance_timeout_ms
                if req.rebalance_timeout_ms != -1
                else member.rebalance_timeout_ms
            ),
            subscribed_topic_names=(
                tuple(sorted(set(req.subscribed_topic_names)))
                if req.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (req.subscribed_topic_regex or None)
                if req.subscribed_topic_regex is not None
                else member.subscribed_topic_regex
            ),
            server_assignor=(
                req.server_assignor if req.server_assignor is not None else member.server_assignor
            ),
        )
        if (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
            or updated.server_assignor != member.server_assignor
        ):
            bump = True
        if (
            updated.metadata_value() != member.metadata_value()
            or member.member_id not in self.members
        ):
            self._emit(_MEMBER_METADATA, updated.member_id, updated.metadata_value().encode())
        self._put_member(updated)
        if self._refresh_subscription_metadata(topics):
            bump = True
        if bump:
            self._bump_group_epoch()
        self._maybe_update_target_assignment(config)
        owned = req.owned_topic_partitions
        if req.member_epoch == 0:
            owned = None  # a joining member owns nothing yet; it sent []
        self._reconcile(updated.member_id, owned)
        current = self.members[updated.member_id]
        send = (
            req.owned_topic_partitions is not None
            or req.member_epoch == 0
            or current.assignment.assigned != old_assigned
        )
        return HeartbeatResult(
            current.member_id,
            current.member_epoch,
            current.assignment.assigned if send else None,
        )

    def _member_for(
        self, req: HeartbeatRequest, config: ConsumerGroupConfig
    ) -> tuple[ConsumerGroupMember, bool]:
        """(the member the request is about, whether its arrival bumps the group epoch)."""
        member = self.members.get(req.member_id)
        if req.member_epoch == 0:
            if req.instance_id is not None:
                old_id = self.static_members.get(req.instance_id)
                if old_id is not None and old_id != req.member_id:
                    old = self.members[old_id]
                    if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise UnreleasedInstanceId(
                            f"Static member {old_id} with instance id {req.instance_id} is "
                            "not released yet."
                        )
                    return self._replace_static_member(old, req.member_id), False
            if member is None:
                if len(self.members) >= config.max_size:
                    raise GroupMaxSizeReached(
                        f"The consumer group has reached its maximum capacity of "
                        f"{config.max_size} members."
                    )
                return ConsumerGroupMember(req.member_id, req.instance_id), True
            # A known member rejoining from scratch gives up what it owned.
            return replace(member, assignment=MemberAssignment()), False
        if member is None:
            raise UnknownMemberId(
                f"Member {req.member_id} is not a member of group {self.group_id}."
            )
        if (
            member.instance_id is not None
            and req.instance_id is not None
            and member.instance_id != req.instance_id
        ):
            raise FencedInstanceId(f"Member {req.member_id} has another instance id.")
        epoch = member.member_epoch
        if req.member_epoch > epoch or (
            req.member_epoch < epoch
            and (
                req.member_epoch != member.assignment.previous_member_epoch
                or not is_subset(req.owned_topic_partitions, member.assignment.assigned)
            )
        ):
            raise FencedMemberEpoch(
                f"The consumer group member has a greater member epoch ({req.member_epoch}) "
                f"than the one known by the group coordinator ({epoch})."
                if req.member_epoch > epoch
                else f"The consumer group member has a smaller member epoch "
                f"({req.member_epoch}) than the one known by the group coordinator ({epoch})."
            )
        return member, False

    def _replace_static_member(
        self, old: ConsumerGroupMember, new_member_id: str
    ) -> ConsumerGroupMember:
        """A static member rejoins under a new member id: it takes the old one's epoch,
        assignment and target (no group epoch bump)."""
        target = self.target_assignment.get(old.member_id, {})
        self._remove_member(old.member_id)
        new = replace(old, member_id=new_member_id)
        prev = old.assignment.previous_member_epoch
        new.assignment = replace(
            old.assignment,
            member_epoch=prev if old.member_epoch < 0 else old.member_epoch,
        )
        self._set_target(new_member_id, target)
        return new

    def _leave(
        self, req: HeartbeatRequest, topics: Mapping[str, TopicImage], config: ConsumerGroupConfig
    ) -> HeartbeatResult:
        member = self.members.get(req.member_id)
        if member is None:
            raise UnknownMemberId(
                f"Member {req.member_id} is not a member of group {self.group_id}."
            )
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and member.instance_id is not None:
            # Keeps its partitions until its session expires or it comes back.
            left = replace(
                member,
                assignment=replace(
                    member.assignment,
                    member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    previous_member_epoch=member.member_epoch,
                ),
            )
            self._put_member(left, write_assignment=True)
            return HeartbeatResult(req.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH, None)
        self.fence_member(req.member_id, topics, config)
        return HeartbeatResult(req.member_id, LEAVE_GROUP_MEMBER_EPOCH, None)

    def fence_member(
        self, member_id: str, topics: Mapping[str, TopicImage], config: ConsumerGroupConfig
    ) -> bool:
        """Remove a member (left, session expired, or did not revoke within its rebalance
        timeout): its partitions are free, the group epoch is bumped and the target
        assignment recomputed. False when it is not a member."""
        if member_id not in self.members:
            return False
        self._remove_member(member_id)
        self._refresh_subscription_metadata(topics)
        self._bump_group_epoch()
        self._maybe_update_target_assignment(config)
        return True

    # ================================================================== internals

    def _emit(self, record_type: int, member_id: str, value: bytes | None) -> None:
        key = ConsumerGroupKey(record_type, self.group_id, member_id).encode()
        self.records.append((key, value))

    def _put_member(self, member: ConsumerGroupMember, *, write_assignment: bool = False) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._own(member)
        if write_assignment or old is None or old.assignment != member.assignment:
            self._emit_current_assignment(member)

    def _emit_current_assignment(self, member: ConsumerGroupMember) -> None:
        a = member.assignment
        value = ConsumerGroupCurrentMemberAssignmentValue(
            a.member_epoch, a.previous_member_epoch, int(a.state), a.assigned, a.pending_revocation
        )
        self._emit(_CURRENT_ASSIGNMENT, member.member_id, value.encode())

    def _release(self, member: ConsumerGroupMember) -> None:
        for tp in member.assignment.owned():
            if self.partition_epochs.get(tp, ("",))[0] == member.member_id:
                del self.partition_epochs[tp]

    def _own(self, member: ConsumerGroupMember) -> None:
        for tp in member.assignment.owned():
            holder = self.partition_epochs.get(tp)
            if holder is not None and holder[0] != member.member_id:
                raise AssertionError(
                    f"partition {tp} given to {member.member_id} while {holder[0]} owns it"
                )
            self.partition_epochs[tp] = (member.member_id, member.member_epoch)

    def _remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        self._release(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == (
            member_id
        ):
            del self.static_members[member.instance_id]
        self._emit(_CURRENT_ASSIGNMENT, member_id, None)
        if self.target_assignment.pop(member_id, None) is not None:
            self._emit(_TARGET_MEMBER, member_id, None)
        self._emit(_MEMBER_METADATA, member_id, None)

    def _bump_group_epoch(self) -> None:
        self.group_epoch = max(self.group_epoch, self.assignment_epoch) + 1
        self._emit(_GROUP_METADATA, "", encode_epoch_value(self.group_epoch))

    def _refresh_subscription_metadata(self, topics: Mapping[str, TopicImage]) -> bool:
        """Recompute the subscribed topics' metadata; True when it changed."""
        names = {n for m in self.members.values() for n in m.subscribed_topic_names}
        subscribed = {n: topics[n] for n in names if n in topics}
        # Regexes scan every topic, once per distinct expression (usually one per group).
        regexes = {r for m in self.members.values() if (r := m.subscribed_topic_regex)}
        for regex in regexes:
            pattern = compile_regex(regex)
            subscribed.update((n, t) for n, t in topics.items() if pattern.fullmatch(n))
        if subscribed == self.subscription_metadata:
            return False
        self.subscription_metadata = subscribed
        return True

    def _set_target(self, member_id: str, assignment: Assignment) -> None:
        clean = {t: ps for t, ps in assignment.items() if ps}
        if (
            self.target_assignment.get(member_id) != clean
            or member_id not in self.target_assignment
        ):
            self.target_assignment[member_id] = clean
            self._emit(_TARGET_MEMBER, member_id, encode_assignment_value(clean))

    def _maybe_update_target_assignment(self, config: ConsumerGroupConfig) -> None:
        if self.group_epoch <= self.assignment_epoch:
            return
        assignor = ASSIGNORS[self.preferred_assignor(config)]
        subscriptions = {
            member_id: MemberSubscription(
                frozenset(
                    image.topic_id
                    for name, image in self.subscription_metadata.items()
                    if m.subscribes_to(name)
                ),
                self.target_assignment.get(member_id, {}),
            )
            for member_id, m in self.members.items()
        }
        target = assignor(
            subscriptions,
            {image.topic_id: image.num_partitions for image in self.subscription_metadata.values()},
        )
        for member_id, assignment in target.items():
            self._set_target(member_id, assignment)
        self.assignment_epoch = self.group_epoch
        self._emit(_TARGET_METADATA, "", encode_epoch_value(self.assignment_epoch))

    def _reconcile(self, member_id: str, owned: Assignment | None) -> None:
        member = self.members[member_id]

        def is_free(topic_id: uuid.UUID, partition: int) -> bool:
            holder = self.partition_epochs.get((topic_id, partition))
            return holder is None or holder[0] == member_id

        nxt = reconcile(
            member.assignment,
            self.assignment_epoch,
            self.target_assignment.get(member_id, {}),
            is_free,
            owned,
        )
        if nxt != member.assignment:
            self._put_member(replace(member, assignment=nxt))

    # ================================================================== offsets

    def validate_offset_commit(self, member_id: str, member_epoch: int) -> None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: an admin or simple commit (epoch
        < 0) only to an empty group.

        Raises:
            UnknownMemberId: not a member.
            StaleMemberEpoch: not the member's current epoch.
        """
        if member_epoch < 0 and not self.members:
            return
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"Member {member_id} is not a member of group {self.group_id}.")
        if member_epoch != member.member_epoch:
            raise StaleMemberEpoch(
                f"The member epoch {member_epoch} is not the current one ({member.member_epoch})."
            )

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        """OffsetFetch v9+: a member (id given, epoch >= 0) must be known and current.

        Raises:
            UnknownMemberId, StaleMemberEpoch.
        """
        if member_id is None or member_epoch < 0:
            return
        self.validate_offset_commit(member_id, member_epoch)

    # ================================================================== loading

    def replay(self, key: ConsumerGroupKey, value: bytes | None) -> None:
        """Apply one record read back from ``__consumer_offsets`` (last writer wins).

        Raises:
            LocalProtocolError: a malformed value.
        """
        t = key.record_type
        mid = key.member_id
        if t == _GROUP_METADATA:
            self.group_epoch = 0 if value is None else decode_epoch_value(value)
        elif t == _TARGET_METADATA:
            self.assignment_epoch = 0 if value is None else decode_epoch_value(value)
        elif t == _MEMBER_METADATA:
            if value is None:
                self.members.pop(mid, None)
                return
            v = ConsumerGroupMemberMetadataValue.decode(value)
            m = self.members.get(mid) or ConsumerGroupMember(mid)
            self.members[mid] = replace(
                m,
                instance_id=v.instance_id,
                rack_id=v.rack_id,
                client_id=v.client_id,
                client_host=v.client_host,
                subscribed_topic_names=v.subscribed_topic_names,
                subscribed_topic_regex=v.subscribed_topic_regex,
                rebalance_timeout_ms=v.rebalance_timeout_ms,
                server_assignor=v.server_assignor,
            )
        elif t == _TARGET_MEMBER:
            if value is None:
                self.target_assignment.pop(mid, None)
            else:
                self.target_assignment[mid] = decode_assignment_value(value)
        elif t == _CURRENT_ASSIGNMENT:
            current = self.members.get(mid)
            if value is None or current is None:
                return
            a = ConsumerGroupCurrentMemberAssignmentValue.decode(value)
            try:
                state = MemberState(a.state)
            except ValueError:
                state = MemberState.UNKNOWN
            current.assignment = MemberAssignment(
                state,
                a.member_epoch,
                a.previous_member_epoch,
                dict(a.assigned_partitions),
                dict(a.partitions_pending_revocation),
            )

    def finish_loading(self, topics: Mapping[str, TopicImage]) -> None:
        """After :meth:`replay` of every record: rebuild the derived maps."""
        self.static_members = {
            m.instance_id: k for k, m in self.members.items() if m.instance_id is not None
        }
        self.partition_epochs = {}
        for m in self.members.values():
            for tp in m.assignment.owned():
                self.partition_epochs.setdefault(tp, (m.member_id, m.member_epoch))
        self._refresh_subscription_metadata(topics)
        self.records.clear()
