"""A raw Kafka wire client for tests: kio entities in, kio entities out, over a plain socket.

Independent of tierlog.protocol (kio's own writer and readers), so it checks the broker's
codec rather than sharing its bugs.
"""

from __future__ import annotations

import datetime
import importlib
import io
import socket
import struct
from collections.abc import Iterable
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer


def encode(req: Any, correlation_id: int, client_id: str | None = "wire-test") -> bytes:
    """A framed request (size prefix, header v1 or v2, body)."""
    flexible = type(req).__flexible__
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    header = header_cls(
        request_api_key=type(req).__api_key__,
        request_api_version=type(req).__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header)
    entity_writer(type(req))(buf, req)
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


def request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def decode(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, kio response) of a response frame."""
    (correlation_id,) = struct.unpack_from(">i", frame)
    cls = load_response_schema(api_key, version)
    pos = 4
    if cls.__header_schema__.__flexible__ and api_key != 18:
        pos += 1  # empty tagged fields of response header v1
    body, _ = entity_reader(cls)(frame, pos)
    return correlation_id, body


class WireClient:
    """One blocking connection; ``call`` sends a request and reads its response."""

    def __init__(self, bootstrap: str, timeout: float = 15.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.next_id = 1

    def send(self, req: Any) -> int:
        cid = self.next_id
        self.next_id += 1
        self.sock.sendall(encode(req, cid))
        return cid

    def recv(self, api_key: int, version: int) -> tuple[int, Any]:
        return decode(read_frame(self.sock), api_key, version)

    def call(self, req: Any) -> Any:
        cid = self.send(req)
        got, resp = self.recv(type(req).__api_key__, type(req).__version__)
        assert got == cid
        return resp

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------------------- a few requests
# One connection, kio entities: for tests and benches that need an exact request (a batch of
# CreateTopics, a Produce to chosen partitions) and each partition's own error code back.


def _module(cls: type[Any]) -> Any:
    return importlib.import_module(cls.__module__)


def create_topics(c: WireClient, topics: dict[str, int], **configs: str) -> dict[str, int]:
    """CreateTopics v5 of ``{name: partitions}`` (replication 1): each topic's error code."""
    cls = request_class(19, 5)
    m = _module(cls)
    req = cls(
        topics=tuple(
            m.CreatableTopic(
                name=name,
                num_partitions=n,
                replication_factor=1,
                assignments=(),
                configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
            )
            for name, n in topics.items()
        ),
        timeout=datetime.timedelta(seconds=600),
        validate_only=False,
    )
    return {t.name: t.error_code for t in c.call(req).topics}


def delete_topics(c: WireClient, names: list[str]) -> dict[str, int]:
    """DeleteTopics v4: each topic's error code."""
    cls = request_class(20, 4)
    resp = c.call(cls(topic_names=tuple(names), timeout=datetime.timedelta(seconds=30)))
    return {r.name: r.error_code for r in resp.responses}


def one_record(value: bytes, key: bytes = b"k", timestamp: int = 1_700_000_000_000) -> bytes:
    """A record batch of one record, for :func:`produce`."""
    from tierlog.records import build_batch

    return build_batch([(timestamp, key, value)])


def produce(c: WireClient, topic: str, partitions: Iterable[int], batch: bytes) -> dict[int, int]:
    """Produce v9 (acks=1) of ``batch`` to each partition: each partition's error code."""
    cls = request_class(0, 9)
    m = _module(cls)
    req = cls(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            m.TopicProduceData(
                name=topic,
                partition_data=tuple(
                    m.PartitionProduceData(index=p, records=batch) for p in partitions
                ),
            ),
        ),
    )
    resp = c.call(req)
    return {p.index: p.error_code for t in resp.responses for p in t.partition_responses}


def fetch(
    c: WireClient, topic: str, partitions: Iterable[int], *, partition_max_bytes: int = 1 << 16
) -> dict[int, tuple[int, bytes]]:
    """Fetch v12 from offset 0, no wait: each partition's (error code, records)."""
    cls = request_class(1, 12)
    m = _module(cls)
    req = cls(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            m.FetchTopic(
                topic=topic,
                partitions=tuple(
                    m.FetchPartition(
                        partition=p, fetch_offset=0, partition_max_bytes=partition_max_bytes
                    )
                    for p in partitions
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    return {
        p.partition_index: (p.error_code, bytes(p.records or b""))
        for t in c.call(req).responses
        for p in t.partitions
    }
