"""One ZooKeeper session over kazoo: connection, session events, pipelined requests with
retries, watches (Kafka's ``ZooKeeperClient``, under :class:`~tierlog.cluster.KafkaZkClient`).

Every operation is synchronous; callers run them in threads (the controller's event thread,
the broker's executor), never on the event loop. Many znodes are read or written in one
*pipeline* (:meth:`ZooKeeperClient._pipeline`): every request is sent with kazoo's
``*_async`` call before the first answer is awaited, so a batch costs one round trip plus
ZooKeeper's work, not one round trip each (Kafka 1.1 made the same change for the controller;
cluster-reference.md §2).

Connection losses: a request that fails with a connection loss or an expired session is sent
again once the client is connected; when the client stays disconnected for
``zookeeper.connection.timeout.ms`` the request fails with
:class:`~tierlog.errors.ZooKeeperClientError` instead (kazoo would hold it queued for as
long as ZooKeeper is unreachable). A write sent twice may have been applied the first
time; the callers that care look at what is there (:class:`KafkaZkClient` does for its
compare-and-sets and creates).

Session events: :meth:`ZooKeeperClient.add_session_listener` callbacks get ``"CONNECTED"``,
``"SUSPENDED"`` (connection lost, the session may live on) or ``"LOST"`` (the session
expired: its ephemeral nodes -- the broker registration, ``/controller`` -- are gone; kazoo
opens a new session and reports CONNECTED again, and the broker must re-register and re-run
the election). They run in kazoo's connection thread and must not call this client
synchronously: enqueue instead.

Thread-safe: any number of threads may call one client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Self

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import KazooState, ZnodeStat

from tierlog.cluster import zk_data as zd
from tierlog.cluster.zk_watches import (
    ChildrenCallback,
    ChildrenWatch,
    DataCallback,
    DataWatch,
    WatchHandle,
)
from tierlog.errors import TierlogError, ZooKeeperClientError

log = logging.getLogger(__name__)

#: One request: given the kazoo client, send it and return its pending result.
Call = Callable[[KazooClient], IAsyncResult]
#: One operation added to a transaction (kazoo's ``TransactionRequest``).
TxOp = Callable[[Any], None]


class ControllerMovedError(TierlogError):
    """A controller write failed its ``/controller_epoch`` version check: another broker was
    elected since (Kafka's ControllerMovedException). The caller must resign."""


def parse_connect(connect: str) -> tuple[str, str | None]:
    """``host:port[,host:port...][/chroot]`` -> (hosts, chroot or None).

    Raises:
        ValueError: no host, or a chroot that is not an absolute path without a trailing
            ``/`` (ZooKeeper refuses those).
    """
    hosts, slash, chroot = connect.partition("/")
    if not hosts.strip():
        raise ValueError(f"zookeeper.connect {connect!r} names no host")
    if not slash or chroot == "":
        return hosts, None
    chroot = "/" + chroot
    if chroot.endswith("/") or "//" in chroot:
        raise ValueError(f"zookeeper.connect {connect!r}: invalid chroot {chroot!r}")
    return hosts, chroot


# ---------------------------------------------------------------- typed request factories


def get_call(path: str) -> Call:
    return lambda zk: zk.get_async(path)


def get_children_call(path: str) -> Call:
    return lambda zk: zk.get_children_async(path)


def exists_call(path: str) -> Call:
    return lambda zk: zk.exists_async(path)


def create_call(
    path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False
) -> Call:
    """Create ``path``, its missing parents too (persistent, empty)."""
    return lambda zk: zk.create_async(
        path, data, ephemeral=ephemeral, sequence=sequence, makepath=True
    )


def set_call(path: str, data: bytes, version: int = -1) -> Call:
    return lambda zk: zk.set_async(path, data, version)


def delete_call(path: str, version: int = -1) -> Call:
    return lambda zk: zk.delete_async(path, version)


def tx_create(path: str, data: bytes = b"", *, ephemeral: bool = False) -> TxOp:
    return lambda tx: tx.create(path, data, ephemeral=ephemeral)


def tx_set(path: str, data: bytes, version: int = -1) -> TxOp:
    return lambda tx: tx.set_data(path, data, version)


def tx_delete(path: str, version: int = -1) -> TxOp:
    return lambda tx: tx.delete(path, version)


def tx_check(path: str, version: int) -> TxOp:
    return lambda tx: tx.check(path, version)


def multi_call(*ops: TxOp) -> Call:
    """A multi (kazoo transaction) of ``ops``; its result is the list of per-operation
    results, with kazoo exception instances in it when it did not commit."""

    def call(zk: KazooClient) -> IAsyncResult:
        tx = zk.transaction()
        for op in ops:
            op(tx)
        return tx.commit_async()

    return call


def checked_call(controller_epoch_zk_version: int, *ops: TxOp) -> Call:
    """Kafka's fenced controller write: a multi of ``check(/controller_epoch, version)`` and
    then ``ops``. Read its result with :func:`checked_outcome`."""
    return multi_call(tx_check(zd.CONTROLLER_EPOCH_PATH, controller_epoch_zk_version), *ops)


def checked_outcome(results: Any) -> Any:
    """The outcome of a :func:`checked_call`: the results of ``ops`` when it committed, or
    the exception of the operation that failed.

    Raises:
        ControllerMovedError: the controller-epoch check failed.
    """
    if isinstance(results, Exception):
        return results
    if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
        raise ControllerMovedError(
            f"{zd.CONTROLLER_EPOCH_PATH} check failed ({type(results[0]).__name__}): "
            f"another controller was elected"
        )
    for r in results[1:]:
        # in a failed multi the operations before the failing one report RolledBackError
        # and those after it RuntimeInconsistency: the one to report is the first other one
        if isinstance(r, Exception) and not isinstance(r, RolledBackError):
            return r
    return results[1:]


# Errors after which a request is sent again once connected.
_RETRIABLE = (ConnectionLoss, SessionExpiredError)
_STATES = {KazooState.CONNECTED: "CONNECTED", KazooState.SUSPENDED: "SUSPENDED"}


class ZooKeeperClient:
    """One ZooKeeper session: lifecycle, session listeners, pipelined requests, watches.

    ``connect`` is Kafka's ``zookeeper.connect``; its chroot is created at :meth:`start`
    when absent, as Kafka does. ``connection_timeout_ms`` (Kafka's
    ``zookeeper.connection.timeout.ms``) defaults to the session timeout and also bounds how
    long a request waits for a lost connection to come back.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self.connect = connect
        self._hosts, self.chroot = parse_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = (
            session_timeout_ms if connection_timeout_ms is None else connection_timeout_ms
        )
        self._zk: KazooClient | None = None
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._closed = False
        self._session_listeners: list[Callable[[str], None]] = []
        self._watches: list[WatchHandle] = []
        self._session_id: int | None = None
        # Every session this client had: a registration left by one of them after it
        # expired is ours to replace (ZOOKEEPER-2985, KAFKA-7165).
        self._own_sessions: set[int] = set()

    # ------------------------------------------------------------------ lifecycle

    def _new_kazoo(self, hosts: str) -> KazooClient:
        return KazooClient(
            hosts=hosts,
            timeout=self.session_timeout_ms / 1000,
            # reconnect forever, at most a second apart (kazoo's default backs off to an hour)
            connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 2, "max_delay": 1.0},
        )

    def start(self) -> None:
        """Connect, creating the chroot first when absent.

        Raises:
            ZooKeeperClientError: no connection within ``connection_timeout_ms``.
        """
        if self.chroot is not None:
            bootstrap = self._new_kazoo(self._hosts)
            self._start_kazoo(bootstrap)
            try:
                bootstrap.ensure_path(self.chroot)
            finally:
                bootstrap.stop()
                bootstrap.close()
        zk = self._new_kazoo(self.connect)
        zk.add_listener(self._on_state)
        self._zk = zk
        self._start_kazoo(zk)
        self._on_state(KazooState.CONNECTED)  # in case kazoo reported it before we listened

    def _start_kazoo(self, zk: KazooClient) -> None:
        try:
            zk.start(timeout=self.connection_timeout_ms / 1000)
        except KazooTimeoutError:
            raise ZooKeeperClientError(
                f"cannot connect to ZooKeeper at {self.connect} within "
                f"{self.connection_timeout_ms} ms"
            ) from None

    def close(self) -> None:
        """End the session (its ephemeral nodes go at once) and stop every watch. Idempotent.

        kazoo stops first: that fails the reads still waiting for ZooKeeper, among them a
        watch re-arming while ZooKeeper is away (it holds the watch's lock, which cancelling
        the watch waits for; a broker whose ZooKeeper had died hung here on SIGTERM).
        """
        self._closed = True
        zk, self._zk = self._zk, None
        if zk is not None:
            zk.stop()
            zk.close()
        self.unwatch_all()
        self._connected.clear()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        """Whether the session is connected to a server right now."""
        return self._connected.is_set()

    @property
    def session_id(self) -> int | None:
        """The current session's id, None while disconnected."""
        return self._session_id if self._connected.is_set() else None

    @property
    def kazoo(self) -> KazooClient:
        """The kazoo client, for what this class does not wrap (tests, tools).

        Raises:
            ZooKeeperClientError: not started, or closed.
        """
        if self._zk is None:
            raise ZooKeeperClientError("the ZooKeeper client is not started or is closed")
        return self._zk

    def add_session_listener(self, callback: Callable[[str], None]) -> None:
        """``callback(state)`` with "CONNECTED", "SUSPENDED" or "LOST" (session expired), from
        kazoo's connection thread; never after :meth:`close`. Must not block."""
        self._session_listeners.append(callback)

    def _on_state(self, state: str) -> None:
        """kazoo's session listener, in its connection thread."""
        if state == KazooState.CONNECTED:
            zk = self._zk
            client_id = zk.client_id if zk is not None else None
            if client_id is None:
                return
            with self._lock:
                if self._connected.is_set() and self._session_id == client_id[0]:
                    return  # start() reporting what the listener already saw
                self._session_id = client_id[0]
                self._own_sessions.add(client_id[0])
                self._connected.set()
                self._watches = [w for w in self._watches if not w.cancelled]
                watches = list(self._watches)
            for w in watches:
                w.on_connected()
        else:
            self._connected.clear()
        if self._closed:
            return
        name = _STATES.get(state, "LOST")
        for cb in list(self._session_listeners):
            try:
                cb(name)
            except Exception:
                log.exception("ZooKeeper session listener failed on %s", name)

    # ------------------------------------------------------------------ requests

    def _pipeline(self, calls: Sequence[Call]) -> tuple[list[Any], set[int]]:
        """Send every call at once, then collect: each result is the value or the kazoo
        exception. Calls that met a connection loss are sent again once connected. Returns
        the results and the indexes of the calls that were sent more than once.

        Raises:
            ZooKeeperClientError: closed, or disconnected with no answer for
                ``connection_timeout_ms``.
        """
        results: list[Any] = [None] * len(calls)
        retried: set[int] = set()
        pending = list(range(len(calls)))
        timeout = self.connection_timeout_ms / 1000
        while pending:
            zk = self.kazoo
            sent = [(i, calls[i](zk)) for i in pending]
            # A request made while disconnected waits in kazoo's queue for the reconnection:
            # that wait is what connection_timeout_ms bounds, in all (it waited twice as
            # long: once for the answer, then again for the connection).
            give_up_at = time.monotonic() + timeout
            pending = []
            for i, async_result in sent:
                try:
                    while True:
                        # While connected kazoo answers, or fails the request with a
                        # connection loss once the server stops answering pings.
                        left = give_up_at - time.monotonic()
                        try:
                            results[i] = async_result.get(timeout=max(left, 0.01))
                            break
                        except KazooTimeoutError:
                            if self._connected.is_set():
                                give_up_at = time.monotonic() + timeout  # a slow server
                            elif not self._wait_connected(give_up_at - time.monotonic()):
                                raise self._timeout_error() from None
                except ConnectionClosedError:
                    raise ZooKeeperClientError("the ZooKeeper client is closed") from None
                except _RETRIABLE:
                    pending.append(i)
                except KazooException as e:
                    results[i] = e
            if pending:
                retried.update(pending)
                if self._closed:
                    raise ZooKeeperClientError("the ZooKeeper client is closed")
                # kazoo fails the requests before it reports the state change: give its
                # listener the moment to clear _connected before waiting on it
                time.sleep(0.01)
                if not self._wait_connected(timeout):
                    raise self._timeout_error()
        return results, retried

    def _wait_connected(self, timeout: float) -> bool:
        return self._connected.wait(timeout)

    def _timeout_error(self) -> ZooKeeperClientError:
        return ZooKeeperClientError(
            f"no connection to ZooKeeper at {self.connect} for {self.connection_timeout_ms} ms"
        )

    def _one(self, call: Call) -> Any:
        """One request: its value, or its kazoo exception raised."""
        result = self._pipeline([call])[0][0]
        if isinstance(result, Exception):
            raise result
        return result

    def _each(self, calls: Sequence[Call], tolerate: tuple[type[Exception], ...]) -> list[Any]:
        """Pipelined: each result, ``None`` for a tolerated exception; raises any other."""
        out: list[Any] = []
        for r in self._pipeline(calls)[0]:
            if isinstance(r, tolerate):
                out.append(None)
            elif isinstance(r, Exception):
                raise r
            else:
                out.append(r)
        return out

    # ------------------------------------------------------------------ generic znodes

    def get_data(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """A znode's data and stat, None when absent."""
        try:
            data, stat = self._one(get_call(path))
        except NoNodeError:
            return None
        return data, stat

    def get_children(self, path: str) -> list[str]:
        """A znode's children (empty when it does not exist)."""
        try:
            return list(self._one(get_children_call(path)))
        except NoNodeError:
            return []

    def ensure_paths(self, paths: Sequence[str]) -> None:
        """Create each znode (and parents) that is absent, pipelined."""
        self._each([create_call(p) for p in paths], (NodeExistsError,))

    def set_or_create(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path``, creating it (and parents) when absent."""
        for _ in range(10):
            try:
                self._one(set_call(path, data))
                return
            except NoNodeError:
                pass
            try:
                self._one(create_call(path, data))
                return
            except NodeExistsError:
                pass
        raise ZooKeeperClientError(f"{path} kept appearing and disappearing")

    def delete_if_exists(self, path: str) -> None:
        try:
            self._one(delete_call(path))
        except NoNodeError:
            pass

    # ------------------------------------------------------------------ watches

    def watch_children(self, path: str, callback: ChildrenCallback) -> WatchHandle:
        """``callback(children)`` now and after every change, for the life of the client or
        until the handle is cancelled; waits for ``path`` when it does not exist yet."""
        return self._watch(ChildrenWatch(self.kazoo, path, callback, lambda: self.session_id))

    def watch_data(self, path: str, callback: DataCallback) -> WatchHandle:
        """``callback(data, zk_version)`` now and after every change; ``(None, None)`` while
        ``path`` does not exist."""
        return self._watch(DataWatch(self.kazoo, path, callback, lambda: self.session_id))

    def _watch(self, watch: WatchHandle) -> WatchHandle:
        with self._lock:
            self._watches.append(watch)
        watch.arm()
        return watch

    def unwatch_all(self) -> None:
        """Cancel every watch of this client (a resigning controller)."""
        with self._lock:
            watches, self._watches = self._watches, []
        for w in watches:
            w.cancel()


__all__ = [
    "Call", "ControllerMovedError", "TxOp", "ZooKeeperClient", "parse_connect",
    "get_call", "get_children_call", "exists_call", "create_call", "set_call", "delete_call",
    "tx_create", "tx_set", "tx_delete", "tx_check", "multi_call", "checked_call",
    "checked_outcome",
]  # fmt: skip
