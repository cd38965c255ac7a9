"""The internal topic ``__remote_log_metadata`` on the broker's own logs, as the
:class:`~tierlog.tiered.MetadataPublisher` of the topic-based RemoteLogMetadataManager.

The topic has ``remote.log.metadata.topic.num.partitions`` partitions (fixed once created,
since the partition of a user partition's events is a hash modulo that count), infinite
retention (``retention.ms=-1``, ``retention.bytes=-1``, ``cleanup.policy=delete``) and is
never tiered (``remote.storage.enable=false``). It is created at startup when
``remote.log.storage.system.enable=true``. Clients may read it (it is internal: they cannot
produce to it, delete it or change it).

Each event is one record (null key, the serde's value) in a batch of its own, appended with
leader epoch 0 and fsynced before :meth:`LogMetadataPublisher.publish` returns: the remote log
manager deletes local segments once COPY_SEGMENT_FINISHED is published, so that event must
survive a machine crash as well as a process crash. Kafka gets the same guarantee from
``acks=all`` replication; a single node gets it from the fsync (~2 per tiered segment).

Thread-safe: appends are serialised by one lock (the remote log manager publishes from its
worker threads); reads take no lock (the Log's reads are lock-free).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tierlog.errors import ApiError, KafkaStorageError, RemoteStorageError
from tierlog.log.log_replay import iter_log_records
from tierlog.records.default_records import build_batch
from tierlog.tiered.remote_log_metadata_manager import REMOTE_LOG_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.log.log_manager import LogManager

__all__ = [
    "REMOTE_LOG_METADATA_TOPIC_NAME",
    "LogMetadataPublisher",
    "ensure_remote_log_metadata_topic",
    "remote_log_metadata_topic_configs",
]

log = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20
#: Segments of the metadata topic: events are ~100 bytes, so 100 MiB is ~1M events.
_SEGMENT_BYTES = 104_857_600


def remote_log_metadata_topic_configs() -> dict[str, str]:
    """Topic configs of ``__remote_log_metadata`` (Kafka's TopicBasedRemoteLogMetadataManager
    creates it with infinite retention, delete policy, never tiered)."""
    return {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "remote.storage.enable": "false",
        "segment.bytes": str(_SEGMENT_BYTES),
    }


def ensure_remote_log_metadata_topic(log_manager: LogManager, num_partitions: int) -> int:
    """Create ``__remote_log_metadata`` when missing; its partition count (fixed once
    created: a different ``remote.log.metadata.topic.num.partitions`` is ignored, as the
    events already written were routed by the old count).

    Raises:
        KafkaStorageError: the partitions cannot be created.
    """
    info = log_manager.topic(REMOTE_LOG_METADATA_TOPIC_NAME)
    if info is None:
        info = log_manager.create_topic(
            REMOTE_LOG_METADATA_TOPIC_NAME, num_partitions, remote_log_metadata_topic_configs()
        )
        log.info("created %s with %d partitions", REMOTE_LOG_METADATA_TOPIC_NAME, num_partitions)
    elif info.num_partitions != num_partitions:
        log.warning(
            "%s has %d partitions; remote.log.metadata.topic.num.partitions=%d is ignored "
            "once the topic exists",
            REMOTE_LOG_METADATA_TOPIC_NAME,
            info.num_partitions,
            num_partitions,
        )
    return int(info.num_partitions)


class LogMetadataPublisher:
    """:class:`~tierlog.tiered.MetadataPublisher` over the logs of ``__remote_log_metadata``.

    Args:
        log_manager: where the topic's logs live.
        on_append: called with the metadata partition after each publish (from the
            publishing thread), e.g. to wake fetches parked on that partition.
        time_ms: the clock for record timestamps.
    """

    def __init__(
        self,
        log_manager: LogManager,
        *,
        on_append: Callable[[int], None] | None = None,
        time_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._log_manager = log_manager
        self.on_append = on_append
        self._time_ms = time_ms
        self._lock = threading.Lock()
        #: Counters (tests, the startup log line): events appended, records read back.
        self.published = 0
        self.records_read = 0

    def _log(self, metadata_partition: int) -> Log:
        try:
            lg = self._log_manager.get_log(REMOTE_LOG_METADATA_TOPIC_NAME, metadata_partition)
        except KafkaStorageError as e:
            raise RemoteStorageError(
                f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition} is not available: {e}"
            ) from e
        if lg is None or lg.closed:
            raise RemoteStorageError(
                f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition} is not available"
            )
        return lg

    def publish(self, metadata_partition: int, value: bytes) -> int:
        """Append one event durably (appended and fsynced); its offset.

        Raises:
            RemoteStorageError: the partition is missing or the append failed.
        """
        lg = self._log(metadata_partition)
        batch = build_batch([(self._time_ms(), None, value)])
        where = f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition}"
        with self._lock:
            try:
                info = lg.append(batch, leader_epoch=0)
                lg.flush()
            except (ApiError, OSError, ValueError) as e:
                raise RemoteStorageError(f"cannot append to {where}: {e}") from e
            # One replica: what is in the log is committed.
            lg.maybe_increment_high_watermark(lg.log_end_offset)
            self.published += 1
        callback = self.on_append
        if callback is not None:
            callback(metadata_partition)
        return int(info.first_offset)

    def read_from(self, metadata_partition: int, offset: int) -> Iterator[tuple[int, bytes]]:
        """``(offset, value)`` of every event from ``offset`` to the current log end."""
        lg = self._log(metadata_partition)

        def fail(at: int, e: ApiError) -> None:
            raise RemoteStorageError(
                f"reading {REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition} at {at}: {e}"
            ) from e

        start = max(offset, lg.log_start_offset)
        for r in iter_log_records(lg, start, lg.log_end_offset, fail, chunk_bytes=_READ_CHUNK):
            if r.value is not None:
                self.records_read += 1
                yield r.offset, bytes(r.value)
