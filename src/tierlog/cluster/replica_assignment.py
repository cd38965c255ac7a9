"""Which brokers hold the replicas of a new topic's partitions: Kafka's
``AdminUtils.assignReplicasToBrokers``, and the checks of an explicit assignment.

Pure functions, no I/O; the controller calls them on topic creation and partition addition.

Three goals (Kafka's words): spread the replicas evenly among brokers; for the partitions
assigned to a broker, spread their other replicas over the other brokers; if all brokers have
rack information, put the replicas of each partition on different racks where possible.

**Rack-unaware** (no broker has a rack). The first replica of each partition goes round-robin
from a random start index in the broker list; each further replica is shifted from the first
by ``1 + (shift + j) % (n - 1)``, and the shift grows by one after every ``n`` partitions, so
the followers of one leader do not always come in the same order. Five brokers, ten
partitions, start index 0 and shift 0::

    broker-0  broker-1  broker-2  broker-3  broker-4
    p0        p1        p2        p3        p4         (1st replica)
    p5        p6        p7        p8        p9         (1st replica)
    p4        p0        p1        p2        p3         (2nd replica)
    p8        p9        p5        p6        p7         (2nd replica)
    p3        p4        p0        p1        p2         (3rd replica)
    p7        p8        p9        p5        p6         (3rd replica)

**Rack-aware** (every broker has a rack). The same round-robin over a *rack-alternated* broker
list (one broker of each rack in turn, racks in name order, brokers in id order within a rack:
racks ``{r1: 0 5, r2: 3 4, r3: 1 2}`` give ``0 3 1 5 4 2``), the shift multiplied by the
number of racks; a further replica skips a broker whose rack already holds a replica while
some rack holds none, and a broker that already holds one while some broker holds none. So
with replication factor >= racks every rack gets a replica, and with fewer each rack at most
one.

Some brokers with a rack and others without is an error, as in Kafka.

Broker ids are sorted first, as Kafka's ``AdminZkClient.getBrokerMetadatas`` does before it
calls the assignment, so the result depends only on the set of brokers, the start index and
the shift (random unless fixed).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from tierlog.errors import InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor

__all__ = [
    "assign_replicas_to_brokers",
    "rack_alternated_broker_list",
    "replica_index",
    "validate_manual_assignment",
]

_RAND: Final = random.Random()


def replica_index(
    first_replica_index: int, second_replica_shift: int, replica_index: int, n_brokers: int
) -> int:
    """Kafka's ``replicaIndex``: the broker-list index of a partition's replica
    ``replica_index + 1`` (0 is the second replica), shifted from the first replica by
    ``1 + (second_replica_shift + replica_index) % (n_brokers - 1)`` -- never 0, so never the
    first replica's own broker."""
    shift = 1 + (second_replica_shift + replica_index) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Kafka's ``getRackAlternatedBrokerList``: brokers alternated by rack.

    Racks in name order, brokers in id order within a rack; one broker of each rack in turn
    until all are listed (``{r1: 0 1 2, r2: 3 4 5, r3: 6 7 8}`` gives ``0 3 6 1 4 7 2 5 8``).
    """
    by_rack: dict[str, list[int]] = {}
    for broker, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [sorted(by_rack[rack], reverse=True) for rack in sorted(by_rack)]
    result: list[int] = []
    i = 0
    while len(result) < len(broker_racks):
        if queues[i]:
            result.append(queues[i].pop())
        i = (i + 1) % len(queues)
    return result


def assign_replicas_to_brokers(
    broker_ids: Sequence[int],
    racks: Mapping[int, str] | None,
    n_partitions: int,
    replication_factor: int,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """``{partition: replicas}`` for ``n_partitions`` partitions numbered from
    ``max(0, start_partition_id)`` (CreatePartitions passes the current count); the first
    replica is the preferred leader.

    Args:
        broker_ids: the brokers to use (Kafka: the live ones); order does not matter.
        racks: ``broker.rack`` of each broker that has one; None or empty when none has.
        fixed_start_index: the start index *and* the initial shift when >= 0 (Kafka's tests
            and CreatePartitions of a topic whose first partition's leader is known); random
            otherwise, drawn from ``rng`` (start index first, then shift).
        rng: the random source (a module-level one by default).

    Raises:
        InvalidPartitions: ``n_partitions`` < 1.
        InvalidReplicationFactor: ``replication_factor`` < 1, or larger than the number of
            brokers ("Replication factor: 3 larger than available brokers: 2.").
        InvalidReplicaAssignment: some brokers have a rack and others do not ("Not all
            brokers have rack information for replica rack aware assignment."; Kafka raises
            AdminOperationException, which reaches the client as an unknown server error).
    """
    if n_partitions <= 0:
        raise InvalidPartitions("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactor("Replication factor must be larger than 0.")
    brokers = sorted(set(broker_ids))
    if len(brokers) != len(broker_ids):
        raise ValueError(f"duplicate broker ids in {list(broker_ids)}")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}."
        )
    rand = rng if rng is not None else _RAND
    with_rack = {b: racks[b] for b in brokers if racks and b in racks}
    if not with_rack:
        return _rack_unaware(
            n_partitions, replication_factor, brokers, fixed_start_index, start_partition_id, rand
        )
    if len(with_rack) != len(brokers):
        raise InvalidReplicaAssignment(
            "Not all brokers have rack information for replica rack aware assignment."
        )
    return _rack_aware(
        n_partitions, replication_factor, with_rack, fixed_start_index, start_partition_id, rand
    )


def _start(fixed_start_index: int, n: int, rand: random.Random) -> tuple[int, int]:
    """(start index, initial shift): both the fixed index, or two random draws (Kafka's
    order: start index first)."""
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    start = rand.randrange(n)
    return start, rand.randrange(n)


def _rack_unaware(
    n_partitions: int,
    replication_factor: int,
    brokers: list[int],
    fixed_start_index: int,
    start_partition_id: int,
    rand: random.Random,
) -> dict[int, tuple[int, ...]]:
    n = len(brokers)
    start_index, shift = _start(fixed_start_index, n, rand)
    partition = max(0, start_partition_id)
    out: dict[int, tuple[int, ...]] = {}
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [brokers[first]]
        replicas += (
            brokers[replica_index(first, shift, j, n)] for j in range(replication_factor - 1)
        )
        out[partition] = tuple(replicas)
        partition += 1
    return out


def _rack_aware(
    n_partitions: int,
    replication_factor: int,
    broker_racks: dict[int, str],
    fixed_start_index: int,
    start_partition_id: int,
    rand: random.Random,
) -> dict[int, tuple[int, ...]]:
    n_racks = len(set(broker_racks.values()))
    arranged = rack_alternated_broker_list(broker_racks)
    n = len(arranged)
    start_index, shift = _start(fixed_start_index, n, rand)
    partition = max(0, start_partition_id)
    out: dict[int, tuple[int, ...]] = {}
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_with_replicas = {broker_racks[leader]}
        brokers_with_replicas = {leader}
        k = 0
        for _j in range(replication_factor - 1):
            while True:
                broker = arranged[replica_index(first, shift * n_racks, k, n)]
                rack = broker_racks[broker]
                k += 1
                # Skip the broker if its rack already has a replica while some rack has none,
                # or if it already has one while some broker has none.
                if (rack not in racks_with_replicas or len(racks_with_replicas) == n_racks) and (
                    broker not in brokers_with_replicas or len(brokers_with_replicas) == n
                ):
                    replicas.append(broker)
                    racks_with_replicas.add(rack)
                    brokers_with_replicas.add(broker)
                    break
        out[partition] = tuple(replicas)
        partition += 1
    return out


def validate_manual_assignment(
    assignment: Mapping[int, Sequence[int]] | Iterable[tuple[int, Sequence[int]]],
    live_or_known_broker_ids: Iterable[int],
    *,
    replication_factor: int | None = None,
    first_partition: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Check an explicit assignment (CreateTopics ``assignments``, CreatePartitions); the
    assignment as ``{partition: replicas}``.

    Kafka's checks and messages (the KRaft controller's ``validateManualPartitionAssignment``:
    the ZooKeeper-mode CreateTopics did not check brokers at all, and its CreatePartitions
    answered unknown ones with BROKER_NOT_AVAILABLE), per partition in the given order:

    * "Found multiple manual partition assignments for partition 1" (given as pairs);
    * "The manual partition assignment includes an empty replica list.";
    * replicas checked in ascending id order: "The manual partition assignment includes
      broker 7, but no such broker is registered." / "... includes the broker 2 more than
      once.";
    * "The manual partition assignment includes a partition with 1 replica(s), but this is not
      consistent with previous partitions, which have 2 replica(s)." (against
      ``replication_factor`` when given -- the topic's, for CreatePartitions -- else against
      the first partition);

    then "partitions should be a consecutive 0-based integer sequence" unless the partitions
    are exactly ``first_partition .. first_partition + n - 1``.

    Raises:
        InvalidReplicaAssignment: any of the above (code 39).
    """
    known = set(live_or_known_broker_ids)
    pairs = assignment.items() if isinstance(assignment, Mapping) else assignment
    out: dict[int, tuple[int, ...]] = {}
    rf = replication_factor
    for partition, replicas in pairs:
        if partition in out:
            raise InvalidReplicaAssignment(
                f"Found multiple manual partition assignments for partition {partition}"
            )
        if not replicas:
            raise InvalidReplicaAssignment(
                "The manual partition assignment includes an empty replica list."
            )
        previous: int | None = None
        for broker in sorted(replicas):
            if broker not in known:
                raise InvalidReplicaAssignment(
                    f"The manual partition assignment includes broker {broker}, but no such "
                    "broker is registered."
                )
            if broker == previous:
                raise InvalidReplicaAssignment(
                    f"The manual partition assignment includes the broker {broker} more than once."
                )
            previous = broker
        if rf is not None and len(replicas) != rf:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes a partition with {len(replicas)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{rf} replica(s)."
            )
        rf = len(replicas)
        out[partition] = tuple(replicas)
    if sorted(out) != list(range(first_partition, first_partition + len(out))):
        raise InvalidReplicaAssignment(
            "partitions should be a consecutive 0-based integer sequence"
        )
    return out
