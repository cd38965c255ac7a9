"""The Spark reader's retries (:func:`tierlog.spark.read.read_range`), through real parts.

Every test reads one partition of a real ``tierlog serve`` process over real sockets, one
Fetch per batch (``max.partition.fetch.bytes=1``: the broker answers the first batch whole and
nothing more), and checks that it gets every offset exactly once:

* the broker is stopped (SIGTERM or SIGKILL) and started again between two fetches;
* a retriable partition error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
  LEADER_NOT_AVAILABLE) answers one fetch: :class:`RewritingProxy` in front of the broker
  rewrites one Fetch response with the project's codec (kio), so the broker never learns of it;
* the connection is reset right after a fetch response, before the reader pipelines the next
  fetch;
* a batch larger than the fetch size: this broker, like Kafka since KIP-74, answers the first
  batch whole whatever the size, so the proxy truncates each response to the requested
  ``partition_max_bytes`` (as a broker without that rule does) and the reader must grow its
  fetch size to make progress.

The proxy also rewrites Metadata responses so that the broker address the reader learns is the
proxy's: every connection of the reader goes through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import signal
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchRequest
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from tests.integration.proxy import recv_exact_or_none
from tests.spark.conftest import BrokerProcess, create_topic, produce
from tierlog.errors import ApiError, for_code
from tierlog.spark.fetch_client import BrokerAddress, KafkaClient
from tierlog.spark.options import SourceOptions, parse_source_options
from tierlog.spark.planning import OffsetRange
from tierlog.spark.read import read_range

# A broker process, not a SparkSession; marked like the other broker tests of this directory.
pytestmark = pytest.mark.spark

_FETCH, _METADATA = 1, 3
_read_request_header = entity_reader(RequestHeader)
_read_response_header = entity_reader(ResponseHeader)
_write_response_header = entity_writer(ResponseHeader)
_read_fetch_request = entity_reader(FetchRequest)
_READERS: dict[int, Any] = {
    _FETCH: entity_reader(FetchResponse),
    _METADATA: entity_reader(MetadataResponse),
}
_WRITERS: dict[int, Any] = {
    _FETCH: entity_writer(FetchResponse),
    _METADATA: entity_writer(MetadataResponse),
}

#: ``rewrite(n, request, response)``: the response to forward for the ``n``-th Fetch (from 1).
FetchRewrite = Callable[[int, FetchRequest, FetchResponse], FetchResponse]


@dataclasses.dataclass(frozen=True)
class Fetched:
    """One Fetch the proxy forwarded: what was asked, what the reader was answered."""

    offset: int
    max_bytes: int
    error_code: int
    records: int  # bytes of records answered


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            s.close()


class RewritingProxy:
    """``127.0.0.1:<port>`` → ``target``, following the frames of each connection.

    Requests pass through untouched. Responses to Fetch v12 and Metadata v12 are decoded and
    encoded again with kio: Metadata's broker ports become the proxy's own, Fetch responses go
    through ``rewrite``. After the ``reset_after_fetch``-th Fetch response the client's
    connection is reset (RST) and :attr:`reset` is set. Every request is logged in
    :attr:`api_keys` and every Fetch in :attr:`fetches`, in the order the reader sent them.
    """

    def __init__(
        self,
        target: tuple[str, int],
        *,
        rewrite: FetchRewrite | None = None,
        reset_after_fetch: int | None = None,
    ) -> None:
        self.target = target
        self.rewrite = rewrite
        self.reset_after_fetch = reset_after_fetch
        self.reset = threading.Event()
        self.api_keys: list[int] = []
        self.fetches: list[Fetched] = []
        self._fetch_count = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = int(self._listener.getsockname()[1])
        self._socks: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        _close(self._listener, *self._socks)

    def __enter__(self) -> RewritingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue  # closed: the loop ends
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._socks += [client, upstream]
            pending: dict[int, tuple[int, int, FetchRequest | None]] = {}
            up = threading.Thread(target=self._up, args=(client, upstream, pending), daemon=True)
            up.start()
            threading.Thread(
                target=self._down, args=(upstream, client, pending, up), daemon=True
            ).start()

    def _up(
        self,
        client: socket.socket,
        upstream: socket.socket,
        pending: dict[int, tuple[int, int, FetchRequest | None]],
    ) -> None:
        while (head := recv_exact_or_none(client, 4)) is not None:
            frame = recv_exact_or_none(client, struct.unpack(">i", head)[0])
            if frame is None:
                break
            header, hlen = _read_request_header(frame, 0)
            key, version = int(header.request_api_key), int(header.request_api_version)
            fetch = _read_fetch_request(frame, hlen)[0] if (key, version) == (_FETCH, 12) else None
            with self._lock:
                self.api_keys.append(key)
                pending[int(header.correlation_id)] = (key, version, fetch)
            try:
                upstream.sendall(head + frame)
            except OSError:
                break
        _close(client, upstream)

    def _down(
        self,
        upstream: socket.socket,
        client: socket.socket,
        pending: dict[int, tuple[int, int, FetchRequest | None]],
        up: threading.Thread,
    ) -> None:
        while (head := recv_exact_or_none(upstream, 4)) is not None:
            frame = recv_exact_or_none(upstream, struct.unpack(">i", head)[0])
            if frame is None:
                break
            (correlation_id,) = struct.unpack_from(">i", frame)
            with self._lock:
                key, version, fetch = pending.pop(correlation_id)
            reset = False
            if version == 12 and key in (_FETCH, _METADATA):
                header, hlen = _read_response_header(frame, 0)
                response = _READERS[key](frame, hlen)[0]
                if isinstance(response, MetadataResponse):
                    response = dataclasses.replace(
                        response,
                        brokers=tuple(
                            dataclasses.replace(b, port=i32(self.port)) for b in response.brokers
                        ),
                    )
                else:
                    assert fetch is not None
                    with self._lock:
                        self._fetch_count += 1
                        n = self._fetch_count
                    if self.rewrite is not None:
                        response = self.rewrite(n, fetch, response)
                    part = response.responses[0].partitions[0]
                    with self._lock:
                        self.fetches.append(
                            Fetched(
                                int(fetch.topics[0].partitions[0].fetch_offset),
                                int(fetch.topics[0].partitions[0].partition_max_bytes),
                                int(part.error_code),
                                len(part.records or b""),
                            )
                        )
                    reset = n == self.reset_after_fetch
                buf = io.BytesIO()
                _write_response_header(buf, header)
                _WRITERS[key](buf, response)
                frame = buf.getvalue()
                head = struct.pack(">i", len(frame))
            try:
                client.sendall(head + frame)
            except OSError:
                break
            if reset:
                # FIN then RST (shutdown, then close without lingering): the reader can still
                # read this response, but its next send fails at once.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                _close(client, upstream)
                # The kernel socket (and its RST) goes when no thread is in a call on it.
                up.join()
                self.reset.set()
                return
        _close(client, upstream)


def with_partition(response: FetchResponse, **changes: Any) -> FetchResponse:
    """``response`` (one partition) with that partition's fields changed."""
    (topic,) = response.responses
    (part,) = topic.partitions
    return dataclasses.replace(
        response,
        responses=(dataclasses.replace(topic, partitions=(dataclasses.replace(part, **changes),)),),
    )


