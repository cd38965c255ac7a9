"""Kafka's ``UnifiedLog``: one partition's log as consumers and producers see it, over the
segments of :class:`~tierlog.log.local_log.LocalLog` (which it extends).

Offsets kept here::

    log_start_offset <= local_log_start_offset <= high_watermark <= log_end_offset
    (recovery_point <= log_end_offset: everything below it is fsynced)

``log_start_offset`` is the first offset a consumer may read (DeleteRecords and retention move
it); ``local_log_start_offset`` is the first offset held locally -- with tiered storage the
two differ. The append path validates batch headers and CRCs (:mod:`.log_validator`), patches
baseOffset and partitionLeaderEpoch (outside the CRC) on the way to the file and writes the
bytes: records are never decoded (except for keys on compacted topics). Reads never take a
lock: they work on an immutable snapshot of the segment list (copy-on-write) and on the log
end offset published after each append.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from tierlog.errors import InvalidRecord, OffsetOutOfRange, RecordListTooLarge
from tierlog.log import log_list_offsets, log_retention, log_truncation
from tierlog.log.checkpoint_file import EpochEntry
from tierlog.log.leader_epoch_file_cache import LeaderEpochFileCache
from tierlog.log.local_log import LocalLog, LogOffsetMetadata
from tierlog.log.log_config import LogConfig
from tierlog.log.log_list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from tierlog.log.log_loader import open_log
from tierlog.log.log_retention import DELETE_TO_HIGH_WATERMARK
from tierlog.log.log_segment import FetchDataInfo, LogSegment, wall_clock_ms
from tierlog.log.log_segments import LogSegments, SegmentsSnapshot
from tierlog.log.log_validator import (
    BATCH_PREFIX,
    AppendConfig,
    LogAppendInfo,
    analyze_and_validate_records,
    append_info,
    assign_offsets_in_place,
    to_batch_header,
    validate_keys,
)
from tierlog.log.producer_state_manager import ProducerStateManager
from tierlog.log.time_index import TimestampOffset
from tierlog.log.transaction_index import AbortedTxn
from tierlog.records.control_records import EndTransactionMarker, read_end_txn_marker
from tierlog.records.record_batch import (
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    RecordBatchHeader,
)

__all__ = [
    "DELETE_TO_HIGH_WATERMARK",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "FetchDataInfo",
    "LogAppendInfo",
    "LogOffsetMetadata",
    "UnifiedLog",
]

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__
_RECORDS_COUNT_OFFSET = RECORDS_COUNT_OFFSET


class UnifiedLog(LocalLog):
    """The log of one partition replica (Kafka's ``UnifiedLog``).

    Thread-safety: appends, rolls, truncations, retention and log start offset changes are
    serialised by one lock; :meth:`flush` has its own lock and runs concurrently with
    appends; reads and offset lookups take no lock at all. Not idempotent: every
    :meth:`append` of non-duplicate batches writes.
    """

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        segments: LogSegments,
        *,
        log_start_offset: int,
        recovery_point: int,
        log_end_offset: int,
        high_watermark: int | None,
        leader_epoch_cache: LeaderEpochFileCache,
        producer_state_manager: ProducerStateManager,
        topic_id: uuid.UUID | None,
        time_ms: Callable[[], int],
    ) -> None:
        """Use :meth:`open`."""
        super().__init__(
            dir,
            config,
            segments,
            recovery_point=recovery_point,
            log_end_offset=log_end_offset,
            time_ms=time_ms,
        )
        self._append_config = AppendConfig.of(config)
        self._topic_id = topic_id
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state_manager = producer_state_manager

        self._log_start_offset = log_start_offset
        self._local_log_start_offset = max(
            log_start_offset, segments.first_segment_base_offset or 0
        )
        hw = log_end_offset if high_watermark is None else high_watermark
        self._high_watermark = min(max(hw, log_start_offset), log_end_offset)
        producer_state_manager.on_high_watermark_updated(self._high_watermark)
        self._latest_epoch = leader_epoch_cache.latest_epoch

        #: Whether any segment may hold aborted transactions (a .txnindex file): a log that
        #: never had one answers read_committed fetches without looking at its segments.
        self._may_have_aborted_txns = any(s.txn_index.path.exists() for s in segments.values())
        #: Tiered storage gates local deletion on the remote copy state; None allows all.
        self.can_delete_local_segment: Callable[[LogSegment], bool] | None = None
        #: Tiered storage: highest offset copied to remote storage (-1: none), advanced by the
        #: RemoteLogManager. Gates local deletion (see
        #: log_retention._is_segment_eligible_for_deletion).
        self._highest_offset_in_remote_storage = -1

    # ================================================================== open
    # The body is log_loader's open_log (Kafka's UnifiedLog.apply).

    @classmethod
    def open(
        cls,
        dir: Path,
        config: LogConfig,
        *,
        log_start_offset: int | None = None,
        recovery_point: int = 0,
        topic_id: uuid.UUID | None = None,
        had_clean_shutdown: bool = False,
        time_ms: Callable[[], int] = wall_clock_ms,
        high_watermark: int | None = None,
    ) -> UnifiedLog:
        """Open (creating when needed) the log in ``dir``, recovering it after a crash.

        ``log_start_offset`` and ``recovery_point`` come from the log dir's checkpoints;
        ``high_watermark`` from the replication checkpoint (None: the log end offset, right
        for a single replica). See :mod:`tierlog.log.log_loader` for what loading does.

        Raises:
            InconsistentTopicId: ``partition.metadata`` names another topic id.
            OSError: the directory or a file could not be read or written.
        """
        return open_log(
            cls,
            dir,
            config,
            log_start_offset=log_start_offset,
            recovery_point=recovery_point,
            topic_id=topic_id,
            had_clean_shutdown=had_clean_shutdown,
            time_ms=time_ms,
            high_watermark=high_watermark,
        )

    # ================================================================== properties

    @property
    def topic_id(self) -> uuid.UUID | None:
        return self._topic_id

    def update_config(self, new_config: LogConfig) -> None:
        """Swap in a new configuration (atomic; applies to the next append / retention run).
        Per-segment settings (index interval, jitter) apply to segments created later."""
        self._append_config = AppendConfig.of(new_config)
        self._config = new_config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        return self._local_log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self.update_high_watermark(offset)

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided (Kafka's
        ``lastStableOffset``): the first offset of the earliest open (or not yet replicated)
        transaction when that is below the high watermark, else the high watermark.
        read_committed consumers read up to here. Two attribute reads, no lock."""
        hw = self._high_watermark
        first_unstable = self.producer_state_manager.first_unstable_offset
        return hw if first_unstable is None or first_unstable >= hw else first_unstable

    @property
    def remote_log_enabled(self) -> bool:
        return self._config.remote_storage_enable

    @property
    def remote_log_copy_enabled(self) -> bool:
        """Remote storage on and copying not disabled (Kafka's
        ``remoteLogEnabledAndRemoteCopyEnabled``): local retention applies to local segments
        and deleting them moves only the local log start offset. With
        ``remote.log.copy.disable`` the total retention applies locally, as without tiering."""
        return self._config.remote_storage_enable and not self._config.get(
            "remote.log.copy.disable"
        )

    @property
    def highest_offset_in_remote_storage(self) -> int:
        """Highest offset copied to remote storage, -1 when none (ListOffsets -5)."""
        return self._highest_offset_in_remote_storage

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """Record that offsets up to ``offset`` are in remote storage (only ever grows)."""
        if self.remote_log_enabled and offset > self._highest_offset_in_remote_storage:
            self._highest_offset_in_remote_storage = offset

    def __repr__(self) -> str:
        return (
            f"Log(dir={str(self._dir)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._leo.offset}, segments={self._segments.number_of_segments})"
        )

    # ================================================================== high watermark

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start offset, log end offset]; returns it."""
        hw = min(max(offset, self._log_start_offset), self._leo.offset)
        self._high_watermark = hw
        self._on_high_watermark_updated(hw)
        return hw

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Raise the high watermark to ``offset`` (never lowers it); True when it moved."""
        offset = min(offset, self._leo.offset)
        if offset > self._high_watermark:
            self._high_watermark = offset
            self._on_high_watermark_updated(offset)
            return True
        return False

    def _on_high_watermark_updated(self, hw: int) -> None:
        # Completed transactions stop holding the last stable offset back once their
        # marker is below the high watermark. The check is one truth test, so logs without
        # transactions never take the lock here.
        psm = self.producer_state_manager
        if psm.has_unreplicated_txns():
            with self._lock:
                psm.on_high_watermark_updated(hw)

    # ================================================================== append

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = 0,
        assign_offsets: bool = True,
        origin_client: bool = True,
        origin_coordinator: bool = False,
    ) -> LogAppendInfo:
        """Validate and append record batches; returns where they went.

        Every batch is checked (header, size, CRC-32C, counts, codec, timestamps); with
        ``assign_offsets`` the batches get consecutive offsets from the log end offset and
        ``leader_epoch`` as partitionLeaderEpoch (the CRC does not cover them; ``records``
        itself is never modified: a single batch is written as a patched 16-byte prefix plus
        the rest of ``records``, several batches from a patched copy), otherwise
        (replication) their offsets are kept and must not go backwards.
        A batch an idempotent producer already wrote is not written again: the original
        offsets come back with ``duplicate=True``.

        Raises:
            InvalidRecord: empty input, a count that contradicts lastOffsetDelta, a control
                batch from a client, or offsets that go backwards (replication).
            CorruptRecordError: a truncated batch, trailing bytes, bad magic or CRC.
            MessageTooLarge: a batch larger than ``max.message.bytes``.
            RecordListTooLarge: the whole input is larger than ``segment.bytes``.
            UnsupportedCompressionType: an unknown codec id.
            InvalidTimestamp: a CreateTime outside the configured bounds.
            InvalidProducerEpoch, OutOfOrderSequenceNumber, InvalidTxnState,
                TransactionCoordinatorFenced: producer state violations.
            LogSegmentOffsetOverflowError: a single append spans more than 2**31 offsets.
            OSError: the write failed.
        """
        config = self._append_config
        now = self._time_ms()
        size = records.nbytes if isinstance(records, memoryview) else len(records)
        batches, records_count, has_producer_ids = analyze_and_validate_records(
            records, size, config, origin_client, now
        )
        if config.compact and origin_client:
            validate_keys(records, batches, f"{self._topic}-{self._partition}")
        if size > config.segment_size:
            raise RecordListTooLarge(
                f"message batch size is {size} bytes which exceeds the maximum configured "
                f"segment size of {config.segment_size}"
            )
        log_append_time = config.log_append_time and assign_offsets
        psm = self.producer_state_manager

        with self._lock:
            if self._closed:
                raise ValueError(f"{self} is closed")
            headers: list[RecordBatchHeader | None] | None = None
            markers: list[EndTransactionMarker | None] | None = None
            if has_producer_ids:
                headers = [
                    to_batch_header(fields) if fields[10] != NO_PRODUCER_ID else None
                    for fields in batches
                ]
                if any(fields[6] & CONTROL_FLAG_MASK for fields in batches):
                    markers = [
                        read_end_txn_marker(records, h)
                        if h is not None and h.is_control_batch
                        else None
                        for h in headers
                    ]
                if origin_client or origin_coordinator:
                    for i, header in enumerate(headers):
                        marker = markers[i] if markers is not None else None
                        duplicate = psm.check(header, marker) if header is not None else None
                        if duplicate is not None:
                            return LogAppendInfo(
                                duplicate.first_offset,
                                duplicate.last_offset,
                                duplicate.timestamp,
                                duplicate.last_offset,
                                -1,
                                self._log_start_offset,
                                records_count,
                                size,
                                True,
                            )

            leo = self._leo.offset
            buf: bytes | bytearray | memoryview
            prefix = b""
            if assign_offsets:
                first_offset = leo
                if len(batches) == 1 and not log_append_time:
                    # The common case, one batch from a producer: write its first 16 bytes
                    # patched and the rest from the caller's buffer, with one writev and no
                    # copy of the batch (below).
                    fields = batches[0]
                    prefix = BATCH_PREFIX.pack(leo, fields[2], leader_epoch)
                    buf = records
                    last_offset = leo + fields[7]
                    max_timestamp = fields[9]
                    offset_of_max_timestamp = last_offset if max_timestamp > NO_TIMESTAMP else -1
                else:
                    patched = bytearray(records)
                    max_timestamp, offset_of_max_timestamp, last_offset = assign_offsets_in_place(
                        patched, batches, leo, leader_epoch, now if log_append_time else None
                    )
                    buf = patched
            else:
                buf = records
                first_offset = batches[0][1]
                max_timestamp = NO_TIMESTAMP
                offset_of_max_timestamp = -1
                expected = leo
                for fields in batches:
                    if fields[1] < expected:
                        raise InvalidRecord(
                            f"out of order offsets: batch at {fields[1]} appended at log end "
                            f"offset {leo} (expected >= {expected})"
                        )
                    expected = fields[1] + fields[7] + 1
                    if fields[9] > max_timestamp:
                        max_timestamp = fields[9]
                        offset_of_max_timestamp = expected - 1
                last_offset = expected - 1

            segment = self._segments.active_segment
            if segment.should_roll_for(
                config.segment_ms, config.segment_size, max_timestamp, last_offset, size, now
            ):
                segment = self._roll(first_offset)
            if prefix:
                # `prefix` stands in for the first bytes of `records`; the view is released
                # at once so the caller may resize a bytearray afterwards, even on an error.
                with memoryview(records)[len(prefix) :] as rest:
                    segment.append(
                        last_offset, max_timestamp, offset_of_max_timestamp, rest, prefix
                    )
            else:
                segment.append(last_offset, max_timestamp, offset_of_max_timestamp, buf)

            if headers is not None:
                offset = first_offset
                for i, (fields, batch_header) in enumerate(zip(batches, headers, strict=True)):
                    base = offset if assign_offsets else fields[1]
                    last = base + fields[7]
                    offset = last + 1
                    if batch_header is not None:
                        completed = psm.update(
                            batch_header,
                            base,
                            last,
                            now if log_append_time else fields[9],
                            markers[i] if markers is not None else None,
                        )
                        if completed is not None:
                            segment.update_txn_index(completed, psm.last_stable_offset(completed))
                            if completed.is_aborted:
                                self._may_have_aborted_txns = True
            psm.update_map_end_offset(last_offset + 1)

            if assign_offsets:
                if leader_epoch != self._latest_epoch and leader_epoch >= 0:
                    self._assign_epoch(leader_epoch, first_offset)
            else:
                for fields in batches:
                    if fields[3] != self._latest_epoch and fields[3] >= 0:
                        self._assign_epoch(fields[3], fields[1])

            # tuple.__new__: LogOffsetMetadata(...) without NamedTuple's argument handling.
            self._leo = _new_tuple(
                LogOffsetMetadata, (last_offset + 1, segment.base_offset, segment.log._size)
            )
            log_start_offset = self._log_start_offset

        if last_offset + 1 - self._recovery_point >= config.flush_interval:
            self.flush()
        return append_info(
            first_offset,
            last_offset,
            max_timestamp,
            offset_of_max_timestamp,
            now if log_append_time else -1,
            log_start_offset,
            records_count,
            size,
            False,
        )

    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (a new leader, at its log end
        offset, before any batch of the epoch is written: Kafka's
        ``maybeAssignEpochStartOffset``).

        The checkpoint is written without fsync (as Kafka does since 3.7, KAFKA-15046):
        leadership changes come by the thousand when a broker fails, and an fsync each on the
        event loop stalled a 3-broker cluster for seconds. A process crash loses nothing (the
        page cache keeps it); a machine crash may lose the entry of an epoch that has no batch
        yet, which a restarted broker never needs: it comes back as a follower and truncates
        to its leader (an epoch with batches is rebuilt from them by recovery)."""
        with self._lock:
            self.leader_epoch_cache.assign(epoch, start_offset, durable=False)
            self._latest_epoch = self.leader_epoch_cache.latest_epoch

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.leader_epoch_cache.assign(epoch, start_offset)
        self._latest_epoch = self.leader_epoch_cache.latest_epoch

    # ================================================================== read

    def read(
        self,
        start_offset: int,
        max_length: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
        whole_batches: bool = False,
    ) -> FetchDataInfo:
        """Raw batch bytes from the batch holding ``start_offset``, at most ``max_length``
        bytes (the first batch whole when ``min_one_message``), ending before ``max_offset``
        (exclusive, at a batch boundary; e.g. the high watermark). The data may end with a
        partial batch, unless ``whole_batches`` (a follower's read). ``start_offset`` equal to
        the log end offset (or to ``max_offset``) gives empty records. Lock-free.

        Raises:
            OffsetOutOfRange: ``start_offset`` is outside [log start offset, log end offset]
                or not held locally (below the local log start offset).
            ValueError: negative ``max_length``.
        """
        leo = self._leo  # before the segment snapshot: every segment it names is in it
        snapshot = self._segments.snapshot()
        if start_offset > leo.offset or start_offset < self._log_start_offset:
            raise OffsetOutOfRange(
                f"offset {start_offset} is out of range for {self._topic}-{self._partition}: "
                f"[{self._log_start_offset}, {leo.offset}]"
            )
        if max_offset is None or max_offset >= leo.offset:
            end = leo
        else:
            end = self._offset_metadata(max_offset, snapshot)
        if start_offset >= end.offset:
            return FetchDataInfo(start_offset, b"")
        i = snapshot.floor_index(start_offset)
        if i < 0:
            raise OffsetOutOfRange(
                f"offset {start_offset} is below the local log start offset "
                f"{self._local_log_start_offset} of {self._topic}-{self._partition}"
            )
        segments = snapshot.segments
        while i < len(segments):
            segment = segments[i]
            if segment.base_offset > end.segment_base_offset:
                break
            max_position = end.position if segment.base_offset == end.segment_base_offset else None
            info = segment.read(
                start_offset, max_length, max_position, min_one_message, whole_batches
            )
            if info is not None:
                records = info.records
                if (
                    i + 1 < len(segments)
                    and segment.base_offset < end.segment_base_offset
                    and records[_RECORDS_COUNT_OFFSET:RECORD_BATCH_OVERHEAD] == b"\0\0\0\0"
                    and _only_empty_batches(records)
                ):
                    # The rest of a compacted segment is empty batches (kept by the cleaner
                    # for producer state): go on to the next segment. A fetch that brings
                    # back no record at all makes librdkafka double its fetch size, and
                    # fail after ten in a row.
                    i += 1
                    continue
                return info
            i += 1
        return FetchDataInfo(start_offset, b"")

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, from
        the ``.txnindex`` of the segment holding ``start_offset`` and of later ones until a
        search is complete (Kafka's ``collectAbortedTransactions``). Lock-free; a segment
        without aborts costs nothing after its first search.

        Raises:
            CorruptIndexError: a ``.txnindex`` is corrupt.
            OSError: one cannot be read.
        """
        if not self._may_have_aborted_txns:
            return []
        snapshot = self._segments.snapshot()
        found: list[AbortedTxn] = []
        for segment in snapshot.segments[max(0, snapshot.floor_index(start_offset)) :]:
            result = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            found.extend(result.aborted_transactions)
            if result.is_complete:
                break
        return found

    def fetch_upper_bound_offset(self, read_offset: int, max_offset: int) -> int:
        """An offset at or past the end of what a read that returned data from
        ``read_offset`` on can have returned: the next segment's base offset (a read never
        spans two segments), at most ``max_offset`` (Kafka's fallback in
        ``fetchUpperBoundOffset``). Bounds the aborted transactions of a read_committed
        fetch to its range. One bisect; lock-free."""
        higher = self._segments.snapshot().higher_segment(read_offset)
        return max_offset if higher is None else min(higher.base_offset, max_offset)

    def _offset_metadata(self, offset: int, snapshot: SegmentsSnapshot) -> LogOffsetMetadata:
        """Where the batch holding ``offset`` starts (cached for the high watermark)."""
        cached = self._hw_metadata
        if cached is not None and cached.offset == offset:
            return cached
        segment = snapshot.floor_segment(offset)
        if segment is None:
            first = snapshot.segments[0] if snapshot.segments else None
            base = first.base_offset if first is not None else offset
            return LogOffsetMetadata(offset, base, 0)
        found = segment.translate_offset(offset)
        if found is not None:
            metadata = LogOffsetMetadata(offset, segment.base_offset, found.position)
        else:
            higher = snapshot.higher_segment(segment.base_offset)
            if higher is not None:
                metadata = LogOffsetMetadata(offset, higher.base_offset, 0)
            else:
                metadata = LogOffsetMetadata(offset, segment.base_offset, segment.size)
        if offset == self._high_watermark:
            self._hw_metadata = metadata
        return metadata

    # The body is log_list_offsets' (Kafka's fetchOffsetByTimestamp).
    def offset_for_timestamp(self, target_timestamp: int) -> TimestampOffset | None:
        """ListOffsets: the first offset whose record timestamp is >= ``target_timestamp``.

        Special values: -2 (earliest) -> (-1, log start offset); -4 (earliest local) ->
        (-1, local log start offset); -1 (latest) -> (-1, log end offset); -3 (max
        timestamp) -> (max timestamp, offset of the first record holding it). A real
        timestamp is resolved record by record as Kafka does (time index, offset index,
        header scan, then the records of the one matching batch are decoded); None when
        no record is that late.

        Raises:
            ValueError: another negative timestamp.
        """
        return log_list_offsets.offset_for_timestamp(self, target_timestamp)

    # ================================================================== roll and flush

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(``expected_next_offset``, log end offset)."""
        with self._lock:
            return self._roll(expected_next_offset)

    def maybe_roll(self, messages_size: int, max_timestamp: int, max_offset: int) -> LogSegment:
        """Roll when an append of this size / timestamp / last offset needs a new segment."""
        with self._lock:
            segment = self._segments.active_segment
            config = self._config
            if segment.should_roll_for(
                config.segment_ms,
                config.segment_size,
                max_timestamp,
                max_offset,
                messages_size,
                self._time_ms(),
            ):
                segment = self._roll(max(max_offset - (2**31 - 1), self._leo.offset))
            return segment

    def _roll(self, expected_next_offset: int | None) -> LogSegment:
        leo = self._leo.offset
        new_offset = max(expected_next_offset or 0, leo)
        active = self._segments.active_segment
        if active.base_offset == new_offset and active.size == 0:
            return active  # nothing to roll: the empty active segment already starts there
        if new_offset <= active.base_offset:
            raise ValueError(
                f"cannot roll {self} to {new_offset}: the active segment starts at "
                f"{active.base_offset}"
            )
        # The snapshot before the new segment shows: the copy to remote storage reads
        # segments without the lock, and a rolled segment seen before its snapshot was there
        # got an empty one uploaded (its producer state lost in the remote copy).
        self.producer_state_manager.take_snapshot(new_offset)
        active.on_become_inactive_segment()
        segment = self._new_segment(new_offset)
        self._leo = LogOffsetMetadata(leo, new_offset, 0)
        self._schedule_flush(new_offset)
        log.debug("%s: rolled new segment at offset %d", self, new_offset)
        return segment

    # ================================================================== retention
    # The bodies are log_retention's (Kafka's deleteOldSegments, maybeIncrementLogStartOffset).

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention; returns the number of segments deleted.

        With ``cleanup.policy`` including delete: segments whose largest timestamp is older
        than ``retention.ms``, the oldest segments while the log exceeds ``retention.bytes``,
        and segments entirely below the log start offset; otherwise only the last. Only
        segments below the high watermark, oldest first, and only while
        :attr:`can_delete_local_segment` allows. An expired active segment is rolled first
        (Kafka rolls when every segment would go). With remote storage enabled the local
        retention settings apply and the local log start offset moves instead.
        """
        return log_retention.delete_old_segments(self, now_ms)

    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        """Raise the log start offset (never lowers it); True when it moved.

        Raises:
            OffsetOutOfRange: the offset is above the high watermark.
        """
        return log_retention.maybe_increment_log_start_offset(self, new_log_start_offset)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the log start offset (-1: the high watermark);
        returns the new log start offset. Segments entirely below it are deleted by the next
        :meth:`delete_old_segments`.

        Raises:
            OffsetOutOfRange: ``offset`` is negative or above the high watermark.
        """
        return log_retention.delete_records_before(self, offset)

    # ================================================================== compaction

    def last_records_of_active_producers(self) -> dict[int, tuple[int, int]]:
        """producer id -> (last data offset, producer epoch) of every producer with state
        (Kafka's ``lastRecordsOfActiveProducers``): the log cleaner keeps the batch holding a
        producer's last data offset, even when it empties it."""
        with self._lock:
            return {
                pid: (entry.last_data_offset, entry.producer_epoch)
                for pid, entry in self.producer_state_manager.active_producers.items()
            }

    # ================================================================== truncation
    # The bodies are log_truncation's (Kafka's truncateTo, truncateFullyAndStartAt).

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding an offset >= ``target_offset`` (a follower diverging
        from its leader); False when there was nothing to remove.

        Raises:
            ValueError: negative ``target_offset``.
        """
        return log_truncation.truncate_to(self, target_offset)

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start empty at ``new_offset`` (log start offset too)."""
        log_truncation.truncate_fully_and_start_at(self, new_offset)

    def restore_remote_log_aux_state(
        self,
        next_offset: int,
        leader_log_start_offset: int,
        epochs: list[EpochEntry],
        producer_snapshot: bytes | None,
        expected_log_end_offset: int | None = None,
    ) -> bool:
        """A follower whose fetch offset is below its leader's local log (Kafka's
        ``ReplicaFetcherTierStateMachine.buildRemoteLogAuxState``): start empty at
        ``next_offset`` (one past the remote segment that holds the offset before the leader's
        local log start), with the leader's log start offset (the remote part is the
        partition's), and the leader epochs and producer state that remote segment carried,
        so the follower can lead later: truncate by epoch, answer idempotent retries.

        With ``expected_log_end_offset`` (the fetch offset the leader answered "tiered" to),
        only while the log still ends there: a rebuild decided before the log moved on (its
        remote reads run in a thread nothing cancels, while the partition may be fetched
        again) must not wipe what was fetched since. False when it did nothing for that reason.

        Raises:
            CorruptSnapshotError: the producer snapshot is malformed (nothing changed then).
            OSError: the checkpoint or snapshot could not be written.
        """
        return log_truncation.restore_remote_log_aux_state(
            self,
            next_offset,
            leader_log_start_offset,
            epochs,
            producer_snapshot,
            expected_log_end_offset,
        )

    def _new_segment(self, base_offset: int) -> LogSegment:
        """Create the segment starting at ``base_offset`` (preallocated when the topic says
        so) and add it as the active one."""
        config = self._config
        segment = LogSegment.open(
            self._dir,
            base_offset,
            config,
            init_file_size=config.segment_size if config.get("preallocate") else 0,
            preallocate=bool(config.get("preallocate")),
            time_ms=self._time_ms,
        )
        self._segments.add(segment)
        return segment

    # ================================================================== close and delete

    def close(self) -> None:
        """Snapshot producer state, then flush, trim and close every segment. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self.await_background_flush()
            self.producer_state_manager.take_snapshot()
            with self._flush_lock:
                self._closed = True
                self._segments.close()
                self._recovery_point = self._leo.offset

    def delete(self) -> None:
        """Delete every file and the directory. Readers still holding segments keep reading
        the unlinked files until they drop them."""
        with self._lock:
            self.await_background_flush()
            self._closed = True
            for segment in self._segments.clear():
                segment.delete_if_exists()
            shutil.rmtree(self._dir, ignore_errors=True)


# ====================================================================== helpers


def _only_empty_batches(buf: bytes) -> bool:
    """True when ``buf`` is whole batches, every one without records."""
    pos, n = 0, len(buf)
    while n - pos >= RECORD_BATCH_OVERHEAD:
        if buf[pos + _RECORDS_COUNT_OFFSET : pos + RECORD_BATCH_OVERHEAD] != b"\0\0\0\0":
            return False
        pos += int.from_bytes(buf[pos + 8 : pos + 12], "big") + LOG_OVERHEAD
    return pos == n
