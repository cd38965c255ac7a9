"""The group coordinator's persistence: the internal topic ``__consumer_offsets``.

The coordinator writes ``(key, value)`` records (Kafka's OffsetCommit / GroupMetadata key and
value schemas; a ``None`` value is a tombstone) to partition ``partition_for(group_id)`` of the
topic, and rebuilds its state at startup by replaying each partition from its log start:
last value per key wins, a tombstone removes the key.

The topic is created at broker startup with ``offsets.topic.num.partitions`` partitions,
``cleanup.policy=compact`` and ``segment.bytes=offsets.topic.segment.bytes``; the log cleaner
(:mod:`tierlog.log.log_cleaner`, ``log.cleaner.enable``) compacts it like any compacted topic,
so it stays small on disk and the replay reads little more than the live keys.

Not thread-safe: use from the event loop thread. :meth:`append` is not idempotent (a retry
appends again, which replay folds into the same state).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tierlog.coordinator.offset_store import StoredBatch
from tierlog.errors import (
    ApiError,
    CoordinatorNotAvailable,
    KafkaStorageError,
    NotLeaderOrFollower,
    for_code,
)
from tierlog.log.topic_names import GROUP_METADATA_TOPIC_NAME
from tierlog.records import Record
from tierlog.records.default_records import build_batch, control_record_type, iter_records
from tierlog.records.record_batch import RecordBatchHeader

if TYPE_CHECKING:
    from tierlog.log.log_manager import LogManager
    from tierlog.server.kafka_apis import KafkaApis
    from tierlog.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

_REPLAY_CHUNK = 1 << 20
#: How long a commit waits for the ISR (Kafka's offsets.commit.timeout.ms).
_COMMIT_TIMEOUT_MS = 5000
#: How long a transaction state write waits for the ISR: Kafka's TransactionStateManager waits
#: the broker's request.timeout.ms (30 s by default), long enough for a dead or paused
#: follower to leave the ISR (replica.lag.time.max.ms); a shorter wait failed PrepareCommit
#: whenever a follower of ``__transaction_state`` had just stopped, and the transaction timed
#: out and was aborted while the client retried.
TXN_STATE_APPEND_TIMEOUT_MS = 30_000


def offsets_topic_configs(segment_bytes: int) -> dict[str, str]:
    """Topic configs of ``__consumer_offsets`` (Kafka's GroupCoordinator.offsetsTopicConfigs)."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(segment_bytes),
    }


def ensure_offsets_topic(log_manager: LogManager, num_partitions: int, segment_bytes: int) -> int:
    """Create ``__consumer_offsets`` when missing; its partition count (fixed once created)."""
    info = log_manager.topic(GROUP_METADATA_TOPIC_NAME)
    if info is None:
        info = log_manager.create_topic(
            GROUP_METADATA_TOPIC_NAME, num_partitions, offsets_topic_configs(segment_bytes)
        )
        log.info("created %s with %d partitions", GROUP_METADATA_TOPIC_NAME, num_partitions)
    elif info.num_partitions != num_partitions:
        log.warning(
            "%s has %d partitions; offsets.topic.num.partitions=%d is ignored once the topic "
            "exists",
            GROUP_METADATA_TOPIC_NAME,
            info.num_partitions,
            num_partitions,
        )
    return int(info.num_partitions)


def ensure_offsets_topic_in_cluster(apis: KafkaApis) -> None:
    """Create ``__consumer_offsets`` in the cluster, in the background (Kafka creates it on
    the first FindCoordinator): ``offsets.topic.num.partitions`` partitions of
    ``offsets.topic.replication.factor`` replicas, refused (logged, asked again by the next
    FindCoordinator) while fewer brokers are alive."""
    from tierlog.cluster.zk_admin import NewClusterTopic

    admin = apis.admin
    if admin is None:
        return
    c = apis.config
    rf = c.offsets_topic_replication_factor
    alive = len(apis.alive_brokers())
    if alive < rf:
        log.warning(
            "cannot create %s yet: offsets.topic.replication.factor is %d and %d brokers are "
            "alive",
            GROUP_METADATA_TOPIC_NAME, rf, alive,
        )  # fmt: skip
        return
    topic = NewClusterTopic(
        GROUP_METADATA_TOPIC_NAME,
        c.offsets_topic_num_partitions,
        rf,
        offsets_topic_configs(c.offsets_topic_segment_bytes),
    )

    async def create() -> None:
        (result,) = await admin.create_topics([topic], validate_only=False, timeout_ms=0)
        if isinstance(result, ApiError):
            log.info("creating %s: %s", GROUP_METADATA_TOPIC_NAME, result)

    apis.in_background(f"create topic {GROUP_METADATA_TOPIC_NAME}", create())


