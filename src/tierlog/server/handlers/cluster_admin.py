"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37) in a cluster: written to
ZooKeeper by :class:`~tierlog.cluster.zk_admin.ZkAdminManager`, answered once the new
partitions have leaders (or the request's timeout passed). The checks and messages are
Kafka's; replication factors and explicit assignments name live brokers.

ElectLeaders (43), on a single node too: preferred-leader elections (type 0) go to the
controller through ``/admin/preferred_replica_election``; a single node's partitions are all
led by their preferred (only) replica: ELECTION_NOT_NEEDED. Unclean elections (type 1) are
refused with INVALID_REQUEST: the controller elects unclean leaders only where
``unclean.leader.election.enable`` allows it.
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
    UnknownTopicOrPartition,
)
from tierlog.log.topic_names import INTERNAL_TOPICS
from tierlog.security.acl_checks import (
    cluster_error,
    identity,
    require_create_topic,
    require_topic,
)
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build, request_timeout_ms
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37
ELECT_LEADERS = 43
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
ELECTION_NOT_NEEDED = 84
TOPIC_DELETION_DISABLED = 73


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
            require_create_topic(apis, t.name)
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
            [t for _, t in todo], validate_only=validate_only, timeout_ms=request_timeout_ms(req)
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
    who = identity(apis)  # the checks run after awaits

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
                require_topic(who, AclOperation.DELETE, name)
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
    who = identity(apis)  # the checks run after awaits

    async def respond() -> Any:
        results = []
        for t in req.topics:
            res: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
            results.append(res)
            try:
                require_topic(who, AclOperation.ALTER, t.name)
                if t.name in INTERNAL_TOPICS:
                    raise InvalidTopic(f"cannot add partitions to internal topic {t.name}")
                assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
                await admin.create_partitions(
                    t.name,
                    t.count,
                    assignment,
                    validate_only=validate_only,
                    timeout_ms=request_timeout_ms(req),
                )
            except ApiError as e:
                _error(res, e)
        return build(
            response_class(CREATE_PARTITIONS, ev.api_version),
            {"throttle_time": 0, "results": results},
        )

    return respond()


def handle_elect_leaders(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(ELECT_LEADERS, ev.api_version)
    election_type = int(getattr(req, "election_type", 0))
    if req.topic_partitions is None:  # every partition
        if apis.cluster is not None:
            wanted = [(t.name, p) for t in apis.cluster.metadata.topics() for p in t.partitions]
        else:
            wanted = [
                (name, p)
                for name, info in apis.log_manager.topics().items()
                for p in range(info.num_partitions)
            ]
    else:
        wanted = [(t.topic, int(p)) for t in req.topic_partitions for p in t.partitions]

    def response(
        codes: dict[tuple[str, int], int], message: str | None = None, top: int = 0
    ) -> Any:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), code in codes.items():
            by_topic.setdefault(t, []).append(
                {"partition_id": p, "error_code": code, "error_message": message if code else None}
            )
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": top,
                "replica_election_results": [
                    {"topic": t, "partition_result": ps} for t, ps in by_topic.items()
                ],
            },
        )

    if denied := cluster_error(apis, AclOperation.ALTER):
        return response(dict.fromkeys(wanted, denied), "Cluster authorization failed.", denied)
    if election_type != 0:
        return response(
            {tp: InvalidRequest.error_code for tp in wanted},
            "unclean elections are made by the controller where "
            "unclean.leader.election.enable allows them",
        )
    if apis.admin is None:
        codes = {
            (t, p): ELECTION_NOT_NEEDED
            if apis.replica_manager.get_partition(t, p) is not None
            else UnknownTopicOrPartition.error_code
            for t, p in wanted
        }
        return response(codes)
    admin = apis.admin

    async def respond() -> Any:
        return response(await admin.elect_preferred_leaders(wanted, request_timeout_ms(req)))

    return respond()


def _no_cluster(apis: KafkaApis, api_key: int, ev: Request, fields: dict[str, Any]) -> Any:
    return build(
        response_class(api_key, ev.api_version),
        {
            "throttle_time": 0,
            "error_code": InvalidRequest.error_code,
            "error_message": "a single node has no replicas to move",
            **fields,
        },
    )


def _refused(api_key: int, ev: Request, code: int, fields: dict[str, Any]) -> Any:
    return build(
        response_class(api_key, ev.api_version),
        {"throttle_time": 0, "error_code": code, "error_message": None, **fields},
    )


def handle_alter_partition_reassignments(apis: KafkaApis, ev: Request) -> Any:
    """AlterPartitionReassignments (45): KIP-455 reassignments through ZooKeeper."""
    req = ev.request
    admin = apis.admin
    if denied := cluster_error(apis, AclOperation.ALTER):
        return _refused(ALTER_PARTITION_REASSIGNMENTS, ev, denied, {"responses": []})
    if admin is None:
        return _no_cluster(apis, ALTER_PARTITION_REASSIGNMENTS, ev, {"responses": []})

    async def respond() -> Any:
        responses = []
        for t in req.topics:
            targets = {
                int(p.partition_index): None if p.replicas is None else [int(r) for r in p.replicas]
                for p in t.partitions
            }
            results = await admin.alter_reassignments(t.name, targets)
            responses.append(
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p,
                            "error_code": 0 if e is None else e.error_code,
                            "error_message": None if e is None else e.message,
                        }
                        for p, e in results.items()
                    ],
                }
            )
        return build(
            response_class(ALTER_PARTITION_REASSIGNMENTS, ev.api_version),
            {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses},
        )

    return respond()


def handle_list_partition_reassignments(apis: KafkaApis, ev: Request) -> Any:
    """ListPartitionReassignments (46): the reassignments in progress (replicas, adding,
    removing), from the metadata."""
    req = ev.request
    admin = apis.admin
    if denied := cluster_error(apis, AclOperation.DESCRIBE):
        return _refused(LIST_PARTITION_REASSIGNMENTS, ev, denied, {"topics": []})
    if admin is None:
        return _no_cluster(apis, LIST_PARTITION_REASSIGNMENTS, ev, {"topics": []})
    wanted = (
        None
        if req.topics is None
        else {t.name: [int(p) for p in t.partition_indexes] for t in req.topics}
    )
    ongoing = admin.ongoing_reassignments(wanted)
    return build(
        response_class(LIST_PARTITION_REASSIGNMENTS, ev.api_version),
        {
            "throttle_time": 0,
            "error_code": 0,
            "error_message": None,
            "topics": [
                {
                    "name": t,
                    "partitions": [
                        {
                            "partition_index": p,
                            "replicas": list(r),
                            "adding_replicas": list(a),
                            "removing_replicas": list(rm),
                        }
                        for p, (r, a, rm) in ps.items()
                    ],
                }
                for t, ps in ongoing.items()
            ],
        },
    )
