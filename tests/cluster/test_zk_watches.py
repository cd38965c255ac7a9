"""Children and data watches against a real ZooKeeper: they follow every change, wait for a
node that does not exist yet, stop when cancelled, and survive a session expiry and a
server restart (kazoo drops watches on a connection loss; ours re-arm).

Callbacks coalesce quick changes, so the tests wait for the *last* value seen to be the
expected one, never for a count of calls.
"""

from __future__ import annotations

import threading
from typing import Any

from tests.cluster.conftest import SessionEvents, expire_session, wait_until
from tierlog.cluster.kafka_zk_client import KafkaZkClient


class Seen:
    """What a watch reported, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: list[Any] = []

    def children(self, children: list[str]) -> None:
        with self._lock:
            self.values.append(children)

    def data(self, data: bytes | None, version: int | None) -> None:
        with self._lock:
            self.values.append((data, version))

    def last(self) -> Any:
        with self._lock:
            return self.values[-1] if self.values else "nothing yet"

    def count(self) -> int:
        with self._lock:
            return len(self.values)


def test_children_watch_follows_changes(new_client):
    c, other = new_client(), new_client()
    c.kazoo.ensure_path("/brokers/ids")
    c.kazoo.create("/brokers/ids/1", b"", ephemeral=True)
    seen = Seen()
    c.watch_children("/brokers/ids", seen.children)
    assert seen.values == [["1"]]  # the first call is immediate, in the caller's thread
    other.kazoo.create("/brokers/ids/3", b"", ephemeral=True)
    wait_until(lambda: seen.last() == ["1", "3"], "broker 3 to join")
    other.kazoo.create("/brokers/ids/2", b"", ephemeral=True)
    wait_until(lambda: seen.last() == ["1", "2", "3"], "broker 2 to join")
    other.close()  # its ephemerals go
    wait_until(lambda: seen.last() == ["1"], "brokers 2 and 3 to leave")


def test_children_watch_waits_for_the_node(new_client):
    c = new_client()
    seen = Seen()
    c.watch_children("/admin/delete_topics", seen.children)
    assert seen.values == []
    c.kazoo.create("/admin/delete_topics", b"", makepath=True)
    wait_until(lambda: seen.last() == [], "the node to appear")
    c.kazoo.create("/admin/delete_topics/t", b"")
    wait_until(lambda: seen.last() == ["t"], "a child")
    c.kazoo.delete("/admin/delete_topics", recursive=True)
    c.kazoo.create("/admin/delete_topics/u", b"", makepath=True)
    wait_until(lambda: seen.last() == ["u"], "the node to come back with a child")


def test_data_watch_reports_creation_changes_and_deletion(new_client):
    c = new_client()
    seen = Seen()
    c.watch_data("/controller", seen.data)
    assert seen.values == [(None, None)]
    c.kazoo.create("/controller", b"a")
    wait_until(lambda: seen.last() == (b"a", 0), "creation")
    c.kazoo.set("/controller", b"b")
    wait_until(lambda: seen.last() == (b"b", 1), "the change")
    c.kazoo.delete("/controller")
    wait_until(lambda: seen.last() == (None, None), "deletion")


def test_a_cancelled_watch_calls_back_no_more(new_client):
    c = new_client()
    c.kazoo.create("/x", b"0")
    cancelled, live = Seen(), Seen()
    handle = c.watch_data("/x", cancelled.data)
    c.watch_data("/x", live.data)
    handle.cancel()
    c.kazoo.set("/x", b"1")
    c.kazoo.set("/x", b"2")
    wait_until(lambda: live.last() == (b"2", 2), "the live watch")
    # one more change: its callback runs in kazoo's (FIFO) callback thread after every one
    # queued for the changes before, so the cancelled watch had its chance to call back
    c.kazoo.set("/x", b"3")
    wait_until(lambda: live.last() == (b"3", 3), "the live watch again")
    assert cancelled.values == [(b"0", 0)]


def test_unwatch_all_stops_every_watch(new_client):
    c, other = new_client(), new_client()
    c.kazoo.create("/x", b"0")
    a, b = Seen(), Seen()
    c.watch_data("/x", a.data)
    c.watch_children("/x", b.children)
    c.unwatch_all()
    witness = Seen()
    c.watch_data("/y", witness.data)  # same client: its callbacks run after earlier ones
    other.kazoo.set("/x", b"1")
    other.kazoo.create("/x/child", b"")
    other.kazoo.create("/y", b"done")
    wait_until(lambda: witness.last() == (b"done", 0), "the witness watch")
    assert (a.values, b.values) == ([(b"0", 0)], [[]])


def test_a_failing_callback_does_not_stop_the_watch(new_client):
    c = new_client()
    c.kazoo.create("/x", b"0")
    seen = Seen()

    def callback(data: bytes | None, version: int | None) -> None:
        seen.data(data, version)
        if data == b"1":
            raise RuntimeError("a bug in a watcher")

    c.watch_data("/x", callback)
    c.kazoo.set("/x", b"1")
    wait_until(lambda: seen.last() == (b"1", 1), "the failing call")
    c.kazoo.set("/x", b"2")
    wait_until(lambda: seen.last() == (b"2", 2), "the next change")


def test_watches_survive_a_session_expiry(new_client, zookeeper):
    c, other = new_client(), new_client()
    events = SessionEvents(c)
    other.kazoo.create("/brokers/ids/1", b"", makepath=True)
    children, data = Seen(), Seen()
    c.watch_children("/brokers/ids", children.children)
    c.watch_data("/controller", data.data)
    expire_session(zookeeper.connect_string, c)
    events.wait_for("LOST")
    events.wait_for("CONNECTED")
    other.kazoo.create("/brokers/ids/2", b"")
    other.kazoo.create("/controller", b"c")
    wait_until(lambda: children.last() == ["1", "2"], "the child watch after the expiry")
    wait_until(lambda: data.last() == (b"c", 0), "the data watch after the expiry")


def test_watches_survive_a_server_restart(own_zookeeper):
    """Whether the session outlives the restart or not (see tests/zookeeper_process.py)."""
    c = KafkaZkClient(
        f"{own_zookeeper.connect_string}/kafka",
        session_timeout_ms=6000,
        connection_timeout_ms=60000,
    )
    c.start()
    try:
        events = SessionEvents(c)
        seen = Seen()
        c.kazoo.ensure_path("/brokers/ids")
        c.watch_children("/brokers/ids", seen.children)
        own_zookeeper.stop()
        events.wait_for("SUSPENDED")
        own_zookeeper.start()
        events.wait_for("CONNECTED")
        c.kazoo.create("/brokers/ids/5", b"", ephemeral=True)
        wait_until(lambda: seen.last() == ["5"], "the watch after the restart")
    finally:
        c.close()
