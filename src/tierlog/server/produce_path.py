"""The produce path of the ReplicaManager (Kafka's ``ReplicaManager.appendRecords`` and
``DelayedProduce``): the checks of a produced batch that need no log state, its append to the
leader log (on the event loop, or in a worker thread when the append may fsync), the
transaction markers a coordinator writes (origin COORDINATOR), and ``acks=all`` waiting until
the ISR has the batch.

The public functions are the bodies of the ReplicaManager's methods of the same names, which
say what they do. Runs on the event loop thread only (not thread-safe), as the ReplicaManager.

Friend of :class:`~tierlog.server.replica_manager.ReplicaManager` (its partitions, clock and
metrics): one job, kept out of that module's size.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierlog.cluster.partition import Partition
from tierlog.errors import (
    ApiError,
    CorruptRecordError,
    InvalidRecord,
    InvalidTopic,
    KafkaStorageError,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    RequestTimedOut,
)
from tierlog.log.log_config import LONG_MAX
from tierlog.log.topic_names import GROUP_METADATA_TOPIC_NAME, INTERNAL_TOPICS
from tierlog.log.transaction_marker import TxnMarker
from tierlog.records.control_records import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from tierlog.records.record_batch import LOG_OVERHEAD, read_header

if TYPE_CHECKING:
    from tierlog.server.replica_manager import ReplicaManager

__all__ = [
    "ProducePartitionResult",
    "TXN_MARKER_TIMEOUT_MS",
    "append_records",
    "append_records_in_thread",
    "append_txn_markers",
    "wait_for_acks",
]

log = logging.getLogger(__name__)

#: How long markers wait for the ISR (Kafka: request.timeout.ms of the inter-broker path).
TXN_MARKER_TIMEOUT_MS = 30_000


@dataclass(slots=True)
class ProducePartitionResult:
    """What a Produce response says about one partition."""

    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    #: INVALID_RECORD: (index of the record in its batch, message), Kafka's RecordError.
    record_errors: tuple[tuple[int, str | None], ...] = ()
    #: The last offset of the appended batch (acks=all waits for the high watermark past it).
    last_offset: int = -1


def append_records(
    rm: ReplicaManager,
    topic: str,
    index: int,
    records: bytes | None,
    *,
    internal: bool = False,
    required_acks: int = 1,
) -> ProducePartitionResult:
    """The body of :meth:`ReplicaManager.append_records`."""
    checked = _check_append(rm, topic, index, records, internal, required_acks)
    if isinstance(checked, ProducePartitionResult):
        return checked
    assert records is not None  # _check_append refused empty input
    try:
        info = checked.log.append(records, leader_epoch=checked.leader_epoch)
    except (ApiError, OSError) as e:
        return _append_failed(rm, checked, e)
    return _appended(rm, checked, info)


async def append_records_in_thread(
    rm: ReplicaManager,
    topic: str,
    index: int,
    records: bytes | None,
    *,
    internal: bool = False,
    required_acks: int = 1,
) -> ProducePartitionResult:
    """The body of :meth:`ReplicaManager.append_records_in_thread`."""
    checked = _check_append(rm, topic, index, records, internal, required_acks)
    if isinstance(checked, ProducePartitionResult):
        return checked
    assert records is not None  # _check_append refused empty input
    async with checked.append_lock():
        if not checked.is_leader:
            return _refused(rm, checked, ProducePartitionResult(NotLeaderOrFollower.error_code))
        try:
            info = await asyncio.to_thread(
                checked.log.append, records, leader_epoch=checked.leader_epoch
            )
        except (ApiError, OSError) as e:
            return _append_failed(rm, checked, e)
    return _appended(rm, checked, info)


async def append_txn_markers(
    rm: ReplicaManager, markers: Sequence[TxnMarker], timeout_ms: int = TXN_MARKER_TIMEOUT_MS
) -> dict[tuple[int, str, int], int]:
    """The body of :meth:`ReplicaManager.append_txn_markers`."""
    appended: list[tuple[TxnMarker, Awaitable[ProducePartitionResult]]] = []
    results: dict[tuple[int, str, int], int] = {}
    for m in markers:
        key = (m.producer_id, m.topic, m.partition)
        try:
            p = rm.get_partition(m.topic, m.partition)
        except KafkaStorageError as e:
            results[key] = e.error_code
            continue
        if p is None:
            results[key] = rm.not_here_error(m.topic, m.partition)
            continue
        if not p.is_leader:
            results[key] = NotLeaderOrFollower.error_code
            continue
        control_type = CONTROL_TYPE_COMMIT if m.commit else CONTROL_TYPE_ABORT
        try:
            batch = build_end_txn_marker_batch(
                EndTransactionMarker(control_type, m.coordinator_epoch),
                producer_id=m.producer_id,
                producer_epoch=m.producer_epoch,
                timestamp=rm._time_ms(),
            )
        except ValueError as e:
            results[key] = _append_failed(rm, p, InvalidRecord(str(e))).error_code
            continue
        result = await _append_marker(rm, p, batch)
        appended.append((m, wait_for_acks(rm, m.topic, m.partition, result, timeout_ms)))
    acked = await asyncio.gather(*(aw for _, aw in appended))
    completed: dict[tuple[int, bool], list[int]] = {}
    for (m, _), r in zip(appended, acked, strict=True):
        results[(m.producer_id, m.topic, m.partition)] = r.error_code
        if not r.error_code and m.topic == GROUP_METADATA_TOPIC_NAME:
            completed.setdefault((m.producer_id, m.commit), []).append(m.partition)
    for (producer_id, commit), partitions in completed.items():
        for listener in list(rm.txn_completion_listeners):
            try:
                listener(producer_id, partitions, commit)
            except Exception:
                log.exception("transaction completion listener %r failed", listener)
    return results


async def _append_marker(rm: ReplicaManager, p: Partition, batch: bytes) -> ProducePartitionResult:
    def append() -> Any:
        return p.log.append(
            batch, leader_epoch=p.leader_epoch, origin_client=False, origin_coordinator=True
        )

    try:
        if p.log.config.flush_interval < LONG_MAX:  # may fsync: in a thread, in order
            async with p.append_lock():
                if not p.is_leader:
                    return ProducePartitionResult(NotLeaderOrFollower.error_code)
                info = await asyncio.to_thread(append)
        else:
            info = append()
    except (ApiError, OSError) as e:
        return _append_failed(rm, p, e)
    return _appended(rm, p, info)


async def wait_for_acks(
    rm: ReplicaManager, topic: str, index: int, result: ProducePartitionResult, timeout_ms: int
) -> ProducePartitionResult:
    """The body of :meth:`ReplicaManager.wait_for_acks`."""
    if result.error_code or result.last_offset < 0:
        return result
    p = rm._partitions.get((topic, index))
    if p is None:
        return ProducePartitionResult(rm.not_here_error(topic, index))
    if not await p.wait_for_high_watermark(result.last_offset + 1, timeout_ms / 1000):
        code = RequestTimedOut.error_code if p.is_leader else NotLeaderOrFollower.error_code
        return ProducePartitionResult(code, log_start_offset=_safe_log_start(p))
    if len(p.isr) < p.log.config.min_in_sync_replicas:
        return ProducePartitionResult(
            NotEnoughReplicasAfterAppend.error_code,
            log_start_offset=_safe_log_start(p),
            error_message=f"the ISR {sorted(p.isr)} is smaller than min.insync.replicas "
            f"{p.log.config.min_in_sync_replicas}",
        )
    return result


def _check_append(
    rm: ReplicaManager,
    topic: str,
    index: int,
    records: bytes | None,
    internal: bool,
    required_acks: int,
) -> Partition | ProducePartitionResult:
    if not internal and topic in INTERNAL_TOPICS:
        return ProducePartitionResult(
            InvalidTopic.error_code, error_message=f"cannot append to internal topic {topic}"
        )
    try:
        p = rm.get_partition(topic, index)
    except KafkaStorageError as e:
        return ProducePartitionResult(e.error_code, error_message=e.message)
    if p is None:
        return ProducePartitionResult(rm.not_here_error(topic, index))
    if not p.is_leader:
        return _refused(rm, p, ProducePartitionResult(NotLeaderOrFollower.error_code))
    if not records:
        return _refused(
            rm,
            p,
            ProducePartitionResult(
                InvalidRecord.error_code, error_message="produce request without records"
            ),
        )
    if required_acks == -1:
        min_isr = p.log.config.min_in_sync_replicas
        if len(p.isr) < min_isr:
            return _refused(
                rm,
                p,
                ProducePartitionResult(
                    NotEnoughReplicas.error_code,
                    log_start_offset=_safe_log_start(p),
                    error_message=f"the ISR {sorted(p.isr)} of {topic}-{index} is smaller "
                    f"than min.insync.replicas {min_isr}",
                ),
            )
    try:
        header = read_header(records)
        size = header.batch_length + LOG_OVERHEAD
        if size > len(records):
            raise CorruptRecordError(
                f"record batch is truncated: size {size}, {len(records)} bytes sent"
            )
        if size < len(records):
            raise InvalidRecord(
                "produce requests v3+ must carry exactly one record batch per partition"
            )
        if header.is_control_batch and not internal:
            raise InvalidRecord("clients may not write control batches")
    except ApiError as e:
        return _append_failed(rm, p, e)
    return p


def _refused(
    rm: ReplicaManager, p: Partition, result: ProducePartitionResult
) -> ProducePartitionResult:
    """A produce to a hosted partition refused before the append: counted as failed."""
    if rm.topic_stats is not None:
        rm.topic_stats.produced(p.topic, 0, 0, True)
    return result


def _append_failed(rm: ReplicaManager, p: Partition, e: Exception) -> ProducePartitionResult:
    if rm.topic_stats is not None:
        rm.topic_stats.produced(p.topic, 0, 0, True)
    if isinstance(e, ApiError):
        return ProducePartitionResult(
            e.error_code,
            log_start_offset=_safe_log_start(p),
            error_message=e.message,
            record_errors=e.record_errors if isinstance(e, InvalidRecord) else (),
        )
    log.error("append to %s-%d failed: %s", p.topic, p.index, e)
    return ProducePartitionResult(KafkaStorageError.error_code, error_message=str(e))


def _appended(rm: ReplicaManager, p: Partition, info: Any) -> ProducePartitionResult:
    stats = rm.topic_stats
    if stats is not None:  # a duplicate batch (a producer's retry) was not appended again
        dup = info.duplicate
        stats.produced(
            p.topic, 0 if dup else info.valid_bytes, 0 if dup else info.records_count, False
        )
    p.maybe_increment_high_watermark()
    p.wake_waiters()  # followers long-poll on the log end offset
    return ProducePartitionResult(
        0,
        info.first_offset,
        info.log_append_time if info.log_append_time is not None else -1,
        info.log_start_offset,
        last_offset=info.last_offset,
    )


def _safe_log_start(p: Partition) -> int:
    try:
        return int(p.log.log_start_offset)
    except Exception:  # pragma: no cover - diagnostics only
        return -1
