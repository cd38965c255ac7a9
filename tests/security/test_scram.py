"""SCRAM-SHA-256/512 on the server: RFC 7677's test vector, then a client written here from
RFC 5802 (independent of the server's code) against the server for random users, passwords
and nonces (Hypothesis)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tierlog.errors import SaslAuthenticationFailed, SaslError
from tierlog.security.scram import (
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    ScramSaslServer,
    credential_from_password,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512

# RFC 7677 section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc_server() -> ScramSaslServer:
    cred = credential_from_password(SHA256, "pencil", 4096, salt=RFC_SALT)
    return ScramSaslServer(
        SHA256, lambda u, m: cred if u == "user" else None, nonce=lambda: RFC_SERVER_NONCE
    )


def test_rfc_7677_vector() -> None:
    s = _rfc_server()
    assert s.evaluate_response(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not s.is_complete
    assert s.evaluate_response(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert s.is_complete and s.authorization_id == "user"


def test_credential_keeps_no_password_and_round_trips_kafka_form() -> None:
    cred = credential_from_password(SHA512, "pencil", 4096, salt=RFC_SALT)
    text = cred.to_kafka_string()
    assert "pencil" not in text and text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=")
    assert text.endswith(",iterations=4096")
    assert ScramCredential.from_kafka_string(text) == cred
    with pytest.raises(ValueError):
        credential_from_password(SHA256, "x", MIN_ITERATIONS - 1)


class Client:
    """RFC 5802's client side, written from the RFC."""

    def __init__(
        self, mech: ScramMechanism, user: str, password: str, nonce: str, echo: str = "{r}"
    ) -> None:
        self.h = mech.hash_name
        self.user, self.password, self.nonce = user, password, nonce
        self.echo = echo  # the nonce sent back: the server's r, or a buggy client's form

    def first(self) -> bytes:
        name = self.user.replace("=", "=3D").replace(",", "=2C")
        self.bare = f"n={name},r={self.nonce}"
        return ("n,," + self.bare).encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(p.split("=", 1) for p in server_first.decode().split(","))
        salt, i, r = base64.b64decode(attrs["s"]), int(attrs["i"]), attrs["r"]
        assert r.startswith(self.nonce)
        salted = hashlib.pbkdf2_hmac(self.h, self.password.encode(), salt, i)
        client_key = hmac.new(salted, b"Client Key", self.h).digest()
        stored_key = hashlib.new(self.h, client_key).digest()
        without_proof = f"c=biws,r={self.echo.format(r=r, c=self.nonce)}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, self.h).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.h).digest()
        self.expected_final = b"v=" + base64.b64encode(hmac.new(server_key, auth, self.h).digest())
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20)
nonces = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=","),
                 min_size=1, max_size=32)  # fmt: skip


@settings(max_examples=40, deadline=None)
@example(mech=SHA256, user="m", password="0", wrong="1", nonce="0")  # a name starting with m
@given(
    mech=st.sampled_from([SHA256, SHA512]),
    user=names,
    password=st.text(min_size=1, max_size=30),
    wrong=st.text(min_size=1, max_size=30),
    nonce=nonces,
)
def test_exchange_with_an_independent_client(mech, user, password, wrong, nonce) -> None:
    cred = credential_from_password(mech, password, 4096)
    creds = {user: cred}

    def lookup(u: str, m: ScramMechanism) -> ScramCredential | None:
        return creds.get(u) if m is mech else None

    client = Client(mech, user, password, nonce)
    server = ScramSaslServer(mech, lookup)
    final = server.evaluate_response(client.final(server.evaluate_response(client.first())) or b"")
    assert final == client.expected_final
    assert server.is_complete and server.authorization_id == user

    if wrong != password:
        bad = Client(mech, user, wrong, nonce)
        server = ScramSaslServer(mech, lookup)
        first = server.evaluate_response(bad.first())
        with pytest.raises(SaslError, match="Invalid client credentials"):
            server.evaluate_response(bad.final(first))
        assert not server.is_complete


@pytest.mark.parametrize(
    ("echo", "ok"),
    [
        ("{c}{r}", True),  # librdkafka < 2.6.1: its nonce, then the server's (librdkafka#4895)
        ("{c}", False),  # the client's nonce only
        ("x{r}", False),  # anything else before the server's
        ("{r}x", False),
        ("{c}{c}{r}", False),
    ],
)
def test_librdkafkas_doubled_nonce_is_accepted_and_nothing_else(echo: str, ok: bool) -> None:
    cred = credential_from_password(SHA256, "pw", 4096)
    server = ScramSaslServer(SHA256, lambda u, m: cred)
    client = Client(SHA256, "alice", "pw", "abc", echo=echo)
    final = client.final(server.evaluate_response(client.first()))
    if ok:
        assert server.evaluate_response(final) == client.expected_final
        assert server.is_complete
    else:
        with pytest.raises(SaslError, match="invalid nonce"):
            server.evaluate_response(final)


def test_unknown_user_and_other_mechanism_are_kafkas_invalid_user_credentials() -> None:
    cred = credential_from_password(SHA256, "pw", 4096)
    server = ScramSaslServer(SHA512, lambda u, m: cred if m is SHA256 else None)
    with pytest.raises(SaslAuthenticationFailed, match="Invalid user credentials"):
        server.evaluate_response(b"n,,n=alice,r=abc")


@pytest.mark.parametrize(
    "first",
    [
        b"p=tls-unique,,n=user,r=abc",  # channel binding asked for
        b"n,,r=abc,n=user",  # attributes out of order
        b"n,,n=user",  # no nonce
        b"n,,n=us=er,r=abc",  # bad saslname escape
        b"n,,m=ext,n=user,r=abc",  # mandatory extension
        b"\xff\xfe",  # not UTF-8
        b"",
    ],
)
def test_malformed_client_first(first: bytes) -> None:
    with pytest.raises(SaslError):
        _rfc_server().evaluate_response(first)


def test_authorization_id_other_than_the_user_is_refused() -> None:
    with pytest.raises(SaslAuthenticationFailed, match="authorization id"):
        _rfc_server().evaluate_response(b"n,a=admin,n=user,r=rOprNGfwEbeRWgbNEkqO")
    s = _rfc_server()  # the same user as authorization id is fine
    s.evaluate_response(b"n,a=user,n=user,r=rOprNGfwEbeRWgbNEkqO")


@pytest.mark.parametrize(
    "final",
    [
        RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # other gs2 header
        RFC_CLIENT_FINAL.replace(b"r=rOpr", b"r=xOpr"),  # other nonce
        RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=eHzb"),  # other proof
        RFC_CLIENT_FINAL[: RFC_CLIENT_FINAL.index(b",p=")],  # no proof
        RFC_CLIENT_FINAL + b"==",  # proof not base64
    ],
)
def test_bad_client_final_fails_and_stays_failed(final: bytes) -> None:
    s = _rfc_server()
    s.evaluate_response(RFC_CLIENT_FIRST)
    with pytest.raises(SaslError):
        s.evaluate_response(final)
    with pytest.raises(SaslError):  # no second chance on the same exchange
        s.evaluate_response(RFC_CLIENT_FINAL)
    with pytest.raises(RuntimeError):
        _ = s.authorization_id


def test_mechanism_codes_are_kafkas() -> None:
    assert ScramMechanism.for_code(1) is SHA256 and ScramMechanism.for_code(2) is SHA512
    assert ScramMechanism.for_name("SCRAM-SHA-512") is SHA512
    assert ScramMechanism.for_code(0) is None and ScramMechanism.for_name("PLAIN") is None
