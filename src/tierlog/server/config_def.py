"""One broker config key: its definition, parsing and formatting (Kafka's ``ConfigDef``).

:class:`BrokerConfigDef` is a row of the broker's config table; :func:`define` and
:func:`ignored` build rows, :func:`at_least` and :func:`between` are the common validators,
:func:`parse_config_value` turns the raw string of a ``server.properties`` line into the typed
value (Kafka trims every value first) and :func:`format_config_value` turns it back for
DescribeConfigs. The tables themselves live beside what they configure:
the per-area modules of :mod:`tierlog.server.config` (broker, logs, groups, tiered storage)
and
:mod:`tierlog.security.security_config` (listeners' TLS and SASL).

Pure functions and frozen values; thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierlog.errors import ConfigError
from tierlog.log.log_config import INT_MAX, LONG_MAX, format_value, parse_value

__all__ = [
    "SHORT_MAX",
    "BrokerConfigDef",
    "Validator",
    "at_least",
    "between",
    "define",
    "format_config_value",
    "ignored",
    "one_of",
    "parse_config_value",
]

SHORT_MAX = 2**15 - 1

#: A check of a typed value: None when valid, else why not.
Validator = Callable[[Any], str | None]


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    """One broker config: Kafka's name, type, default (typed; None = no value) and doc.

    ``used`` is False for keys accepted so that Kafka's own ``server.properties`` files load,
    but which change nothing in tierlog (single node, no transactions, one event loop).
    ``topic_config`` names the topic config this key is the broker-level default of.
    """

    name: str
    type: str  # "int" | "long" | "short" | "double" | "boolean" | "string" | "list" | "password"
    default: Any
    doc: str
    validator: Validator | None = None
    used: bool = True
    sensitive: bool = False
    topic_config: str | None = None


def at_least(n: int) -> Validator:
    return lambda v: None if v is None or v >= n else f"must be at least {n}"


def between(lo: int, hi: int) -> Validator:
    return lambda v: None if v is None or lo <= v <= hi else f"must be between {lo} and {hi}"


def one_of(*choices: str, case_sensitive: bool = False) -> Validator:
    """Every item (of a list) or the value (of a string) must be one of ``choices``."""

    def check(v: Any) -> str | None:
        if v is None:
            return None
        items = v if isinstance(v, tuple) else (v,)

        def norm(s: str) -> str:
            return s if case_sensitive else s.upper()

        allowed = {norm(c) for c in choices}
        bad = [i for i in items if norm(i) not in allowed]
        return f"{', '.join(bad)} is not one of {', '.join(choices)}" if bad else None

    return check


def define(
    name: str, type_: str, default: Any, check: Validator | None, doc: str
) -> BrokerConfigDef:
    """A key tierlog uses."""
    return BrokerConfigDef(name, type_, default, doc, check)


def ignored(
    name: str, type_: str, default: Any, check: Validator | None, why: str
) -> BrokerConfigDef:
    """A key accepted so that Kafka's own server.properties files load; it changes nothing."""
    doc = f"Accepted for compatibility with Kafka's server.properties; ignored: {why}."
    return BrokerConfigDef(name, type_, default, doc, check, used=False)


_TYPE_LIMITS = {"short": SHORT_MAX, "int": INT_MAX, "long": LONG_MAX}


def parse_config_value(d: BrokerConfigDef, raw: str, key: str | None = None) -> Any:
    """Typed value of ``raw`` for ``d``; Kafka trims every value first.

    ``key`` is the name errors give (a listener-prefixed key validated by its base
    definition); ``d.name`` by default.

    Raises:
        ConfigError: the value does not parse or validate.
    """
    key = key or d.name
    if d.topic_config is not None:
        try:
            return parse_value(d.topic_config, raw)
        except ConfigError as e:
            reason = str(e).split(": ", 1)[-1]
            raise ConfigError(key, reason) from None
    s = raw.strip()
    value: Any
    try:
        if d.type in _TYPE_LIMITS:
            if not re.fullmatch(r"[+-]?[0-9]+", s):
                raise ValueError(f"expected an integer ({d.type})")
            value = int(s)
            limit = _TYPE_LIMITS[d.type]
            if not -limit - 1 <= value <= limit:
                raise ValueError(f"out of range for {d.type}")
        elif d.type == "double":
            value = float(s)
        elif d.type == "boolean":
            if s.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            value = s.lower() == "true"
        elif d.type == "list":
            value = tuple(p.strip() for p in s.split(",") if p.strip())
        else:
            value = s
    except ValueError as e:
        raise ConfigError(key, f"invalid {d.type} value {raw!r}: {e}") from None
    if d.validator is not None and (msg := d.validator(value)) is not None:
        shown = "[hidden]" if d.type == "password" else repr(raw)
        raise ConfigError(key, f"invalid value {shown}: {msg}")
    return value


def format_config_value(d: BrokerConfigDef, value: Any) -> str | None:
    """The DescribeConfigs string of a typed value (None stays None)."""
    if value is None:
        return None
    if d.topic_config is not None:
        return format_value(d.topic_config, value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)
