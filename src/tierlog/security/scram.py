"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) on the server (Kafka's
``ScramSaslServer``, ``ScramFormatter`` and ``ScramMessages``).

The exchange, two round trips::

    client-first  n,,n=alice,r=<client nonce>
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=biws,r=<both nonces>,p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>          (or e=<error> on failure)

The server stores, per user and mechanism, a :class:`ScramCredential`: salt, iterations,
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``, where
``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``. Never the password: a stolen
credential file lets nobody log in (the proof needs ``ClientKey``, which only the password
gives), though it allows an offline guess of weak passwords.

Checking a proof: ``ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage)``, then
``H(ClientKey)`` must equal ``StoredKey`` (compared in constant time).

Channel binding is not offered (``y`` or ``p=`` gs2 headers: ``p=`` is refused), as in Kafka.

:class:`ScramSaslServer` is not thread-safe (one per connection); the functions are pure.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.errors import SaslAuthenticationFailed, SaslError

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "ScramCredential",
    "ScramMechanism",
    "ScramSaslServer",
    "credential_from_password",
    "credential_from_salted_password",
]

#: Kafka's bounds on iterations (ScramMechanism.minIterations, AlterUserScramCredentials max).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramMechanism(enum.Enum):
    """The SCRAM mechanisms with Kafka's names and wire codes (AlterUserScramCredentials)."""

    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    def __init__(self, mechanism_name: str, hash_name: str, code: int) -> None:
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        self.code = code

    @classmethod
    def for_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)

    @classmethod
    def for_code(cls, code: int) -> ScramMechanism | None:
        return next((m for m in cls if m.code == code), None)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def hi(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        """RFC 5802's Hi(): PBKDF2 with this mechanism's HMAC."""
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps for one user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka_string(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString`` form (as ZooKeeper holds it)."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka_string(cls, text: str) -> ScramCredential:
        """Parse :meth:`to_kafka_string`'s form.

        Raises:
            ValueError: a field is missing or malformed.
        """
        fields = dict(part.split("=", 1) for part in text.split(","))
        try:
            return cls(
                salt=base64.b64decode(fields["salt"], validate=True),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
                iterations=int(fields["iterations"]),
            )
        except (KeyError, ValueError) as e:
            raise ValueError(f"malformed SCRAM credential: {e}") from None


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The stored credential from ``SaltedPassword`` (what AlterUserScramCredentials sends)."""
    client_key = mechanism.hmac(salted_password, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=mechanism.hash(client_key),
        server_key=mechanism.hmac(salted_password, b"Server Key"),
        iterations=iterations,
    )


def credential_from_password(
    mechanism: ScramMechanism, password: str, iterations: int, salt: bytes | None = None
) -> ScramCredential:
    """A new credential for ``password`` with a random salt (``tierlog scram add``).

    Raises:
        ValueError: ``iterations`` below :data:`MIN_ITERATIONS`.
    """
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be at least {MIN_ITERATIONS}")
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = mechanism.hi(_normalize(password), salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def _normalize(password: str) -> bytes:
    # Kafka (and librdkafka, kafka-python) use the password's UTF-8 bytes without SASLprep.
    return password.encode("utf-8")


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslError(f"invalid SCRAM attribute {part[:1]!r}")
        out.append((part[0], part[2:]))
    return out


def _decode_saslname(name: str) -> str:
    """RFC 5802: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is invalid."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise SaslError("invalid username encoding")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


class ScramSaslServer:
    """The server side of one SCRAM exchange::

        RECEIVE_CLIENT_FIRST_MESSAGE --client-first--> RECEIVE_CLIENT_FINAL_MESSAGE
        RECEIVE_CLIENT_FINAL_MESSAGE --client-final--> COMPLETE
        any state --bad message, unknown user, wrong proof--> FAILED

    Args:
        mechanism: SHA-256 or SHA-512.
        credentials: looks a user's credential up (None: unknown user).
        nonce: the server's nonce part (random by default; tests pass RFC 7677's).
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: Callable[[str, ScramMechanism], ScramCredential | None],
        nonce: Callable[[], str] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.mechanism_name = mechanism.mechanism_name
        self._credentials = credentials
        self._nonce = nonce or (lambda: secrets.token_urlsafe(24))
        self._state = "RECEIVE_CLIENT_FIRST_MESSAGE"
        self._username: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._nonce_value = ""
        self._server_nonce = ""

    @property
    def is_complete(self) -> bool:
        return self._state == "COMPLETE"

    @property
    def authorization_id(self) -> str:
        """The authenticated user.

        Raises:
            RuntimeError: the exchange is not complete.
        """
        if self._state != "COMPLETE" or self._username is None:
            raise RuntimeError("authentication exchange has not completed")
        return self._username

    def evaluate_response(self, response: bytes) -> bytes:
        """The server's next message for the client's.

        Raises:
            SaslAuthenticationFailed: unknown user, or an authorization id other than the user
                (Kafka's messages, shown to the client).
            SaslError: a malformed message or a wrong proof (the client is told only that the
                credentials were invalid).
        """
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            self._state = "FAILED"
            raise SaslError("SCRAM message is not UTF-8") from None
        try:
            if self._state == "RECEIVE_CLIENT_FIRST_MESSAGE":
                return self._client_first(text)
            if self._state == "RECEIVE_CLIENT_FINAL_MESSAGE":
                return self._client_final(text)
        except (SaslError, SaslAuthenticationFailed):
            self._state = "FAILED"
            raise
        self._state = "FAILED"
        raise SaslError(f"unexpected SCRAM message in state {self._state}")

    def _client_first(self, text: str) -> bytes:
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise SaslError("invalid SCRAM client-first message")
        cbind, authzid, bare = parts
        if cbind not in ("n", "y"):
            raise SaslError("channel binding is not supported")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise SaslError("invalid SCRAM client-first message")
        if any(k == "m" for k, _ in attrs):
            raise SaslError("mandatory SCRAM extensions are not supported")
        username = _decode_saslname(attrs[0][1])
        if authzid and (not authzid.startswith("a=") or _decode_saslname(authzid[2:]) != username):
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        credential = self._credentials(username, self.mechanism)
        if credential is None:
            raise SaslAuthenticationFailed("Authentication failed: Invalid user credentials")
        self._username = username
        self._credential = credential
        self._gs2_header = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._server_nonce = self._nonce()
        self._nonce_value = attrs[1][1] + self._server_nonce
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce_value},s={salt},i={credential.iterations}"
        self._state = "RECEIVE_CLIENT_FINAL_MESSAGE"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        attrs = _attributes(text)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise SaslError("invalid SCRAM client-final message")
        expected_cbind = base64.b64encode(self._gs2_header.encode()).decode()
        if attrs[0][1] != expected_cbind:
            raise SaslError("invalid channel binding")
        nonce = attrs[1][1]
        # librdkafka before 2.6.1 (Debian's kcat: 2.0.2) sends the client nonce twice (its
        # own, then the server's, which starts with it; librdkafka#4895). Kafka 3.8.1-3.9
        # accept it (apache/kafka 0a00456: the nonce must end with the server's); so do we,
        # in that exact form only. The proof is still checked over the message as sent.
        client_nonce = self._nonce_value[: len(self._nonce_value) - len(self._server_nonce)]
        if nonce != self._nonce_value and nonce != client_nonce + self._nonce_value:
            raise SaslError("invalid nonce")
        try:
            proof = base64.b64decode(attrs[-1][1], validate=True)
        except ValueError:
            raise SaslError("invalid client proof encoding") from None
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        assert cred is not None
        m = self.mechanism
        client_signature = m.hmac(cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise SaslError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(m.hash(client_key), cred.stored_key):
            raise SaslError("Invalid client credentials")
        server_signature = m.hmac(cred.server_key, auth_message)
        self._state = "COMPLETE"
        return b"v=" + base64.b64encode(server_signature)
