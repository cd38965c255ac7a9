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
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tierlog.cluster.replica_assignment import (
    assign_replicas_to_brokers,
    validate_manual_assignment,
)
from tierlog.cluster.zk_data import TopicAssignment
from tierlog.errors import (
    ApiError,
    InvalidPartitions,
    InvalidTopic,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import random_kafka_uuid, validate_topic_name

if TYPE_CHECKING:
    from tierlog.cluster.zk_broker import ZkBroker

__all__ = ["NewClusterTopic", "ZkAdminManager"]

log = logging.getLogger(__name__)


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
        deadline = time.monotonic() + timeout_ms / 1000
        md = self._broker.metadata
        while time.monotonic() < deadline:
            if all(md.leader(a.name, p) is not None for a in topics for p in a.partitions):
                return
            await asyncio.sleep(0.02)

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
