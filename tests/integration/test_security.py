"""TLS and SASL on the listeners, with real clients over real sockets: confluent-kafka
(librdkafka) and kafka-python against ``tierlog serve`` processes.

Certificates are made at test time (security_support.make_pki). Each test names the error the
client reports when it is refused.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.errors

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests import real_parts
from tests.broker_process import ROOT
from tests.integration import wire
from tests.integration.clients import cf_consume, cf_produce
from tests.integration.security_support import (
    CLIENT_DN,
    KEY_PASSWORD,
    KEYSTORE_PASSWORD,
    Pki,
    SecureBroker,
    make_pki,
)

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@contextlib.contextmanager
def secure_broker(
    workdir: Path, listeners: dict[str, str], *overrides: str
) -> Iterator[SecureBroker]:
    workdir.mkdir(parents=True, exist_ok=True)
    b = SecureBroker(workdir, listeners, *overrides)
    b.start()
    try:
        yield b
    finally:
        if b.alive():
            with contextlib.suppress(RuntimeError):
                b.stop()
        # a failing test shows what the broker said
        print(b.tail(40))


def _records(n: int, tag: str) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), f"{tag}-{i}".encode()) for i in range(n)]


def _kp_consume(bootstrap: str, topic: str, count: int, **conf: Any) -> list[bytes]:
    """``count`` values read with kafka-python from offset 0 of partition 0."""
    c = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
        **conf,
    )
    try:
        tp = kafka.TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=1000).values():
                out.extend(m.value for m in msgs)
        return out
    finally:
        c.close()


def _kp_produce(bootstrap: str, topic: str, values: list[bytes], **conf: Any) -> None:
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, **conf)
    try:
        for v in values:
            p.send(topic, v, partition=0).get(timeout=30)
    finally:
        p.close()


def _cf_create_topic(bootstrap: str, topic: str, **conf: Any) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)


# --------------------------------------------------------------------------- TLS


def test_ssl_server_auth_pkcs12_with_both_clients(tmp_path: Path, pki: Pki) -> None:
    with secure_broker(
        tmp_path / "b",
        {"SSL": "SSL"},
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={pki.server_p12}",
        f"ssl.keystore.password={KEYSTORE_PASSWORD}",
    ) as b:
        boot = b.bootstrap_of("SSL")
        cf_tls = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
        cf_produce(boot, "tls-topic", _records(20, "tls"), **cf_tls)
        got = cf_consume(boot, "tls-topic", 20, **cf_tls)
        assert [m.value() for m in got] == [f"tls-{i}".encode() for i in range(20)]
        kp_tls = {"security_protocol": "SSL", "ssl_cafile": str(pki.ca)}
        _kp_produce(boot, "tls-topic", [b"from-kafka-python"], **kp_tls)
        values = _kp_consume(boot, "tls-topic", 21, **kp_tls)
        assert values[-1] == b"from-kafka-python" and len(values) == 21

        # A client that does not trust our CA is refused by its own TLS check.
        bad = Producer(
            {
                "bootstrap.servers": boot,
                "security.protocol": "SSL",
                "ssl.ca.location": str(pki.other_ca),
                "socket.timeout.ms": 5000,
                "message.timeout.ms": 5000,
            }
        )
        errors: list[KafkaError] = []
        bad.produce("tls-topic", b"x", on_delivery=lambda err, msg: errors.append(err))
        bad.flush(15)
        assert errors and errors[0].code() == KafkaError._MSG_TIMED_OUT

        # A plaintext client on the TLS port gets nowhere: its request is no TLS handshake.
        c = wire.WireClient(boot, timeout=5)
        try:
            c.sock.sendall(wire.encode(_api_versions(), 1))
            assert c.closed_by_peer(10)
        finally:
            c.close()
        assert b.alive()


def _api_versions() -> Any:
    return wire.request_class(18, 3)(client_software_name="t", client_software_version="1")


def test_mtls_principal_and_a_client_without_certificate(tmp_path: Path, pki: Pki) -> None:
    # PEM key store with an encrypted key, PKCS12 trust store, mTLS required, principal mapped.
    with secure_broker(
        tmp_path / "b",
        {"SSL": "SSL"},
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={pki.server_pem_encrypted}",
        f"ssl.key.password={KEY_PASSWORD}",
        "ssl.truststore.type=PKCS12",
        f"ssl.truststore.location={pki.truststore_p12}",
        f"ssl.truststore.password={KEYSTORE_PASSWORD}",
        "ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]*),OU=clients,.*$/$1-svc/U,DEFAULT",
    ) as b:
        boot = b.bootstrap_of("SSL")
        cf_mtls = {
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        }
        cf_produce(boot, "mtls-topic", _records(5, "m"), **cf_mtls)
        kp_mtls = {
            "security_protocol": "SSL",
            "ssl_cafile": str(pki.ca),
            "ssl_certfile": str(pki.client_cert),
            "ssl_keyfile": str(pki.client_key),
        }
        assert _kp_consume(boot, "mtls-topic", 5, **kp_mtls) == [
            f"m-{i}".encode() for i in range(5)
        ]
        log = b.log_since_start()
        # The subject as Kafka prints it, CN=alice,OU=clients,O=tierlog, mapped by the rule.
        assert "on listener SSL authenticated as User:ALICE-SVC (TLS client certificate)" in log

        # No client certificate: the TLS handshake fails (the client sees the alert).
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        with (
            socket.create_connection(("127.0.0.1", b.ports["SSL"]), timeout=10) as raw,
            pytest.raises((ssl.SSLError, ConnectionResetError)),
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(wire.encode(_api_versions(), 1))
            if not tls.recv(4):  # TLS 1.3: the alert arrives after the handshake
                raise ConnectionResetError("closed")
        assert b.alive()


def test_inline_pem_keystore_with_default_principal(tmp_path: Path, pki: Pki) -> None:
    def inline(text: str) -> str:  # Kafka's properties form: newlines written as spaces
        return " ".join(text.split("\n")).strip()

    with secure_broker(
        tmp_path / "b",
        {"SSL": "SSL"},
        "ssl.keystore.type=PEM",
        f"ssl.keystore.key={inline(pki.server_key_text)}",
        f"ssl.keystore.certificate.chain={inline(pki.server_chain_text)}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pki.ca}",
        "ssl.client.auth=requested",
    ) as b:
        boot = b.bootstrap_of("SSL")
        cf_produce(
            boot,
            "inline-topic",
            _records(3, "i"),
            **{
                "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca),
                "ssl.certificate.location": str(pki.client_cert),
                "ssl.key.location": str(pki.client_key),
            },
        )
        # requested: a client without a certificate is served, as User:ANONYMOUS
        got = cf_consume(
            boot, "inline-topic", 3, **{"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
        )
        assert len(got) == 3
        assert f"authenticated as User:{CLIENT_DN} (TLS client certificate)" in (
            b.log_since_start()
        )


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        (
            ("ssl.keystore.type=PKCS12", "ssl.keystore.password=wrong"),
            "ssl.keystore.password",
            "cannot open the PKCS12 key store",
        ),
        (
            ("ssl.keystore.type=PEM", "ssl.key.password=wrong", "@encrypted"),
            "ssl.key.password",
            "wrong password for the private key",
        ),
        (
            ("ssl.keystore.type=PKCS12", "ssl.keystore.password=x", "@missing"),
            "ssl.keystore.location",
            "cannot read",
        ),
    ],
)
def test_bad_keystore_fails_startup_with_one_line(
    tmp_path: Path, pki: Pki, overrides: tuple[str, ...], key: str, message: str
) -> None:
    location = {
        "@encrypted": pki.server_pem_encrypted,
        "@missing": tmp_path / "nowhere.p12",
    }.get(overrides[-1], pki.server_p12)
    props = [o for o in overrides if not o.startswith("@")]
    b = SecureBroker(
        tmp_path / "b",
        {"SSL": "SSL"},
        *props,
        f"listener.name.ssl.ssl.keystore.location={location}",
    )
    (tmp_path / "b").mkdir()
    with pytest.raises(RuntimeError, match="exited with 1 during startup"):
        b.start(timeout=60)
    fatal = [ln for ln in b.log_since_start().splitlines() if "CRITICAL" in ln]
    assert len(fatal) == 1, fatal
    assert "tierlog broker failed" in fatal[0]
    assert key in fatal[0] and message in fatal[0]
    if key == "ssl.keystore.location":
        assert "listener.name.ssl.ssl.keystore.location" in fatal[0]
    assert "Traceback" not in b.log_since_start()


# --------------------------------------------------------------------------- SASL


def test_sasl_plaintext_plain_with_both_clients(tmp_path: Path) -> None:
    with secure_broker(
        tmp_path / "b",
        {"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
    ) as b:
        boot = b.bootstrap_of("SASL_PLAINTEXT")
        cf = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        cf_produce(boot, "plain-topic", _records(10, "p"), **cf)
        kp = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "admin",
            "sasl_plain_password": "admin-secret",
        }
        assert _kp_consume(boot, "plain-topic", 10, **kp) == [f"p-{i}".encode() for i in range(10)]
        log = b.log_since_start()
        assert "authenticated as User:alice (SASL PLAIN)" in log
        assert "authenticated as User:admin (SASL PLAIN)" in log

        # A wrong password: librdkafka reports _AUTHENTICATION with Kafka's message.
        _assert_cf_authentication_fails(
            boot, {**cf, "sasl.password": "nope"}, "Invalid username or password"
        )
        # (kafka-python 3.0.12 does not surface it: it handles the close that follows the
        # answer first and retries the bootstrap until its timeout; librdkafka shows Kafka's
        # message, so the answer is on the wire.)


def _assert_cf_authentication_fails(boot: str, conf: dict[str, Any], needle: str) -> None:
    errors: list[KafkaError] = []
    p = Producer(
        {
            "bootstrap.servers": boot,
            "error_cb": errors.append,
            "message.timeout.ms": 5000,
            **conf,
        }
    )
    p.produce("never", b"x")
    deadline = time.monotonic() + 30
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, errors
        p.poll(0.2)
    auth = next(e for e in errors if e.code() == KafkaError._AUTHENTICATION)
    assert needle in auth.str(), auth.str()
    p.purge()
    p.flush(5)


def _scram_broker(tmp_path: Path, listeners: dict[str, str], *extra: str) -> SecureBroker:
    return SecureBroker(
        tmp_path / "b", listeners, "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512", *extra
    )


def _scram_add(broker: SecureBroker, user: str, password: str, mechanism: str) -> None:
    pw = broker.workdir / f"{user}.pw"
    pw.write_text(password + "\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tierlog.cli",
            "scram",
            "add",
            "--user",
            user,
            "--mechanism",
            mechanism,
            "--iterations",
            "8192",
            "--password-file",
            str(pw),
            "--override",
            f"log.dirs={broker.log_dir}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert password not in (broker.log_dir / "scram-credentials").read_text()


def test_sasl_plaintext_scram_256_and_512_created_offline_and_by_admin(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    b = _scram_broker(
        tmp_path,
        {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
    )
    _scram_add(b, "alice", "alice-256", "SCRAM-SHA-256")  # before the broker ever ran
    b.start()
    try:
        plain = b.bootstrap_of("PLAINTEXT")
        sasl = b.bootstrap_of("SASL_PLAINTEXT")
        # AlterUserScramCredentials (51) through librdkafka's admin client, on the plain port.
        admin = AdminClient({"bootstrap.servers": plain})
        upsert = UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-512"
        )
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(30)
        described = {
            u: f.result(30)
            for u, f in admin.describe_user_scram_credentials(["alice", "bob"]).items()
        }
        assert described["alice"].scram_credential_infos[0].mechanism == (
            ScramMechanism.SCRAM_SHA_256
        )
        assert described["alice"].scram_credential_infos[0].iterations == 8192
        assert described["bob"].scram_credential_infos[0].iterations == 4096

        cf_256 = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "alice-256",
        }
        cf_produce(sasl, "scram-topic", _records(5, "s"), **cf_256)
        kp_512 = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "bob",
            "sasl_plain_password": "bob-512",
        }
        assert _kp_consume(sasl, "scram-topic", 5, **kp_512) == [
            f"s-{i}".encode() for i in range(5)
        ]
        log = b.log_since_start()
        assert "authenticated as User:alice (SASL SCRAM-SHA-256)" in log
        assert "authenticated as User:bob (SASL SCRAM-SHA-512)" in log

        # Wrong password: Kafka hides why (SaslException), the client gets the generic line.
        _assert_cf_authentication_fails(
            sasl,
            {**cf_256, "sasl.password": "wrong"},
            "Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism SCRAM-SHA-256",
        )
        # bob has no SHA-256 credential: Kafka's "Invalid user credentials".
        _assert_cf_authentication_fails(
            sasl,
            {**cf_256, "sasl.username": "bob", "sasl.password": "bob-512"},
            "Invalid user credentials",
        )
        # Credentials survive a restart (the file), still no password in it.
        b.restart()
        cf_produce(b.bootstrap_of("SASL_PLAINTEXT"), "scram-topic", _records(1, "after"), **cf_256)
        assert "bob-512" not in (b.log_dir / "scram-credentials").read_text()
    finally:
        if b.alive():
            b.stop()


def test_sasl_ssl_scram_with_both_clients_and_plaintext_beside(tmp_path: Path, pki: Pki) -> None:
    """Two listeners of one broker: PLAINTEXT and SASL_SSL, each advertising its own port."""
    (tmp_path / "b").mkdir()
    b = _scram_broker(
        tmp_path,
        {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SASL_SSL"},
        "listener.name.external.ssl.keystore.type=PKCS12",
        f"listener.name.external.ssl.keystore.location={pki.server_p12}",
        f"listener.name.external.ssl.keystore.password={KEYSTORE_PASSWORD}",
        "listener.name.external.sasl.enabled.mechanisms=SCRAM-SHA-256",
        "connection.failed.authentication.delay.ms=50",
    )
    _scram_add(b, "alice", "alice-pw", "SCRAM-SHA-256")
    b.start()
    try:
        internal, external = b.bootstrap_of("INTERNAL"), b.bootstrap_of("EXTERNAL")
        cf_produce(internal, "two-listeners", _records(10, "in"))
        cf = {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca),
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "alice-pw",
        }
        got = cf_consume(external, "two-listeners", 10, **cf)
        assert [m.value() for m in got] == [f"in-{i}".encode() for i in range(10)]
        kp = {
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(pki.ca),
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-pw",
        }
        _kp_produce(external, "two-listeners", [b"kp"], **kp)
        assert _kp_consume(internal, "two-listeners", 11)[-1] == b"kp"
        _aiokafka_send(external, pki, "two-listeners", b"aiokafka")
        assert _kp_consume(internal, "two-listeners", 12)[-1] == b"aiokafka"

        # Metadata on each listener names that listener's port (a client is never sent to
        # the other one).
        c = wire.WireClient(internal)
        try:
            md = c.call(
                wire.request_class(3, 12)(
                    topics=(),
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )
            assert [(x.host, x.port) for x in md.brokers] == [("127.0.0.1", b.ports["INTERNAL"])]
        finally:
            c.close()
        assert "authenticated as User:alice (SASL SCRAM-SHA-256)" in b.log_since_start()
        # The mechanism this listener does not enable is refused at the handshake.
        _assert_cf_authentication_fails(external, {**cf, "sasl.mechanism": "PLAIN"}, "PLAIN")
    finally:
        if b.alive():
            b.stop()


def _aiokafka_send(bootstrap: str, pki: Pki, topic: str, value: bytes) -> None:
    """One record with aiokafka over SASL_SSL, SCRAM-SHA-256 as alice."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def send() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            security_protocol="SASL_SSL",
            ssl_context=create_ssl_context(cafile=str(pki.ca)),
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="alice",
            sasl_plain_password="alice-pw",
        )
        await p.start()
        try:
            await p.send_and_wait(topic, value, partition=0)
        finally:
            await p.stop()

    asyncio.run(send())


