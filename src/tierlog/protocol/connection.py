"""The server side of one Kafka connection, sans-IO (h11's shape).

::

    conn = ServerConnection(max_frame_size=config.socket_request_max_bytes)
    conn.receive_data(chunk)                     # b"" means EOF
    while (ev := conn.next_event()) is not NEED_DATA:   # RemoteProtocolError: log, close
        if isinstance(ev, ConnectionClosed):
            break
        response = ev.response if ev.response is not None else handle(ev)
        if ev.expects_response:
            transport.write(conn.send(ev, response))   # b"" while an earlier one is pending

``send_buffers`` is ``send`` without the final join (large records stay the caller's own
objects), for ``writelines``/``sendmsg``.

What it owns:

* **Framing.** A frame is an int32 size and that many bytes. A negative size or one above
  ``max_frame_size`` (Kafka's ``socket.request.max.bytes``, compared with the size field like
  Kafka does) is rejected as soon as the 4 size bytes arrive, before buffering anything.
  Frames wholly inside one received chunk are parsed in place; a frame spread over chunks is
  joined once, when its last byte arrives.
* **Request headers.** v1 for non-flexible request versions, v2 for flexible ones (v2 keeps the
  int16-length client id and adds tagged fields); kio's native readers parse header and body
  (~0.2-0.3 µs each for small requests). A frame must be consumed exactly: trailing bytes are a
  protocol error, like a truncated body. kio rejects unknown tagged fields instead of skipping
  them (KIP-482): in the header we fall back to our own parser, which skips them; in a body
  they are a protocol error (kio knows every tag of Kafka 4's schemas, and no client we serve
  sends others).
* **Versions.** :mod:`tierlog.protocol.api_versions` decides. An unknown API key or a version
  outside the advertised range is a :class:`~tierlog.errors.RemoteProtocolError` (Kafka closes
  the connection) — except ApiVersions: a request of a version we do not know is not parsed
  past its v1 header and gets a ready response: a v0 body with UNSUPPORTED_VERSION (35) and the
  whole version table, including key 18. Versions advertised below the implemented minimum
  (Produce v0-2, ...) also get a ready UNSUPPORTED_VERSION response in the API's own error
  fields (see :mod:`tierlog.protocol.errors`); acks=0 Produce of those versions closes the
  connection instead, as Kafka does for acks=0 errors.
* **Responses.** Response header v0 (correlation id) or v1 (plus empty tagged fields) as the
  kio response class says; ApiVersions' is always v0, whatever the version. The body is
  written by :mod:`tierlog.protocol._writer`. The response must be an instance of exactly
  the class of the request's version (:func:`~tierlog.protocol.api_versions.response_class`).
* **Order.** Kafka clients match responses to requests by order, so responses leave in
  request order. Handlers may finish in any order: :meth:`send` buffers a response until all
  earlier ones were sent and returns whatever became writable (possibly nothing, possibly
  several responses). acks=0 Produce requests have ``expects_response=False`` and never hold
  back later responses.

Bounded memory: the receive buffer holds at most one incomplete frame plus the chunks passed
to :meth:`receive_data` since :meth:`next_event` last returned NEED_DATA. The server bounds the
rest by not reading while :attr:`in_flight` or :attr:`buffered_bytes` is high.

Errors: every malformed input surfaces as :class:`~tierlog.errors.RemoteProtocolError` from
:meth:`next_event` (message: API, version, client id, correlation id), after which the
connection is dead: close it. Misuse on our side (a response of the wrong class, sending
twice, a value kio cannot encode) raises :class:`~tierlog.errors.LocalProtocolError` from
:meth:`send`.

Not thread-safe: one connection belongs to one event loop. Not idempotent.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader
from kio.serial.readers import read_unsigned_varint

from tierlog.errors import LocalProtocolError, RemoteProtocolError, UnsupportedVersion
from tierlog.protocol._events import (
    NEED_DATA,
    ConnectionClosed,
    RequestEvent,
    make_request_event,
)
from tierlog.protocol._writer import Writer, compile_writer
from tierlog.protocol.api_versions import (
    ApiKey,
    api_name,
    api_versions_v0_error_response,
    implemented_min,
    is_advertised,
    request_class,
    response_class,
)
from tierlog.protocol.errors import error_response_for
from tierlog.protocol.length_check import check_lengths

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "ServerConnection"]

DEFAULT_MAX_FRAME_SIZE: Final = 104857600
"""Kafka's default ``socket.request.max.bytes`` (100 MiB)."""

_I32: Final = struct.Struct(">i")
_KEY_VERSION_CID: Final = struct.Struct(">hhi")
_HEADER_V0: Final = struct.Struct(">ii")  # size placeholder, correlation id
_HEADER_V1: Final = struct.Struct(">iiB")  # ... and zero tagged fields
_MIN_HEADER: Final = 10  # api key, version, correlation id, client id length


