"""The per-connection SASL state machine: every allowed and forbidden transition, directly."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tierlog.security.plain import PlainSaslServer
from tierlog.security.principal import KafkaPrincipal
from tierlog.security.sasl_server import PASS, Close, Respond, SaslServerAuthenticator, SaslState

USERS = {"alice": "pw", "bob": "pw2"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _auth(**kw: Any) -> tuple[SaslServerAuthenticator, Clock]:
    clock = Clock()
    a = SaslServerAuthenticator(
        ("PLAIN", "SCRAM-SHA-256"),
        lambda m: PlainSaslServer(USERS),
        clock=clock,
        **kw,
    )
    return a, clock


def _handshake(a: SaslServerAuthenticator, mechanism: str = "PLAIN") -> Any:
    return a.on_request(17, 1, load_request_schema(17, 1)(mechanism=mechanism))


def _authenticate(a: SaslServerAuthenticator, token: bytes, version: int = 2) -> Any:
    return a.on_request(36, version, load_request_schema(36, version)(auth_bytes=token))


def _login(a: SaslServerAuthenticator, user: str = "alice", pw: str = "pw") -> Respond:
    assert isinstance(_handshake(a), Respond)
    d = _authenticate(a, f"\0{user}\0{pw}".encode())
    assert isinstance(d, Respond) and not d.close
    return d


def test_api_versions_then_handshake_then_authenticate() -> None:
    a, _ = _auth()
    assert a.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
    assert a.on_request(18, 3, None) is PASS
    d = _handshake(a)
    assert isinstance(d, Respond) and not d.close and d.delay_ms == 0
    assert d.response.error_code == ErrorCode.none
    assert d.response.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert a.state is SaslState.AUTHENTICATE and not a.authenticated
    d = _authenticate(a, b"\0alice\0pw")
    assert isinstance(d, Respond) and d.response.error_code == ErrorCode.none
    assert d.response.session_lifetime == datetime.timedelta(0)  # no reauth configured
    assert a.state is SaslState.COMPLETE and a.principal == KafkaPrincipal("User", "alice")
    assert a.on_request(3, 12, None) is PASS  # anything goes now
    assert a.on_request(0, 9, None) is PASS


@pytest.mark.parametrize("api_key", [0, 1, 3, 19, 50, 51])
def test_any_other_request_before_authentication_closes(api_key: int) -> None:
    a, _ = _auth()
    d = a.on_request(api_key, 0, None)
    assert isinstance(d, Close) and "during SASL handshake" in d.reason
    assert a.state is SaslState.FAILED
    a, _ = _auth()
    _handshake(a)
    d = a.on_request(api_key, 0, None)
    assert isinstance(d, Close) and "during SASL authentication" in d.reason


def test_api_versions_during_authentication_closes() -> None:
    a, _ = _auth()
    _handshake(a)
    assert isinstance(a.on_request(18, 3, None), Close)


def test_unsupported_mechanism_is_answered_late_then_closed() -> None:
    a, _ = _auth(failed_delay_ms=250)
    d = _handshake(a, "GSSAPI")
    assert isinstance(d, Respond) and d.close and d.delay_ms == 250
    assert d.response.error_code == ErrorCode.unsupported_sasl_mechanism
    assert d.response.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert isinstance(a.on_request(18, 3, None), Close)  # FAILED stays failed


def test_handshake_v0_is_refused_with_the_way_out() -> None:
    """Advertised from v0 (librdkafka 2.0 looks for it) but v0's raw tokens are not served:
    a client that really sends v0 learns why, and the connection closes."""
    a, _ = _auth(failed_delay_ms=10)
    d = a.on_request(17, 0, load_request_schema(17, 0)(mechanism="PLAIN"))
    assert isinstance(d, Respond) and d.close
    assert d.response.error_code == ErrorCode.unsupported_version
    assert "use SaslHandshake v1 and SaslAuthenticate" in d.reason
    assert a.state is SaslState.FAILED


def test_wrong_password_is_answered_late_then_closed() -> None:
    a, _ = _auth(failed_delay_ms=100)
    _handshake(a)
    d = _authenticate(a, b"\0alice\0nope")
    assert isinstance(d, Respond) and d.close and d.delay_ms == 100
    assert d.response.error_code == ErrorCode.sasl_authentication_failed
    assert d.response.error_message == "Authentication failed: Invalid username or password"
    assert a.state is SaslState.FAILED and not a.authenticated


def test_authenticate_before_handshake_and_after_success_are_illegal() -> None:
    a, _ = _auth()
    d = _authenticate(a, b"\0alice\0pw")
    assert isinstance(d, Respond) and d.close
    assert d.response.error_code == ErrorCode.illegal_sasl_state
    a, _ = _auth()
    _login(a)
    d = _authenticate(a, b"\0alice\0pw")
    assert isinstance(d, Respond) and d.close
    assert d.response.error_code == ErrorCode.illegal_sasl_state
    assert "after successful authentication" in d.response.error_message


def test_second_handshake_before_authenticating_is_illegal() -> None:
    a, _ = _auth()
    _handshake(a)
    d = _handshake(a)
    assert isinstance(d, Respond) and d.close
    assert d.response.error_code == ErrorCode.illegal_sasl_state


def test_v0_authenticate_response_has_no_session_lifetime() -> None:
    a, _ = _auth(reauth_ms=1000)
    _handshake(a)
    d = _authenticate(a, b"\0alice\0pw", version=0)
    assert isinstance(d, Respond) and not hasattr(d.response, "session_lifetime")


def test_session_expires_and_reauthentication_renews_it() -> None:
    a, clock = _auth(reauth_ms=1000)
    d = _login(a)
    assert d.response.session_lifetime == datetime.timedelta(milliseconds=1000)
    clock.now += 0.9
    assert a.on_request(3, 12, None) is PASS
    # KIP-368: the client re-authenticates on the open connection, same mechanism and user
    d = _handshake(a)
    assert isinstance(d, Respond) and not d.close
    assert a.state is SaslState.REAUTH_AUTHENTICATE
    assert a.on_request(3, 12, None) is PASS  # served meanwhile: the old session still runs
    d = _authenticate(a, b"\0alice\0pw")
    assert isinstance(d, Respond) and not d.close and a.completed == 2
    clock.now += 0.9  # 1.8 s after the first login, 0.9 s after the second
    assert a.on_request(3, 12, None) is PASS
    clock.now += 0.2
    d = a.on_request(3, 12, None)
    assert isinstance(d, Close) and "expired" in d.reason


def test_reauthentication_may_not_change_mechanism_or_principal() -> None:
    a, _ = _auth(reauth_ms=1000)
    _login(a)
    d = _handshake(a, "SCRAM-SHA-256")
    assert isinstance(d, Respond) and d.close
    assert d.response.error_code == ErrorCode.illegal_sasl_state
    a, _ = _auth(reauth_ms=1000)
    _login(a)
    _handshake(a)
    d = _authenticate(a, b"\0bob\0pw2")
    assert isinstance(d, Respond) and d.close
    assert "Cannot change principals during re-authentication" in d.response.error_message