def _sasl_handshake(mechanism: str) -> Any:
    return wire.request_class(17, 1)(mechanism=mechanism)


def _sasl_authenticate(token: bytes) -> Any:
    return wire.request_class(36, 2)(auth_bytes=token)


def test_before_authentication_only_versions_and_sasl_are_answered(tmp_path: Path) -> None:
    with secure_broker(
        tmp_path / "b",
        {"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
        "connection.failed.authentication.delay.ms=3000",
    ) as b:
        boot = b.bootstrap_of("SASL_PLAINTEXT")
        # ApiVersions is answered and lists the SASL APIs; Produce then closes the connection.
        c = wire.WireClient(boot)
        try:
            keys = {k.api_key for k in c.call(_api_versions()).api_keys}
            assert {17, 36, 50, 51} <= keys
            c.send(
                wire.request_class(0, 9)(
                    transactional_id=None, acks=1, timeout=_ms(1000), topic_data=()
                )
            )
            assert c.closed_by_peer(10)
        finally:
            c.close()
        assert "Unexpected Kafka request of type Produce during SASL handshake." in (
            b.log_since_start()
        )

        # A failed authentication is answered after connection.failed.authentication.delay.ms
        # (3 s), and meanwhile another connection is served: its whole exchange finishes
        # before the failure's answer arrives (an ordering check, not a timing one).
        bad = wire.WireClient(boot, timeout=30)
        good = wire.WireClient(boot, timeout=30)
        try:
            assert bad.call(_sasl_handshake("PLAIN")).error_code == 0
            t0 = time.monotonic()
            bad.send(_sasl_authenticate(b"\0alice\0wrong"))
            assert good.call(_sasl_handshake("PLAIN")).error_code == 0
            ok = good.call(_sasl_authenticate(b"\0alice\0alice-secret"))
            assert ok.error_code == 0
            _, failed = bad.recv(36, 2)
            assert time.monotonic() - t0 >= 2.9  # a lower bound: the timer ran
            assert failed.error_code == 58  # SASL_AUTHENTICATION_FAILED
            assert failed.error_message == "Authentication failed: Invalid username or password"
            assert bad.closed_by_peer(10)
            # the authenticated connection goes on
            md = good.call(
                wire.request_class(3, 12)(
                    topics=(),
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )
            assert md.brokers[0].port == b.ports["SASL_PLAINTEXT"]
        finally:
            bad.close()
            good.close()

        # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM (33) with the enabled list.
        c = wire.WireClient(boot, timeout=30)
        try:
            resp = c.call(_sasl_handshake("GSSAPI"))
            assert resp.error_code == 33 and resp.mechanisms == ("PLAIN",)
            assert c.closed_by_peer(10)
        finally:
            c.close()
        assert b.alive()


def _ms(n: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=n)


def test_kip_368_reauthentication_and_expired_sessions(tmp_path: Path) -> None:
    with secure_broker(
        tmp_path / "b",
        {"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
        "connections.max.reauth.ms=1500",
    ) as b:
        boot = b.bootstrap_of("SASL_PLAINTEXT")
        # The session lifetime is in the SaslAuthenticate response (v1+).
        c = wire.WireClient(boot)
        try:
            c.call(_sasl_handshake("PLAIN"))
            ok = c.call(_sasl_authenticate(b"\0alice\0alice-secret"))
            assert ok.error_code == 0 and ok.session_lifetime == _ms(1500)
            md = wire.request_class(3, 12)(
                topics=(),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            c.call(md)
            time.sleep(2.0)  # past the session's end: the next request closes the connection
            c.send(md)
            assert c.closed_by_peer(10)
        finally:
            c.close()
        assert "SASL session of User:alice expired" in b.log_since_start()

        # librdkafka re-authenticates on its open connection before the session ends.
        cf = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        p = Producer({"bootstrap.servers": boot, **cf})
        try:
            delivered: list[Any] = []
            deadline = time.monotonic() + 60
            while "re-authenticated as User:alice" not in b.log_since_start():
                assert time.monotonic() < deadline, b.tail()
                p.produce("reauth-topic", b"v", on_delivery=lambda e, m: delivered.append(e))
                p.poll(0.2)
            assert p.flush(30) == 0
            assert delivered and all(e is None for e in delivered)
        finally:
            p.flush(5)


def test_scram_credential_apis_follow_kafkas_checks(tmp_path: Path) -> None:
    """AlterUserScramCredentials (51) and DescribeUserScramCredentials (50) error codes."""
    with secure_broker(tmp_path / "b", {"PLAINTEXT": "PLAINTEXT"}) as b:
        c = wire.WireClient(b.bootstrap_of("PLAINTEXT"))
        alter_cls = wire.request_class(51, 0)
        m = wire._module(alter_cls)
        describe_cls = wire.request_class(50, 0)
        dm = wire._module(describe_cls)

        def upsert(name: str, mech: int = 1, iterations: int = 4096) -> Any:
            return m.ScramCredentialUpsertion(
                name=name, mechanism=mech, iterations=iterations, salt=b"s" * 16,
                salted_password=b"p" * 32,
            )  # fmt: skip

        try:
            resp = c.call(
                alter_cls(
                    deletions=(m.ScramCredentialDeletion(name="ghost", mechanism=1),),
                    upsertions=(
                        upsert("alice"),
                        upsert("bob", iterations=100),
                        upsert("carol", iterations=20_000),
                        upsert("dave", mech=7),
                        upsert("erin"),
                        upsert("erin"),
                        upsert(""),
                    ),
                )
            )
            codes = {r.user: (r.error_code, r.error_message) for r in resp.results}
            assert codes == {
                "ghost": (91, "Attempt to delete a user credential that does not exist"),
                "alice": (0, None),
                "bob": (93, "Too few iterations"),
                "carol": (93, "Too many iterations"),
                "dave": (33, "Unknown SCRAM mechanism"),
                "erin": (92, "A user credential cannot be altered twice in the same request"),
                "": (93, "Username must not be empty"),
            }
            resp = c.call(describe_cls(users=None))
            assert [(r.user, [(i.mechanism, i.iterations) for i in r.credential_infos])
                    for r in resp.results] == [("alice", [(1, 4096)])]  # fmt: skip
            resp = c.call(
                describe_cls(users=tuple(dm.UserName(name=n) for n in ("alice", "x", "x")))
            )
            assert [(r.user, r.error_code) for r in resp.results] == [
                ("alice", 0),
                ("x", 92),
            ]
            resp = c.call(describe_cls(users=(dm.UserName(name="nobody"),)))
            assert resp.results[0].error_code == 91
            # SaslHandshake on a listener without SASL: ILLEGAL_SASL_STATE (34)
            assert c.call(_sasl_handshake("PLAIN")).error_code == 34
        finally:
            c.close()


# ---------------------------------------------------------------- more clients over SASL_SSL

_JS = Path(__file__).parent / "js"
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="{password}";'
)


def _kcat(bootstrap: str, pki: Pki, password: str, *args: str, stdin: str | None = None) -> Any:
    return subprocess.run(
        [
            "kcat", "-b", bootstrap, "-X", "security.protocol=SASL_SSL",
            "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=alice",
            "-X", f"sasl.password={password}", "-X", f"ssl.ca.location={pki.ca}", *args,
        ],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _tierlog(bootstrap: str, *args: str, stdin: str | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "tierlog.cli", *args, "--bootstrap-server", bootstrap],
        input=stdin, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip


def test_kafkajs_kcat_the_cli_and_the_spark_client_over_sasl_ssl_scram(
    tmp_path: Path, pki: Pki
) -> None:
    """kafkajs, kcat (librdkafka's command line), ``tierlog produce/consume`` with the Java
    client's security keys (as Spark's Kafka source takes them) and the Spark source's own
    fetch client, each over SASL_SSL with SCRAM-SHA-256; each refused with a wrong password."""
    import shutil

    if not (_JS / "node_modules" / "kafkajs").is_dir():
        real_parts.missing("kafkajs", f"npm ci --prefix {_JS} (make test does it)")
    if shutil.which("kcat") is None:
        real_parts.missing("kcat", "apt-get install kcat (.ci/run does it)")
    (tmp_path / "b").mkdir()
    b = _scram_broker(
        tmp_path,
        {"SASL_SSL": "SASL_SSL"},
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={pki.server_p12}",
        f"ssl.keystore.password={KEYSTORE_PASSWORD}",
        "sasl.enabled.mechanisms=SCRAM-SHA-256",
        "connection.failed.authentication.delay.ms=50",
    )
    _scram_add(b, "alice", "alice-pw", "SCRAM-SHA-256")
    b.start()
    try:
        bootstrap = b.bootstrap_of("SASL_SSL")
        # kafkajs
        js = subprocess.run(
            ["node", str(_JS / "sasl_ssl_client.js"), bootstrap, "matrix", str(pki.ca),
             "alice", "alice-pw", "5"],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        real_parts.used("kafkajs", "kafkajs 2.2.4 (node)")
        assert js.returncode == 0, js.stdout + js.stderr
        out = json.loads(js.stdout.strip().splitlines()[-1])
        assert out["acked"] == [0, 1, 2, 3, 4]
        assert out["consumed"] == [f"kafkajs-{i}" for i in range(5)]
        js = subprocess.run(
            ["node", str(_JS / "sasl_ssl_client.js"), bootstrap, "matrix", str(pki.ca),
             "alice", "wrong", "1"],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert js.returncode == 1
        assert "SASLAuthentication" in json.loads(js.stdout.strip().splitlines()[-1])["error"]

        # kcat
        version = subprocess.run(["kcat", "-V"], capture_output=True, text=True, check=False)
        real_parts.used("kcat", version.stdout.splitlines()[0] if version.stdout else "kcat")
        r = _kcat(bootstrap, pki, "alice-pw", "-P", "-t", "matrix", stdin="kcat-0\nkcat-1\n")
        assert r.returncode == 0, r.stderr
        r = _kcat(bootstrap, pki, "alice-pw", "-C", "-t", "matrix", "-o", "beginning", "-e",
                  "-q", "-c", "7")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == [f"kafkajs-{i}" for i in range(5)] + ["kcat-0", "kcat-1"]
        r = _kcat(bootstrap, pki, "wrong", "-L", "-m", "10")
        assert r.returncode != 0 and "Authentication failed" in r.stderr, r.stderr

        # the tierlog CLI with the Java client's keys, on the command line and in a file
        java = [
            "--command-config", "security.protocol=SASL_SSL",
            "--command-config", "sasl.mechanism=SCRAM-SHA-256",
            "--command-config", "sasl.jaas.config=" + SCRAM_JAAS.format(password="alice-pw"),
            "--command-config", f"ssl.truststore.location={pki.ca}",
            "--command-config", "ssl.truststore.type=PEM",
        ]  # fmt: skip
        r = _tierlog(bootstrap, "produce", "matrix", *java, stdin="cli-0\n")
        assert r.returncode == 0, r.stderr
        props = tmp_path / "client.properties"
        props.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
            f"sasl.jaas.config={SCRAM_JAAS.format(password='alice-pw')}\n"
            f"ssl.truststore.type=PKCS12\nssl.truststore.location={pki.truststore_p12}\n"
            f"ssl.truststore.password={KEYSTORE_PASSWORD}\n"
        )
        r = _tierlog(bootstrap, "consume", "matrix", "--from-beginning", "--max-messages", "8",
                     "--command-config", str(props))  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-1] == "cli-0"
        bad = [*java[:4], "--command-config", "sasl.jaas.config=nonsense"]
        r = _tierlog(bootstrap, "topics", "list", *bad)
        assert r.returncode != 0 and "invalid JAAS configuration" in r.stderr, r.stderr

        # the Spark source's fetch client (kafka.* options without the prefix)
        from tierlog.errors import SaslAuthenticationFailed as Refused
        from tierlog.security.client_security import client_security
        from tierlog.spark.fetch_client import KafkaClient

        conf = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": SCRAM_JAAS.format(password="alice-pw"),
            "ssl.truststore.location": str(pki.ca),
            "ssl.truststore.type": "PEM",
        }
        with KafkaClient(bootstrap, security=client_security(conf)) as client:
            assert client.metadata(["matrix"])["matrix"].partitions
            fetched = client.fetch("matrix", 0, 0)
            assert fetched.high_watermark == 8
        wrong = {**conf, "sasl.jaas.config": SCRAM_JAAS.format(password="wrong")}
        with (
            KafkaClient(bootstrap, security=client_security(wrong)) as client,
            pytest.raises(Refused, match=r"authentication to .* as alice with SCRAM-SHA-256"),
        ):
            client.metadata(["matrix"])
    finally:
        b.stop()
