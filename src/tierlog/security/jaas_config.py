"""Kafka's ``sasl.jaas.config`` syntax (Kafka's ``JaasConfig``, a subset of Java's JAAS
configuration file grammar)::

    config  := entry+                       (a broker takes exactly one per mechanism)
    entry   := login-module-class flag option* ";"
    flag    := required | requisite | sufficient | optional   (case-insensitive)
    option  := name "=" value
    value   := a quoted string "..." (backslash escapes the next character) | a bare token

Tokens are separated by whitespace; ``//`` and ``/* */`` comments are allowed between them, as
Java's ``StreamTokenizer`` allows. A quoted value may contain ``;``, ``=``, spaces and newlines.
For example::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice secret; with \\"quotes\\"";

Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["AppConfigurationEntry", "JaasConfigError", "parse_jaas_config"]

_FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasConfigError(ValueError):
    """``sasl.jaas.config`` does not parse (the message says where)."""


@dataclass(frozen=True, slots=True)
class AppConfigurationEntry:
    """One login module: its class name, control flag (lowercase) and options."""

    login_module: str
    control_flag: str
    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def _tokens(text: str) -> list[tuple[str, bool, int]]:
    """(token, was quoted, position): words, quoted strings, ``=`` and ``;``."""
    out: list[tuple[str, bool, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            nl = text.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JaasConfigError(f"unterminated comment at position {i}")
            i = end + 2
        elif c in "=;":
            out.append((c, False, i))
            i += 1
        elif c == '"':
            start, i = i, i + 1
            buf: list[str] = []
            while True:
                if i >= n:
                    raise JaasConfigError(f"unterminated quoted value at position {start}")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                else:
                    buf.append(c)
                    i += 1
            out.append(("".join(buf), True, start))
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                if text.startswith(("//", "/*"), i):
                    break
                i += 1
            out.append((text[start:i], False, start))
    return out


def parse_jaas_config(text: str) -> tuple[AppConfigurationEntry, ...]:
    """The login modules of a ``sasl.jaas.config`` value.

    Raises:
        JaasConfigError: empty, a missing or unknown control flag, an option without ``=``
            or a value, a missing ``;``. Messages never quote option values (they hold
            passwords).
    """
    toks = _tokens(text)
    entries: list[AppConfigurationEntry] = []
    i = 0
    while i < len(toks):
        module, quoted, pos = toks[i]
        if quoted or module in ("=", ";"):
            raise JaasConfigError(f"expected a login module class name at position {pos}")
        if i + 1 >= len(toks):
            raise JaasConfigError(f"login module {module}: the control flag is missing")
        flag, quoted, pos = toks[i + 1]
        if quoted or flag.lower() not in _FLAGS:
            raise JaasConfigError(
                f"login module {module}: invalid control flag at position {pos}; expected "
                f"one of {', '.join(_FLAGS)}"
            )
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(toks):
                raise JaasConfigError(f"login module {module}: the entry must end with ';'")
            name, quoted, pos = toks[i]
            if name == ";" and not quoted:
                i += 1
                break
            if quoted or name == "=":
                raise JaasConfigError(f"login module {module}: expected an option name at {pos}")
            eq, eq_quoted, eq_pos = toks[i + 1] if i + 1 < len(toks) else ("", False, -1)
            if eq != "=" or eq_quoted:
                raise JaasConfigError(
                    f"login module {module}: expected '=' after option {name} at {eq_pos}"
                )
            if i + 2 >= len(toks):
                raise JaasConfigError(f"login module {module}: option {name} has no value")
            value, value_quoted, _ = toks[i + 2]
            if not value_quoted and value in ("=", ";"):
                raise JaasConfigError(f"login module {module}: option {name} has no value")
            options[name] = value
            i += 3
        entries.append(AppConfigurationEntry(module, flag.lower(), MappingProxyType(options)))
    if not entries:
        raise JaasConfigError("no login module")
    return tuple(entries)
