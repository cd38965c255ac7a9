"""The client side of one Kafka connection, sans-IO (h11's shape): requests out, responses in.

::

    conn = ClientConnection(client_id="tierlog-broker-1")
    transport.write(conn.send(request))               # framed bytes; the request is pending
    conn.receive_data(chunk)                          # b"" means EOF
    while (got := conn.next_response()) is not NEED_DATA:
        if isinstance(got, ConnectionClosed):
            break
        correlation_id, response = got                # oldest pending request's response

Used by the broker-to-broker client (:mod:`tierlog.cluster.broker_client`, asyncio) and the
Spark data source's blocking client (:mod:`tierlog.spark.fetch_client`); the server side is
:class:`~tierlog.protocol.connection.ServerConnection`.

What it owns:

* **Framing.** A request is ``int32 size | request header | body``; a response is
  ``int32 size | response header | body``. A response size outside ``[4, max_frame_size]``
  is rejected as soon as its 4 size bytes arrive. Responses are read in place from the
  received chunks; a frame spread over chunks is joined once, when its last byte arrives.
  :attr:`bytes_needed` says how many bytes complete the frame being received, so a blocking
  reader can ask the socket for exactly those.
* **Receiving in place.** Instead of :meth:`receive_data`, an asyncio ``BufferedProtocol``
  may have the socket write straight into the connection's own receive buffer:
  :meth:`get_buffer`, then :meth:`buffer_updated` with the number of bytes written. Frames
  are parsed where they landed, so a response's bytes are copied once between the kernel
  and kio's objects (a broker's Fetch responses: a megabyte each). The buffer grows to the
  largest frame and is reused. One connection uses one way of receiving, not both.
* **Request headers.** v1 for non-flexible request versions, v2 (plus empty tagged fields)
  for flexible ones, as kio's request class says; the client id is given once. Correlation
  ids count up from 0 and wrap at 2^31 - 1, as Kafka's clients do.
* **Versions.** :meth:`send` encodes a kio request entity at its own class's version, or at
  ``api_version`` when given: an entity of another version is converted field by field
  (:func:`convert_entity`). Which version the peer supports is decided by the caller
  (ApiVersions; see :meth:`~tierlog.cluster.broker_client.BrokerClient.request`).
* **Responses.** Matched to requests by order, as Kafka answers them: the correlation id of
  each response must be the oldest pending request's. Response header v0 or v1 as kio's
  response class of the request's version says (ApiVersions' is always v0). An ApiVersions
  response with UNSUPPORTED_VERSION (35) is read as v0, the version a broker answers an
  unknown ApiVersions version with (KIP-511). Bodies are read by kio after the lengths inside
  them were checked (:mod:`tierlog.protocol.length_check`: kio's native reader aborts the
  process on a huge count). Produce with ``acks=0`` gets no response and is not pending.

Errors: a peer that breaks the protocol (a bad size, an unexpected correlation id, a body
that does not parse or leaves bytes over, EOF inside a frame) raises
:class:`~tierlog.errors.RemoteProtocolError` from :meth:`next_response`; the connection is
dead after it, close it. A request kio cannot encode raises
:class:`~tierlog.errors.LocalProtocolError` from :meth:`send`, and nothing is pending.

Not thread-safe: one connection belongs to one thread or event loop. Not idempotent.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.serial.readers import read_unsigned_varint

from tierlog.errors import LocalProtocolError, RemoteProtocolError
from tierlog.protocol._events import NEED_DATA, ConnectionClosed
from tierlog.protocol._writer import Writer, compile_writer
from tierlog.protocol.api_versions import api_name
from tierlog.protocol.length_check import check_lengths

__all__ = [
    "DEFAULT_MAX_RESPONSE_SIZE",
    "ClientConnection",
    "convert_entity",
]

DEFAULT_MAX_RESPONSE_SIZE: Final = 1 << 30
"""The largest response size field accepted by default (1 GiB): refuse absurd sizes
instead of buffering them."""

_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")
_HEADER: Final = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id len
_MAX_CORRELATION_ID: Final = 2**31 - 1
#: The receive-in-place buffer's first size, the least room get_buffer() offers, and the
#: largest buffer kept after its frame was parsed (Fetch responses of followers are at most
#: replica.fetch.response.max.bytes, 10 MiB by default).
_RECEIVE_BUFFER: Final = 1 << 16
_RECEIVE_MIN: Final = 1 << 14
_RECEIVE_KEEP: Final = 16 << 20
_API_VERSIONS: Final = 18
_UNSUPPORTED_VERSION: Final = 35


@dataclass(frozen=True, slots=True)
class _Spec:
    """What the codec needs for one (api key, version); built once, shared."""

    api_key: int
    api_version: int
    name: str
    request_cls: type[Any]
    writer: Writer
    flexible_request_header: bool
    response_cls: type[Any]
    reader: Any
    flexible_response_header: bool


_SPECS: dict[tuple[int, int], _Spec] = {}


def _spec(api_key: int, api_version: int) -> _Spec:
    """Raises KeyError: kio has no schema for (api key, version)."""
    key = (api_key, api_version)
    spec = _SPECS.get(key)
    if spec is None:
        try:
            req_cls = load_request_schema(api_key, api_version)
            resp_cls = load_response_schema(api_key, api_version)
        except (KeyError, ModuleNotFoundError, UnknownEntity) as e:
            raise KeyError(key) from e
        spec = _Spec(
            api_key=api_key,
            api_version=api_version,
            name=api_name(api_key),
            request_cls=req_cls,
            writer=compile_writer(req_cls),
            flexible_request_header=req_cls.__header_schema__.__flexible__,
            response_cls=resp_cls,
            reader=entity_reader(resp_cls),
            flexible_response_header=resp_cls.__header_schema__.__flexible__,
        )
        _SPECS[key] = spec
    return spec


def _zero(f: dataclasses.Field[Any]) -> Any:
    """Kafka's implicit default of a field without a schema default: null for nullable
    fields, empty arrays, ``0``/``False``/``""``/zero durations; ``_NO_ZERO`` for what cannot
    be made up (a topic id, a nested entity)."""
    fc = classify_field(f)
    if fc.is_array:
        return ()
    if isinstance(fc, EntityField):
        return _NO_ZERO
    kafka_type = get_schema_field_type(f)
    if kafka_type == "uuid":
        return _NO_ZERO  # kio types topic ids nullable; a zero id would name no topic
    if is_optional(f):
        return None
    if kafka_type in ("bool",):
        return False
    if kafka_type in ("string",):
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(0)
    if kafka_type.startswith(("int", "uint", "float", "error_code")):
        return 0
    return _NO_ZERO  # datetime


_NO_ZERO: Final = object()


def convert_entity(entity: Any, target_cls: type[Any]) -> Any:
    """``entity`` (a kio entity of one version) as an instance of ``target_cls`` (the same
    entity of another version), field by field by name, nested entities too -- what Kafka's
    generated messages do when one message object is written at another version.

    Fields the target does not have are dropped. Fields it has and ``entity`` lacks take their
    schema default, else Kafka's implicit one (null, empty array, 0, false, ""): so a v12
    Metadata request goes down to v9 with ``include_cluster_authorized_operations=False``. A
    topic id or nested entity cannot be made up: Fetch v12 -> v13 (``topic_id``) is refused.

    Raises:
        LocalProtocolError: as above.
    """
    if type(entity) is target_cls:
        return entity
    values: dict[str, Any] = {}
    for f in dataclasses.fields(target_cls):
        if not hasattr(entity, f.name):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                zero = _zero(f)
                if zero is _NO_ZERO:
                    raise LocalProtocolError(
                        f"cannot convert {type(entity).__qualname__} "
                        f"v{type(entity).__version__} to v{target_cls.__version__}: no value "
                        f"for {target_cls.__qualname__}.{f.name}"
                    )
                values[f.name] = zero
            continue
        value = getattr(entity, f.name)
        if value is not None:
            fc = classify_field(f)
            if isinstance(fc, EntityField):
                value = convert_entity(value, fc.type_)
            elif isinstance(fc, EntityTupleField):
                value = tuple(convert_entity(v, fc.type_) for v in value)
        values[f.name] = value
    return target_cls(**values)


class ClientConnection:
    """One connection's client codec: framed requests out, ``(correlation_id, response)`` in.

    Args:
        client_id: the request header's client id (None: null).
        max_frame_size: the largest response size field accepted.
    """

    __slots__ = (
        "_client_id",
        "_eof",
        "_error",
        "_head",
        "_last_correlation_id",
        "_max_frame_size",
        "_next_correlation_id",
        "_pending",
        "_pos",
        "_rbuf",
        "_rend",
        "_rstart",
        "_tail",
        "_tail_len",
    )

    def __init__(
        self, client_id: str | None = None, *, max_frame_size: int = DEFAULT_MAX_RESPONSE_SIZE
    ) -> None:
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self._client_id = None if client_id is None else client_id.encode()
        self._max_frame_size = max_frame_size
        self._next_correlation_id = 0
        self._last_correlation_id = -1
        self._pending: deque[tuple[int, _Spec]] = deque()
        # receive buffer: unread bytes are _head[_pos:] followed by the chunks in _tail
        self._head = b""
        self._pos = 0
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        # receive-in-place buffer (get_buffer): unread bytes are _rbuf[_rstart:_rend]
        self._rbuf: bytearray | None = None
        self._rstart = 0
        self._rend = 0
        self._eof = False
        self._error: str | None = None

    # ------------------------------------------------------------------ state

    @property
    def in_flight(self) -> int:
        """Requests sent whose response has not been returned yet."""
        return len(self._pending)

    @property
    def last_correlation_id(self) -> int:
        """The correlation id of the latest request :meth:`send` encoded (-1 before any)."""
        return self._last_correlation_id

    @property
    def buffered_bytes(self) -> int:
        """Received bytes not yet returned as responses."""
        return len(self._head) - self._pos + self._tail_len

    @property
    def bytes_needed(self) -> int:
        """How many more bytes complete the frame being received (the size field first);
        0 when a whole frame is buffered."""
        have = self.buffered_bytes
        if have < 4:
            return 4 - have
        if len(self._head) - self._pos < 4:
            self._gather(4)
        size: int = _I32.unpack_from(self._head, self._pos)[0]
        return max(0, 4 + max(size, 0) - have)

    # ------------------------------------------------------------------ sending

    def send(self, request: Any, api_version: int | None = None) -> bytes:
        """The framed bytes of ``request``; its response is pending from now on (unless it is
        an acks=0 Produce).

        Args:
            request: a kio request entity.
            api_version: the version to send (default: the entity class's own); an entity of
                another version is converted (:func:`convert_entity`).

        Raises:
            LocalProtocolError: kio has no such version, the entity cannot be converted to
                it, or a value in it cannot be encoded. Nothing is pending then.
        """
        cls = type(request)
        try:
            api_key = int(cls.__api_key__)
            version = int(cls.__version__) if api_version is None else api_version
            spec = _spec(api_key, version)
        except (AttributeError, KeyError) as e:
            raise LocalProtocolError(
                f"not a request kio can encode: {cls.__qualname__} (api_version={api_version})"
            ) from e
        if cls is not spec.request_cls:
            request = convert_entity(request, spec.request_cls)
        correlation_id = self._next_correlation_id
        client_id = self._client_id
        buf = bytearray(
            _HEADER.pack(
                0,
                api_key,
                version,
                correlation_id,
                -1 if client_id is None else len(client_id),
            )
        )
        if client_id is not None:
            buf += client_id
        if spec.flexible_request_header:
            buf.append(0)  # no tagged fields
        parts: list[Any] = []
        try:
            last = spec.writer(request, buf, parts)
        except Exception as e:
            raise LocalProtocolError(
                f"cannot encode {spec.name} v{version} request: {type(e).__name__}: {e}"
            ) from e
        if parts:  # parts[0] is ``buf``: large values were passed through by reference
            if last:
                parts.append(last)
            _I32.pack_into(parts[0], 0, sum(map(len, parts)) - 4)
            data = b"".join(parts)
        else:
            _I32.pack_into(last, 0, len(last) - 4)
            data = bytes(last)
        self._last_correlation_id = correlation_id
        self._next_correlation_id = (
            0 if correlation_id == _MAX_CORRELATION_ID else correlation_id + 1
        )
        if api_key != 0 or request.acks != 0:
            self._pending.append((correlation_id, spec))
        return data

    # ------------------------------------------------------------------ receiving

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer; ``b""`` means the peer closed its side.

        Raises:
            ValueError: data after EOF (a caller bug).
        """
        if not data:
            self._eof = True
            return
        if self._eof:
            raise ValueError("receive_data() after EOF")
        if self._rbuf is not None:
            raise ValueError("receive_data() on a connection that receives with get_buffer()")
        if type(data) is not bytes:
            data = bytes(data)  # kio reads only immutable buffers
        if self._pos >= len(self._head) and not self._tail:
            self._head = data
            self._pos = 0
        else:
            self._tail.append(data)
            self._tail_len += len(data)

    def get_buffer(self) -> memoryview:
        """Where the next bytes from the peer go (asyncio's ``BufferedProtocol.get_buffer``);
        say how many were written with :meth:`buffer_updated`. Never empty: room for the
        rest of the frame being received at least.

        Raises:
            ValueError: after :meth:`receive_data` gave bytes, or after EOF.
        """
        buf = self._rbuf
        if buf is None:
            if self._eof or self.buffered_bytes:
                raise ValueError("get_buffer() on a connection that receives with receive_data()")
            buf = self._rbuf = bytearray(_RECEIVE_BUFFER)
        start, end = self._rstart, self._rend
        have = end - start
        need = _RECEIVE_MIN
        if have >= 4:
            size = _I32.unpack_from(buf, start)[0]
            if 4 <= size <= self._max_frame_size:  # else next_response() refuses it
                need = max(need, 4 + size - have)
        if len(buf) - end < need:
            if have + need > len(buf):
                # The frame being received is larger than the buffer: a new one its size (a
                # bytearray() zeroes what it allocates, so it is made once, kept and reused).
                grown = bytearray(max(have + need, 2 * len(buf)))
                grown[:have] = buf[start:end]
                self._rbuf = buf = grown
            else:
                buf[:have] = buf[start:end]  # the unread start of a frame, to the front
            self._rstart, self._rend = 0, have
            end = have
        return memoryview(buf)[end:]

    def buffer_updated(self, n: int) -> None:
        """``n`` bytes were written at the start of the last :meth:`get_buffer`."""
        self._rend += n

    def _gather(self, n: int) -> None:
        """Make ``_head[_pos:]`` hold at least ``n`` bytes, joining as few chunks as possible
        (a frame spread over chunks is joined once, when it is complete)."""
        rest = self._head[self._pos :] if self._pos < len(self._head) else b""
        chunks = [rest] if rest else []
        have = len(rest)
        while have < n:
            c = self._tail.popleft()
            self._tail_len -= len(c)
            chunks.append(c)
            have += len(c)
        self._head = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._pos = 0

    def next_response(self) -> tuple[int, Any] | type[NEED_DATA] | ConnectionClosed:
        """``(correlation_id, response)`` of the oldest pending request, NEED_DATA, or
        ConnectionClosed once the peer closed and every whole response was returned
        (:attr:`in_flight` says how many requests it left unanswered).

        Raises:
            RemoteProtocolError: the peer broke the protocol; the connection is dead, close
                it. Every later call raises again.
        """
        if self._error is not None:
            raise RemoteProtocolError(f"connection already failed: {self._error}")
        try:
            return self._next_response()
        except RemoteProtocolError as e:
            self._error = str(e)
            raise

    def _next_response(self) -> tuple[int, Any] | type[NEED_DATA] | ConnectionClosed:
        if self._rbuf is not None:
            return self._next_response_in_place(self._rbuf)
        avail = self.buffered_bytes
        if avail >= 4:
            if len(self._head) - self._pos < 4:
                self._gather(4)
            size = _I32.unpack_from(self._head, self._pos)[0]
            if size < 4 or size > self._max_frame_size:
                raise RemoteProtocolError(
                    f"response frame size {size} is outside [4, {self._max_frame_size}]"
                )
            if avail >= 4 + size:
                if len(self._head) - self._pos < 4 + size:
                    self._gather(4 + size)
                buf, start = self._head, self._pos + 4
                self._pos = start + size
                return self._parse(buf, start, start + size)
        if not self._eof:
            return NEED_DATA
        if avail:
            raise RemoteProtocolError(
                f"peer closed the connection inside a response frame ({avail} bytes "
                f"buffered, {len(self._pending)} requests pending)"
            )
        return ConnectionClosed()

    def _next_response_in_place(
        self, buf: bytearray
    ) -> tuple[int, Any] | type[NEED_DATA] | ConnectionClosed:
        """:meth:`_next_response` for bytes received with :meth:`get_buffer`: the frame is
        parsed where it is (kio copies out what it keeps)."""
        start = self._rstart
        avail = self._rend - start
        if avail >= 4:
            size = _I32.unpack_from(buf, start)[0]
            if size < 4 or size > self._max_frame_size:
                raise RemoteProtocolError(
                    f"response frame size {size} is outside [4, {self._max_frame_size}]"
                )
            if avail >= 4 + size:
                end = start + 4 + size
                if end == self._rend:
                    self._rstart = self._rend = 0
                else:
                    self._rstart = end
                if len(buf) > _RECEIVE_KEEP and self._rstart == 0:
                    self._rbuf = bytearray(_RECEIVE_BUFFER)  # a one-off huge frame
                with memoryview(buf) as view, view.toreadonly() as frame:
                    return self._parse(frame, start + 4, end)  # type: ignore[arg-type]
        if not self._eof:
            return NEED_DATA
        if avail:
            raise RemoteProtocolError(
                f"peer closed the connection inside a response frame ({avail} bytes "
                f"buffered, {len(self._pending)} requests pending)"
            )
        return ConnectionClosed()

    def _parse(self, frame: bytes, start: int, end: int) -> tuple[int, Any]:
        """The response in ``frame[start:end]`` (read in place: no copy of the frame)."""
        (correlation_id,) = _I32.unpack_from(frame, start)
        if not self._pending:
            raise RemoteProtocolError(
                f"response with correlation id {correlation_id} but no request is pending"
            )
        expected, spec = self._pending.popleft()
        if correlation_id != expected:
            raise RemoteProtocolError(
                f"{spec.name} v{spec.api_version} response has correlation id "
                f"{correlation_id}, expected {expected}"
            )
        pos = start + 4
        try:
            if spec.flexible_response_header:
                count, k = read_unsigned_varint(frame, pos)
                pos += k
                for _ in range(count):
                    _tag, k = read_unsigned_varint(frame, pos)
                    pos += k
                    length, k = read_unsigned_varint(frame, pos)
                    pos += k + length
                if pos > end:
                    raise ValueError("the response header runs past the end of the frame")
            if (
                spec.api_key == _API_VERSIONS
                and spec.api_version > 0
                and end >= pos + 2
                and _I16.unpack_from(frame, pos)[0] == _UNSUPPORTED_VERSION
            ):
                spec = _spec(_API_VERSIONS, 0)  # KIP-511: the answer to an unknown version
            check_lengths(spec.response_cls, frame, pos, end)
            response, n = spec.reader(frame, pos)
        except Exception as e:
            raise RemoteProtocolError(
                f"malformed {spec.name} v{spec.api_version} response (correlation id "
                f"{correlation_id}, {end - start} bytes): {type(e).__name__}: {e}"
            ) from e
        if pos + n > end:
            raise RemoteProtocolError(
                f"malformed {spec.name} v{spec.api_version} response (correlation id "
                f"{correlation_id}): it runs {pos + n - end} bytes past the end of its frame"
            )
        if pos + n != end:
            raise RemoteProtocolError(
                f"{spec.name} v{spec.api_version} response (correlation id {correlation_id}) "
                f"has {end - pos - n} bytes after its body"
            )
        return correlation_id, response