def answer_error(code: int, on_fetch: int) -> FetchRewrite:
    """The ``on_fetch``-th Fetch answered ``code`` (as a broker does: no records, no HW)."""

    def rewrite(n: int, _request: FetchRequest, response: FetchResponse) -> FetchResponse:
        if n != on_fetch:
            return response
        return with_partition(response, error_code=ErrorCode(code), high_watermark=-1, records=None)

    return rewrite


def truncate_to_max_bytes(_n: int, request: FetchRequest, response: FetchResponse) -> FetchResponse:
    """Records cut to the request's ``partition_max_bytes``, even inside the first batch."""
    limit = int(request.topics[0].partitions[0].partition_max_bytes)
    records = response.responses[0].partitions[0].records or b""
    return with_partition(response, records=records[:limit]) if len(records) > limit else response


# ---------------------------------------------------------------------------------- helpers

N = 120  # records: 12 batches of 10


def produce_batches(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """``values`` at offsets 0, 1, ...; batches of at most 10 records, uncompressed."""
    produce(
        bootstrap,
        topic,
        [{"value": v, "partition": 0} for v in values],
        **{"batch.num.messages": 10, "compression.type": "none"},
    )


def address(broker: BrokerProcess) -> tuple[str, int]:
    host, _, port = broker.bootstrap.rpartition(":")
    return host, int(port)


def values(n: int) -> list[bytes]:
    return [b"value-%04d-" % i + bytes(100) for i in range(n)]


def source_options(bootstrap: str, topic: str) -> SourceOptions:
    return parse_source_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            # One batch per Fetch (the broker answers the first batch whole).
            "kafka.max.partition.fetch.bytes": "1",
        },
        streaming=False,
    )