@dataclass(frozen=True, slots=True)
class _ApiSpec:
    """Everything the codec needs for one (api key, version); built once, shared."""

    api_key: int
    api_version: int
    name: str
    header_reader: Any
    request_cls: type[Any]
    body_reader: Any
    response_cls: type[Any]
    writer: Writer
    flexible_response_header: bool
    legacy: bool  # below implemented_min: answered with UNSUPPORTED_VERSION by the codec


_SPECS: dict[int, _ApiSpec | None] = {}


def _spec(api_key: int, api_version: int) -> _ApiSpec | None:
    k = (api_key << 16) | (api_version & 0xFFFF)
    try:
        return _SPECS[k]
    except KeyError:
        pass
    spec: _ApiSpec | None = None
    if is_advertised(api_key, api_version):
        req_cls = request_class(api_key, api_version)
        resp_cls = response_class(api_key, api_version)
        spec = _ApiSpec(
            api_key=api_key,
            api_version=api_version,
            name=api_name(api_key),
            header_reader=entity_reader(req_cls.__header_schema__),
            request_cls=req_cls,
            body_reader=entity_reader(req_cls),
            response_cls=resp_cls,
            writer=compile_writer(resp_cls),
            flexible_response_header=resp_cls.__header_schema__.__flexible__,
            legacy=api_version < implemented_min(api_key),
        )
    _SPECS[k] = spec
    return spec


_read_header_v1 = entity_reader(RequestHeaderV1)
_CLIENT_ID_LEN: Final = struct.Struct(">h")


