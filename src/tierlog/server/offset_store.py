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
from typing import TYPE_CHECKING

from tierlog.errors import (
    ApiError,
    CoordinatorNotAvailable,
    KafkaStorageError,
    NotLeaderOrFollower,
)
from tierlog.log.log_replay import iter_log_records
from tierlog.records.default_records import build_batch
from tierlog.server.replica_manager import GROUP_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from tierlog.log.log_manager import LogManager
    from tierlog.server.kafka_apis import KafkaApis
    from tierlog.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

_REPLAY_CHUNK = 1 << 20
#: How long a commit waits for the ISR (Kafka's offsets.commit.timeout.ms).
_COMMIT_TIMEOUT_MS = 5000


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
    """The group coordinator's :class:`tierlog.coordinator.offset_store.OffsetStore` on the
    logs of ``__consumer_offsets``."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._rm = replica_manager

    def _log(self, partition: int):  # type: ignore[no-untyped-def]
        try:
            p = self._rm.get_partition(GROUP_METADATA_TOPIC_NAME, partition)
        except KafkaStorageError as e:
            raise CoordinatorNotAvailable(
                f"{GROUP_METADATA_TOPIC_NAME}-{partition} is not available: {e}"
            ) from e
        if p is None:
            raise CoordinatorNotAvailable(
                f"{GROUP_METADATA_TOPIC_NAME}-{partition} is not available"
            )
        return p

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append ``records`` as one batch; returns once they are in the log.

        Raises:
            CoordinatorNotAvailable: the partition does not exist.
            KafkaStorageError: the append failed.
        """
        if not records:
            return
        now = int(time.time() * 1000)
        batch = build_batch([(now, k, v) for k, v in records])
        self._log(partition)  # raises CoordinatorNotAvailable when the partition is missing
        rm, topic = self._rm, GROUP_METADATA_TOPIC_NAME
        # Kafka's offsets.commit.required.acks (-1): a commit is acknowledged once the ISR
        # has it, so it survives the coordinator's broker.
        if rm.append_in_thread(topic, partition):  # flush.messages: the append may fsync
            r = await rm.append_records_in_thread(
                topic, partition, batch, internal=True, required_acks=-1
            )
        else:
            r = rm.append_records(topic, partition, batch, internal=True, required_acks=-1)
        r = await rm.wait_for_acks(topic, partition, r, _COMMIT_TIMEOUT_MS)
        if r.error_code == NotLeaderOrFollower.error_code:
            raise NotLeaderOrFollower(f"{GROUP_METADATA_TOPIC_NAME}-{partition} moved")
        if r.error_code:
            raise KafkaStorageError(
                f"append to {GROUP_METADATA_TOPIC_NAME}-{partition} failed: "
                f"error {r.error_code} {r.error_message or ''}"
            )

    def replay(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        """Every record of the partition, oldest first (keys without a key are skipped)."""
        return self._iter(partition)

    def _iter(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        lg = self._log(partition).log

        def stop(offset: int, e: ApiError) -> None:
            log.error(
                "replay of %s-%d stopped at %d: %s", GROUP_METADATA_TOPIC_NAME, partition, offset, e
            )

        start, end = int(lg.log_start_offset), int(lg.log_end_offset)
        for r in iter_log_records(lg, start, end, stop, chunk_bytes=_REPLAY_CHUNK):
            if r.key is not None:
                yield r.key, r.value
