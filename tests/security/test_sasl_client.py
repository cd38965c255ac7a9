"""The client side of SASL: RFC 7677's vector byte for byte, then our client against our
server (random users, passwords, both mechanisms), and every way a server can fail it."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.security.test_scram import (
    RFC_CLIENT_FINAL,
    RFC_CLIENT_FIRST,
    RFC_SALT,
    RFC_SERVER_FINAL,
    RFC_SERVER_FIRST,
)
from tierlog.errors import SaslAuthenticationFailed, SaslError
from tierlog.security.plain import PlainSaslServer
from tierlog.security.sasl_client import (
    PlainSaslClient,
    ScramSaslClient,
    new_sasl_client,
)
from tierlog.security.scram import ScramMechanism, ScramSaslServer, credential_from_password

SHA256 = ScramMechanism.SCRAM_SHA_256


def _rfc_client(password: str = "pencil") -> ScramSaslClient:
    return ScramSaslClient(SHA256, "user", password, nonce=lambda: "rOprNGfwEbeRWgbNEkqO")


def test_rfc_7677_vector() -> None:
    c = _rfc_client()
    assert c.initial_response() == RFC_CLIENT_FIRST
    assert c.evaluate_challenge(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not c.is_complete
    assert c.evaluate_challenge(RFC_SERVER_FINAL) == b""
    assert c.is_complete


def test_a_forged_server_signature_fails() -> None:
    c = _rfc_client()
    c.initial_response()
    c.evaluate_challenge(RFC_SERVER_FIRST)
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(SaslAuthenticationFailed, match="does not know the user's keys"):
        c.evaluate_challenge(forged)
    assert not c.is_complete


@pytest.mark.parametrize(
    ("server_first", "match"),
    [
        (b"e=unknown-user", "the server refused: unknown-user"),
        (b"r=someone-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
        (b"r=rOprNGfwEbeRWgbNEkqOxx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=10", "fewer than 4096"),
        (b"r=rOprNGfwEbeRWgbNEkqOxx,i=4096", "invalid SCRAM server-first"),
        (b"r=rOprNGfwEbeRWgbNEkqOxx,s=!!,i=4096", "invalid salt"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_bad_server_first_messages(server_first: bytes, match: str) -> None:
    c = _rfc_client()
    c.initial_response()
    with pytest.raises(SaslAuthenticationFailed, match=match):
        c.evaluate_challenge(server_first)


def test_server_final_error_and_out_of_turn_messages() -> None:
    c = _rfc_client()
    c.initial_response()
    c.evaluate_challenge(RFC_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationFailed, match="refused: invalid-proof"):
        c.evaluate_challenge(b"e=invalid-proof")
    with pytest.raises(SaslAuthenticationFailed, match="unexpected SCRAM message"):
        c.evaluate_challenge(RFC_SERVER_FINAL)
    with pytest.raises(RuntimeError, match="already sent"):
        c.initial_response()


def test_a_wrong_password_is_refused_by_the_server() -> None:
    cred = credential_from_password(SHA256, "pencil", 4096, salt=RFC_SALT)
    server = ScramSaslServer(SHA256, lambda u, m: cred)
    c = ScramSaslClient(SHA256, "user", "not-pencil")
    first = server.evaluate_response(c.initial_response())
    with pytest.raises(SaslError, match="Invalid client credentials"):
        server.evaluate_response(c.evaluate_challenge(first))


@settings(max_examples=25, deadline=None)
@given(
    user=st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=20),
    password=st.text(st.characters(codec="utf-8"), min_size=1, max_size=30),
    mechanism=st.sampled_from(list(ScramMechanism)),
)
def test_our_client_against_our_server(user: str, password: str, mechanism: ScramMechanism) -> None:
    cred = credential_from_password(mechanism, password, 4096)
    server = ScramSaslServer(mechanism, lambda u, m: cred if (u, m) == (user, mechanism) else None)
    client = new_sasl_client(mechanism.mechanism_name, user, password)
    token = client.initial_response()
    while not client.is_complete:
        token = client.evaluate_challenge(server.evaluate_response(token))
    assert server.is_complete and server.authorization_id == user
    assert token == b""


def test_plain_client_against_the_plain_server() -> None:
    server = PlainSaslServer({"alice": "secret"})
    client = new_sasl_client("PLAIN", "alice", "secret")
    assert isinstance(client, PlainSaslClient)
    server.evaluate_response(client.initial_response())
    assert client.is_complete and server.is_complete
    assert server.authorization_id == "alice"


def test_unknown_mechanism() -> None:
    with pytest.raises(ValueError, match="GSSAPI"):
        new_sasl_client("GSSAPI", "a", "b")
