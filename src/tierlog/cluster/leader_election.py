"""Who leads a partition, and with which ISR: Kafka's ``Election.scala`` and
``PartitionLeaderElectionAlgorithms`` as pure functions.

The controller calls one of these per partition and writes the result to the partition's
state znode (``zk_data.PartitionState``) with the leader epoch bumped (:func:`elected`).
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
from dataclasses import dataclass, replace
from typing import NamedTuple, TypeVar

from tierlog.cluster.zk_data import NO_LEADER, RECOVERED, RECOVERING, PartitionState

__all__ = [
    "ControlledShutdownResult",
    "ElectionResult",
    "auto_leader_rebalance_candidates",
    "controlled_shutdown_leader",
    "elected",
    "new_partition_leader",
    "offline_partition_leader",
    "preferred_replica_leader",
    "reassign_partition_leader",
    "remove_replica_from_isr",
]


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
        return RECOVERING if self.unclean else RECOVERED


class ControlledShutdownResult(NamedTuple):
    """What :func:`controlled_shutdown_leader` returns: the new leader (None: none could be
    elected, leadership stays) and the ISR without the shutting-down brokers."""

    leader: int | None
    isr: tuple[int, ...]


def elected(state: PartitionState, result: ElectionResult, controller_epoch: int) -> PartitionState:
    """The state after ``result``: its leader and ISR, the leader epoch + 1, written by the
    controller of ``controller_epoch`` (the znode version is bumped by the write)."""
    return replace(
        state,
        leader=result.leader,
        leader_epoch=state.leader_epoch + 1,
        isr=result.isr,
        controller_epoch=controller_epoch,
        leader_recovery_state=result.leader_recovery_state,
    )


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


def remove_replica_from_isr(
    state: PartitionState, broker: int, controller_epoch: int
) -> PartitionState | None:
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
    return replace(
        state,
        leader=leader,
        leader_epoch=state.leader_epoch + 1,
        isr=isr,
        controller_epoch=controller_epoch,
    )


P = TypeVar("P")


def auto_leader_rebalance_candidates(
    assignments: Mapping[P, Sequence[int]],
    states: Mapping[P, PartitionState],
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
