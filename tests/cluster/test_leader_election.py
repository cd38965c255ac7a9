"""Kafka's leader election rules (Election.scala, PartitionLeaderElectionAlgorithms):
Kafka's own cases, and properties over random assignments, ISRs and live sets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierlog.cluster.leader_election import (
    ControlledShutdownResult,
    ElectionResult,
    auto_leader_rebalance_candidates,
    controlled_shutdown_leader,
    elected,
    new_partition_leader,
    offline_partition_leader,
    preferred_replica_leader,
    reassign_partition_leader,
    remove_replica_from_isr,
)
from tierlog.cluster.zk_data import NO_LEADER, RECOVERING, PartitionState

# ------------------------------------------------------------------------------ cases
# Kafka's PartitionLeaderElectionAlgorithmsTest, plus the ISR each election writes.


def test_offline_election_picks_the_first_live_isr_member_in_assignment_order():
    assert offline_partition_leader([2, 4], [4, 2], {4, 2}, False) == ElectionResult(2, (4, 2))
    # the old ISR is reduced to its live members, in ISR order
    assert offline_partition_leader([1, 2, 3], [3, 1, 2], {2, 3}, False) == ElectionResult(
        2, (3, 2)
    )


def test_offline_election_clean_beats_unclean():
    assert offline_partition_leader([2, 4], [4], {4}, True) == ElectionResult(4, (4,))


def test_offline_election_without_live_isr_member():
    assert offline_partition_leader([2, 4], [2], {4}, False) is None
    unclean = offline_partition_leader([2, 4], [2], {4}, True)
    assert unclean == ElectionResult(4, (4,), unclean=True)
    assert unclean.leader_recovery_state == RECOVERING
    assert offline_partition_leader([2, 4], [2], set(), True) is None


def test_new_partition_leader():
    assert new_partition_leader([3, 1, 2], {1, 2}) == ElectionResult(1, (1, 2))
    assert new_partition_leader([3, 1, 2], {9}) is None


def test_preferred_replica_election():
    assert preferred_replica_leader([2, 4], [4, 2], {2, 4}) == ElectionResult(2, (4, 2))
    assert preferred_replica_leader([2, 4], [4], {2, 4}) is None  # not in the ISR
    assert preferred_replica_leader([2, 4], [4, 2], {4}) is None  # not live
    assert preferred_replica_leader([], [4], {4}) is None


def test_reassign_partition_election():
    assert reassign_partition_leader([2, 4], [4, 2], {2, 4}) == ElectionResult(2, (4, 2))
    assert reassign_partition_leader([2, 4], [4, 2], {4}) == ElectionResult(4, (4, 2))
    assert reassign_partition_leader([2, 4], [3], {2, 4}) is None


def test_controlled_shutdown_election():
    got = controlled_shutdown_leader([2, 4], [2, 4], {2, 4}, {2})
    assert got == ControlledShutdownResult(4, (4,))
    leader, isr = got  # unpacks like a tuple
    assert (leader, isr) == (4, (4,))
    # nobody left to take over: no leader, and the ISR still loses the shutting-down broker
    assert controlled_shutdown_leader([2, 4], [2], {2, 4}, {2}) == (None, ())
    assert controlled_shutdown_leader([2, 4], [2, 4], {2}, {2}) == (None, (4,))


def test_remove_replica_from_isr():
    state = PartitionState(
        leader=1, leader_epoch=5, isr=(1, 2, 3), controller_epoch=1, zk_version=7
    )
    assert remove_replica_from_isr(state, 2, 4) == PartitionState(1, 6, (1, 3), 4, 0, 7)
    assert remove_replica_from_isr(state, 1, 4) == PartitionState(NO_LEADER, 6, (2, 3), 4, 0, 7)
    assert remove_replica_from_isr(state, 9, 4) is None
    # A sole ISR member stays: the one replica known to have every acknowledged record.
    alone = PartitionState(leader=3, leader_epoch=2, isr=(3,), controller_epoch=1)
    assert remove_replica_from_isr(alone, 3, 1) == PartitionState(NO_LEADER, 3, (3,), 1)
    follower_alone = PartitionState(leader=NO_LEADER, leader_epoch=2, isr=(3,), controller_epoch=1)
    assert remove_replica_from_isr(follower_alone, 3, 1) == PartitionState(NO_LEADER, 3, (3,), 1)


def test_an_election_bumps_the_leader_epoch():
    state = PartitionState(leader=1, leader_epoch=5, isr=(1, 2), controller_epoch=1, zk_version=3)
    assert elected(state, ElectionResult(2, (1, 2)), 4) == PartitionState(2, 6, (1, 2), 4, 0, 3)
    unclean = elected(state, ElectionResult(3, (3,), unclean=True), 4)
    assert unclean == PartitionState(3, 6, (3,), 4, RECOVERING, 3)
    assert elected(unclean, ElectionResult(3, (3,)), 4).leader_recovery_state == 0


def test_auto_leader_rebalance_above_the_imbalance_percentage():
    # broker 1 prefers 10 partitions and leads 8: 20% > 10%; the two come back unless the
    # preferred replica cannot lead (out of the ISR)
    assignments = {p: (1, 2) for p in range(10)}
    states = {p: PartitionState(1, 0, (1, 2), 0) for p in range(8)}
    states[8] = PartitionState(2, 1, (2, 1), 0)
    states[9] = PartitionState(2, 1, (2, 1), 0)
    assert auto_leader_rebalance_candidates(assignments, states, {1, 2}) == {8, 9}
    states[9] = PartitionState(2, 1, (2,), 0)
    assert auto_leader_rebalance_candidates(assignments, states, {1, 2}) == {8}
    assert auto_leader_rebalance_candidates(assignments, states, {2}) == set()  # 1 is down
    # 20% is not above 20%
    assert auto_leader_rebalance_candidates(assignments, states, {1, 2}, 20) == set()
    # exactly one of 10 led elsewhere (10%) is not above the default 10%
    states[9] = PartitionState(1, 2, (1, 2), 0)
    assert auto_leader_rebalance_candidates(assignments, states, {1, 2}) == set()


# ------------------------------------------------------------------------------ properties


@st.composite
def _partition(draw):
    brokers = st.integers(0, 9)
    assignment = draw(st.lists(brokers, min_size=1, max_size=6, unique=True))
    order = draw(st.permutations(assignment))
    isr = order[: draw(st.integers(1, len(order)))]
    live = draw(st.sets(brokers))
    return assignment, list(isr), live


@given(_partition(), st.booleans())
def test_offline_election_properties(p, unclean_enabled):
    assignment, isr, live = p
    got = offline_partition_leader(assignment, isr, live, unclean_enabled)
    clean = [r for r in assignment if r in live and r in isr]
    if clean:
        assert got == ElectionResult(clean[0], tuple(r for r in isr if r in live))
        assert got.leader in got.isr
    elif unclean_enabled and any(r in live for r in assignment):
        assert got is not None and got.unclean
        assert got.leader == next(r for r in assignment if r in live)
        assert got.isr == (got.leader,)
    else:
        assert got is None
    if got is not None:
        assert got.leader in live
        assert got.isr  # never empty
        assert set(got.isr) <= live


@given(_partition())
def test_preferred_only_when_the_first_replica_is_live_and_in_isr(p):
    assignment, isr, live = p
    got = preferred_replica_leader(assignment, isr, live)
    if assignment[0] in live and assignment[0] in isr:
        assert got == ElectionResult(assignment[0], tuple(isr))
    else:
        assert got is None


@given(_partition())
def test_new_and_reassign_leaders_are_live(p):
    assignment, isr, live = p
    for got in (
        new_partition_leader(assignment, live),
        reassign_partition_leader(assignment, isr, live),
    ):
        if got is not None:
            assert got.leader in live
            assert got.leader in assignment
    new = new_partition_leader(assignment, live)
    assert (new is None) == (not set(assignment) & live)


@given(_partition(), st.sets(st.integers(0, 9)))
def test_controlled_shutdown_properties(p, shutting_down):
    assignment, isr, live = p
    leader, new_isr = controlled_shutdown_leader(assignment, isr, live, shutting_down)
    assert not set(new_isr) & shutting_down
    if leader is not None:
        assert leader in live and leader in new_isr and leader not in shutting_down
        assert leader == next(r for r in assignment if r in live and r in new_isr)


@given(_partition(), st.integers(0, 9), st.integers(0, 100))
def test_remove_replica_never_empties_the_isr(p, broker, epoch):
    _, isr, _ = p
    state = PartitionState(leader=isr[0], leader_epoch=epoch, isr=tuple(isr), controller_epoch=0)
    got = remove_replica_from_isr(state, broker, 0)
    if broker not in isr:
        assert got is None
        return
    assert got is not None
    assert got.isr
    assert got.leader_epoch == epoch + 1
    assert got.leader != broker
    assert broker not in got.isr or got.isr == (broker,)
