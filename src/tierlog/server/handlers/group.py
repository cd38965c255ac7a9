"""Consumer group APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), OffsetCommit (8), OffsetFetch (9),
DeleteGroups (42).

This node coordinates every group; the handlers only translate kio messages to and from the
plain values of :class:`~tierlog.coordinator.group.group_coordinator.GroupCoordinator` (the
membership protocol and OffsetCommit) and of its
:class:`~tierlog.coordinator.group.group_metadata_manager.GroupMetadataManager` (OffsetFetch,
DescribeGroups, ListGroups, DeleteGroups, the partition of a group). FindCoordinator for
a transactional id (key type 1) answers the leader of its ``__transaction_state`` partition
(the topic is created on first use, :mod:`tierlog.server.txn_state_topic`). OffsetFetch with
``require_stable`` (v7+) answers UNSTABLE_OFFSET_COMMIT for a partition whose offset an open
transaction holds.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tierlog.coordinator.transaction import TRANSACTION_STATE_TOPIC_NAME
from tierlog.errors import (
    CoordinatorNotAvailable,
    GroupIdNotFound,
    InvalidRequest,
    UnknownTopicOrPartition,
    UnstableOffsetCommit,
)
from tierlog.log.topic_names import GROUP_METADATA_TOPIC_NAME
from tierlog.security.acl_checks import (
    AUTHORIZED_OPERATIONS_OMITTED,
    authorized_operations,
    cluster_error,
    group_error,
    topic_error,
    transactional_id_error,
)
from tierlog.security.authorizer import AclOperation, ResourceType
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class
from tierlog.server.offset_store import ensure_offsets_topic_in_cluster
from tierlog.server.txn_state_topic import ensure_transaction_state_topic

if TYPE_CHECKING:
    from tierlog.coordinator.group.group_coordinator import GroupCoordinator
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42

COORDINATOR_KEY_GROUP = 0
COORDINATOR_KEY_TRANSACTION = 1


def _ms(v: Any) -> int:
    if isinstance(v, int):
        return v
    return round(float(v.total_seconds()) * 1000)


def _coordinator(apis: KafkaApis) -> GroupCoordinator:
    gc = apis.group_coordinator
    if gc is None:
        raise CoordinatorNotAvailable("the group coordinator is not running")
    return gc


# --------------------------------------------------------------------------- FindCoordinator


def handle_find_coordinator(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    cls = response_class(FIND_COORDINATOR, version)
    key_type = getattr(req, "key_type", COORDINATOR_KEY_GROUP)
    e = apis.endpoint

    def answer(key: str) -> dict[str, Any]:
        if key_type == COORDINATOR_KEY_TRANSACTION:
            denied = transactional_id_error(apis, AclOperation.DESCRIBE, key)
        else:
            denied = group_error(apis, AclOperation.DESCRIBE, key)
        if denied:
            return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": denied}
        if key_type == COORDINATOR_KEY_TRANSACTION:
            return _transaction_coordinator(apis, key)
        if key_type != COORDINATOR_KEY_GROUP:
            return {
                "key": key,
                "node_id": -1,
                "host": "",
                "port": -1,
                "error_code": InvalidRequest.error_code,
                "error_message": f"unknown coordinator key type {key_type}",
            }
        if apis.group_coordinator is None:
            return {
                "key": key,
                "node_id": -1,
                "host": "",
                "port": -1,
                "error_code": CoordinatorNotAvailable.error_code,
                "error_message": None,
            }
        if apis.cluster is not None:
            return _cluster_coordinator(apis, key)
        return {
            "key": key,
            "node_id": e.node_id,
            "host": e.host,
            "port": e.port,
            "error_code": 0,
            "error_message": None,
        }

    if version >= 4:
        coordinators = [answer(k) for k in req.coordinator_keys]
        return build(cls, {"throttle_time": 0, "coordinators": coordinators})
    return build(cls, {"throttle_time": 0, **answer(req.key)})


def _transaction_coordinator(apis: KafkaApis, key: str) -> dict[str, Any]:
    """The leader of the transactional id's ``__transaction_state`` partition;
    COORDINATOR_NOT_AVAILABLE while the topic is being created or has no leader there."""
    unavailable = {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": CoordinatorNotAvailable.error_code,
        "error_message": None,
    }
    tc = getattr(apis, "txn_coordinator", None)
    if not key:
        return {**unavailable, "error_code": InvalidRequest.error_code,
                "error_message": "empty transactional id"}  # fmt: skip
    if tc is None or not ensure_transaction_state_topic(apis):
        return unavailable
    if apis.cluster is None:
        e = apis.endpoint
        return {**unavailable, "node_id": e.node_id, "host": e.host, "port": e.port,
                "error_code": 0}  # fmt: skip
    leader = apis.cluster.metadata.leader(
        TRANSACTION_STATE_TOPIC_NAME, tc.txn_manager.partition_for(key)
    )
    endpoint = apis.broker_endpoint(leader[0]) if leader is not None else None
    if endpoint is None:
        return unavailable
    return {**unavailable, "node_id": endpoint.node_id, "host": endpoint.host,
            "port": endpoint.port, "error_code": 0}  # fmt: skip


def _cluster_coordinator(apis: KafkaApis, key: str) -> dict[str, Any]:
    """The leader of the group's ``__consumer_offsets`` partition (Kafka's FindCoordinator in
    a cluster); COORDINATOR_NOT_AVAILABLE while the topic is being created or the partition
    has no live leader (the client asks again)."""
    assert apis.cluster is not None and apis.group_coordinator is not None
    unavailable = {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": CoordinatorNotAvailable.error_code,
        "error_message": None,
    }
    md = apis.cluster.metadata
    if md.topic(GROUP_METADATA_TOPIC_NAME) is None:
        ensure_offsets_topic_in_cluster(apis)
        return unavailable
    leader = md.leader(
        GROUP_METADATA_TOPIC_NAME, apis.group_coordinator.group_manager.partition_for(key)
    )
    endpoint = apis.broker_endpoint(leader[0]) if leader is not None else None
    if endpoint is None:
        return unavailable
    return {
        "key": key,
        "node_id": endpoint.node_id,
        "host": endpoint.host,
        "port": endpoint.port,
        "error_code": 0,
        "error_message": None,
    }


# --------------------------------------------------------------------------- membership


def handle_join_group(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    cls = response_class(JOIN_GROUP, version)
    gc = apis.group_coordinator
    denied = group_error(apis, AclOperation.READ, req.group_id)
    if gc is None or denied:
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": denied or CoordinatorNotAvailable.error_code,
                "member_id": req.member_id,
                "leader": "",
                "members": [],
            },
        )
    session_ms = _ms(req.session_timeout)
    rebalance = getattr(req, "rebalance_timeout", None)
    rebalance_ms = session_ms if rebalance is None else _ms(rebalance)
    coro = gc.join_group(
        req.group_id,
        req.member_id,
        getattr(req, "group_instance_id", None),
        req.protocol_type,
        [(p.name, bytes(p.metadata)) for p in req.protocols],
        session_ms,
        rebalance_ms,
        ev.client_id or "",
        apis.client_host,
        version >= 4,
        getattr(req, "reason", None),
        supports_skip_assignment=version >= 9,
    )

    async def respond() -> Any:
        r = await coro
        legacy = version < 7
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": r.error_code,
                "generation_id": r.generation_id,
                "protocol_type": r.protocol_type,
                "protocol_name": (r.protocol_name or "") if legacy else r.protocol_name,
                "leader": r.leader_id,
                "skip_assignment": r.skip_assignment,
                "member_id": r.member_id,
                "members": [
                    {"member_id": m, "group_instance_id": i, "metadata": md}
                    for m, i, md in r.members
                ],
            },
        )

    return respond()


def handle_sync_group(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(SYNC_GROUP, ev.api_version)
    gc = apis.group_coordinator
    denied = group_error(apis, AclOperation.READ, req.group_id)
    if gc is None or denied:
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": denied or CoordinatorNotAvailable.error_code,
                "assignment": b"",
            },
        )
    coro = gc.sync_group(
        req.group_id,
        req.generation_id,
        req.member_id,
        getattr(req, "group_instance_id", None),
        getattr(req, "protocol_type", None),
        getattr(req, "protocol_name", None),
        {a.member_id: bytes(a.assignment) for a in req.assignments},
    )

    async def respond() -> Any:
        r = await coro
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": r.error_code,
                "protocol_type": r.protocol_type,
                "protocol_name": r.protocol_name,
                "assignment": r.assignment,
            },
        )

    return respond()


def handle_heartbeat(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(HEARTBEAT, ev.api_version)
    gc = apis.group_coordinator
    code = group_error(apis, AclOperation.READ, req.group_id) or (
        CoordinatorNotAvailable.error_code
        if gc is None
        else gc.heartbeat(
            req.group_id,
            req.generation_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
        )
    )
    return build(cls, {"throttle_time": 0, "error_code": code})


def handle_leave_group(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    cls = response_class(LEAVE_GROUP, version)
    gc = apis.group_coordinator
    if version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        members = [(req.member_id, None)]
    denied = group_error(apis, AclOperation.READ, req.group_id)
    if gc is None or denied:
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": denied or CoordinatorNotAvailable.error_code,
                "members": [],
            },
        )
    coro = gc.leave_group(req.group_id, members)

    async def respond() -> Any:
        top, results = await coro
        if version < 3 and top == 0 and results:
            top = results[0][2]
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": top,
                "members": [
                    {"member_id": m, "group_instance_id": i, "error_code": c} for m, i, c in results
                ],
            },
        )

    return respond()


# --------------------------------------------------------------------------- offsets


def commit_request_offsets(
    topics: Any,
) -> tuple[dict[tuple[str, int], tuple[int, int, str | None]], list[tuple[str, list[int]]]]:
    """The offsets of an (Txn)OffsetCommit request, (topic, partition) -> (offset, leader
    epoch, metadata), and its topics' partitions in request order (for the response)."""
    offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    order: list[tuple[str, list[int]]] = []
    for t in topics:
        idx = []
        for p in t.partitions:
            offsets[(t.name, p.partition_index)] = (
                p.committed_offset,
                getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata,
            )
            idx.append(p.partition_index)
        order.append((t.name, idx))
    return offsets, order


