"""Direct remote reads: remote segments listed from ``__remote_log_metadata``, read from storage.

Driver side, :func:`list_remote_segments`: the readable (COPY_SEGMENT_FINISHED) remote segments
of each partition. They come from the same place the brokers learn them from — Kafka's metadata
records in the internal topic ``__remote_log_metadata`` — read over Fetch
(:class:`MetadataTopicReader`) and applied by tiered storage's own
:class:`~tierlog.tiered.TopicBasedRemoteLogMetadataManager` (only the metadata partitions
that hold the partitions read, from offset 0; no cache file). Listing objects instead would miss
the states (a half-copied or half-deleted segment has objects too).

Executor side, :func:`read_remote_range`: the records of ``[start, end)`` of one remote
segment, straight from object storage through tiered storage's
:class:`~tierlog.tiered.storage.PyArrowRemoteStorageManager` (``file://``, ``s3://``, ...): the
offset index (one GET of the ``.indexes`` object, only when the range does not start at the
segment's start) gives the byte position to start at, then the ``.log`` object is read in
ranged reads of :data:`CHUNK_BYTES` and decoded into Arrow, a partial trailing batch carried
into the next read.

Transactions: the aborted transactions of a remote range come from the transaction indexes
of its segment and the later remote segments (Kafka's ``collectAbortedTransactions``); the
driver collects them once per partition (only segments whose metadata says their transaction
index is not empty). Known gap: a transaction that starts in remote storage and whose ABORT
marker is still only in the local log is not seen (Kafka continues into the local segments).
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final

import pyarrow as pa

from tierlog.errors import CorruptRecordError, RemoteStorageError
from tierlog.log.abstract_index import largest_lower_bound_slot
from tierlog.records import iter_records
from tierlog.spark.arrow_decode import PartitionDecoder
from tierlog.spark.fetch_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_UNCOMMITTED,
    KafkaClient,
    TopicInfo,
)
from tierlog.tiered import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicBasedRemoteLogMetadataManager,
    TopicIdPartition,
)
from tierlog.tiered.storage import IndexType, PyArrowRemoteStorageManager

__all__ = [
    "CHUNK_BYTES",
    "MetadataTopicReader",
    "RemoteSegmentLister",
    "aborted_transactions_in",
    "list_remote_segments",
    "parse_transaction_index",
    "read_remote_range",
    "remote_storage",
]

log = logging.getLogger(__name__)

#: Bytes of a remote segment fetched per ranged read.
CHUNK_BYTES: Final = 16 << 20

_OFFSET_ENTRY: Final = struct.Struct(">ii")  # relative offset, position
_OFFSET_KEY: Final = struct.Struct(">i")
_ABORTED_TXN: Final = struct.Struct(">hqqqq")  # version, producerId, first, last, LSO

#: (producer_id, first_offset, last_offset) of one aborted transaction.
AbortedTxn = tuple[int, int, int]


# ------------------------------------------------------------------------------ metadata


class MetadataTopicReader:
    """A read-only :class:`~tierlog.tiered.MetadataPublisher` over Fetch of the metadata topic."""

    def __init__(self, client: KafkaClient, *, max_bytes: int = 8 << 20) -> None:
        self._client = client
        self._max_bytes = max_bytes

    def publish(self, metadata_partition: int, value: bytes) -> int:
        raise RemoteStorageError("the Spark data source never publishes remote log metadata")

    def read_from(self, metadata_partition: int, offset: int) -> Iterable[tuple[int, bytes]]:
        topic = REMOTE_LOG_METADATA_TOPIC_NAME
        out: list[tuple[int, bytes]] = []
        end = self._client.list_offsets(
            {(topic, metadata_partition): LATEST_TIMESTAMP}, isolation_level=READ_UNCOMMITTED
        )[(topic, metadata_partition)][0]
        start = self._client.list_offsets(
            {(topic, metadata_partition): EARLIEST_TIMESTAMP}, isolation_level=READ_UNCOMMITTED
        )[(topic, metadata_partition)][0]
        pos = max(offset, start)
        while pos < end:
            fetched = self._client.fetch(
                topic,
                metadata_partition,
                pos,
                partition_max_bytes=self._max_bytes,
                max_wait_ms=0,
                isolation_level=READ_UNCOMMITTED,
            )
            nxt = pos
            for header, records in iter_records(fetched.records):
                nxt = header.next_offset
                if header.is_control_batch:
                    continue
                out += [(r.offset, r.value) for r in records if r.offset >= pos and r.value]
            if nxt == pos:
                break  # nothing more readable (should not happen below the end)
            pos = nxt
        return out


class RemoteSegmentLister:
    """Readable remote segments per partition, from ``__remote_log_metadata``, kept up to date.

    The first call reads the metadata partitions of the partitions asked for from offset 0;
    later calls (a streaming query's next micro-batch) only consume what was published since,
    and partitions asked for the first time are loaded then. Not thread-safe.
    """

    def __init__(self, client: KafkaClient) -> None:
        self._client = client
        self._rlmm: TopicBasedRemoteLogMetadataManager | None = None
        self._assigned: set[TopicIdPartition] = set()

    def close(self) -> None:
        if self._rlmm is not None:
            self._rlmm.close()
            self._rlmm = None
            self._assigned.clear()

    def segments(
        self, topics: Mapping[str, TopicInfo], partitions: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], list[RemoteLogSegmentMetadata]]:
        """Sorted by start offset, without overlaps; partitions without remote data (or of
        topics without an id, or with no metadata topic at all) map to an empty list."""
        out: dict[tuple[str, int], list[RemoteLogSegmentMetadata]] = {tp: [] for tp in partitions}
        tips = {}
        for topic, partition in partitions:
            info = topics.get(topic)
            if info is not None and info.topic_id is not None:
                tips[(topic, partition)] = TopicIdPartition(info.topic_id, topic, partition)
        if not tips:
            return out
        if self._rlmm is None:
            name = REMOTE_LOG_METADATA_TOPIC_NAME
            meta = self._client.metadata([name]).get(name)
            if meta is None or not meta.partitions:
                return out
            self._rlmm = TopicBasedRemoteLogMetadataManager(
                MetadataTopicReader(self._client), num_metadata_partitions=len(meta.partitions)
            )
        else:
            self._rlmm.poll()
        new = set(tips.values()) - self._assigned
        if new:
            self._rlmm.on_partition_leadership_changes(new, set())
            self._assigned |= new
        for tp, tip in tips.items():
            finished = [
                m
                for m in self._rlmm.list_remote_log_segments(tip)
                if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            ]
            out[tp] = _chain(finished)
        return out


def list_remote_segments(
    client: KafkaClient,
    topics: Mapping[str, TopicInfo],
    partitions: Sequence[tuple[str, int]],
) -> dict[tuple[str, int], list[RemoteLogSegmentMetadata]]:
    """One-shot :meth:`RemoteSegmentLister.segments`."""
    lister = RemoteSegmentLister(client)
    try:
        return lister.segments(topics, partitions)
    finally:
        lister.close()


def _chain(segments: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
    """Non-overlapping segments covering as much as possible, in offset order.

    Segments of different leader epochs may overlap (a copy by an old leader); at each point
    the segment reaching furthest wins.
    """
    chain: list[RemoteLogSegmentMetadata] = []
    next_offset = -1
    for m in sorted(segments, key=lambda m: (m.start_offset, -m.end_offset)):
        if m.end_offset < next_offset:
            continue  # contained in what is chosen already
        if m.start_offset < next_offset:
            continue  # overlaps: keep the earlier (reads can only start at a segment start)
        chain.append(m)
        next_offset = m.end_offset + 1
    return chain


# ------------------------------------------------------------------------------ indexes


def parse_transaction_index(data: bytes) -> list[AbortedTxn]:
    """Kafka's transaction index: 34-byte ``AbortedTxn`` entries.

    Raises:
        CorruptRecordError: a size that is not a multiple of 34 or an unknown entry version.
    """
    if len(data) % _ABORTED_TXN.size:
        raise CorruptRecordError(f"transaction index of {len(data)} bytes is corrupt")
    out = []
    for version, pid, first, last, _lso in _ABORTED_TXN.iter_unpack(data):
        if version != 0:
            raise CorruptRecordError(f"transaction index entry version {version}")
        out.append((pid, first, last))
    return out


def aborted_transactions_in(
    txns: Iterable[AbortedTxn], start: int, end: int
) -> list[tuple[int, int]]:
    """``(producer_id, first_offset)`` of the transactions overlapping ``[start, end)``."""
    return sorted({(pid, first) for pid, first, last in txns if last >= start and first < end})


def _offset_position(offset_index: bytes, base_offset: int, target: int) -> int:
    """Byte position to start scanning for ``target`` (Kafka's ``OffsetIndex.lookup``)."""
    entries = len(offset_index) // _OFFSET_ENTRY.size
    # An index not trimmed at roll ends in zero entries: keep the increasing prefix.
    n = 0
    last = -1
    while n < entries:
        rel, _ = _OFFSET_ENTRY.unpack_from(offset_index, n * _OFFSET_ENTRY.size)
        if rel <= last:
            break
        last = rel
        n += 1
    slot = largest_lower_bound_slot(
        offset_index, n, target - base_offset, _OFFSET_ENTRY.size, 0, _OFFSET_KEY
    )
    if slot < 0:
        return 0
    return int(_OFFSET_ENTRY.unpack_from(offset_index, slot * _OFFSET_ENTRY.size)[1])


# ------------------------------------------------------------------------------ reading

_RSM_LOCK = threading.Lock()
_RSM_CACHE: dict[tuple[tuple[str, str], ...], PyArrowRemoteStorageManager] = {}


def remote_storage(config: Mapping[str, str]) -> PyArrowRemoteStorageManager:
    """The remote storage of ``tierlog.remote.*`` options, one per config per process.

    Raises:
        ConfigError: a bad URI, endpoint or value.
    """
    key = tuple(sorted(config.items()))
    with _RSM_LOCK:
        rsm = _RSM_CACHE.get(key)
        if rsm is None:
            rsm = _RSM_CACHE[key] = PyArrowRemoteStorageManager.from_config(dict(config))
        return rsm


def read_remote_range(
    rsm: PyArrowRemoteStorageManager,
    segment: RemoteLogSegmentMetadata,
    decoder: PartitionDecoder,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``[decoder.start_offset, decoder.end_offset)`` from one remote segment:
    fetched ``chunk_bytes`` at a time, decoded a window at a time
    (:meth:`~.arrow_decode.PartitionDecoder.decode_windows`).

    Raises:
        RemoteResourceNotFoundError: the segment's objects are gone (deleted meanwhile).
        RemoteStorageError: any other storage failure.
        CorruptRecordError, InvalidRecord: the segment does not decode.
    """
    start = decoder.start_offset
    position = 0
    if start > segment.start_offset:
        indexes = rsm.fetch_indexes(segment, (IndexType.OFFSET,))
        position = _offset_position(indexes.get(IndexType.OFFSET, b""), segment.start_offset, start)
    size = segment.segment_size_in_bytes
    carry = b""
    while position < size:
        chunk = rsm.fetch_log_segment(segment, position, min(position + chunk_bytes, size) - 1)
        if not chunk:
            break
        position += len(chunk)
        buf = carry + chunk if carry else chunk
        consumed = 0
        for result in decoder.decode_windows(buf):
            if result.batch is not None and result.batch.num_rows:
                yield result.batch
            # What is below next_offset was emitted: a fallback read (the segment deleted
            # meanwhile) continues from there, without duplicates.
            decoder.start_offset = max(decoder.start_offset, result.next_offset)
            if result.next_offset >= decoder.end_offset:
                return
            consumed = result.bytes_consumed
        carry = buf[consumed:]
    if len(carry) > 0:
        raise CorruptRecordError(
            f"remote segment {segment.remote_log_segment_id} ends in a partial batch "
            f"({len(carry)} bytes)"
        )
