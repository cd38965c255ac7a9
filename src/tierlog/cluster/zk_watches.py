"""Children and data watches that last as long as the client: the controller's
``/brokers/ids`` and ``/brokers/topics`` child watches, every broker's ``/controller`` watch.

A ZooKeeper watch fires once; kazoo also drops every watch when the connection is lost (it
does not re-send them on reconnect). A :class:`ChildrenWatch` or :class:`DataWatch` therefore
re-arms itself after each event and after each reconnection, and reads the node again when
it does, so no change is missed -- only coalesced: a callback always gets the current
children or data, never a diff, and two quick changes may give one call.

When the node does not exist yet, the watch waits for it (an ``exists`` watch) and calls
back once it appears; a data watch also reports a node's deletion as ``(None, None)``.

When callbacks run: once at once, in the thread that creates the watch (the current value,
or for a data watch ``(None, None)`` when the node is absent; a children watch of an absent
node waits silently); then from kazoo's callback thread after each change; and after each
reconnection when the value changed, or always on a new session (anything may have happened
during the expiry). Apart from that first call, the callbacks of all watches of a client run
one at a time in kazoo's callback thread. They should only enqueue work: a callback that
blocks delays every other watch of the client, and one that waits for another watch's
callback deadlocks.

:meth:`WatchHandle.cancel` stops a watch: once it returns no callback of that watch runs,
except one already running in the calling thread (cancel from inside the callback).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import Callback, EventType, WatchedEvent

log = logging.getLogger(__name__)

ChildrenCallback = Callable[[list[str]], None]
DataCallback = Callable[[bytes | None, int | None], None]

# Errors after which the watch waits for the next CONNECTED to re-arm (or the client is
# closed: ConnectionClosedError ends a read that was waiting for ZooKeeper to come back).
_DISCONNECTED = (ConnectionLoss, SessionExpiredError, ConnectionClosedError)


class WatchHandle:
    """A live children or data watch; :meth:`cancel` stops it. Thread-safe."""

    def __init__(self, zk: KazooClient, path: str, session_id: Callable[[], int | None]) -> None:
        self.path = path
        self._zk = zk
        self._session_id = session_id
        self._lock = threading.RLock()
        self._cancelled = False
        # (session id, value) of the last callback: a value is delivered again only when it
        # changed or the session did.
        self._last: tuple[int | None, Any] | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Stop the watch; idempotent. Waits for a callback running in another thread."""
        with self._lock:
            self._cancelled = True

    def on_connected(self) -> None:
        """The client (re)connected: read again and re-arm, in kazoo's callback thread (the
        session listener runs in the connection thread, which must not wait for ZooKeeper)."""
        if not self._cancelled:
            self._rearm_later()

    def _rearm_later(self) -> None:
        # kazoo's single callback thread, so callbacks of all watches stay serialized
        self._zk.handler.dispatch_callback(Callback("watch", self.arm, ()))

    def arm(self) -> None:
        """Read the node, set the watch, call back when the value is new."""
        with self._lock:
            if self._cancelled:
                return
            try:
                self._arm()
            except _DISCONNECTED:
                return  # the session listener re-arms on the next CONNECTED
            except Exception:  # a bug in a callback must not kill kazoo's thread
                log.exception("watch on %s failed", self.path)

    def _arm(self) -> None:
        raise NotImplementedError

    def _on_event(self, event: WatchedEvent) -> None:
        # NONE events come from kazoo dropping watches on a connection loss; the session
        # listener re-arms once connected again.
        if event.type != EventType.NONE:
            self.arm()

    def _deliver(self, value: Any, call: Callable[[], None]) -> None:
        current = (self._session_id(), value)
        if self._last == current:
            return
        self._last = current
        call()


class ChildrenWatch(WatchHandle):
    """The children of ``path``, sorted, to ``callback(children)`` (Kafka's
    ``ZNodeChildChangeHandler``)."""

    def __init__(
        self,
        zk: KazooClient,
        path: str,
        callback: ChildrenCallback,
        session_id: Callable[[], int | None],
    ) -> None:
        super().__init__(zk, path, session_id)
        self._callback = callback

    def _arm(self) -> None:
        try:
            children = self._zk.get_children(self.path, watch=self._on_event)
        except NoNodeError:
            if self._zk.exists(self.path, watch=self._on_event) is None:
                return  # the exists watch fires on creation
            try:
                children = self._zk.get_children(self.path, watch=self._on_event)
            except NoNodeError:
                return  # deleted again at once; the exists watch fired or will
        children = sorted(children)
        self._deliver(tuple(children), lambda: self._callback(children))


class DataWatch(WatchHandle):
    """The data and version of ``path`` to ``callback(data, zk_version)``; ``(None, None)``
    while the node does not exist (Kafka's ``ZNodeChangeHandler``)."""

    def __init__(
        self,
        zk: KazooClient,
        path: str,
        callback: DataCallback,
        session_id: Callable[[], int | None],
    ) -> None:
        super().__init__(zk, path, session_id)
        self._callback = callback

    def _arm(self) -> None:
        data: bytes | None
        version: int | None
        try:
            data, stat = self._zk.get(self.path, watch=self._on_event)
            version = stat.version
        except NoNodeError:
            if self._zk.exists(self.path, watch=self._on_event) is not None:
                self._rearm_later()  # created in between: read it again
                return
            data, version = None, None
        self._deliver((data, version), lambda: self._callback(data, version))


__all__ = ["ChildrenCallback", "ChildrenWatch", "DataCallback", "DataWatch", "WatchHandle"]
