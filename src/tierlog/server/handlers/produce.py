"""Produce (0), v3+: one magic-2 batch per partition, appended without decoding a record.

acks=0 requests get no response (the protocol layer knows from the request); acks=1 is
answered once the batch is in the leader's log; acks=-1 once the ISR has it (the high
watermark passed it: at once on a single node, whose ISR is itself). acks=-1 with an ISR
smaller than ``min.insync.replicas`` is refused with NOT_ENOUGH_REPLICAS (19) before the
append, or answered NOT_ENOUGH_REPLICAS_AFTER_APPEND (20) when the ISR shrank while waiting;
REQUEST_TIMED_OUT (7) after the request's ``timeout``.
Validation errors are per partition (protocol.md): 2 CORRUPT_MESSAGE, 10 MESSAGE_TOO_LARGE,
87 INVALID_RECORD, 76 UNSUPPORTED_COMPRESSION_TYPE, 45/47/59 for idempotent producers; an
idempotent duplicate gets success with the offset of the original append.

Transactional batches (a request with a ``transactional_id``; WRITE on the transactional id
required) are appended like any other: the log opens the producer's transaction. When the
replica manager has a ``txn_verifier`` (KIP-890: the partition must have been added to the
transaction), each partition's append waits for its verdict first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    CorruptRecordError,
    InvalidRequiredAcks,
    NotLeaderOrFollower,
    TransactionalIdAuthorizationFailed,
    UnknownTopicId,
)
from tierlog.records.record_batch import TRANSACTIONAL_FLAG_MASK, read_header
from tierlog.security.acl_checks import cluster_error, topic_error, transactional_id_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build, request_timeout_ms
from tierlog.server.kafka_apis import CloseConnection, response_class
from tierlog.server.produce_path import ProducePartitionResult
from tierlog.server.remote_log_metadata_publisher import REMOTE_LOG_METADATA_TOPIC_NAME
from tierlog.server.replica_manager import ReplicaManager

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

PRODUCE = 0


def handle_produce(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    rm = apis.replica_manager
    acks = req.acks
    topics_out: list[dict[str, Any]] = []
    error: ProducePartitionResult | None = None
    if acks not in (0, 1, -1):
        error = ProducePartitionResult(InvalidRequiredAcks.error_code)
    elif req.transactional_id is not None and (
        code := transactional_id_error(apis, AclOperation.WRITE, req.transactional_id)
    ):
        error = ProducePartitionResult(code)
    elif req.transactional_id is None and _has_transactional_batch(req):
        # Kafka: transactional records need a transactional id the client may write.
        error = ProducePartitionResult(
            TransactionalIdAuthorizationFailed.error_code,
            error_message="transactional records without a transactional id",
        )
    timeout_ms = request_timeout_ms(req)
    # producer_byte_rate: charged the request's size once appended (read before any await).
    user, client_id, size = apis.principal.name, ev.client_id, getattr(ev, "size", 0)
    # Partitions whose appends may fsync (flush.messages set) are appended in a thread;
    # acks=-1 partitions wait for their ISR.
    pending: list[tuple[dict[str, Any], Awaitable[ProducePartitionResult]]] = []
    for t in req.topic_data:
        name: str | None = getattr(t, "name", None)
        topic_id = getattr(t, "topic_id", None)
        missing: ProducePartitionResult | None = None
        if name is None:  # v13+: topics by id
            name = apis.topic_name_for_id(topic_id) if topic_id is not None else None
            if name is None:
                missing = ProducePartitionResult(UnknownTopicId.error_code)
        if name is not None and (denied := topic_error(apis, AclOperation.WRITE, name)):
            missing = ProducePartitionResult(denied)
        parts = []
        internal = name is not None and _broker_publishing(apis, name)
        for pd in t.partition_data:
            out: dict[str, Any] = {"index": pd.index, "record_errors": ()}
            r = error or missing
            topic = name or ""
            if r is None and req.transactional_id is not None and rm.txn_verifier is not None:
                aw = _verified_append(
                    rm, req.transactional_id, topic, pd.index, pd.records, acks, timeout_ms
                )
                pending.append((out, aw))
            elif r is None and rm.append_in_thread(topic, pd.index):
                aw = rm.append_records_in_thread(
                    topic, pd.index, pd.records, required_acks=acks, internal=internal
                )
                if acks == -1:
                    aw = _acked(rm, topic, pd.index, aw, timeout_ms)
                pending.append((out, aw))
            else:
                r = r or rm.append_records(
                    topic, pd.index, pd.records, required_acks=acks, internal=internal
                )
                if acks == -1 and not r.error_code and rm.must_wait_for_acks(topic, pd.index, r):
                    pending.append((out, rm.wait_for_acks(topic, pd.index, r, timeout_ms)))
                else:
                    _fill(out, r)
            parts.append(out)
        topics_out.append({"name": name, "topic_id": topic_id, "partition_responses": parts})

    def finish() -> Any:
        if acks == 0:
            failed = [
                (t["name"], p["index"], p["error_code"])
                for t in topics_out
                for p in t["partition_responses"]
                if p["error_code"]
            ]
            if failed:
                raise CloseConnection(f"acks=0 produce failed: {failed[:5]}")
            return None
        leaders = add_current_leaders(apis, topics_out)
        throttle = apis.client_quotas.throttle_produce(user, client_id, size)
        return build(
            response_class(PRODUCE, ev.api_version),
            {
                "responses": topics_out,
                "node_endpoints": node_endpoints(apis, leaders),
                "throttle_time": throttle,
            },
        )

    if not pending:
        return finish()

    async def respond() -> Any:
        # All at once: each partition's wait runs beside the others (one timeout in all).
        results = await asyncio.gather(*(aw for _, aw in pending))
        for (out, _), r in zip(pending, results, strict=True):
            _fill(out, r)
        return finish()

    return respond()


def _broker_publishing(apis: KafkaApis, topic: str) -> bool:
    """A broker publishing tiered storage's events: in a cluster they go to the replicated
    ``__remote_log_metadata`` with Produce (as Kafka's metadata manager does with its
    producer), accepted on the inter-broker listener from a principal with CLUSTER_ACTION.
    Clients still cannot write to the topic."""
    return (
        topic == REMOTE_LOG_METADATA_TOPIC_NAME
        and apis.cluster is not None
        and apis.listener_name == apis.config.inter_broker_listener_name
        and not cluster_error(apis, AclOperation.CLUSTER_ACTION)
    )


def add_current_leaders(apis: KafkaApis, topics_out: list[dict[str, Any]]) -> set[int]:
    """KIP-951 (Produce v10+): partitions answered NOT_LEADER_OR_FOLLOWER name the current
    leader, so the client re-routes without a Metadata round trip; the leaders' ids."""
    leaders: set[int] = set()
    for t in topics_out:
        for p in t["partition_responses"]:
            if p.get("error_code") != NotLeaderOrFollower.error_code or t["name"] is None:
                continue
            leader = apis.current_leader(t["name"], p["index"])
            if leader is not None:
                p["current_leader"] = {"leader_id": leader[0], "leader_epoch": leader[1]}
                leaders.add(leader[0])
    return leaders


