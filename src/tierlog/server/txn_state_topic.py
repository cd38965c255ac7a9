"""``__transaction_state``: created on first use, and the transaction coordinator following
its partitions' leadership.

Kafka creates the topic on the first FindCoordinator for a transactional id (or
InitProducerId): ``transaction.state.log.num.partitions`` partitions,
``transaction.state.log.replication.factor`` replicas, ``cleanup.policy=compact``,
uncompressed, ``segment.bytes=transaction.state.log.segment.bytes``,
``min.insync.replicas=transaction.state.log.min.isr``. On a single node the topic is created
at once and the coordinator loads every partition; the replication factor is 1 and
``min.insync.replicas`` is capped by it (Kafka would refuse every transaction with its default
min ISR of 2 on one broker). In a cluster it is created in the background (COORDINATOR_NOT_AVAILABLE
meanwhile, refused while fewer brokers than the replication factor are alive) and the
coordinator loads a partition when this broker becomes its leader
(:func:`coordinator_follows`).

Event loop only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tierlog.coordinator.transaction import TRANSACTION_STATE_TOPIC_NAME
from tierlog.errors import ApiError

if TYPE_CHECKING:
    from tierlog.cluster.cluster_link import PartitionChange
    from tierlog.cluster.partition import Partition
    from tierlog.coordinator.transaction import TransactionCoordinator
    from tierlog.server.kafka_apis import KafkaApis
    from tierlog.server.kafka_config import KafkaConfig

__all__ = [
    "coordinator_follows",
    "ensure_transaction_state_topic",
    "load_local_transaction_state",
    "transaction_state_topic_configs",
]

log = logging.getLogger(__name__)


def transaction_state_topic_configs(c: KafkaConfig, replication_factor: int) -> dict[str, str]:
    """Kafka's TransactionLog topic configs."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "segment.bytes": str(c.transaction_state_log_segment_bytes),
        "min.insync.replicas": str(min(c.transaction_state_log_min_isr, replication_factor)),
        "unclean.leader.election.enable": "false",
    }


def ensure_transaction_state_topic(apis: KafkaApis) -> bool:
    """True when ``__transaction_state`` exists; else create it (a single node at once, a
    cluster in the background) and say whether it exists now."""
    if apis.cluster is not None:
        if apis.cluster.metadata.topic(TRANSACTION_STATE_TOPIC_NAME) is not None:
            return True
        _create_in_cluster(apis)
        return False
    lm = apis.log_manager
    if lm.topic(TRANSACTION_STATE_TOPIC_NAME) is not None:
        return True
    c = apis.config
    lm.create_topic(
        TRANSACTION_STATE_TOPIC_NAME,
        c.transaction_state_log_num_partitions,
        transaction_state_topic_configs(c, 1),
    )
    log.info(
        "created %s with %d partitions",
        TRANSACTION_STATE_TOPIC_NAME,
        c.transaction_state_log_num_partitions,
    )
    apis.topic_changed(TRANSACTION_STATE_TOPIC_NAME)
    tc = getattr(apis, "txn_coordinator", None)
    if tc is not None:
        load_local_transaction_state(apis, tc)
    return True


def load_local_transaction_state(apis: KafkaApis, tc: TransactionCoordinator) -> None:
    """A single node leads every partition: load them all (at startup, or once created)."""
    info = apis.log_manager.topic(TRANSACTION_STATE_TOPIC_NAME)
    if info is None:
        return
    rm = apis.replica_manager
    for partition in range(info.num_partitions):
        p = rm.get_partition(TRANSACTION_STATE_TOPIC_NAME, partition)
        tc.on_election(partition, p.leader_epoch if p is not None else 0)


def coordinator_follows(
    tc: TransactionCoordinator, change: PartitionChange, p: Partition | None
) -> None:
    """A partition state applied in a cluster: load or unload ``__transaction_state``
    partitions as this broker gains or loses their leadership."""
    if change.topic != TRANSACTION_STATE_TOPIC_NAME:
        return
    if p is not None and p.is_leader:
        tc.on_election(change.partition, change.leader_epoch)
    else:
        tc.on_resignation(change.partition, change.leader_epoch)


def _create_in_cluster(apis: KafkaApis) -> None:
    from tierlog.cluster.zk_admin import NewClusterTopic

    admin = apis.admin
    if admin is None:
        return
    c = apis.config
    rf = c.transaction_state_log_replication_factor
    alive = len(apis.alive_brokers())
    if alive < rf:
        log.warning(
            "cannot create %s yet: transaction.state.log.replication.factor is %d and %d "
            "brokers are alive",
            TRANSACTION_STATE_TOPIC_NAME, rf, alive,
        )  # fmt: skip
        return
    topic = NewClusterTopic(
        TRANSACTION_STATE_TOPIC_NAME,
        c.transaction_state_log_num_partitions,
        rf,
        transaction_state_topic_configs(c, rf),
    )

    async def create() -> None:
        (result,) = await admin.create_topics([topic], validate_only=False, timeout_ms=0)
        if isinstance(result, ApiError):
            log.info("creating %s: %s", TRANSACTION_STATE_TOPIC_NAME, result)

    apis.in_background(f"create topic {TRANSACTION_STATE_TOPIC_NAME}", create())
