"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66).

The handlers translate kio messages to and from the plain values of
:class:`~tierlog.coordinator.transaction.TransactionCoordinator` (and, for TxnOffsetCommit,
of the group coordinator); InitProducerId is :mod:`tierlog.server.handlers.producer`'s.

ACLs as Kafka checks them: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
WRITE on each topic added (TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED),
READ on the group for AddOffsetsToTxn and TxnOffsetCommit (GROUP_AUTHORIZATION_FAILED),
CLUSTER_ACTION for the brokers' verify-only AddPartitionsToTxn (v4+), DESCRIBE on the
transactional id for DescribeTransactions and ListTransactions. PRODUCER_FENCED becomes
INVALID_PRODUCER_EPOCH for versions that predate it (KIP-588).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    CoordinatorNotAvailable,
    InvalidProducerEpoch,
    InvalidRequest,
    ProducerFenced,
    UnknownTopicOrPartition,
)
from tierlog.log.topic_names import GROUP_METADATA_TOPIC_NAME
from tierlog.security.acl_checks import (
    cluster_error,
    group_error,
    topic_error,
    transactional_id_error,
)
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.handlers.group import commit_request_offsets
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.coordinator.transaction import TransactionCoordinator
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

OPERATION_NOT_ATTEMPTED = 55
TRANSACTIONAL_ID_NOT_FOUND = 105


def _fenced_error(code: int, version: int, first_version: int) -> int:
    """PRODUCER_FENCED for clients that know it (the API's ``first_version`` on), else
    INVALID_PRODUCER_EPOCH."""
    if code == ProducerFenced.error_code and version < first_version:
        return InvalidProducerEpoch.error_code
    return code


def coordinator_of(apis: KafkaApis) -> TransactionCoordinator | None:
    tc: TransactionCoordinator | None = getattr(apis, "txn_coordinator", None)
    return tc


def _topic_exists(apis: KafkaApis, topic: str, partition: int) -> bool:
    if apis.cluster is not None:
        t = apis.cluster.metadata.topic(topic)
        return t is not None and partition in t.partitions
    info = apis.log_manager.topic(topic)
    return info is not None and 0 <= partition < info.num_partitions


# --------------------------------------------------------------------------- AddPartitionsToTxn


def handle_add_partitions_to_txn(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    cls = response_class(ADD_PARTITIONS_TO_TXN, version)
    if version >= 4:
        return _add_partitions_batched(apis, req, cls)
    txn_id = req.v3_and_below_transactional_id
    wanted = [(t.name, int(p)) for t in req.v3_and_below_topics for p in t.partitions]

    def answer(codes: dict[tuple[str, int], int]) -> Any:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in wanted:
            by_topic.setdefault(tp[0], []).append(
                {"partition_index": tp[1], "partition_error_code": codes[tp]}
            )
        return build(
            cls,
            {
                "throttle_time": 0,
                "results_by_topic_v3_and_below": [
                    {"name": name, "results_by_partition": parts}
                    for name, parts in by_topic.items()
                ],
            },
        )

    coro = _add_partitions(
        apis,
        txn_id,
        req.v3_and_below_producer_id,
        req.v3_and_below_producer_epoch,
        wanted,
    )

    async def respond() -> Any:
        codes = await coro
        return answer({tp: _fenced_error(c, version, 2) for tp, c in codes.items()})

    return respond()


async def _add_partitions(
    apis: KafkaApis, txn_id: str, producer_id: int, epoch: int, wanted: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    tc = coordinator_of(apis)
    if tc is None:
        return dict.fromkeys(wanted, CoordinatorNotAvailable.error_code)
    if denied := transactional_id_error(apis, AclOperation.WRITE, txn_id):
        return dict.fromkeys(wanted, denied)
    refused: dict[tuple[str, int], int] = {}
    for tp in wanted:
        if code := topic_error(apis, AclOperation.WRITE, tp[0]):
            refused[tp] = code
        elif not _topic_exists(apis, *tp):
            refused[tp] = UnknownTopicOrPartition.error_code
    if refused:
        return {tp: refused.get(tp, OPERATION_NOT_ATTEMPTED) for tp in wanted}
    code = await tc.add_partitions_to_transaction(txn_id, producer_id, epoch, set(wanted))
    return dict.fromkeys(wanted, code)


def _add_partitions_batched(apis: KafkaApis, req: Any, cls: Any) -> Any:
    """v4+: several transactions at once; ``verify_only`` ones (brokers checking a
    transactional produce, KIP-890) are checked, not added. CLUSTER_ACTION required."""
    denied = cluster_error(apis, AclOperation.CLUSTER_ACTION)
    if denied:
        return build(cls, {"throttle_time": 0, "error_code": denied, "results_by_transaction": []})

    async def one(t: Any) -> dict[str, Any]:
        wanted = [(tp.name, int(p)) for tp in t.topics for p in tp.partitions]
        tc = coordinator_of(apis)
        if tc is None:
            codes = dict.fromkeys(wanted, CoordinatorNotAvailable.error_code)
        elif t.verify_only:
            codes = tc.verify_partitions_in_transaction(
                t.transactional_id, t.producer_id, t.producer_epoch, set(wanted)
            )
        else:
            codes = await _add_partitions(
                apis, t.transactional_id, t.producer_id, t.producer_epoch, wanted
            )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in wanted:
            by_topic.setdefault(tp[0], []).append(
                {"partition_index": tp[1], "partition_error_code": codes[tp]}
            )
        return {
            "transactional_id": t.transactional_id,
            "topic_results": [
                {"name": n, "results_by_partition": ps} for n, ps in by_topic.items()
            ],
        }

    async def respond() -> Any:
        results = [await one(t) for t in req.transactions]
        return build(cls, {"throttle_time": 0, "error_code": 0, "results_by_transaction": results})

    return respond()


# --------------------------------------------------------------------------- AddOffsetsToTxn


def handle_add_offsets_to_txn(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    cls = response_class(ADD_OFFSETS_TO_TXN, version)

    def answer(code: int) -> Any:
        return build(cls, {"throttle_time": 0, "error_code": _fenced_error(code, version, 2)})

    tc = coordinator_of(apis)
    gc = apis.group_coordinator
    if tc is None or gc is None:
        return answer(CoordinatorNotAvailable.error_code)
    if denied := transactional_id_error(apis, AclOperation.WRITE, req.transactional_id):
        return answer(denied)
    if denied := group_error(apis, AclOperation.READ, req.group_id):
        return answer(denied)
    partition = gc.group_manager.partition_for(req.group_id)
    coro = tc.add_partitions_to_transaction(
        req.transactional_id,
        req.producer_id,
        req.producer_epoch,
        {(GROUP_METADATA_TOPIC_NAME, partition)},
    )

    async def respond() -> Any:
        return answer(await coro)

    return respond()


# --------------------------------------------------------------------------- EndTxn


def handle_end_txn(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    cls = response_class(END_TXN, version)

    def answer(code: int) -> Any:
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": _fenced_error(code, version, 2),
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )

    tc = coordinator_of(apis)
    if tc is None:
        return answer(CoordinatorNotAvailable.error_code)
    if denied := transactional_id_error(apis, AclOperation.WRITE, req.transactional_id):
        return answer(denied)
    coro = tc.end_transaction(
        req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed)
    )

    async def respond() -> Any:
        return answer(await coro)

    return respond()


# --------------------------------------------------------------------------- TxnOffsetCommit


def handle_txn_offset_commit(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    cls = response_class(TXN_OFFSET_COMMIT, version)
    offsets, order = commit_request_offsets(req.topics)

    def answer(codes: dict[tuple[str, int], int]) -> Any:
        return build(
            cls,
            {
                "throttle_time": 0,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {
                                "partition_index": p,
                                "error_code": _fenced_error(codes.get((name, p), 0), version, 3),
                            }
                            for p in idx
                        ],
                    }
                    for name, idx in order
                ],
            },
        )

    gc = apis.group_coordinator
    if gc is None:
        return answer(dict.fromkeys(offsets, CoordinatorNotAvailable.error_code))
    denied = transactional_id_error(apis, AclOperation.WRITE, req.transactional_id) or (
        group_error(apis, AclOperation.READ, req.group_id)
    )
    if denied:
        return answer(dict.fromkeys(offsets, denied))
    refused = {tp: c for tp in offsets if (c := topic_error(apis, AclOperation.READ, tp[0]))}
    remaining = {tp: v for tp, v in offsets.items() if tp not in refused}
    coro = gc.commit_txn_offsets(
        req.group_id,
        req.producer_id,
        req.producer_epoch,
        getattr(req, "generation_id", -1),
        getattr(req, "member_id", ""),
        getattr(req, "group_instance_id", None),
        remaining,
    )

    async def respond() -> Any:
        codes = await coro if remaining else {}
        return answer({**codes, **refused})

    return respond()


