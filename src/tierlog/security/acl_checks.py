"""Which ACL each API checks, and the broker's authorizer: the decision cache, the store behind
it and the reloads on change.

Kafka's mapping (its ``KafkaApis`` and ``AclAuthorizer``), error in brackets:

=====================================  =================================================
Produce                                WRITE topic [29 per partition]
Fetch (consumer)                       READ topic [29 per partition]
Fetch (follower, replica_id >= 0)      CLUSTER_ACTION cluster [29 on every partition]
ListOffsets, OffsetForLeaderEpoch      DESCRIBE topic [29] (a follower: CLUSTER_ACTION)
Metadata                               DESCRIBE topic: all-topics answers omit the others,
                                       named ones get 29; auto-creation needs CREATE on the
                                       cluster or the topic [29]
CreateTopics                           CREATE cluster or CREATE topic [29]
DeleteTopics, DeleteRecords            DELETE topic [29]
CreatePartitions                       ALTER topic [29]
DescribeConfigs                        DESCRIBE_CONFIGS topic [29] / cluster (broker) [31]
AlterConfigs, IncrementalAlterConfigs  ALTER_CONFIGS topic [29] / cluster (broker) [31]
Join/Sync/Heartbeat/LeaveGroup         READ group [30]
OffsetCommit                           READ group [30], READ topic [29 per partition]
OffsetFetch                            DESCRIBE group [30], DESCRIBE topic [29 per partition;
                                       an all-partitions fetch omits the topic]
DescribeGroups / DeleteGroups          DESCRIBE / DELETE group [30 per group]
ListGroups                             DESCRIBE cluster lists all, else the groups with
                                       DESCRIBE group
FindCoordinator                        DESCRIBE group [30] / transactional id [53]
InitProducerId                         transactional: WRITE transactional id [53];
                                       idempotent: IDEMPOTENT_WRITE cluster or WRITE on any
                                       topic (KIP-679) [31]
ElectLeaders, AlterPartitionReassign.  ALTER cluster [31]
ListPartitionReassignments             DESCRIBE cluster [31]
Describe/AlterUserScramCredentials     DESCRIBE / ALTER cluster [31]
DescribeAcls / CreateAcls, DeleteAcls  DESCRIBE / ALTER cluster [31]
DescribeCluster, ApiVersions, SASL     no check (as in Kafka)
authorized operations (Metadata,       each operation the resource type supports, decided
DescribeCluster, DescribeGroups)       as a request for it would be; the cluster's only
                                       with DESCRIBE on it (else 0)
=====================================  =================================================

Handlers ask through :func:`topic_error`, :func:`group_error`, :func:`cluster_error` and
:func:`transactional_id_error`: 0 when allowed. With no authorizer (``authorizer.class.name``
empty) they return 0 at the cost of one attribute read.

:class:`BrokerAuthorizer` caches each decision by (principal, host, operation, resource type,
name), so Produce and Fetch pay one dict lookup per topic; any ACL change (a local create or
delete, or a ZooKeeper change notification) clears the cache. The event loop owns it: not
thread-safe, except :meth:`BrokerAuthorizer.changed`, which other threads may call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from tierlog.errors import (
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)
from tierlog.security.acl_store import AclStore
from tierlog.security.authorizer import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
    operations_bit_field,
)
from tierlog.security.principal import ANONYMOUS, KafkaPrincipal

__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED",
    "BrokerAuthorizer",
    "authorized_operations",
    "authorizer_from_config",
    "cluster_error",
    "group_error",
    "topic_error",
    "transactional_id_error",
]

log = logging.getLogger(__name__)

TOPIC_AUTHORIZATION_FAILED = TopicAuthorizationFailed.error_code
GROUP_AUTHORIZATION_FAILED = GroupAuthorizationFailed.error_code
CLUSTER_AUTHORIZATION_FAILED = ClusterAuthorizationFailed.error_code
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = TransactionalIdAuthorizationFailed.error_code
_CACHE_LIMIT = 100_000
#: Kafka's "authorized operations not requested" marker (``Integer.MIN_VALUE``).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

_Key = tuple[KafkaPrincipal | str, str, AclOperation, ResourceType, str]


class BrokerAuthorizer:
    """The broker's ACLs: decisions (cached), changes (written through the store first).

    Args:
        authorizer: the sans-IO decision rules, with ``super.users``.
        store: where ACLs persist (a local file, or ZooKeeper).
    """

    def __init__(self, authorizer: AclAuthorizer, store: AclStore) -> None:
        self.authorizer = authorizer
        self.store = store
        self._cache: dict[_Key, bool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reloading: asyncio.Task[None] | None = None
        self._dirty = False

    # ----------------------------------------------------------------- decisions

    def authorize(
        self,
        principal: KafkaPrincipal | str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        # keyed by the principal object itself: hashing a frozen dataclass of two strings is
        # cheaper than formatting "User:alice" on every Produce
        key = (principal, host, operation, resource_type, name)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        who = str(principal)
        allowed = self.authorizer.authorize(who, host, operation, resource_type, name)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = allowed
        if not allowed:
            log.debug(
                "denied %s from %s: %s on %s:%s", who, host, operation.name,
                resource_type.name, name,
            )  # fmt: skip
        return allowed

    # ----------------------------------------------------------------- changes

    async def start(self) -> None:
        """Load the stored ACLs (the broker does not answer before it has them)."""
        self._loop = asyncio.get_running_loop()
        bindings = await asyncio.to_thread(self.store.load)
        self._replace(bindings)
        log.info("authorizer on: %d ACLs loaded", len(bindings))

    async def create(self, bindings: list[AclBinding]) -> None:
        """Store then apply validated bindings.

        Raises:
            OSError, ZooKeeperClientError: the store failed (nothing applied then).
        """
        await asyncio.to_thread(self.store.add, bindings)
        self.authorizer.add_acls(bindings)
        self._cache.clear()
        for b in bindings:
            log.info("ACL created: %s", _describe(b))

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches; the removed bindings per filter.

        Raises:
            OSError, ZooKeeperClientError: the store failed (nothing removed then).
        """
        matched = [self.authorizer.acls(f) for f in filters]
        gone = list(dict.fromkeys(b for m in matched for b in m))
        if gone:
            await asyncio.to_thread(self.store.remove, gone)
            for f in filters:
                self.authorizer.remove_acls(f)
            self._cache.clear()
            for b in gone:
                log.info("ACL deleted: %s", _describe(b))
        return matched

    def changed(self) -> None:
        """The stored ACLs changed elsewhere (a ZooKeeper notification): reload. Any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._schedule_reload)

    def _schedule_reload(self) -> None:
        if self._reloading is not None and not self._reloading.done():
            self._dirty = True  # the running reload may have read before this change
            return
        self._reloading = asyncio.ensure_future(self._reload())

    async def _reload(self) -> None:
        while True:
            self._dirty = False
            try:
                bindings = await asyncio.to_thread(self.store.load)
            except Exception as e:  # a lost ZooKeeper session: the next notification retries
                log.warning("reloading ACLs failed: %s", e)
                return
            self._replace(bindings)
            if not self._dirty:
                return

    def _replace(self, bindings: Iterable[AclBinding]) -> None:
        self.authorizer.replace_acls(bindings)
        self._cache.clear()


def _describe(b: AclBinding) -> str:
    p, e = b.pattern, b.entry
    return (
        f"{e.permission_type.name} {e.principal} from {e.host} {e.operation.name} on "
        f"{p.resource_type.name} {p.pattern_type.name} {p.name!r}"
    )


def authorizer_from_config(config: Any) -> AclAuthorizer | None:
    """The decision rules of ``authorizer.class.name``, ``super.users`` and
    ``allow.everyone.if.no.acl.found``; None when no authorizer is configured."""
    if not str(config.get("authorizer.class.name") or "").strip():
        return None
    return AclAuthorizer(
        AclAuthorizer.parse_super_users(config.get("super.users")),
        allow_everyone_if_no_acl_found=bool(config.get("allow.everyone.if.no.acl.found")),
    )


# ----------------------------------------------------------------- what handlers call


class RequestContext(Protocol):
    """What the checks read from the broker's KafkaApis during a request."""

    @property
    def authorizer(self) -> BrokerAuthorizer | None: ...
    @property
    def principal(self) -> KafkaPrincipal: ...
    @property
    def client_host(self) -> str: ...


