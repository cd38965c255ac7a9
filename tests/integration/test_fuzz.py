"""Fuzz the broker at the socket: hypothesis throws random bytes and mutated real requests
(flipped, inserted, deleted bytes, truncations, wrong size prefixes) at a running broker. After
every example a bystander connection must still be served, and at the end the broker must be
alive, with no handler crash (traceback) in its log."""

from __future__ import annotations

import datetime
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from tests.integration.clients import cf_produce
from tests.integration.conftest import running_broker
from tests.integration.wire import WireClient, encode
from tierlog.records.default_records import build_batch

EXAMPLES = int(__import__("os").environ.get("TIERLOG_FUZZ_EXAMPLES", "1500"))


def _seeds() -> list[bytes]:
    """Valid requests of many APIs and versions (kio entities, kio's writer)."""

    def req(key: int, version: int, **fields):
        cls = load_request_schema(key, version)
        mod = __import__(cls.__module__, fromlist=["x"])
        return cls, mod, fields

    out: list[bytes] = []
    batch = build_batch([(1_700_000_000_000, b"k", b"v" * 20)] * 3, 1)
    ms = datetime.timedelta(milliseconds=100)
    for v in (3, 9):
        cls, m, _ = req(0, v)
        out.append(
            encode(
                cls(
                    transactional_id=None,
                    acks=-1 if v == 9 else 1,
                    timeout=ms,
                    topic_data=(
                        m.TopicProduceData(
                            name="fuzz",
                            partition_data=(m.PartitionProduceData(index=0, records=batch),),
                        ),
                    ),
                ),
                1,
            )
        )
    for v in (4, 12):
        cls, m, _ = req(1, v)
        fields = {
            "max_wait": datetime.timedelta(milliseconds=10),
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": (
                m.FetchTopic(
                    topic="fuzz",
                    partitions=(
                        m.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 16),
                    ),
                ),
            ),
        }
        if v >= 7:
            fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=())
        out.append(encode(cls(**fields), 2))
    cls, m, _ = req(3, 12)
    out.append(
        encode(
            cls(
                topics=(m.MetadataRequestTopic(topic_id=None, name="fuzz"),),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            ),
            3,
        )
    )
    cls, m, _ = req(18, 3)
    out.append(encode(cls(client_software_name="f", client_software_version="1"), 4))
    cls, m, _ = req(2, 7)
    out.append(
        encode(
            cls(
                replica_id=-1,
                isolation_level=0,
                topics=(
                    m.ListOffsetsTopic(
                        name="fuzz",
                        partitions=(m.ListOffsetsPartition(partition_index=0, timestamp=-3),),
                    ),
                ),
            ),
            5,
        )
    )
    cls, m, _ = req(10, 3)
    out.append(encode(cls(key="g", key_type=0), 6))
    cls, m, _ = req(11, 5)
    out.append(
        encode(
            cls(
                group_id="fuzz-g",
                session_timeout=datetime.timedelta(milliseconds=6000),
                rebalance_timeout=datetime.timedelta(milliseconds=6000),
                member_id="",
                group_instance_id=None,
                protocol_type="consumer",
                protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),),
            ),
            7,
        )
    )
    cls, m, _ = req(9, 7)
    out.append(encode(cls(group_id="fuzz-g", topics=None, require_stable=False), 8))
    cls, m, _ = req(32, 4)
    out.append(
        encode(
            cls(
                resources=(
                    m.DescribeConfigsResource(
                        resource_type=2, resource_name="fuzz", configuration_keys=None
                    ),
                ),
                include_synonyms=True,
                include_documentation=True,
            ),
            9,
        )
    )
    cls, m, _ = req(19, 5)
    out.append(
        encode(
            cls(
                topics=(
                    m.CreatableTopic(
                        name="fuzz-created",
                        num_partitions=2,
                        replication_factor=1,
                        assignments=(),
                        configs=(m.CreatableTopicConfig(name="retention.ms", value="1000"),),
                    ),
                ),
                timeout=ms,
                validate_only=True,
            ),
            10,
        )
    )
    return out


