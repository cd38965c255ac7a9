"""The asyncio network layer: listeners, and one protocol object per client connection.

Each connection is a thin shell around the sans-IO :class:`~tierlog.protocol.ServerConnection`
(framing, request headers, ApiVersions edge cases, frame size limit)::

    bytes in → conn.receive_data → conn.next_event → KafkaApis.handle → conn.send → bytes out

Guarantees:

* Requests of one connection are answered in the order they arrived, even when a later one
  (a Produce) completes before an earlier one (a long-polling Fetch): responses wait in a
  per-connection queue until every earlier one is written.
* Connections never wait for each other: handlers either answer at once or return an
  awaitable that runs as its own task.
* Bounded memory per connection (backpressure): when ``max_in_flight`` requests or
  ``max_in_flight_bytes`` request bytes are unanswered, or the socket's write buffer is over
  its high-water mark, the connection stops reading; it resumes when responses drain.
* Client quotas (KIP-219): after a response with a non-zero ``throttle_time`` the connection
  reads nothing for that long (Kafka's channel muting), so a client that ignores the field is
  held back by TCP.
* A malformed or oversized frame, or a handler bug, closes that connection with one log line;
  the broker keeps serving everybody else.
* Security (per listener, :class:`~tierlog.security.channel_builder.ChannelBuilder`): TLS is
  asyncio's; on SASL listeners every request first goes through the connection's sans-IO
  :class:`~tierlog.security.sasl_server.SaslServerAuthenticator`, which answers the SASL
  requests itself and closes the connection on anything else before authentication. A
  failed authentication is answered after a timer (``connection.failed.authentication.delay.ms``)
  and the connection then closes; the connection reads nothing more meanwhile. Handlers get
  the connection's principal (``User:alice``; ``User:ANONYMOUS`` when unauthenticated).

Output of one pass (several responses) goes out in one ``writelines`` call.

Not thread-safe: everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import inspect
import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tierlog.errors import ApiError, LocalProtocolError, ProtocolError
from tierlog.protocol import (
    NEED_DATA,
    ConnectionClosed,
    RequestEvent,
    ServerConnection,
    api_name,
    error_response,
)
from tierlog.security.principal import ANONYMOUS, KafkaPrincipal, NoMatchingRule
from tierlog.security.sasl_server import PASS, Close, Respond
from tierlog.server.kafka_apis import CloseConnection

if TYPE_CHECKING:
    from tierlog.security.channel_builder import ChannelBuilder
    from tierlog.server.broker_metrics import RequestStats

log = logging.getLogger(__name__)

#: Unanswered requests per connection before the connection stops reading.
DEFAULT_MAX_IN_FLIGHT = 64
#: Unanswered request bytes per connection before it stops reading.
DEFAULT_MAX_IN_FLIGHT_BYTES = 64 * 1024 * 1024
#: Transport write buffer high-water mark (asyncio's default, 64 KiB, is small for fetches).
WRITE_BUFFER_HIGH = 8 * 1024 * 1024
#: Bytes asked of each recv() (see connection_made).
READ_SIZE = 2 * 1024 * 1024
#: sendmsg takes at most IOV_MAX buffers (1024 on Linux).
_IOV_MAX = 1024


#: Writes to a TLS transport go in pieces of this size. asyncio's TLS layer (sslproto)
#: encrypts everything handed to one write into a memory BIO and reads it back as one bytes
#: object: with 1 MiB fetch responses that costs 3.5x the throughput of 64 KiB pieces
#: (measured: one process, loopback, 89 vs 318 MB/s). Small parts are coalesced up to it
#: (one TLS record each instead of one per response header).
_TLS_WRITE_CHUNK = 64 * 1024


def _write_tls(t: asyncio.WriteTransport, parts: list[Any]) -> None:
    """Write ``parts`` to a TLS transport in pieces of :data:`_TLS_WRITE_CHUNK`."""
    buf = bytearray()
    for part in parts:
        mv = memoryview(part)
        while mv:
            if not buf and len(mv) >= _TLS_WRITE_CHUNK:
                t.write(mv[:_TLS_WRITE_CHUNK])  # a slice of the records: not copied
                mv = mv[_TLS_WRITE_CHUNK:]
                continue
            room = _TLS_WRITE_CHUNK - len(buf)
            buf += mv[:room]
            mv = mv[room:]
            if len(buf) >= _TLS_WRITE_CHUNK:
                t.write(buf)
                buf = bytearray()
    if buf:
        t.write(buf)


class KafkaConnection(asyncio.Protocol):
    """One client connection (asyncio protocol callbacks → ServerConnection → handlers)."""

    def __init__(self, server: SocketServer, channel: ChannelBuilder | None = None) -> None:
        self._server = server
        self._conn = ServerConnection(server.max_frame_size)
        self._channel = channel
        self._listener = channel.listener if channel is not None else ""
        self._authenticator = channel.new_authenticator() if channel is not None else None
        if self._authenticator is not None and channel is not None:
            limit = channel.max_receive_size_before_auth
            if limit is not None:
                self._conn.max_frame_size = min(limit, server.max_frame_size)
        #: Who the client is (SASL: set once authenticated).
        self.principal: KafkaPrincipal = ANONYMOUS
        # A failed authentication's answer is on its way; nothing more is read.
        self._auth_failed = False
        self._auth_completed = 0  # successful (re-)authentications seen
        self._transport: asyncio.Transport | None = None
        self._in_flight_bytes = 0
        self._reading_paused = False
        self._writing_paused = False
        #: Muted until this time.monotonic() (a quota's throttle time).
        self._muted_until = 0.0
        self._closing = False
        self._eof = False
        self._out: list[Any] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._raw_sock: socket.socket | None = None
        self._tls = False
        # Buffers the socket has not taken yet, sent from here when it is writable (see
        # _write); a close waits for them.
        self._pending: collections.deque[Any] = collections.deque()
        self._pending_bytes = 0
        self._close_when_sent = False
        self.peer = "?"
        self.peer_host = ""

    # ----------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
            self.peer_host = str(peer[0])
        ssl_object = transport.get_extra_info("ssl_object")
        self._tls = ssl_object is not None
        if ssl_object is not None and not self._ssl_principal(ssl_object):
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            self._server.apply_socket_options(sock)
            try:
                if ssl_object is not None:
                    # Bytes must go through TLS: no sendmsg on the raw socket.
                    raise OSError("TLS connection")
                # A duplicate descriptor of the same connection, for sendmsg (see _write).
                self._raw_sock = sock.dup()
            except OSError:
                self._raw_sock = None
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        if hasattr(transport, "max_size"):
            # CPython's selector transport reads at most 256 KiB per recv(); produce frames
            # are ~1 MiB, so the codec would join four chunks (a copy) per request.
            transport.max_size = READ_SIZE
        self._server.connections.add(self)

    def _ssl_principal(self, ssl_object: Any) -> bool:
        """The principal of a TLS client certificate (SSL listeners); False when the
        connection was refused (no mapping rule applies)."""
        channel = self._channel
        if channel is None or channel.uses_sasl:
            return True
        try:
            self.principal = channel.ssl_principal(ssl_object.getpeercert(binary_form=True))
        except (NoMatchingRule, ValueError) as e:
            log.warning("closing TLS connection from %s: %s", self.peer, e)
            self._abort()
            return False
        if self.principal != ANONYMOUS:
            log.info(
                "connection from %s on listener %s authenticated as %s (TLS client certificate)",
                self.peer,
                self._listener,
                self.principal,
            )
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._drop_pending()
        if self._raw_sock is not None:
            self._raw_sock.close()
            self._raw_sock = None
        self._server.connections.discard(self)
        for t in list(self._tasks):
            t.cancel()
        self._tasks.clear()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._conn.receive_data(data)
        self._pump()

    def eof_received(self) -> bool:
        self._eof = True
        if not self._closing:
            self._conn.receive_data(b"")
            self._pump()
        # Keep the transport open until the answers already owed are written. asyncio's TLS
        # transport cannot stay half-open (it closes after the peer's close_notify and warns
        # when asked to keep it): there, answers still owed are dropped, as the client has
        # closed its side of the TLS session.
        return self._transport is None or self._transport.get_extra_info("ssl_object") is None

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._reading_paused:
            self._pump()

    # ----------------------------------------------------------------- request flow

    def _over_limits(self) -> bool:
        s = self._server
        return (
            self._writing_paused
            or (self._muted_until > 0.0 and time.monotonic() < self._muted_until)
            or self._conn.in_flight >= s.max_in_flight
            or self._in_flight_bytes >= s.max_in_flight_bytes
        )

    def _pump(self) -> None:
        """Take request events from the codec while the limits allow, then flush output."""
        conn = self._conn
        while not self._closing and not self._auth_failed:
            if self._over_limits():
                self._pause_reading()
                break
            try:
                ev = conn.next_event()
            except ProtocolError as e:
                self._protocol_error(e)
                return
            if ev is NEED_DATA:
                self._resume_reading()
                break
            if isinstance(ev, ConnectionClosed):
                self._eof = True
                break
            self._dispatch(ev)  # type: ignore[arg-type]
        self._flush()

    def _dispatch(self, ev: RequestEvent) -> None:
        if ev.response is not None:  # answered by the codec (unsupported versions)
            self._respond(ev, ev.response)
            return
        if self._authenticator is not None and self._authenticate(ev):
            return
        t0 = time.perf_counter()
        try:
            result = self._server.handle(ev, self.peer_host, self.principal, self._listener)
        except CloseConnection as e:
            log.info("closing connection from %s: %s", self.peer, e)
            self._flush()  # the answers owed to earlier requests first
            self._abort_after_flush()
            return
        except Exception as e:
            self._handler_failed(ev, e)
            self._server.request_done(ev, t0)
            return
        if inspect.isawaitable(result):
            if ev.expects_response:
                self._in_flight_bytes += ev.size
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._task_done(t, ev, t0))
            return
        if ev.expects_response:
            self._respond(ev, result)
        self._server.request_done(ev, t0)

    def _authenticate(self, ev: RequestEvent) -> bool:
        """Let the SASL state machine see the request; True when it took it."""
        auth = self._authenticator
        assert auth is not None
        decision = auth.on_request(ev.api_key, ev.api_version, ev.request)
        if decision is PASS:
            return False
        if isinstance(decision, Close):
            log.info("closing connection from %s: %s", self.peer, decision.reason)
            self._auth_failed = True
            self._flush()
            self._abort_after_flush()
            return True
        assert isinstance(decision, Respond)
        if auth.completed != self._auth_completed and auth.principal is not None:
            self._auth_completed = auth.completed
            self.principal = auth.principal
            self._conn.max_frame_size = self._server.max_frame_size
            log.info(
                "connection from %s on listener %s %s as %s (SASL %s)",
                self.peer,
                self._listener,
                "authenticated" if auth.completed == 1 else "re-authenticated",
                auth.principal,
                auth.mechanism,
            )
        if not decision.close:
            self._respond(ev, decision.response)
            return True
        # A failure: answer after the delay (a timer: other connections go on), then close.
        log.info(
            "authentication of %s failed (%s); closing in %d ms",
            self.peer,
            decision.reason,
            decision.delay_ms,
        )
        self._auth_failed = True
        self._pause_reading()
        loop = asyncio.get_running_loop()
        loop.call_later(decision.delay_ms / 1000, self._answer_and_close, ev, decision.response)
        return True

    def _answer_and_close(self, ev: RequestEvent, response: Any) -> None:
        if self._closing:
            return
        self._respond(ev, response)
        self._flush()
        self._abort_after_flush()

    def _task_done(self, task: asyncio.Task[Any], ev: RequestEvent, t0: float) -> None:
        self._tasks.discard(task)
        if task.cancelled() or self._closing:
            return
        self._server.request_done(ev, t0)
        if ev.expects_response:
            self._in_flight_bytes -= ev.size
        exc = task.exception()
        if isinstance(exc, CloseConnection):
            log.info("closing connection from %s: %s", self.peer, exc)
            self._flush()
            self._abort_after_flush()
            return
        if exc is not None:
            self._handler_failed(ev, exc)
        elif ev.expects_response:
            self._respond(ev, task.result())
        self._flush()
        if self._reading_paused and not self._over_limits():
            self._pump()

    def _handler_failed(self, ev: RequestEvent, exc: BaseException) -> None:
        """An ApiError raised by a handler (a request the handler refuses as a whole) is
        answered with its code; anything else is a handler bug: UNKNOWN_SERVER_ERROR and a
        traceback in the log. The connection stays usable either way."""
        if isinstance(exc, ApiError):
            log.warning(
                "%s v%d from %s (client_id=%r, correlation_id=%d) refused: %s",
                api_name(ev.api_key),
                ev.api_version,
                self.peer,
                ev.client_id,
                ev.correlation_id,
                exc,
            )
        else:
            log.error(
                "%s v%d from %s (client_id=%r, correlation_id=%d) failed",
                api_name(ev.api_key),
                ev.api_version,
                self.peer,
                ev.client_id,
                ev.correlation_id,
                exc_info=exc,
            )
        if not ev.expects_response:
            return
        try:
            resp = error_response(ev, exc if isinstance(exc, ApiError) else -1)
        except Exception:
            log.exception("closing connection from %s: no error response possible", self.peer)
            self._abort()
            return
        self._respond(ev, resp)

    def _respond(self, ev: RequestEvent, response: Any) -> None:
        try:
            parts = self._conn.send_buffers(ev, response)
        except LocalProtocolError as e:
            log.error(
                "cannot encode the %s v%d response for %s: %s",
                api_name(ev.api_key),
                ev.api_version,
                self.peer,
                e,
            )
            try:
                parts = self._conn.send_buffers(ev, error_response(ev, -1))
            except Exception:
                self._abort()
                return
        if parts:
            self._out.extend(parts)
        throttle = getattr(response, "throttle_time", None)
        if isinstance(throttle, datetime.timedelta) and throttle.total_seconds() > 0:
            self._mute(throttle.total_seconds())

    def _mute(self, seconds: float) -> None:
        """Read nothing for ``seconds`` (a throttled client, Kafka's muted channel)."""
        until = time.monotonic() + seconds
        if until <= self._muted_until:
            return
        self._muted_until = until
        self._pause_reading()
        asyncio.get_running_loop().call_later(seconds, self._unmute)

    def _unmute(self) -> None:
        if self._closing or time.monotonic() < self._muted_until:
            return
        self._muted_until = 0.0
        if self._reading_paused and not self._over_limits():
            self._pump()

    def _flush(self) -> None:
        """Write everything encoded so far in one call."""
        if self._out and self._transport is not None and not self._closing:
            out, self._out = self._out, []
            self._write(out)
        if self._eof and not self._conn.in_flight and not self._tasks:
            self._finish()

    def _write(self, parts: list[Any]) -> None:
        """``writelines`` without its copies.

        Python 3.11's ``writelines`` joins the buffers (a copy of every fetched byte), its
        ``write`` slices what the socket did not take (another) and queues it (a third):
        most of the broker's CPU on fetches larger than the socket buffer
        (``socket.send.buffer.bytes``, 100 KiB as in Kafka). So the buffers (records
        included, uncopied) go to ``sendmsg`` on our duplicate of the socket, and what the
        kernel does not take waits, uncopied, in our own queue, sent when the socket is
        writable (_send_pending); past WRITE_BUFFER_HIGH the connection stops reading, and a
        close waits for it. Ordering holds: the transport gets bytes only while our queue
        is empty (TLS, errors), and ours only while its queue is empty.
        """
        t = self._transport
        assert t is not None
        raw = self._raw_sock
        if raw is None and self._tls:
            _write_tls(t, parts)  # TLS: pieces the SSL transport encrypts quickly
            return
        if raw is None:
            t.writelines(parts)
            return
        if self._pending:  # behind what the socket has not taken yet
            self._queue(parts)
            return
        if t.get_write_buffer_size():  # behind what the transport holds (never both)
            for part in parts:
                t.write(part)
            return
        try:
            sent = raw.sendmsg(parts[:_IOV_MAX])
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            t.writelines(parts)  # the transport reports the error its own way
            return
        for i, part in enumerate(parts):
            n = part.nbytes if isinstance(part, memoryview) else len(part)
            if sent < n:
                rest = parts[i:]
                if sent:
                    rest[0] = memoryview(part)[sent:]
                self._queue(rest)
                asyncio.get_running_loop().add_writer(raw.fileno(), self._send_pending)
                return
            sent -= n

    def _queue(self, parts: list[Any]) -> None:
        """Keep ``parts`` (uncopied) for _send_pending; stop reading requests past
        WRITE_BUFFER_HIGH, as the transport's own buffer would."""
        for part in parts:
            self._pending.append(part)
            self._pending_bytes += part.nbytes if isinstance(part, memoryview) else len(part)
        if self._pending_bytes > WRITE_BUFFER_HIGH and not self._writing_paused:
            self.pause_writing()

    def _send_pending(self) -> None:
        """The socket is writable: send what it takes of the pending buffers, zero-copy."""
        raw = self._raw_sock
        if raw is None or not self._pending:
            self._drop_pending()
            return
        batch = [self._pending[i] for i in range(min(len(self._pending), _IOV_MAX))]
        try:
            sent = raw.sendmsg(batch)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.info("closing connection from %s: %s", self.peer, e)
            self._drop_pending()
            self._abort()
            return
        self._pending_bytes -= sent
        pending = self._pending
        while sent:
            part = pending[0]
            n = part.nbytes if isinstance(part, memoryview) else len(part)
            if sent < n:
                pending[0] = memoryview(part)[sent:]
                break
            pending.popleft()
            sent -= n
        if pending:
            return
        asyncio.get_running_loop().remove_writer(raw.fileno())
        if self._close_when_sent:
            self._close_when_sent = False
            if self._transport is not None:
                self._transport.close()
            return
        t = self._transport
        if self._writing_paused and t is not None and not t.get_write_buffer_size():
            self.resume_writing()

    def _drop_pending(self) -> None:
        if self._pending and self._raw_sock is not None:
            try:
                asyncio.get_running_loop().remove_writer(self._raw_sock.fileno())
            except (RuntimeError, OSError, ValueError):
                pass
        self._pending.clear()
        self._pending_bytes = 0
        self._close_when_sent = False

    def _close_transport(self) -> None:
        """Close once everything written has left: the transport's buffer (``close``
        flushes it) and ours (sent first)."""
        if self._transport is None:
            return
        if self._pending:
            self._close_when_sent = True
        else:
            self._transport.close()

    def _finish(self) -> None:
        if self._transport is not None and not self._closing:
            self._closing = True
            self._close_transport()

    # ----------------------------------------------------------------- flow control

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None:
            self._reading_paused = False
            if not self._eof:
                self._transport.resume_reading()

    # ----------------------------------------------------------------- closing

    def _protocol_error(self, e: Exception) -> None:
        log.warning("closing connection from %s: %s", self.peer, e)
        self._abort()

    def _abort_after_flush(self) -> None:
        """Close once what is written so far has left (``close`` flushes, ``abort`` drops)."""
        self._closing = True
        self._close_transport()

    def _abort(self) -> None:
        self._closing = True
        self._drop_pending()
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Close now (broker shutdown); unanswered requests are dropped."""
        self._abort()


class SocketServer:
    """Kafka listeners on one event loop; ``handle`` is KafkaApis.handle."""

    def __init__(
        self,
        handle: Callable[[Any, str, KafkaPrincipal, str], Any],
        *,
        max_frame_size: int,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
        send_buffer_bytes: int | None = None,
        receive_buffer_bytes: int | None = None,
    ) -> None:
        self.handle = handle
        self.max_frame_size = max_frame_size
        self.max_in_flight = max_in_flight
        self.max_in_flight_bytes = max(max_in_flight_bytes, max_frame_size)
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.connections: set[KafkaConnection] = set()
        self._servers: list[asyncio.Server] = []
        #: RequestMetrics (None: metrics off); every dispatched request is recorded here.
        self.request_stats: RequestStats | None = None

    def request_done(self, ev: RequestEvent, t0: float) -> None:
        """A request was answered (or needs no answer): Kafka's RequestsPerSec and
        TotalTimeMs, measured from dispatch (``t0``, ``time.perf_counter()``)."""
        stats = self.request_stats
        if stats is not None:
            stats.record(ev.api_key, ev.api_version, (time.perf_counter() - t0) * 1000.0)

    def apply_socket_options(self, sock: socket.socket) -> None:
        try:
            if self.send_buffer_bytes and self.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if self.receive_buffer_bytes and self.receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
        except OSError:
            pass

    async def listen(
        self, host: str, port: int, channel: ChannelBuilder | None = None
    ) -> tuple[str, int]:
        """Start one listener; returns the bound (host, port) (port 0 picks a free one).

        ``channel`` is the listener's security (TLS context, SASL); None: PLAINTEXT.
        """
        bound = await self.bind(host, port, channel)
        await self.start_serving()
        return bound

    async def bind(
        self, host: str, port: int, channel: ChannelBuilder | None = None
    ) -> tuple[str, int]:
        """Bind one listener without accepting yet (:meth:`start_serving` does): the broker
        binds first, so a port in use stops it before it writes anything to its log dirs.

        Raises:
            OSError: the address cannot be bound (in use, not local).
        """
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: KafkaConnection(self, channel),
            host=host or None,
            port=port,
            reuse_address=True,
            backlog=1024,
            ssl=channel.ssl_context if channel is not None else None,
            start_serving=False,
        )
        self._servers.append(server)
        sockname = server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def start_serving(self) -> None:
        """Accept connections on every bound listener."""
        for s in self._servers:
            if not s.is_serving():
                await s.start_serving()

    async def stop(self) -> None:
        """Stop accepting and close every connection."""
        for s in self._servers:
            s.close()
        for c in list(self.connections):
            c.close()
        for s in self._servers:
            try:
                await asyncio.wait_for(s.wait_closed(), 5)
            except TimeoutError:
                pass
        self._servers.clear()
