"""The KIP-848 consumer group state machine (sans-IO): joins, leaves, reconciliation, errors,
static members, records replayed into an equal group, and a hypothesis run over random
join/leave/heartbeat sequences (no partition is ever owned by two members)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.coordinator.group.assignors import (
    ASSIGNORS,
    MemberSubscription,
    range_assign,
    uniform_assign,
)
from tierlog.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    HeartbeatRequest,
    TopicImage,
)
from tierlog.coordinator.group.consumer_group_records import decode_consumer_group_key
from tierlog.coordinator.group.current_assignment_builder import MemberState
from tierlog.errors import (
    FencedMemberEpoch,
    GroupMaxSizeReached,
    InvalidRegularExpression,
    InvalidRequest,
    StaleMemberEpoch,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"orders": TopicImage(T1, 6), "audit": TopicImage(T2, 3)}
CONFIG = ConsumerGroupConfig()


def join(group, member_id, topics=("orders",), **kw):
    req = HeartbeatRequest(
        member_id,
        0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=tuple(topics),
        owned_topic_partitions={},
        **kw,
    )
    return group.heartbeat(req, TOPICS, CONFIG)


def beat(group, member_id, owned=None, epoch=None):
    m = group.members[member_id]
    req = HeartbeatRequest(
        member_id,
        m.member_epoch if epoch is None else epoch,
        owned_topic_partitions=owned,
    )
    return group.heartbeat(req, TOPICS, CONFIG)


def ack(group, member_id):
    """The client reports what it owns now (it revoked what it was told to)."""
    return beat(group, member_id, owned=dict(group.members[member_id].assignment.assigned))


def count(assignment):
    return sum(len(ps) for ps in (assignment or {}).values())


def test_first_member_gets_everything_at_epoch_1():
    g = ConsumerGroup("g")
    r = join(g, "a")
    assert (r.member_epoch, r.assignment) == (1, {T1: frozenset(range(6))})
    assert g.state is ConsumerGroupState.STABLE
    assert g.group_epoch == g.assignment_epoch == 1


def test_second_member_waits_for_revocation_then_gets_half():
    g = ConsumerGroup("g")
    join(g, "a")
    r = join(g, "b")
    # b moves to epoch 2 but its partitions are still a's: unreleased
    assert r.member_epoch == 2 and count(r.assignment) == 0
    assert g.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert g.state is ConsumerGroupState.RECONCILING
    ra = beat(g, "a")  # a is told to give three up; it keeps epoch 1 until it did
    assert ra.member_epoch == 1 and count(ra.assignment) == 3
    assert g.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert count(beat(g, "b").assignment) == 0  # still owned by a
    ra = ack(g, "a")
    assert ra.member_epoch == 2
    rb = beat(g, "b")
    assert count(rb.assignment) == 3 and rb.member_epoch == 2
    assert g.state is ConsumerGroupState.STABLE
    assert g.members["a"].assignment.assigned[T1].isdisjoint(rb.assignment[T1])


def test_leave_frees_partitions_for_the_others():
    g = ConsumerGroup("g")
    join(g, "a")
    join(g, "b")
    beat(g, "a")
    ack(g, "a")
    beat(g, "b")
    r = g.heartbeat(HeartbeatRequest("b", -1), TOPICS, CONFIG)
    assert r.member_epoch == -1
    ra = beat(g, "a")
    assert count(ra.assignment) == 6 and ra.member_epoch == g.group_epoch == 3


def test_errors():
    g = ConsumerGroup("g")
    join(g, "a")
    with pytest.raises(UnknownMemberId):
        beat_req = HeartbeatRequest("nobody", 1)
        g.heartbeat(beat_req, TOPICS, CONFIG)
    with pytest.raises(FencedMemberEpoch):
        beat(g, "a", epoch=5)
    with pytest.raises(InvalidRequest, match="RebalanceTimeoutMs"):
        g.heartbeat(
            HeartbeatRequest("c", 0, subscribed_topic_names=("x",), owned_topic_partitions={}),
            TOPICS,
            CONFIG,
        )
    with pytest.raises(InvalidRequest, match="MemberId can't be empty"):
        g.heartbeat(HeartbeatRequest("", 0), TOPICS, CONFIG)
    with pytest.raises(InvalidRequest, match="MemberEpoch -3"):
        g.heartbeat(HeartbeatRequest("a", -3), TOPICS, CONFIG)
    with pytest.raises(UnsupportedAssignor, match="Supported assignors: uniform, range"):
        join(g, "c", server_assignor="sticky")
    with pytest.raises(InvalidRegularExpression):
        g.heartbeat(
            HeartbeatRequest(
                "c",
                0,
                rebalance_timeout_ms=1,
                subscribed_topic_regex="(",
                owned_topic_partitions={},
            ),
            TOPICS,
            CONFIG,
        )
    with pytest.raises(GroupMaxSizeReached):
        g.heartbeat(
            HeartbeatRequest(
                "c", 0, rebalance_timeout_ms=1, subscribed_topic_names=("orders",),
                owned_topic_partitions={},
            ),
            TOPICS,
            ConsumerGroupConfig(max_size=1),
        )  # fmt: skip
    assert set(g.members) == {"a"}


def test_offset_commit_validation():
    g = ConsumerGroup("g")
    g.validate_offset_commit("", -1)  # admin commit to an empty group
    join(g, "a")
    g.validate_offset_commit("a", 1)
    with pytest.raises(StaleMemberEpoch):
        g.validate_offset_commit("a", 0)
    with pytest.raises(UnknownMemberId):
        g.validate_offset_commit("", -1)  # not while the group has members


def test_regex_subscription_and_range_assignor():
    g = ConsumerGroup("g")
    r = g.heartbeat(
        HeartbeatRequest(
            "a", 0, rebalance_timeout_ms=1, subscribed_topic_regex="ord.*",
            server_assignor="range", owned_topic_partitions={},
        ),
        TOPICS,
        CONFIG,
    )  # fmt: skip
    assert r.assignment == {T1: frozenset(range(6))}
    assert g.preferred_assignor(CONFIG) == "range"


def test_static_member_rejoins_with_its_assignment():
    g = ConsumerGroup("g")
    join(g, "a", instance_id="i1")
    join(g, "b")
    beat(g, "a")
    ack(g, "a")
    beat(g, "b")
    before = dict(g.members["a"].assignment.assigned)
    epoch = g.group_epoch
    r = g.heartbeat(HeartbeatRequest("a", -2, instance_id="i1"), TOPICS, CONFIG)
    assert r.member_epoch == -2
    r = join(g, "a2", instance_id="i1")
    assert r.assignment == before and g.group_epoch == epoch
    assert "a" not in g.members


def test_active_static_member_blocks_its_instance_id():
    g = ConsumerGroup("g")
    join(g, "a", instance_id="i1")
    with pytest.raises(UnreleasedInstanceId):
        join(g, "x", instance_id="i1")


def test_records_replay_into_the_same_group():
    g = ConsumerGroup("g")
    join(g, "a")
    join(g, "b", topics=("orders", "audit"))
    beat(g, "a")
    ack(g, "a")
    beat(g, "b")
    loaded = ConsumerGroup("g")
    for k, v in g.records:
        key = decode_consumer_group_key(k)
        assert key is not None and key.group_id == "g"
        loaded.replay(key, v)
    loaded.finish_loading(TOPICS)
    assert loaded.group_epoch == g.group_epoch
    assert loaded.assignment_epoch == g.assignment_epoch
    assert loaded.target_assignment == g.target_assignment
    assert {m: x.assignment for m, x in loaded.members.items()} == {
        m: x.assignment for m, x in g.members.items()
    }
    assert loaded.partition_epochs == g.partition_epochs
    assert loaded.state is g.state


# --------------------------------------------------------------------------- hypothesis

ops = st.lists(
    st.tuples(
        st.sampled_from(["join", "leave", "beat", "ack", "fence", "sleave", "sback"]),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=40,
)


def check_ownership(g: ConsumerGroup) -> None:
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for m in g.members.values():
        for tp in m.assignment.owned():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id
            assert g.partition_epochs[tp] == (m.member_id, m.member_epoch)
    assert set(seen) == set(g.partition_epochs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.sampled_from(["uniform", "range"]))
def test_no_partition_is_ever_owned_twice(sequence, assignor):
    config = ConsumerGroupConfig(assignors=(assignor,))
    g = ConsumerGroup("g")
    rejoins = 0

    def rejoin(n: int) -> None:
        """A static member (every third) comes back under a new member id."""
        nonlocal rejoins
        rejoins += 1
        g.heartbeat(
            HeartbeatRequest(
                f"m{n}-{rejoins}", 0, instance_id=f"i{n}", rebalance_timeout_ms=1,
                subscribed_topic_names=("orders",) if n % 2 else ("orders", "audit"),
                owned_topic_partitions={},
            ),
            TOPICS,
            config,
        )  # fmt: skip

    for op, n in sequence:
        static = n % 3 == 0
        mid = g.static_members.get(f"i{n}", f"m{n}")
        member = g.members.get(mid)
        if op == "join" and member is None:
            g.heartbeat(
                HeartbeatRequest(
                    mid, 0, instance_id=f"i{n}" if static else None, rebalance_timeout_ms=1,
                    subscribed_topic_names=("orders",) if n % 2 else ("orders", "audit"),
                    owned_topic_partitions={},
                ),
                TOPICS,
                config,
            )  # fmt: skip
        elif member is None:
            continue
        elif member.member_epoch == -2:
            if op == "sback":
                rejoin(n)
            elif op in ("fence", "leave"):  # its session expires
                g.fence_member(mid, TOPICS, config)
        elif op == "sleave" and static:
            g.heartbeat(HeartbeatRequest(mid, -2, instance_id=f"i{n}"), TOPICS, config)
        elif op == "leave":
            g.heartbeat(HeartbeatRequest(mid, -1), TOPICS, config)
        elif op == "fence":
            g.fence_member(mid, TOPICS, config)
        elif op == "beat":
            g.heartbeat(HeartbeatRequest(mid, member.member_epoch), TOPICS, config)
        elif op == "ack":
            owned = dict(member.assignment.assigned)
            g.heartbeat(
                HeartbeatRequest(mid, member.member_epoch, owned_topic_partitions=owned),
                TOPICS,
                config,
            )
        check_ownership(g)
    # Then every member keeps heartbeating and acknowledging: the group settles with every
    # partition owned exactly once.
    for m in list(g.members.values()):
        if m.member_epoch == -2:
            assert m.instance_id is not None
            rejoin(int(m.instance_id[1:]))
    for _ in range(len(g.members) * 3 + 2):
        for mid in list(g.members):
            m = g.members[mid]
            owned = dict(m.assignment.assigned)
            g.heartbeat(
                HeartbeatRequest(mid, m.member_epoch, owned_topic_partitions=owned), TOPICS, config
            )
            check_ownership(g)
    # The records written along the way replay into the same group (what a restart loads).
    loaded = ConsumerGroup("g")
    for k, v in g.records:
        key = decode_consumer_group_key(k)
        assert key is not None
        loaded.replay(key, v)
    loaded.finish_loading(TOPICS)
    assert (loaded.group_epoch, loaded.assignment_epoch) == (g.group_epoch, g.assignment_epoch)
    assert {m: x.assignment for m, x in loaded.members.items()} == {
        m: x.assignment for m, x in g.members.items()
    }
    assert loaded.target_assignment == g.target_assignment
    assert loaded.partition_epochs == g.partition_epochs
    if g.members:
        assert g.state is ConsumerGroupState.STABLE
        total = sum(count(m.assignment.assigned) for m in g.members.values())
        audit = any("audit" in m.subscribed_topic_names for m in g.members.values())
        assert total == 6 + (3 if audit else 0)


# --------------------------------------------------------------------------- assignors


def sub(*topics, previous=None):
    return MemberSubscription(frozenset(topics), previous or {})


def test_range_gives_consecutive_ranges_in_member_order():
    out = range_assign({"b": sub(T1), "a": sub(T1, T2)}, {T1: 5, T2: 3})
    assert out == {
        "a": {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})},
        "b": {T1: frozenset({3, 4})},
    }


def test_uniform_is_sticky_when_a_member_joins():
    first = uniform_assign({"a": sub(T1), "b": sub(T1)}, {T1: 6})
    assert sorted(len(x[T1]) for x in first.values()) == [3, 3]
    second = uniform_assign(
        {"a": sub(T1, previous=first["a"]), "b": sub(T1, previous=first["b"]), "c": sub(T1)},
        {T1: 6},
    )
    assert sorted(len(x[T1]) for x in second.values()) == [2, 2, 2]
    assert second["a"][T1] <= first["a"][T1] and second["b"][T1] <= first["b"][T1]


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.sampled_from([(T1,), (T2,), (T1, T2)]),
        min_size=1,
    ),
    st.integers(0, 12),
    st.integers(0, 12),
    st.sampled_from(["uniform", "range"]),
)
def test_assignors_give_each_partition_to_one_subscriber(subs, n1, n2, name):
    topics = {T1: n1, T2: n2}
    out = ASSIGNORS[name]({m: sub(*ts) for m, ts in subs.items()}, topics)
    owners: dict[tuple[uuid.UUID, int], str] = {}
    for member, assignment in out.items():
        for t, ps in assignment.items():
            assert t in subs[member]
            for p in ps:
                assert (t, p) not in owners
                owners[(t, p)] = member
    expected = {
        (t, p) for t, n in topics.items() for p in range(n) if any(t in s for s in subs.values())
    }
    assert set(owners) == expected
    if name == "uniform" and len(set(subs.values())) == 1:
        sizes = [sum(len(ps) for ps in a.values()) for a in out.values()]
        assert max(sizes) - min(sizes) <= 1


def test_the_previous_epoch_is_accepted_only_with_owned_partitions_it_still_has():
    """The answer that moved a member to a new epoch was lost: it may heartbeat with its
    previous epoch if what it reports owning is part of its assignment (Kafka's rule)."""
    g = ConsumerGroup("g")
    join(g, "a")
    join(g, "b")
    beat(g, "a")
    ack(g, "a")  # a moves from epoch 1 to 2
    assert g.members["a"].member_epoch == 2
    mine = dict(g.members["a"].assignment.assigned)
    r = g.heartbeat(HeartbeatRequest("a", 1, owned_topic_partitions=mine), TOPICS, CONFIG)
    assert r.member_epoch == 2 and r.assignment == mine
    with pytest.raises(FencedMemberEpoch, match="smaller member epoch"):
        g.heartbeat(HeartbeatRequest("a", 1), TOPICS, CONFIG)
    with pytest.raises(FencedMemberEpoch):
        g.heartbeat(
            HeartbeatRequest("a", 1, owned_topic_partitions={T1: frozenset(range(6))}),
            TOPICS,
            CONFIG,
        )
