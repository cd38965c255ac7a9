"""A client's security settings: a broker's own identity on ``inter.broker.listener.name``
(Kafka's keys and checks) and a Kafka client's keys (as Spark's source passes them), each bad
setting refused with the key named; the TLS context really checks the peer (a real handshake
over a socket pair)."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from tests.security.pki import KEYSTORE_PASSWORD, Pki, make_pki
from tierlog.errors import ConfigError
from tierlog.security.client_security import client_security, inter_broker_security
from tierlog.security.security_config import ListenerConfigs
from tierlog.security.ssl_factory import SslFactory
from tierlog.server.kafka_config import KafkaConfig

SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-secret";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _broker(pki: Pki, **props: str) -> KafkaConfig:
    base = {
        "listeners": "CLIENTS://127.0.0.1:0,REPLICATION://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENTS:PLAINTEXT,REPLICATION:SASL_SSL",
        "inter.broker.listener.name": "REPLICATION",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.replication.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki.server_p12),
        "ssl.keystore.password": KEYSTORE_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }
    base.update(props)
    return KafkaConfig.from_props({k: v for k, v in base.items() if v != "-"})


def test_inter_broker_identity(pki: Pki) -> None:
    sec = inter_broker_security(_broker(pki))
    assert (sec.security_protocol, sec.sasl_mechanism, sec.username) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "broker",
    )
    assert sec.password == "broker-secret" and "broker-secret" not in repr(sec)
    assert sec.ssl_context is not None and sec.ssl_context.check_hostname
    assert sec.describe() == "SASL_SSL, SCRAM-SHA-256 as broker"


@pytest.mark.parametrize(
    ("props", "key", "message"),
    [
        (
            {"sasl.mechanism.inter.broker.protocol": "GSSAPI"},
            "sasl.mechanism.inter.broker.protocol",
            "GSSAPI is not supported",
        ),
        (
            {"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
            "sasl.mechanism.inter.broker.protocol",
            "must be enabled on the inter-broker listener REPLICATION",
        ),
        (
            {"listener.name.replication.scram-sha-256.sasl.jaas.config": "-"},
            "listener.name.replication.scram-sha-256.sasl.jaas.config",
            "authenticates to other brokers with SCRAM-SHA-256",
        ),
        (
            {
                "listener.name.replication.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    'username="broker";'
                )
            },
            "listener.name.replication.scram-sha-256.sasl.jaas.config",
            "needs the client's username and password",
        ),
        (
            {"listener.name.replication.scram-sha-256.sasl.jaas.config": "nonsense"},
            "listener.name.replication.scram-sha-256.sasl.jaas.config",
            "invalid JAAS configuration",
        ),
        (
            {"ssl.truststore.location": "/nonexistent/ca.pem"},
            "ssl.truststore.location",
            "cannot read /nonexistent/ca.pem",
        ),
    ],
)
def test_inter_broker_errors_name_the_key(
    pki: Pki, props: dict[str, str], key: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        inter_broker_security(_broker(pki, **props))
    assert e.value.key == key


def test_security_inter_broker_protocol_picks_the_listener_named_after_it(pki: Pki) -> None:
    c = KafkaConfig.from_props(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "security.inter.broker.protocol": "SSL",
            "ssl.keystore.location": str(pki.server_p12),
            "ssl.keystore.password": KEYSTORE_PASSWORD,
        }
    )
    assert c.inter_broker_listener_name == "SSL"
    assert inter_broker_security(c).security_protocol == "SSL"
    with pytest.raises(ConfigError, match="not both") as e:
        KafkaConfig.from_props(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                "security.inter.broker.protocol": "SSL",
                "inter.broker.listener.name": "PLAINTEXT",
            }
        )
    assert e.value.key == "security.inter.broker.protocol"
    with pytest.raises(ConfigError, match="no listener is named SASL_SSL"):
        KafkaConfig.from_props(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "security.inter.broker.protocol": "SASL_SSL",
            }
        )


def test_client_keys(pki: Pki) -> None:
    sec = client_security(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS.replace("broker", "alice"),
            "ssl.truststore.location": str(pki.ca),
            "ssl.truststore.type": "PEM",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert (sec.security_protocol, sec.sasl_mechanism, sec.username) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "alice",
    )
    assert sec.ssl_context is not None and not sec.ssl_context.check_hostname
    assert client_security({}).security_protocol == "PLAINTEXT"


@pytest.mark.parametrize(
    ("configs", "key", "message"),
    [
        ({"security.protocol": "TLS"}, "kafka.security.protocol", "not one of PLAINTEXT"),
        (
            {"security.protocol": "SASL_PLAINTEXT"},
            "kafka.sasl.mechanism",
            "GSSAPI is not supported",
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
            "kafka.sasl.jaas.config",
            "PlainLoginModule required",
        ),
        ({"ssl.truststore.type": "XYZ"}, "kafka.ssl.truststore.type", "not one of"),
        ({"ssl.keystore.path": "/x"}, "kafka.ssl.keystore.path", "not a security setting"),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent"},
            "kafka.ssl.truststore.location",
            "cannot read",
        ),
    ],
)
def test_client_errors_name_the_key(configs: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        client_security(configs, prefix="kafka.")
    assert e.value.key == key


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, host: str) -> None:
    a, b = socket.socketpair()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                s.recv(1)
        except (OSError, ssl.SSLError) as e:
            errors.append(e)

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=host) as c:
            c.sendall(b"x")
    finally:
        t.join(10)


def test_the_client_context_checks_the_ca_and_the_host_name(pki: Pki, tmp_path: Path) -> None:
    server = SslFactory(
        "S",
        ListenerConfigs(
            {"S": {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.server_p12),
                   "ssl.keystore.password": KEYSTORE_PASSWORD}},
            lambda k: _defaults()[k], lambda k: False,
        ),
    ).create_server_context()  # fmt: skip
    good = client_security({"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca),
                            "ssl.truststore.type": "PEM"})  # fmt: skip
    assert good.ssl_context is not None
    _handshake(server, good.ssl_context, "127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError, match=r"mismatch|match"):
        _handshake(server, good.ssl_context, "other.example")
    wrong_ca = client_security({"security.protocol": "SSL",
                                "ssl.truststore.location": str(pki.other_ca),
                                "ssl.truststore.type": "PEM"})  # fmt: skip
    assert wrong_ca.ssl_context is not None
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(server, wrong_ca.ssl_context, "127.0.0.1")


def _defaults() -> dict[str, object]:
    from tierlog.security.security_config import SECURITY_CONFIGS

    return {d.name: d.default for d in SECURITY_CONFIGS}


def test_librdkafka_names(pki: Pki) -> None:
    from tierlog.security.client_security import librdkafka_config

    java = {
        "bootstrap.servers": "b:1",
        "linger.ms": "5",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": SCRAM_JAAS,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }
    assert librdkafka_config(java) == {
        "bootstrap.servers": "b:1",
        "linger.ms": "5",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "broker",
        "sasl.password": "broker-secret",
        "ssl.ca.location": str(pki.ca),
        "ssl.endpoint.identification.algorithm": "https",
    }
    p12 = librdkafka_config(
        {
            "security.protocol": "SSL",
            "ssl.truststore.location": str(pki.truststore_p12),
            "ssl.truststore.password": KEYSTORE_PASSWORD,
            "ssl.keystore.location": str(pki.server_p12),
            "ssl.keystore.password": KEYSTORE_PASSWORD,
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert p12["ssl.ca.pem"] == pki.ca.read_text()
    assert p12["ssl.keystore.location"] == str(pki.server_p12)
    assert p12["ssl.endpoint.identification.algorithm"] == "none"
    # librdkafka's own names pass as they are
    native = {"security.protocol": "SASL_SSL", "sasl.username": "a", "ssl.ca.location": "/x"}
    assert librdkafka_config(native) == native
    with pytest.raises(ConfigError, match="invalid JAAS") as e:
        librdkafka_config({**java, "sasl.jaas.config": "x"}, prefix="kafka.")
    assert e.value.key == "kafka.sasl.jaas.config"
