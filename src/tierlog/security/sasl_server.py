"""The SASL side of one connection on a SASL_PLAINTEXT or SASL_SSL listener, sans-IO (Kafka's
``SaslServerAuthenticator``).

Each request event the codec parses goes through :meth:`SaslServerAuthenticator.on_request`
before any handler; the answer is one of:

* :data:`PASS`: hand the request to the handlers (ApiVersions before authentication, and
  everything once authenticated);
* :class:`Respond`: answer it here (SaslHandshake, SaslAuthenticate), after ``delay_ms``
  (a failed authentication), then close when ``close`` is set;
* :class:`Close`: close the connection now (any other request before authentication, or
  after the session expired: Kafka's behaviour).

States (Kafka's ``SaslState`` names)::

    HANDSHAKE_OR_VERSIONS_REQUEST --ApiVersions--> (same)
    HANDSHAKE_OR_VERSIONS_REQUEST --SaslHandshake, mechanism enabled--> AUTHENTICATE
    AUTHENTICATE --SaslAuthenticate, more to exchange--> AUTHENTICATE
    AUTHENTICATE --SaslAuthenticate, exchange complete--> COMPLETE
    COMPLETE --SaslHandshake, same mechanism (KIP-368)--> REAUTH_AUTHENTICATE
    REAUTH_AUTHENTICATE --SaslAuthenticate, complete, same principal--> COMPLETE
    any --unsupported mechanism, failed authentication, request out of turn--> FAILED

KIP-368: with ``connections.max.reauth.ms`` > 0 a successful SaslAuthenticate (v1+) tells
the client its session lifetime; the client re-authenticates on the open connection before
it ends. A request other than SaslHandshake/SaslAuthenticate after the session ended closes
the connection. During re-authentication the connection keeps its principal and serves
requests until the old session ends.

Failures are answered with Kafka's codes and messages (SASL_AUTHENTICATION_FAILED (58),
UNSUPPORTED_SASL_MECHANISM (33), ILLEGAL_SASL_STATE (34)) after
``connection.failed.authentication.delay.ms``, then the connection closes. The delay is the
caller's to apply (a timer, not a sleep: other connections go on).

Not thread-safe: one per connection, on the event loop.
"""

from __future__ import annotations

import datetime
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from tierlog.errors import SaslAuthenticationFailed, SaslError
from tierlog.security.principal import KafkaPrincipal

__all__ = [
    "PASS",
    "Close",
    "Respond",
    "SaslServer",
    "SaslServerAuthenticator",
    "SaslState",
]

API_VERSIONS: Final = 18
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36


class SaslServer(Protocol):
    """One mechanism's server side (PLAIN, SCRAM): tokens in, tokens out."""

    mechanism_name: str

    @property
    def is_complete(self) -> bool: ...
    @property
    def authorization_id(self) -> str: ...
    def evaluate_response(self, response: bytes) -> bytes: ...


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = "HANDSHAKE_OR_VERSIONS_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    REAUTH_AUTHENTICATE = "REAUTH_AUTHENTICATE"
    FAILED = "FAILED"


class _Pass:
    def __repr__(self) -> str:
        return "PASS"


#: The request goes to the handlers.
PASS: Final = _Pass()


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer the request with ``response`` after ``delay_ms``; then close if ``close``."""

    response: Any
    delay_ms: int = 0
    close: bool = False
    reason: str = ""  # why the connection closes (logged)


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection without an answer; ``reason`` is logged."""

    reason: str


Decision = _Pass | Respond | Close


def _api_name(api_key: int) -> str:
    from tierlog.protocol import api_name

    return api_name(api_key)


