"""Client quotas in a ZooKeeper cluster (issue 15): altered through one broker, they are in
``/config/clients`` as Kafka keeps them, and every broker describes and enforces them."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient

from tests.integration.cluster_support import Cluster, wait_for
from tests.integration.test_client_quotas import MB, SLOW, _alter, _describe
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("quota-cluster"),
        f"{zookeeper.connect_string}/quotas-{uuid.uuid4().hex}",
        2,
        "quota.window.num=3",
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_quotas_live_in_zookeeper_and_every_broker_enforces_them(cluster: Cluster) -> None:
    first, second = cluster.brokers[1], cluster.brokers[2]
    assert _alter(first.bootstrap, [(SLOW, [("producer_byte_rate", MB, False)])]) == [(0, None)]
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(30)
    try:
        data, _ = zk.get("/config/clients/slow")
        assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": str(MB)}}
        changes = zk.get_children("/config/changes")
        notes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in changes]
        assert {"version": 2, "entity_path": "clients/slow"} in notes
    finally:
        zk.stop()
        zk.close()
    expected = (0, None, [((("client-id", "slow"),), {"producer_byte_rate": MB})])
    wait_for("the other broker's quotas", lambda: _describe(second.bootstrap, []) == expected, 30)

    # A partition led by the other broker: its producer is throttled there too.
    topic = f"q-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=4, rf=1)
    leaders = cluster.partitions(topic)
    on_second = next(p for p, md in leaders.items() if md.leader == 2)
    throttles: list[float] = []
    p = Producer(
        {
            "bootstrap.servers": second.bootstrap,
            "client.id": "slow",
            "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
        }
    )
    end = time.monotonic() + 60
    while not any(throttles) and time.monotonic() < end:
        try:
            p.produce(topic, b"z" * 65536, partition=on_second)
        except BufferError:
            pass
        p.poll(0.01)
    p.flush(60)
    assert any(throttles), "no throttle from the broker leading the partition"
