"""Test helpers: kafka-python as the client codec, h11's ConnectionPair and tr() patterns."""

from __future__ import annotations

import importlib
import io
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.parser import KafkaProtocol
from kafka.record.memory_records import MemoryRecordsBuilder
from kio.serial import entity_writer

from tierlog.protocol import NEED_DATA, ConnectionClosed, RequestEvent, ServerConnection


def _kafka_python_classes() -> dict[tuple[int, str], type[Any]]:
    out: dict[tuple[int, str], type[Any]] = {}
    for name in ("metadata", "producer", "consumer", "admin", "sasl"):
        mod = importlib.import_module(f"kafka.protocol.{name}")
        for attr in dir(mod):
            obj = getattr(mod, attr)
            if (
                isinstance(obj, type)
                and issubclass(obj, ApiMessage)
                and obj is not ApiMessage
                and getattr(obj, "_json", None)
            ):
                out[(obj.API_KEY, obj.type)] = obj
    return out


KP_CLASSES = _kafka_python_classes()
"""kafka-python's message classes by (api key, "request" | "response")."""


def kp_request(api_key: int, version: int, **fields: Any) -> Any:
    """A kafka-python request object of (api key, version)."""
    return KP_CLASSES[(api_key, "request")][version](**fields)


def frame(req: Any, correlation_id: int = 1, client_id: str | None = "tierlog-test") -> bytes:
    """A kafka-python request as the framed bytes a client sends."""
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(framed=True, header=True))


def kio_bytes(obj: Any) -> bytes:
    """An entity encoded with kio's own writer (independent of tierlog's)."""
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


def record_batch(n: int = 3, value_size: int = 100) -> bytes:
    """A magic-2 record batch as kafka-python's producer builds it."""
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(n):
        b.append(
            timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=bytes([i % 256]) * value_size
        )
    b.close()
    return bytes(b.buffer())


def drain(conn: ServerConnection) -> list[RequestEvent | ConnectionClosed]:
    """Every event until NEED_DATA (or after ConnectionClosed)."""
    out: list[RequestEvent | ConnectionClosed] = []
    while True:
        ev = conn.next_event()
        if ev is NEED_DATA:
            return out
        assert isinstance(ev, RequestEvent | ConnectionClosed)
        out.append(ev)
        if isinstance(ev, ConnectionClosed):
            return out


def summary(ev: RequestEvent | ConnectionClosed) -> Any:
    """What must not depend on how the bytes were chunked."""
    if isinstance(ev, ConnectionClosed):
        return "closed"
    return (
        ev.api_key,
        ev.api_version,
        ev.correlation_id,
        ev.client_id,
        ev.request,
        ev.header,
        ev.seq,
        ev.expects_response,
        ev.size,
    )


def tr(data: bytes, **conn_kwargs: Any) -> list[RequestEvent]:
    """h11's tr(): feed ``data`` whole, byte by byte, and followed by trailing bytes (the
    start of another frame); every way must give the same events. Returns them."""
    conn = ServerConnection(**conn_kwargs)
    conn.receive_data(data)
    whole = drain(conn)
    assert conn.buffered_bytes == 0

    conn = ServerConnection(**conn_kwargs)
    bytewise: list[Any] = []
    for i in range(len(data)):
        conn.receive_data(data[i : i + 1])
        bytewise += drain(conn)
    assert [summary(e) for e in bytewise] == [summary(e) for e in whole]

    conn = ServerConnection(**conn_kwargs)
    trailing = data[:7] if len(data) >= 7 else b"\x00\x00\x00"
    conn.receive_data(data + trailing)
    with_trailing = drain(conn)
    assert [summary(e) for e in with_trailing] == [summary(e) for e in whole]
    assert conn.buffered_bytes == len(trailing)
    assert conn.next_event() is NEED_DATA

    conn = ServerConnection(**conn_kwargs)
    conn.receive_data(data)
    conn.receive_data(b"")
    closed = drain(conn)
    assert [summary(e) for e in closed] == [*(summary(e) for e in whole), "closed"]
    return [e for e in whole if isinstance(e, RequestEvent)]


@dataclass
class ConnectionPair:
    """kafka-python's client protocol object and our server codec over a fake link."""

    client: KafkaProtocol
    server: ServerConnection

    @classmethod
    def new(cls, **server_kwargs: Any) -> ConnectionPair:
        return cls(KafkaProtocol(client_id="tierlog-test"), ServerConnection(**server_kwargs))

    def request(self, req: Any) -> RequestEvent:
        """Send one request through the link; the server's event for it."""
        self.client.send_request(req)
        self.server.receive_data(bytes(self.client.send_bytes()))
        events = drain(self.server)
        assert len(events) == 1
        ev = events[0]
        assert isinstance(ev, RequestEvent)
        return ev

    def respond(self, ev: RequestEvent, response: Any) -> list[tuple[int, Any]]:
        """Send the server's response; what the client decoded (correlation id, response)."""
        return self.deliver(self.server.send(ev, response))

    def deliver(self, data: bytes) -> list[tuple[int, Any]]:
        return list(self.client.receive_bytes(data))
