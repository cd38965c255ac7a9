"""The advertised version table: what ApiVersions tells clients, and what we parse.

Each API the broker implements is advertised as ``[advertised_min, advertised_max]``:

* ``advertised_max`` is the highest version any of kafka-python 3, librdkafka 2, aiokafka 0.14
  and kafkajs 2.2 sends (design/protocol.md, "Version caps per client"), clipped to what kio
  has a schema for. Where no client cap is known, kio's maximum.
* ``advertised_min`` is 0 for the keys librdkafka (up to 2.11) checks one version at a time
  instead of as ranges: Produce, ListOffsets, OffsetCommit, OffsetFetch, FindCoordinator,
  JoinGroup, SyncGroup, Heartbeat, LeaveGroup and InitProducerId. Without it librdkafka
  silently turns off groups, idempotence or compression. Elsewhere it is kio's minimum.
* :func:`implemented_min` is the lowest version the handlers implement: Produce 3, Fetch 4,
  and kio's minimum elsewhere. A request in ``[advertised_min, implemented_min)`` is parsed with
  the hand-written schemas of :mod:`tierlog.protocol._legacy` and answered by the codec with
  UNSUPPORTED_VERSION (35) in the API's own error fields; the handlers never see it. That is
  Produce v0-2, ListOffsets v0, OffsetCommit v0-1 and OffsetFetch v0 (kio, generated from
  Kafka 4's schemas, has none of these; Kafka 4 itself advertises Produce v0-2 for the same
  reason and rejects them when used).

Fetch is advertised up to 16: v13+ names topics by id, and every topic gets a real UUID in
Metadata v10+, so librdkafka (which falls back to Fetch 12 only when ids are zero) uses it.

Requests of other keys, or outside ``[advertised_min, advertised_max]``, are a protocol
error (the connection is closed, as Kafka does) — except ApiVersions, which answers any
version (see :mod:`tierlog.protocol.connection`).
"""

from __future__ import annotations

import datetime
import enum
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map

from tierlog.protocol import _legacy

__all__ = [
    "ADVERTISED",
    "ApiKey",
    "advertised",
    "api_name",
    "api_versions_response",
    "api_versions_v0_error_response",
    "implemented_min",
    "is_advertised",
    "request_class",
    "response_class",
]


