"""Kafka's replica assignment (AdminUtils.assignReplicasToBrokers) and the checks of an
explicit one: vectors worked by hand from Kafka's algorithm, and its properties."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.cluster.replica_assignment import (
    assign_replicas_to_brokers,
    rack_alternated_broker_list,
    replica_index,
    validate_manual_assignment,
)
from tierlog.errors import InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor

# ------------------------------------------------------------------------------ vectors


def test_rack_unaware_vector_of_kafkas_admin_test():
    # Kafka's AdminTest.testReplicaAssignment: brokers 0-4, 10 partitions, RF 3, index 0.
    # p5 starts the second round: the shift grows to 1, so followers are +2, +3.
    assert assign_replicas_to_brokers(range(5), None, 10, 3, fixed_start_index=0) == {
        0: (0, 1, 2),
        1: (1, 2, 3),
        2: (2, 3, 4),
        3: (3, 4, 0),
        4: (4, 0, 1),
        5: (0, 2, 3),
        6: (1, 3, 4),
        7: (2, 4, 0),
        8: (3, 0, 1),
        9: (4, 1, 2),
    }


def test_rack_unaware_start_index_and_ids_sorted():
    # start index 2 and shift 2 over [10, 20, 30, 40]: p0's first replica is index 2 (30),
    # followers at +1+(2+0)%3 = +3 -> 20 and +1+(2+1)%3 = +1 -> 40.
    got = assign_replicas_to_brokers([40, 10, 30, 20], {}, 2, 3, fixed_start_index=2)
    assert got == {0: (30, 20, 40), 1: (40, 30, 10)}


def test_start_partition_id_continues_the_sequence():
    # CreatePartitions from 3 partitions to 5: the same as partitions 3-4 of a fresh
    # assignment with the same start index.
    whole = assign_replicas_to_brokers(range(3), None, 5, 2, fixed_start_index=1)
    more = assign_replicas_to_brokers(
        range(3), None, 2, 2, fixed_start_index=1, start_partition_id=3
    )
    assert more == {3: whole[3], 4: whole[4]}


def test_rack_alternated_list_of_kafkas_javadoc():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    nine = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated_broker_list(nine) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_rack_aware_vector_of_kafkas_javadoc():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas_to_brokers(range(6), racks, 7, 3, fixed_start_index=0)
    assert got == {
        0: (0, 3, 1),
        1: (3, 1, 5),
        2: (1, 5, 4),
        3: (5, 4, 2),
        4: (4, 2, 0),
        5: (2, 0, 3),
        6: (0, 4, 2),  # second round: the followers shift (instead of repeating 0,3,1)
    }


def test_rack_aware_skips_a_used_rack_until_every_rack_has_a_replica():
    # Alternated list [0 (a), 2 (b), 1 (a)], 2 racks. p2 leads on 1 (rack a); the next
    # candidate 0 is on rack a while b has no replica yet: skipped for 2, then 0 comes back
    # once both racks hold one.
    racks = {0: "a", 1: "a", 2: "b"}
    got = assign_replicas_to_brokers([0, 1, 2], racks, 3, 3, fixed_start_index=0)
    assert got == {0: (0, 2, 1), 1: (2, 1, 0), 2: (1, 2, 0)}


def test_replica_index_is_never_the_first_replica():
    for n in range(2, 8):
        for first in range(n):
            for shift in range(3 * n):
                for j in range(n - 1):
                    assert replica_index(first, shift, j, n) != first


# ------------------------------------------------------------------------------ errors


def test_replication_factor_larger_than_brokers():
    with pytest.raises(InvalidReplicationFactor) as e:
        assign_replicas_to_brokers([1, 2], None, 1, 3)
    assert str(e.value) == "Replication factor: 3 larger than available brokers: 2."
    assert e.value.error_code == 38


@pytest.mark.parametrize(
    ("n_partitions", "rf", "error", "message"),
    [
        (0, 1, InvalidPartitions, "Number of partitions must be larger than 0."),
        (1, 0, InvalidReplicationFactor, "Replication factor must be larger than 0."),
    ],
)
def test_non_positive_counts(n_partitions, rf, error, message):
    with pytest.raises(error, match=message):
        assign_replicas_to_brokers([1, 2], None, n_partitions, rf)


def test_some_brokers_without_rack():
    with pytest.raises(InvalidReplicaAssignment) as e:
        assign_replicas_to_brokers([1, 2, 3], {1: "a", 2: "b"}, 3, 2)
    assert str(e.value) == (
        "Not all brokers have rack information for replica rack aware assignment."
    )
    assert e.value.error_code == 39


# ------------------------------------------------------------------------------ properties

_brokers = st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True)


@st.composite
def _cluster(draw, racks: bool):
    brokers = draw(_brokers)
    rack_map = None
    if racks:
        names = draw(
            st.lists(st.sampled_from("abcdef"), min_size=len(brokers), max_size=len(brokers))
        )
        rack_map = dict(zip(brokers, names, strict=True))
    rf = draw(st.integers(1, len(brokers)))
    n = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32))
    fixed = draw(st.sampled_from([-1, -1, 0, draw(st.integers(0, 50))]))
    start = draw(st.sampled_from([-1, 0, draw(st.integers(1, 30))]))
    return brokers, rack_map, n, rf, seed, fixed, start


@given(_cluster(racks=False) | _cluster(racks=True))
def test_every_partition_gets_rf_distinct_given_brokers(c):
    brokers, racks, n, rf, seed, fixed, start = c
    got = assign_replicas_to_brokers(
        brokers, racks, n, rf, fixed_start_index=fixed, start_partition_id=start,
        rng=random.Random(seed),
    )  # fmt: skip
    first = max(0, start)
    assert sorted(got) == list(range(first, first + n))
    for replicas in got.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)


@given(_cluster(racks=False) | _cluster(racks=True))
def test_leaders_spread_evenly(c):
    brokers, racks, n, rf, seed, fixed, _ = c
    got = assign_replicas_to_brokers(
        brokers, racks, n, rf, fixed_start_index=fixed, rng=random.Random(seed)
    )
    leaders = Counter(replicas[0] for replicas in got.values())
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    if n % len(brokers) == 0:
        assert set(counts) == {n // len(brokers)}


@given(_cluster(racks=False))
def test_rack_unaware_replicas_spread_evenly_over_whole_rounds(c):
    brokers, _, n, rf, seed, fixed, _ = c
    n = len(brokers) * (1 + n % 3)
    got = assign_replicas_to_brokers(
        brokers, None, n, rf, fixed_start_index=fixed, rng=random.Random(seed)
    )
    per_broker = Counter(b for replicas in got.values() for b in replicas)
    assert set(per_broker.values()) == {n * rf // len(brokers)}


@given(_cluster(racks=True))
def test_rack_aware_uses_distinct_racks_while_racks_last(c):
    brokers, racks, n, rf, seed, fixed, _ = c
    assert racks is not None
    got = assign_replicas_to_brokers(
        brokers, racks, n, rf, fixed_start_index=fixed, rng=random.Random(seed)
    )
    n_racks = len(set(racks.values()))
    for replicas in got.values():
        used = [racks[b] for b in replicas]
        # each rack at most once while there are racks left, every rack once RF >= racks
        assert len(set(used)) == min(rf, n_racks)


@given(_cluster(racks=False) | _cluster(racks=True))
def test_same_random_source_same_assignment(c):
    brokers, racks, n, rf, seed, _, _ = c
    a = assign_replicas_to_brokers(brokers, racks, n, rf, rng=random.Random(seed))
    b = assign_replicas_to_brokers(list(reversed(brokers)), racks, n, rf, rng=random.Random(seed))
    assert a == b


# ------------------------------------------------------------------------------ manual


def test_manual_assignment_accepted():
    got = validate_manual_assignment({1: [2, 3], 0: [3, 1]}, {1, 2, 3})
    assert got == {1: (2, 3), 0: (3, 1)}
    assert validate_manual_assignment([(3, [1])], [1], replication_factor=1, first_partition=3)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ([(0, [1]), (0, [2])], "Found multiple manual partition assignments for partition 0"),
        ({0: []}, "The manual partition assignment includes an empty replica list."),
        (
            {0: [9, 1, 7]},
            "The manual partition assignment includes broker 7, but no such broker is registered.",
        ),
        ({0: [2, 1, 2]}, "The manual partition assignment includes the broker 2 more than once."),
        (
            {0: [1, 2], 1: [1]},
            "The manual partition assignment includes a partition with 1 replica(s), but this "
            "is not consistent with previous partitions, which have 2 replica(s).",
        ),
        ({0: [1], 2: [2]}, "partitions should be a consecutive 0-based integer sequence"),
        ({1: [1], 2: [2]}, "partitions should be a consecutive 0-based integer sequence"),
        ({-1: [1], 0: [2]}, "partitions should be a consecutive 0-based integer sequence"),
    ],
)
def test_manual_assignment_rejected(assignment, message):
    with pytest.raises(InvalidReplicaAssignment) as e:
        validate_manual_assignment(assignment, {1, 2, 3})
    assert str(e.value) == message
    assert e.value.error_code == 39


def test_manual_assignment_against_the_topics_replication_factor():
    with pytest.raises(InvalidReplicaAssignment, match="which have 3 replica"):
        validate_manual_assignment({2: [1, 2]}, {1, 2, 3}, replication_factor=3, first_partition=2)
    with pytest.raises(InvalidReplicaAssignment, match="consecutive"):
        validate_manual_assignment({0: [1, 2]}, {1, 2, 3}, replication_factor=2, first_partition=2)