def rows(batches: Iterator[Any]) -> list[tuple[int, bytes]]:
    return [
        (o, v)
        for b in batches
        for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True)
    ]


def expected(vals: list[bytes]) -> list[tuple[int, bytes]]:
    return list(enumerate(vals))


@pytest.fixture
def topic(admin: Any, broker: BrokerProcess, unique: str) -> str:
    """A one-partition topic holding ``values(N)`` in batches of at most 10 records."""
    name = f"retries-{unique}"
    create_topic(admin, name)
    produce_batches(broker.bootstrap, name, values(N))
    return name


# ---------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_broker_restarted_mid_read(tmp_path: Path, sig: signal.Signals, unique: str) -> None:
    """The broker goes away between two fetches of a read (one fetch pipelined on the old
    connection) and comes back on the same port: the reader reconnects and goes on from where
    it was, no gap, no duplicate."""
    from confluent_kafka.admin import AdminClient

    b = BrokerProcess(tmp_path)
    b.start()
    try:
        topic = f"restart-{unique}"
        create_topic(AdminClient({"bootstrap.servers": b.bootstrap}), topic)
        vals = values(N)
        produce_batches(b.bootstrap, topic, vals)
        batches = read_range(OffsetRange(topic, 0, 0, N), source_options(b.bootstrap, topic))
        got = rows(iter([next(batches)]))
        assert 0 < len(got) <= 10  # one batch read, the next fetch in flight

        assert b.proc is not None
        old = b.proc
        old.send_signal(sig)
        old.wait(60)
        b.start()
        assert b.proc is not old and b.proc.poll() is None

        got += rows(batches)
        assert got == expected(vals)
    finally:
        b.stop()


@pytest.mark.parametrize(
    "code",
    [6, 3, 5],
    ids=["NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE"],
)
def test_retriable_partition_error_is_retried(broker: BrokerProcess, topic: str, code: int) -> None:
    """The third fetch is answered a retriable partition error: the reader forgets the
    leader, asks Metadata again and fetches the same offset again."""
    assert for_code(code).retriable
    with RewritingProxy(address(broker), rewrite=answer_error(code, 3)) as proxy:
        got = rows(read_range(OffsetRange(topic, 0, 0, N), source_options(proxy.bootstrap, topic)))
        assert got == expected(values(N))

        fetches = proxy.fetches
        assert [f.error_code for f in fetches[:4]] == [0, 0, code, 0]
        assert fetches[3].offset == fetches[2].offset > 0  # the same offset fetched again
        assert all(f.error_code == 0 for f in fetches[3:])
        # Between the failed fetch and its retry: a Metadata request (the leader looked up again).
        keys = proxy.api_keys
        fetch_positions = [i for i, k in enumerate(keys) if k == _FETCH]
        assert _METADATA in keys[fetch_positions[2] + 1 : fetch_positions[3]]


