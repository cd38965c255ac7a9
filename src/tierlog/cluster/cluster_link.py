"""What the replica manager needs from the cluster, and the partition state it is given.

The replica manager (server/) stays free of ZooKeeper: in a cluster it gets a
:class:`ClusterLink` (:class:`tierlog.cluster.zk_broker.ZkBroker`) for the three things only the
cluster can do (know where a partition lives, fetch from another broker, write an ISR change);
on a single node it gets none and is a cluster of one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tierlog.cluster.partition import Partition

__all__ = ["ClusterLink", "PartitionChange"]


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """One partition's state as the controller wrote it (Kafka's LeaderAndIsr partition
    state), with what a broker needs to host it."""

    topic: str
    partition: int
    topic_id: uuid.UUID | None
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    #: The state znode's version (Kafka's partition epoch); the leader's ISR writes CAS on it.
    partition_epoch: int
    configs: Mapping[str, str] = field(default_factory=dict)


class ClusterLink(Protocol):
    """The cluster as the replica manager sees it."""

    def has_partition(self, topic: str, partition: int) -> bool:
        """Whether the partition exists in the cluster (hosted here or not)."""
        ...

    def add_fetcher(self, partition: Partition) -> None:
        """Fetch ``partition`` from its leader (after truncating as the leader's log says)."""
        ...

    def remove_fetcher(self, partition: Partition) -> None:
        """Stop fetching ``partition``."""
        ...

    async def alter_isr(self, partition: Partition, isr: frozenset[int]) -> bool:
        """Write ``isr`` as the partition's ISR (compare-and-set on its state znode); True
        when written. On a conflict the partition gets the state that won."""
        ...

    def expand_isr(self, partition: Partition, replica_id: int) -> None:
        """Add a caught-up follower to the ISR, in the background."""
        ...