class ApiKey(enum.IntEnum):
    """The API keys this broker answers, with Kafka's names."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


# api key: (advertised min, advertised max). Comments: the highest version each client sends
# (kafka-python / librdkafka / aiokafka / kafkajs) and kio's range when it is wider.
ADVERTISED: Final[Mapping[int, tuple[int, int]]] = MappingProxyType(
    {
        ApiKey.PRODUCE: (0, 10),  # 9/10/7/7; kio 3-13 (v13 names topics by id)
        ApiKey.FETCH: (4, 16),  # 12/16/11/11; kio 4-18
        ApiKey.LIST_OFFSETS: (0, 11),  # 11/7/3/3; kio 1-11
        ApiKey.METADATA: (0, 13),  # 13/13/5/6
        ApiKey.OFFSET_COMMIT: (0, 9),  # 8/9/3/5; kio 2-10 (v10 names topics by id)
        ApiKey.OFFSET_FETCH: (0, 9),  # 8/9/3/4; kio 1-10 (v10 names topics by id)
        ApiKey.FIND_COORDINATOR: (0, 6),  # 6/2/1/2
        ApiKey.JOIN_GROUP: (0, 7),  # 7/5/5/5; kio 0-9
        ApiKey.HEARTBEAT: (0, 4),  # 4/3/1/3
        ApiKey.LEAVE_GROUP: (0, 5),  # 5/1/1/3
        ApiKey.SYNC_GROUP: (0, 5),  # 5/3/3/3
        ApiKey.DESCRIBE_GROUPS: (0, 6),  # kio 0-6
        ApiKey.LIST_GROUPS: (0, 5),  # kio 0-5
        # v0 is followed by raw SASL tokens without Kafka framing (pre-KIP-152 clients): the
        # SASL state machine refuses it; every client we serve sends v1 and then
        # SaslAuthenticate. Advertised from 0 as Kafka does: librdkafka before 2.11 looks
        # for v0 and otherwise says "SASL Handshake not supported by broker" (kcat 1.7).
        ApiKey.SASL_HANDSHAKE: (0, 1),  # 1/1/1/1; kio 0-1
        ApiKey.API_VERSIONS: (0, 4),  # 4/3/0/2
        ApiKey.CREATE_TOPICS: (2, 7),  # 7/4/3/3; kio 2-7
        ApiKey.DELETE_TOPICS: (1, 6),  # 6/4/3/1; kio 1-6
        ApiKey.DELETE_RECORDS: (0, 2),  # 2/2/2/1
        ApiKey.INIT_PRODUCER_ID: (0, 4),  # 4/4/0/1; kio 0-6 (v5+ is KIP-890/939)
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),  # 4/2/-/-; kio 2-4 (Kafka 3.7: 0-4)
        # Transactions, version 1 (Kafka 3.x): the versions after these add KIP-890's
        # TRANSACTION_ABORTABLE and transaction version 2, which tierlog does not speak.
        # AddPartitionsToTxn v4 is the brokers' batched, verify-only shape.
        # kafka-python 3 sends v3 of the four, aiokafka v0, librdkafka its own lower ones.
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 4),  # kio 0-5
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),  # kio 0-4
        ApiKey.END_TXN: (0, 3),  # kio 0-5
        ApiKey.WRITE_TXN_MARKERS: (1, 2),  # broker to broker; kio 1-2 (Kafka 4 dropped v0)
        ApiKey.TXN_OFFSET_COMMIT: (0, 3),  # kio 0-5
        # kio has v1-3 (Kafka 4 dropped v0); librdkafka and kafka-python send v1.
        ApiKey.DESCRIBE_ACLS: (1, 3),
        ApiKey.CREATE_ACLS: (1, 3),
        ApiKey.DELETE_ACLS: (1, 3),
        ApiKey.DESCRIBE_CONFIGS: (1, 4),  # 4/1/2/2; kio 1-4
        ApiKey.ALTER_CONFIGS: (0, 2),  # 2/2/1/1
        ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),  # kio 1-2 (Kafka 4 dropped v0)
        ApiKey.DESCRIBE_LOG_DIRS: (1, 4),  # kio 1-5 (v5 is KIP-1005's, not needed)
        ApiKey.SASL_AUTHENTICATE: (0, 2),  # 1/2/1/1 (v1: KIP-368 session lifetime)
        ApiKey.CREATE_PARTITIONS: (0, 3),  # kio 0-3
        ApiKey.DELETE_GROUPS: (0, 2),  # kio 0-2
        ApiKey.ELECT_LEADERS: (0, 2),  # kio 0-2 (kafka-leader-election, AdminClient)
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),  # 1/1/-/-
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),  # kio 0-1
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),  # kio 0
        ApiKey.OFFSET_DELETE: (0, 0),  # kio 0 (AdminClient.delete_consumer_group_offsets)
        ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),  # kio 0-1
        ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),  # kio 0-1
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),  # -/0/-/-
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),  # -/0/-/-
        ApiKey.DESCRIBE_CLUSTER: (0, 2),  # kio 0-2
        ApiKey.DESCRIBE_PRODUCERS: (0, 0),  # kio 0 (AdminClient.describe_producers)
        # KIP-848; v1 (Kafka 4): the client generates its member id. librdkafka 2.16 sends v1.
        ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),  # kio 0-1
        ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),  # kio 0-1 (v1 adds member_type)
        ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),  # kafka-transactions.sh, AdminClient
        ApiKey.LIST_TRANSACTIONS: (0, 2),  # v1: duration filter, v2: transactional id pattern
    }
)

_IMPLEMENTED_MIN: Final[Mapping[int, int]] = MappingProxyType(
    {
        ApiKey.PRODUCE: 3,
        ApiKey.FETCH: 4,
        ApiKey.LIST_OFFSETS: 1,
        ApiKey.OFFSET_COMMIT: 2,
        ApiKey.OFFSET_FETCH: 1,
    }
)

# Kafka's names ("Produce", "ApiVersions"), from kio's snake_case schema names.
_NAMES: Final[Mapping[int, str]] = MappingProxyType(
    {k: "".join(p.capitalize() for p in n.split("_")) for k, n in api_key_map.items()}
)


def advertised(api_key: int) -> tuple[int, int] | None:
    """``(min, max)`` advertised for ``api_key``, or None when the broker does not serve it."""
    return ADVERTISED.get(api_key)


def is_advertised(api_key: int, api_version: int) -> bool:
    """Whether ``api_version`` of ``api_key`` is inside the advertised range."""
    r = ADVERTISED.get(api_key)
    return r is not None and r[0] <= api_version <= r[1]


def implemented_min(api_key: int) -> int:
    """The lowest version the handlers implement (Produce 3, Fetch 4, ...).

    Lower advertised versions are answered by the codec with UNSUPPORTED_VERSION.

    Raises:
        KeyError: ``api_key`` is not advertised.
    """
    return _IMPLEMENTED_MIN.get(api_key, ADVERTISED[api_key][0])


def api_name(api_key: int) -> str:
    """Kafka's name of an API key (``"Produce"``), or ``"ApiKey<n>"`` when unknown."""
    return _NAMES.get(api_key, f"ApiKey{api_key}")


