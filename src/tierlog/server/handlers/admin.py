"""Admin APIs: CreateTopics (19), DeleteTopics (20), DeleteRecords (21) and CreatePartitions
(37); the config APIs are in :mod:`tierlog.server.handlers.configs`.

Single node: the replication factor must be 1 (or -1 for the default), manual assignments
may only name this node. In a cluster, CreateTopics, DeleteTopics and CreatePartitions go
through ZooKeeper (:mod:`tierlog.server.handlers.cluster_admin`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    ApiError,
    ConfigError,
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidRequest,
    InvalidTopic,
    KafkaStorageError,
    OffsetOutOfRange,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from tierlog.log.log_config import LogConfig, format_value
from tierlog.log.topic_names import INTERNAL_TOPICS
from tierlog.log.topic_registry import NewTopic
from tierlog.security.acl_checks import (
    require_create_topic,
    require_topic,
)
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.handlers._results import answered_per_resource, error_of
from tierlog.server.handlers.configs import SOURCE_IDS
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
CREATE_PARTITIONS = 37

TOPIC_DELETION_DISABLED = 73

#: A guard, not a Kafka rule: a single node creating millions of partition directories
#: because of one request (or one flipped bit) would stall every client.
MAX_PARTITIONS_PER_TOPIC = 10_000

# --------------------------------------------------------------------------- topics


def _topic_configs_list(config: LogConfig) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "value": format_value(name, config.values[name]),
            "read_only": False,
            "config_source": SOURCE_IDS.get(config.source_of(name), 0),
            "is_sensitive": False,
        }
        for name in sorted(config.values)
    ]


def _create_failed(res: dict[str, Any], e: ApiError | ConfigError) -> None:
    res["error_code"], res["error_message"] = error_of(e)
    res.update(num_partitions=-1, replication_factor=-1, configs=None)


def handle_create_topics(apis: KafkaApis, ev: Request) -> Any:
    if apis.admin is not None:
        from tierlog.server.handlers.cluster_admin import create_topics_in_cluster

        return create_topics_in_cluster(apis, ev)
    req = ev.request
    lm = apis.log_manager
    validate_only = bool(getattr(req, "validate_only", False))
    names = [t.name for t in req.topics]
    results = []
    valid: list[tuple[dict[str, Any], int, NewTopic]] = []  # (response entry, rf, topic)
    for t in req.topics:
        res: dict[str, Any] = {
            "name": t.name,
            "error_code": 0,
            "error_message": None,
            "topic_id": None,
        }
        try:
            if names.count(t.name) > 1:
                raise InvalidRequest(f"topic {t.name} is listed more than once")
            require_create_topic(apis, t.name)
            num = t.num_partitions
            rf = t.replication_factor
            if t.assignments:
                if num != -1 or rf != -1:
                    raise InvalidRequest(
                        "both assignments and num_partitions/replication_factor were given"
                    )
                for a in t.assignments:
                    if list(a.broker_ids) != [apis.node_id]:
                        raise InvalidReplicationFactor(
                            f"partition {a.partition_index} is assigned to brokers "
                            f"{list(a.broker_ids)}; the only broker is {apis.node_id}"
                        )
                num = len(t.assignments)
            if num == -1:
                num = apis.config.num_partitions
            if rf == -1:
                rf = apis.config.default_replication_factor
            if num <= 0:
                raise InvalidPartitions(f"number of partitions must be at least 1, got {num}")
            if num > MAX_PARTITIONS_PER_TOPIC:
                raise InvalidPartitions(
                    f"{num} partitions is more than this broker allows per topic "
                    f"({MAX_PARTITIONS_PER_TOPIC})"
                )
            if rf != 1:
                raise InvalidReplicationFactor(
                    f"replication factor {rf} is larger than the 1 available broker"
                )
            if t.name in INTERNAL_TOPICS:
                raise InvalidTopic(f"{t.name} is an internal topic")
            configs: dict[str, str] = {}
            for c in t.configs:
                if c.value is None:
                    raise InvalidConfig(f"null value for config {c.name}")
                configs[c.name] = c.value
            valid.append((res, rf, NewTopic(t.name, num, configs)))
        except (ApiError, ConfigError) as e:
            _create_failed(res, e)
        results.append(res)
    # The topics that passed the checks above: created with one topic registry write.
    try:
        created = lm.create_topics([v[2] for v in valid], validate_only=validate_only)
    except OSError as e:
        log.error("create topics %s failed: %s", [v[2].name for v in valid], e)
        created = [KafkaStorageError(str(e)) for _ in valid]
    for (res, rf, new), info in zip(valid, created, strict=True):
        if isinstance(info, ApiError):
            _create_failed(res, info)
            continue
        res.update(
            topic_id=None if validate_only else info.topic_id,
            num_partitions=new.num_partitions,
            replication_factor=rf,
            configs=_topic_configs_list(info.config),
        )
        if not validate_only:
            log.info("created topic %s with %d partitions", new.name, new.num_partitions)
            apis.topic_changed(new.name)
    return build(
        response_class(CREATE_TOPICS, ev.api_version), {"throttle_time": 0, "topics": results}
    )


def handle_delete_topics(apis: KafkaApis, ev: Request) -> Any:
    if apis.admin is not None:
        from tierlog.server.handlers.cluster_admin import delete_topics_in_cluster

        return delete_topics_in_cluster(apis, ev)
    req = ev.request
    lm = apis.log_manager
    wanted: list[tuple[str | None, Any]] = []
    if hasattr(req, "topic_names"):
        wanted = [(n, None) for n in req.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    results = []
    for name, topic_id in wanted:
        res: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": 0}
        with answered_per_resource(res, f"delete topic {name or topic_id}"):
            if name is None:
                if topic_id is None or topic_id.int == 0:
                    raise InvalidRequest("a topic needs a name or an id")
                name = apis.topic_name_for_id(topic_id)
                if name is None:
                    raise UnknownTopicId()
                res["name"] = name
            require_topic(apis, AclOperation.DELETE, name)
            info = lm.topic(name)
            if info is None:
                raise UnknownTopicOrPartition()
            res["topic_id"] = info.topic_id
            if not apis.config.delete_topic_enable:
                res["error_code"] = TOPIC_DELETION_DISABLED
                res["error_message"] = "topic deletion is disabled (delete.topic.enable=false)"
                results.append(res)
                continue
            if name in INTERNAL_TOPICS:
                raise InvalidTopic(f"{name} is an internal topic and cannot be deleted")
            # Tiered: the remote data is owed a deletion before the topic goes (a crash in
            # between resumes it at startup), and deleted in the background after.
            pending = apis.tiered.before_topic_deleted(info) if apis.tiered is not None else None
            lm.delete_topic(name)
            log.info("deleted topic %s", name)
            apis.topic_changed(name)
            if apis.tiered is not None:
                apis.tiered.after_topic_deleted(pending)
        results.append(res)
    return build(
        response_class(DELETE_TOPICS, ev.api_version), {"throttle_time": 0, "responses": results}
    )


def handle_create_partitions(apis: KafkaApis, ev: Request) -> Any:
    if apis.admin is not None:
        from tierlog.server.handlers.cluster_admin import create_partitions_in_cluster

        return create_partitions_in_cluster(apis, ev)
    req = ev.request
    lm = apis.log_manager
    validate_only = bool(getattr(req, "validate_only", False))
    results = []
    for t in req.topics:
        res: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        with answered_per_resource(res, f"create partitions of {t.name}"):
            require_topic(apis, AclOperation.ALTER, t.name)
            info = lm.topic(t.name)
            if info is None:
                raise UnknownTopicOrPartition()
            if t.name in INTERNAL_TOPICS:
                raise InvalidTopic(f"cannot add partitions to internal topic {t.name}")
            if t.count < info.num_partitions:
                raise InvalidPartitions(
                    f"topic {t.name} has {info.num_partitions} partitions; "
                    f"the count can only grow, not become {t.count}"
                )
            if t.count == info.num_partitions:
                raise InvalidPartitions(f"topic {t.name} already has {t.count} partitions")
            if t.count > MAX_PARTITIONS_PER_TOPIC:
                raise InvalidPartitions(
                    f"{t.count} partitions is more than this broker allows per topic "
                    f"({MAX_PARTITIONS_PER_TOPIC})"
                )
            if t.assignments:
                if len(t.assignments) != t.count - info.num_partitions:
                    raise InvalidRequest("one assignment is needed per new partition")
                for a in t.assignments:
                    if list(a.broker_ids) != [apis.node_id]:
                        raise InvalidReplicationFactor(
                            f"assignment {list(a.broker_ids)} names a broker other than "
                            f"{apis.node_id}"
                        )
            if not validate_only:
                lm.create_partitions(t.name, t.count)
                log.info("topic %s now has %d partitions", t.name, t.count)
                apis.topic_changed(t.name)
        results.append(res)
    return build(
        response_class(CREATE_PARTITIONS, ev.api_version), {"throttle_time": 0, "results": results}
    )


def handle_delete_records(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    rm = apis.replica_manager
    topics = []
    moved = False
    for t in req.topics:
        parts = []
        for p in t.partitions:
            res: dict[str, Any] = {
                "partition_index": p.partition_index,
                "low_watermark": -1,
                "error_code": 0,
            }
            try:
                require_topic(apis, AclOperation.DELETE, t.name)
                part = rm.get_partition(t.name, p.partition_index)
                if part is None:
                    raise UnknownTopicOrPartition()
                if t.name in INTERNAL_TOPICS:
                    raise InvalidTopic(f"cannot delete records of internal topic {t.name}")
                lg = part.log
                offset = p.offset
                hw = lg.high_watermark
                if offset == -1:
                    offset = hw
                if offset < 0 or offset > hw:
                    raise OffsetOutOfRange(f"offset {p.offset} is outside [0, high watermark {hw}]")
                res["low_watermark"] = int(lg.delete_records_before(offset))
                moved = True
                part.wake_waiters()
            except ApiError as e:
                res["error_code"] = e.error_code
            except OSError as e:
                log.error("DeleteRecords on %s-%d failed: %s", t.name, p.partition_index, e)
                res["error_code"] = KafkaStorageError.error_code
            parts.append(res)
        topics.append({"name": t.name, "partitions": parts})
    response = build(
        response_class(DELETE_RECORDS, ev.api_version), {"throttle_time": 0, "topics": topics}
    )
    if not moved:
        return response

    async def checkpoint() -> Any:
        # Make the new log start offsets durable before answering: with tiered storage the
        # expiration task deletes the remote data below them, which a restart with a stale
        # checkpoint must not offer to consumers again.
        try:
            await asyncio.to_thread(apis.log_manager.checkpoint_log_start_offsets)
        except Exception:
            log.exception("writing the log start offset checkpoints failed")
        return response

    return checkpoint()
