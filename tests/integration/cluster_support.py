"""A real cluster for the tests: ``tierlog serve`` processes on one real ZooKeeper (the session's
``zookeeper`` fixture, a chroot per cluster), and helpers that read its state through a real
client (confluent-kafka's AdminClient) and through ZooKeeper itself.

Waiting: every helper polls a *state* (a leader elected, the ISR complete) with a generous
deadline that only bounds a failure (tests/README.md).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.integration.proxy import recv_exact_or_none

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


class LinkProxy:
    """A TCP proxy in front of one broker's inter-broker listener that can cut chosen peers
    off, as a network partition would: a connection whose requests carry a cut client id
    (a follower's fetcher is ``tierlog-broker-<id>-fetcher``) is black-holed: nothing more
    is forwarded either way, and the connection stays open (the peer sees no error, only
    silence, until its request times out). :meth:`heal` closes the black-holed connections,
    so the peers reconnect at once and are forwarded again.

    ``target`` is called per connection: the broker's listener port changes on restart.
    """

    def __init__(self, target: Callable[[], tuple[str, int] | None]) -> None:
        self.target = target
        self._cut: set[str] = set()
        self._lock = threading.Lock()
        self._conns: list[_Link] = []
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"link-{self.port}").start()

    def cut(self, *client_ids: str) -> None:
        """Black-hole every connection of these client ids from now on (open ones too)."""
        with self._lock:
            self._cut.update(client_ids)
            for c in self._conns:
                if c.client_id in self._cut:
                    c.held = True

    def heal(self) -> None:
        """Forward everything again; black-holed connections are closed."""
        with self._lock:
            self._cut.clear()
            held = [c for c in self._conns if c.held]
            self._conns = [c for c in self._conns if not c.held]
        for c in held:
            c.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # ECONNABORTED and the like: keep listening
                continue
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        target = self.target()
        try:
            if target is None:
                raise OSError("no broker behind the proxy")
            upstream = socket.create_connection(target, timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()
            return
        link = _Link(client, upstream)
        with self._lock:
            self._conns = [c for c in self._conns if not c.closed]
            self._conns.append(link)
        threading.Thread(target=self._down, args=(link,), daemon=True).start()
        self._up(link)

    def _up(self, link: _Link) -> None:
        while not link.closed:
            head = recv_exact_or_none(link.client, 4)
            if head is None:
                break
            (size,) = struct.unpack(">i", head)
            body = recv_exact_or_none(link.client, size)
            if body is None:
                break
            (n,) = struct.unpack_from(">h", body, 8)  # header: key, version, correlation, id
            client_id = body[10 : 10 + n].decode(errors="replace") if n >= 0 else ""
            with self._lock:
                link.client_id = client_id
                if client_id in self._cut:
                    link.held = True
            if link.held:
                continue  # swallowed: the broker never sees it
            try:
                link.upstream.sendall(head + body)
            except OSError:
                break
        link.close()  # either side went away (a held link is closed by heal() otherwise)

    def _down(self, link: _Link) -> None:
        while not link.closed:
            try:
                data = link.upstream.recv(65536)
            except OSError:
                break
            if not data:
                break
            if link.held:
                continue  # a response to a request sent before the cut: lost
            try:
                link.client.sendall(data)
            except OSError:
                break
        link.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()


class _Link:
    __slots__ = ("client", "client_id", "closed", "held", "upstream")

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.client_id = ""
        self.held = False
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()


_LISTENING = re.compile(r"listening on [^,\s]+:\d+, ([^,\s]+):(\d+)")


class ClusterBroker(BrokerProcess):
    """A cluster member. With a :class:`LinkProxy`, it has two listeners: ``PLAINTEXT`` for
    clients (its own port, the first advertised) and ``REPLICATION`` for the other brokers
    (``inter.broker.listener.name``), advertised at the proxy's port, so every connection
    another broker makes to it goes through the proxy."""

    def __init__(
        self, workdir: Path, *overrides: str, link: LinkProxy | None = None, metrics: bool = False
    ) -> None:
        super().__init__(workdir, *overrides, metrics=metrics)
        self.link = link
        self.replication_port: int | None = None

    @property
    def overrides(self) -> list[str]:
        base = super().overrides
        if self.link is None:
            return base
        port = self.port or 0
        return [
            f"listeners=PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:0",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},"
            f"REPLICATION://127.0.0.1:{self.link.port}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name=REPLICATION",
            *base[1:],
        ]

    def start(self, timeout: float = 60.0) -> None:
        self.replication_port = None
        super().start(timeout)
        if self.link is not None:
            found = _LISTENING.findall(self.log_since_start())
            assert found, "no REPLICATION listener in the start line"
            self.replication_port = int(found[-1][1])

    def replication_address(self) -> tuple[str, int] | None:
        if self.replication_port is None or not self.alive():
            return None
        return ("127.0.0.1", self.replication_port)


def fetcher_id(broker_id: int) -> str:
    """The client id of a broker's replica fetchers (what a :class:`LinkProxy` cuts)."""
    return f"tierlog-broker-{broker_id}-fetcher"


class Cluster:
    """``n`` brokers with ids 1..n on ``zk_connect``; with ``links``, each broker's
    inter-broker listener is behind a :class:`LinkProxy` (``cluster.links[id]``); with
    ``metrics``, each has a ``metrics.port``; ``broker_class`` makes the brokers (a subclass of
    :class:`ClusterBroker` with other listeners) and ``client_conf`` is what the helpers' admin
    client needs to reach them (``security.protocol``, ``sasl.*``, ``ssl.*``)."""

    def __init__(
        self,
        root: Path,
        zk_connect: str,
        n: int = 3,
        *overrides: str,
        links: bool = False,
        metrics: bool = False,
        broker_class: type[ClusterBroker] | None = None,
        client_conf: dict[str, str] | None = None,
    ) -> None:
        self.zk_connect = zk_connect
        self.client_conf = dict(client_conf or {})
        self.common_overrides = overrides
        make = broker_class or ClusterBroker
        self.brokers: dict[int, ClusterBroker] = {}
        self.links: dict[int, LinkProxy] = {}
        for i in range(1, n + 1):
            (root / f"broker-{i}").mkdir(parents=True, exist_ok=True)
            link = None
            if links:
                link = self.links[i] = LinkProxy(
                    lambda i=i: self.brokers[i].replication_address()  # type: ignore[misc]
                )
            self.brokers[i] = make(
                root / f"broker-{i}",
                *self.broker_overrides(i),
                link=link,
                metrics=metrics,
            )

    def broker_overrides(self, broker_id: int, *more: str) -> list[str]:
        """Every override of broker ``broker_id`` of this cluster (``more`` last: they win)."""
        return [
            f"zookeeper.connect={self.zk_connect}",
            f"broker.id={broker_id}",
            f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
            f"replica.lag.time.max.ms={LAG_TIME_MAX_MS}",
            "replica.fetch.wait.max.ms=200",
            "replica.fetch.backoff.ms=200",
            "group.initial.rebalance.delay.ms=0",
            "offsets.topic.num.partitions=6",
            "leader.imbalance.check.interval.seconds=5",
            *self.common_overrides,
            *more,
        ]

    def start(self) -> None:
        for b in self.brokers.values():
            b.start()
        wait_for("every broker registered", lambda: len(self.live_ids()) == len(self.brokers))

    def stop(self, timeout: float = 60.0) -> None:
        for b in self.brokers.values():
            if b.alive():
                with contextlib.suppress(RuntimeError):
                    b.stop(timeout=timeout)
        for link in self.links.values():
            link.close()

    def __iter__(self) -> Iterator[BrokerProcess]:
        return iter(self.brokers.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.port is not None)

    def admin(self) -> AdminClient:
        return AdminClient(
            {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000, **self.client_conf}
        )

    # ----------------------------------------------------------------- state

    def live_ids(self) -> set[int]:
        md = self.admin().list_topics(timeout=5)
        return set(md.brokers)

    def partitions(self, topic: str) -> dict[int, Any]:
        """confluent-kafka's PartitionMetadata (leader, replicas, isrs) per partition.

        A broker learns of a topic from its ZooKeeper watch a moment after the one that
        created it answered (Kafka's metadata propagates the same way): while the broker
        asked has not, it answers LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION and the
        question is asked again, as a client would."""

        def known() -> dict[int, Any] | None:
            t = self.admin().list_topics(topic, timeout=5).topics[topic]
            if t.error is not None:
                if t.error.code() in (3, 5):  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE
                    return None
                raise RuntimeError(str(t.error))
            return dict(t.partitions)

        return wait_for(f"{topic} in the metadata", known, 30)

    def create_topic(self, name: str, partitions: int = 3, rf: int = 3, **configs: str) -> None:
        admin = self.admin()  # kept alive until the result is in
        futures = admin.create_topics(
            [NewTopic(name, partitions, rf, config=dict(configs))], operation_timeout=30
        )
        futures[name].result(30)
        self.wait_healthy(name, partitions, rf)

    def wait_healthy(self, topic: str, partitions: int, rf: int, timeout: float = 60) -> None:
        """Every partition has a live leader and a full ISR, in the metadata of *every* live
        broker (each asked directly: a broker learns a partition's state from its own
        ZooKeeper watch, so one broker's answer says nothing of the next one's, and a client
        may ask any of them)."""

        def healthy_anywhere() -> bool:
            ps = self.partitions(topic)
            return len(ps) == partitions and all(
                p.leader >= 0 and len(p.isrs) == rf for p in ps.values()
            )

        if self.client_conf:  # TLS/SASL listeners: only the admin client can ask
            wait_for(f"{topic}: leaders and full ISRs", healthy_anywhere, timeout)
            return

        def healthy_everywhere() -> bool:
            for b in self.brokers.values():
                if not b.alive():
                    continue
                ps = _broker_partitions(b.bootstrap, topic)
                if ps is None or len(ps) != partitions:
                    return False
                if not all(p.error_code == 0 and len(p.isr_nodes) == rf for p in ps):
                    return False
            return True

        wait_for(f"{topic}: leaders and full ISRs on every broker", healthy_everywhere, timeout)

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


def _broker_partitions(bootstrap: str, topic: str) -> list[Any] | None:
    """``topic``'s partitions in the Metadata (v12) of the broker at ``bootstrap`` itself;
    None when it cannot be asked or does not know the topic yet."""
    from tests.integration import wire

    cls = wire.request_class(3, 12)
    topic_cls = wire._module(cls).MetadataRequestTopic
    try:
        c = wire.WireClient(bootstrap, timeout=10)
    except OSError:
        return None
    try:
        resp = c.call(
            cls(
                topics=(topic_cls(topic_id=None, name=topic),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    except OSError:
        return None
    finally:
        c.close()
    t = resp.topics[0]
    return None if t.error_code != 0 else list(t.partitions)
