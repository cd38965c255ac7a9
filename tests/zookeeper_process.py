"""The tests' ZooKeeper: :class:`tierlog.tools.zookeeper_server.ZooKeeperServer` (the one way
tierlog starts ZooKeeper, shared with ``tierlog cluster``), with short ticks for the tests.

Standalone, on 127.0.0.1, a free port, data in its own directory, ``tickTime`` 250 ms so
sessions can be short (ZooKeeper grants at least 2 ticks, 500 ms; at most 60 s, set so a
broker's default 18 s is granted as asked). Tests that restart the server allow for the
3.8.0 bug described in :mod:`tierlog.tools.zookeeper_server` (a connection made while it
loads its database is left unanswered).
"""

from __future__ import annotations

from pathlib import Path

from tierlog.tools.zookeeper_server import (
    MAIN_CLASS,
    SLF4J_BINDING,
    ZOOKEEPER_JAR,
    ZooKeeperExited,
    ZooKeeperServer,
    available,
    four_letter_word,
    java,
)

__all__ = [
    "MAIN_CLASS",
    "SLF4J_BINDING",
    "TICK_TIME_MS",
    "ZOOKEEPER_JAR",
    "ZooKeeperExited",
    "ZooKeeperProcess",
    "available",
    "expire_session",
    "four_letter_word",
    "java",
]

TICK_TIME_MS = 250


class ZooKeeperProcess(ZooKeeperServer):
    """A standalone test server under ``root`` on a free port of 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, tick_time_ms=TICK_TIME_MS, max_session_timeout_ms=60000)


def expire_session(connect_string: str, client_id: tuple[int, bytes]) -> None:
    """Make the server expire the session ``client_id`` (kazoo's ``client_id``: session id and
    password) for real: another connection takes the session over and closes it, as a session
    whose owner paused past its timeout ends. The owner then sees its session expired (kazoo:
    LOST, then CONNECTED with a new session)."""
    from kazoo.client import KazooClient

    other = KazooClient(hosts=connect_string, client_id=client_id, timeout=10)
    other.start(timeout=30)
    other.stop()
    other.close()
