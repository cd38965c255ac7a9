"""Kafka's sasl.jaas.config syntax, and PLAIN's users taken from it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.errors import SaslAuthenticationFailed
from tierlog.security.jaas_config import JaasConfigError, parse_jaas_config
from tierlog.security.plain import PlainSaslServer, plain_users

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_kafka_documentation_example() -> None:
    (e,) = parse_jaas_config(
        f"{PLAIN} required \n"
        '    username="admin"\n'
        '    password="admin-secret"\n'
        '    user_admin="admin-secret"\n'
        '    user_alice="alice-secret";'
    )
    assert e.login_module == PLAIN and e.control_flag == "required"
    assert dict(e.options) == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": "alice-secret",
    }


def test_quotes_escapes_comments_bare_values_and_several_entries() -> None:
    entries = parse_jaas_config(
        "// leading comment\n"
        f'{PLAIN} REQUIRED user_a="semi; colon = and \\"quotes\\" \\\\ back" /* c */ debug=true;'
        " org.example.Other optional;"
    )
    assert [e.login_module for e in entries] == [PLAIN, "org.example.Other"]
    assert entries[0].control_flag == "required" and entries[1].control_flag == "optional"
    assert entries[0].options == {"user_a": 'semi; colon = and "quotes" \\ back', "debug": "true"}
    assert dict(entries[1].options) == {}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "no login module"),
        (f"{PLAIN}", "control flag is missing"),
        (f"{PLAIN} mandatory;", "invalid control flag"),
        (f'{PLAIN} required user_a="x"', "must end with ';'"),
        (f"{PLAIN} required user_a;", "expected '='"),
        (f"{PLAIN} required user_a=;", "has no value"),
        (f'{PLAIN} required user_a="unterminated;', "unterminated quoted value"),
        (f"{PLAIN} required /* open", "unterminated comment"),
        ('"quoted" required;', "login module class name"),
    ],
)
def test_errors(text: str, needle: str) -> None:
    with pytest.raises(JaasConfigError, match=needle):
        parse_jaas_config(text)


def test_errors_never_quote_values() -> None:
    with pytest.raises(JaasConfigError) as e:
        parse_jaas_config(f'{PLAIN} required user_a="hunter2" oops')
    assert "hunter2" not in str(e.value)


def _quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


option_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,15}", fullmatch=True)


@given(st.dictionaries(option_names, st.text(max_size=40), max_size=8))
def test_any_quoted_values_round_trip(options: dict[str, str]) -> None:
    text = f"{PLAIN} required " + " ".join(f"{k}={_quote(v)}" for k, v in options.items()) + ";"
    (e,) = parse_jaas_config(text)
    assert dict(e.options) == options


def test_plain_users_and_the_plain_exchange() -> None:
    users = plain_users(f'{PLAIN} required username="a" password="b" user_alice="pw" user_="x";')
    assert dict(users) == {"alice": "pw"}
    with pytest.raises(JaasConfigError, match=r"no .*PlainLoginModule"):
        plain_users("org.example.Other required;")

    s = PlainSaslServer(users)
    assert s.evaluate_response(b"\0alice\0pw") == b""
    assert s.is_complete and s.authorization_id == "alice"
    assert PlainSaslServer(users).evaluate_response(b"alice\0alice\0pw") == b""


@pytest.mark.parametrize(
    ("message", "needle"),
    [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0bob\0pw", "Authentication failed: Invalid username or password"),
        (b"\0\0pw", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"alice\0pw", "expected 3 tokens, got 2"),
        (b"admin\0alice\0pw", "authorization id that is different from username"),
        (b"\0al\xffice\0pw", "not valid UTF-8"),
    ],
)
def test_plain_failures_carry_kafkas_messages(message: bytes, needle: str) -> None:
    s = PlainSaslServer({"alice": "pw"})
    with pytest.raises(SaslAuthenticationFailed, match=needle):
        s.evaluate_response(message)
    assert not s.is_complete
