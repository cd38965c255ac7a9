"""Build kio response entities of any version from plain Python values.

Handlers describe a response once, as nested dicts with plain values (ints for error codes,
milliseconds for durations and timestamps, lists for arrays), and :func:`build` turns that into
the frozen kio dataclass of the version the client asked for:

* keys the version does not have are dropped (``log_start_offset`` for Produce v3 ...);
* fields the version has but the dict does not are set to their schema default, or to the
  type's zero value (0, "", (), None for nullable fields);
* an array given as a tuple of the version's entities is taken as is (handlers cache them);
* ``error_code`` ints become :class:`kio.schema.errors.ErrorCode`, ``timedelta_i32/i64`` ints are
  milliseconds, ``datetime_i64`` ints are epoch milliseconds (-1 is null), UUIDs pass through.

The per-class plan (field names, converters, defaults) is computed once and cached, so the
cost per response is one dict lookup and one constructor call per entity.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, TypeVar, Union, cast, get_args, get_origin

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

E = TypeVar("E")

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ERROR_CODES: dict[int, ErrorCode] = {int(c.value): c for c in ErrorCode}


def error_code(code: int) -> ErrorCode:
    """The kio ErrorCode of a wire code (UNKNOWN_SERVER_ERROR for codes kio does not know)."""
    return _ERROR_CODES.get(code, ErrorCode.unknown_server_error)


def _to_timedelta(v: Any) -> Any:
    if isinstance(v, datetime.timedelta):
        return v
    return datetime.timedelta(milliseconds=int(v))


def _to_datetime(v: Any) -> Any:
    if v is None or isinstance(v, datetime.datetime):
        return v
    if v < 0:
        return None
    return _EPOCH + datetime.timedelta(milliseconds=int(v))


def _to_datetime_required(v: Any) -> Any:
    if isinstance(v, datetime.datetime):
        return v
    return _EPOCH + datetime.timedelta(milliseconds=max(0, int(v)))


def _to_error(v: Any) -> Any:
    if isinstance(v, ErrorCode):
        return v
    return _ERROR_CODES.get(int(v), ErrorCode.unknown_server_error)


def _identity(v: Any) -> Any:
    return v


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (UnionType, Union):
        args = [a for a in get_args(tp) if a is not NoneType]
        return args[0], True
    return tp, False


def _zero_for(kafka_type: str | None, optional: bool) -> Any:
    if optional:
        return None
    if kafka_type in (None, "records", "bytes"):
        return b"" if kafka_type else None
    if kafka_type == "string":
        return ""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return uuid_zero
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return _EPOCH
    if kafka_type == "float64":
        return 0.0
    return 0


_Plan = tuple[tuple[str, Callable[[Any], Any], bool, Any], ...]


def _primitive_converter(kafka_type: str, optional: bool) -> Callable[[Any], Any]:
    if kafka_type == "error_code":
        return _to_error
    if kafka_type.startswith("timedelta"):
        return _to_timedelta
    if kafka_type == "datetime_i64":
        return _to_datetime if optional else _to_datetime_required
    return _identity


_PLANS: dict[type[Any], _Plan] = {}


def _plan(cls: type[Any]) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = tuple(_field_plan(f) for f in fields(cls))
    return plan


def _field_plan(f: Field[Any]) -> tuple[str, Callable[[Any], Any], bool, Any]:
    tp, optional = _strip_optional(f.type)
    kafka_type = f.metadata.get("kafka_type")
    has_default = f.default is not MISSING or f.default_factory is not MISSING
    if f.default is not MISSING:
        default: Any = f.default
    elif f.default_factory is not MISSING:
        default = f.default_factory()
    else:
        default = MISSING
    conv: Callable[[Any], Any]
    if get_origin(tp) is tuple:
        inner = get_args(tp)[0]
        if is_dataclass(inner):
            entity = inner

            def conv(v: Any, entity: Any = entity) -> Any:
                if v is None:
                    return None
                if isinstance(v, tuple) and v and type(v[0]) is entity:
                    return v  # built already (a cached array of entities)
                return tuple([build(entity, x) for x in v])

        else:
            item = _primitive_converter(kafka_type or "", False)

            def conv(v: Any, item: Callable[[Any], Any] = item) -> Any:
                if v is None:
                    return None
                return tuple([item(x) for x in v])

        zero: Any = None if optional else ()
    elif is_dataclass(tp):
        entity = tp

        def conv(v: Any, entity: Any = entity) -> Any:
            if v is None or is_dataclass(v):
                return v
            return build(entity, v)

        zero = None if optional or has_default else build(cast(type[Any], entity), {})
    else:
        conv = _primitive_converter(kafka_type or "", optional)
        zero = _zero_for(kafka_type, optional)
    return (f.name, conv, has_default, default if has_default else zero)


def build(cls: type[E], value: Mapping[str, Any]) -> E:
    """The ``cls`` entity for ``value``; see the module docstring for the conversions."""
    kwargs: dict[str, Any] = {}
    for name, conv, _has_default, default in _plan(cls):
        v = value.get(name, MISSING)
        if v is MISSING:
            kwargs[name] = default
        else:
            kwargs[name] = conv(v)
    return cls(**kwargs)


def field_names(cls: type[Any]) -> frozenset[str]:
    """The field names ``cls`` has (to check whether a version carries a field)."""
    return frozenset(p[0] for p in _plan(cls))


def as_tuple(seq: Sequence[Any] | None) -> tuple[Any, ...]:
    return tuple(seq) if seq is not None else ()


def topic_uuid(value: uuid.UUID | None) -> uuid.UUID:
    return value if value is not None else uuid_zero


def request_timeout_ms(req: Any) -> int:
    """A request's ``timeout`` field in milliseconds (kio gives a timedelta; 30 s without one)."""
    t = getattr(req, "timeout", 30_000)
    return t if isinstance(t, int) else int(t.total_seconds() * 1000)
