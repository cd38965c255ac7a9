"""Transactions in a replicated partition: a follower replays the leader's transactional
batches and markers with the same log code, so after a failover the new leader knows the open
transaction (its last stable offset) and the aborted one (its .txnindex)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.cluster_support import Cluster, wait_for
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    fetch_partition,
    list_latest_offset,
    produce_batch,
    txn_batch,
    write_txn_markers,
)
from tests.integration.wire import WireClient
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("txn-cluster"),
        f"{zookeeper.connect_string}/txn-{uuid.uuid4().hex}",
        2,
        "default.replication.factor=2",
        "offsets.topic.replication.factor=2",
        "auto.leader.rebalance.enable=false",
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_the_new_leader_knows_open_and_aborted_transactions(cluster: Cluster) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, 2)
    leader_id = cluster.leader(topic, 0)
    leader = cluster.brokers[leader_id]
    (follower_id,) = set(cluster.brokers) - {leader_id}
    follower = cluster.brokers[follower_id]
    p1, p2 = random.sample(range(10**12, 2 * 10**12), 2)

    c = WireClient(leader.bootstrap)
    try:
        assert produce_batch(c, topic, 0, txn_batch(p1, [b"a", b"b"])) == (0, 0)
        assert produce_batch(c, topic, 0, txn_batch(p2, [b"c"])) == (0, 2)
        # Written and waited for as acks=all: the follower has the marker when this returns.
        assert write_txn_markers(c, p1, False, {topic: [0]}) == {(topic, 0): 0}
        assert list_latest_offset(c, topic, 0, READ_COMMITTED) == 2
    finally:
        c.close()

    leader.stop()  # controlled shutdown: the follower takes over
    wait_for("the follower leads", lambda: cluster.leader(topic, 0) == follower_id)
    c = WireClient(follower.bootstrap)
    try:
        got = fetch_partition(c, topic, 0, 0, READ_COMMITTED)
        assert (got.error_code, got.high_watermark, got.last_stable_offset) == (0, 4, 2)
        assert got.aborted == [(p1, 0)]
        assert list_latest_offset(c, topic, 0, READ_COMMITTED) == 2
        assert list_latest_offset(c, topic, 0, READ_UNCOMMITTED) == 4
        # The new leader ends P2's transaction; its coordinator epoch is the one it saw.
        assert write_txn_markers(c, p2, True, {topic: [0]}) == {(topic, 0): 0}
        assert list_latest_offset(c, topic, 0, READ_COMMITTED) == 5
        assert fetch_partition(c, topic, 0, 0, READ_COMMITTED).aborted == [(p1, 0)]
    finally:
        c.close()
    leader.start()
