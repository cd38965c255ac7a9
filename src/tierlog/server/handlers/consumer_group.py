"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

The handlers translate kio messages to and from the plain values of
:class:`~tierlog.coordinator.group.consumer_group_coordinator.ConsumerGroupCoordinator`.
Topics travel by id on the wire; ids of unknown topics in a heartbeat's owned partitions are
kept as they are (the coordinator only compares them). ACLs as Kafka's: READ on the group
for a heartbeat (and DESCRIBE on the group for ConsumerGroupDescribe).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tierlog.coordinator.group.consumer_group import HeartbeatRequest, TopicImage
from tierlog.coordinator.group.consumer_group_coordinator import topic_images
from tierlog.errors import CoordinatorNotAvailable
from tierlog.log.topic_names import GROUP_METADATA_TOPIC_NAME
from tierlog.security.acl_checks import group_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.cluster.metadata_cache import MetadataCache
    from tierlog.log.log_manager import LogManager
    from tierlog.server.kafka_apis import KafkaApis, Request

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1's member_type: a consumer-protocol member


def _ms(v: Any) -> int:
    if v is None:
        return -1
    if isinstance(v, int):
        return v
    return round(float(v.total_seconds()) * 1000)


def current_topics(log_manager: LogManager, cluster: MetadataCache | None) -> dict[str, TopicImage]:
    """Every topic with its id and partition count, but ``__consumer_offsets`` (what the
    consumer groups' subscriptions resolve against): the cluster's metadata, else the log
    manager's registry (a single node)."""
    entries: dict[str, tuple[uuid.UUID | None, int]] = {}
    if cluster is not None:
        for t in cluster.topics():
            entries[t.name] = (t.topic_id, len(t.partitions))
    else:
        for name, info in log_manager.topics().items():
            entries[name] = (info.topic_id, info.num_partitions)
    entries.pop(GROUP_METADATA_TOPIC_NAME, None)
    return topic_images(entries)


def _owned(topic_partitions: Any) -> dict[uuid.UUID, frozenset[int]] | None:
    if topic_partitions is None:
        return None
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in topic_partitions:
        if tp.topic_id is not None:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def _assignment(a: Mapping[uuid.UUID, frozenset[int]]) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(a.items()) if ps]


def handle_consumer_group_heartbeat(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(CONSUMER_GROUP_HEARTBEAT, ev.api_version)
    gc = apis.group_coordinator
    denied = group_error(apis, AclOperation.READ, req.group_id)
    if gc is None or denied:
        code = denied or CoordinatorNotAvailable.error_code
        return build(cls, {"throttle_time": 0, "error_code": code, "member_epoch": 0})
    names = req.subscribed_topic_names
    member_id = req.member_id
    if ev.api_version == 0 and not member_id and req.member_epoch == 0:
        # v0: the coordinator names a joining member (v1+: the client does, KIP-1082)
        member_id = uuid.uuid4().hex
    hb = HeartbeatRequest(
        member_id=member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=_ms(req.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
        server_assignor=req.server_assignor,
        owned_topic_partitions=_owned(req.topic_partitions),
        client_id=ev.client_id or "",
        client_host=apis.client_host,
    )
    coro = gc.consumer_groups.heartbeat(req.group_id, hb)

    async def respond() -> Any:
        a = await coro
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": a.error_code,
                "error_message": a.error_message,
                "member_id": a.member_id,
                "member_epoch": a.member_epoch,
                "heartbeat_interval": a.heartbeat_interval_ms,
                "assignment": (
                    None
                    if a.assignment is None
                    else {"topic_partitions": _assignment(a.assignment)}
                ),
            },
        )

    return respond()


def _described(
    names: Mapping[uuid.UUID, str],
) -> Callable[[Mapping[uuid.UUID, frozenset[int]]], dict[str, Any]]:
    def described(a: Mapping[uuid.UUID, frozenset[int]]) -> dict[str, Any]:
        return {
            "topic_partitions": [
                {"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                for t, ps in sorted(a.items())
                if ps
            ]
        }

    return described


def handle_consumer_group_describe(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(CONSUMER_GROUP_DESCRIBE, ev.api_version)
    gc = apis.group_coordinator
    groups = []
    names: dict[uuid.UUID, str] | None = None
    for group_id in req.group_ids:
        denied = group_error(apis, AclOperation.DESCRIBE, group_id)
        if gc is None or denied:
            groups.append(
                {
                    "error_code": denied or CoordinatorNotAvailable.error_code,
                    "group_id": group_id,
                    "members": [],
                }
            )
            continue
        d = gc.consumer_groups.describe(group_id)
        if names is None:
            names = gc.consumer_groups.topic_names()
        described = _described(names)
        groups.append(
            {
                "error_code": d.error_code,
                "error_message": d.error_message,
                "group_id": group_id,
                "group_state": d.state,
                "group_epoch": d.group_epoch,
                "assignment_epoch": d.assignment_epoch,
                "assignor_name": d.assignor_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_topic_names),
                        "subscribed_topic_regex": m.subscribed_topic_regex,
                        "assignment": described(m.assignment),
                        "target_assignment": described(m.target_assignment),
                        "member_type": CONSUMER_MEMBER_TYPE,
                    }
                    for m in d.members
                ],
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
        )
    return build(cls, {"throttle_time": 0, "groups": groups})
