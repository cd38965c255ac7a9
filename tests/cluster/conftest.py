"""Helpers for the tests of tierlog.cluster against a real ZooKeeper."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from tests import zookeeper_process
from tests.zookeeper_process import ZooKeeperProcess
from tierlog.cluster.kafka_zk_client import KafkaZkClient

#: Short sessions, so an expiry the server notices takes about a second, not 18.
SESSION_TIMEOUT_MS = 4000
CONNECTION_TIMEOUT_MS = 15000


def wait_until(predicate: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Poll ``predicate`` until true; the deadline only bounds a failure."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


class SessionEvents:
    """Collects a client's session states in order, for waiting on one."""

    def __init__(self, client: KafkaZkClient) -> None:
        self.states: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        client.add_session_listener(self.states.put)

    def wait_for(self, state: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                s = self.states.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {state} session event in {timeout} s (saw {self.seen})"
                ) from None
            self.seen.append(s)
            if s == state:
                return


def expire_session(zk_hosts: str, client: KafkaZkClient) -> None:
    """Make the server expire ``client``'s session (see
    :func:`tests.zookeeper_process.expire_session`)."""
    client_id = client.kazoo.client_id
    assert client_id is not None, "the client is not connected"
    zookeeper_process.expire_session(zk_hosts, client_id)


@pytest.fixture
def new_client(zk_connect: str) -> Iterator[Callable[..., KafkaZkClient]]:
    """Started KafkaZkClients on this test's chroot, closed at the end."""
    clients: list[KafkaZkClient] = []

    def make(connect: str | None = None, **kwargs: int) -> KafkaZkClient:
        kwargs.setdefault("session_timeout_ms", SESSION_TIMEOUT_MS)
        kwargs.setdefault("connection_timeout_ms", CONNECTION_TIMEOUT_MS)
        c = KafkaZkClient(connect or zk_connect, **kwargs)
        clients.append(c)
        c.start()
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def raw_zk(zookeeper: ZooKeeperProcess) -> Iterator[KazooClient]:
    """A plain kazoo client without chroot: sees what really is on the server."""
    zk = KazooClient(hosts=zookeeper.connect_string)
    zk.start(timeout=30)
    yield zk
    zk.stop()
    zk.close()