def handle_offset_commit(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(OFFSET_COMMIT, ev.api_version)
    offsets, order = commit_request_offsets(req.topics)

    def response(codes: dict[tuple[str, int], int]) -> Any:
        return build(
            cls,
            {
                "throttle_time": 0,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {"partition_index": p, "error_code": codes.get((name, p), 0)}
                            for p in idx
                        ],
                    }
                    for name, idx in order
                ],
            },
        )

    gc = apis.group_coordinator
    if gc is None:
        return response(dict.fromkeys(offsets, CoordinatorNotAvailable.error_code))
    # READ on the group (else every partition: 30), READ on each topic (else 29).
    group_denied = group_error(apis, AclOperation.READ, req.group_id)
    refused = {
        tp: code
        for tp in offsets
        if (code := group_denied or topic_error(apis, AclOperation.READ, tp[0]))
    }
    # Kafka: a partition the metadata does not know gets UNKNOWN_TOPIC_OR_PARTITION.
    refused.update(
        (tp, UnknownTopicOrPartition.error_code)
        for tp in offsets
        if tp not in refused and not _partition_exists(apis, *tp)
    )
    if refused:
        offsets = {tp: v for tp, v in offsets.items() if tp not in refused}
        if not offsets:
            return response(refused)
    coro = gc.commit_offsets(
        req.group_id,
        req.generation_id_or_member_epoch,
        req.member_id,
        getattr(req, "group_instance_id", None),
        offsets,
    )

    async def respond() -> Any:
        return response({**await coro, **refused})

    return respond()


