"""OffsetDelete (47): delete a group's committed offsets of some partitions (Kafka's
``kafka-consumer-groups --delete-offsets``, ``AdminClient.delete_consumer_group_offsets``).

Checks in Kafka's order: DELETE on the group (else GROUP_AUTHORIZATION_FAILED for the
request), READ on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions), the topic
and partition exist (else UNKNOWN_TOPIC_OR_PARTITION); the rest goes to
:meth:`~tierlog.coordinator.group.group_metadata_manager.GroupMetadataManager.delete_offsets`
(group errors: the coordinator's, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP; partition errors:
GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog.errors import CoordinatorNotAvailable, UnknownTopicOrPartition
from tierlog.security.acl_checks import group_error, topic_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

OFFSET_DELETE = 47


def _partition_exists(apis: KafkaApis, topic: str, partition: int) -> bool:
    if apis.cluster is not None:
        t = apis.cluster.metadata.topic(topic)
        return t is not None and partition in t.partitions
    info = apis.log_manager.topic(topic)
    return info is not None and 0 <= partition < info.num_partitions


def handle_offset_delete(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(OFFSET_DELETE, ev.api_version)
    group_id = str(req.group_id)
    wanted = [(str(t.name), int(p.partition_index)) for t in req.topics for p in t.partitions]

    def response(group_code: int, codes: dict[tuple[str, int], int]) -> Any:
        topics: dict[str, list[dict[str, int]]] = {}
        for t, p in wanted:
            topics.setdefault(t, []).append(
                {"partition_index": p, "error_code": codes.get((t, p), 0)}
            )
        return build(
            cls,
            {
                "error_code": group_code,
                "throttle_time": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]
                if not group_code
                else [],
            },
        )

    gc = apis.group_coordinator
    if gc is None:
        return response(CoordinatorNotAvailable.error_code, {})
    if denied := group_error(apis, AclOperation.DELETE, group_id):
        return response(denied, {})
    refused: dict[tuple[str, int], int] = {}
    for t in dict.fromkeys(t for t, _ in wanted):
        if code := topic_error(apis, AclOperation.READ, t):
            refused.update({(t, p): code for tt, p in wanted if tt == t})
    for t, p in wanted:
        if (t, p) not in refused and not _partition_exists(apis, t, p):
            refused[(t, p)] = UnknownTopicOrPartition.error_code
    coro = gc.offset_manager.delete_offsets(group_id, [tp for tp in wanted if tp not in refused])

    async def respond() -> Any:
        group_code, codes = await coro
        return response(group_code, {**codes, **refused})

    return respond()
