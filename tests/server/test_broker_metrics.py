"""BrokerTopicMetrics' bytes out, counted where a leader answers fetches (ReplicaManager.fetch
over a real LogManager, the stats read through the Prometheus registry): record bytes sent to
a consumer are ``BytesOutPerSec``, to a follower replica ``ReplicationBytesOutPerSec``; and a
replica fetcher's received bytes are ``ReplicationBytesInPerSec``, per topic and in total."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.records.default_records import build_batch
from tierlog.server.broker_metrics import BrokerMetrics
from tierlog.server.fetch_path import FetchPartitionRequest
from tierlog.server.replica_manager import ReplicaManager

BTM = "kafka_server_BrokerTopicMetrics_"


@pytest.fixture
def log_manager(tmp_path: Path) -> Iterator[LogManager]:
    lm = LogManager([tmp_path / "logs"], LogConfig())
    lm.startup()
    lm.create_topic("t", 1, {})
    lm.create_topic("u", 1, {})
    yield lm
    lm.shutdown()


def _sample(m: BrokerMetrics, name: str, **labels: str) -> float:
    value = m.registry.get_sample_value(BTM + name + "_total", labels)
    return 0.0 if value is None else value


def _fetch(rm: ReplicaManager, topic: str, replica_id: int) -> int:
    async def run() -> int:
        (r,) = await rm.fetch(
            [FetchPartitionRequest(topic, 0, 0, 1 << 20)],
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            replica_id=replica_id,
        )
        assert r.error_code == 0
        return r.size

    return asyncio.run(run())


def test_bytes_sent_to_followers_are_replication_bytes_out(log_manager: LogManager) -> None:
    rm = ReplicaManager(log_manager)
    m = BrokerMetrics()
    rm.topic_stats = m.topic_stats
    rm.append_records("t", 0, build_batch([(1_700_000_000_000, b"k", b"v" * 100)] * 3))
    rm.append_records("u", 0, build_batch([(1_700_000_000_000, b"k", b"w" * 50)]))
    to_follower = _fetch(rm, "t", replica_id=2)
    to_consumer = _fetch(rm, "t", replica_id=-1)
    other = _fetch(rm, "u", replica_id=3)
    assert to_follower == to_consumer > 300 and 50 < other < to_follower
    assert _sample(m, "ReplicationBytesOutPerSec", topic="t") == to_follower
    assert _sample(m, "ReplicationBytesOutPerSec", topic="u") == other
    assert _sample(m, "ReplicationBytesOutPerSec") == to_follower + other
    assert _sample(m, "BytesOutPerSec", topic="t") == to_consumer
    assert _sample(m, "BytesOutPerSec") == to_consumer  # the followers' bytes are not in it
    assert _sample(m, "ReplicationBytesInPerSec") == 0  # a leader's answers are not bytes in


def test_bytes_a_replica_fetcher_received_are_replication_bytes_in() -> None:
    m = BrokerMetrics()
    m.topic_stats.replication_bytes_in("t", 700)
    m.topic_stats.replication_bytes_in("t", 20)
    m.topic_stats.replication_bytes_in("u", 5)
    assert _sample(m, "ReplicationBytesInPerSec", topic="t") == 720
    assert _sample(m, "ReplicationBytesInPerSec", topic="u") == 5
    assert _sample(m, "ReplicationBytesInPerSec") == 725
    assert _sample(m, "BytesInPerSec") == 0  # not appended for clients
    m.topic_stats.remove_topic("u")  # a deleted topic's series goes, the total keeps it
    assert (
        m.registry.get_sample_value(BTM + "ReplicationBytesInPerSec_total", {"topic": "u"}) is None
    )
    assert _sample(m, "ReplicationBytesInPerSec") == 725