def _partition_exists(apis: KafkaApis, topic: str, partition: int) -> bool:
    if apis.cluster is not None:
        return apis.cluster.metadata.has_partition(topic, partition)
    info = apis.log_manager.topic(topic)
    return info is not None and 0 <= partition < info.num_partitions


def _fetch_group(
    apis: KafkaApis,
    group_id: str,
    topics: Any,
    member_id: str | None = None,
    member_epoch: int = -1,
    require_stable: bool = False,
) -> tuple[int, list[dict[str, Any]]]:
    """(top-level error, topics) of OffsetFetch for one group: DESCRIBE on the group (else
    30), DESCRIBE on each topic (named partitions get 29, an all-partitions fetch omits it).
    ``member_id``/``member_epoch`` (v9+) are checked for a consumer (KIP-848) group."""
    gc = apis.group_coordinator
    if gc is None:
        return CoordinatorNotAvailable.error_code, []
    wanted: list[tuple[str, int]] | None = (
        None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    )
    denied = group_error(apis, AclOperation.DESCRIBE, group_id)
    err, found = (
        (denied, {})
        if denied
        else gc.offset_manager.fetch_offsets(group_id, wanted, member_id, member_epoch)
    )
    if not err and getattr(apis, "authorizer", None) is not None:
        refused = {n for n, _ in (wanted or found) if topic_error(apis, AclOperation.DESCRIBE, n)}
        if refused and wanted is None:
            found = {tp: v for tp, v in found.items() if tp[0] not in refused}
        elif refused:
            err_parts = {tp: (-1, -1, "") for tp in wanted or () if tp[0] in refused}
            found = {**found, **err_parts}
    else:
        refused = set()
    if err:
        # Older versions have no top-level error: put it on every partition too.
        parts = wanted or []
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, p in parts:
            by_topic.setdefault(name, []).append(
                {
                    "partition_index": p,
                    "committed_offset": -1,
                    "committed_leader_epoch": -1,
                    "metadata": "",
                    "error_code": err,
                }
            )
        return err, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]
    by_topic = {}
    items = found.items() if wanted is None else ((tp, found[tp]) for tp in wanted)
    manager = gc.offset_manager
    for (name, p), (offset, epoch, metadata) in items:
        code = 29 if name in refused else 0  # TOPIC_AUTHORIZATION_FAILED
        if not code and require_stable and manager.has_pending_txn_offsets(group_id, (name, p)):
            code = UnstableOffsetCommit.error_code
            offset, epoch, metadata = -1, -1, ""
        by_topic.setdefault(name, []).append(
            {
                "partition_index": p,
                "committed_offset": offset,
                "committed_leader_epoch": epoch,
                "metadata": metadata,
                "error_code": code,
            }
        )
    return 0, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]