class SaslServerAuthenticator:
    """The SASL state of one connection.

    Args:
        mechanisms: the listener's enabled mechanisms, in order (the handshake lists them).
        new_server: builds a mechanism's server (a fresh one per exchange).
        reauth_ms: ``connections.max.reauth.ms`` (0: sessions do not expire).
        failed_delay_ms: ``connection.failed.authentication.delay.ms``.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        new_server: Callable[[str], SaslServer],
        *,
        reauth_ms: int = 0,
        failed_delay_ms: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mechanisms = mechanisms
        self._new_server = new_server
        self.reauth_ms = reauth_ms
        self.failed_delay_ms = failed_delay_ms
        self._clock = clock
        self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self._server: SaslServer | None = None
        self._session_end: float | None = None  # monotonic seconds; None: no expiry
        #: Successful authentications so far (1: authenticated, more: re-authenticated).
        self.completed = 0

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def session_expired(self) -> bool:
        return self._session_end is not None and self._clock() >= self._session_end

    def on_request(self, api_key: int, api_version: int, request: Any) -> Decision:
        """What to do with one request (see the module docstring)."""
        st = self.state
        if st is SaslState.FAILED:
            return Close("authentication failed")
        if api_key == SASL_HANDSHAKE:
            return self._handshake(api_version, request)
        if api_key == SASL_AUTHENTICATE:
            return self._authenticate(api_version, request)
        if st is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST and api_key == API_VERSIONS:
            return PASS
        if self.principal is None:
            self.state = SaslState.FAILED
            during = (
                "handshake" if st is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST else ("authentication")
            )
            return Close(
                f"Unexpected Kafka request of type {_api_name(api_key)} during SASL {during}."
            )
        if self.session_expired():
            self.state = SaslState.FAILED
            return Close(f"the SASL session of {self.principal} expired (re-authentication due)")
        return PASS

    # ----------------------------------------------------------------- handshake

    def _handshake(self, version: int, request: Any) -> Decision:
        mechanism = str(request.mechanism)
        if version == 0:
            # v0: raw SASL tokens would follow, unframed (before KIP-152)
            return self._fail_handshake(
                version,
                ErrorCode.unsupported_version,
                "SaslHandshake v0 (raw SASL tokens, before KIP-152) is not supported: "
                "use SaslHandshake v1 and SaslAuthenticate",
            )
        if self.state is SaslState.COMPLETE:
            if mechanism != self.mechanism:
                return self._fail_handshake(
                    version,
                    ErrorCode.illegal_sasl_state,
                    f"SASL mechanism {mechanism} requested by the client during "
                    f"re-authentication differs from the original mechanism {self.mechanism}",
                )
            self._server = self._new_server(mechanism)
            self.state = SaslState.REAUTH_AUTHENTICATE
            return Respond(self._handshake_response(version, ErrorCode.none))
        if self.state is not SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
            return self._fail_handshake(
                version,
                ErrorCode.illegal_sasl_state,
                f"SaslHandshake received in SASL state {self.state.value}",
            )
        if mechanism not in self.mechanisms:
            return self._fail_handshake(
                version,
                ErrorCode.unsupported_sasl_mechanism,
                f"Unsupported SASL mechanism {mechanism}",
            )
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = SaslState.AUTHENTICATE
        return Respond(self._handshake_response(version, ErrorCode.none))

    def _handshake_response(self, version: int, error: ErrorCode) -> Any:
        cls: type[Any] = load_response_schema(SASL_HANDSHAKE, version)
        return cls(error_code=error, mechanisms=tuple(self.mechanisms))

    def _fail_handshake(self, version: int, error: ErrorCode, reason: str) -> Respond:
        self.state = SaslState.FAILED
        return Respond(
            self._handshake_response(version, error),
            delay_ms=self.failed_delay_ms,
            close=True,
            reason=reason,
        )

    # ----------------------------------------------------------------- authenticate

    def _authenticate(self, version: int, request: Any) -> Decision:
        if self.state not in (SaslState.AUTHENTICATE, SaslState.REAUTH_AUTHENTICATE):
            if self.state is SaslState.COMPLETE:
                message = "SaslAuthenticate request received after successful authentication"
            else:
                message = f"Unexpected SaslAuthenticate request in SASL state {self.state.value}"
            return self._fail_authenticate(version, ErrorCode.illegal_sasl_state, message)
        server = self._server
        assert server is not None and self.mechanism is not None
        reauth = self.state is SaslState.REAUTH_AUTHENTICATE
        what = "re-authentication" if reauth else "authentication"
        try:
            token = server.evaluate_response(bytes(request.auth_bytes))
        except SaslAuthenticationFailed as e:
            return self._fail_authenticate(version, ErrorCode.sasl_authentication_failed, str(e))
        except SaslError:
            # Kafka does not tell the client why (it could reveal whether the user exists).
            return self._fail_authenticate(
                version,
                ErrorCode.sasl_authentication_failed,
                f"Authentication failed during {what} due to invalid credentials with SASL "
                f"mechanism {self.mechanism}",
            )
        lifetime_ms = 0
        if server.is_complete:
            principal = KafkaPrincipal("User", server.authorization_id)
            if reauth and principal != self.principal:
                return self._fail_authenticate(
                    version,
                    ErrorCode.sasl_authentication_failed,
                    f"Cannot change principals during re-authentication from {self.principal} "
                    f"to {principal}",
                )
            self.principal = principal
            self.completed += 1
            self.state = SaslState.COMPLETE
            self._server = None
            if self.reauth_ms > 0:
                lifetime_ms = self.reauth_ms
                self._session_end = self._clock() + self.reauth_ms / 1000
        return Respond(
            self._authenticate_response(version, ErrorCode.none, None, token, lifetime_ms)
        )

    def _authenticate_response(
        self, version: int, error: ErrorCode, message: str | None, token: bytes, lifetime_ms: int
    ) -> Any:
        cls: type[Any] = load_response_schema(SASL_AUTHENTICATE, version)
        if version == 0:
            return cls(error_code=error, error_message=message, auth_bytes=token)
        return cls(
            error_code=error,
            error_message=message,
            auth_bytes=token,
            session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
        )

    def _fail_authenticate(self, version: int, error: ErrorCode, message: str) -> Respond:
        self.state = SaslState.FAILED
        return Respond(
            self._authenticate_response(version, error, message, b"", 0),
            delay_ms=self.failed_delay_ms,
            close=True,
            reason=message,
        )
