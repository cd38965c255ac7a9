"""Who leads a partition, and with which ISR: Kafka's ``Election.scala`` and
``PartitionLeaderElectionAlgorithms`` as pure functions.

The controller calls one of these per partition and writes the result to the partition's
state znode with the leader epoch bumped (:meth:`LeaderAndIsr.new_leader_and_isr`).
Candidates are always scanned in **assignment order** (the first replica is the preferred
leader); "live" means the broker is registered, its replica's log dir is online and -- except
for :func:`controlled_shutdown_leader` -- it is not shutting down (Kafka's
``isReplicaOnline``)::

    election          leader                                         new ISR
    ----------------  ---------------------------------------------  -------------------------
    new partition     first live assigned replica                    live assigned replicas
    offline           first live assigned replica in the ISR         old ISR ∩ live
      unclean         (none such, unclean.leader.election.enable)    [leader]  (RECOVERING)
                      first live assigned replica
    preferred         the first assigned replica, if live and in ISR unchanged
    reassignment      first live target replica in the ISR           unchanged
    controlled        first live ISR member not shutting down        ISR - shutting down
      shutdown

:func:`auto_leader_rebalance_candidates` picks the partitions of a preferred election run by
``auto.leader.rebalance.enable``.

None means no leader can be elected: the partition keeps its state (offline ones stay
offline, leader -1). The ISR is never shrunk to empty: an unclean leader gets ``[leader]``,
and :func:`remove_replica_from_isr` keeps a sole ISR member with leader -1, so the one
replica known to have every acknowledged record is remembered.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, TypeVar

__all__ = [
    "NO_LEADER",
    "ControlledShutdownResult",
    "ElectionResult",
    "LeaderAndIsr",
    "LeaderRecoveryState",
    "auto_leader_rebalance_candidates",
    "controlled_shutdown_leader",
    "new_partition_leader",
    "offline_partition_leader",
    "preferred_replica_leader",
    "reassign_partition_leader",
    "remove_replica_from_isr",
]

NO_LEADER: Final = -1
"""Kafka's ``LeaderAndIsr.NoLeader``."""


class LeaderRecoveryState:
    """KIP-704: whether an unclean leader may still be rebuilding the partition
    (``leader_recovery_state`` in the state znode, written only when RECOVERING)."""

    RECOVERED: Final = 0
    RECOVERING: Final = 1


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """A new leader and the ISR to write with it; ``unclean`` when the leader was not in
    the ISR (``unclean.leader.election.enable``): acknowledged records may be lost."""

    leader: int
    isr: tuple[int, ...]
    unclean: bool = False

    @property
    def leader_recovery_state(self) -> int:
        """RECOVERING after an unclean election (KIP-704), else RECOVERED."""
        return LeaderRecoveryState.RECOVERING if self.unclean else LeaderRecoveryState.RECOVERED


class ControlledShutdownResult(NamedTuple):
    """What :func:`controlled_shutdown_leader` returns: the new leader (None: none could be
    elected, leadership stays) and the ISR without the shutting-down brokers."""

    leader: int | None
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's state znode (``/brokers/topics/<t>/partitions/<p>/state``): Kafka's
    ``LeaderAndIsr``. ``partition_epoch`` is the znode's zkVersion. Immutable."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED
    partition_epoch: int = 0

    def new_leader(self, leader: int) -> LeaderAndIsr:
        """Another leader, the same ISR, the leader epoch + 1."""
        return self.new_leader_and_isr(leader, self.isr)

    def new_leader_and_isr(
        self,
        leader: int,
        isr: Sequence[int],
        leader_recovery_state: int | None = None,
    ) -> LeaderAndIsr:
        """A new leader and ISR with the leader epoch + 1; the recovery state is kept unless
        given (the partition epoch is the znode's, bumped by the write)."""
        if leader_recovery_state is None:
            leader_recovery_state = self.leader_recovery_state
        return LeaderAndIsr(
            leader, self.leader_epoch + 1, tuple(isr), leader_recovery_state, self.partition_epoch
        )

    def elected(self, result: ElectionResult) -> LeaderAndIsr:
        """The state after ``result``: its leader and ISR, the leader epoch + 1."""
        return self.new_leader_and_isr(result.leader, result.isr, result.leader_recovery_state)


