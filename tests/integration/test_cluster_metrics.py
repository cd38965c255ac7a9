"""The cluster's metrics (issue 15) on every broker's ``metrics.port``, against what a real
client (confluent-kafka's metadata) says of the cluster: exactly one active controller;
UnderReplicatedPartitions once a broker is down; OfflinePartitionsCount for the partitions
whose only replica was on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.integration.cluster_support import Cluster, wait_for
from tests.integration.metrics_support import scrape, value
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = pytest.mark.cluster

CONTROLLER = "kafka_controller_KafkaController_"
REPLICA_MANAGER = "kafka_server_ReplicaManager_"


@pytest.fixture
def cluster(tmp_path, zookeeper: ZooKeeperProcess) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path / "cluster",
        f"{zookeeper.connect_string}/metrics-{uuid.uuid4().hex}",
        3,
        "default.replication.factor=3",
        metrics=True,
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _sum(c: Cluster, name: str) -> float:
    return sum(value(scrape(b), name) for b in c if b.alive())


def _expected(c: Cluster) -> tuple[int, int, int]:
    """(partitions with a live leader, under-replicated of those, offline) per the metadata."""
    md = c.admin().list_topics(timeout=5)
    led = under = offline = 0
    for t in md.topics.values():
        for p in t.partitions.values():
            if p.leader < 0:
                offline += 1
                continue
            led += 1
            if len(p.isrs) < len(p.replicas):
                under += 1
    return led, under, offline


def test_controller_and_replica_gauges_follow_the_cluster(cluster: Cluster) -> None:
    c = cluster
    c.create_topic("replicated", 3, 3)
    c.create_topic("single", 3, 1)  # one partition on each broker
    wait_for("one active controller", lambda: _sum(c, CONTROLLER + "ActiveControllerCount") == 1)

    # A broker learns a new partition's assignment a moment before its state (the
    # controller writes it next): wait for the settled cluster, then compare the gauges.
    def settled_at_start() -> bool:
        led, under, offline = _expected(c)
        return (under, offline) == (0, 0) and (
            _sum(c, REPLICA_MANAGER + "LeaderCount"),
            _sum(c, REPLICA_MANAGER + "UnderReplicatedPartitions"),
            _sum(c, CONTROLLER + "OfflinePartitionsCount"),
        ) == (led, 0, 0)

    wait_for("no offline or under-replicated partition, gauges agreeing", settled_at_start, 30)
    # Each broker hosts a replica of every "replicated" partition and one "single" partition.
    wait_for(
        "every broker hosting its replicas",
        lambda: all(value(scrape(b), REPLICA_MANAGER + "PartitionCount") >= 3 + 1 for b in c),
        30,
    )

    victim = c.brokers[3]
    gone = sum(1 for p in c.partitions("single").values() if p.replicas == [3])
    assert gone == 1
    victim.stop()

    def settled() -> bool:
        # The state after the failure, as the metadata and the gauges both see it: the
        # controller moved if it has to, every "replicated" ISR shrank, "single"'s partition
        # on broker 3 is offline.
        led, under, offline = _expected(c)
        shrunk = all(len(p.isrs) == 2 for p in c.partitions("replicated").values())
        return (
            shrunk
            and offline == gone
            and _sum(c, CONTROLLER + "ActiveControllerCount") == 1
            and _sum(c, CONTROLLER + "OfflinePartitionsCount") == offline
            and _sum(c, REPLICA_MANAGER + "UnderReplicatedPartitions") == under
            and _sum(c, REPLICA_MANAGER + "LeaderCount") == led
        )

    wait_for("the gauges agreeing with the metadata after broker 3 stopped", settled, 90)
    _, under, _ = _expected(c)
    assert under >= 3  # every "replicated" partition lost a replica
