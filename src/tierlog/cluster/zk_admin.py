"""Topic administration in a cluster (Kafka's ``ZkAdminManager`` and ``AdminZkClient``): any
broker answers CreateTopics, CreatePartitions and DeleteTopics by writing ZooKeeper; the
controller sees the change and elects leaders; the brokers see the new states and host their
replicas.

Kafka answers CreateTopics once the new partitions have leaders in the metadata (its
DelayedCreatePartitions, bounded by the request timeout); so does tierlog, from this broker's
metadata cache, so a client that produces right after creating finds the leaders.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError

from tierlog.cluster.replica_assignment import (
    assign_replicas_to_brokers,
    validate_manual_assignment,
)
from tierlog.cluster.zk_data import (
    PREFERRED_REPLICA_ELECTION_PATH,
    TopicAssignment,
    encode_preferred_replica_election,
)
from tierlog.errors import (
    ApiError,
    InvalidPartitions,
    InvalidTopic,
    NoReassignmentInProgress,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
    ZooKeeperClientError,
)
from tierlog.log.log_config import LogConfig
from tierlog.log.partition_metadata_file import random_kafka_uuid
from tierlog.log.topic_names import validate_topic_name

if TYPE_CHECKING:
    from tierlog.cluster.zk_broker import ZkBroker

__all__ = ["NewClusterTopic", "ZkAdminManager"]

log = logging.getLogger(__name__)

_PREFERRED_LEADER_NOT_AVAILABLE = 80
_ELECTION_NOT_NEEDED = 84


@dataclass(frozen=True, slots=True)
class NewClusterTopic:
    """A topic to create: a partition count and replication factor, or explicit replicas."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    assignment: Mapping[int, Sequence[int]] | None = None


