"""SslFactory: key and trust stores of every supported kind, and one clear error naming the
key for each way a store can be wrong; then a real TLS handshake against the context."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from tests.security.pki import KEY_PASSWORD, KEYSTORE_PASSWORD, Pki, make_pki
from tierlog.errors import ConfigError
from tierlog.security.ssl_factory import SslFactory, openssl_cipher_name
from tierlog.server.kafka_config import KafkaConfig


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _context(**props: str) -> ssl.SSLContext:
    c = KafkaConfig.from_props(
        {"listeners": "SSL://127.0.0.1:0", **{k.replace("_", "."): v for k, v in props.items()}}
    )
    return SslFactory("SSL", c.listener_security).create_server_context()


def _handshake(ctx: ssl.SSLContext, pki: Pki, *, client_cert: bool) -> str:
    """A TLS handshake of a client over a socket pair; the server side's peer subject."""
    a, b = socket.socketpair()
    seen: list[object] = []

    def serve() -> None:
        try:
            with ctx.wrap_socket(a, server_side=True) as s:
                seen.append(s.getpeercert())
                s.sendall(b"ok")
        except (ssl.SSLError, OSError) as e:
            seen.append(e)

    t = threading.Thread(target=serve)
    t.start()
    client = ssl.create_default_context(cafile=str(pki.ca))
    if client_cert:
        client.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    try:
        with client.wrap_socket(b, server_hostname="localhost") as s:
            s.recv(2)
    finally:
        t.join(10)
    return repr(seen[0])


def test_pkcs12_keystore_server_auth(pki: Pki) -> None:
    ctx = _context(
        ssl_keystore_type="PKCS12",
        ssl_keystore_location=str(pki.server_p12),
        ssl_keystore_password=KEYSTORE_PASSWORD,
    )
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert _handshake(ctx, pki, client_cert=False) == "None"  # no client certificate asked


def test_jks_type_reads_pkcs12_files_as_java_does(pki: Pki) -> None:
    ctx = _context(
        ssl_keystore_location=str(pki.server_p12),  # ssl.keystore.type left at JKS
        ssl_keystore_password=KEYSTORE_PASSWORD,
        ssl_client_auth="required",
        ssl_truststore_location=str(pki.truststore_p12),
        ssl_truststore_password=KEYSTORE_PASSWORD,
    )
    assert "alice" in _handshake(ctx, pki, client_cert=True)


def test_pem_keystore_pkcs12_truststore_mtls(pki: Pki) -> None:
    ctx = _context(
        ssl_keystore_type="PEM",
        ssl_keystore_location=str(pki.server_pem_encrypted),
        ssl_key_password=KEY_PASSWORD,
        ssl_truststore_type="PKCS12",
        ssl_truststore_location=str(pki.truststore_p12),
        ssl_truststore_password=KEYSTORE_PASSWORD,
        ssl_client_auth="required",
        ssl_enabled_protocols="TLSv1.3",
    )
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert "alice" in _handshake(ctx, pki, client_cert=True)
    with pytest.raises((ssl.SSLError, OSError)):
        _handshake(ctx, pki, client_cert=False)


@pytest.mark.parametrize(
    ("props", "key", "needle"),
    [
        (
            {"ssl.keystore.type": "PKCS12", "ssl.keystore.password": "wrong"},
            "ssl.keystore.password",
            "wrong password",
        ),
        ({"ssl.keystore.type": "JKS", "@jks": "1"}, "ssl.keystore.type", "is a JKS store"),
        ({"ssl.keystore.type": "PEM", "@pem": "1"}, "ssl.key.password", "is encrypted"),
        (
            {"ssl.keystore.type": "PEM", "@pem": "1", "ssl.key.password": "bad"},
            "ssl.key.password",
            "wrong password for the private key",
        ),
        (
            {"ssl.keystore.type": "PEM", "@pem": "1", "ssl.keystore.password": "x"},
            "ssl.keystore.password",
            "cannot be specified with PEM format",
        ),
        ({"ssl.keystore.type": "PEM", "@none": "1"}, "ssl.keystore.location", "needs a key store"),
        (
            {"ssl.keystore.type": "PEM", "ssl.keystore.key": "x"},
            "ssl.keystore.certificate.chain",
            "ssl.keystore.certificate.chain is not set",
        ),
        (
            {"ssl.keystore.type": "PEM", "ssl.keystore.key": "x", "@pem": "1", "@loc": "1"},
            "ssl.keystore.key",
            "either ssl.keystore.location or the inline",
        ),
        (
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.password": KEYSTORE_PASSWORD,
                "ssl.client.auth": "required",
                "ssl.truststore.type": "PKCS12",
                "ssl.truststore.location": "@ts",
                "ssl.truststore.password": "wrong",
            },
            "ssl.truststore.password",
            "cannot open the PKCS12 trust store",
        ),
        (
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.password": KEYSTORE_PASSWORD,
                "ssl.cipher.suites": "TLS_NO_SUCH_SUITE",
            },
            "ssl.cipher.suites",
            "no cipher suite usable",
        ),
    ],
)
def test_errors_name_the_key(pki: Pki, props: dict[str, str], key: str, needle: str) -> None:
    props = dict(props)
    location = pki.server_pem_encrypted if props.pop("@pem", None) else pki.server_p12
    if props.pop("@jks", None):
        location = Path(str(pki.server_p12) + ".jks")
        location.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 64)
    if props.pop("@loc", None) or (
        props.pop("@none", None) is None and "ssl.keystore.key" not in props
    ):
        props["ssl.keystore.location"] = str(location)
    if props.get("ssl.truststore.location") == "@ts":
        props["ssl.truststore.location"] = str(pki.truststore_p12)
    c = KafkaConfig.from_props({"listeners": "SSL://127.0.0.1:0", **props})
    with pytest.raises(ConfigError) as e:
        SslFactory("SSL", c.listener_security).create_server_context()
    assert e.value.key == key
    assert needle in str(e.value)
    assert "wrong" not in str(e.value).replace("wrong password", "")  # no secret echoed


def test_per_listener_keystore_error_names_the_prefixed_key(pki: Pki, tmp_path: Path) -> None:
    c = KafkaConfig.from_props(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.type": "PKCS12",
            "listener.name.ssl.ssl.keystore.location": str(tmp_path / "missing.p12"),
        }
    )
    with pytest.raises(ConfigError) as e:
        SslFactory("SSL", c.listener_security).create_server_context()
    assert e.value.key == "listener.name.ssl.ssl.keystore.location"


@pytest.mark.parametrize(
    ("iana", "openssl"),
    [
        ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
        ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
        ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"),
        ("TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", "DHE-RSA-AES128-GCM-SHA256"),
        ("TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"),
        ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
        ("TLS_AES_128_GCM_SHA256", None),
    ],
)
def test_cipher_suite_names(iana: str, openssl: str | None) -> None:
    assert openssl_cipher_name(iana) == openssl
    if openssl is not None:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(openssl)


def test_cipher_suites_narrow_tls12(pki: Pki) -> None:
    ctx = _context(
        ssl_keystore_type="PKCS12",
        ssl_keystore_location=str(pki.server_p12),
        ssl_keystore_password=KEYSTORE_PASSWORD,
        ssl_cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256",
    )
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES256-GCM-SHA384"]
