"""A minimal blocking Kafka client for the Spark data source: Metadata, ListOffsets, Fetch.

Why not a consumer library: a consumer decodes every record into a Python object, and the
data source wants the raw record batches to decode them straight into Arrow columns
(:mod:`tierlog.spark.arrow_decode`). This client speaks just enough of the protocol, with
kio's generated message classes (the same codec the broker uses, from the client side):

* ``Metadata`` v12 (topic ids, partition leaders, broker addresses),
* ``ListOffsets`` v7 (earliest / latest / by timestamp, isolation level),
* ``Fetch`` v12 (topics by name; sessionless full fetches; raw ``records`` bytes back).

Framing, headers and decoding are :class:`~tierlog.protocol.client_connection.ClientConnection`'s
(sans-IO, shared with the broker-to-broker client). Requests on one connection may be
pipelined: :meth:`BrokerConnection.send` returns at once and :meth:`BrokerConnection.receive`
returns responses in request order (Kafka answers in order).

Security: a :class:`~tierlog.security.client_security.ClientSecurity` (from the source's
``kafka.security.protocol``, ``kafka.sasl.*`` and ``kafka.ssl.*`` options) wraps each socket in
TLS (the broker's certificate and host name checked) and logs in with SASL (PLAIN or SCRAM:
SaslHandshake v1, then SaslAuthenticate v2 until the mechanism completes) before the first
request; a refused login raises :class:`~tierlog.errors.SaslAuthenticationFailed` with the
broker's message (not retriable).

Errors: socket failures raise ``OSError`` (``TimeoutError`` on timeouts); a partition- or
topic-level Kafka error code raises the :class:`~tierlog.errors.ApiError` subclass of that
code (``tierlog.errors.for_code``); a response that does not parse raises
:class:`~tierlog.errors.RemoteProtocolError`.

Not thread-safe: one client per thread (Spark runs one task per Python worker).
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from tierlog.errors import (
    ApiError,
    LeaderNotAvailable,
    RemoteProtocolError,
    SaslAuthenticationFailed,
    for_code,
)
from tierlog.protocol._events import ConnectionClosed
from tierlog.protocol.client_connection import ClientConnection
from tierlog.security.client_security import PLAINTEXT, ClientSecurity

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "BrokerAddress",
    "BrokerConnection",
    "FetchedPartition",
    "KafkaClient",
    "PartitionInfo",
    "TopicInfo",
    "parse_bootstrap",
]

#: ListOffsets special timestamps.
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
#: Fetch/ListOffsets isolation levels.
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1

_MAX_RESPONSE: Final = 1 << 30  # refuse absurd frame sizes instead of allocating them


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """A broker's ``host:port`` (and node id when known, -1 for a bootstrap address)."""

    host: str
    port: int
    node_id: int = -1

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_bootstrap(servers: str) -> list[BrokerAddress]:
    """``kafka.bootstrap.servers`` (``host:port[,host:port...]``, optional PLAINTEXT://).

    Raises:
        ValueError: an empty list or an entry that is not ``host:port``.
    """
    out = []
    for raw in servers.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {raw.strip()!r} is not host:port")
        out.append(BrokerAddress(host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"no bootstrap servers in {servers!r}")
    return out


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[PartitionInfo, ...]
    is_internal: bool = False


@dataclass(slots=True)
class FetchedPartition:
    """One partition of a Fetch response: raw record batches plus the offsets around them."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] = field(default_factory=list)
    """``(producer_id, first_offset)`` of aborted transactions in the range (read_committed)."""


class BrokerConnection:
    """One blocking TCP connection to one broker, with request pipelining. Not thread-safe.

    The bytes are :class:`~tierlog.protocol.client_connection.ClientConnection`'s (the codec
    the broker-to-broker client shares); this class only moves them over a socket.
    """

    def __init__(
        self,
        address: BrokerAddress,
        *,
        client_id: str,
        timeout_s: float,
        recv_buffer: int,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.address = address
        sock = socket.create_connection((address.host, address.port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if recv_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
        try:
            if security.ssl_context is not None:
                sock = security.ssl_context.wrap_socket(sock, server_hostname=address.host)
            self._sock = sock
            self._conn = ClientConnection(client_id, max_frame_size=_MAX_RESPONSE)
            if security.uses_sasl:
                self._authenticate(security)
        except BaseException:
            sock.close()
            raise

    def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake, then SaslAuthenticate until the mechanism completes.

        Raises:
            SaslAuthenticationFailed: the broker refused the mechanism or the credentials.
        """
        from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

        sasl = security.new_sasl_client()
        who = f"{self.address} as {security.username} with {sasl.mechanism_name}"
        response = self.request(SaslHandshakeRequest(mechanism=sasl.mechanism_name))
        if code := int(response.error_code):
            enabled = ", ".join(str(m) for m in response.mechanisms) or "no mechanism"
            raise SaslAuthenticationFailed(
                f"{who}: {for_code(code).__name__} ({code}); the listener enables {enabled}"
            )
        token = sasl.initial_response()
        while True:
            response = self.request(SaslAuthenticateRequest(auth_bytes=token))
            if code := int(response.error_code):
                raise SaslAuthenticationFailed(
                    f"authentication to {who} failed: {response.error_message or ''} ({code})"
                )
            try:
                token = sasl.evaluate_challenge(bytes(response.auth_bytes))
            except SaslAuthenticationFailed as e:
                raise SaslAuthenticationFailed(f"authentication to {who} failed: {e}") from None
            if sasl.is_complete:
                return

    def close(self) -> None:
        self._sock.close()

    def send(self, request: Any) -> None:
        """Write one request (a kio entity, sent at its own version); its response is read
        by a later :meth:`receive`."""
        self._sock.sendall(self._conn.send(request))

    def receive(self) -> Any:
        """The response to the oldest request sent and not yet received.

        Raises:
            RemoteProtocolError: a frame that does not parse or answers another request.
            OSError: the connection failed or timed out.
        """
        conn = self._conn
        while True:
            got = conn.next_response()
            if isinstance(got, tuple):
                return got[1]
            if isinstance(got, ConnectionClosed):
                raise ConnectionResetError(f"{self.address} closed the connection")
            # the rest of the frame in one read when the socket has it (large Fetch responses)
            conn.receive_data(self._sock.recv(max(conn.bytes_needed, 1 << 16)))

    def request(self, request: Any) -> Any:
        """Send and wait for the response (nothing else may be in flight)."""
        self.send(request)
        return self.receive()

    @property
    def in_flight(self) -> int:
        return self._conn.in_flight