def node_endpoints(apis: KafkaApis, ids: set[int]) -> list[dict[str, Any]]:
    """The ``node_endpoints`` of KIP-951 responses: where the named leaders listen."""
    out = []
    for b in sorted(ids):
        e = apis.broker_endpoint(b)
        if e is not None:
            out.append({"node_id": e.node_id, "host": e.host, "port": e.port, "rack": e.rack})
    return out


def _has_transactional_batch(req: Any) -> bool:
    """Whether a partition's batch has the isTransactional attribute (one byte each: the low
    byte of the attributes at offset 21)."""
    for t in req.topic_data:
        for pd in t.partition_data:
            records = pd.records
            if records is not None and len(records) > 22 and records[22] & TRANSACTIONAL_FLAG_MASK:
                return True
    return False


async def _verified_append(
    rm: ReplicaManager,
    transactional_id: str,
    topic: str,
    index: int,
    records: bytes | None,
    acks: int,
    timeout_ms: int,
) -> ProducePartitionResult:
    """KIP-890: ask the verifier whether the partition is in the producer's transaction,
    then append as usual."""
    assert rm.txn_verifier is not None
    if records:
        try:
            header = read_header(records)
        except CorruptRecordError as e:
            return ProducePartitionResult(e.error_code, error_message=e.message)
        code = await rm.txn_verifier(
            transactional_id, header.producer_id, header.producer_epoch, topic, index
        )
        if code:
            return ProducePartitionResult(code)
    if rm.append_in_thread(topic, index):
        r = await rm.append_records_in_thread(topic, index, records, required_acks=acks)
    else:
        r = rm.append_records(topic, index, records, required_acks=acks)
    if acks == -1 and not r.error_code and rm.must_wait_for_acks(topic, index, r):
        r = await rm.wait_for_acks(topic, index, r, timeout_ms)
    return r


async def _acked(
    rm: ReplicaManager,
    topic: str,
    index: int,
    appended: Awaitable[ProducePartitionResult],
    timeout_ms: int,
) -> ProducePartitionResult:
    return await rm.wait_for_acks(topic, index, await appended, timeout_ms)


def _fill(out: dict[str, Any], r: ProducePartitionResult) -> None:
    out["error_code"] = r.error_code
    out["base_offset"] = r.base_offset
    out["log_append_time"] = r.log_append_time
    out["log_start_offset"] = r.log_start_offset
    out["error_message"] = r.error_message
    if r.record_errors:
        out["record_errors"] = [
            {"batch_index": i, "batch_index_error_message": m} for i, m in r.record_errors
        ]
