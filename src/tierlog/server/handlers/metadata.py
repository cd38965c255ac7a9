"""Metadata (3) and DescribeCluster (60).

A single node is every partition's leader and the controller; its answers come from the log
manager, the partition entities built once per partition count. In a cluster they come from the
metadata cache (ZooKeeper's state): live brokers, the controller, each partition's leader,
leader epoch, replicas, ISR and offline replicas (replicas whose broker is down).

Metadata creates unknown topics when the broker allows it (``auto.create.topics.enable``) and
the request does too (``allow_auto_topic_creation``, v4+), with ``num.partitions``
partitions (and ``default.replication.factor`` replicas in a cluster).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import typing
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    ApiError,
    InvalidTopic,
    LeaderNotAvailable,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from tierlog.log.topic_names import INTERNAL_TOPICS
from tierlog.protocol import api_versions_response
from tierlog.protocol._writer import encode_entities
from tierlog.security.acl_checks import (
    AUTHORIZED_OPERATIONS_OMITTED,
    authorized_operations,
    cluster_error,
    create_topic_error,
    topic_error,
)
from tierlog.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

METADATA = 3
DESCRIBE_CLUSTER = 60


def _brokers(apis: KafkaApis, *, listed: bool = False) -> list[dict[str, Any]]:
    """The live brokers; ``listed``: Metadata's list, where a broker that just left stays a
    moment (see :mod:`tierlog.cluster.metadata_cache`)."""
    return [
        {"node_id": e.node_id, "broker_id": e.node_id, "host": e.host, "port": e.port,
         "rack": e.rack}
        for e in (apis.listed_brokers() if listed else apis.alive_brokers())
    ]  # fmt: skip


def cluster_authorized_operations(apis: KafkaApis, requested: bool) -> int:
    """The cluster's authorized operations for Metadata and DescribeCluster (Kafka's
    ``KafkaApis``): the omitted marker unless asked, 0 without DESCRIBE on the cluster."""
    if not requested:
        return AUTHORIZED_OPERATIONS_OMITTED
    if cluster_error(apis, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(apis, ResourceType.CLUSTER, CLUSTER_NAME)


def topic_metadata(
    apis: KafkaApis,
    name: str,
    version: int,
    *,
    error_code: int = 0,
    include_authorized_operations: bool = False,
) -> dict[str, Any]:
    """The Metadata entry of one existing topic (with the requester's authorized operations on
    it when asked, else Kafka's omitted marker)."""
    entry = _topic_metadata(apis, name, version, error_code)
    if include_authorized_operations and not entry["error_code"]:
        entry["topic_authorized_operations"] = authorized_operations(apis, ResourceType.TOPIC, name)
    return entry


def _topic_metadata(apis: KafkaApis, name: str, version: int, error_code: int) -> dict[str, Any]:
    if apis.cluster is not None:
        return _cluster_topic_metadata(apis, name, error_code)
    info = apis.log_manager.topic(name)
    if info is None:
        return {
            "error_code": UnknownTopicOrPartition.error_code,
            "name": name,
            "topic_id": None,
            "partitions": [],
        }
    return {
        "error_code": error_code,
        "name": name,
        "topic_id": info.topic_id,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": _partitions(version, info.num_partitions, apis.node_id),
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _cluster_topic_metadata(apis: KafkaApis, name: str, error_code: int) -> dict[str, Any]:
    assert apis.cluster is not None
    md = apis.cluster.metadata
    t = md.topic(name)
    if t is None:
        return {
            "error_code": UnknownTopicOrPartition.error_code,
            "name": name,
            "topic_id": None,
            "partitions": [],
        }
    live = md.brokers
    partitions = []
    for p in t.partitions.values():
        leader = p.leader if p.leader in live else -1
        partitions.append(
            {
                "error_code": 0 if leader >= 0 else LeaderNotAvailable.error_code,
                "partition_index": p.partition,
                "leader_id": leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": [r for r in p.replicas if r not in live],
            }
        )
    return {
        "error_code": error_code,
        "name": name,
        "topic_id": t.topic_id,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _array_entity(cls: type[Any], name: str) -> type[Any]:
    """The entity class of the array field ``name`` of ``cls`` (``tuple[Entity, ...]``)."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    return typing.get_args(field.type)[0]  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=1024)
def _partitions(version: int, count: int, node: int) -> tuple[Any, ...]:
    """The partitions of a topic of ``count`` partitions, all led by ``node``: the same
    immutable entities for every topic of that size, built once (Metadata for all topics
    would otherwise build one per partition per request)."""
    topic_cls = _array_entity(response_class(METADATA, version), "topics")
    cls = _array_entity(topic_cls, "partitions")
    entities = tuple(
        build(
            cls,
            {
                "error_code": 0,
                "partition_index": i,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            },
        )
        for i in range(count)
    )
    return encode_entities(cls, entities)  # encoded once too


def maybe_create_topic(apis: KafkaApis, name: str, allow: bool) -> int:
    """Create ``name`` when auto creation is on; the error code for its metadata entry (in a
    cluster LEADER_NOT_AVAILABLE: the creation goes on in the background and the client asks
    again, as with Kafka)."""
    if not (allow and apis.config.auto_create_topics_enable) or name in INTERNAL_TOPICS:
        return UnknownTopicOrPartition.error_code
    if apis.admin is not None:
        return _auto_create_in_cluster(apis, name)
    try:
        apis.log_manager.create_topic(name, apis.config.num_partitions, {})
    except ApiError as e:
        if apis.log_manager.topic(name) is not None:  # lost a race: it exists now
            return 0
        return e.error_code
    log.info("auto-created topic %s with %d partitions", name, apis.config.num_partitions)
    apis.topic_changed(name)
    return 0


def _auto_create_in_cluster(apis: KafkaApis, name: str) -> int:
    from tierlog.cluster.zk_admin import NewClusterTopic

    admin = apis.admin
    assert admin is not None
    c = apis.config
    rf = min(c.default_replication_factor, max(1, len(apis.alive_brokers())))
    topic = NewClusterTopic(name, c.num_partitions, rf)

    async def create() -> None:
        try:
            (result,) = await admin.create_topics([topic], validate_only=False, timeout_ms=0)
            if isinstance(result, ApiError):
                log.info("auto-creation of topic %s: %s", name, result)
        except Exception as e:
            log.warning("auto-creation of topic %s failed: %s", name, e)

    apis.in_background(f"create topic {name}", create())
    return LeaderNotAvailable.error_code


def _topic_exists(apis: KafkaApis, name: str) -> bool:
    if apis.cluster is not None:
        return apis.cluster.metadata.topic(name) is not None
    return apis.log_manager.topic(name) is not None


def _all_topic_names(apis: KafkaApis) -> list[str]:
    if apis.cluster is not None:
        return [t.name for t in apis.cluster.metadata.topics()]
    return [info.name for info in apis.log_manager.topics().values()]


def handle_metadata(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    allow = bool(getattr(req, "allow_auto_topic_creation", True))
    requested = req.topics
    topic_ops = bool(getattr(req, "include_topic_authorized_operations", False))
    topics: list[dict[str, Any]] = []
    if requested is None or (version == 0 and not requested):
        for topic_name in _all_topic_names(apis):
            if topic_error(apis, AclOperation.DESCRIBE, topic_name):
                continue  # hidden from who may not describe it
            topics.append(
                topic_metadata(apis, topic_name, version, include_authorized_operations=topic_ops)
            )
    else:
        for t in requested:
            name = t.name
            topic_id = getattr(t, "topic_id", None)
            if name is None:
                if topic_id is None or topic_id.int == 0:
                    topics.append(
                        {
                            "error_code": InvalidTopic.error_code,
                            "name": None,
                            "topic_id": topic_id,
                            "partitions": [],
                        }
                    )
                    continue
                found = apis.topic_name_for_id(topic_id)
                if found is None:
                    topics.append(
                        {
                            "error_code": UnknownTopicId.error_code,
                            "name": None,
                            "topic_id": topic_id,
                            "partitions": [],
                        }
                    )
                    continue
                name = found
            denied = topic_error(apis, AclOperation.DESCRIBE, name)
            auto_create = allow and apis.config.auto_create_topics_enable
            if not denied and auto_create and not _topic_exists(apis, name):
                denied = create_topic_error(apis, name)
            if denied:
                topics.append(
                    {"error_code": denied, "name": name, "topic_id": topic_id, "partitions": []}
                )
                continue
            if not _topic_exists(apis, name):
                code = maybe_create_topic(apis, name, allow)
                if code:
                    topics.append(
                        {"error_code": code, "name": name, "topic_id": None, "partitions": []}
                    )
                    continue
            topics.append(
                topic_metadata(apis, name, version, include_authorized_operations=topic_ops)
            )
    cluster_ops = bool(getattr(req, "include_cluster_authorized_operations", False))
    cls = response_class(METADATA, version)
    return build(
        cls,
        {
            "throttle_time": 0,
            "brokers": _brokers(apis, listed=True),
            "cluster_id": apis.cluster_id,
            "controller_id": apis.controller_id,
            "topics": topics,
            "cluster_authorized_operations": cluster_authorized_operations(apis, cluster_ops),
        },
    )


def handle_describe_cluster(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    endpoint_type = int(getattr(req, "endpoint_type", 1))
    cls = response_class(DESCRIBE_CLUSTER, ev.api_version)
    if endpoint_type not in (1, 2):
        return build(
            cls,
            {
                "error_code": 35,
                "error_message": "unknown endpoint type",
                "endpoint_type": endpoint_type,
                "cluster_id": apis.cluster_id,
                "brokers": [],
            },
        )
    # ZooKeeper mode has no separate controller endpoints: the same brokers for both types.
    return build(
        cls,
        {
            "throttle_time": 0,
            "error_code": 0,
            "endpoint_type": endpoint_type,
            "cluster_id": apis.cluster_id,
            "controller_id": apis.controller_id,
            "brokers": [{**b, "is_fenced": False} for b in _brokers(apis)],
            "cluster_authorized_operations": cluster_authorized_operations(
                apis, bool(getattr(req, "include_cluster_authorized_operations", False))
            ),
        },
    )


API_VERSIONS = 18


def handle_api_versions(apis: KafkaApis, ev: Request) -> Any:
    """The advertised table (tierlog.protocol.api_versions); unsupported ApiVersions versions
    never get here (the connection answers them with a v0 body and error 35)."""
    return api_versions_response(ev.api_version)
