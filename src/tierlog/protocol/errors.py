"""Error responses: the answer to any request when a whole request fails with one error.

Kafka gives every request class a ``getErrorResponse(Throwable)``; the shapes differ (a
top-level ``error_code``, one per topic, one per partition, one per group or resource). Here
one table says, per API, which response arrays mirror which request arrays, and one builder
does the rest for every version:

* every ``error_code`` field, at any depth, gets the error; every ``error_message`` field its
  message;
* arrays named in :data:`_MIRRORS` get one element per request element, copying the keys
  (topic name and id, partition index, group id, resource) so the client can match them;
* every other field keeps its schema default, or gets Kafka's "unknown" value (-1 for offsets,
  ids, epochs and ports, ``INT32_MIN`` for authorized operations) or the type's zero value.

The result is the kio response object of the request's version; send it with
:meth:`ServerConnection.send` like any other. Thread-safe, no state besides caches.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from typing import Any, Final, TypeVar

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from tierlog.errors import ApiError
from tierlog.protocol._events import RequestEvent
from tierlog.protocol.api_versions import ApiKey, api_versions_keys, response_class

__all__ = ["error_code_of", "error_response", "error_response_for"]

_T = TypeVar("_T")
_ITEM: Final = "$item"
"""In a mirror spec: the request array element itself (arrays of strings or ints)."""

# response field -> scalar request field to copy, or alternatives of
# (request array field, spec of one element); the first array the request has wins.
_Spec = Mapping[str, Any]
_PARTITIONED: Final[_Spec] = {
    "name": "name",
    "partitions": [("partitions", {"partition_index": "partition_index"})],
}
_RESOURCES: Final[_Spec] = {
    "resource_type": "resource_type",
    "resource_name": "resource_name",
}
_MIRRORS: Final[Mapping[int, _Spec]] = {
    ApiKey.PRODUCE: {
        "responses": [
            (
                "topic_data",
                {"name": "name", "partition_responses": [("partition_data", {"index": "index"})]},
            )
        ]
    },
    ApiKey.FETCH: {
        "responses": [
            (
                "topics",
                {
                    "topic": "topic",
                    "topic_id": "topic_id",
                    "partitions": [("partitions", {"partition_index": "partition"})],
                },
            )
        ]
    },
    ApiKey.LIST_OFFSETS: {"topics": [("topics", _PARTITIONED)]},
    ApiKey.METADATA: {"topics": [("topics", {"name": "name", "topic_id": "topic_id"})]},
    ApiKey.OFFSET_COMMIT: {"topics": [("topics", _PARTITIONED)]},
    ApiKey.OFFSET_FETCH: {
        "topics": [
            (
                "topics",
                {"name": "name", "partitions": [("partition_indexes", {"partition_index": _ITEM})]},
            )
        ],
        "groups": [
            (
                "groups",
                {
                    "group_id": "group_id",
                    "topics": [
                        (
                            "topics",
                            {
                                "name": "name",
                                "partitions": [("partition_indexes", {"partition_index": _ITEM})],
                            },
                        )
                    ],
                },
            )
        ],
    },
    ApiKey.FIND_COORDINATOR: {"coordinators": [("coordinator_keys", {"key": _ITEM})]},
    ApiKey.LEAVE_GROUP: {
        "members": [
            ("members", {"member_id": "member_id", "group_instance_id": "group_instance_id"})
        ]
    },
    ApiKey.DESCRIBE_GROUPS: {"groups": [("groups", {"group_id": _ITEM})]},
    ApiKey.CREATE_TOPICS: {"topics": [("topics", {"name": "name"})]},
    ApiKey.DELETE_TOPICS: {
        "responses": [
            ("topics", {"name": "name", "topic_id": "topic_id"}),
            ("topic_names", {"name": _ITEM}),
        ]
    },
    ApiKey.DELETE_RECORDS: {"topics": [("topics", _PARTITIONED)]},
    ApiKey.DESCRIBE_CONFIGS: {"results": [("resources", _RESOURCES)]},
    ApiKey.ALTER_CONFIGS: {"responses": [("resources", _RESOURCES)]},
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {"responses": [("resources", _RESOURCES)]},
    ApiKey.CREATE_PARTITIONS: {"results": [("topics", {"name": "name"})]},
    ApiKey.DELETE_GROUPS: {"results": [("groups_names", {"group_id": _ITEM})]},
    ApiKey.DESCRIBE_CLUSTER: {"endpoint_type": "endpoint_type"},
}

# Kafka's "unknown" values (INVALID_OFFSET, NO_PRODUCER_ID, UNKNOWN_GENERATION_ID, ...).
_UNKNOWN: Final[Mapping[str, int]] = {
    "base_offset": -1,
    "offset": -1,
    "timestamp": -1,
    "high_watermark": -1,
    "last_stable_offset": -1,
    "log_start_offset": -1,
    "low_watermark": -1,
    "committed_offset": -1,
    "committed_leader_epoch": -1,
    "leader_epoch": -1,
    "leader_id": -1,
    "preferred_read_replica": -1,
    "generation_id": -1,
    "producer_id": -1,
    "producer_epoch": -1,
    "node_id": -1,
    "port": -1,
    "controller_id": -1,
    "num_partitions": -1,
    "replication_factor": -1,
    "topic_authorized_operations": -(2**31),
    "authorized_operations": -(2**31),
    "cluster_authorized_operations": -(2**31),
}

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ZERO_MS: Final = datetime.timedelta(0)
_ERROR_CODES: Final[Mapping[int, ErrorCode]] = {int(c): c for c in ErrorCode}


def error_code_of(error: ApiError | type[ApiError] | int) -> ErrorCode:
    """kio's ErrorCode of an ApiError (class or instance) or wire code.

    Codes kio does not know become UNKNOWN_SERVER_ERROR.
    """
    code = error if isinstance(error, int) else error.error_code
    return _ERROR_CODES.get(code, ErrorCode.unknown_server_error)


def error_response(event: RequestEvent, error: ApiError | type[ApiError] | int) -> Any:
    """The response to ``event`` failing as a whole with ``error``.

    Args:
        event: a request event of this connection.
        error: an :class:`~tierlog.errors.ApiError` (instance: its message fills
            ``error_message`` fields), an ApiError class, or a wire error code.

    Returns:
        The kio response object of the request's version.

    Raises:
        KeyError: the event's (api key, version) is not advertised.
    """
    return error_response_for(event.api_key, event.api_version, event.request, error)


def error_response_for(
    api_key: int, api_version: int, request: Any, error: ApiError | type[ApiError] | int
) -> Any:
    """:func:`error_response` from the parts of an event (``request`` may be None).

    Raises:
        KeyError: (api_key, api_version) is not advertised.
    """
    cls = response_class(api_key, api_version)
    code = error_code_of(error)
    message = error.message if isinstance(error, ApiError) else None
    spec = _MIRRORS.get(api_key, {})
    values: dict[str, Any] = {}
    if api_key == ApiKey.API_VERSIONS:
        item_cls = _item_class(cls, "api_keys")
        values["api_keys"] = tuple(
            item_cls(api_key=k.api_key, min_version=k.min_version, max_version=k.max_version)
            for k in api_versions_keys()
        )
    return _mirror(cls, request, spec, code, message, values)


def _mirror(
    cls: type[Any],
    src: Any,
    spec: _Spec,
    code: ErrorCode,
    message: str | None,
    values: dict[str, Any] | None = None,
) -> Any:
    values = {} if values is None else values
    names = _field_names(cls)
    for name, how in spec.items():
        if name not in names or name in values:
            continue
        if isinstance(how, str):
            value = src if how == _ITEM else getattr(src, how, MISSING)
            # a null key (Metadata v10-11 topics named by id) cannot go into a non-null field:
            # leave it to the zero value
            if value is not MISSING and (value is not None or name in _nullable_fields(cls)):
                values[name] = value
            continue
        for src_field, sub in how:
            items = getattr(src, src_field, MISSING)
            if items is MISSING:
                continue
            item_cls = _item_class(cls, name)
            values[name] = tuple(_mirror(item_cls, x, sub, code, message) for x in items or ())
            break
    return _build(cls, values, code, message)


def _memo(fn: Callable[..., _T]) -> Callable[..., _T]:
    """functools.cache for class-keyed helpers (mypy rejects type[Any] as Hashable)."""
    return functools.cache(fn)


@_memo
def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


@_memo
def _nullable_fields(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls) if is_optional(f))


@_memo
def _item_class(cls: type[Any], name: str) -> type[Any]:
    for f in fields(cls):
        if f.name == name:
            fc = classify_field(f)
            if isinstance(fc, EntityTupleField | EntityField):
                return fc.type_
    raise KeyError(f"{cls.__qualname__}.{name} is not an entity array")  # pragma: no cover


_ERROR_CODE: Final = object()
_ERROR_MESSAGE: Final = object()
_ERROR_MESSAGE_OR_EMPTY: Final = object()


@_memo
def _plan(cls: type[Any]) -> tuple[tuple[str, Any], ...]:
    """(field name, value or marker) for every field without a default."""
    plan: list[tuple[str, Any]] = []
    for f in fields(cls):
        fc = classify_field(f)
        optional = is_optional(f)
        value: Any
        if isinstance(fc, PrimitiveField) and get_schema_field_type(f) == "error_code":
            value = _ERROR_CODE  # even where the schema has a default (OffsetFetch v2+)
        elif f.name == "error_message":
            value = _ERROR_MESSAGE if optional else _ERROR_MESSAGE_OR_EMPTY
        elif f.default is not MISSING:
            continue
        elif isinstance(fc, PrimitiveField):
            value = _zero(get_schema_field_type(f), optional, f.name)
        elif isinstance(fc, EntityField):
            value = None if optional else fc.type_  # a class: built per call (error codes)
        else:
            value = ()
        plan.append((f.name, value))
    return tuple(plan)


def _zero(kafka_type: str, optional: bool, name: str) -> Any:
    if kafka_type == "records":
        return b""
    if optional:
        return None
    if kafka_type in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        return _UNKNOWN.get(name, 0)
    return {
        "string": "",
        "bytes": b"",
        "bool": False,
        "float64": 0.0,
        "timedelta_i32": _ZERO_MS,
        "timedelta_i64": _ZERO_MS,
        "datetime_i64": _EPOCH,
        "uuid": None,
    }[kafka_type]


def _build(cls: type[Any], values: dict[str, Any], code: ErrorCode, message: str | None) -> Any:
    kwargs = dict(values)
    for name, value in _plan(cls):
        if name in kwargs:
            continue
        if value is _ERROR_CODE:
            kwargs[name] = code
        elif value is _ERROR_MESSAGE:
            kwargs[name] = message
        elif value is _ERROR_MESSAGE_OR_EMPTY:
            kwargs[name] = message or ""
        elif isinstance(value, type):
            kwargs[name] = _build(value, {}, code, message)
        else:
            kwargs[name] = value
    return cls(**kwargs)
