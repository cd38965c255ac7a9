"""Metadata (3) and DescribeCluster (60): this node is every partition's leader and the
controller.

Metadata creates unknown topics when the broker allows it (``auto.create.topics.enable``) and
the request does too (``allow_auto_topic_creation``, v4+), with ``num.partitions``
partitions, and answers them at once (the topic exists when the response leaves).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import typing
from typing import TYPE_CHECKING, Any

from tierlog.errors import ApiError, InvalidTopic, UnknownTopicId, UnknownTopicOrPartition
from tierlog.protocol import api_versions_response
from tierlog.protocol._writer import encode_entities
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class
from tierlog.server.replica_manager import INTERNAL_TOPICS

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

METADATA = 3
DESCRIBE_CLUSTER = 60
#: Kafka's "authorized operations not requested" marker.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _broker(apis: KafkaApis) -> dict[str, Any]:
    e = apis.endpoint
    return {
        "node_id": e.node_id,
        "broker_id": e.node_id,
        "host": e.host,
        "port": e.port,
        "rack": e.rack,
    }


def topic_metadata(
    apis: KafkaApis, name: str, version: int, *, error_code: int = 0
) -> dict[str, Any]:
    """The Metadata entry of one existing topic (every partition led by this node)."""
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
    """Create ``name`` when auto creation is on; the error code for its metadata entry."""
    if not (allow and apis.config.auto_create_topics_enable) or name in INTERNAL_TOPICS:
        return UnknownTopicOrPartition.error_code
    try:
        apis.log_manager.create_topic(name, apis.config.num_partitions, {})
    except ApiError as e:
        if apis.log_manager.topic(name) is not None:  # lost a race: it exists now
            return 0
        return e.error_code
    log.info("auto-created topic %s with %d partitions", name, apis.config.num_partitions)
    apis.topic_changed(name)
    return 0


def handle_metadata(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    lm = apis.log_manager
    allow = bool(getattr(req, "allow_auto_topic_creation", True))
    requested = req.topics
    topics: list[dict[str, Any]] = []
    if requested is None or (version == 0 and not requested):
        for info in lm.topics().values():
            topics.append(topic_metadata(apis, info.name, version))
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
            if lm.topic(name) is None:
                code = maybe_create_topic(apis, name, allow)
                if code:
                    topics.append(
                        {"error_code": code, "name": name, "topic_id": None, "partitions": []}
                    )
                    continue
            topics.append(topic_metadata(apis, name, version))
    cls = response_class(METADATA, version)
    return build(
        cls,
        {
            "throttle_time": 0,
            "brokers": [_broker(apis)],
            "cluster_id": apis.cluster_id,
            "controller_id": apis.node_id,
            "topics": topics,
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
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
    # A single node is broker and controller at once: the same endpoint for both types.
    return build(
        cls,
        {
            "throttle_time": 0,
            "error_code": 0,
            "endpoint_type": endpoint_type,
            "cluster_id": apis.cluster_id,
            "controller_id": apis.node_id,
            "brokers": [{**_broker(apis), "is_fenced": False}],
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        },
    )


API_VERSIONS = 18


def handle_api_versions(apis: KafkaApis, ev: Request) -> Any:
    """The advertised table (tierlog.protocol.api_versions); unsupported ApiVersions versions
    never get here (the connection answers them with a v0 body and error 35)."""
    return api_versions_response(ev.api_version)