def handle_offset_fetch(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(OFFSET_FETCH, ev.api_version)
    if ev.api_version >= 8:
        groups = []
        stable = bool(getattr(req, "require_stable", False))
        for g in req.groups:
            err, topics = _fetch_group(
                apis,
                g.group_id,
                g.topics,
                getattr(g, "member_id", None),
                getattr(g, "member_epoch", -1),
                stable,
            )
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": err})
        return build(cls, {"throttle_time": 0, "groups": groups})
    err, topics = _fetch_group(
        apis, req.group_id, req.topics, require_stable=bool(getattr(req, "require_stable", False))
    )
    return build(cls, {"throttle_time": 0, "topics": topics, "error_code": err})


# --------------------------------------------------------------------------- admin


def handle_describe_groups(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(DESCRIBE_GROUPS, ev.api_version)
    gc = apis.group_coordinator
    include_ops = bool(getattr(req, "include_authorized_operations", False))
    groups = []
    for group_id in req.groups:
        denied = group_error(apis, AclOperation.DESCRIBE, group_id)
        if gc is None or denied:
            groups.append(
                {
                    "error_code": denied or CoordinatorNotAvailable.error_code,
                    "group_id": group_id,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                }
            )
            continue
        d = gc.group_manager.describe_group(group_id)
        groups.append(
            {
                "error_code": d.error_code,
                "error_message": (
                    f"Group {group_id} is not a classic group."
                    if d.error_code == GroupIdNotFound.error_code
                    else None
                ),
                "group_id": d.group_id,
                "group_state": d.state,
                "protocol_type": d.protocol_type,
                "protocol_data": d.protocol,
                "members": [
                    {
                        "member_id": m,
                        "group_instance_id": i,
                        "client_id": c,
                        "client_host": h,
                        "member_metadata": md,
                        "member_assignment": a,
                    }
                    for m, i, c, h, md, a in d.members
                ],
                "authorized_operations": (
                    authorized_operations(apis, ResourceType.GROUP, group_id)
                    if include_ops and not d.error_code
                    else AUTHORIZED_OPERATIONS_OMITTED
                ),
            }
        )
    return build(cls, {"throttle_time": 0, "groups": groups})


def handle_list_groups(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(LIST_GROUPS, ev.api_version)
    gc = apis.group_coordinator
    if gc is None:
        return build(
            cls,
            {"throttle_time": 0, "error_code": CoordinatorNotAvailable.error_code, "groups": []},
        )
    types = {t.lower() for t in getattr(req, "types_filter", ())}
    states = list(getattr(req, "states_filter", ())) or None
    manager = gc.group_manager
    listed = [] if types and "classic" not in types else manager.list_groups(states)
    consumer = [] if types and "consumer" not in types else manager.list_consumer_groups(states)
    kinds = {g[0]: "classic" for g in listed}
    for group_id in consumer:
        group = manager.consumer_groups[group_id]
        listed.append((group_id, "consumer", group.state.value))
        kinds[group_id] = "consumer"
    if cluster_error(apis, AclOperation.DESCRIBE):  # else only the groups it may describe
        listed = [g for g in listed if not group_error(apis, AclOperation.DESCRIBE, g[0])]
    return build(
        cls,
        {
            "throttle_time": 0,
            "error_code": gc.group_manager.availability_error(),
            "groups": [
                {"group_id": g, "protocol_type": pt, "group_state": s, "group_type": kinds[g]}
                for g, pt, s in listed
            ],
        },
    )


def handle_delete_groups(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(DELETE_GROUPS, ev.api_version)
    names = list(req.groups_names)
    gc = apis.group_coordinator
    if gc is None:
        return build(
            cls,
            {
                "throttle_time": 0,
                "results": [
                    {"group_id": g, "error_code": CoordinatorNotAvailable.error_code} for g in names
                ],
            },
        )
    refused = {g: c for g in names if (c := group_error(apis, AclOperation.DELETE, g))}
    coro = gc.group_manager.delete_groups([g for g in names if g not in refused])

    async def respond() -> Any:
        results = {**await coro, **refused}
        return build(
            cls,
            {
                "throttle_time": 0,
                "results": [{"group_id": g, "error_code": results.get(g, 0)} for g in names],
            },
        )

    return respond()