@dataclass(frozen=True, slots=True)
class RequestIdentity:
    """Who asked, kept past a handler's first await (KafkaApis moves on to other requests)."""

    authorizer: BrokerAuthorizer | None
    principal: KafkaPrincipal
    client_host: str


def identity(ctx: RequestContext) -> RequestIdentity:
    return RequestIdentity(
        getattr(ctx, "authorizer", None),
        getattr(ctx, "principal", ANONYMOUS),
        getattr(ctx, "client_host", ""),
    )


def allowed(ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str) -> bool:
    a = getattr(ctx, "authorizer", None)
    return a is None or a.authorize(ctx.principal, ctx.client_host, op, rtype, name)


def authorized_operations(ctx: RequestContext, rtype: ResourceType, name: str) -> int:
    """The bit field of the operations the requester may do on the resource, among those its
    type supports (Kafka's ``KafkaApis.authorizedOperations``): all of them without an
    authorizer, else each one decided as a request for it would be."""
    supported = SUPPORTED_OPERATIONS[rtype]
    if getattr(ctx, "authorizer", None) is None:
        return operations_bit_field(supported)
    return operations_bit_field(op for op in supported if allowed(ctx, op, rtype, name))


def topic_error(ctx: RequestContext, op: AclOperation, topic: str) -> int:
    """0, or TOPIC_AUTHORIZATION_FAILED (29)."""
    a = getattr(ctx, "authorizer", None)
    if a is None or a.authorize(ctx.principal, ctx.client_host, op, ResourceType.TOPIC, topic):
        return 0
    return TOPIC_AUTHORIZATION_FAILED