SEEDS = _seeds()
#: Counts and lengths far beyond any frame (a uvarint of 24,154,976,852 made kio's native
#: parser allocate 193 GB and abort the broker before lengths were checked).
HUGE_LENGTHS = [
    b"\x7f\xff\xff\xff",
    b"\x7f\xff",
    bytes.fromhex("d4e4fefd59"),
    b"\xff\xff\xff\xff\x0f",
    b"\xff\xff\xff\x07",
]


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random", "mutate", "mutate", "mutate", "splice"]))
    if kind == "random":
        data = draw(st.binary(min_size=0, max_size=200))
        if draw(st.booleans()):
            data = struct.pack(">i", len(data)) + data
        return data
    seed = bytearray(draw(st.sampled_from(SEEDS)))
    if kind == "splice":
        other = draw(st.sampled_from(SEEDS))
        cut = draw(st.integers(4, len(seed)))
        seed = seed[:cut] + other[draw(st.integers(0, len(other))) :]
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "length"]))
        if not seed:
            break
        i = draw(st.integers(0, len(seed) - 1))
        if op == "flip":
            seed[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            seed[i] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
        elif op == "insert":
            seed[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del seed[i : i + draw(st.integers(1, 8))]
        elif op == "length":
            # a huge count or length where one may be: int32, int16 or a 5-byte uvarint
            seed[i : i + 5] = draw(st.sampled_from(HUGE_LENGTHS))
        else:
            del seed[i:]
    if len(seed) >= 4 and draw(st.booleans()):
        struct.pack_into(">i", seed, 0, len(seed) - 4)  # keep the frame self-consistent
    return bytes(seed)


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("fuzz")) as b:
        cf_produce(b.bootstrap, "fuzz", [(b"k", b"v" * 100)] * 50)
        yield b


@pytest.mark.slow
def test_fuzzed_frames_never_kill_the_broker(fuzz_broker):
    b = fuzz_broker
    bystander = WireClient(b.bootstrap)
    api_versions = load_request_schema(18, 3)(
        client_software_name="bystander", client_software_version="1"
    )

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(frames(), st.booleans())
    def throw(data: bytes, half_close: bool) -> None:
        thrown.append(len(data))
        with socket.create_connection(("127.0.0.1", b.port), timeout=5) as s:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
                s.settimeout(0.5)
                try:
                    while s.recv(65536):
                        pass
                except (TimeoutError, ConnectionResetError):
                    pass
        assert bystander.call(api_versions).error_code == 0

    thrown: list[int] = []
    try:
        throw()
    finally:
        bystander.close()
    assert len(thrown) >= EXAMPLES // 2
    assert b.alive(), b.tail()
    log = b.log_text()
    closed = log.count("closing connection from")
    print(f"{len(thrown)} frames thrown, {closed} connections closed by the broker")
    assert "Traceback" not in log, log[
        log.index("Traceback") - 2000 : log.index("Traceback") + 3000
    ]


@pytest.fixture(scope="module")
def sasl_ssl_broker(tmp_path_factory):
    """A broker whose only listener is SASL_SSL (SCRAM-SHA-256), with one user and a topic
    that holds 50 records written by that user."""
    import subprocess
    import sys

    from tests.integration.security_support import KEYSTORE_PASSWORD, SecureBroker, make_pki

    root = tmp_path_factory.mktemp("fuzz-sasl-ssl")
    pki = make_pki(root / "pki")
    b = SecureBroker(
        root / "b",
        {"SASL_SSL": "SASL_SSL"},
        "sasl.enabled.mechanisms=SCRAM-SHA-256",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={pki.server_p12}",
        f"ssl.keystore.password={KEYSTORE_PASSWORD}",
        "connection.failed.authentication.delay.ms=0",
    )
    (root / "b").mkdir(exist_ok=True)
    (root / "pw").write_text("fuzz-pw\n")
    subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "scram", "add", "--user", "fuzzer",
         "--mechanism", "SCRAM-SHA-256", "--password-file", str(root / "pw"),
         "--override", f"log.dirs={b.log_dir}"],
        check=True, capture_output=True, cwd=root / "b",
    )  # fmt: skip
    b.start()
    conf = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "fuzzer",
        "sasl.password": "fuzz-pw",
    }
    try:
        cf_produce(b.bootstrap_of("SASL_SSL"), "fuzz", [(b"k", b"v" * 100)] * 50, **conf)
        yield b, pki, conf
    finally:
        b.stop()


@pytest.mark.slow
def test_fuzzed_frames_before_authentication_on_sasl_ssl_reach_no_handler(sasl_ssl_broker):
    """Random and mutated frames over TLS, before any SASL exchange: none reaches a handler
    (the topic's records are unchanged, no handler logged a request), the broker never dies,
    and an authenticated client is served afterwards."""
    import ssl

    from tests.integration.clients import cf_consume

    b, pki, conf = sasl_ssl_broker
    port = b.ports["SASL_SSL"]
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.check_hostname = False

    @settings(
        max_examples=max(EXAMPLES // 10, 100),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(frames())
    def throw(data: bytes) -> None:
        thrown.append(len(data))
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            ctx.wrap_socket(raw) as s,
        ):
            try:
                s.sendall(data)
                s.settimeout(0.5)
                while s.recv(65536):
                    pass
            except (TimeoutError, OSError):
                pass  # closed by the broker, or waiting for the rest of a frame

    thrown: list[int] = []
    throw()
    assert len(thrown) >= 50
    assert b.alive(), b.tail()
    log = b.log_since_start()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:5000]
    # Nothing was appended: the topic holds exactly the 50 records written with a login.
    got = cf_consume(b.bootstrap_of("SASL_SSL"), "fuzz", 50, **conf)
    assert [m.value() for m in got] == [b"v" * 100] * 50
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**conf, "bootstrap.servers": b.bootstrap_of("SASL_SSL"), "group.id": "end"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition("fuzz", 0), timeout=30)
    finally:
        c.close()
    assert high == 50