class ZkAdminManager:
    """CreateTopics, CreatePartitions and DeleteTopics through ZooKeeper."""

    def __init__(self, broker: ZkBroker, default_config: LogConfig) -> None:
        self._broker = broker
        self._default_config = default_config

    def _racks(self) -> dict[int, str] | None:
        brokers = self._broker.metadata.brokers
        racks = {b: i.rack for b, i in brokers.items() if i.rack is not None}
        return racks or None

    def assignment_for(self, t: NewClusterTopic) -> dict[int, tuple[int, ...]]:
        """The replicas of every partition: validated when given, else Kafka's (rack-aware)
        round-robin over the live brokers.

        Raises:
            InvalidReplicationFactor, InvalidReplicaAssignment, InvalidPartitions, InvalidTopic,
            InvalidConfig (ConfigError): the topic cannot be created as asked.
        """
        validate_topic_name(t.name)
        self._default_config.with_overrides(t.configs)  # raises on a bad config
        live = self._broker.metadata.alive_broker_ids()
        if t.assignment is not None:
            return validate_manual_assignment(t.assignment, live)
        if t.num_partitions < 1:
            raise InvalidPartitions(
                f"Number of partitions was set to an invalid non-positive value: {t.num_partitions}"
            )
        return assign_replicas_to_brokers(
            live, self._racks(), t.num_partitions, t.replication_factor
        )

    async def create_topics(
        self, topics: Sequence[NewClusterTopic], *, validate_only: bool, timeout_ms: int
    ) -> list[TopicAssignment | ApiError]:
        """Create each topic (config znode, then the topic znode); each result is its
        assignment or the error for it. Waits up to ``timeout_ms`` for their leaders."""
        zk = self._broker.zk
        results: list[TopicAssignment | ApiError] = []
        for t in topics:
            try:
                replicas = self.assignment_for(t)
                if self._broker.metadata.topic(t.name) is not None:
                    raise TopicAlreadyExists(f"Topic '{t.name}' already exists.")
                for other in self._broker.metadata.topics():
                    if other.name.replace(".", "_") == t.name.replace(".", "_"):
                        raise InvalidTopic(
                            f"Topic '{t.name}' collides with existing topic: {other.name}"
                        )
                a = TopicAssignment(t.name, random_kafka_uuid(), replicas)
                if not validate_only:
                    await asyncio.to_thread(zk.create_topic, a, dict(t.configs))
                    log.info(
                        "created topic %s: %d partitions, replicas %s",
                        t.name, len(replicas), dict(sorted(replicas.items())),
                    )  # fmt: skip
                results.append(a)
            except ApiError as e:
                results.append(e)
        if not validate_only:
            created = [r for r in results if isinstance(r, TopicAssignment)]
            await self._wait_for_leaders(created, timeout_ms)
        return results

    async def _wait_for_leaders(self, topics: Sequence[TopicAssignment], timeout_ms: int) -> None:
        md = self._broker.metadata
        await self._broker.wait_for_metadata(
            lambda: all(md.leader(a.name, p) is not None for a in topics for p in a.partitions),
            timeout_ms / 1000,
        )

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignment: Sequence[Sequence[int]] | None,
        *,
        validate_only: bool,
        timeout_ms: int,
    ) -> None:
        """Grow a topic to ``count`` partitions (the new ones assigned round-robin, or as
        given).

        Raises:
            UnknownTopicOrPartition, InvalidPartitions, InvalidReplicaAssignment.
        """
        zk = self._broker.zk
        current = (await asyncio.to_thread(zk.get_topic_assignments, [name])).get(name)
        if current is None:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        have = len(current.partitions)
        if count < have:
            raise InvalidPartitions(
                f"Topic currently has {have} partitions, which is higher than the requested "
                f"{count}."
            )
        if count == have:
            raise InvalidPartitions(f"Topic already has {have} partitions.")
        live = self._broker.metadata.alive_broker_ids()
        if assignment is not None:
            added = validate_manual_assignment(
                {have + i: list(r) for i, r in enumerate(assignment)},
                live,
                first_partition=have,
            )
        else:
            rf = len(next(iter(current.partitions.values())))
            added = assign_replicas_to_brokers(
                live, self._racks(), count - have, rf, start_partition_id=have
            )
        if validate_only:
            return
        new = TopicAssignment(
            name,
            current.topic_id,
            {**current.partitions, **added},
            current.adding,
            current.removing,
            current.zk_version,
        )
        await asyncio.to_thread(zk.set_topic_assignment, new, current.zk_version, -1)
        await self._wait_for_leaders([new], timeout_ms)

    async def elect_preferred_leaders(
        self, partitions: Sequence[tuple[str, int]], timeout_ms: int
    ) -> dict[tuple[str, int], int]:
        """Preferred-leader election (ElectLeaders type 0): ``/admin/preferred_replica_election``
        for the controller, then wait (up to ``timeout_ms``) for the preferred replicas to
        lead. Per partition: 0 (elected), ELECTION_NOT_NEEDED (84, it already led),
        UNKNOWN_TOPIC_OR_PARTITION (3), PREFERRED_LEADER_NOT_AVAILABLE (80: not live or not
        in the ISR by the deadline)."""
        md = self._broker.metadata
        results: dict[tuple[str, int], int] = {}
        wanted: list[tuple[str, int]] = []
        for t, p in partitions:
            pm = md.partition(t, p)
            if pm is None:
                results[(t, p)] = UnknownTopicOrPartition.error_code
            elif pm.replicas and pm.leader == pm.replicas[0]:
                results[(t, p)] = _ELECTION_NOT_NEEDED
            else:
                wanted.append((t, p))
        if wanted:
            await asyncio.to_thread(
                self._broker.zk.set_or_create,
                PREFERRED_REPLICA_ELECTION_PATH,
                encode_preferred_replica_election(wanted),
            )

            def elected(tp: tuple[str, int]) -> bool:
                pm = md.partition(*tp)
                return pm is not None and bool(pm.replicas) and pm.leader == pm.replicas[0]

            await self._broker.wait_for_metadata(
                lambda: all(elected(tp) for tp in wanted), timeout_ms / 1000
            )
            for tp in wanted:
                results[tp] = 0 if elected(tp) else _PREFERRED_LEADER_NOT_AVAILABLE
        return results

    async def alter_reassignments(
        self, name: str, targets: Mapping[int, Sequence[int] | None]
    ) -> dict[int, ApiError | None]:
        """AlterPartitionReassignments for one topic (KIP-455 in ZooKeeper mode): each
        partition's target replicas, or None to cancel. Writes the topic znode (RS = target +
        original, ``adding_replicas``, ``removing_replicas``) with a compare-and-set; the
        controller does the rest. Per partition None or the error: UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_REPLICA_ASSIGNMENT (unknown or repeated brokers, an empty list),
        NO_REASSIGNMENT_IN_PROGRESS (cancelling none)."""
        zk = self._broker.zk
        live = self._broker.metadata.alive_broker_ids()
        for _ in range(10):
            current = (await asyncio.to_thread(zk.get_topic_assignments, [name])).get(name)
            if current is None:
                return {p: UnknownTopicOrPartition() for p in targets}
            partitions = dict(current.partitions)
            adding = dict(current.adding)
            removing = dict(current.removing)
            results: dict[int, ApiError | None] = {}
            for p, target in targets.items():
                if p not in partitions:
                    results[p] = UnknownTopicOrPartition(f"{name}-{p} does not exist")
                    continue
                adds = set(adding.get(p, ()))
                original = tuple(r for r in partitions[p] if r not in adds)
                if target is None:
                    if p not in adding and p not in removing:
                        results[p] = NoReassignmentInProgress(
                            f"no reassignment of {name}-{p} is in progress"
                        )
                        continue
                    partitions[p] = original
                    adding.pop(p, None)
                    removing.pop(p, None)
                    results[p] = None
                    continue
                try:
                    validate_manual_assignment({0: list(target)}, live)
                except ApiError as e:
                    results[p] = e
                    continue
                tgt = tuple(target)
                adding.pop(p, None)
                removing.pop(p, None)
                if set(tgt) == set(original):
                    partitions[p] = tgt
                else:
                    partitions[p] = tgt + tuple(r for r in original if r not in tgt)
                    if add := tuple(r for r in tgt if r not in original):
                        adding[p] = add
                    if rem := tuple(r for r in original if r not in tgt):
                        removing[p] = rem
                results[p] = None
            new = TopicAssignment(
                name, current.topic_id, partitions, adding, removing, current.zk_version
            )
            try:
                await asyncio.to_thread(zk.set_topic_assignment, new, current.zk_version, -1)
            except BadVersionError:
                continue  # changed meanwhile (the controller finished one): again
            log.info("reassignment of %s: %s", name, dict(targets))
            return results
        raise ZooKeeperClientError(f"the assignment of {name} keeps changing")

    def ongoing_reassignments(
        self, wanted: Mapping[str, Sequence[int]] | None
    ) -> dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]:
        """ListPartitionReassignments: topic -> partition -> (replicas, adding, removing),
        for the partitions of ``wanted`` (None: all) with a reassignment in progress."""
        out: dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]] = {}
        for t in self._broker.metadata.topics():
            if wanted is not None and t.name not in wanted:
                continue
            for p in sorted(set(t.adding) | set(t.removing)):
                if wanted is not None and wanted[t.name] and p not in wanted[t.name]:
                    continue
                pm = t.partitions.get(p)
                if pm is None:
                    continue
                out.setdefault(t.name, {})[p] = (
                    pm.replicas,
                    t.adding.get(p, ()),
                    t.removing.get(p, ()),
                )
        return out

    async def delete_topic(self, name: str) -> uuid.UUID | None:
        """Mark a topic for deletion (the controller deletes it); its id.

        Raises:
            UnknownTopicOrPartition: no such topic.
        """
        t = self._broker.metadata.topic(name)
        if t is None:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        await asyncio.to_thread(self._broker.zk.mark_topics_for_deletion, [name])
        return t.topic_id
