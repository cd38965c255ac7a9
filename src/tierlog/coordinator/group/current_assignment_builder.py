"""Reconciling a KIP-848 member towards its target assignment (Kafka's
``CurrentAssignmentBuilder``). Pure: values in, a new :class:`MemberAssignment` out.

Member states (Kafka's ``MemberState``; the value is the int8 stored in record type 8)::

                 target epoch moved on, partitions to revoke
      STABLE --------------------------------------------> UNREVOKED_PARTITIONS
        ^  ^                                                       |
        |  |  all revoked (the member's owned partitions           |
        |  |  no longer list them), nothing unreleased              |
        |  +-------------------------------------------------------+
        |                                                          | all revoked, but some
        |   the other owners released them                         v target partitions are
        +--------------------------------------------- UNRELEASED_PARTITIONS   still owned by others

* A partition is revoked by its old owner before it is given to the new one: while a member
  is in UNREVOKED_PARTITIONS it keeps its epoch and the partitions pending revocation still
  count as its own (their *partition epoch* is the member's epoch).
* A partition of the target that another member still owns is *unreleased*: the member moves
  to the target epoch without it (UNRELEASED_PARTITIONS) and picks it up on a later heartbeat.

Hence the invariant the coordinator relies on: at any time a partition is owned (assigned or
pending revocation) by at most one member.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["MemberAssignment", "MemberState", "reconcile"]

Assignment = Mapping[uuid.UUID, frozenset[int]]


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState``; the values are Kafka's."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """A member's epochs, state and the partitions it owns."""

    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    pending_revocation: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)

    def owned(self) -> set[tuple[uuid.UUID, int]]:
        """Every partition this member owns: assigned plus pending revocation."""
        return {
            (t, p)
            for a in (self.assigned, self.pending_revocation)
            for t, ps in a.items()
            for p in ps
        }


def _still_owns_any(owned_by_client: Assignment | None, revoking: Assignment) -> bool:
    """Kafka's ``ownsRevokedPartitions``: unknown (None) counts as still owning them."""
    if owned_by_client is None:
        return True
    return any(p in owned_by_client.get(t, frozenset()) for t, ps in revoking.items() for p in ps)


def _next(
    current: MemberAssignment,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    is_free: Callable[[uuid.UUID, int], bool],
    owned_by_client: Assignment | None,
) -> MemberAssignment:
    """Kafka's ``computeNextAssignment``."""
    new_assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    add: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(current.assigned) | set(target):
        have = current.assigned.get(topic_id, frozenset())
        want = target.get(topic_id, frozenset())
        if keep := have & want:
            new_assigned[topic_id] = keep
        if gone := have - want:
            revoke[topic_id] = gone
        free = frozenset(p for p in want - have if is_free(topic_id, p))
        if free:
            add[topic_id] = free
        if len(free) != len(want - have):
            unreleased = True
    if revoke and _still_owns_any(owned_by_client, revoke):
        return MemberAssignment(
            MemberState.UNREVOKED_PARTITIONS,
            member_epoch,
            current.member_epoch,
            new_assigned,
            revoke,
        )
    for topic_id, ps in add.items():
        new_assigned[topic_id] = new_assigned.get(topic_id, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    previous = (
        current.member_epoch
        if current.member_epoch != target_epoch
        else (current.previous_member_epoch)
    )
    return MemberAssignment(state, target_epoch, previous, new_assigned, {})


def reconcile(
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    is_free: Callable[[uuid.UUID, int], bool],
    owned_by_client: Assignment | None,
) -> MemberAssignment:
    """The member's next assignment (Kafka's ``CurrentAssignmentBuilder.build``).

    ``is_free(topic_id, partition)`` says whether no *other* member owns the partition;
    ``owned_by_client`` is what the heartbeat reported (None: not reported)."""
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns_any(owned_by_client, current.pending_revocation):
            return current
        # Revocation acknowledged: the partitions are released; move towards the target.
        released = MemberAssignment(
            MemberState.STABLE,
            current.member_epoch,
            current.previous_member_epoch,
            current.assigned,
            {},
        )
        return _next(released, current.member_epoch, target_epoch, target, is_free, owned_by_client)
    if current.state is MemberState.UNRELEASED_PARTITIONS or current.member_epoch != target_epoch:
        return _next(current, current.member_epoch, target_epoch, target, is_free, owned_by_client)
    return current
