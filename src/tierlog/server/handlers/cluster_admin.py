"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37) in a cluster: written to
ZooKeeper by :class:`~tierlog.cluster.zk_admin.ZkAdminManager`, answered once the new
partitions have leaders (or the request's timeout passed). The checks and messages are
Kafka's; replication factors and explicit assignments name live brokers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tierlog.cluster.zk_admin import NewClusterTopic
from tierlog.errors import (
    ApiError,
    ConfigError,
    InvalidConfig,
    InvalidRequest,
    InvalidTopic,
    UnknownTopicId,
)
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class
from tierlog.server.replica_manager import INTERNAL_TOPICS

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37
TOPIC_DELETION_DISABLED = 73


def _timeout_ms(req: Any) -> int:
    t = getattr(req, "timeout", 30_000)
    return t if isinstance(t, int) else int(t.total_seconds() * 1000)


def _error(res: dict[str, Any], e: Exception) -> None:
    if isinstance(e, ConfigError):
        res["error_code"], res["error_message"] = InvalidConfig.error_code, str(e)
    elif isinstance(e, ApiError):
        res["error_code"], res["error_message"] = e.error_code, e.message


def create_topics_in_cluster(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    admin = apis.admin
    assert admin is not None
    validate_only = bool(getattr(req, "validate_only", False))
    names = [t.name for t in req.topics]
    results: list[dict[str, Any]] = []
    todo: list[tuple[dict[str, Any], NewClusterTopic]] = []
    for t in req.topics:
        res: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        results.append(res)
        try:
            if names.count(t.name) > 1:
                raise InvalidRequest(f"topic {t.name} is listed more than once")
            if t.name in INTERNAL_TOPICS:
                raise InvalidTopic(f"{t.name} is an internal topic")
            configs: dict[str, str] = {}
            for c in t.configs:
                if c.value is None:
                    raise InvalidConfig(f"null value for config {c.name}")
                configs[c.name] = c.value
            assignment = None
            num, rf = t.num_partitions, t.replication_factor
            if t.assignments:
                if num != -1 or rf != -1:
                    raise InvalidRequest(
                        "both assignments and num_partitions/replication_factor were given"
                    )
                assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            if num == -1:
                num = apis.config.num_partitions
            if rf == -1:
                rf = apis.config.default_replication_factor
            todo.append((res, NewClusterTopic(t.name, num, rf, configs, assignment)))
        except (ApiError, ConfigError) as e:
            _error(res, e)
            res.update(num_partitions=-1, replication_factor=-1, configs=None)

    async def respond() -> Any:
        created = await admin.create_topics(
            [t for _, t in todo], validate_only=validate_only, timeout_ms=_timeout_ms(req)
        )
        for (res, _topic), a in zip(todo, created, strict=True):
            if isinstance(a, ApiError):
                _error(res, a)
                res.update(num_partitions=-1, replication_factor=-1, configs=None)
                continue
            replicas = next(iter(a.partitions.values()), ())
            res.update(
                topic_id=None if validate_only else a.topic_id,
                num_partitions=len(a.partitions),
                replication_factor=len(replicas),
            )
        return build(
            response_class(CREATE_TOPICS, ev.api_version),
            {"throttle_time": 0, "topics": results},
        )

    return respond()


def delete_topics_in_cluster(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    admin = apis.admin
    assert admin is not None
    if hasattr(req, "topic_names"):
        wanted: list[tuple[str | None, Any]] = [(n, None) for n in req.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in req.topics]

    async def respond() -> Any:
        results = []
        for name, topic_id in wanted:
            res: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": 0}
            results.append(res)
            try:
                if name is None:
                    if topic_id is None or topic_id.int == 0:
                        raise InvalidRequest("a topic needs a name or an id")
                    name = apis.topic_name_for_id(topic_id)
                    if name is None:
                        raise UnknownTopicId()
                    res["name"] = name
                if not apis.config.delete_topic_enable:
                    res["error_code"] = TOPIC_DELETION_DISABLED
                    res["error_message"] = "topic deletion is disabled (delete.topic.enable=false)"
                    continue
                if name in INTERNAL_TOPICS:
                    raise InvalidTopic(f"{name} is an internal topic and cannot be deleted")
                res["topic_id"] = await admin.delete_topic(name)
                log.info("topic %s marked for deletion", name)
            except ApiError as e:
                _error(res, e)
        return build(
            response_class(DELETE_TOPICS, ev.api_version),
            {"throttle_time": 0, "responses": results},
        )

    return respond()


def create_partitions_in_cluster(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    admin = apis.admin
    assert admin is not None
    validate_only = bool(getattr(req, "validate_only", False))

    async def respond() -> Any:
        results = []
        for t in req.topics:
            res: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
            results.append(res)
            try:
                if t.name in INTERNAL_TOPICS:
                    raise InvalidTopic(f"cannot add partitions to internal topic {t.name}")
                assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
                await admin.create_partitions(
                    t.name,
                    t.count,
                    assignment,
                    validate_only=validate_only,
                    timeout_ms=_timeout_ms(req),
                )
            except ApiError as e:
                _error(res, e)
        return build(
            response_class(CREATE_PARTITIONS, ev.api_version),
            {"throttle_time": 0, "results": results},
        )

    return respond()
