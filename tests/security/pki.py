"""Test certificates made at test time with ``cryptography``: a CA, a server certificate for
127.0.0.1/localhost (PEM with its key, the key encrypted, PKCS12 with a password, and the key
and chain apart for Kafka's inline PEM keys), a client certificate
``CN=alice,OU=clients,O=tierlog`` signed by the CA, a PKCS12 trust store holding the CA, and a
second CA that signed nothing (a wrong trust store)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests import real_parts

KEYSTORE_PASSWORD = "ks-secret"
KEY_PASSWORD = "key-secret"
CLIENT_DN = "CN=alice,OU=clients,O=tierlog"


@dataclass(frozen=True)
class Pki:
    ca: Path  # CA certificate, PEM
    other_ca: Path  # a CA that signed nothing here
    server_pem: Path  # server key + chain in one PEM file (unencrypted key)
    server_pem_encrypted: Path  # the same with the key encrypted by KEY_PASSWORD
    server_p12: Path  # PKCS12, password KEYSTORE_PASSWORD
    server_key_text: str  # the key alone, PEM (inline ssl.keystore.key)
    server_chain_text: str  # the chain alone, PEM (inline ssl.keystore.certificate.chain)
    client_cert: Path
    client_key: Path
    truststore_p12: Path  # the CA as a PKCS12 trust store, password KEYSTORE_PASSWORD


def _name(**parts: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME}
    oids["O"] = NameOID.ORGANIZATION_NAME
    # RDNs in DER order (least specific first): Java prints them the other way round.
    order = ["O", "OU", "CN"]
    return x509.Name([x509.NameAttribute(oids[k], parts[k]) for k in order if k in parts])


def _cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        b = b.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    else:
        b = b.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            b = b.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
    return b.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def make_pki(d: Path) -> Pki:
    import cryptography

    real_parts.used("cryptography", f"test certificates (cryptography {cryptography.__version__})")
    d.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(CN="tierlog test CA", O="tierlog")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_name = _name(CN="some other CA", O="elsewhere")
    other = _cert(other_name, other_key, other_name, other_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert(_name(CN="localhost", O="tierlog"), server_key, ca_name, ca_key, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert(_name(CN="alice", OU="clients", O="tierlog"), client_key, ca_name, ca_key)

    pki = Pki(
        ca=d / "ca.pem",
        other_ca=d / "other-ca.pem",
        server_pem=d / "server.pem",
        server_pem_encrypted=d / "server-encrypted.pem",
        server_p12=d / "server.p12",
        server_key_text=_key_pem(server_key).decode(),
        server_chain_text=(_pem(server) + _pem(ca)).decode(),
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        truststore_p12=d / "truststore.p12",
    )
    pki.ca.write_bytes(_pem(ca))
    pki.other_ca.write_bytes(_pem(other))
    pki.server_pem.write_bytes(_key_pem(server_key) + _pem(server) + _pem(ca))
    pki.server_pem_encrypted.write_bytes(_key_pem(server_key, KEY_PASSWORD) + _pem(server))
    pki.server_p12.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"broker",
            server_key,
            server,
            [ca],
            serialization.BestAvailableEncryption(KEYSTORE_PASSWORD.encode()),
        )
    )
    pki.truststore_p12.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca, b"ca")],
            serialization.BestAvailableEncryption(KEYSTORE_PASSWORD.encode()),
        )
    )
    pki.client_cert.write_bytes(_pem(client))
    pki.client_key.write_bytes(_key_pem(client_key))
    return pki