class OffsetStore:
    """A coordinator's :class:`tierlog.coordinator.offset_store.OffsetStore` on the logs of
    its internal topic (``__consumer_offsets`` unless ``topic`` says otherwise)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        topic: str = GROUP_METADATA_TOPIC_NAME,
        append_timeout_ms: int = _COMMIT_TIMEOUT_MS,
    ) -> None:
        self._rm = replica_manager
        self._topic = topic
        self._append_timeout_ms = append_timeout_ms

    def _log(self, partition: int):  # type: ignore[no-untyped-def]
        topic = self._topic
        try:
            p = self._rm.get_partition(topic, partition)
        except KafkaStorageError as e:
            raise CoordinatorNotAvailable(f"{topic}-{partition} is not available: {e}") from e
        if p is None:
            raise CoordinatorNotAvailable(f"{topic}-{partition} is not available")
        return p

    async def append(
        self,
        partition: int,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        """Append ``records`` as one batch (of the producer's transaction with
        ``transactional``); returns once the ISR has them.

        Raises:
            CoordinatorNotAvailable: the partition does not exist.
            NotLeaderOrFollower: this broker no longer leads it.
            ApiError: the append failed (the subclass of its error code).
        """
        if not records:
            return
        now = int(time.time() * 1000)
        p = self._log(partition)  # raises CoordinatorNotAvailable when the partition is missing
        batch = build_batch(
            [(now, k, v) for k, v in records],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=self._next_sequence(p, producer_id, producer_epoch),
            is_transactional=transactional,
        )
        rm, topic = self._rm, self._topic
        # Kafka's offsets.commit.required.acks (-1): a commit is acknowledged once the ISR
        # has it, so it survives the coordinator's broker.
        if rm.append_in_thread(topic, partition):  # flush.messages: the append may fsync
            r = await rm.append_records_in_thread(
                topic, partition, batch, internal=True, required_acks=-1
            )
        else:
            r = rm.append_records(topic, partition, batch, internal=True, required_acks=-1)
        r = await rm.wait_for_acks(topic, partition, r, self._append_timeout_ms)
        if r.error_code == NotLeaderOrFollower.error_code:
            raise NotLeaderOrFollower(f"{topic}-{partition} moved")
        if r.error_code:
            # The code's own error (NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT ...): the
            # coordinators map each to what their clients are told.
            raise for_code(r.error_code)(
                f"append to {topic}-{partition} failed: "
                f"error {r.error_code} {r.error_message or ''}"
            )

    @staticmethod
    def _next_sequence(p: Any, producer_id: int, producer_epoch: int) -> int:
        """The sequence of a producer's next batch here. Kafka's coordinators write 0 and
        their appends skip the producer checks; this log checks every producer batch (a
        second TxnOffsetCommit of an epoch at sequence 0 would pass as a duplicate and not be
        written), so the batch continues the producer's sequence on this partition. The
        caller serializes appends per partition."""
        if producer_id < 0:
            return -1
        entry = p.log.producer_state_manager.last_entry(producer_id)
        if entry is None or entry.producer_epoch != producer_epoch or entry.is_empty:
            return 0
        return int((entry.last_seq + 1) % (1 << 31))

    def replay(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        """Every record of the partition, oldest first (keys without a key are skipped)."""
        return self._iter(partition)

    def _iter(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        for b in self._iter_batches(partition):
            if b.control_type is None:
                yield from b.records

    def replay_batches(self, partition: int) -> Iterable[StoredBatch]:
        """Every batch of the partition, oldest first, control batches included."""
        return self._iter_batches(partition)

    def _iter_batches(self, partition: int) -> Iterator[StoredBatch]:
        lg = self._log(partition).log
        topic = self._topic

        def stop(offset: int, e: ApiError) -> None:
            log.error("replay of %s-%d stopped at %d: %s", topic, partition, offset, e)

        offset, end = int(lg.log_start_offset), int(lg.log_end_offset)
        while offset < end:
            try:
                buf = lg.read(offset, _REPLAY_CHUNK, max_offset=end, min_one_message=True).records
            except ApiError as e:
                stop(offset, e)
                return
            progressed = False
            for header, records in iter_records(buf or b"", check_crc=False):
                if header.last_offset >= offset:
                    yield self._stored(header, records)
                if header.last_offset + 1 > offset:
                    offset = header.last_offset + 1
                    progressed = True
            if not progressed:
                return

    @staticmethod
    def _stored(header: RecordBatchHeader, records: list[Record]) -> StoredBatch:
        if header.is_control_batch:
            control = control_record_type(records[0].key) if records else -1
            return StoredBatch([], header.producer_id, True, control)
        return StoredBatch(
            [(r.key, r.value) for r in records if r.key is not None],
            header.producer_id,
            header.is_transactional,
        )
