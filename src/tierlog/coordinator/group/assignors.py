"""Server-side partition assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

Kafka's ``ConsumerGroupPartitionAssignor`` contract: from each member's subscribed topic ids
(and the target assignment it had before, for stickiness) and the partition count of each
topic, compute the new target assignment, member id -> topic id -> partitions. Every
partition of a subscribed topic goes to exactly one member subscribed to it. Pure functions.

* ``uniform`` (Kafka's ``UniformAssignor``, the default): balanced (member counts differ by
  at most one among members with the same subscriptions) and sticky (a partition stays with
  its previous owner unless balance requires moving it).
* ``range`` (Kafka's ``RangeAssignor``): per topic, the members subscribed to it in member id
  order get consecutive ranges; members with the same subscriptions thus get the same
  partition numbers of co-partitioned topics.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["ASSIGNORS", "MemberSubscription", "TargetAssignment", "range_assign", "uniform_assign"]

TargetAssignment = dict[str, dict[uuid.UUID, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What an assignor knows of a member: its subscribed topic ids and its previous target."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    previous: Mapping[uuid.UUID, frozenset[int]]


def _result(
    members: Mapping[str, MemberSubscription], owned: Mapping[str, set[tuple[uuid.UUID, int]]]
) -> TargetAssignment:
    out: TargetAssignment = {}
    for member_id in members:
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, p in owned.get(member_id, ()):
            by_topic.setdefault(topic_id, set()).add(p)
        out[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


def range_assign(
    members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, int]
) -> TargetAssignment:
    """Per topic, consecutive ranges to the subscribed members in member id order; the first
    ``partitions % members`` members get one more."""
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    for topic_id, num_partitions in sorted(topics.items()):
        subscribers = sorted(m for m, s in members.items() if topic_id in s.subscribed_topic_ids)
        if not subscribers:
            continue
        quota, extra = divmod(num_partitions, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            n = quota + (1 if i < extra else 0)
            owned[member_id].update((topic_id, p) for p in range(start, start + n))
            start += n
    return _result(members, owned)


def uniform_assign(
    members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, int]
) -> TargetAssignment:
    """Sticky and balanced: keep every previous partition that is still valid, give each
    unassigned partition to the least loaded subscribed member, then move partitions from the
    most to the least loaded member (among those subscribed to the partition's topic) while
    that narrows a gap of two or more. Ties are broken by member id, so the result is
    deterministic."""
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for member_id in sorted(members):
        sub = members[member_id]
        for topic_id, partitions in sub.previous.items():
            n = topics.get(topic_id)
            if n is None or topic_id not in sub.subscribed_topic_ids:
                continue
            for p in partitions:
                tp = (topic_id, p)
                if p < n and tp not in owner:
                    owner[tp] = member_id
                    owned[member_id].add(tp)
    subscribers = {
        t: sorted(m for m, s in members.items() if t in s.subscribed_topic_ids) for t in topics
    }
    for topic_id in sorted(topics):
        for p in range(topics[topic_id]):
            tp = (topic_id, p)
            if tp in owner:
                continue
            candidates = subscribers[topic_id]
            if not candidates:
                continue
            target = min(candidates, key=lambda m: (len(owned[m]), m))
            owner[tp] = target
            owned[target].add(tp)
    # Balance: move one partition at a time from the most to the least loaded eligible member.
    for _ in range(sum(topics.values()) + 1):
        moved = False
        for donor in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[donor]):
                receiver = min(subscribers[tp[0]], key=lambda m: (len(owned[m]), m))
                if len(owned[donor]) - len(owned[receiver]) >= 2:
                    owned[donor].discard(tp)
                    owned[receiver].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return _result(members, owned)


ASSIGNORS: Mapping[
    str,
    Callable[[Mapping[str, MemberSubscription], Mapping[uuid.UUID, int]], TargetAssignment],
] = {"uniform": uniform_assign, "range": range_assign}
"""The server assignors by Kafka's name (``group.consumer.assignors``)."""
