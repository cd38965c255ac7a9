"""BrokerClient against a real ``tierlog serve`` process (Metadata, ApiVersions, CreateTopics,
Produce, Fetch, OffsetsForLeaderEpoch; pipelining; version negotiation; the broker killed
under a pending long-poll Fetch), and against scripted peers for the failures a real broker
does not produce on demand (a peer that closes mid-request, one that never answers)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import importlib
import socket
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from tests.broker_process import BrokerProcess, running_broker
from tests.integration.wire import one_record
from tierlog.cluster.broker_client import BrokerClient
from tierlog.errors import BrokerNotAvailableError, BrokerRequestTimeoutError, UnsupportedVersion
from tierlog.protocol import RequestEvent, ServerConnection, api_versions_response

pytestmark = pytest.mark.integration

TIMEOUT = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker-client")) as b:
        yield b
        assert b.alive(), f"the broker died:\n{b.tail()}"


def _address(b: BrokerProcess) -> tuple[str, int]:
    assert b.port is not None
    return "127.0.0.1", b.port


def _request(api_key: int, version: int) -> Any:
    cls = load_request_schema(api_key, version)
    return cls, importlib.import_module(cls.__module__)


def metadata(topics: list[str] | None, version: int = 12) -> Any:
    cls, m = _request(3, version)
    return cls(
        topics=None
        if topics is None
        else tuple(m.MetadataRequestTopic(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def create_topic(name: str, partitions: int = 1) -> Any:
    cls, m = _request(19, 7)
    return cls(
        topics=(
            m.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                assignments=(),
                configs=(),
            ),
        ),
        timeout=datetime.timedelta(seconds=30),
        validate_only=False,
    )


def produce(topic: str, records: bytes) -> Any:
    cls, m = _request(0, 9)
    return cls(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            m.TopicProduceData(
                name=topic, partition_data=(m.PartitionProduceData(index=0, records=records),)
            ),
        ),
    )


def fetch(topic: str, offset: int, *, max_wait_ms: int = 0, version: int = 12) -> Any:
    cls, m = _request(1, version)
    if version >= 13:
        raise ValueError("by name only")
    return cls(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            m.FetchTopic(
                topic=topic,
                partitions=(
                    m.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def offset_for_leader_epoch(topic: str, epoch: int) -> Any:
    cls, m = _request(23, 4)
    return cls(
        replica_id=2,
        topics=(
            m.OffsetForLeaderTopic(
                topic=topic,
                partitions=(m.OffsetForLeaderPartition(partition=0, leader_epoch=epoch),),
            ),
        ),
    )


async def until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` on the loop until it holds (a generous deadline, not a duration)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def client_to(host: str, port: int) -> AsyncIterator[BrokerClient]:
    client = BrokerClient("tierlog-broker-2")
    await client.connect(host, port, timeout_s=TIMEOUT)
    try:
        yield client
    finally:
        await client.close()


# ------------------------------------------------------------------------------ real broker


def test_api_versions_metadata_produce_fetch(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = f"bc-{tmp_path.name[-20:]}".replace("_", "-")

    async def main() -> None:
        async with client_to(*_address(broker)) as c:
            assert c.connected
            assert c.peer_api_versions[18] == (0, 4)
            assert c.peer_api_versions[23] == (2, 4)
            created = await c.request(create_topic(topic), timeout_s=TIMEOUT)
            assert [int(t.error_code) for t in created.topics] == [0]

            md = await c.request(metadata([topic]), timeout_s=TIMEOUT)
            assert type(md).__version__ == 12
            assert [b.port for b in md.brokers] == [broker.port]
            assert [(t.name, len(t.partitions)) for t in md.topics] == [(topic, 1)]

            batch = one_record(b"hello")
            produced = await c.request(produce(topic, batch), timeout_s=TIMEOUT)
            part = produced.responses[0].partition_responses[0]
            assert (int(part.error_code), int(part.base_offset)) == (0, 0)

            fetched = await c.request(fetch(topic, 0), timeout_s=TIMEOUT)
            p = fetched.responses[0].partitions[0]
            assert int(p.error_code) == 0
            assert int(p.high_watermark) == 1
            records = bytes(p.records)
            assert records[16:] == batch[16:]
            assert records[:16] == struct.pack(">qii", 0, len(batch) - 12, 0)  # offset, epoch 0

            ends = await c.request(offset_for_leader_epoch(topic, 0), timeout_s=TIMEOUT)
            e = ends.topics[0].partitions[0]
            assert (int(e.error_code), int(e.leader_epoch), int(e.end_offset)) == (0, 0, 1)

    asyncio.run(main())


def test_version_negotiation(broker: BrokerProcess) -> None:
    async def main() -> None:
        async with client_to(*_address(broker)) as c:
            assert c.api_version_for(1) == 16  # the broker's max; kio has up to 18
            assert c.api_version_for(1, 12) == 12
            assert c.api_version_for(3) == 13
            with pytest.raises(UnsupportedVersion, match="does not support"):
                c.api_version_for(57)  # UpdateFeatures: not advertised
            # an entity newer than the broker is sent at the broker's maximum
            md13 = await c.request(metadata(None, 13), timeout_s=TIMEOUT)
            assert type(md13).__version__ == 13
            md = await c.request(metadata(None, 12), api_version=9, timeout_s=TIMEOUT)
            assert type(md).__version__ == 9
            assert [b.port for b in md.brokers] == [broker.port]

    asyncio.run(main())


def test_pipelined_requests_are_matched(broker: BrokerProcess) -> None:
    names = [f"pipelined-{i}" for i in range(30)]

    async def main() -> None:
        async with client_to(*_address(broker)) as c:
            responses = await asyncio.gather(
                *(c.request(metadata([n]), timeout_s=TIMEOUT) for n in names),
                c.request(load_request_schema(18, 3)(
                    client_software_name="x", client_software_version="1"
                ), timeout_s=TIMEOUT),
            )  # fmt: skip
            assert c.in_flight == 0
            assert [r.topics[0].name for r in responses[:-1]] == names
            assert int(responses[-1].error_code) == 0

    asyncio.run(main())


def test_closed_port_fails_with_its_address() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused

        async def main() -> None:
            c = BrokerClient()
            with pytest.raises(BrokerNotAvailableError, match=f"127.0.0.1:{port}") as e:
                await c.connect("127.0.0.1", port, timeout_s=TIMEOUT)
            assert isinstance(e.value, ConnectionError)
            assert not c.connected
            with pytest.raises(BrokerNotAvailableError, match="not connected"):
                await c.request(metadata(None), timeout_s=TIMEOUT)

        asyncio.run(main())


def test_broker_killed_under_a_pending_fetch(tmp_path: Path) -> None:
    with running_broker(tmp_path / "victim") as b:

        async def main() -> None:
            async with client_to(*_address(b)) as c:
                await c.request(create_topic("victim"), timeout_s=TIMEOUT)
                # long polls on an empty partition: pending until the broker dies
                polls = [
                    asyncio.ensure_future(
                        c.request(fetch("victim", 0, max_wait_ms=60_000), timeout_s=TIMEOUT)
                    )
                    for _ in range(3)
                ]
                await until(lambda: c.in_flight == 3)
                await asyncio.to_thread(b.kill)
                results = await asyncio.gather(*polls, return_exceptions=True)
                for r in results:
                    assert isinstance(r, BrokerNotAvailableError), r
                    assert f"127.0.0.1:{b.port}" in str(r)
                assert not c.connected

        asyncio.run(main())


# ------------------------------------------------------------------------------ scripted peers


Script = Callable[[RequestEvent, ServerConnection, asyncio.StreamWriter], bool]
"""Called for each request after ApiVersions; False closes the connection."""


@contextlib.asynccontextmanager
async def scripted_peer(script: Script) -> AsyncIterator[int]:
    """A peer that answers ApiVersions like a broker, then lets ``script`` decide."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ServerConnection()
        try:
            while data := await reader.read(65536):
                conn.receive_data(data)
                while isinstance(ev := conn.next_event(), RequestEvent):
                    if ev.api_key == 18:
                        writer.write(conn.send(ev, api_versions_response(ev.api_version)))
                    elif not script(ev, conn, writer):
                        return
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def test_peer_closing_mid_request_fails_every_pending_request() -> None:
    seen: list[int] = []

    def close_on_third(ev: RequestEvent, conn: ServerConnection, w: asyncio.StreamWriter) -> bool:
        seen.append(ev.correlation_id)
        return len(seen) < 3  # read two requests without answering, close on the third

    async def main() -> None:
        async with scripted_peer(close_on_third) as port, client_to("127.0.0.1", port) as c:
            pending = [c.request(metadata([f"t{i}"]), timeout_s=TIMEOUT) for i in range(3)]
            results = await asyncio.gather(*pending, return_exceptions=True)
            assert all(isinstance(r, BrokerNotAvailableError) for r in results), results
            assert "closed the connection (3 requests pending)" in str(results[0])
            assert not c.connected and c.in_flight == 0

    asyncio.run(main())


