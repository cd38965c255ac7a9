"""InitProducerId (22): idempotent and transactional producers; DescribeProducers (61).

Without a transactional id every call gets a fresh producer id (never reused, see
ProducerIdManager) with epoch 0; a producer bumping its epoch after an error (KIP-360) simply
starts over with a new id, which restarts its sequence numbers as well.

With a transactional id the transaction coordinator answers
(:meth:`~tierlog.coordinator.transaction.TransactionCoordinator.init_producer_id`): the
id's producer id with a bumped epoch, fencing older instances. ``__transaction_state`` is
created on first use (:mod:`tierlog.server.txn_state_topic`). v3+ carries the producer's
current (producer id, epoch) for KIP-360's epoch bump; both or neither must be set
(INVALID_REQUEST). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4 (KIP-588).

DescribeProducers (61; Kafka's ``kafka-transactions --describe-producers``,
``AdminClient.describe_producers``): each partition's active producers, from its leader's
producer state (the ids still within ``producer.id.expiration.ms``): id, epoch, last
sequence, last timestamp, coordinator epoch and the open transaction's first offset (-1:
none). READ on the topic is needed (else TOPIC_AUTHORIZATION_FAILED), an unknown partition
gets UNKNOWN_TOPIC_OR_PARTITION, one led elsewhere NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    ApiError,
    CoordinatorNotAvailable,
    InvalidProducerEpoch,
    InvalidRequest,
    NotLeaderOrFollower,
    ProducerFenced,
    UnknownTopicOrPartition,
)
from tierlog.security.acl_checks import idempotent_write_error, topic_error, transactional_id_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class
from tierlog.server.txn_state_topic import ensure_transaction_state_topic

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

INIT_PRODUCER_ID = 22
DESCRIBE_PRODUCERS = 61


def _ms(v: Any) -> int:
    if isinstance(v, int):
        return v
    return round(float(v.total_seconds()) * 1000)


def handle_init_producer_id(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    cls = response_class(INIT_PRODUCER_ID, version)

    def answer(code: int, pid: int = -1, epoch: int = -1) -> Any:
        if code == ProducerFenced.error_code and version < 4:
            code = InvalidProducerEpoch.error_code
        return build(
            cls,
            {"throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch},
        )

    txn_id = req.transactional_id
    if txn_id is not None:
        denied = transactional_id_error(apis, AclOperation.WRITE, txn_id)
    else:
        denied = idempotent_write_error(apis)
    if denied:
        return answer(denied)
    if txn_id is None:
        try:
            return answer(0, apis.producer_id_manager.generate_producer_id(), 0)
        except ApiError as e:
            log.error("cannot allocate a producer id: %s", e)
            return answer(e.error_code)
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if (pid == -1) != (epoch == -1):
        return answer(InvalidRequest.error_code)
    tc = getattr(apis, "txn_coordinator", None)
    if tc is None or not ensure_transaction_state_topic(apis):
        return answer(CoordinatorNotAvailable.error_code)
    coro = tc.init_producer_id(
        txn_id, _ms(req.transaction_timeout), None if pid == -1 else (pid, epoch)
    )

    async def respond() -> Any:
        code, new_pid, new_epoch = await coro
        return answer(code, new_pid, new_epoch)

    return respond()


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
