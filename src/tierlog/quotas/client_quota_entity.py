"""Client quota entities and configs (Kafka's ``ClientQuotaEntity``, ``QuotaConfigs``, the
default ``ClientQuotaCallback``'s precedence). Sans-IO: values in, values out.

An entity names a user, a client id, or both; each part is a name or the default
(``<default>`` in ZooKeeper paths, a null name on the wire)::

    users/<user>/clients/<client-id>      most specific
    users/<user>/clients/<default>
    users/<user>
    users/<default>/clients/<client-id>
    users/<default>/clients/<default>
    users/<default>
    clients/<client-id>
    clients/<default>                     least specific

The first of these paths that sets a quota key gives a request its quota (Kafka's order).
The path is also the entity's key in the quota file (single node) and its znode below
``/config`` (cluster), with names URL-encoded as Kafka's ``Sanitizer`` does.

tierlog enforces ``producer_byte_rate`` and ``consumer_byte_rate``; the other keys Kafka
knows (``request_percentage``, ``controller_mutation_rate``, ``connection_creation_rate``
of ``ip`` entities) are refused with a message rather than stored and ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "DEFAULT",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "USER",
    "ClientQuotaEntity",
    "InvalidQuotaError",
    "candidate_entities",
    "matches_filter",
    "validate_filter",
    "validate_ops",
]

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
#: The keys tierlog enforces.
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
#: Kafka's other keys: known, refused with a reason.
_NOT_ENFORCED = ("request_percentage", "controller_mutation_rate", "connection_creation_rate")

#: The default entity name: ``<default>`` in paths, None on the wire.
DEFAULT = "<default>"

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


class InvalidQuotaError(ValueError):
    """A quota request Kafka answers with INVALID_REQUEST; the message says why."""


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """A user and/or client id; each a name, :data:`DEFAULT`, or None (not part of it)."""

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise InvalidQuotaError("a quota entity names a user, a client id or both")

    @property
    def path(self) -> str:
        """``users/<u>[/clients/<c>]`` or ``clients/<c>``, names URL-encoded."""
        parts = []
        if self.user is not None:
            parts += ["users", _sanitize(self.user)]
        if self.client_id is not None:
            parts += ["clients", _sanitize(self.client_id)]
        return "/".join(parts)

    @classmethod
    def from_path(cls, path: str) -> ClientQuotaEntity:
        """The inverse of :attr:`path`.

        Raises:
            InvalidQuotaError: not such a path.
        """
        parts = path.split("/")
        if len(parts) == 2 and parts[0] == "users":
            return cls(user=_desanitize(parts[1]))
        if len(parts) == 2 and parts[0] == "clients":
            return cls(client_id=_desanitize(parts[1]))
        if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
            return cls(user=_desanitize(parts[1]), client_id=_desanitize(parts[3]))
        raise InvalidQuotaError(f"not a quota entity path: {path!r}")

    @classmethod
    def from_wire(cls, components: Iterable[tuple[str, str | None]]) -> ClientQuotaEntity:
        """From AlterClientQuotas' ``(entity_type, entity_name)`` pairs (None: default).

        Raises:
            InvalidQuotaError: an unknown or repeated entity type, an ``ip`` entity.
        """
        seen: dict[str, str] = {}
        for entity_type, name in components:
            if entity_type in seen:
                raise InvalidQuotaError(f"duplicate entity type {entity_type!r}")
            if entity_type == IP:
                raise InvalidQuotaError("ip quotas (connection_creation_rate) are not supported")
            if entity_type not in (USER, CLIENT_ID):
                raise InvalidQuotaError(f"unknown entity type {entity_type!r}")
            if name == "":
                raise InvalidQuotaError(f"an empty {entity_type} name (the default is null)")
            seen[entity_type] = DEFAULT if name is None else name
        if not seen:
            raise InvalidQuotaError("an entity needs a user, a client id or both")
        return cls(seen.get(USER), seen.get(CLIENT_ID))

    def to_wire(self) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = []
        if self.user is not None:
            out.append((USER, None if self.user == DEFAULT else self.user))
        if self.client_id is not None:
            out.append((CLIENT_ID, None if self.client_id == DEFAULT else self.client_id))
        return out


def _sanitize(name: str) -> str:
    return name if name == DEFAULT else quote(name, safe="")


def _desanitize(name: str) -> str:
    return name if name == DEFAULT else unquote(name)


def candidate_entities(user: str, client_id: str) -> Iterator[ClientQuotaEntity]:
    """The entities that may give ``(user, client_id)`` its quota, most specific first."""
    for u in (user, DEFAULT):
        for c in (client_id, DEFAULT, None):
            yield ClientQuotaEntity(u, c)
    yield ClientQuotaEntity(None, client_id)
    yield ClientQuotaEntity(None, DEFAULT)


def validate_ops(ops: Iterable[tuple[str, float, bool]]) -> dict[str, float | None]:
    """AlterClientQuotas' ``(key, value, remove)`` ops as key -> value (None: remove).

    Raises:
        InvalidQuotaError: an unknown, unsupported or repeated key, or a value that is not
            a positive whole number of bytes per second.
    """
    out: dict[str, float | None] = {}
    for key, value, remove in ops:
        if key in out:
            raise InvalidQuotaError(f"duplicate quota key {key!r}")
        if key in _NOT_ENFORCED:
            raise InvalidQuotaError(
                f"{key} is not supported (tierlog enforces {' and '.join(QUOTA_KEYS)})"
            )
        if key not in QUOTA_KEYS:
            raise InvalidQuotaError(f"unknown quota key {key!r} (known: {', '.join(QUOTA_KEYS)})")
        if remove:
            out[key] = None
            continue
        if not math.isfinite(value) or value <= 0 or value != int(value):
            raise InvalidQuotaError(
                f"{key} must be a positive whole number of bytes per second, got {value!r}"
            )
        out[key] = float(value)
    return out


def validate_filter(
    components: Iterable[tuple[str, int, str | None]],
) -> list[tuple[str, int, str | None]]:
    """DescribeClientQuotas' ``(entity_type, match_type, match)`` components, checked.

    Raises:
        InvalidQuotaError: an unknown or repeated entity type or match type.
    """
    out = []
    seen = set()
    for entity_type, match_type, match in components:
        if entity_type in seen:
            raise InvalidQuotaError(f"duplicate filter component entity type {entity_type!r}")
        seen.add(entity_type)
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidQuotaError(f"unknown filter component entity type {entity_type!r}")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise InvalidQuotaError(f"unknown match type {match_type}")
        if match_type == MATCH_EXACT and match is None:
            raise InvalidQuotaError(f"an exact match of {entity_type} needs a name")
        out.append((entity_type, match_type, match))
    return out


def matches_filter(
    entity: ClientQuotaEntity, components: list[tuple[str, int, str | None]], strict: bool
) -> bool:
    """Whether ``entity`` passes a validated DescribeClientQuotas filter (Kafka's rules:
    each component must match; ``strict``: and the entity has no other part)."""
    parts = {USER: entity.user, CLIENT_ID: entity.client_id}
    for entity_type, match_type, match in components:
        value = parts.get(entity_type)
        if value is None:
            return False
        if match_type == MATCH_EXACT and value != match:
            return False
        if match_type == MATCH_DEFAULT and value != DEFAULT:
            return False
        if match_type == MATCH_SPECIFIED and value == DEFAULT:
            return False
    if strict:
        named = {t for t, _, _ in components}
        return all(v is None or t in named for t, v in parts.items())
    return True


def quota_for(
    quotas: Mapping[ClientQuotaEntity, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[ClientQuotaEntity, float] | None:
    """The entity that gives ``(user, client_id)`` its ``key`` quota, and the quota."""
    for entity in candidate_entities(user, client_id):
        value = quotas.get(entity, {}).get(key)
        if value is not None:
            return entity, value
    return None