def test_request_timeout_closes_the_connection() -> None:
    def never_answer(ev: RequestEvent, conn: ServerConnection, w: asyncio.StreamWriter) -> bool:
        return True

    async def main() -> None:
        async with scripted_peer(never_answer) as port, client_to("127.0.0.1", port) as c:
            other = asyncio.ensure_future(c.request(metadata(["a"]), timeout_s=TIMEOUT))
            with pytest.raises(BrokerRequestTimeoutError, match=f"127.0.0.1:{port}.*0.2s"):
                await c.request(metadata(["b"]), timeout_s=0.2)
            with pytest.raises(BrokerNotAvailableError):
                await other  # the other pending request fails with the connection
            assert not c.connected

    asyncio.run(main())


def test_cancelled_request_leaves_the_connection_usable() -> None:
    held: list[tuple[RequestEvent, ServerConnection, asyncio.StreamWriter]] = []

    def answer_in_order(ev: RequestEvent, conn: ServerConnection, w: asyncio.StreamWriter) -> bool:
        held.append((ev, conn, w))
        return True

    def answer_all() -> None:
        from tierlog.protocol import response_class

        for ev, conn, w in held:
            cls = response_class(ev.api_key, ev.api_version)
            m = importlib.import_module(cls.__module__)
            w.write(
                conn.send(
                    ev,
                    cls(
                        throttle_time=datetime.timedelta(0),
                        brokers=(),
                        cluster_id=None,
                        controller_id=-1,
                        topics=(
                            m.MetadataResponseTopic(
                                error_code=0,
                                name=ev.request.topics[0].name,
                                topic_id=None,
                                is_internal=False,
                                partitions=(),
                            ),
                        ),
                    ),
                )
            )
        held.clear()

    async def main() -> None:
        async with scripted_peer(answer_in_order) as port, client_to("127.0.0.1", port) as c:
            first = asyncio.ensure_future(c.request(metadata(["first"]), timeout_s=TIMEOUT))
            second = asyncio.ensure_future(c.request(metadata(["second"]), timeout_s=TIMEOUT))
            await until(lambda: len(held) == 2)
            first.cancel()
            answer_all()
            assert (await second).topics[0].name == "second"
            assert c.connected and c.in_flight == 0
            third = asyncio.ensure_future(c.request(metadata(["third"]), timeout_s=TIMEOUT))
            await until(lambda: len(held) == 1)
            answer_all()
            assert (await third).topics[0].name == "third"
            await c.close()
            await c.close()  # idempotent
            assert not c.connected

    asyncio.run(main())


