"""KIP-848 consumer groups in a three-broker ZooKeeper cluster: the coordinator is the leader
of the group's ``__consumer_offsets`` partition; when its broker is SIGKILLed the new leader
loads the group (record types 3-8, replicated like the offsets) and the members go on with
their epochs, every partition assigned, the commits kept."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration import wire
from tests.integration.cluster_support import SESSION_TIMEOUT_MS, Cluster, wait_for
from tests.integration.test_cluster_failover import (
    _coordinator,
    _group_offsets,
    _produce_sync_to,
)
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = pytest.mark.cluster

FAILOVER_S = SESSION_TIMEOUT_MS / 1000 + 30


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("kip848-cluster"),
        f"{zookeeper.connect_string}/kip848-{uuid.uuid4().hex}",
        3,
        "min.insync.replicas=2",
        "default.replication.factor=3",
        "offsets.topic.replication.factor=3",
        "auto.leader.rebalance.enable=false",
        "group.consumer.heartbeat.interval.ms=500",
        "group.consumer.min.heartbeat.interval.ms=100",
        "group.consumer.session.timeout.ms=20000",
        "group.consumer.min.session.timeout.ms=1000",
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _describe(cluster: Cluster, group: str):
    c = wire.WireClient(cluster.brokers[_coordinator(cluster, group)].bootstrap, timeout=10)
    try:
        req = wire.request_class(69, 0)(group_ids=(group,), include_authorized_operations=False)
        return c.call(req).groups[0]
    finally:
        c.close()


def test_a_consumer_group_moves_with_its_coordinator(cluster: Cluster) -> None:
    partitions = 6
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions, 3)
    cluster.wait_healthy(topic, partitions, 3)
    for p in range(partitions):
        out = _produce_sync_to(cluster, topic, p, [f"g{p}-{i}".encode() for i in range(20)])
        assert all(e is None for e, *_ in out)
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    members = [
        Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        for _ in range(3)
    ]
    for m in members:
        m.subscribe([topic])
    consumed: dict[int, list[int]] = {p: [] for p in range(partitions)}

    def poll_all() -> None:
        for m in members:
            for msg in m.consume(100, 0.05):
                if msg.error() is None:
                    consumed[msg.partition()].append(msg.offset())

    def assigned_everywhere() -> bool:
        poll_all()
        got = [tp.partition for m in members for tp in m.assignment()]
        return sorted(got) == list(range(partitions)) and all(m.assignment() for m in members)

    coordinator = -1
    try:
        wait_for("every partition assigned to the three members", assigned_everywhere, 90)
        wait_for("20 records of every partition", lambda: (poll_all(), all(
            len(v) >= 20 for v in consumed.values()))[1], 60)  # fmt: skip
        for m in members:
            offsets = [TopicPartition(topic, tp.partition, 15) for tp in m.assignment()]
            m.commit(offsets=offsets, asynchronous=False)
        committed = _group_offsets(cluster, group, topic, partitions)
        assert committed == {p: 15 for p in range(partitions)}
        before = _describe(cluster, group)
        assert before.group_state == "Stable" and len(before.members) == 3
        coordinator = _coordinator(cluster, group)
        cluster.brokers[coordinator].kill()
        wait_for(
            "a new coordinator",
            lambda: (lambda c: c if c not in (coordinator, -1) else None)(
                _coordinator(cluster, group)
            ),
            FAILOVER_S,
        )
        # The new coordinator loaded the group: the same members, no epoch reset.
        after = _describe(cluster, group)
        assert after.error_code == 0
        assert after.group_epoch >= before.group_epoch
        assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
        wait_for(
            "the group stable with every partition assigned",
            lambda: assigned_everywhere() and _describe(cluster, group).group_state == "Stable",
            90,
        )
        assert _group_offsets(cluster, group, topic, partitions) == committed
        for p in range(partitions):
            _produce_sync_to(cluster, topic, p, [f"g{p}-late".encode()])
        wait_for("the new records", lambda: (poll_all(), all(
            max(v) >= 20 for v in consumed.values()))[1], 60)  # fmt: skip
        for m in members:
            offsets = [TopicPartition(topic, tp.partition, 21) for tp in m.assignment()]
            m.commit(offsets=offsets, asynchronous=False)
        assert _group_offsets(cluster, group, topic, partitions) == {
            p: 21 for p in range(partitions)
        }
    finally:
        for m in members:
            m.close()
        if coordinator > 0 and not cluster.brokers[coordinator].alive():
            cluster.brokers[coordinator].start()
