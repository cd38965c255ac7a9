"""InitProducerId (22) for idempotent producers; DescribeProducers (61).

Every call gets a fresh producer id (never reused, see ProducerIdManager) with epoch 0; a
producer bumping its epoch after an error (KIP-360) simply starts over with a new id, which
restarts its sequence numbers as well. Transactions are out of scope: a transactional id is
refused with INVALID_REQUEST (42) and a broker log line saying why.

DescribeProducers (Kafka's ``kafka-transactions --describe-producers``,
``AdminClient.describe_producers``): each partition's active producers, from its leader's
producer state (the ids still within ``producer.id.expiration.ms``): id, epoch, last
sequence, last timestamp, coordinator epoch and the open transaction's first offset (-1:
none, always here). READ on the topic is needed (else TOPIC_AUTHORIZATION_FAILED), an
unknown partition gets UNKNOWN_TOPIC_OR_PARTITION, one led elsewhere NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    ApiError,
    InvalidRequest,
    NotLeaderOrFollower,
    UnknownTopicOrPartition,
)
from tierlog.security.acl_checks import (
    idempotent_write_error,
    topic_error,
    transactional_id_error,
)
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

INIT_PRODUCER_ID = 22
DESCRIBE_PRODUCERS = 61
TRANSACTIONS_UNSUPPORTED = "transactions are not supported by tierlog (transactional.id set)"


def handle_init_producer_id(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(INIT_PRODUCER_ID, ev.api_version)
    if req.transactional_id is not None:
        denied = transactional_id_error(apis, AclOperation.WRITE, req.transactional_id)
    else:
        denied = idempotent_write_error(apis)
    if denied:
        return build(
            cls,
            {"throttle_time": 0, "error_code": denied, "producer_id": -1, "producer_epoch": -1},
        )
    if req.transactional_id is not None:
        log.warning(
            "InitProducerId from client %r with transactional.id %r refused: %s",
            ev.client_id,
            req.transactional_id,
            TRANSACTIONS_UNSUPPORTED,
        )
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": InvalidRequest.error_code,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
    try:
        pid = apis.producer_id_manager.generate_producer_id()
    except ApiError as e:
        log.error("cannot allocate a producer id: %s", e)
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": e.error_code,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
    return build(
        cls, {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}
    )


def handle_describe_producers(apis: KafkaApis, ev: Request) -> Any:
    cls = response_class(DESCRIBE_PRODUCERS, ev.api_version)
    topics = []
    for t in ev.request.topics:
        name = str(t.name)
        denied = topic_error(apis, AclOperation.READ, name)
        topics.append(
            {
                "name": name,
                "partitions": [
                    _describe_partition(apis, name, int(p), denied) for p in t.partition_indexes
                ],
            }
        )
    return build(cls, {"throttle_time": 0, "topics": topics})


def _describe_partition(apis: KafkaApis, topic: str, index: int, denied: int) -> dict[str, Any]:
    out: dict[str, Any] = {"partition_index": index, "error_code": 0, "active_producers": []}
    if denied:
        out["error_code"] = denied
        return out
    p = apis.replica_manager.get_partition(topic, index)
    if p is None:
        out["error_code"] = (
            NotLeaderOrFollower.error_code
            if apis.current_leader(topic, index) is not None
            else UnknownTopicOrPartition.error_code
        )
        return out
    if not p.is_leader:
        out["error_code"] = NotLeaderOrFollower.error_code
        return out
    # A copy taken at once (appends may run in a thread); entries are read field by field.
    active = dict(p.log.producer_state_manager.active_producers)
    out["active_producers"] = [
        {
            "producer_id": pid,
            "producer_epoch": e.producer_epoch,
            "last_sequence": e.last_seq,
            "last_timestamp": e.last_timestamp,
            "coordinator_epoch": e.coordinator_epoch,
            "current_txn_start_offset": -1
            if e.current_txn_first_offset is None
            else e.current_txn_first_offset,
        }
        for pid, e in sorted(active.items())
    ]
    return out