def request_class(api_key: int, api_version: int) -> type[Any]:
    """The schema class a request of (key, version) is parsed with.

    A kio class, or one of :mod:`tierlog.protocol._legacy` below :func:`implemented_min`.

    Raises:
        KeyError: the version is not advertised.
    """
    if not is_advertised(api_key, api_version):
        raise KeyError((api_key, api_version))
    legacy = _legacy.REQUESTS.get((api_key, api_version))
    return legacy if legacy is not None else load_request_schema(api_key, api_version)


def response_class(api_key: int, api_version: int) -> type[Any]:
    """The schema class the response to a request of (key, version) must be.

    Raises:
        KeyError: the version is not advertised.
    """
    if not is_advertised(api_key, api_version):
        raise KeyError((api_key, api_version))
    legacy = _legacy.RESPONSES.get((api_key, api_version))
    return legacy if legacy is not None else load_response_schema(api_key, api_version)


def preload_schemas() -> int:
    """Import the schema class of every advertised request and response version now; the
    number of versions.

    kio imports a schema module on its first use. A broker that has run out of descriptors
    (EMFILE) cannot import one then, and could not even answer the request with an error: the
    broker calls this at startup (in a thread: about a second of imports) so that it can.
    """
    n = 0
    for api_key, (lo, hi) in ADVERTISED.items():
        for version in range(lo, hi + 1):
            request_class(api_key, version)
            response_class(api_key, version)
            n += 1
    return n


def api_versions_keys() -> tuple[ApiVersionV0, ...]:
    """The advertised table as ApiVersions entries (v0's class; the wire format of the entries
    is the same in every version, but each version has its own kio class)."""
    return tuple(
        ApiVersionV0(api_key=int(k), min_version=lo, max_version=hi)  # type: ignore[arg-type]
        for k, (lo, hi) in sorted(ADVERTISED.items())
    )


def api_versions_response(
    api_version: int, error: ErrorCode = ErrorCode.none, throttle_time_ms: int = 0
) -> Any:
    """The ApiVersions response of ``api_version`` (0-4) listing the advertised table.

    Raises:
        KeyError: ``api_version`` is not an advertised ApiVersions version.
    """
    cls = response_class(ApiKey.API_VERSIONS, api_version)
    item = sys.modules[cls.__module__].ApiVersion
    keys = tuple(
        item(api_key=k.api_key, min_version=k.min_version, max_version=k.max_version)
        for k in api_versions_keys()
    )
    if api_version == 0:
        return cls(error_code=error, api_keys=keys)
    return cls(
        error_code=error,
        api_keys=keys,
        throttle_time=datetime.timedelta(milliseconds=throttle_time_ms),
    )


def api_versions_v0_error_response(
    error: ErrorCode = ErrorCode.unsupported_version,
) -> ApiVersionsResponseV0:
    """The answer to an ApiVersions request of a version we do not know: a v0 body with
    ``error`` and the whole table (which includes ApiVersions itself, key 18), so the client
    can retry with a version we support."""
    return ApiVersionsResponseV0(error_code=error, api_keys=api_versions_keys())


def _check_table() -> None:
    """Every advertised version from implemented_min up has a kio schema, and every one
    below has a legacy schema (checked at import: a kio upgrade cannot silently break it)."""
    for key, (lo, hi) in ADVERTISED.items():
        kio_versions = schema_name_map[api_key_map[key]]
        for v in range(lo, hi + 1):
            if v >= implemented_min(key):
                if v not in kio_versions:
                    raise RuntimeError(f"kio has no schema for {api_name(key)} v{v}")
            elif (key, v) not in _legacy.REQUESTS or (key, v) not in _legacy.RESPONSES:
                raise RuntimeError(f"no legacy schema for {api_name(key)} v{v}")


_check_table()