# ------------------------------------------------------------------------------ security


def test_sasl_and_tls_logins_and_their_failures(tmp_path: Path) -> None:
    """PLAIN over SASL_PLAINTEXT, SCRAM over SASL_SSL; a wrong password, a mechanism the
    listener does not enable and a CA that did not sign the broker each fail ``connect`` with
    the reason."""
    from tests.integration.security_support import KEYSTORE_PASSWORD, SecureBroker, make_pki
    from tierlog.errors import BrokerAuthenticationError
    from tierlog.security.client_security import client_security
    from tierlog.security.credential_store import CredentialStore
    from tierlog.security.scram import ScramMechanism, credential_from_password

    pki = make_pki(tmp_path / "pki")
    (tmp_path / "b").mkdir()
    b = SecureBroker(
        tmp_path / "b",
        {"SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"},
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_broker="plain-secret";',
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-256",
        "listener.name.sasl_ssl.ssl.keystore.type=PKCS12",
        f"listener.name.sasl_ssl.ssl.keystore.location={pki.server_p12}",
        f"listener.name.sasl_ssl.ssl.keystore.password={KEYSTORE_PASSWORD}",
        "connection.failed.authentication.delay.ms=10",
        "connections.max.reauth.ms=2000",
    )
    sha256 = ScramMechanism.SCRAM_SHA_256
    CredentialStore.in_log_dir(b.log_dir).upsert(
        "broker", sha256, credential_from_password(sha256, "scram-secret", 4096)
    )

    def jaas(module: str, password: str) -> str:
        return (
            f"org.apache.kafka.common.security.{module} required "
            f'username="broker" password="{password}";'
        )

    plain = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
    scram = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }
    plain_module, scram_module = "plain.PlainLoginModule", "scram.ScramLoginModule"

    async def login(listener: str, conf: dict[str, str]) -> Any:
        host, port = b.bootstrap_of(listener).split(":")
        c = BrokerClient("tierlog-broker-9", security=client_security(conf))
        try:
            await c.connect(host, int(port), timeout_s=TIMEOUT)
            return await c.request(metadata(None), timeout_s=TIMEOUT)
        finally:
            await c.close()

    b.start()
    try:
        ok = {**plain, "sasl.jaas.config": jaas(plain_module, "plain-secret")}
        assert asyncio.run(login("SASL_PLAINTEXT", ok)).brokers
        ok = {**scram, "sasl.jaas.config": jaas(scram_module, "scram-secret")}
        assert asyncio.run(login("SASL_SSL", ok)).brokers
        log = b.log_since_start()
        assert "authenticated as User:broker (SASL PLAIN)" in log
        assert "authenticated as User:broker (SASL SCRAM-SHA-256)" in log

        bad = {**scram, "sasl.jaas.config": jaas(scram_module, "wrong")}
        with pytest.raises(BrokerAuthenticationError, match="invalid credentials") as e:
            asyncio.run(login("SASL_SSL", bad))
        assert "authentication as broker with SCRAM-SHA-256 failed" in str(e.value)
        bad = {**plain, "sasl.jaas.config": jaas(plain_module, "wrong")}
        with pytest.raises(BrokerAuthenticationError, match="with PLAIN failed"):
            asyncio.run(login("SASL_PLAINTEXT", bad))
        other = {**scram, "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas(plain_module, "x")}
        with pytest.raises(BrokerAuthenticationError, match="enables SCRAM-SHA-256"):
            asyncio.run(login("SASL_SSL", other))
        wrong_ca = {**ok, "ssl.truststore.location": str(pki.other_ca)}
        with pytest.raises(BrokerNotAvailableError, match="TLS handshake failed"):
            asyncio.run(login("SASL_SSL", wrong_ca))

        # KIP-368: the session lasts 2 s; the client logs in again on the same connection
        # before a later request, so the broker never closes it
        async def keep_using() -> int:
            host, port = b.bootstrap_of("SASL_SSL").split(":")
            c = BrokerClient("tierlog-broker-9", security=client_security(ok))
            await c.connect(host, int(port), timeout_s=TIMEOUT)
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 60
                while "re-authenticated as User:broker" not in b.log_since_start():
                    assert loop.time() < deadline, "no re-authentication"
                    assert (await c.request(metadata(None), timeout_s=TIMEOUT)).brokers
                    await asyncio.sleep(0.2)  # the poll interval, not the oracle
                assert c.connected
                return int(b.log_since_start().count("re-authenticated as User:broker"))
            finally:
                await c.close()

        assert asyncio.run(keep_using()) >= 1
        assert "expired (re-authentication due)" not in b.log_since_start()
    finally:
        b.stop()
