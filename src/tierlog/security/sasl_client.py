"""The client side of SASL PLAIN and SCRAM (Kafka's ``PlainSaslClient`` and
``ScramSaslClient``): what a broker sends when it connects to another broker, and what the
Spark source and the ``tierlog`` client commands send to a broker.

Sans-IO: a client takes the server's tokens and returns its own; the caller carries them in
SaslAuthenticate requests (after a SaslHandshake naming :attr:`SaslClient.mechanism_name`)::

    client = new_sasl_client("SCRAM-SHA-256", "alice", "secret")
    token = client.initial_response()                 # n,,n=alice,r=<nonce>
    while not client.is_complete:
        token = client.evaluate_challenge(server_token)   # b"" once the server is verified

SCRAM (RFC 5802/7677), two round trips::

    client-first  n,,n=<user>,r=<client nonce>
    server-first  r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final  c=biws,r=<nonces>,p=<ClientProof>
    server-final  v=<ServerSignature>      (checked: a server that does not know the
                                            password's keys cannot forge it)

A SCRAM client also authenticates the server: a wrong ``v=`` is an error, as in Kafka.
``iterations`` below 4096 are refused (Kafka's ``ScramMechanism.minIterations``).

Not thread-safe: one per connection.
"""

from __future__ import annotations

import base64
import hmac
import secrets
from collections.abc import Callable
from typing import Protocol

from tierlog.errors import SaslAuthenticationFailed
from tierlog.security.scram import MIN_ITERATIONS, ScramMechanism

__all__ = [
    "CLIENT_MECHANISMS",
    "PlainSaslClient",
    "SaslClient",
    "ScramSaslClient",
    "new_sasl_client",
]

CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslClient(Protocol):
    """One client exchange of one mechanism."""

    @property
    def mechanism_name(self) -> str: ...
    @property
    def is_complete(self) -> bool: ...
    def initial_response(self) -> bytes: ...
    def evaluate_challenge(self, challenge: bytes) -> bytes: ...


class PlainSaslClient:
    """RFC 4616: one message, ``authzid NUL authcid NUL password`` (authzid empty)."""

    mechanism_name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password
        self._sent = False

    @property
    def is_complete(self) -> bool:
        return self._sent

    def initial_response(self) -> bytes:
        self._sent = True
        return b"\0" + self._username.encode() + b"\0" + self._password.encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes:
        """PLAIN has no challenge: the server's (empty) answer completes it."""
        self._sent = True
        return b""


def _encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramSaslClient:
    """The client side of one SCRAM exchange::

        SEND_CLIENT_FIRST --initial_response--> RECEIVE_SERVER_FIRST
        RECEIVE_SERVER_FIRST --server-first--> RECEIVE_SERVER_FINAL
        RECEIVE_SERVER_FINAL --server-final, signature checked--> COMPLETE

    Args:
        nonce: the client nonce (random by default; tests pass RFC 7677's).
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        nonce: Callable[[], str] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.mechanism_name = mechanism.mechanism_name
        self._username = username
        self._password = password.encode("utf-8")
        self._nonce = (nonce or (lambda: secrets.token_urlsafe(24)))()
        self._state = "SEND_CLIENT_FIRST"
        self._client_first_bare = ""
        self._server_signature = b""

    @property
    def is_complete(self) -> bool:
        return self._state == "COMPLETE"

    def initial_response(self) -> bytes:
        """``n,,n=<user>,r=<nonce>``.

        Raises:
            RuntimeError: called twice.
        """
        if self._state != "SEND_CLIENT_FIRST":
            raise RuntimeError(f"SCRAM client-first already sent (state {self._state})")
        self._client_first_bare = f"n={_encode_saslname(self._username)},r={self._nonce}"
        self._state = "RECEIVE_SERVER_FIRST"
        return f"n,,{self._client_first_bare}".encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes:
        """The answer to the server's message: client-final after server-first, ``b""`` after
        a verified server-final.

        Raises:
            SaslAuthenticationFailed: the server sent an error (``e=``), a nonce that does not
                extend ours, too few iterations, or a signature that proves it does not hold
                the user's keys; or a message out of turn.
        """
        try:
            text = challenge.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("the server's SCRAM message is not UTF-8") from None
        if self._state == "RECEIVE_SERVER_FIRST":
            return self._server_first(text)
        if self._state == "RECEIVE_SERVER_FINAL":
            self._server_final(text)
            return b""
        raise self._fail(f"unexpected SCRAM message in state {self._state}")

    def _fail(self, why: str) -> SaslAuthenticationFailed:
        self._state = "FAILED"
        return SaslAuthenticationFailed(f"{self.mechanism_name}: {why}")

    def _server_first(self, text: str) -> bytes:
        attrs = dict(p.split("=", 1) for p in text.split(",") if len(p) > 1 and p[1] == "=")
        if "e" in attrs:
            raise self._fail(f"the server refused: {attrs['e']}")
        nonce, salt_b64, iterations_s = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise self._fail("the server's nonce does not extend the client's")
        if salt_b64 is None or not iterations_s.isdigit():
            raise self._fail("invalid SCRAM server-first message")
        iterations = int(iterations_s)
        if iterations < MIN_ITERATIONS:
            raise self._fail(f"{iterations} iterations: fewer than {MIN_ITERATIONS}")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except ValueError:
            raise self._fail("invalid salt encoding") from None
        m = self.mechanism
        salted = m.hi(self._password, salt, iterations)
        client_key = m.hmac(salted, b"Client Key")
        stored_key = m.hash(client_key)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_signature = m.hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        server_key = m.hmac(salted, b"Server Key")
        self._server_signature = m.hmac(server_key, auth_message)
        self._state = "RECEIVE_SERVER_FINAL"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _server_final(self, text: str) -> None:
        if text.startswith("e="):
            raise self._fail(f"the server refused: {text[2:]}")
        if not text.startswith("v="):
            raise self._fail("invalid SCRAM server-final message")
        try:
            signature = base64.b64decode(text[2:].split(",", 1)[0], validate=True)
        except ValueError:
            raise self._fail("invalid server signature encoding") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise self._fail("the server's signature is wrong: it does not know the user's keys")
        self._state = "COMPLETE"


def new_sasl_client(mechanism: str, username: str, password: str) -> SaslClient:
    """A client for ``mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).

    Raises:
        ValueError: another mechanism.
    """
    if mechanism == "PLAIN":
        return PlainSaslClient(username, password)
    scram = ScramMechanism.for_name(mechanism)
    if scram is None:
        raise ValueError(
            f"SASL mechanism {mechanism!r} is not supported (use {', '.join(CLIENT_MECHANISMS)})"
        )
    return ScramSaslClient(scram, username, password)
