"""RemoteLogMetadataManager: where remote segment metadata is published and looked up.

* :class:`RemoteLogMetadataManager` — Kafka's plugin interface (storage-api), synchronous: a
  call returns once the event is applied to this broker's caches (Kafka returns a future that
  completes at that point).
* :class:`InMemoryRemoteLogMetadataManager` — everything in memory, every partition always
  ready. For tests.
* :class:`TopicBasedRemoteLogMetadataManager` — Kafka's default design: events are records of
  the internal topic ``__remote_log_metadata`` (values from :mod:`metadata_serde`, partition
  from :func:`metadata_partition_for`), written and read back through a
  :class:`MetadataPublisher` (the broker's own log in production, a list in tests). A call
  returns after the manager has consumed its own record. Per user partition it keeps a
  :class:`RemoteLogMetadataCache` and, in ``cache_dir``, the seed 003 file cache with the
  metadata-partition offset it covers, so a restart loads the file and consumes only the
  records after that offset (Kafka 3.8+ re-reads the whole topic).
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Iterable, Set
from pathlib import Path
from typing import Protocol, runtime_checkable

from tierlog.errors import (
    CorruptMetadataCacheError,
    CorruptMetadataError,
    InvalidRemoteStateTransitionError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageNotReadyError,
)
from tierlog.tiered import metadata_cache_file, metadata_serde
from tierlog.tiered.remote_log_metadata_cache import RemoteLogMetadataCache
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
    kafka_uuid_str,
)
from tierlog.tiered.remote_log_segment_state import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    is_valid_partition_delete_transition,
    is_valid_transition,
)

log = logging.getLogger(__name__)

REMOTE_LOG_METADATA_TOPIC_NAME = "__remote_log_metadata"
DEFAULT_METADATA_TOPIC_PARTITIONS = 50


# ------------------------------------------------------------------------------ partitioner


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2, seed 0x9747b28c, as a signed int."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length % 4
    tail = length & ~3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _java_long_hash(v: int) -> int:
    u = v & 0xFFFF_FFFF_FFFF_FFFF
    return (u ^ (u >> 32)) & 0xFFFFFFFF


def metadata_partition_for(topic_id_partition: TopicIdPartition, num_partitions: int) -> int:
    """The ``__remote_log_metadata`` partition of a user partition, as Kafka computes it.

    Kafka's ``RemoteLogMetadataTopicPartitioner``: ``toPositive(murmur2(bigEndianBytes(
    Objects.hash(topicId.leastSignificantBits, topicId.mostSignificantBits, partition))))
    % numPartitions``, with Java's 32-bit wrapping arithmetic.
    """
    if num_partitions <= 0:
        raise ValueError(f"number of metadata partitions must be positive, got {num_partitions}")
    raw = topic_id_partition.topic_id.bytes
    msb = int.from_bytes(raw[:8], "big", signed=True)
    lsb = int.from_bytes(raw[8:], "big", signed=True)
    h = 1
    for element in (_java_long_hash(lsb), _java_long_hash(msb), topic_id_partition.partition):
        h = (31 * h + element) & 0xFFFFFFFF
    return (murmur2(h.to_bytes(4, "big")) & 0x7FFFFFFF) % num_partitions


# ------------------------------------------------------------------------------ interface


class RemoteLogMetadataManager(abc.ABC):
    """Kafka's RemoteLogMetadataManager. Implementations are thread-safe."""

    @abc.abstractmethod
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a segment whose copy starts (state must be COPY_SEGMENT_STARTED).

        Raises:
            ValueError: another state.
            RemoteStorageError: the event could not be stored.
        """

    @abc.abstractmethod
    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Record a segment state change (any state but COPY_SEGMENT_STARTED).

        Raises:
            ValueError: state COPY_SEGMENT_STARTED.
            RemoteResourceNotFoundError: unknown segment.
            InvalidRemoteStateTransitionError: the lifecycle forbids it.
            RemoteStorageError: the event could not be stored.
        """

    @abc.abstractmethod
    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Record a deletion state of a whole partition (topic deletion).

        Raises:
            InvalidRemoteStateTransitionError: the lifecycle forbids it.
            RemoteStorageError: the event could not be stored.
        """

    @abc.abstractmethod
    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The readable (COPY_SEGMENT_FINISHED) segment holding ``offset`` of that epoch.

        Raises:
            RemoteResourceNotFoundError: the partition is not managed here.
            RemoteStorageNotReadyError: its metadata is still loading.
        """

    @abc.abstractmethod
    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        """Highest offset of the epoch copied to remote storage, if any."""

    @abc.abstractmethod
    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments in any state but DELETE_SEGMENT_FINISHED, sorted by start offset; only
        those containing ``leader_epoch`` when given."""

    @abc.abstractmethod
    def on_partition_leadership_changes(
        self,
        leader_partitions: Set[TopicIdPartition],
        follower_partitions: Set[TopicIdPartition],
    ) -> None:
        """This broker now leads or follows these partitions: load their metadata."""

    @abc.abstractmethod
    def on_stop_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        """These partitions moved away or were deleted: drop their metadata."""

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        """Total bytes of the segments listed for ``leader_epoch`` (Kafka's definition)."""
        return sum(
            m.segment_size_in_bytes
            for m in self.list_remote_log_segments(topic_id_partition, leader_epoch)
        )

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        """Whether the partition's metadata is loaded and can be served."""
        return True

    def poll(self) -> None:  # noqa: B027 - optional hook
        """Apply what other brokers published since the last call (topic-based managers)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; idempotent."""


# ------------------------------------------------------------------------------ shared store


def _name(state: RemoteLogSegmentState | RemotePartitionDeleteState | None) -> str:
    return "(none)" if state is None else state.name


class _MetadataStore:
    """Kafka's RemotePartitionMetadataStore: per-partition caches + partition delete states."""

    def __init__(self) -> None:
        self.caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self.delete_states: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    def cache_for(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self.caches.get(tp)
        if cache is None:
            raise RemoteResourceNotFoundError(f"no remote log metadata for partition {tp}")
        if not cache.is_initialized:
            raise RemoteStorageNotReadyError(f"remote log metadata of {tp} is still loading")
        return cache

    def check(self, metadata: RemoteLogMetadata) -> None:
        """Reject an event this store would refuse, before it is published."""
        if isinstance(metadata, RemoteLogSegmentMetadata):
            if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                raise ValueError(
                    f"{metadata.remote_log_segment_id}: added metadata must be "
                    f"COPY_SEGMENT_STARTED, not {metadata.state.name}"
                )
            cache = self.caches.get(metadata.topic_id_partition)
            if cache is not None:
                src = cache.segment_state(metadata.remote_log_segment_id.id)
                if not is_valid_transition(src, metadata.state):
                    raise InvalidRemoteStateTransitionError(
                        _name(src), metadata.state.name, metadata.remote_log_segment_id
                    )
        elif isinstance(metadata, RemoteLogSegmentMetadataUpdate):
            if metadata.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                raise ValueError(
                    f"{metadata.remote_log_segment_id}: COPY_SEGMENT_STARTED can not be an update"
                )
            cache = self.caches.get(metadata.topic_id_partition)
            if cache is not None and cache.is_initialized:
                src = cache.segment_state(metadata.remote_log_segment_id.id)
                if src is None:
                    raise RemoteResourceNotFoundError(
                        f"no remote log segment metadata found for {metadata.remote_log_segment_id}"
                    )
                if not is_valid_transition(src, metadata.state):
                    raise InvalidRemoteStateTransitionError(
                        src.name, metadata.state.name, metadata.remote_log_segment_id
                    )
        elif isinstance(metadata, RemotePartitionDeleteMetadata):
            existing = self.delete_states.get(metadata.topic_id_partition)
            psrc = existing.state if existing is not None else None
            if not is_valid_partition_delete_transition(psrc, metadata.state):
                raise InvalidRemoteStateTransitionError(
                    _name(psrc), metadata.state.name, metadata.topic_id_partition
                )

    def apply(self, metadata: RemoteLogMetadata) -> None:
        """Apply one event to the partition's cache (events for unknown partitions are
        ignored, as Kafka does).

        Raises:
            InvalidRemoteStateTransitionError, RemoteResourceNotFoundError, ValueError: the
                event is inconsistent with the cache.
        """
        if isinstance(metadata, RemoteLogSegmentMetadata):
            cache = self.caches.get(metadata.topic_id_partition)
            if cache is not None:
                cache.add_copy_in_progress_segment(metadata)
        elif isinstance(metadata, RemoteLogSegmentMetadataUpdate):
            cache = self.caches.get(metadata.topic_id_partition)
            if cache is not None:
                cache.update_remote_log_segment_metadata(metadata)
        elif isinstance(metadata, RemotePartitionDeleteMetadata):
            tp = metadata.topic_id_partition
            existing = self.delete_states.get(tp)
            src = existing.state if existing is not None else None
            if not is_valid_partition_delete_transition(src, metadata.state):
                raise InvalidRemoteStateTransitionError(_name(src), metadata.state.name, tp)
            self.delete_states[tp] = metadata
            if metadata.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self.delete_states.pop(tp, None)
                old = self.caches.get(tp)
                if old is not None:
                    # Every segment before is gone; events after it (remote storage enabled
                    # again on the topic) start a new history, which a replay must keep.
                    fresh = RemoteLogMetadataCache(tp)
                    if old.is_initialized:
                        fresh.mark_initialized()
                    self.caches[tp] = fresh
        elif isinstance(metadata, RemoteLogSegmentMetadataSnapshot):
            pass  # only ever found in Kafka 3.6-3.7 snapshot files, never in the topic


class InMemoryRemoteLogMetadataManager(RemoteLogMetadataManager):
    """All metadata in memory; any partition is created on first use and always ready.

    Thread-safe. For tests and for brokers that do not need metadata to survive a restart.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._store = _MetadataStore()

    def _cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self._store.caches.get(tp)
        if cache is None:
            cache = self._store.caches[tp] = RemoteLogMetadataCache(tp)
            cache.mark_initialized()
        return cache

    def _put(self, metadata: RemoteLogMetadata) -> None:
        with self._lock:
            if isinstance(metadata, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
                self._cache(metadata.topic_id_partition)
            self._store.check(metadata)
            self._store.apply(metadata)

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._put(metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._put(update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self._put(metadata)

    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            return self._cache(topic_id_partition).remote_log_segment_metadata(
                epoch_for_offset, offset
            )

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        with self._lock:
            return self._cache(topic_id_partition).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        with self._lock:
            return self._cache(topic_id_partition).list_remote_log_segments(leader_epoch)

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        with self._lock:
            return self._cache(topic_id_partition).remote_log_size(leader_epoch)

    def on_partition_leadership_changes(
        self,
        leader_partitions: Set[TopicIdPartition],
        follower_partitions: Set[TopicIdPartition],
    ) -> None:
        with self._lock:
            for tp in (*leader_partitions, *follower_partitions):
                self._cache(tp)

    def on_stop_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        """Kept: in-memory metadata has no other home (Kafka's test manager does the same)."""


# ------------------------------------------------------------------------------ topic based


@runtime_checkable
class MetadataPublisher(Protocol):
    """Access to the ``__remote_log_metadata`` topic (the broker's log, or a test double)."""

    def publish(self, metadata_partition: int, value: bytes) -> int:
        """Append a record (null key) durably; return its offset.

        Raises:
            RemoteStorageError: it could not be appended.
        """
        ...

    def read_from(self, metadata_partition: int, offset: int) -> Iterable[tuple[int, bytes]]:
        """``(offset, value)`` of the records from ``offset`` to the current end, in order."""
        ...


class InMemoryMetadataPublisher:
    """A :class:`MetadataPublisher` over Python lists (thread-safe). For tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.partitions: dict[int, list[bytes]] = {}

    def publish(self, metadata_partition: int, value: bytes) -> int:
        with self._lock:
            records = self.partitions.setdefault(metadata_partition, [])
            records.append(bytes(value))
            return len(records) - 1

    def read_from(self, metadata_partition: int, offset: int) -> Iterable[tuple[int, bytes]]:
        with self._lock:
            records = list(self.partitions.get(metadata_partition, ()))
        return [(o, records[o]) for o in range(max(offset, 0), len(records))]

    def end_offset(self, metadata_partition: int) -> int:
        with self._lock:
            return len(self.partitions.get(metadata_partition, ()))


class TopicBasedRemoteLogMetadataManager(RemoteLogMetadataManager):
    """Kafka's topic-based manager over a :class:`MetadataPublisher` (see the module doc).

    Per assigned user partition it remembers the next offset of its metadata partition to
    apply. Assigning a partition loads its file cache (when ``cache_dir`` is set and the file
    is valid) and consumes the metadata partition from the file's offset — or from 0 when the
    file is missing or corrupt — to the end; then the partition is ready. Records of
    partitions not assigned here are skipped after peeking at their partition.

    Thread-safe (one lock); no background thread: :meth:`poll` consumes what other brokers
    published (the broker calls it periodically, like Kafka's consumer task loop).
    """

    CACHE_FILE_SUFFIX = ".rlmcache"

    def __init__(
        self,
        publisher: MetadataPublisher,
        *,
        num_metadata_partitions: int = DEFAULT_METADATA_TOPIC_PARTITIONS,
        cache_dir: Path | None = None,
    ) -> None:
        if num_metadata_partitions <= 0:
            raise ValueError("num_metadata_partitions must be positive")
        self._publisher = publisher
        self._num_partitions = num_metadata_partitions
        self._cache_dir = cache_dir
        self._lock = threading.RLock()
        self._store = _MetadataStore()
        self._next_offset: dict[TopicIdPartition, int] = {}
        #: Metadata offset each partition's file cache was last written at (flush skips
        #: the partitions that consumed nothing since).
        self._saved_offset: dict[TopicIdPartition, int] = {}
        self._closed = False

    @property
    def num_metadata_partitions(self) -> int:
        """Partitions of ``__remote_log_metadata`` (the events are routed by this count)."""
        return self._num_partitions

    # ------------------------------------------------------------------ files

    def cache_file(self, tp: TopicIdPartition) -> Path | None:
        """Where the file cache of a partition lives (None without ``cache_dir``)."""
        if self._cache_dir is None:
            return None
        return (
            self._cache_dir
            / f"{tp.topic}-{tp.partition}-{kafka_uuid_str(tp.topic_id)}{self.CACHE_FILE_SUFFIX}"
        )

    def flush(self) -> None:
        """Write the file cache of every assigned partition (atomically).

        Raises:
            OSError: a file could not be written (the earlier file stays valid).
        """
        with self._lock:
            for tp, cache in self._store.caches.items():
                self._save(tp, cache)

    def _save(self, tp: TopicIdPartition, cache: RemoteLogMetadataCache) -> None:
        path = self.cache_file(tp)
        if path is None or not cache.is_initialized:
            return
        mp = self.metadata_partition(tp)
        offset = self._next_offset[tp]
        if self._saved_offset.get(tp) == offset:
            return  # the file already holds this state
        metadata_cache_file.save(path, cache, {mp: offset})
        self._saved_offset[tp] = offset

    # ------------------------------------------------------------------ consuming

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        return metadata_partition_for(tp, self._num_partitions)

    def _catch_up(self, mp: int) -> None:
        members = [tp for tp in self._store.caches if self.metadata_partition(tp) == mp]
        if not members:
            return
        start = min(self._next_offset[tp] for tp in members)
        end = start
        for offset, value in self._publisher.read_from(mp, start):
            end = offset + 1
            try:
                tp = metadata_serde.peek_topic_id_partition(value)
                if tp is None or tp not in self._store.caches or offset < self._next_offset[tp]:
                    continue
                self._store.apply(metadata_serde.deserialize(value))
            except (CorruptMetadataError, RemoteStorageError, ValueError) as e:
                # A record that cannot apply is skipped: it must not wedge the partition.
                log.error(
                    "skipping %s record %d-%d: %s", REMOTE_LOG_METADATA_TOPIC_NAME, mp, offset, e
                )
        for tp in members:
            if tp in self._next_offset:
                self._next_offset[tp] = max(self._next_offset[tp], end)

    def poll(self) -> None:
        """Consume what was published since the last call, for every assigned partition."""
        with self._lock:
            for mp in sorted({self.metadata_partition(tp) for tp in self._store.caches}):
                self._catch_up(mp)

    def _assign(self, tp: TopicIdPartition) -> None:
        if tp in self._store.caches:
            return
        mp = self.metadata_partition(tp)
        cache, next_offset = RemoteLogMetadataCache(tp), 0
        source = "no cache file"
        path = self.cache_file(tp)
        if path is not None and path.exists():
            try:
                loaded, offsets = metadata_cache_file.load(path)
                if loaded.topic_id_partition != tp or mp not in offsets:
                    raise CorruptMetadataCacheError(f"{path} is not the cache of {tp} at {mp}")
                cache, next_offset = loaded, offsets[mp]
                self._saved_offset[tp] = next_offset
                source = "loaded from its cache file"
            except CorruptMetadataCacheError as e:
                log.warning("re-reading %s for %s: %s", REMOTE_LOG_METADATA_TOPIC_NAME, tp, e)
                source = "corrupt cache file, re-read"

        self._store.caches[tp] = cache
        self._next_offset[tp] = next_offset
        self._catch_up(mp)
        cache = self._store.caches[tp]  # a replayed partition deletion starts a fresh cache
        cache.mark_initialized()
        log.info(
            "remote log metadata of %s ready: %s, consumed %s-%d from offset %d to %d",
            tp,
            source,
            REMOTE_LOG_METADATA_TOPIC_NAME,
            mp,
            next_offset,
            self._next_offset[tp],
        )

    # ------------------------------------------------------------------ publishing

    def _publish(self, tp: TopicIdPartition, metadata: RemoteLogMetadata) -> None:
        with self._lock:
            if self._closed:
                raise RemoteStorageError("remote log metadata manager is closed")
            self._store.check(metadata)
            mp = self.metadata_partition(tp)
            self._publisher.publish(mp, metadata_serde.serialize(metadata))
            self._catch_up(mp)  # returns once our own record is consumed

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._publish(metadata.topic_id_partition, metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._publish(update.topic_id_partition, update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self._publish(metadata.topic_id_partition, metadata)
        if metadata.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            with self._lock:
                self._store.caches.pop(metadata.topic_id_partition, None)
                self._next_offset.pop(metadata.topic_id_partition, None)
                self._saved_offset.pop(metadata.topic_id_partition, None)
                path = self.cache_file(metadata.topic_id_partition)
                if path is not None:
                    path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ queries

    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            cache = self._store.cache_for(topic_id_partition)
            return cache.remote_log_segment_metadata(epoch_for_offset, offset)

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        with self._lock:
            return self._store.cache_for(topic_id_partition).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        with self._lock:
            cache = self._store.cache_for(topic_id_partition)
            return cache.list_remote_log_segments(leader_epoch)

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        with self._lock:
            return self._store.cache_for(topic_id_partition).remote_log_size(leader_epoch)

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        with self._lock:
            cache = self._store.caches.get(topic_id_partition)
            return cache is not None and cache.is_initialized

    # ------------------------------------------------------------------ assignment

    def on_partition_leadership_changes(
        self,
        leader_partitions: Set[TopicIdPartition],
        follower_partitions: Set[TopicIdPartition],
    ) -> None:
        with self._lock:
            for tp in (*leader_partitions, *follower_partitions):
                self._assign(tp)

    def on_stop_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        """Save each partition's file cache, then forget it."""
        with self._lock:
            for tp in partitions:
                cache = self._store.caches.get(tp)
                if cache is None:
                    continue
                self._save(tp, cache)
                del self._store.caches[tp]
                del self._next_offset[tp]
                self._saved_offset.pop(tp, None)

    def forget_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Drop partitions whose topic is gone: their caches and their cache files (another
        broker deleted their remote data)."""
        with self._lock:
            for tp in partitions:
                self._store.caches.pop(tp, None)
                self._next_offset.pop(tp, None)
                self._saved_offset.pop(tp, None)
                path = self.cache_file(tp)
                if path is not None:
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        """Save every file cache and stop serving; idempotent."""
        with self._lock:
            if self._closed:
                return
            self.flush()
            self._closed = True
            self._store = _MetadataStore()
            self._next_offset.clear()
            self._saved_offset.clear()


__all__ = [
    "REMOTE_LOG_METADATA_TOPIC_NAME",
    "DEFAULT_METADATA_TOPIC_PARTITIONS",
    "RemoteLogMetadataManager",
    "InMemoryRemoteLogMetadataManager",
    "MetadataPublisher",
    "InMemoryMetadataPublisher",
    "TopicBasedRemoteLogMetadataManager",
    "metadata_partition_for",
    "murmur2",
]
