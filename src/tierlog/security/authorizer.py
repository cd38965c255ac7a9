"""ACLs with Kafka's model, sans-IO: bindings, filters and the authorization decision (Kafka's
``AclAuthorizer``/``StandardAuthorizer`` semantics). The broker wires it to the handlers through
:mod:`tierlog.security.acl_checks`.

An :class:`AclBinding` is a :class:`ResourcePattern` (resource type, name, LITERAL or PREFIXED)
and an :class:`AccessControlEntry` (principal, host, operation, ALLOW or DENY). A request by
``principal`` from ``host`` for ``operation`` on a resource is decided so:

1. a super user (``super.users``) is allowed everything;
2. the ACLs that apply to the resource are those of its type whose pattern matches its name:
   LITERAL with the same name, LITERAL ``*`` (any name), or PREFIXED with a prefix of the name;
   of those, the ones whose principal is the request's or ``User:*`` and whose host is the
   request's or ``*``;
3. a DENY for the operation (or ALL) wins over everything;
4. an ALLOW for the operation (or ALL) allows; so does an ALLOW for an operation that implies
   it: DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS;
5. when no ACL at all applies to the resource (for any principal), the answer is
   ``allow.everyone.if.no.acl.found`` (false by default); otherwise deny.

:class:`AclBindingFilter` selects bindings for DescribeAcls and DeleteAcls: ANY matches every
value, a pattern type of MATCH selects the patterns that would apply to the filter's name
(literal, wildcard and prefixes), a None name or principal or host matches any.

Enum values are Kafka's wire codes. :class:`AclAuthorizer` keeps bindings in memory, indexed by
resource type; it is not thread-safe (the event loop owns it); adding a binding twice, or
removing one that is gone, is a no-op (idempotent).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.security.principal import KafkaPrincipal

__all__ = [
    "CLUSTER_NAME",
    "AccessControlEntry",
    "AclAuthorizer",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "InvalidAclError",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "SUPPORTED_OPERATIONS",
    "operations_bit_field",
]

#: The one CLUSTER resource's name.
CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type
    MATCH = 2  # filters only: the patterns that apply to the name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The operations each resource type has (Kafka's ``AclEntry.supportedOperations``), in the order
#: Kafka lists them; what an "authorized operations" answer is made of.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """The int32 bit field of the wire's ``authorized_operations`` fields: bit ``op.value``
    set for each operation (Kafka's ``Utils.to32BitField``)."""
    field = 0
    for op in operations:
        field |= 1 << op.value
    return field


# operation -> the operations whose ALLOW also allows it (Kafka's implied operations)
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


class InvalidAclError(ValueError):
    """A binding CreateAcls must refuse (Kafka's InvalidRequestException messages)."""


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this (concrete) pattern applies to the resource ``(type, name)``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD_RESOURCE
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return False


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        """Kafka's checks on a binding to create.

        Raises:
            InvalidAclError: a filter-only value, an unknown value, a principal without a
                type, an empty prefix, or a CLUSTER resource not named ``kafka-cluster``.
        """
        p, e = self.pattern, self.entry
        if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidAclError(f"Invalid resource type {p.resource_type.name}")
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"Invalid pattern type {p.pattern_type.name}")
        if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise InvalidAclError(f"Invalid operation {e.operation.name}")
        if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"Invalid permission type {e.permission_type.name}")
        if not p.name:
            raise InvalidAclError("Resource name must not be empty")
        if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        kind, sep, name = e.principal.partition(":")
        if not sep or not kind or not name:
            raise InvalidAclError(f"Invalid principal {e.principal!r}: expected Type:name")
        if not e.host:
            raise InvalidAclError("Host must not be empty")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls/DeleteAcls selection; None means any value."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        p, e = b.pattern, b.entry
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if not self._pattern_matches(p):
            return False
        if self.principal is not None and self.principal != e.principal:
            return False
        if self.host is not None and self.host != e.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != e.operation:
            return False
        return self.permission_type in (AclPermissionType.ANY, e.permission_type)

    def _pattern_matches(self, p: ResourcePattern) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if p.pattern_type == PatternType.LITERAL:
                return p.name in (self.name, WILDCARD_RESOURCE)
            return p.pattern_type == PatternType.PREFIXED and self.name.startswith(p.name)
        if self.pattern_type != PatternType.ANY and self.pattern_type != p.pattern_type:
            return False
        return self.name is None or self.name == p.name


