"""The web console's listener (``console.listener``): an asyncio HTTP server on the broker's
event loop.

One request per connection: read the head (at most
:data:`~tierlog.console.http.MAX_HEAD_BYTES`, within :data:`READ_TIMEOUT_S`), answer through
:class:`~tierlog.console.routes.ConsoleRoutes`, close. At most :data:`MAX_CONNECTIONS` are
served at once; more are closed at once. A bug in a page answers a plain 500 and is logged
with its traceback on the broker's side only: the browser never sees one.

Not thread-safe: runs on the event loop it was started on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from urllib.parse import urlsplit

from tierlog.console.broker_view import BrokerView
from tierlog.console.http import (
    MAX_HEAD_BYTES,
    HttpError,
    HttpRequest,
    HttpResponse,
    parse_request_head,
)
from tierlog.console.routes import ConsoleRoutes, error_response

__all__ = ["ConsoleServer", "parse_console_listener"]

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64


def parse_console_listener(value: str) -> tuple[str, int]:
    """``http://host:port`` -> (host, port); port 0 lets the kernel pick one.

    Raises:
        ValueError: not an ``http://host:port`` URL (the message says why).
    """
    try:
        u = urlsplit(value.strip())
        port = u.port
    except ValueError as e:
        raise ValueError(f"not an http://host:port URL ({e})") from None
    if u.scheme != "http" or not u.netloc:
        raise ValueError("must be http://host:port (plain http), e.g. http://127.0.0.1:8080")
    if not u.hostname or port is None:
        raise ValueError("give a host and a port, e.g. http://127.0.0.1:8080")
    if u.path not in ("", "/") or u.query or u.fragment or u.username or u.password:
        raise ValueError("only http://host:port, without a path, query or credentials")
    return u.hostname, port


class ConsoleServer:
    """The console's listener over a :class:`BrokerView`."""

    def __init__(self, view: BrokerView) -> None:
        self.routes = ConsoleRoutes(view)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port``; the bound address.

        Raises:
            OSError: the address cannot be bound (the message names it).
        """
        try:
            self._server = await asyncio.start_server(
                self._serve, host, port, limit=MAX_HEAD_BYTES + 2
            )
        except OSError as e:
            raise OSError(e.errno, f"console.listener http://{host}:{port}: {e.strerror}") from e
        sock = self._server.sockets[0].getsockname()
        return str(sock[0]), int(sock[1])

    async def stop(self) -> None:
        """Stop listening and close the open connections. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            for w in list(self._writers):
                w.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if len(self._writers) >= MAX_CONNECTIONS:
                return
            self._writers.add(writer)
            try:
                await self._one_request(reader, writer)
            finally:
                self._writers.discard(writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went away or said nothing
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head_only = False
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            except asyncio.LimitOverrunError:
                raise HttpError(431, f"request head longer than {MAX_HEAD_BYTES} bytes") from None
            req = parse_request_head(head)
            peer = writer.get_extra_info("peername")
            if isinstance(peer, tuple) and peer:
                req = dataclasses.replace(req, client_host=str(peer[0]))
            head_only = req.method == "HEAD"
            resp = await self._answer(req)
        except HttpError as e:
            resp = error_response(e, api=False)
        writer.write(resp.encode(head_only=head_only))
        await writer.drain()

    async def _answer(self, req: HttpRequest) -> HttpResponse:
        try:
            return await self.routes.handle(req)
        except Exception:
            log.exception("console: %s %s failed", req.method, req.path)
            return HttpResponse(
                500, "text/plain; charset=utf-8", b"500 Internal Server Error (see the broker log)"
            )