def _read_header_v2_skipping_tags(buf: bytes, start: int, end: int) -> tuple[Any, int]:
    """Request header v2, skipping its tagged fields (the fallback of kio's reader).

    Raises:
        ValueError: the header does not fit in ``buf[start:end]`` or is malformed.
    """
    api_key, api_version, correlation_id = _KEY_VERSION_CID.unpack_from(buf, start)
    (n,) = _CLIENT_ID_LEN.unpack_from(buf, start + 8)
    pos = start + 10
    client_id = None
    if n >= 0:
        client_id = buf[pos : pos + n].decode()
        pos += n
    elif n != -1:
        raise ValueError(f"client id length {n}")
    count, k = read_unsigned_varint(buf, pos)
    pos += k
    for _ in range(count):
        _tag, k = read_unsigned_varint(buf, pos)
        pos += k
        length, k = read_unsigned_varint(buf, pos)
        pos += k + length
        if pos > end:
            break
    if pos > end:
        raise ValueError("request header runs past the end of the frame")
    header = RequestHeaderV2(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    return header, pos - start


class ServerConnection:
    """One client connection's codec: bytes in, :class:`RequestEvent` out, responses in order.

    Args:
        max_frame_size: the largest request size field accepted (``socket.request.max.bytes``).
    """

    __slots__ = (
        "_eof",
        "_error",
        "_head",
        "_max_frame_size",
        "_next_seq",
        "_order",
        "_pending",
        "_pos",
        "_ready",
        "_tail",
        "_tail_len",
    )

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self._max_frame_size = max_frame_size
        # receive buffer: unread bytes are _head[_pos:] followed by the chunks in _tail
        self._head = b""
        self._pos = 0
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self._eof = False
        self._error: str | None = None
        self._next_seq = 0
        # response ordering: seqs awaiting a response, oldest first; what each needs to be
        # encoded; and encoded responses held back behind an earlier one
        self._order: deque[int] = deque()
        self._pending: dict[int, tuple[_ApiSpec, int]] = {}
        self._ready: dict[int, list[Any]] = {}

    # ------------------------------------------------------------------ state

    @property
    def max_frame_size(self) -> int:
        """The largest request size field accepted; the server lowers it on SASL listeners
        until the client has authenticated (``sasl.server.max.receive.size``)."""
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        if value < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {value}")
        self._max_frame_size = value

    @property
    def in_flight(self) -> int:
        """Requests returned by :meth:`next_event` whose response has not been released yet
        (acks=0 Produce excluded)."""
        return len(self._order)

    @property
    def buffered_bytes(self) -> int:
        """Received bytes not yet returned as events."""
        return len(self._head) - self._pos + self._tail_len

    @property
    def eof_received(self) -> bool:
        """Whether the client closed its side (``receive_data(b"")``)."""
        return self._eof

    # ------------------------------------------------------------------ receiving

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the client; ``b""`` means the client closed its side.

        Raises:
            ValueError: data after EOF (a caller bug).
        """
        if not data:
            self._eof = True
            return
        if self._eof:
            raise ValueError("receive_data() after EOF")
        if type(data) is not bytes:
            data = bytes(data)  # kio reads only immutable buffers
        if self._pos >= len(self._head) and not self._tail:
            self._head = data
            self._pos = 0
        else:
            self._tail.append(data)
            self._tail_len += len(data)

    def next_event(self) -> RequestEvent | type[NEED_DATA] | ConnectionClosed:
        """The next request, NEED_DATA, or ConnectionClosed once the client closed and every
        complete request was returned.

        Raises:
            RemoteProtocolError: malformed input; the connection is dead, close it. Every
                later call raises again.
        """
        if self._error is not None:
            raise RemoteProtocolError(f"connection already failed: {self._error}")
        try:
            head = self._head
            pos = self._pos
            # fast path: the size field and the whole frame are in _head
            if len(head) - pos >= 4:
                size = _I32.unpack_from(head, pos)[0]
                end = pos + 4 + size
                if end <= len(head) and 0 <= size <= self._max_frame_size:
                    self._pos = end
                    return self._parse(head, pos + 4, size)
            found = self._next_frame()
            if found is None:
                if not self._eof:
                    return NEED_DATA
                if self.buffered_bytes:
                    raise RemoteProtocolError(
                        f"client closed the connection inside a frame "
                        f"({self.buffered_bytes} bytes buffered)"
                    )
                return ConnectionClosed()
            return self._parse(*found)
        except RemoteProtocolError as e:
            self._error = str(e)
            raise

    def _next_frame(self) -> tuple[bytes, int, int] | None:
        """(buffer, offset of the header, size) of the next whole frame, or None."""
        avail = len(self._head) - self._pos
        if avail + self._tail_len < 4:
            return None
        if avail < 4:
            self._gather(4)
        size = _I32.unpack_from(self._head, self._pos)[0]
        if size < 0 or size > self._max_frame_size:
            raise RemoteProtocolError(
                f"request frame size {size} is outside [0, {self._max_frame_size}] "
                f"(socket.request.max.bytes)"
            )
        need = 4 + size
        if len(self._head) - self._pos + self._tail_len < need:
            return None
        if len(self._head) - self._pos < need:
            self._gather(need)
        head, pos = self._head, self._pos
        self._pos = pos + need
        return head, pos + 4, size

    def _gather(self, n: int) -> None:
        """Make ``_head[_pos:]`` hold at least ``n`` bytes, joining as few chunks as possible."""
        rest = self._head[self._pos :] if self._pos < len(self._head) else b""
        chunks = [rest] if rest else []
        have = len(rest)
        tail = self._tail
        while have < n:
            c = tail.popleft()
            self._tail_len -= len(c)
            chunks.append(c)
            have += len(c)
        self._head = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._pos = 0

    def _parse(self, buf: bytes, start: int, size: int) -> RequestEvent:
        if size < _MIN_HEADER:
            raise RemoteProtocolError(f"request frame of {size} bytes is too short for a header")
        api_key, api_version, correlation_id = _KEY_VERSION_CID.unpack_from(buf, start)
        spec = _SPECS.get((api_key << 16) | (api_version & 0xFFFF)) or _spec(api_key, api_version)
        if spec is None:
            return self._unsupported(buf, start, size, api_key, api_version, correlation_id)
        try:
            try:
                header, hlen = spec.header_reader(buf, start)
            except KeyError:
                # kio rejects unknown tagged fields ("Unknown tagged field tag: 0") where
                # KIP-482 says to skip them; header v2 defines none, so skip them here
                header, hlen = _read_header_v2_skipping_tags(buf, start, start + size)
        except Exception as e:
            raise RemoteProtocolError(
                f"malformed {spec.name} v{api_version} request header "
                f"(correlation_id={correlation_id}, {size} bytes): {type(e).__name__}: {e}"
            ) from e
        try:
            # kio's native parser aborts the process on a huge count: check lengths first
            check_lengths(spec.request_cls, buf, start + hlen, start + size)
            request, blen = spec.body_reader(buf, start + hlen)
        except Exception as e:
            raise RemoteProtocolError(
                f"malformed {spec.name} v{api_version} request (client_id={header.client_id!r}, "
                f"correlation_id={correlation_id}, {size} bytes): {type(e).__name__}: {e}"
            ) from e
        # Bytes left after the request are ignored, as Kafka's parser does: librdkafka 2.16
        # sends Metadata v13 (all topics) with 3 extra bytes. Reading past the frame is fatal.
        if hlen + blen > size:
            raise RemoteProtocolError(
                f"malformed {spec.name} v{api_version} request (client_id={header.client_id!r}, "
                f"correlation_id={correlation_id}): frame of {size} bytes, request of "
                f"{hlen + blen}"
            )
        seq = self._next_seq
        self._next_seq = seq + 1
        expects_response = api_key != 0 or request.acks != 0
        response = None
        if spec.legacy:
            if not expects_response:
                raise RemoteProtocolError(
                    f"{spec.name} v{api_version} with acks=0 is not supported "
                    f"(client_id={header.client_id!r}); closing the connection"
                )
            response = error_response_for(
                api_key,
                api_version,
                request,
                UnsupportedVersion(
                    f"{spec.name} v{api_version} is advertised for compatibility only; "
                    f"the lowest implemented version is {implemented_min(api_key)}"
                ),
            )
        if expects_response:
            self._order.append(seq)
            self._pending[seq] = (spec, correlation_id)
        return make_request_event(
            api_key,
            api_version,
            correlation_id,
            header.client_id,
            request,
            header,
            seq,
            expects_response,
            size,
            response,
        )

    def _unsupported(
        self, buf: bytes, start: int, size: int, api_key: int, api_version: int, cid: int
    ) -> RequestEvent:
        """A request whose (api key, version) is not advertised."""
        try:
            header, _ = _read_header_v1(buf, start)
        except Exception as e:
            raise RemoteProtocolError(
                f"unsupported request with a malformed header: {api_name(api_key)} "
                f"(key {api_key}) v{api_version} (correlation_id={cid}): "
                f"{type(e).__name__}: {e}"
            ) from e
        if api_key != ApiKey.API_VERSIONS:
            raise RemoteProtocolError(
                f"unsupported request: {api_name(api_key)} (key {api_key}) v{api_version} "
                f"(client_id={header.client_id!r}, correlation_id={cid})"
            )
        # KIP-511: do not parse the body; answer v0 with error 35 and our versions
        spec = _spec(ApiKey.API_VERSIONS, 0)
        assert spec is not None
        seq = self._next_seq
        self._next_seq = seq + 1
        self._order.append(seq)
        self._pending[seq] = (spec, cid)
        return make_request_event(
            api_key,
            api_version,
            cid,
            header.client_id,
            None,
            header,
            seq,
            True,
            size,
            api_versions_v0_error_response(),
        )

    # ------------------------------------------------------------------ sending

    def send(self, event: RequestEvent, response: Any) -> bytes:
        """Encode the response to ``event``; return the bytes now writable, in request order.

        ``b""`` while an earlier response is still pending; several responses at once when
        this one unblocks them.

        Raises:
            LocalProtocolError: no response is pending for ``event`` (already sent, acks=0,
                or another connection's event), ``response`` is not of the request version's
                class, or a value in it cannot be encoded. The connection stays usable: send
                another response (e.g. :func:`~tierlog.protocol.errors.error_response`).
        """
        parts = self.send_buffers(event, response)
        if not parts:
            return b""
        if len(parts) == 1:
            return bytes(parts[0])
        return b"".join(parts)

    def send_buffers(self, event: RequestEvent, response: Any) -> list[Any]:
        """Like :meth:`send`, but the buffers unjoined, for ``writelines``/``sendmsg``.

        Large ``bytes``/``records`` values of the response (≥ 8 KiB) are elements of the list
        themselves, not copies. The first buffer of each response is a bytearray owned by the
        caller from now on.

        Raises:
            LocalProtocolError: as :meth:`send`.
        """
        seq = event.seq
        pending = self._pending.get(seq)
        if pending is None or pending[1] != event.correlation_id:
            raise LocalProtocolError(
                f"no response pending for request seq={seq} correlation_id="
                f"{event.correlation_id} (already sent, acks=0, or another connection's)"
            )
        spec, correlation_id = pending
        parts = self._encode(spec, correlation_id, response)
        del self._pending[seq]
        order = self._order
        if order[0] != seq:
            self._ready[seq] = parts
            return []
        order.popleft()
        ready = self._ready
        if ready:
            while order and order[0] in ready:
                parts.extend(ready.pop(order.popleft()))
        return parts

    def _encode(self, spec: _ApiSpec, correlation_id: int, response: Any) -> list[Any]:
        if type(response) is not spec.response_cls:
            raise LocalProtocolError(
                f"{spec.name} v{spec.api_version} needs a {spec.response_cls.__module__}."
                f"{spec.response_cls.__qualname__}, got {type(response).__module__}."
                f"{type(response).__qualname__}"
            )
        if spec.flexible_response_header:
            buf = bytearray(_HEADER_V1.pack(0, correlation_id, 0))
        else:
            buf = bytearray(_HEADER_V0.pack(0, correlation_id))
        parts: list[Any] = []
        try:
            last = spec.writer(response, buf, parts)
        except Exception as e:
            raise LocalProtocolError(
                f"cannot encode {spec.name} v{spec.api_version} response: {type(e).__name__}: {e}"
            ) from e
        if not parts:
            _I32.pack_into(last, 0, len(last) - 4)
            return [last]
        if last:
            parts.append(last)
        _I32.pack_into(parts[0], 0, sum(map(len, parts)) - 4)
        return parts
