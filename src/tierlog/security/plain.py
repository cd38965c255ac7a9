"""SASL/PLAIN (RFC 4616) on the server, with users from JAAS (Kafka's ``PlainSaslServer``
and ``PlainServerCallbackHandler``).

The client sends one message, ``[authzid] NUL authcid NUL password`` (UTF-8); the server
answers with an empty token. Users come from the listener's
``listener.name.<l>.plain.sasl.jaas.config``: each ``user_<name>="<password>"`` option of
``org.apache.kafka.common.security.plain.PlainLoginModule`` is one user.

PLAIN sends the password itself: use it over SASL_SSL only, outside tests.

Not thread-safe (one per connection); not idempotent: one message, then complete.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from types import MappingProxyType

from tierlog.errors import SaslAuthenticationFailed
from tierlog.security.jaas_config import parse_jaas_config

__all__ = ["PLAIN_LOGIN_MODULE", "PlainSaslServer", "plain_users"]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_USER_PREFIX = "user_"


def plain_users(jaas_config: str) -> Mapping[str, str]:
    """User → password from the ``user_<name>`` options of a PlainLoginModule entry.

    Raises:
        JaasConfigError: the text does not parse, or holds no PlainLoginModule entry.
    """
    from tierlog.security.jaas_config import JaasConfigError

    entries = parse_jaas_config(jaas_config)
    users: dict[str, str] = {}
    found = False
    for e in entries:
        if e.login_module != PLAIN_LOGIN_MODULE:
            continue
        found = True
        for k, v in e.options.items():
            if k.startswith(_USER_PREFIX) and len(k) > len(_USER_PREFIX):
                users[k[len(_USER_PREFIX) :]] = v
    if not found:
        raise JaasConfigError(f"no {PLAIN_LOGIN_MODULE} entry")
    return MappingProxyType(users)


class PlainSaslServer:
    """The server side of one PLAIN exchange.

    Args:
        users: user → password (:func:`plain_users`).
    """

    mechanism_name = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._complete = False
        self._authorization_id: str | None = None

    @property
    def is_complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        """The authenticated user.

        Raises:
            RuntimeError: the exchange is not complete.
        """
        if self._authorization_id is None:
            raise RuntimeError("authentication exchange has not completed")
        return self._authorization_id

    def evaluate_response(self, response: bytes) -> bytes:
        """Check the client's one message; an empty token when the user is authenticated.

        Raises:
            SaslAuthenticationFailed: malformed message, unknown user or wrong password
                (Kafka's messages; the client sees them).
        """
        if self._complete:
            raise SaslAuthenticationFailed("Authentication failed: already complete")
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: not valid UTF-8") from None
        tokens = text.split("\u0000")
        if len(tokens) != 3:
            raise SaslAuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
            )
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Compare even for an unknown user, so the time taken does not tell users apart.
        ok = hmac.compare_digest(
            password.encode("utf-8"), (expected if expected is not None else "").encode("utf-8")
        )
        if expected is None or not ok:
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self._authorization_id = username
        self._complete = True
        return b""
