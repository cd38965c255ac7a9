"""Request dispatch: one handler per API key (Kafka's ``KafkaApis``).

A handler takes the :class:`KafkaApis` (the broker's parts) and one request event, and
returns the response entity, an awaitable of it (long-polls, group joins), or ``None`` when
no response is sent (acks=0 Produce). Handlers live in :mod:`tierlog.server.handlers`, one
module per API family.

Not thread-safe: the event loop thread calls :meth:`KafkaApis.handle`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import types
import typing
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kio.index import load_response_schema

from tierlog.errors import InvalidRequest
from tierlog.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from tierlog.cluster.controller import KafkaController
    from tierlog.cluster.zk_admin import ZkAdminManager
    from tierlog.cluster.zk_broker import ZkBroker
    from tierlog.cluster.zk_data import BrokerInfo
    from tierlog.coordinator.group.group_coordinator import GroupCoordinator
    from tierlog.coordinator.transaction import TransactionCoordinator
    from tierlog.log.log_config import LogConfig
    from tierlog.log.log_manager import LogManager
    from tierlog.security.acl_checks import BrokerAuthorizer
    from tierlog.security.credential_store import ScramCredentialStore
    from tierlog.server.client_quotas import ClientQuotas
    from tierlog.server.dynamic_broker_config import DynamicBrokerConfig
    from tierlog.server.kafka_config import KafkaConfig
    from tierlog.server.producer_id_manager import ProducerIdManager
    from tierlog.server.replica_manager import ReplicaManager
    from tierlog.server.tiered_storage import TieredStorage

log = logging.getLogger(__name__)


class Request(Protocol):
    """What a handler reads from a request event (tierlog.protocol's RequestEvent)."""

    @property
    def api_key(self) -> int: ...
    @property
    def api_version(self) -> int: ...
    @property
    def correlation_id(self) -> int: ...
    @property
    def client_id(self) -> str | None: ...
    @property
    def request(self) -> Any: ...


class CloseConnection(Exception):
    """Raised by a handler to close the client's connection after the request (Kafka does
    this for an acks=0 Produce that failed: the client learns of it only by reconnecting
    and refreshing its metadata)."""


HandlerResult = Any  # a kio response entity, an Awaitable of one, or None
Handler = Callable[["KafkaApis", Any], HandlerResult]


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """This node as Metadata, FindCoordinator and DescribeCluster present it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


_NullPlan = tuple[tuple[str, bool, Any, bool], ...]
_NULL_PLANS: dict[type[Any], _NullPlan] = {}


def _null_plan(cls: type[Any]) -> _NullPlan:
    """Per entity class: (field, may be null, nested entity class, is array) for the fields
    that can hold None or nested entities."""
    cached = _NULL_PLANS.get(cls)
    if cached is not None:
        return cached
    plan: list[tuple[str, bool, Any, bool]] = []
    for f in dataclasses.fields(cls):
        tp: Any = f.type
        optional = False
        if typing.get_origin(tp) in (types.UnionType, typing.Union):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = len(args) < len(typing.get_args(tp))
            tp = args[0]
        is_array = typing.get_origin(tp) is tuple
        inner = typing.get_args(tp)[0] if is_array else tp
        nested = inner if dataclasses.is_dataclass(inner) else None
        if (is_array and not optional) or nested is not None:
            plan.append((f.name, optional, nested, is_array))
    result = tuple(plan)
    _NULL_PLANS[cls] = result
    return result


def check_nulls(entity: Any) -> None:
    """Reject null arrays in fields the schema says are not nullable.

    kio decodes a -1 length as None for any array; Kafka's generated parsers reject it. The
    handlers rely on the schema (they iterate non-nullable arrays), so this runs first.

    Raises:
        InvalidRequest: a non-nullable array is null.
    """
    for name, optional, nested, is_array in _null_plan(type(entity)):
        value = getattr(entity, name)
        if value is None:
            if not optional:
                raise InvalidRequest(f"null {type(entity).__name__}.{name} is not allowed")
            continue
        if nested is not None:
            if is_array:
                for item in value:
                    check_nulls(item)
            else:
                check_nulls(value)


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    """The kio response class for (api key, version)."""
    cls: type[Any] = load_response_schema(api_key, version)
    return cls


class KafkaApis:
    """The broker's parts, as the handlers see them, and the dispatch table."""

    def __init__(
        self,
        *,
        config: KafkaConfig,
        log_manager: LogManager,
        replica_manager: ReplicaManager,
        group_coordinator: GroupCoordinator | None,
        producer_id_manager: ProducerIdManager,
        endpoint: BrokerEndpoint,
        cluster_id: str,
        on_topics_changed: Callable[[str], None] | None = None,
        tiered: TieredStorage | None = None,
        cluster: ZkBroker | None = None,
        controller: KafkaController | None = None,
        admin: ZkAdminManager | None = None,
        credentials: ScramCredentialStore | None = None,
        endpoints: Mapping[str, BrokerEndpoint] | None = None,
        authorizer: BrokerAuthorizer | None = None,
        client_quotas: ClientQuotas | None = None,
        dynamic_config: DynamicBrokerConfig | None = None,
    ) -> None:
        self.config = config
        #: Dynamic broker configs (AlterConfigs on the BROKER resource); None: read-only.
        self.dynamic_config = dynamic_config
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        #: The transaction coordinator (None: transactional ids are answered
        #: COORDINATOR_NOT_AVAILABLE); set by the broker after construction.
        self.txn_coordinator: TransactionCoordinator | None = None
        self.producer_id_manager = producer_id_manager
        self._default_endpoint = endpoint
        #: This node as each listener advertises it (Metadata answers with the address of the
        #: listener the request came in on, as Kafka does).
        self._endpoints = dict(endpoints or {})
        #: The listener of the request being dispatched.
        self.listener_name = ""
        self.cluster_id = cluster_id
        self.node_id = endpoint.node_id
        self._on_topics_changed = on_topics_changed
        #: Tiered storage (None when remote.log.storage.system.enable=false).
        self.tiered = tiered
        #: The cluster (None: a single node, which is every partition's only replica).
        self.cluster = cluster
        self.controller = controller
        self.admin = admin
        #: The client address of the request being dispatched (JoinGroup's client_host).
        self.client_host = ""
        #: Work a request started and does not wait for (auto-created topics), by name.
        self._background: dict[str, asyncio.Future[None]] = {}
        #: The principal of the request being dispatched (``User:alice``; for the ACLs).
        self.principal: KafkaPrincipal = ANONYMOUS
        #: SCRAM credentials (AlterUserScramCredentials); None: the APIs answer with an error.
        self.credentials = credentials
        #: ACLs (authorizer.class.name); None: every request is allowed, at no cost.
        self.authorizer = authorizer
        if client_quotas is None:  # tests that build KafkaApis by hand: no quota, in memory
            from tierlog.server.client_quotas import ClientQuotas, MemoryQuotaStore

            client_quotas = ClientQuotas(MemoryQuotaStore())
        #: producer_byte_rate / consumer_byte_rate quotas and the APIs 48/49.
        self.client_quotas = client_quotas
        from tierlog.server.handlers import HANDLERS

        self._handlers: dict[int, Handler] = dict(HANDLERS)

    @property
    def endpoint(self) -> BrokerEndpoint:
        """This node as the current request's listener advertises it."""
        return self._endpoints.get(self.listener_name, self._default_endpoint)

    def handle(
        self,
        ev: Request,
        client_host: str = "",
        principal: KafkaPrincipal = ANONYMOUS,
        listener_name: str = "",
    ) -> HandlerResult:
        """The response (or awaitable, or None) for one request event.

        ``client_host`` is the peer address and ``principal`` who the connection authenticated
        as; handlers read them as :attr:`client_host` and :attr:`principal` before their first
        await.

        Raises:
            KeyError: no handler for the API key (the protocol layer only lets advertised
                keys through, so this is a bug or a table mismatch).
        """
        self.client_host = client_host
        self.principal = principal
        self.listener_name = listener_name
        handler = self._handlers[ev.api_key]
        check_nulls(ev.request)
        return handler(self, ev)

    def in_background(self, name: str, coro: Coroutine[Any, Any, None]) -> bool:
        """Run ``coro`` in the background under ``name`` unless work of that name is already
        running (then ``coro`` is closed unstarted); True when started."""
        if name in self._background:
            coro.close()
            return False
        task = asyncio.ensure_future(coro)
        self._background[name] = task
        task.add_done_callback(lambda _t: self._background.pop(name, None))
        return True

    def supports(self, api_key: int) -> bool:
        return api_key in self._handlers

    def topic_changed(self, name: str) -> None:
        """A topic was created, deleted or grew partitions, or its remote storage turned on:
        drop cached partition views; tiered storage takes its new tiered partitions."""
        self.replica_manager.forget_topic(name)
        if self.tiered is not None:
            self.tiered.topic_changed(name)
        if self._on_topics_changed is not None:
            self._on_topics_changed(name)

    def topic_name_for_id(self, topic_id: uuid.UUID) -> str | None:
        if self.cluster is not None:
            return self.cluster.metadata.topic_name(topic_id)
        info = self.log_manager.topic_by_id(topic_id)
        return None if info is None else str(info.name)

    def topic_config(self, name: str) -> LogConfig | None:
        """A topic's effective config: its overrides (the registry's, or ZooKeeper's in a
        cluster) over the broker defaults; None for an unknown topic."""
        if self.cluster is not None:
            t = self.cluster.metadata.topic(name)
            if t is None:
                return None
            return self.log_manager.default_config.with_overrides(t.configs)
        info = self.log_manager.topic(name)
        return None if info is None else info.config

    def broker_endpoint(
        self, broker_id: int, info: BrokerInfo | None = None
    ) -> BrokerEndpoint | None:
        """A live broker's address for clients (or ``info``'s): the other broker's listener of
        the same name as the one the request came in on (else this broker's first advertised
        listener's)."""
        if self.cluster is None:
            return self.endpoint if broker_id == self.node_id else None
        if info is None:
            info = self.cluster.metadata.brokers.get(broker_id)
        if info is None:
            return None
        listener = self.listener_name or self.config.advertised_listeners[0].listener_name
        ep = info.endpoint(listener) or (info.endpoints[0] if info.endpoints else None)
        if ep is None:
            return None
        return BrokerEndpoint(broker_id, ep.host, ep.port, info.rack)

    def alive_brokers(self) -> list[BrokerEndpoint]:
        if self.cluster is None:
            return [self.endpoint]
        out = []
        for b in self.cluster.metadata.alive_broker_ids():
            e = self.broker_endpoint(b)
            if e is not None:
                out.append(e)
        return out

    def listed_brokers(self) -> list[BrokerEndpoint]:
        """The brokers of a Metadata response: the live ones, and for a moment those that
        left (:meth:`~tierlog.cluster.metadata_cache.MetadataCache.listed_brokers`)."""
        if self.cluster is None:
            return [self.endpoint]
        out = []
        for b, info in sorted(self.cluster.metadata.listed_brokers().items()):
            e = self.broker_endpoint(b, info)
            if e is not None:
                out.append(e)
        return out

    @property
    def controller_id(self) -> int:
        if self.cluster is None:
            return self.node_id
        c = self.cluster.metadata.controller_id
        return -1 if c is None else c

    def current_leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(leader id, leader epoch) of a partition, for KIP-951's ``current_leader``."""
        if self.cluster is not None:
            return self.cluster.metadata.leader(topic, partition)
        p = self.replica_manager.get_partition(topic, partition)
        return None if p is None else (self.node_id, p.leader_epoch)


AsyncResult = Awaitable[Any]
