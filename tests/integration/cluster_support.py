"""A real cluster for the tests: ``tierlog serve`` processes on one real ZooKeeper (the session's
``zookeeper`` fixture, a chroot per cluster), and helpers that read its state through a real
client (confluent-kafka's AdminClient) and through ZooKeeper itself.

Waiting: every helper polls a *state* (a leader elected, the ISR complete) with a generous
deadline that only bounds a failure (tests/README.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

T = TypeVar("T")

#: Short enough for failover tests, long enough for a loaded 2-core machine (ZooKeeper's
#: tickTime is 500 ms in tests: sessions of 1-10 s are allowed).
SESSION_TIMEOUT_MS = 6000
LAG_TIME_MAX_MS = 4000


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0) -> T:
    """Poll ``probe`` until it returns something other than None/False; that value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except Exception as e:  # a broker restarting, a request timing out
            last = e
        if last is not None and last is not False and not isinstance(last, Exception):
            return last  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


class Cluster:
    """``n`` brokers with ids 1..n on ``zk_connect``."""

    def __init__(
        self, root: Path, zk_connect: str, n: int = 3, *overrides: str, metrics: bool = False
    ) -> None:
        self.zk_connect = zk_connect
        self.brokers: dict[int, BrokerProcess] = {}
        for i in range(1, n + 1):
            (root / f"broker-{i}").mkdir(parents=True, exist_ok=True)
            self.brokers[i] = BrokerProcess(
                root / f"broker-{i}",
                f"zookeeper.connect={zk_connect}",
                f"broker.id={i}",
                f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
                f"replica.lag.time.max.ms={LAG_TIME_MAX_MS}",
                "replica.fetch.wait.max.ms=200",
                "replica.fetch.backoff.ms=200",
                "group.initial.rebalance.delay.ms=0",
                "offsets.topic.num.partitions=6",
                "leader.imbalance.check.interval.seconds=5",
                *overrides,
                metrics=metrics,
            )

    def start(self) -> None:
        for b in self.brokers.values():
            b.start()
        wait_for("every broker registered", lambda: len(self.live_ids()) == len(self.brokers))

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.alive():
                b.stop()

    def __iter__(self) -> Iterator[BrokerProcess]:
        return iter(self.brokers.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.port is not None)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000})

    # ----------------------------------------------------------------- state

    def live_ids(self) -> set[int]:
        md = self.admin().list_topics(timeout=5)
        return set(md.brokers)

    def partitions(self, topic: str) -> dict[int, Any]:
        """confluent-kafka's PartitionMetadata (leader, replicas, isrs) per partition."""
        md = self.admin().list_topics(topic, timeout=5)
        t = md.topics[topic]
        if t.error is not None:
            raise RuntimeError(str(t.error))
        return dict(t.partitions)

    def create_topic(self, name: str, partitions: int = 3, rf: int = 3, **configs: str) -> None:
        admin = self.admin()  # kept alive until the result is in
        futures = admin.create_topics(
            [NewTopic(name, partitions, rf, config=dict(configs))], operation_timeout=30
        )
        futures[name].result(30)
        self.wait_healthy(name, partitions, rf)

    def wait_healthy(self, topic: str, partitions: int, rf: int, timeout: float = 60) -> None:
        """Every partition has a live leader and a full ISR."""

        def healthy() -> bool:
            ps = self.partitions(topic)
            return len(ps) == partitions and all(
                p.leader >= 0 and len(p.isrs) == rf for p in ps.values()
            )

        wait_for(f"{topic}: leaders and full ISRs", healthy, timeout)

    def leader(self, topic: str, partition: int) -> int:
        return int(self.partitions(topic)[partition].leader)

    def zk_state(self, zookeeper_connect: str, topic: str, partition: int) -> dict[str, Any]:
        """The partition's state znode, read with a plain kazoo client."""
        from kazoo.client import KazooClient

        hosts, _, chroot = zookeeper_connect.partition("/")
        zk = KazooClient(hosts=hosts)
        zk.start(timeout=10)
        try:
            data, _ = zk.get(f"/{chroot}/brokers/topics/{topic}/partitions/{partition}/state")
            return dict(json.loads(data))
        finally:
            zk.stop()
            zk.close()
