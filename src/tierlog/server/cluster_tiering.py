"""Tiered storage in a cluster: the broker's wiring between tiered storage
(:mod:`tierlog.server.tiered_storage`) and the cluster (:mod:`tierlog.cluster`), kept out of
``broker.py``. See docs/architecture.md, "Tiered storage in a cluster".

* :func:`cluster_metadata_publisher` — the replicated ``__remote_log_metadata`` reached
  through its leaders (:mod:`tierlog.server.cluster_metadata_publisher`), with the topic's
  partition count when it already exists;
* :func:`follow_roles` — the remote log manager takes the roles the controller gives this
  broker (leaders copy and expire, followers track the highest remote offset) and drops
  deleted topics;
* :func:`rebuild_from_remote_storage` — the replica fetchers' tier state machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from tierlog.server.remote_log_metadata_publisher import REMOTE_LOG_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from tierlog.cluster.cluster_link import PartitionChange
    from tierlog.cluster.kafka_zk_client import KafkaZkClient
    from tierlog.cluster.metadata_cache import TopicMetadata
    from tierlog.cluster.partition import Partition
    from tierlog.cluster.zk_broker import ZkBroker
    from tierlog.server.cluster_metadata_publisher import ClusterMetadataPublisher
    from tierlog.server.replica_manager import ReplicaManager
    from tierlog.server.tiered_storage import TieredStorage

__all__ = ["cluster_metadata_publisher", "follow_roles", "rebuild_from_remote_storage"]


async def cluster_metadata_publisher(
    zk: KafkaZkClient, zk_broker: ZkBroker, node_id: int, default_partitions: int
) -> tuple[ClusterMetadataPublisher, int]:
    """The publisher of this broker, and the number of metadata partitions: the existing
    topic's, else ``default_partitions`` (``remote.log.metadata.topic.num.partitions``)."""
    from tierlog.cluster.broker_client import BrokerClient
    from tierlog.server.cluster_metadata_publisher import ClusterMetadataPublisher

    md = zk_broker.metadata

    def leader_of(partition: int) -> int:
        found = md.leader(REMOTE_LOG_METADATA_TOPIC_NAME, partition)
        return -1 if found is None else found[0]

    publisher = ClusterMetadataPublisher(
        leader_of,
        zk_broker.broker_address,
        lambda: BrokerClient(f"tierlog-broker-{node_id}-rlmm"),
        asyncio.get_running_loop(),
    )
    existing = await asyncio.to_thread(zk.get_topic_assignments, [REMOTE_LOG_METADATA_TOPIC_NAME])
    a = existing.get(REMOTE_LOG_METADATA_TOPIC_NAME)
    return publisher, len(a.partitions) if a is not None else default_partitions


def follow_roles(
    tiered: TieredStorage,
    zk_broker: ZkBroker,
    replica_manager: Callable[[], ReplicaManager | None],
    controller_active: Callable[[], bool],
) -> None:
    """Every applied partition state of a tiered topic tells tiered storage this broker's role
    (leader, follower, or none); a topic's config change re-announces its partitions (remote
    storage turned on); a deleted topic's remote data is deleted by the active controller's
    broker and forgotten by the others; so is a topic's once ``remote.storage.enable`` is
    turned off with ``remote.log.delete.on.disable=true``."""
    from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition

    def role(change: PartitionChange, p: Partition | None) -> None:
        if change.topic_id is None:
            return
        tiered_topic = (
            p.log.remote_log_enabled
            if p is not None
            else change.configs.get("remote.storage.enable", "").lower() == "true"
        )
        if tiered_topic:
            tp = TopicIdPartition(change.topic_id, change.topic, change.partition)
            tiered.partition_changed(tp, None if p is None else p.is_leader)

    def topic(t: TopicMetadata, deleted: bool) -> None:
        if t.topic_id is None:
            return
        if deleted:
            tiered.topic_deleted_in_cluster(
                t.name, t.topic_id, len(t.partitions), controller=controller_active()
            )
            return
        rm = replica_manager()
        for index in t.partitions:
            p = rm.get_partition(t.name, index) if rm is not None else None
            if p is not None and p.log.remote_log_enabled:
                tiered.partition_changed(TopicIdPartition(t.topic_id, t.name, index), p.is_leader)

    def configs_changed(t: TopicMetadata, old: dict[str, str]) -> None:
        if t.topic_id is None or not _remote_storage_disabled(old, t.configs):
            return
        tiered.remote_storage_disabled_in_cluster(
            t.name, t.topic_id, len(t.partitions), controller=controller_active()
        )

    zk_broker.on_partition_change(role)
    zk_broker.on_topic_change(topic)
    zk_broker.on_topic_configs_changed(configs_changed)


def _remote_storage_disabled(old: Mapping[str, str], new: Mapping[str, str]) -> bool:
    """``remote.storage.enable`` turned off with ``remote.log.delete.on.disable=true`` (the
    only way AlterConfigs lets it off: KIP-950)."""

    def on(configs: Mapping[str, str], key: str) -> bool:
        return configs.get(key, "false").strip().lower() == "true"

    return (
        on(old, "remote.storage.enable")
        and not on(new, "remote.storage.enable")
        and on(new, "remote.log.delete.on.disable")
    )


async def rebuild_from_remote_storage(
    tiered: TieredStorage,
    p: Partition,
    leader_local_log_start: int,
    leader_log_start: int,
    fetch_offset: int,
) -> None:
    """The replica fetchers' tier state machine: a follower below its leader's local log
    rebuilds its log from remote metadata (in a thread: remote storage blocks), unless its
    log moved on from ``fetch_offset`` meanwhile."""
    from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition
    from tierlog.tiered.tier_state_machine import build_remote_log_aux_state

    if p.topic_id is None:
        raise ValueError(f"{p} has no topic id")
    tp = TopicIdPartition(p.topic_id, p.topic, p.index)
    await asyncio.to_thread(
        build_remote_log_aux_state,
        tiered.rlm, tp, p.log, leader_local_log_start, leader_log_start, fetch_offset,
    )  # fmt: skip
