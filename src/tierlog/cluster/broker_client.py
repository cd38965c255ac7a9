"""How one broker talks to another: Kafka's ``NetworkClient`` / ``BlockingSend`` for the
replica fetcher and the controller's channel, on asyncio.

::

    client = BrokerClient("tierlog-broker-1")
    await client.connect("10.0.0.2", 9092, timeout_s=10)     # and ApiVersions, once
    response = await client.request(fetch_request, timeout_s=30)
    await client.close()

A thin loop over the sans-IO :class:`~tierlog.protocol.client_connection.ClientConnection`
(framing, headers, correlation ids, decoding): the same codec the Spark client uses.

* **Pipelining.** Any number of requests may be in flight on one connection; the broker
  answers them in order and each :meth:`BrokerClient.request` gets its own response.
* **Versions.** :meth:`BrokerClient.connect` asks the peer's versions (ApiVersions v3, or
  the version the peer names when it answers UNSUPPORTED_VERSION). A request is sent at the
  highest version both sides support: the peer's maximum, capped by the version of the kio
  entity given (the highest the caller filled it in for) -- an entity newer than the peer is
  converted down field by field. Never up: a field a newer version adds would go out as its
  default (Fetch v15 moves the follower's id into ``replica_state``; left at its default the
  follower would fetch as a consumer). ``api_version=`` overrides the choice;
  :meth:`BrokerClient.api_version_for` tells the caller which version to build.
* **Security.** With a :class:`~tierlog.security.client_security.ClientSecurity` (the broker's
  identity on ``inter.broker.listener.name``), the connection is TLS (the peer's certificate
  checked against the listener's trust store, and its host name) and/or SASL: after ApiVersions,
  SaslHandshake v1 and SaslAuthenticate v2 until the mechanism completes (PLAIN: one round
  trip; SCRAM: two, the server's signature checked). A refused login fails :meth:`connect`
  with :class:`~tierlog.errors.BrokerAuthenticationError` naming the user, the mechanism and
  the server's message; a failed TLS handshake with a BrokerNotAvailableError saying so.
  When the peer limits the session (``connections.max.reauth.ms``, KIP-368: a
  ``session_lifetime`` in the last SaslAuthenticate response), the client logs in again on
  the open connection before a request sent after 85-95 % of it (a random point, as Kafka's
  clients pick), when nothing else is in flight, so the peer never has to close it.
* **Failures.** Connection refused, reset or closed by the peer, a request timeout, or a
  response that breaks the protocol: the connection is closed and every pending request
  fails with :class:`~tierlog.errors.BrokerNotAvailableError` (a ``ConnectionError``; a
  timeout is its subclass :class:`~tierlog.errors.BrokerRequestTimeoutError`, also a
  ``TimeoutError``) naming ``host:port``. Kafka's NetworkClient disconnects on a request
  timeout too: a peer that did not answer in time is not trusted with the next. Reconnect with
  :meth:`BrokerClient.connect`. A caller cancelled while waiting leaves the connection usable
  (its response is read and dropped).

Not thread-safe: one event loop. ``close`` is idempotent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import socket
import ssl
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.index import api_key_map, schema_name_map

from tierlog import __version__
from tierlog.errors import (
    BrokerAuthenticationError,
    BrokerNotAvailableError,
    BrokerRequestTimeoutError,
    ProtocolError,
    SaslAuthenticationFailed,
    UnsupportedVersion,
    for_code,
)
from tierlog.protocol._events import NEED_DATA, ConnectionClosed
from tierlog.protocol.api_versions import api_name
from tierlog.protocol.client_connection import DEFAULT_MAX_RESPONSE_SIZE, ClientConnection
from tierlog.security.client_security import PLAINTEXT, ClientSecurity

__all__ = ["BrokerClient"]

log = logging.getLogger(__name__)

_API_VERSIONS: Final = 18
_SASL_HANDSHAKE_VERSION: Final = 1
_SASL_AUTHENTICATE_VERSION: Final = 2


def _kio_versions(api_key: int) -> frozenset[int]:
    name = api_key_map.get(api_key)
    return frozenset(schema_name_map[name]) if name is not None else frozenset()


class BrokerClient:
    """One connection to another broker, with pipelining and version negotiation.

    Args:
        client_id: the request header's client id (Kafka's fetchers use
            ``broker-<id>-fetcher-<n>``; ``tierlog-broker-<id>`` is ours).
        max_frame_size: the largest response accepted.
        security: TLS and SASL (PLAINTEXT by default).
    """

    def __init__(
        self,
        client_id: str = "tierlog-broker",
        *,
        max_frame_size: int = DEFAULT_MAX_RESPONSE_SIZE,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.client_id = client_id
        self.security = security
        self._max_frame_size = max_frame_size
        self._host = ""
        self._port = -1
        self._conn: ClientConnection | None = None
        self._protocol: _BrokerProtocol | None = None
        self._waiters: collections.deque[tuple[int, asyncio.Future[Any]]] = collections.deque()
        self._versions: Mapping[int, tuple[int, int]] = MappingProxyType({})
        #: When to log in again (KIP-368), monotonic seconds; None: the session does not expire.
        self._reauth_at: float | None = None
        #: The connection _fail dropped, until close() waited for its TLS close_notify.
        self._closed_protocol: _BrokerProtocol | None = None

    def __repr__(self) -> str:
        state = "connected" if self.connected else "disconnected"
        return f"BrokerClient({self._host}:{self._port}, {state})"

    @property
    def address(self) -> str:
        """``host:port`` of the peer (of the latest :meth:`connect`)."""
        return f"{self._host}:{self._port}"

    @property
    def connected(self) -> bool:
        """Whether the connection is up (connected, ApiVersions answered, not failed)."""
        return self._protocol is not None and bool(self._versions)

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._waiters)

    @property
    def peer_api_versions(self) -> Mapping[int, tuple[int, int]]:
        """``{api key: (min, max)}`` the peer advertised (empty before :meth:`connect`)."""
        return self._versions

    # ------------------------------------------------------------------ connecting

    async def connect(self, host: str, port: int, *, timeout_s: float) -> None:
        """Open the connection and ask the peer's versions, within ``timeout_s`` in all.

        A connection still open is closed first (its pending requests fail).

        Raises:
            BrokerAuthenticationError: the peer refused this broker's SASL login.
            BrokerNotAvailableError: refused, reset, timed out, a failed TLS handshake, or
                ApiVersions failed.
        """
        await self.close()
        self._host, self._port = host, port
        ctx = self.security.ssl_context
        conn = ClientConnection(self.client_id, max_frame_size=self._max_frame_size)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                if ctx is None:
                    _, protocol = await loop.create_connection(
                        lambda: _BrokerProtocol(self, conn), host, port
                    )
                else:
                    _, protocol = await loop.create_connection(
                        lambda: _BrokerProtocol(self, conn),
                        host,
                        port,
                        ssl=ctx,
                        server_hostname=host,
                    )
        except ssl.SSLError as e:
            raise BrokerNotAvailableError(
                host, port, f"TLS handshake failed ({self.security.describe()}): {e}"
            ) from e
        except TimeoutError:
            raise BrokerRequestTimeoutError(
                host, port, f"connection not established within {timeout_s}s"
            ) from None
        except OSError as e:
            raise BrokerNotAvailableError(host, port, f"cannot connect: {e}") from e
        sock = protocol.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn, self._protocol = conn, protocol
        try:
            async with asyncio.timeout(timeout_s):
                await self._api_versions(timeout_s)
                if self.security.uses_sasl:
                    await self._authenticate(timeout_s)
        except TimeoutError:
            await self.close()
            raise BrokerRequestTimeoutError(
                host, port, f"connection not ready within {timeout_s}s"
            ) from None
        except BaseException:
            await self.close()
            raise
        log.debug(
            "connected to broker %s:%d as %s (%s)",
            host,
            port,
            self.client_id,
            self.security.describe(),
        )

    async def _authenticate(self, timeout_s: float) -> None:
        """SaslHandshake, then SaslAuthenticate until the mechanism completes (Kafka's
        ``SaslClientAuthenticator``)."""
        from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

        sec = self.security
        sasl = sec.new_sasl_client()
        who = f"as {sec.username} with {sasl.mechanism_name}"
        response = await self._send(
            SaslHandshakeRequest(mechanism=sasl.mechanism_name), _SASL_HANDSHAKE_VERSION, timeout_s
        )
        if code := int(response.error_code):
            enabled = ", ".join(str(m) for m in response.mechanisms)
            raise BrokerAuthenticationError(
                self._host,
                self._port,
                f"cannot authenticate {who}: {for_code(code).__name__} ({code}); the listener "
                f"enables {enabled or 'no mechanism'}",
            )
        token = sasl.initial_response()
        while True:
            response = await self._send(
                SaslAuthenticateRequest(auth_bytes=token), _SASL_AUTHENTICATE_VERSION, timeout_s
            )
            if code := int(response.error_code):
                raise BrokerAuthenticationError(
                    self._host,
                    self._port,
                    f"authentication {who} failed: {response.error_message or ''} "
                    f"({for_code(code).__name__}, {code})",
                )
            try:
                token = sasl.evaluate_challenge(bytes(response.auth_bytes))
            except SaslAuthenticationFailed as e:
                raise BrokerAuthenticationError(
                    self._host, self._port, f"authentication {who} failed: {e}"
                ) from None
            if sasl.is_complete:
                lifetime = response.session_lifetime.total_seconds()
                self._reauth_at = (
                    time.monotonic() + lifetime * random.uniform(0.85, 0.95)
                    if lifetime > 0
                    else None
                )
                return

    async def _api_versions(self, timeout_s: float) -> None:
        request = ApiVersionsRequest(
            client_software_name="tierlog", client_software_version=__version__
        )
        response = await self._send(request, 3, timeout_s)
        code = int(response.error_code)
        if code == UnsupportedVersion.error_code:
            # KIP-511: a v0 answer listing what the peer supports, ApiVersions included
            peer = {int(k.api_key): int(k.max_version) for k in response.api_keys}
            ours = max(v for v in _kio_versions(_API_VERSIONS) if v <= peer.get(_API_VERSIONS, 0))
            response = await self._send(request, ours, timeout_s)
            code = int(response.error_code)
        if code:
            cls = for_code(code)
            raise BrokerNotAvailableError(
                self._host, self._port, f"ApiVersions failed: {cls.__name__} ({code})"
            )
        self._versions = MappingProxyType(
            {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        )

    async def close(self) -> None:
        """Close the connection; pending requests fail with BrokerNotAvailableError.
        Idempotent."""
        self._fail(BrokerNotAvailableError(self._host, self._port, "connection closed"))
        protocol, self._closed_protocol = self._closed_protocol, None
        if protocol is not None and self.security.ssl_context is not None:
            # a TLS transport closes after its close_notify: let it, within a bound
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await asyncio.shield(protocol.closed)

    # ------------------------------------------------------------------ requests

    def api_version_for(self, api_key: int, max_version: int | None = None) -> int:
        """The highest version of ``api_key`` both the peer and kio support, at most
        ``max_version``.

        Raises:
            BrokerNotAvailableError: not connected.
            UnsupportedVersion: no common version.
        """
        if not self.connected:
            raise BrokerNotAvailableError(self._host, self._port, "not connected")
        peer = self._versions.get(api_key)
        if peer is None:
            raise UnsupportedVersion(
                f"broker {self.address} does not support {api_name(api_key)} (key {api_key})"
            )
        lo, hi = peer
        if max_version is not None:
            hi = min(hi, max_version)
        common = [v for v in _kio_versions(api_key) if lo <= v <= hi]
        if not common:
            raise UnsupportedVersion(
                f"broker {self.address} supports {api_name(api_key)} v{lo}-{peer[1]}, "
                f"none of them at most v{hi} in kio"
            )
        return max(common)

    async def request(
        self, request: Any, *, api_version: int | None = None, timeout_s: float
    ) -> Any:
        """Send ``request`` (a kio request entity) and return the peer's response (a kio
        response entity of the version sent); None for an acks=0 Produce.

        Args:
            api_version: the version to send; default the highest both sides support, capped
                by the entity's own version (:meth:`api_version_for`).
            timeout_s: how long to wait for the response.

        Raises:
            BrokerNotAvailableError: not connected, or the connection failed before the
                response came (every pending request fails with it).
            BrokerRequestTimeoutError: no response within ``timeout_s``; the connection is
                closed.
            UnsupportedVersion: the peer supports no version of the API we can send.
            LocalProtocolError: the request cannot be encoded at that version.
        """
        if api_version is None:
            cls = type(request)
            api_version = self.api_version_for(int(cls.__api_key__), int(cls.__version__))
        reauth_at = self._reauth_at
        if reauth_at is not None and time.monotonic() >= reauth_at and not self._waiters:
            log.debug("broker client %s: re-authenticating (KIP-368)", self.address)
            try:
                await self._authenticate(timeout_s)
            except BrokerAuthenticationError:
                await self.close()
                raise
        return await self._send(request, api_version, timeout_s)

    async def _send(self, request: Any, api_version: int, timeout_s: float) -> Any:
        conn, protocol = self._conn, self._protocol
        if conn is None or protocol is None:
            raise BrokerNotAvailableError(self._host, self._port, "not connected")
        before = conn.in_flight
        data = conn.send(request, api_version)
        fut: asyncio.Future[Any] | None = None
        if conn.in_flight > before:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append((conn.last_correlation_id, fut))
        try:
            async with asyncio.timeout(timeout_s):
                protocol.transport.write(data)
                await protocol.drain()
                if fut is None:
                    return None
                return await fut
        except TimeoutError:
            timeout = BrokerRequestTimeoutError(
                self._host,
                self._port,
                f"no response to {api_name(int(type(request).__api_key__))} v{api_version} "
                f"within {timeout_s}s; connection closed",
            )
            self._fail(timeout)
            raise timeout from None
        except OSError as e:
            if isinstance(e, BrokerNotAvailableError):
                raise
            err = BrokerNotAvailableError(self._host, self._port, f"connection failed: {e}")
            self._fail(err)
            raise err from e
        finally:
            if fut is not None and not fut.done():
                fut.cancel()  # cancelled while writing: its response will be dropped

    # ------------------------------------------------------------------ receiving

    def _deliver(self, conn: ClientConnection) -> None:
        """Hand every whole response received to its waiter (called by the protocol as
        bytes arrive: no reader task between the socket and the waiters)."""
        try:
            while (got := conn.next_response()) is not NEED_DATA:
                if isinstance(got, ConnectionClosed):
                    n = len(self._waiters)
                    raise BrokerNotAvailableError(
                        self._host,
                        self._port,
                        f"the broker closed the connection ({n} requests pending)",
                    )
                assert isinstance(got, tuple)
                correlation_id, response = got
                expected, fut = self._waiters.popleft()
                assert expected == correlation_id
                if not fut.done():
                    fut.set_result(response)
        except BrokerNotAvailableError as e:
            self._fail(e)
        except (OSError, ProtocolError) as e:
            self._fail(BrokerNotAvailableError(self._host, self._port, f"connection failed: {e}"))
        except Exception as e:  # a bug: do not leave the waiters hanging
            log.exception("broker client %s: reader failed", self.address)
            self._fail(BrokerNotAvailableError(self._host, self._port, f"reader failed: {e!r}"))

    def _fail(self, error: BrokerNotAvailableError) -> None:
        """Fail every pending request with ``error`` and drop the connection."""
        protocol, self._protocol = self._protocol, None
        self._conn = None
        self._versions = MappingProxyType({})
        self._reauth_at = None
        if protocol is not None:
            log.debug("broker client %s: %s", self.address, error)
            protocol.transport.close()
            protocol.fail_drain(error)
            self._closed_protocol = protocol
        waiters, self._waiters = self._waiters, collections.deque()
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(error)


class _BrokerProtocol(asyncio.BufferedProtocol):
    """The socket side of one :class:`BrokerClient` connection: the transport writes what it
    receives straight into the codec's receive buffer (one copy from the kernel; a
    ``StreamReader`` made four of every Fetch response: its buffer, ``read``'s slice, the
    codec's join of the slices, kio's), and whole responses go to their waiters at once."""

    def __init__(self, client: BrokerClient, conn: ClientConnection) -> None:
        self._client = client
        self._conn = conn
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # connection_made
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._paused = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._conn.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._conn.buffer_updated(nbytes)
        if self._client._conn is self._conn:
            self._client._deliver(self._conn)

    def eof_received(self) -> bool:
        if self._client._conn is self._conn:
            self._conn.receive_data(b"")
            self._client._deliver(self._conn)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        client = self._client
        error = BrokerNotAvailableError(
            client._host,
            client._port,
            f"connection lost: {exc}" if exc is not None else "connection lost",
        )
        if client._protocol is self:
            client._fail(error)
        self.fail_drain(error)
        if not self.closed.done():
            self.closed.set_result(None)

    # flow control (asyncio's StreamWriter.drain)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        waiters, self._drain_waiters = self._drain_waiters, collections.deque()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def fail_drain(self, error: BaseException) -> None:
        waiters, self._drain_waiters = self._drain_waiters, collections.deque()
        for fut in waiters:
            if not fut.done():
                fut.set_exception(error)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if self.transport.is_closing():
            await asyncio.sleep(0)  # let connection_lost run, as StreamWriter.drain does
            if self._client._protocol is not self:
                raise BrokerNotAvailableError(
                    self._client._host, self._client._port, "connection closed"
                )
        if not self._paused:
            return
        fut = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(fut)
        await fut