class AclAuthorizer:
    """Bindings in memory and :meth:`authorize`.

    Args:
        super_users: principals allowed everything (``super.users``: ``User:admin;User:ops``).
        allow_everyone_if_no_acl_found: the answer for a resource no ACL applies to.
    """

    def __init__(
        self,
        super_users: Iterable[str] = (),
        *,
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._by_type: dict[ResourceType, dict[AclBinding, None]] = {}
        # (type, LITERAL or PREFIXED, name) -> bindings: built on the first decision after a
        # change, so a decision looks up the name, ``*`` and each prefix of the name
        # (O(len(name))) instead of scanning every binding of the type.
        self._index: dict[tuple[ResourceType, PatternType, str], list[AclBinding]] | None = None

    @staticmethod
    def parse_super_users(value: str | None) -> frozenset[str]:
        """Kafka's ``super.users``: principals separated by semicolons."""
        return frozenset(p.strip() for p in (value or "").split(";") if p.strip())

    def add_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Add bindings (each validated first; an existing one is kept once).

        Raises:
            InvalidAclError: a binding is invalid (none of the bindings is added then).
        """
        items = list(bindings)
        for b in items:
            b.validate()
        for b in items:
            self._by_type.setdefault(b.pattern.resource_type, {})[b] = None
        self._index = None

    def remove_acls(self, f: AclBindingFilter) -> list[AclBinding]:
        """Remove and return the bindings ``f`` matches."""
        removed = self.acls(f)
        for b in removed:
            self._by_type.get(b.pattern.resource_type, {}).pop(b, None)
        self._index = None
        return removed

    def acls(self, f: AclBindingFilter | None = None) -> list[AclBinding]:
        """The bindings ``f`` matches (all without a filter), in insertion order."""
        f = f or AclBindingFilter()
        out: list[AclBinding] = []
        for rtype, bindings in self._by_type.items():
            if f.resource_type not in (ResourceType.ANY, rtype):
                continue
            out.extend(b for b in bindings if f.matches(b))
        return out

    def authorize(
        self,
        principal: KafkaPrincipal | str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource."""
        who = str(principal)
        if who in self.super_users:
            return True
        applying = self._applying(resource_type, name)
        if not applying:
            return self.allow_everyone_if_no_acl_found
        mine = [
            b.entry
            for b in applying
            if b.entry.principal in (who, WILDCARD_PRINCIPAL)
            and b.entry.host in (host, WILDCARD_HOST)
        ]
        for e in mine:
            if e.permission_type == AclPermissionType.DENY and e.operation in (
                operation,
                AclOperation.ALL,
            ):
                return False
        allowed_by = {operation, AclOperation.ALL} | _IMPLIED_BY.get(operation, frozenset())
        return any(
            e.permission_type == AclPermissionType.ALLOW and e.operation in allowed_by for e in mine
        )

    def authorize_by_resource_type(
        self,
        principal: KafkaPrincipal | str,
        host: str,
        operation: AclOperation,
        rtype: ResourceType,
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on *some* resource of ``rtype`` (Kafka's
        ``authorizeByResourceType``, KIP-679: an idempotent producer's InitProducerId is allowed
        with WRITE on any topic): an ALLOW for it on any pattern, unless a DENY on the wildcard
        resource (``*``) covers every name."""
        who = str(principal)
        if who in self.super_users:
            return True
        bindings = self._by_type.get(rtype, {})
        if not bindings:
            return self.allow_everyone_if_no_acl_found
        ops = {operation, AclOperation.ALL}
        mine = [
            b
            for b in bindings
            if b.entry.principal in (who, WILDCARD_PRINCIPAL)
            and b.entry.host in (host, WILDCARD_HOST)
            and b.entry.operation in ops
        ]
        if any(
            b.entry.permission_type == AclPermissionType.DENY
            and b.pattern.pattern_type == PatternType.LITERAL
            and b.pattern.name == WILDCARD_RESOURCE
            for b in mine
        ):
            return False
        return any(b.entry.permission_type == AclPermissionType.ALLOW for b in mine)

    def replace_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Hold exactly ``bindings`` (a reload from the store; invalid ones are skipped)."""
        by_type: dict[ResourceType, dict[AclBinding, None]] = {}
        for b in bindings:
            try:
                b.validate()
            except InvalidAclError:
                continue
            by_type.setdefault(b.pattern.resource_type, {})[b] = None
        self._by_type = by_type
        self._index = None

    def _applying(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings whose pattern matches the resource (literal name, ``*``, prefixes)."""
        index = self._index
        if index is None:
            index = {}
            for bindings in self._by_type.values():
                for b in bindings:
                    p = b.pattern
                    index.setdefault((p.resource_type, p.pattern_type, p.name), []).append(b)
            self._index = index
        out = list(index.get((resource_type, PatternType.LITERAL, name), ()))
        if name != WILDCARD_RESOURCE:
            out += index.get((resource_type, PatternType.LITERAL, WILDCARD_RESOURCE), ())
        for i in range(1, len(name) + 1):
            out += index.get((resource_type, PatternType.PREFIXED, name[:i]), ())
        return out