# --------------------------------------------------------------------------- admin


def handle_describe_transactions(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(DESCRIBE_TRANSACTIONS, ev.api_version)
    tc = coordinator_of(apis)
    states = []
    for txn_id in req.transactional_ids:
        denied = transactional_id_error(apis, AclOperation.DESCRIBE, txn_id)
        if denied or tc is None:
            code = denied or CoordinatorNotAvailable.error_code
            states.append({"error_code": code, "transactional_id": txn_id, "topics": []})
            continue
        (d,) = tc.describe_transactions([txn_id])
        states.append(
            {
                "error_code": d.error_code,
                "transactional_id": txn_id,
                "transaction_state": d.state,
                "transaction_timeout": d.transaction_timeout_ms,
                "transaction_start_time": max(d.transaction_start_time_ms, 0),
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "topics": [
                    {"topic": t, "partitions": list(ps)}
                    for t, ps in d.topics
                    if not topic_error(apis, AclOperation.DESCRIBE, t)
                ],
            }
        )
    return build(cls, {"throttle_time": 0, "transaction_states": states})


def handle_list_transactions(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(LIST_TRANSACTIONS, ev.api_version)
    tc = coordinator_of(apis)
    if tc is None:
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": CoordinatorNotAvailable.error_code,
                "transaction_states": [],
            },
        )
    pattern = getattr(req, "transactional_id_pattern", None)
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as e:
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": InvalidRequest.error_code,
                "transaction_states": [],
                "error_message": f"bad transactional_id_pattern: {e}",
            },
        )
    err, unknown, found = tc.txn_manager.list_transactions(
        list(req.state_filters),
        [int(p) for p in req.producer_id_filters],
        int(getattr(req, "duration_filter", -1)),
    )
    listed = [
        {
            "transactional_id": md.transactional_id,
            "producer_id": md.producer_id,
            "transaction_state": md.state.state_name,
        }
        for md in found
        if (regex is None or regex.fullmatch(md.transactional_id))
        and not transactional_id_error(apis, AclOperation.DESCRIBE, md.transactional_id)
    ]
    return build(
        cls,
        {
            "throttle_time": 0,
            "error_code": err,
            "unknown_state_filters": sorted(unknown),
            "transaction_states": listed,
        },
    )


__all__ = [
    "TRANSACTIONAL_ID_NOT_FOUND",
    "coordinator_of",
    "handle_add_offsets_to_txn",
    "handle_add_partitions_to_txn",
    "handle_describe_transactions",
    "handle_end_txn",
    "handle_list_transactions",
    "handle_txn_offset_commit",
]
