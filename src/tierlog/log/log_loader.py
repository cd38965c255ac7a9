"""Kafka's ``LogLoader``: turn a partition directory into segments, recovering after a crash.

Steps, in Kafka's order:

1. Remove leftovers of interrupted operations: ``*.deleted`` (asynchronous deletes),
   ``*.cleaned`` (a clean that had not finished writing), ``*.tmp`` (checkpoints being
   written), and index files whose ``.log`` is gone. Complete an interrupted swap of the log
   cleaner (see :meth:`~tierlog.log.local_log.LocalLog.replace_segments`), as
   Kafka does: a ``.swap`` file at or above the lowest ``.cleaned`` offset is part of an
   unfinished group and is deleted (the old segments are all still there); every other
   ``<B>.log.swap`` is complete, so the segment files with a base offset in [B, its next
   offset) -- the old segments it replaces -- are deleted and the ``.swap`` files renamed to
   their final names. Either way the log reads as before or as after the clean.
2. Open every ``<offset>.log`` as a segment. A missing or corrupt index (failed sanity check)
   marks the segment for recovery, which rebuilds it.
3. Unclean shutdown: recover every segment from the one holding the recovery point on --
   validate each batch's size and CRC, rebuild the indexes, truncate at the first invalid
   batch -- and delete every segment after the first one that had to be truncated. The
   seed's two kinds of corruption are both caught: a truncated tail (a partial batch) and
   nonsense bytes added to the end (a length that runs past the file or a CRC mismatch).
   tierlog also treats a *gap* after a recovered segment (its next offset below the next
   segment's base offset: a tail lost exactly at a batch boundary) as a truncation, unless
   the topic is compacted, where gaps are legal. Kafka keeps the later segments there.
4. No segment left: create an empty one at the log start offset. A log end offset below the
   log start offset (stale local data): replace every segment with an empty one there.
5. The last segment's indexes are grown back to ``segment.index.bytes`` (it is active).

Leader epochs and producer state are :func:`open_log`'s, the body of
:meth:`UnifiedLog.open <tierlog.log.unified_log.UnifiedLog.open>` (Kafka's ``UnifiedLog.apply``),
which also reads the topic id (``partition.metadata``) and builds the log: recovery feeds leader
epochs of the batches it validates to the cache, and the producer map is rebuilt afterwards from
the latest snapshot plus a replay of the log (see :func:`rebuild_producer_state`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.errors import CorruptCheckpointError, CorruptIndexError, InconsistentTopicId
from tierlog.log import log_file_utils as lfu
from tierlog.log.checkpoint_file import LeaderEpochCheckpointFile
from tierlog.log.file_records import FileRecords
from tierlog.log.leader_epoch_file_cache import LeaderEpochFileCache
from tierlog.log.log_config import LogConfig
from tierlog.log.log_segment import LogSegment, wall_clock_ms
from tierlog.log.log_segments import LogSegments
from tierlog.log.partition_metadata_file import PartitionMetadataFile
from tierlog.log.producer_state_manager import ProducerStateManager
from tierlog.records.control_records import EndTransactionMarker, read_end_txn_marker
from tierlog.records.record_batch import NO_PRODUCER_ID, RecordBatchHeader

if TYPE_CHECKING:
    from tierlog.log.unified_log import UnifiedLog

__all__ = [
    "LoadedLogOffsets",
    "LogLoader",
    "open_log",
    "rebuild_leader_epochs",
    "rebuild_producer_state",
    "truncate_leader_epochs",
]

log = logging.getLogger(__name__)

_LEFTOVER_SUFFIXES = (
    lfu.DELETED_FILE_SUFFIX,
    lfu.CLEANED_FILE_SUFFIX,
    lfu.TMP_FILE_SUFFIX,
)
_SEGMENT_SUFFIXES = (
    lfu.LOG_FILE_SUFFIX,
    lfu.INDEX_FILE_SUFFIX,
    lfu.TIME_INDEX_FILE_SUFFIX,
    lfu.TXN_INDEX_FILE_SUFFIX,
)
_INDEX_SUFFIXES = (lfu.INDEX_FILE_SUFFIX, lfu.TIME_INDEX_FILE_SUFFIX, lfu.TXN_INDEX_FILE_SUFFIX)


@dataclass(frozen=True, slots=True)
class LoadedLogOffsets:
    """What loading found: the log start offset, recovery point and log end offset."""

    log_start_offset: int
    recovery_point: int
    log_end_offset: int


class LogLoader:
    """Loads the segments of one partition directory into ``segments``. Single use; not
    thread-safe (runs before the log is published)."""

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        segments: LogSegments,
        *,
        log_start_offset_checkpoint: int | None,
        recovery_point_checkpoint: int,
        had_clean_shutdown: bool,
        leader_epoch_cache: LeaderEpochFileCache | None,
        time_ms: Callable[[], int] = wall_clock_ms,
        remote_log_enabled: bool = False,
    ) -> None:
        self.dir = Path(dir)
        self.config = config
        self.segments = segments
        self.log_start_offset_checkpoint = log_start_offset_checkpoint
        self.recovery_point_checkpoint = recovery_point_checkpoint
        self.had_clean_shutdown = had_clean_shutdown
        self.leader_epoch_cache = leader_epoch_cache
        self.time_ms = time_ms
        self.remote_log_enabled = remote_log_enabled
        #: Base offsets of segments that were recovered (tests, logging).
        self.recovered: list[int] = []

    def load(self) -> LoadedLogOffsets:
        """Run the load; ``segments`` is filled and never left empty.

        Raises:
            OSError: a file could not be read, written or deleted.
        """
        log_files, names = self._remove_temp_files()
        needs_recovery = self._load_segment_files(log_files, names)
        recovery_point = self.recovery_point_checkpoint
        if not self.had_clean_shutdown:
            self._recover_log(recovery_point, needs_recovery)
        else:
            for segment in self.segments.values():
                if segment.base_offset in needs_recovery:
                    self._recover_segment(segment)

        if self.segments.is_empty():
            start = self.log_start_offset_checkpoint or 0
            self.segments.add(self._open_segment(start, exists=False))

        active = self.segments.active_segment
        active.resize_indexes(self.config.max_index_size)
        log_end_offset = active.read_next_offset()

        first_base = self.segments.first_segment_base_offset or 0
        checkpoint = self.log_start_offset_checkpoint
        if self.remote_log_enabled:
            # Kafka's LogLoader: with remote storage the local segments say nothing of the log
            # start (the part below them may be remote). No checkpoint yet (a crash before the
            # first one) counts as 0; tiered storage then raises it to the earliest remote
            # offset it finds (TieredStorage._reconcile_log_start_offsets).
            log_start_offset = checkpoint or 0
        elif checkpoint is None:
            log_start_offset = first_base
        else:
            log_start_offset = max(checkpoint, first_base)

        if checkpoint is not None and log_end_offset < checkpoint:
            log.warning(
                "%s: log end offset %d is below the log start offset %d; deleting all segments",
                self.dir,
                log_end_offset,
                checkpoint,
            )
            for segment in self.segments.clear():
                segment.delete_if_exists()
            self.segments.add(self._open_segment(checkpoint, exists=False))
            log_end_offset = checkpoint
            log_start_offset = checkpoint

        if self.had_clean_shutdown:
            recovery_point = log_end_offset
        else:
            recovery_point = max(min(recovery_point, log_end_offset), 0)
        if self.leader_epoch_cache is not None:
            truncate_leader_epochs(self.leader_epoch_cache, log_start_offset, log_end_offset)
        return LoadedLogOffsets(log_start_offset, recovery_point, log_end_offset)

    # ------------------------------------------------------------------ steps

    def _complete_swaps(self) -> None:
        """Kafka's swap recovery (see the module docstring): delete leftover ``.cleaned``
        files and the ``.swap`` files they invalidate, delete the segments a complete swap
        replaces, then rename the ``.swap`` files."""
        with os.scandir(self.dir) as entries:
            names = [e.name for e in entries if e.is_file()]
        min_cleaned = None
        swaps: list[str] = []
        for name in names:
            if name.endswith(lfu.CLEANED_FILE_SUFFIX):
                try:
                    offset = lfu.offset_from_file_name(name)
                except ValueError:
                    continue
                min_cleaned = offset if min_cleaned is None else min(min_cleaned, offset)
                log.info("%s: deleting unfinished cleaned file %s", self.dir, name)
                (self.dir / name).unlink(missing_ok=True)
            elif name.endswith(lfu.SWAP_FILE_SUFFIX):
                swaps.append(name)
        if not swaps:
            return
        valid: list[str] = []
        for name in swaps:
            try:
                offset = lfu.offset_from_file_name(name)
            except ValueError:
                continue
            if min_cleaned is not None and offset >= min_cleaned:
                log.info("%s: deleting swap file %s of an unfinished clean", self.dir, name)
                (self.dir / name).unlink(missing_ok=True)
            else:
                valid.append(name)
        # The offsets the complete swaps cover: [base, next offset of the swapped log).
        ranges: list[tuple[int, int]] = []
        for name in valid:
            if name.endswith(lfu.LOG_FILE_SUFFIX + lfu.SWAP_FILE_SUFFIX):
                base = lfu.offset_from_file_name(name)
                records = FileRecords(self.dir / name, file_already_exists=True)
                try:
                    next_offset = base
                    for header in records.batches_from(0, buffer_size=1 << 20):
                        next_offset = header.next_offset
                finally:
                    records.close_handlers()
                ranges.append((base, max(next_offset, base + 1)))
        if ranges:
            low = min(r[0] for r in ranges)
            high = max(r[1] for r in ranges)
            for name in names:
                if not name.endswith(_SEGMENT_SUFFIXES):
                    continue
                try:
                    offset = lfu.offset_from_file_name(name)
                except ValueError:
                    continue
                if low <= offset < high:
                    log.info("%s: deleting %s, replaced by a cleaned segment", self.dir, name)
                    (self.dir / name).unlink(missing_ok=True)
        for name in valid:
            final = name[: -len(lfu.SWAP_FILE_SUFFIX)]
            log.info("%s: completing the swap of %s", self.dir, final)
            (self.dir / name).replace(self.dir / final)
        lfu.fsync_dir(self.dir)

    def _remove_temp_files(self) -> tuple[list[str], set[str]]:
        """Delete leftovers and orphan indexes; returns the names of the ``.log`` files and
        of every file kept."""
        self._complete_swaps()
        log_files: list[str] = []
        others: list[str] = []
        with os.scandir(self.dir) as entries:
            for entry in entries:
                if not entry.is_file():
                    continue
                name = entry.name
                if name.endswith(_LEFTOVER_SUFFIXES):
                    log.info("%s: deleting leftover file %s", self.dir, name)
                    Path(entry.path).unlink(missing_ok=True)
                elif name.endswith(lfu.LOG_FILE_SUFFIX):
                    log_files.append(name)
                else:
                    others.append(name)
        prefixes = {name[: -len(lfu.LOG_FILE_SUFFIX)] for name in log_files}
        kept = set(log_files)
        for name in others:
            if name.endswith(_INDEX_SUFFIXES) and name.partition(".")[0] not in prefixes:
                log.warning("%s: deleting index %s without a log file", self.dir, name)
                (self.dir / name).unlink(missing_ok=True)
            else:
                kept.add(name)
        return log_files, kept

    def _open_segment(self, base_offset: int, *, exists: bool) -> LogSegment:
        preallocate = not exists and bool(self.config.get("preallocate"))
        return LogSegment.open(
            self.dir,
            base_offset,
            self.config,
            file_already_exists=exists,
            init_file_size=self.config.segment_size if preallocate else 0,
            preallocate=preallocate,
            time_ms=self.time_ms,
        )

    def _load_segment_files(self, log_files: list[str], names: set[str]) -> set[int]:
        """Open every segment; returns base offsets of those whose indexes need rebuilding."""
        offsets: list[int] = []
        for name in log_files:
            prefix = name[: -len(lfu.LOG_FILE_SUFFIX)]
            if prefix.isdigit() and prefix.isascii():
                offsets.append(int(prefix))
            else:
                log.warning("%s: ignoring %s, not named <offset>.log", self.dir, name)
        needs_recovery: set[int] = set()
        for base_offset in sorted(offsets):
            prefix = lfu.filename_prefix_from_offset(base_offset)
            indexes_exist = (
                prefix + lfu.INDEX_FILE_SUFFIX in names
                and prefix + lfu.TIME_INDEX_FILE_SUFFIX in names
            )
            segment = self._open_segment(base_offset, exists=True)
            if not indexes_exist:
                log.info("%s: rebuilding missing indexes of segment %d", self.dir, base_offset)
                needs_recovery.add(base_offset)
            else:
                try:
                    segment.sanity_check()
                except CorruptIndexError as e:
                    log.warning("%s: %s; rebuilding the indexes", self.dir, e)
                    needs_recovery.add(base_offset)
            self.segments.add(segment)
        return needs_recovery

    def _recover_segment(self, segment: LogSegment) -> int:
        self.recovered.append(segment.base_offset)
        return segment.recover(None, self.leader_epoch_cache, max_batch_size=2**31 - 1)

    def _recover_log(self, recovery_point: int, needs_recovery: set[int]) -> None:
        snapshot = self.segments.snapshot()
        segments = snapshot.segments
        first_unflushed = max(0, snapshot.floor_index(recovery_point))
        # Segments below the recovery point were flushed; only a missing or corrupt index is
        # rebuilt there, without consequences for later segments.
        for segment in segments[:first_unflushed]:
            if segment.base_offset in needs_recovery:
                self._recover_segment(segment)
        check_gaps = not self.config.compact
        for i in range(first_unflushed, len(segments)):
            segment = segments[i]
            truncated = self._recover_segment(segment)
            is_last = i == len(segments) - 1
            gap = False
            if check_gaps and not is_last and truncated == 0:
                next_offset = segment.read_next_offset()
                gap = next_offset < segments[i + 1].base_offset
                if gap:
                    log.warning(
                        "%s: segment %d ends at offset %d but the next one starts at %d",
                        self.dir,
                        segment.base_offset,
                        next_offset,
                        segments[i + 1].base_offset,
                    )
            if (truncated > 0 or gap) and not is_last:
                later = segments[i + 1 :]
                log.warning(
                    "%s: corruption in segment %d: deleting %d later segments",
                    self.dir,
                    segment.base_offset,
                    len(later),
                )
                self.segments.remove_all([s.base_offset for s in later])
                for s in later:
                    s.delete_if_exists()
                    s.close_handlers()
                break


def truncate_leader_epochs(
    cache: LeaderEpochFileCache, log_start_offset: int, log_end_offset: int
) -> None:
    """Drop epochs at or after the log end offset and history before the log start offset,
    writing the checkpoint only when something changes."""
    cache.truncate_from_end(log_end_offset)
    earliest = cache.earliest_entry
    if earliest is not None and earliest.start_offset < log_start_offset:
        cache.truncate_from_start(log_start_offset)


def rebuild_producer_state(
    producer_state_manager: ProducerStateManager,
    segments: LogSegments,
    log_start_offset: int,
    log_end_offset: int,
    now_ms: int,
    rebuild_txn_indexes: Collection[int] = (),
) -> int:
    """Kafka's ``rebuildProducerState``: load the latest snapshot at or below the log end
    offset, then replay the batches from there to the end. Returns the batches replayed.

    ``rebuild_txn_indexes``: base offsets of segments whose ``.txnindex`` was reset by
    recovery; the aborts replayed there are indexed again. Snapshots above the first of them
    are dropped first, so the replay covers them whole."""
    psm = producer_state_manager
    if rebuild_txn_indexes:
        psm.delete_snapshots_after(min(rebuild_txn_indexes))
        psm.update_map_end_offset(-1)  # reload: the replay must start at or below the first
    psm.truncate_and_reload(log_start_offset, log_end_offset, now_ms)
    start = psm.map_end_offset
    replayed = 0
    if start < log_end_offset:
        for segment in segments.values_between(start, log_end_offset):
            position = segment.offset_index.lookup(start).position
            for header in segment.log.batches_from(position, buffer_size=64 << 10):
                if header.last_offset < start:
                    continue
                if header.base_offset >= log_end_offset:
                    break
                if header.producer_id != NO_PRODUCER_ID:
                    marker = read_marker(segment, header) if header.is_control_batch else None
                    completed = psm.update(
                        header, header.base_offset, header.last_offset, header.max_timestamp, marker
                    )
                    if completed is not None and segment.base_offset in rebuild_txn_indexes:
                        segment.update_txn_index(completed, psm.last_stable_offset(completed))
                    replayed += 1
    psm.update_map_end_offset(log_end_offset)
    return replayed


def read_marker(segment: LogSegment, header: RecordBatchHeader) -> EndTransactionMarker | None:
    """The COMMIT/ABORT marker of the control batch ``header`` (read from ``segment``)."""
    data = segment.log.read(header.position, header.size_in_bytes)
    return read_end_txn_marker(data, dataclasses.replace(header, position=0))


def rebuild_leader_epochs(cache: LeaderEpochFileCache, segments: LogSegments) -> None:
    """Refill an empty (lost or corrupt) leader epoch cache from the batch headers."""
    entries = []
    latest = -1
    from tierlog.log.checkpoint_file import EpochEntry

    for segment in segments.values():
        for header in segment.log.batches_from(0, buffer_size=64 << 10):
            epoch = header.partition_leader_epoch
            if epoch > latest:
                entries.append(EpochEntry(epoch, header.base_offset))
                latest = epoch
    if entries:
        cache.assign_entries(entries)


def open_log(
    log_class: type[UnifiedLog],
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
    """The body of :meth:`UnifiedLog.open <tierlog.log.unified_log.UnifiedLog.open>` (Kafka's
    ``UnifiedLog.apply``): the topic id, the leader epoch cache, the segments (loaded by a
    :class:`LogLoader`) and the producer state of the log in ``dir``, and the log built over
    them. ``log_class`` is that method's ``cls``: this module, which
    :mod:`~tierlog.log.unified_log` imports, need not import it back."""
    dir = Path(dir)
    try:
        dir.mkdir(parents=True)
        new = True  # nothing to read: no partition.metadata, no snapshots
    except FileExistsError:
        new = False
    topic_id = _load_topic_id(dir, topic_id, new)

    checkpoint = LeaderEpochCheckpointFile(LeaderEpochCheckpointFile.new_file(dir))
    rebuild_epochs = False
    try:
        leader_epoch_cache = LeaderEpochFileCache(checkpoint)
    except CorruptCheckpointError as e:
        log.warning("%s: %s; rebuilding the leader epoch cache from the log", dir, e)
        checkpoint.path.unlink(missing_ok=True)
        leader_epoch_cache = LeaderEpochFileCache(checkpoint)
        rebuild_epochs = True

    segments = LogSegments()
    loader = LogLoader(
        dir,
        config,
        segments,
        log_start_offset_checkpoint=log_start_offset,
        recovery_point_checkpoint=recovery_point,
        had_clean_shutdown=had_clean_shutdown,
        leader_epoch_cache=leader_epoch_cache,
        time_ms=time_ms,
        remote_log_enabled=config.remote_storage_enable,
    )
    offsets = loader.load()
    if rebuild_epochs:
        rebuild_leader_epochs(leader_epoch_cache, segments)
        truncate_leader_epochs(leader_epoch_cache, offsets.log_start_offset, offsets.log_end_offset)

    producer_state_manager = ProducerStateManager(dir, load_snapshots=False)
    if not new:
        producer_state_manager.remove_stray_snapshots(segments.base_offsets())
    rebuild_producer_state(
        producer_state_manager,
        segments,
        offsets.log_start_offset,
        offsets.log_end_offset,
        time_ms(),
        loader.recovered,
    )
    return log_class(
        dir,
        config,
        segments,
        log_start_offset=offsets.log_start_offset,
        recovery_point=offsets.recovery_point,
        log_end_offset=offsets.log_end_offset,
        high_watermark=high_watermark,
        leader_epoch_cache=leader_epoch_cache,
        producer_state_manager=producer_state_manager,
        topic_id=topic_id,
        time_ms=time_ms,
    )


def _load_topic_id(dir: Path, topic_id: uuid.UUID | None, new: bool) -> uuid.UUID | None:
    """The topic id of the log in ``dir``; ``topic_id`` (the caller's, e.g. the topic
    registry's) is written to ``partition.metadata`` when the file lacks it.

    Written without fsync: whoever passes a topic id keeps it durably elsewhere (the broker's
    topic registry, written before the log is opened), which restores a file lost or torn by
    a machine crash; :meth:`PartitionMetadataFile.flush` makes it durable when it must be.
    """
    metadata = PartitionMetadataFile(PartitionMetadataFile.new_file(dir))
    existing = None
    try:
        if not new:
            existing = metadata.read()
    except CorruptCheckpointError as e:
        log.warning("%s: %s; ignoring it", dir, e)
    if topic_id is None:
        return existing
    if existing is not None and existing != topic_id:
        raise InconsistentTopicId(
            f"topic id {topic_id} does not match {existing} in {metadata.path}"
        )
    if existing != topic_id:
        metadata.write(topic_id, durable=False)
    return topic_id