def test_non_retriable_partition_error_fails_the_read(broker: BrokerProcess, topic: str) -> None:
    """The control: the same injection with a non-retriable error (TOPIC_AUTHORIZATION_FAILED)
    reaches the reader and fails the read at once, without another fetch."""
    assert not for_code(29).retriable
    with RewritingProxy(address(broker), rewrite=answer_error(29, 3)) as proxy:
        batches = read_range(OffsetRange(topic, 0, 0, N), source_options(proxy.bootstrap, topic))
        with pytest.raises(ApiError) as raised:
            rows(batches)
        assert raised.value.error_code == 29
        assert [f.error_code for f in proxy.fetches] == [0, 0, 29]


def test_connection_reset_before_the_pipelined_fetch(broker: BrokerProcess, topic: str) -> None:
    """The connection is reset just after a fetch response reached the reader: the response
    is read whole, then sending the next (pipelined) fetch fails. The reader keeps what it
    read, reconnects, and goes on."""
    with RewritingProxy(address(broker), reset_after_fetch=2) as proxy:
        batches = read_range(OffsetRange(topic, 0, 0, N), source_options(proxy.bootstrap, topic))
        got = rows(iter([next(batches)]))  # fetch 1 decoded, fetch 2 in flight
        assert 0 < len(got) <= 10
        assert proxy.reset.wait(60), "the proxy never answered the second fetch"

        got += rows(batches)
        assert got == expected(values(N))
        offsets = [f.offset for f in proxy.fetches]
        assert offsets == sorted(set(offsets))  # every fetch at a new offset: nothing re-read


def test_oversized_batch_grows_the_fetch_size(
    admin: Any, broker: BrokerProcess, unique: str
) -> None:
    """A 40 KB batch between small ones, read with 1 KiB fetches whose answers are cut at
    1 KiB: no complete batch comes back until the reader has grown its fetch size (x4 a
    step) past the batch, and then it reads on."""
    topic = f"oversized-{unique}"
    create_topic(admin, topic)
    vals = [b"v%d" % i for i in range(20)]  # batches of 10 well under 1 KiB
    big = b"B" * 40_000
    produce_batches(broker.bootstrap, topic, vals[:10])
    produce_batches(broker.bootstrap, topic, [big])
    produce_batches(broker.bootstrap, topic, vals[10:])
    want = [*vals[:10], big, *vals[10:]]

    with RewritingProxy(address(broker), rewrite=truncate_to_max_bytes) as proxy:
        options = parse_source_options(
            {
                "kafka.bootstrap.servers": proxy.bootstrap,
                "subscribe": topic,
                "kafka.max.partition.fetch.bytes": "1024",
                # A reader that stops growing fails in 20 s instead of spinning for 120.
                "kafkaConsumer.pollTimeoutMs": "20000",
            },
            streaming=False,
        )
        got = rows(read_range(OffsetRange(topic, 0, 0, len(want)), options))
        assert got == expected(want)

        at_big = [f.max_bytes for f in proxy.fetches if f.offset == 10]
        assert at_big == [1024, 4096, 16384, 65536]
        assert all(f.records <= f.max_bytes for f in proxy.fetches)  # the proxy did cut


def test_a_leader_that_refuses_connections_is_looked_up_again(
    broker: BrokerProcess, topic: str
) -> None:
    """A leader killed while the driver plans (seen in a CI run: a SIGKILL during
    ``partitions()``): the connection to it is refused, and the next attempt must ask the
    metadata again instead of going back to the dead broker until the retries run out."""
    client = KafkaClient(broker.bootstrap, timeout_s=5)
    try:
        client.metadata([topic])
        with socket.socket() as s:  # a port nobody listens on: what a dead broker leaves
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        (leader,) = [n for n in client._brokers]  # one broker, the leader
        client._brokers[leader] = BrokerAddress("127.0.0.1", dead, leader)
        with pytest.raises(ConnectionRefusedError):
            client.leader_connection(topic, 0)
        conn = client.leader_connection(topic, 0)  # metadata again: the live address
        assert client._brokers[leader].port == int(broker.bootstrap.rsplit(":", 1)[1])
        assert conn is not None
    finally:
        client.close()