def new_partition_leader(assignment: Sequence[int], live: Collection[int]) -> ElectionResult | None:
    """A new partition (NewPartition -> OnlinePartition): the first live assigned replica
    leads, every live assigned replica is in the ISR; None when no assigned replica is live."""
    live_replicas = tuple(r for r in assignment if r in live)
    if not live_replicas:
        return None
    return ElectionResult(live_replicas[0], live_replicas)


def offline_partition_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live_replicas: Collection[int],
    unclean_enabled: bool,
) -> ElectionResult | None:
    """An offline partition (its leader died, or none was elected yet): Kafka's
    ``offlinePartitionLeaderElection``.

    The first assigned replica that is live and in the ISR, with the ISR reduced to its live
    members (in ISR order). Failing that, when ``unclean_enabled``, the first live assigned
    replica, with ISR ``[leader]`` and ``unclean=True``. Else None.
    """
    for r in assignment:
        if r in live_replicas and r in isr:
            return ElectionResult(r, tuple(i for i in isr if i in live_replicas))
    if unclean_enabled:
        for r in assignment:
            if r in live_replicas:
                return ElectionResult(r, (r,), unclean=True)
    return None


def preferred_replica_leader(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> ElectionResult | None:
    """Preferred-leader election (ElectLeaders, auto rebalance): only the first assigned
    replica, and only if it is live and in the ISR; the ISR is unchanged."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return ElectionResult(assignment[0], tuple(isr))
    return None


def reassign_partition_leader(
    target: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> ElectionResult | None:
    """The end of a reassignment: the first replica of the target set that is live and in
    the ISR; the ISR is unchanged."""
    for r in target:
        if r in live and r in isr:
            return ElectionResult(r, tuple(isr))
    return None


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> ControlledShutdownResult:
    """A partition led by a broker in controlled shutdown: the first assigned replica that is
    live (here: live *or* shutting down, Kafka's ``liveOrShuttingDownReplicas``), in the ISR
    and not shutting down. The ISR drops every shutting-down broker.

    Returns (None, ISR without them) when no such replica exists: the leader stays where it
    is until it stops (Kafka reports the partition back to the broker as still led).
    """
    new_isr = tuple(r for r in isr if r not in shutting_down)
    for r in assignment:
        if r in live and r in isr and r not in shutting_down:
            return ControlledShutdownResult(r, new_isr)
    return ControlledShutdownResult(None, new_isr)


def remove_replica_from_isr(state: LeaderAndIsr, broker: int) -> LeaderAndIsr | None:
    """The state after ``broker`` leaves the ISR (its broker died or shuts down; Kafka's
    ``ReplicaStateMachine.doRemoveReplicasFromIsr``), or None when it is not in the ISR
    (nothing to write).

    The leader epoch is bumped; the leader becomes -1 if it was ``broker``. A sole ISR member
    stays in the ISR (with leader -1 when it was the leader): an ISR is never empty.
    """
    if broker not in state.isr:
        return None
    leader = NO_LEADER if state.leader == broker else state.leader
    isr = state.isr if len(state.isr) == 1 else tuple(r for r in state.isr if r != broker)
    return state.new_leader_and_isr(leader, isr)


P = TypeVar("P")


def auto_leader_rebalance_candidates(
    assignments: Mapping[P, Sequence[int]],
    states: Mapping[P, LeaderAndIsr],
    live: Collection[int],
    leader_imbalance_per_broker_percentage: int = 10,
) -> set[P]:
    """The partitions ``auto.leader.rebalance.enable`` moves back to their preferred leader
    (Kafka's ``checkAndTriggerAutoLeaderRebalance``).

    Partitions are grouped by preferred leader (first assigned replica). A broker whose share
    of partitions led elsewhere is above ``leader.imbalance.per.broker.percentage`` gets a
    preferred election for those of them whose preferred replica can lead now (live and in
    the ISR, :func:`preferred_replica_leader`). Partitions without a state are skipped; so are
    topics being deleted, which the caller leaves out of ``assignments``.
    """
    by_preferred: dict[int, list[P]] = {}
    for partition, replicas in assignments.items():
        if replicas:
            by_preferred.setdefault(replicas[0], []).append(partition)
    out: set[P] = set()
    for broker, partitions in by_preferred.items():
        elsewhere = [
            p for p in partitions if (st := states.get(p)) is not None and st.leader != broker
        ]
        if len(elsewhere) / len(partitions) > leader_imbalance_per_broker_percentage / 100:
            out.update(
                p
                for p in elsewhere
                if preferred_replica_leader(assignments[p], states[p].isr, live) is not None
            )
    return out
