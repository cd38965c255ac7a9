"""Fetch (1), v4+: byte ranges of the logs, with a long-poll that wakes on append.

* v13+ names topics by id: ids are resolved through the log manager; an unknown id gets
  UNKNOWN_TOPIC_ID (100) on each of its partitions.
* Fetch sessions (KIP-227) are answered sessionless: ``session_id`` 0 and a FULL response that
  lists exactly the requested partitions, in request order, empty ones included
  (kafka-python drops the whole response otherwise). An incremental fetch for a session we
  never created gets FETCH_SESSION_ID_NOT_FOUND (70) and the client starts over.
* Every partition carries the high watermark, the last stable offset (librdkafka and
  kafkajs read committed by default) and the log start offset (librdkafka resets to it).
* read_committed (``isolation_level`` 1): data up to the last stable offset, and the
  aborted transactions of the range read (from the ``.txnindex`` files, local or remote),
  which consumers use to drop aborted records; read_uncommitted: up to the high watermark,
  ``aborted_transactions`` null.
* Offsets below the local log start offset of a tiered partition are read from remote
  storage, every such partition of the request at once (see ReplicaManager).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog.errors import UnknownTopicId, UnknownTopicOrPartition
from tierlog.security.acl_checks import follower_or_topic_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.fetch_path import READ_COMMITTED, FetchPartitionRequest, FetchPartitionResult
from tierlog.server.handlers._build import build
from tierlog.server.handlers.produce import node_endpoints
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

FETCH = 1
FETCH_SESSION_ID_NOT_FOUND = 70
#: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH: answered with the current leader (v12+).
_LEADER_ERRORS = frozenset({6, 74})
INVALID_SESSION_ID = 0
FINAL_EPOCH = -1


def _max_wait_ms(req: Any) -> int:
    w = req.max_wait
    if isinstance(w, int):
        return w
    return int(w.total_seconds() * 1000)


def _replica_id(req: Any) -> int:
    """The fetching replica (-1 for consumers): ``replica_id`` before v15, then
    ``replica_state.replica_id``."""
    state = getattr(req, "replica_state", None)
    rid: Any = getattr(state, "replica_id", None) if state is not None else None
    if rid is None:
        rid = getattr(req, "replica_id", -1)
    return int(rid)


def handle_fetch(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    by_id = version >= 13
    session_id = getattr(req, "session_id", 0)
    session_epoch = getattr(req, "session_epoch", FINAL_EPOCH)
    cls = response_class(FETCH, version)
    if session_id != INVALID_SESSION_ID and session_epoch > 0:
        # An incremental fetch in a session we never handed out.
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": FETCH_SESSION_ID_NOT_FOUND,
                "session_id": 0,
                "responses": [],
            },
        )

    # Resolve topics once; keep the request's order (and duplicates) for the response.
    plan: list[tuple[Any, list[FetchPartitionRequest]]] = []
    flat: list[FetchPartitionRequest] = []
    replica_id = _replica_id(req)
    for t in req.topics:
        if by_id:
            key = t.topic_id
            name = apis.topic_name_for_id(key) if key is not None else None
            code = UnknownTopicId.error_code if name is None else 0
        else:
            key = t.topic
            name = key
            code = 0
        if name is not None and (
            denied := follower_or_topic_error(apis, replica_id, AclOperation.READ, name)
        ):
            name, code = None, denied
        parts = [
            FetchPartitionRequest(
                name,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                code,
                getattr(p, "current_leader_epoch", -1),
                getattr(p, "last_fetched_epoch", -1),
            )
            for p in t.partitions
        ]
        plan.append((key, parts))
        flat.extend(parts)

    isolation = getattr(req, "isolation_level", 0)
    max_bytes = getattr(req, "max_bytes", 2**31 - 1)
    quotas = apis.client_quotas
    user, client_id = apis.principal.name, ev.client_id  # read before the first await
    if replica_id < 0:
        max_bytes = quotas.fetch_max_bytes(user, client_id, max_bytes)
    got = apis.replica_manager.fetch_at_once(
        flat,
        max_wait_ms=_max_wait_ms(req),
        min_bytes=req.min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        replica_id=replica_id,
    )

    def answer(results: list[FetchPartitionResult]) -> Any:
        if replica_id < 0 and quotas.fetch.active:
            # consumer_byte_rate: a throttled fetch is answered empty and not charged (the
            # client fetches the bytes again after the throttle time), as Kafka.
            size = sum(r.size for r in results)
            if throttle := quotas.throttle_fetch(user, client_id, size):
                return build(
                    cls,
                    {"throttle_time": throttle, "error_code": 0, "session_id": 0, "responses": []},
                )
        return _response(apis, cls, plan, flat, results, by_id, isolation)

    if isinstance(got, list):  # answered by the first read: no task
        return answer(got)

    async def respond() -> Any:
        return answer(await got)

    return respond()


def _aborted(r: FetchPartitionResult) -> list[dict[str, int]]:
    return [
        {"producer_id": t.producer_id, "first_offset": t.first_offset}
        for t in r.aborted_transactions or ()
    ]


def _response(
    apis: KafkaApis,
    cls: type[Any],
    plan: list[tuple[Any, list[FetchPartitionRequest]]],
    flat: list[FetchPartitionRequest],
    results: list[FetchPartitionResult],
    by_id: bool,
    isolation: int,
) -> Any:
    it = iter(results)
    topics = []
    leaders: set[int] = set()
    for key, parts in plan:
        out: list[dict[str, Any]] = []
        for p in parts:
            r = next(it)
            code = r.error_code
            if code == 3 and p.topic is None:
                code = UnknownTopicId.error_code if by_id else UnknownTopicOrPartition.error_code
            extra: dict[str, Any] = {}
            if r.diverging_epoch is not None:
                extra["diverging_epoch"] = {
                    "epoch": r.diverging_epoch[0],
                    "end_offset": r.diverging_epoch[1],
                }
            if code in _LEADER_ERRORS and p.topic is not None:
                # KIP-951: the leader the client should go to, so it re-routes at once.
                leader = apis.current_leader(p.topic, p.partition)
                if leader is not None:
                    extra["current_leader"] = {"leader_id": leader[0], "leader_epoch": leader[1]}
                    leaders.add(leader[0])
            out.append(
                {
                    **extra,
                    "partition_index": p.partition,
                    "error_code": code,
                    "high_watermark": r.high_watermark,
                    "last_stable_offset": r.last_stable_offset,
                    "log_start_offset": r.log_start_offset,
                    "aborted_transactions": _aborted(r) if isolation == READ_COMMITTED else None,
                    "preferred_read_replica": -1,
                    "records": r.records if r.records is not None else b"",
                }
            )
        topics.append({"topic_id" if by_id else "topic": key, "partitions": out})
    return build(
        cls,
        {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": topics,
            "node_endpoints": node_endpoints(apis, leaders),
        },
    )
