"""ZkBroker's live-broker list follows /brokers/ids in the order ZooKeeper changed it.

Each watch event re-reads /brokers/ids in a thread. Two reads in flight at once could finish
in the wrong order: a read that started before a broker died, finishing after the read that
saw it gone, listed the dead broker as live until the next change (seen in CI: a client sent
to the SIGKILLed broker long after failover). The ZooKeeper client here is a stand-in that
lets the test hold the first read back; the ordering is ZkBroker's, not ZooKeeper's.
"""

from __future__ import annotations

import asyncio
import threading

from tierlog.cluster.replica_fetcher import FetcherConfig
from tierlog.cluster.zk_broker import ZkBroker
from tierlog.cluster.zk_data import BrokerEndPoint, BrokerInfo


def _info(broker_id: int) -> BrokerInfo:
    ep = BrokerEndPoint("PLAINTEXT", "127.0.0.1", 9092 + broker_id, "PLAINTEXT")
    return BrokerInfo(broker_id, (ep,), None)


class SlowFirstRead:
    """``get_all_brokers`` whose first call reads brokers 1-3 and then waits for ``release``;
    later calls read what is registered now: brokers 2 and 3."""

    def __init__(self) -> None:
        self.first_read = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def get_all_brokers(self) -> dict[int, BrokerInfo]:
        with self._lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.first_read.set()
            assert self.release.wait(10), "the test never released the first read"
            return {b: _info(b) for b in (1, 2, 3)}
        return {b: _info(b) for b in (2, 3)}


async def _two_refreshes_overlap() -> tuple[list[int], int]:
    zk = SlowFirstRead()
    broker = ZkBroker(
        zk,  # type: ignore[arg-type]  # only get_all_brokers is used here
        None,
        2,
        inter_broker_listener="PLAINTEXT",
        fetcher_config=FetcherConfig(broker_id=2),
        client_factory=lambda: None,  # type: ignore[arg-type,return-value]
        loop=asyncio.get_running_loop(),
    )
    stale = asyncio.ensure_future(broker._refresh_brokers())
    await asyncio.to_thread(zk.first_read.wait, 10)
    # Broker 1 died while the first read was in flight: the watch fires again.
    fresh = asyncio.ensure_future(broker._refresh_brokers())
    # Give the second refresh every chance to read and apply before the first finishes.
    for _ in range(50):
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    calls_while_first_held = zk.calls
    zk.release.set()
    await asyncio.gather(stale, fresh)
    return broker.metadata.alive_broker_ids(), calls_while_first_held


def test_the_last_applied_broker_list_is_the_newest_read() -> None:
    alive, calls_while_first_held = asyncio.run(_two_refreshes_overlap())
    assert alive == [2, 3]
    # The second read waited for the first to be applied (it did not read alongside it).
    assert calls_while_first_held == 1
