"""MetadataCache: the broker list of Metadata responses keeps a departed broker for a moment
(see tierlog.cluster.metadata_cache), never as a live broker or a leader."""

from __future__ import annotations

from tierlog.cluster.metadata_cache import DEPARTED_BROKER_GRACE_S, MetadataCache
from tierlog.cluster.zk_data import BrokerEndPoint, BrokerInfo, PartitionState, TopicAssignment


def broker(i: int, epoch: int = 1) -> BrokerInfo:
    return BrokerInfo(
        i, (BrokerEndPoint("PLAINTEXT", "127.0.0.1", 9090 + i, "PLAINTEXT"),), None, epoch
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_departed_broker_stays_listed_for_the_grace_period_only() -> None:
    clock = Clock()
    md = MetadataCache(clock)
    md.set_brokers({1: broker(1), 2: broker(2), 3: broker(3)})
    assert set(md.listed_brokers()) == {1, 2, 3}
    md.set_brokers({1: broker(1), 3: broker(3)})
    assert set(md.brokers) == {1, 3}  # live: gone at once
    assert md.alive_broker_ids() == [1, 3]
    assert md.listed_brokers()[2] == broker(2)
    clock.now += DEPARTED_BROKER_GRACE_S - 0.01
    assert set(md.listed_brokers()) == {1, 2, 3}
    clock.now += 0.01
    assert set(md.listed_brokers()) == {1, 3}


def test_a_departed_broker_is_never_a_leader() -> None:
    clock = Clock()
    md = MetadataCache(clock)
    md.set_brokers({1: broker(1), 2: broker(2)})
    md.put_topic(TopicAssignment("t", None, {0: (2, 1)}), {0: PartitionState(2, 0, (2, 1), 1)})
    assert md.leader("t", 0) == (2, 0)
    md.set_brokers({1: broker(1)})
    assert 2 in md.listed_brokers()
    assert md.leader("t", 0) is None


def test_a_broker_that_comes_back_is_listed_with_its_new_registration() -> None:
    clock = Clock()
    md = MetadataCache(clock)
    md.set_brokers({1: broker(1), 2: broker(2)})
    md.set_brokers({1: broker(1)})
    md.set_brokers({1: broker(1), 2: broker(2, epoch=7)})
    assert md.listed_brokers()[2].epoch == 7
    clock.now += DEPARTED_BROKER_GRACE_S
    assert set(md.listed_brokers()) == {1, 2}  # live: not dropped with the old departure