def _raise_for(error_code: int, what: str) -> None:
    if error_code:
        cls = for_code(int(error_code))
        raise cls(f"{what}: {cls.__name__} ({int(error_code)}): {cls.description}")


def _code(value: Any) -> int:
    return int(getattr(value, "value", value))


class KafkaClient:
    """Blocking client over one or more :class:`BrokerConnection` (one per broker).

    Requests for a partition go to its leader, learned from Metadata. Not thread-safe.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "tierlog-spark",
        timeout_s: float = 30.0,
        recv_buffer: int = 1 << 20,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._security = security
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._recv_buffer = recv_buffer
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._brokers: dict[int, BrokerAddress] = {}
        self._leaders: dict[tuple[str, int], int] = {}

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    # ------------------------------------------------------------------ connections

    def connection(self, address: BrokerAddress) -> BrokerConnection:
        key = (address.host, address.port)
        conn = self._connections.get(key)
        if conn is None:
            conn = BrokerConnection(
                address,
                client_id=self._client_id,
                timeout_s=self._timeout_s,
                recv_buffer=self._recv_buffer,
                security=self._security,
            )
            self._connections[key] = conn
        return conn

    def drop_connection(self, address: BrokerAddress) -> None:
        conn = self._connections.pop((address.host, address.port), None)
        if conn is not None:
            conn.close()

    def _any_connection(self) -> BrokerConnection:
        if self._connections:
            return next(iter(self._connections.values()))
        last: OSError | None = None
        for address in [*self._brokers.values(), *self._bootstrap]:
            try:
                return self.connection(address)
            except OSError as e:
                last = e
        assert last is not None
        raise last

    def leader_connection(self, topic: str, partition: int) -> BrokerConnection:
        """A connection to the partition's leader (refreshing metadata when unknown)."""
        node = self._leaders.get((topic, partition))
        if node is None or node not in self._brokers:
            self.metadata([topic])
            node = self._leaders.get((topic, partition))
        if node is None or node < 0 or node not in self._brokers:
            raise LeaderNotAvailable(f"no leader known for {topic}-{partition}")
        try:
            return self.connection(self._brokers[node])
        except OSError:
            # The leader may be dead: the next attempt asks the metadata again, or every
            # retry would go to the same dead broker however long the failover takes.
            self._leaders.pop((topic, partition), None)
            raise

    def broker_address(self, node_id: int) -> BrokerAddress | None:
        """The address of a broker learned from Metadata."""
        return self._brokers.get(node_id)

    def forget_leader(self, topic: str, partition: int) -> None:
        self._leaders.pop((topic, partition), None)

    # ------------------------------------------------------------------ Metadata

    def metadata(self, topics: Sequence[str] | None = None) -> dict[str, TopicInfo]:
        """Topics (all of them when ``topics`` is None) with their partitions and leaders.

        Unknown topics are left out (no auto-creation). Raises on other topic errors.
        """
        req = MetadataRequest(
            topics=None
            if topics is None
            else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        resp = self._any_connection().request(req)
        for b in resp.brokers:
            self._brokers[int(b.node_id)] = BrokerAddress(b.host, int(b.port), int(b.node_id))
        out: dict[str, TopicInfo] = {}
        for t in resp.topics:
            code = _code(t.error_code)
            if code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
                continue
            _raise_for(code, f"metadata of topic {t.name}")
            parts = []
            for p in t.partitions:
                leader = int(p.leader_id)
                self._leaders[(str(t.name), int(p.partition_index))] = leader
                parts.append(PartitionInfo(int(p.partition_index), leader, int(p.leader_epoch)))
            parts.sort(key=lambda p: p.partition)
            topic_id = t.topic_id if t.topic_id is not None and t.topic_id.int else None
            out[str(t.name)] = TopicInfo(str(t.name), topic_id, tuple(parts), bool(t.is_internal))
        return out

    # ------------------------------------------------------------------ ListOffsets

    def list_offsets(
        self,
        timestamps: Mapping[tuple[str, int], int],
        *,
        isolation_level: int = READ_COMMITTED,
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """``(offset, timestamp)`` per ``(topic, partition)`` for each requested timestamp
        (-1 latest, -2 earliest, >= 0 the first offset with a timestamp >= it; offset -1 when
        there is none). Grouped by leader, one request per broker.
        """
        by_leader: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
        conns: dict[tuple[str, int], BrokerConnection] = {}
        for (topic, partition), ts in timestamps.items():
            conn = self.leader_connection(topic, partition)
            key = (conn.address.host, conn.address.port)
            conns[key] = conn
            by_leader.setdefault(key, []).append((topic, partition, ts))
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for key, items in by_leader.items():
            topics: dict[str, list[ListOffsetsPartition]] = {}
            for topic, partition, ts in items:
                topics.setdefault(topic, []).append(
                    ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(ts))
                )
            req = ListOffsetsRequest(
                replica_id=BrokerId(-1),
                isolation_level=i8(isolation_level),
                topics=tuple(
                    ListOffsetsTopic(name=TopicName(t), partitions=tuple(ps))
                    for t, ps in topics.items()
                ),
            )
            resp = conns[key].request(req)
            for t in resp.topics:
                for p in t.partitions:
                    tp = (str(t.name), int(p.partition_index))
                    code = _code(p.error_code)
                    if code in (6, 5):  # NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE
                        self.forget_leader(*tp)
                    _raise_for(code, f"list offsets of {tp[0]}-{tp[1]}")
                    out[tp] = (int(p.offset), int(p.timestamp))
        return out

    # ------------------------------------------------------------------ Fetch

    @staticmethod
    def fetch_request(
        topic: str,
        partition: int,
        offset: int,
        *,
        partition_max_bytes: int,
        max_wait_ms: int = 500,
        isolation_level: int = READ_COMMITTED,
        leader_epoch: int = -1,
    ) -> FetchRequest:
        return FetchRequest(
            replica_id=BrokerId(-1),
            max_wait=i32Timedelta.parse(timedelta(milliseconds=max_wait_ms)),
            min_bytes=i32(1),
            max_bytes=i32(max(partition_max_bytes, 1)),
            isolation_level=i8(isolation_level),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(
                FetchTopic(
                    topic=TopicName(topic),
                    partitions=(
                        FetchPartition(
                            partition=i32(partition),
                            current_leader_epoch=i32(leader_epoch),
                            fetch_offset=i64(offset),
                            partition_max_bytes=i32(partition_max_bytes),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )

    @staticmethod
    def fetched_partition(response: Any, topic: str, partition: int) -> FetchedPartition:
        """The one partition of a single-partition Fetch response.

        Raises:
            ApiError: the response's or the partition's error code.
        """
        _raise_for(_code(response.error_code), f"fetch {topic}-{partition}")
        for t in response.responses:
            for p in t.partitions:
                if int(p.partition_index) != partition:
                    continue
                _raise_for(_code(p.error_code), f"fetch {topic}-{partition}")
                aborted = [
                    (int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions or ()
                ]
                return FetchedPartition(
                    records=p.records or b"",
                    high_watermark=int(p.high_watermark),
                    last_stable_offset=int(p.last_stable_offset),
                    log_start_offset=int(p.log_start_offset),
                    aborted_transactions=aborted,
                )
        raise RemoteProtocolError(f"fetch response without {topic}-{partition}")

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        partition_max_bytes: int = 8 << 20,
        max_wait_ms: int = 500,
        isolation_level: int = READ_COMMITTED,
    ) -> FetchedPartition:
        """One Fetch of one partition from ``offset`` (see :class:`FetchedPartition`)."""
        conn = self.leader_connection(topic, partition)
        req = self.fetch_request(
            topic,
            partition,
            offset,
            partition_max_bytes=partition_max_bytes,
            max_wait_ms=max_wait_ms,
            isolation_level=isolation_level,
        )
        return self.fetched_partition(conn.request(req), topic, partition)


def all_partitions(topics: Iterable[TopicInfo]) -> list[tuple[str, int]]:
    return sorted((t.name, p.partition) for t in topics for p in t.partitions)


#: Exceptions after which a fetch may be retried on a fresh connection / fresh metadata.
RETRIABLE_ERRORS: tuple[type[BaseException], ...] = (OSError, RemoteProtocolError)


def is_retriable(e: BaseException) -> bool:
    return isinstance(e, RETRIABLE_ERRORS) or (isinstance(e, ApiError) and e.retriable)