def group_error(ctx: RequestContext, op: AclOperation, group: str) -> int:
    """0, or GROUP_AUTHORIZATION_FAILED (30)."""
    return 0 if allowed(ctx, op, ResourceType.GROUP, group) else GROUP_AUTHORIZATION_FAILED


def cluster_error(ctx: RequestContext, op: AclOperation) -> int:
    """0, or CLUSTER_AUTHORIZATION_FAILED (31)."""
    ok = allowed(ctx, op, ResourceType.CLUSTER, CLUSTER_NAME)
    return 0 if ok else CLUSTER_AUTHORIZATION_FAILED


def transactional_id_error(ctx: RequestContext, op: AclOperation, tid: str) -> int:
    """0, or TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53)."""
    ok = allowed(ctx, op, ResourceType.TRANSACTIONAL_ID, tid)
    return 0 if ok else TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def follower_or_topic_error(
    ctx: RequestContext, replica_id: int, op: AclOperation, topic: str
) -> int:
    """A follower (``replica_id >= 0``) needs CLUSTER_ACTION on the cluster, a client ``op`` on
    the topic; 0 or TOPIC_AUTHORIZATION_FAILED (29) either way, as Kafka answers a follower."""
    if getattr(ctx, "authorizer", None) is None:
        return 0
    if replica_id >= 0:
        ok = allowed(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        return 0 if ok else TOPIC_AUTHORIZATION_FAILED
    return topic_error(ctx, op, topic)


def idempotent_write_error(ctx: RequestContext) -> int:
    """InitProducerId without a transactional id (KIP-679): IDEMPOTENT_WRITE on the cluster or
    WRITE on any topic; 0 or CLUSTER_AUTHORIZATION_FAILED (31)."""
    a = getattr(ctx, "authorizer", None)
    if a is None or allowed(ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    if a.authorizer.authorize_by_resource_type(
        ctx.principal, ctx.client_host, AclOperation.WRITE, ResourceType.TOPIC
    ):
        return 0
    return CLUSTER_AUTHORIZATION_FAILED


def create_topic_error(ctx: RequestContext, topic: str) -> int:
    """CREATE on the cluster or on the topic; 0 or TOPIC_AUTHORIZATION_FAILED (29)."""
    if getattr(ctx, "authorizer", None) is None or allowed(
        ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        return 0
    return topic_error(ctx, AclOperation.CREATE, topic)


def config_resource_error(
    ctx: RequestContext, op: AclOperation, resource_type: int, name: str
) -> int:
    """DescribeConfigs/AlterConfigs on a resource (2 topic: 29; 32 group: 30; 4 broker, 8
    broker logger: the cluster, 31)."""
    if getattr(ctx, "authorizer", None) is None:
        return 0
    if resource_type == 2:
        return topic_error(ctx, op, name)
    if resource_type == 32:
        return group_error(ctx, op, name)
    return cluster_error(ctx, op)


def cluster_action_or_topic_error(ctx: RequestContext, op: AclOperation, topic: str) -> int:
    """OffsetForLeaderEpoch: CLUSTER_ACTION on the cluster (brokers) or ``op`` on the topic;
    0 or TOPIC_AUTHORIZATION_FAILED (29)."""
    if getattr(ctx, "authorizer", None) is None or allowed(
        ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        return 0
    return topic_error(ctx, op, topic)


# Raising forms, for handlers that answer an ApiError per resource.


def require_topic(ctx: RequestContext, op: AclOperation, topic: str) -> None:
    """Raises: TopicAuthorizationFailed: ``op`` on the topic is not allowed."""
    if topic_error(ctx, op, topic):
        raise TopicAuthorizationFailed()


def require_create_topic(ctx: RequestContext, topic: str) -> None:
    """Raises: TopicAuthorizationFailed: neither CREATE on the cluster nor on the topic."""
    if create_topic_error(ctx, topic):
        raise TopicAuthorizationFailed()


def require_config_resource(
    ctx: RequestContext, op: AclOperation, resource_type: int, name: str
) -> None:
    """Raises: TopicAuthorizationFailed, ClusterAuthorizationFailed: see
    :func:`config_resource_error`."""
    code = config_resource_error(ctx, op, resource_type, name)
    if code == TOPIC_AUTHORIZATION_FAILED:
        raise TopicAuthorizationFailed()
    if code == GROUP_AUTHORIZATION_FAILED:
        raise GroupAuthorizationFailed()
    if code:
        raise ClusterAuthorizationFailed()
