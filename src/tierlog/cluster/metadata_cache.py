"""The cluster as this broker knows it: live brokers, the controller, every topic's assignment
and every partition's leader, epoch and ISR (Kafka's ``ZkMetadataCache``).

In Kafka's ZooKeeper mode the controller pushes this with UpdateMetadata; tierlog's brokers
read it from ZooKeeper watches (:mod:`tierlog.cluster.zk_broker`), which update this cache on
the event loop thread. Readers (Metadata, FindCoordinator, the replica fetchers) read it on the
same thread, so no lock. Topic entries are replaced, never mutated: a reader holding one sees a
consistent topic.

**Departed brokers stay listed for a moment.** A broker whose registration went (its session
expired) stays in :meth:`MetadataCache.listed_brokers`, the broker list of Metadata
responses, for :data:`DEPARTED_BROKER_GRACE_S`; it is never a leader there (leaders and offline
replicas come from the live brokers). The controller moves its leaderships a few milliseconds
after it leaves, so a client's next Metadata answer would otherwise drop the broker and name
the new leader at once, and librdkafka (2.x) then loses the move: decommissioning the broker
handle puts the partition back on its internal broker with no leader, until its next leader
query, a second later (retry.backoff.max.ms). Seen as one more second between a leader's
SIGKILL and the first write acknowledged by its successor. Listed a little longer, the broker
loses its partitions first and is decommissioned with none.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tierlog.cluster.zk_data import BrokerInfo, PartitionState, TopicAssignment

__all__ = ["DEPARTED_BROKER_GRACE_S", "MetadataCache", "PartitionMetadata", "TopicMetadata"]

#: How long a broker that left stays in the broker list of Metadata responses: longer than a
#: client's leader query backoff (librdkafka's and Java's retry.backoff.max.ms, 1 s).
DEPARTED_BROKER_GRACE_S = 3.0


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition: its replicas and the state the controller last wrote."""

    partition: int
    replicas: tuple[int, ...]
    #: None until the controller wrote the state znode (a partition being created).
    state: PartitionState | None

    @property
    def leader(self) -> int:
        return self.state.leader if self.state is not None else -1

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state is not None else ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID | None
    partitions: Mapping[int, PartitionMetadata]
    configs: Mapping[str, str] = field(default_factory=dict)
    #: Replicas being added / removed by a reassignment in progress, per partition.
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


class MetadataCache:
    """Brokers, controller and topics, as last read from ZooKeeper."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        #: The live brokers (registered in ZooKeeper).
        self.brokers: dict[int, BrokerInfo] = {}
        #: Brokers that left: their last registration and when they left (``clock``).
        self._departed: dict[int, tuple[BrokerInfo, float]] = {}
        self._clock = clock
        self.controller_id: int | None = None
        self._topics: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, str] = {}

    # ----------------------------------------------------------------- reads

    def topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def topics(self) -> Iterable[TopicMetadata]:
        return list(self._topics.values())

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._by_id.get(topic_id)

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        t = self._topics.get(topic)
        return t.partitions.get(partition) if t is not None else None

    def has_partition(self, topic: str, partition: int) -> bool:
        return self.partition(topic, partition) is not None

    def leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(leader id, leader epoch) of a partition with a live leader, else None."""
        p = self.partition(topic, partition)
        if p is None or p.leader < 0 or p.leader not in self.brokers:
            return None
        return p.leader, p.leader_epoch

    def alive_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def listed_brokers(self) -> dict[int, BrokerInfo]:
        """The brokers of Metadata responses: the live ones and those that left less than
        :data:`DEPARTED_BROKER_GRACE_S` ago (see the module's doc)."""
        if not self._departed:
            return self.brokers
        now = self._clock()
        grace = DEPARTED_BROKER_GRACE_S
        for b in [b for b, (_, at) in self._departed.items() if now - at >= grace]:
            del self._departed[b]
        return {**{b: info for b, (info, _) in self._departed.items()}, **self.brokers}

    # ----------------------------------------------------------------- updates

    def set_brokers(self, brokers: Mapping[int, BrokerInfo]) -> None:
        now = self._clock()
        for b, info in self.brokers.items():
            if b not in brokers:
                self._departed[b] = (info, now)
        for b in brokers:
            self._departed.pop(b, None)
        self.brokers = dict(brokers)

    def put_topic(
        self,
        assignment: TopicAssignment,
        states: Mapping[int, PartitionState],
        configs: Mapping[str, str] | None = None,
    ) -> TopicMetadata:
        """Replace a topic's entry with ``assignment``; partitions keep their known state
        unless ``states`` has a newer one."""
        old = self._topics.get(assignment.name)
        parts: dict[int, PartitionMetadata] = {}
        for p, replicas in sorted(assignment.partitions.items()):
            state = states.get(p)
            if state is None and old is not None and p in old.partitions:
                state = old.partitions[p].state
            parts[p] = PartitionMetadata(p, tuple(replicas), state)
        if configs is None:
            configs = old.configs if old is not None else {}
        t = TopicMetadata(
            assignment.name,
            assignment.topic_id,
            parts,
            dict(configs),
            dict(assignment.adding),
            dict(assignment.removing),
        )
        self._topics[assignment.name] = t
        if old is not None and old.topic_id is not None and old.topic_id != t.topic_id:
            self._by_id.pop(old.topic_id, None)
        if t.topic_id is not None:
            self._by_id[t.topic_id] = t.name
        return t

    def put_partition_state(self, topic: str, partition: int, state: PartitionState) -> bool:
        """Record a partition's state; False when the topic or partition is unknown, or
        ``state`` is older than the one known (a late watch)."""
        t = self._topics.get(topic)
        if t is None or partition not in t.partitions:
            return False
        old = t.partitions[partition]
        if old.state is not None and (
            state.leader_epoch,
            state.zk_version,
        ) < (old.state.leader_epoch, old.state.zk_version):
            return False
        parts = dict(t.partitions)
        parts[partition] = PartitionMetadata(partition, old.replicas, state)
        self._topics[topic] = TopicMetadata(
            t.name, t.topic_id, parts, t.configs, t.adding, t.removing
        )
        return True

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        t = self._topics.get(name)
        if t is not None:
            self._topics[name] = TopicMetadata(
                t.name, t.topic_id, t.partitions, dict(configs), t.adding, t.removing
            )

    def remove_topic(self, name: str) -> TopicMetadata | None:
        t = self._topics.pop(name, None)
        if t is not None and t.topic_id is not None:
            self._by_id.pop(t.topic_id, None)
        return t
