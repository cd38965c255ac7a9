"""Kafka's ``Cleaner``: one round of compaction of one log, keeping the latest record of every
key (the threads that run it are :mod:`.log_cleaner`'s).

One round over one log (:meth:`Cleaner.do_clean`), as Kafka does it:

1. **Offset map.** Read the dirty section [first dirty, first uncleanable) and map every key
   to the offset of its latest record (:class:`~tierlog.log.offset_map.SkimpyOffsetMap`,
   bounded by ``log.cleaner.dedupe.buffer.size``; when it fills up, the round covers only the
   part mapped so far). ``latest_offset`` is the last offset the map covers.
2. **Groups.** The segments from the start of the log up to the map's end are grouped, in
   order, into runs whose log bytes fit ``segment.bytes`` and whose indexes fit
   ``segment.index.bytes`` (Kafka's ``groupSegmentsBySize``); the active segment is never
   among them.
3. **Rewrite.** Each group is copied into one new segment named ``<base>.log.cleaned``,
   batch by batch (Kafka's ``cleanInto`` / ``MemoryRecords.filterTo``). A record is kept
   when its offset is past the map, or it is the latest of its key and either has a value or
   is a tombstone whose batch's delete horizon has not passed. A record without a key is
   dropped. A batch whose records all stay, and which needs no new delete horizon, is copied
   byte for byte; otherwise it is re-encoded with the records codec -- same compression,
   baseOffset, lastOffsetDelta, producer id/epoch, baseSequence, leader epoch, attributes --
   with a new CRC. A batch that keeps a tombstone and has no delete horizon yet gets one:
   ``now + delete.retention.ms`` in baseTimestamp with the hasDeleteHorizonMs attribute
   (KIP-534); a later round drops the tombstone once that time has passed. An emptied batch
   is dropped, except (Kafka's ``RETAIN_EMPTY``) the last batch of a producer that still has
   state, kept as an empty batch (header only) so its epoch and sequence survive, and the
   last batch of the round. tierlog also keeps the last batch of every group (empty when
   emptied): a swapped-in segment then always ends where the segments it replaces ended,
   which is what crash recovery relies on to find them (see :mod:`.log_loader`).
4. **Swap.** The cleaned segment is flushed and swapped in for its group
   (:meth:`~tierlog.log.local_log.LocalLog.replace_segments`: ``.cleaned`` ->
   ``.swap`` -> old segments ``.deleted`` -> final names), under the log's lock, in one
   copy-on-write step of the segment list: reads never wait for a clean and never see half
   of one.
5. The first dirty offset becomes the map's end (``cleaner-offset-checkpoint``, see
   :mod:`.log_cleaner_manager`).

Appends go on meanwhile (the active segment is not touched); a segment deleted by retention
or truncation while its group is being cleaned aborts that group's swap (the log then reads
as before).

Transactions (KIP-98, Kafka's ``CleanedTransactionMetadata``, see
:mod:`.cleaned_transaction_metadata`): the keys of aborted transactions never enter the
offset map (a transactional batch is aborted from its transaction's first offset, as the
``.txnindex`` says, until its producer's ABORT marker), so an aborted value never shadows a
committed one. While rewriting, the round tracks the transactions of the batches it reads,
across its groups: a batch of an aborted transaction goes entirely (kept empty only where an
emptied batch is kept anyway: an active producer's last one, the round's or the group's last);
a marker stays while its transaction still has a batch in the log (an ABORT marker then
carries its ``.txnindex`` entry into the cleaned segment; the entries of transactions with no
data left go), gets a delete horizon (``delete.retention.ms``, KIP-534) in the first round
that finds its transaction without data, and goes in a round after that horizon -- unless it
is an active producer's last batch (kept, emptied, for its epoch). A tiered log keeps its
markers and every ``.txnindex`` entry, as it keeps its tombstones: its aborted data may be in
remote segments, which only the remote compactor rewrites (it keeps transactional data as it
is). Transactional batches never take the compiled fast path (``filter_run``) that drops
runs of batches unseen.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import crc32c as _crc32c

from tierlog.errors import CorruptRecordError, LogCleaningAbortedError
from tierlog.log import log_file_utils as lfu
from tierlog.log.cleaned_transaction_metadata import CleanedTransactionMetadata
from tierlog.log.file_records import FileRecords
from tierlog.log.log import Log
from tierlog.log.log_cleaner_manager import LogToClean
from tierlog.log.log_segment import LogSegment, wall_clock_ms
from tierlog.log.offset_map import SkimpyOffsetMap
from tierlog.log.offset_map import rebuild_records as _rebuild_records
from tierlog.log.throttler import Throttler
from tierlog.log.transaction_index import AbortedTxnFilter
from tierlog.records.default_records import RecordBatchBuilder, build_empty_batch, read_records
from tierlog.records.record_batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CRC_START,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatchHeader,
    iter_headers,
)
from tierlog.records.record_keys import read_section_keys, records_section

__all__ = [
    "Cleaner",
    "CleanerStats",
    "SegmentWriter",
    "empty_batch_of",
    "read_batches",
    "retained_batch",
    "retained_batch_py",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class CleanerStats:
    """What one round did (Kafka's ``CleanerStats``, the parts tierlog uses)."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    buffer_utilization: float = 0.0
    start_ns: int = field(default_factory=time.monotonic_ns)
    end_ns: int = 0

    @property
    def elapsed_seconds(self) -> float:
        end = self.end_ns or time.monotonic_ns()
        return (end - self.start_ns) / 1e9


def read_batches(
    records: FileRecords,
    start: int,
    buffer_size: int,
    max_message_size: int,
    *,
    on_chunk: Callable[[bytes], None] | None = None,
    skip: Callable[[bytes, int], int] | None = None,
) -> Iterator[tuple[bytes, RecordBatchHeader]]:
    """(chunk, header) for every batch of ``records`` from byte ``start``; the header's
    position is within the chunk. A batch larger than the buffer is read alone.

    ``on_chunk`` is called with each chunk read. ``skip(chunk, position)``, called before
    each batch, may handle a run of batches itself and return the position after them (the
    cleaner's fast path: :meth:`~tierlog.log.offset_map.DictTable.map_run` and
    ``filter_run``); the batches it skipped are not yielded.

    Raises:
        CorruptRecordError: a batch whose length runs past the file.
    """
    size = records.size_in_bytes()
    pos = start
    while size - pos >= RECORD_BATCH_OVERHEAD:
        chunk = records.read(pos, buffer_size)
        if on_chunk is not None:
            on_chunk(chunk)
        consumed = 0
        while True:
            if skip is not None:
                consumed = skip(chunk, consumed)
            header = next(iter_headers(chunk, consumed), None)
            if header is None:
                break
            yield chunk, header
            consumed = header.position + header.size_in_bytes
        if consumed == 0:
            length = int.from_bytes(chunk[8:12], "big", signed=True) + LOG_OVERHEAD
            if length < RECORD_BATCH_OVERHEAD or pos + length > size:
                raise CorruptRecordError(
                    f"batch of {length} bytes at {pos} of {records.path} runs past its end"
                )
            if length > max(buffer_size, max_message_size):
                log.warning("%s: a batch of %d bytes at %d", records.path, length, pos)
            buffer_size = length
            continue
        pos += consumed


class Cleaner:
    """One cleaner thread's worker (Kafka's ``Cleaner``): builds the offset map and rewrites
    segment groups. Not thread-safe (each thread has its own)."""

    def __init__(
        self,
        offset_map: SkimpyOffsetMap,
        *,
        io_buffer_size: int = 512 * 1024,
        max_io_buffer_size: int = 32 * 1024 * 1024,
        dup_buffer_load_factor: float = 0.9,
        throttler: Throttler | None = None,
        check_done: Callable[[TopicPartition], None] = lambda tp: None,
        time_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.offset_map = offset_map
        self.io_buffer_size = io_buffer_size
        self.max_io_buffer_size = max_io_buffer_size
        self.dup_buffer_load_factor = dup_buffer_load_factor
        self.throttler = throttler or Throttler(float("inf"))
        self.check_done = check_done
        self.time_ms = time_ms
        #: The statistics of the last round that finished (the cleaner metrics read them).
        self.last_stats: CleanerStats | None = None

    # ------------------------------------------------------------------ a round

    def clean(self, cleanable: LogToClean) -> tuple[int, CleanerStats]:
        return self.do_clean(cleanable, self.time_ms())

    def do_clean(self, cleanable: LogToClean, current_time: int) -> tuple[int, CleanerStats]:
        """Clean ``cleanable.log`` from its start to the end of the offset map; returns the
        next first dirty offset and the round's statistics.

        Raises:
            LogCleaningAbortedError: the clean was aborted (the log is as before for the
                groups not yet swapped).
            OSError: reading or writing a segment failed.
        """
        lg = cleanable.log
        tp = cleanable.topic_partition
        stats = CleanerStats()
        upper_bound = cleanable.first_uncleanable_offset
        log.info(
            "cleaning %s: dirty section [%d, %d)", lg, cleanable.first_dirty_offset, upper_bound
        )
        self.build_offset_map(lg, tp, cleanable.first_dirty_offset, upper_bound, stats)
        end_offset = self.offset_map.latest_offset + 1
        snapshot = lg.segments.snapshot()
        active = snapshot.segments[-1] if snapshot.segments else None
        # A tiered log: the segments already copied to remote storage are left as they are
        # (a merged group would straddle what is remote and what is not); the remote
        # compactor rewrites their remote copies (see tierlog.tiered.remote_log_compactor).
        tiered_until = lg.highest_offset_in_remote_storage if lg.remote_log_enabled else -1
        segments = [
            s
            for s in snapshot.values_between(0, end_offset)
            if s is not active and tiered_until < s.base_offset < upper_bound
        ]
        groups = self.group_segments_by_size(
            segments,
            lg.config.segment_size,
            lg.config.max_index_size,
            upper_bound,
            snapshot.segments,
        )
        # A tiered log keeps its tombstones: older values of their keys may be in remote
        # segments, which only the remote compactor rewrites (it drops them).
        drop_tombstones = not lg.remote_log_enabled
        # One transaction state for the whole round: a transaction's data and its marker may
        # be in different groups.
        transaction_metadata = CleanedTransactionMetadata()
        if groups:
            transaction_metadata.add_aborted_transactions(
                lg.collect_aborted_transactions(groups[0][0].base_offset, upper_bound)
            )
        for group in groups:
            self.clean_segments(
                lg,
                tp,
                group,
                current_time,
                stats,
                upper_bound,
                drop_tombstones=drop_tombstones,
                transaction_metadata=transaction_metadata,
            )
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_ns = time.monotonic_ns()
        log.info(
            "cleaned %s up to %d: %d of %d bytes kept, %d of %d records, %.2fs",
            lg,
            end_offset,
            stats.bytes_written,
            stats.bytes_read,
            stats.messages_written,
            stats.messages_read,
            stats.elapsed_seconds,
        )
        return end_offset, stats

    # ------------------------------------------------------------------ offset map

    def build_offset_map(
        self, lg: Log, tp: TopicPartition, start: int, end: int, stats: CleanerStats
    ) -> None:
        """Map every key of [``start``, ``end``) to its latest offset (Kafka's
        ``buildOffsetMap``), stopping when the map is full."""
        offset_map = self.offset_map
        offset_map.clear()
        dirty = [s for s in lg.segments.values_between(start, end)]
        aborted = lg.collect_aborted_transactions(start, end)
        txns = AbortedTxnFilter(aborted) if aborted else None
        for i, segment in enumerate(dirty):
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            self.check_done(tp)
            if self._build_offset_map_for_segment(tp, segment, start, next_start, stats, txns):
                log.debug("%s: offset map full in segment %d", lg, segment.base_offset)
                break

    def _build_offset_map_for_segment(
        self,
        tp: TopicPartition,
        segment: LogSegment,
        start: int,
        next_segment_start: int,
        stats: CleanerStats,
        txns: AbortedTxnFilter | None = None,
    ) -> bool:
        offset_map = self.offset_map
        # The table, called directly: this loop runs once per batch of the dirty section.
        table = offset_map.table
        max_desired = int(offset_map.slots * self.dup_buffer_load_factor)
        position = segment.offset_index.lookup(start).position
        read = 0

        def on_chunk(chunk: bytes) -> None:
            nonlocal read
            self.check_done(tp)
            self.throttler.maybe_throttle(len(chunk))
            read += len(chunk)

        def skip(chunk: bytes, off: int) -> int:
            # The plain batches, in one call per run; what it leaves comes below.
            off, records, last = table.map_run(chunk, off, start, next_segment_start, max_desired)
            stats.map_messages_read += records
            if last >= 0:
                offset_map.update_latest_offset(last)
            return off

        for chunk, header in read_batches(
            segment.log,
            position,
            self.io_buffer_size,
            self.max_io_buffer_size,
            on_chunk=on_chunk,
            # With aborted transactions in the range every batch comes here, in order.
            skip=skip if txns is None else None,
        ):
            last_offset = header.base_offset + header.last_offset_delta
            if last_offset < start:
                continue
            if header.base_offset >= next_segment_start:
                break
            if txns is not None and txns.is_aborted(chunk, header):
                offset_map.update_latest_offset(last_offset)
                continue
            if not header.attributes & CONTROL_FLAG_MASK:
                data, pos, end = records_section(chunk, header, False)
                count = header.records_count
                if len(table) + count < max_desired:
                    # Room for the whole batch: the common case, one call.
                    stats.map_messages_read += table.map_batch(
                        data, pos, end, count, header.base_offset, header.position, start
                    )
                else:
                    offsets, keys, _ = read_section_keys(
                        data, pos, end, count, header.base_offset, header.position
                    )
                    stats.map_messages_read += len(offsets)
                    for offset, key in zip(offsets, keys, strict=True):
                        if key is not None and offset >= start:
                            if len(table) >= max_desired:
                                # Kafka's put moves latestOffset: the map ends at the last put.
                                stats.map_bytes_read += read
                                return True
                            table.put(key, offset)
                            offset_map.update_latest_offset(offset)
            offset_map.update_latest_offset(last_offset)
        stats.map_bytes_read += read
        # A gap at the end of the segment: the map covers it too.
        offset_map.update_latest_offset(max(offset_map.latest_offset, next_segment_start - 1))
        return False

    # ------------------------------------------------------------------ groups

    @staticmethod
    def group_segments_by_size(
        segments: list[LogSegment],
        max_size: int,
        max_index_size: int,
        first_uncleanable_offset: int,
        all_segments: tuple[LogSegment, ...] = (),
    ) -> list[list[LogSegment]]:
        """Consecutive runs of ``segments`` whose log bytes fit ``max_size``, whose offset and
        time indexes each fit ``max_index_size``, and whose offsets fit 32-bit relative
        offsets from the run's base (Kafka's ``groupSegmentsBySize``)."""
        following = {
            s.base_offset: all_segments[i + 1].base_offset for i, s in enumerate(all_segments[:-1])
        }
        groups: list[list[LogSegment]] = []
        i = 0
        while i < len(segments):
            group = [segments[i]]
            log_size = segments[i].size
            index_size = segments[i].offset_index.size_in_bytes
            time_index_size = segments[i].time_index.size_in_bytes
            i += 1
            while i < len(segments):
                s = segments[i]
                last = following.get(s.base_offset, first_uncleanable_offset) - 1
                if (
                    log_size + s.size <= max_size
                    and index_size + s.offset_index.size_in_bytes <= max_index_size
                    and time_index_size + s.time_index.size_in_bytes <= max_index_size
                    and (s.size == 0 or last - group[0].base_offset <= _INT32_MAX)
                ):
                    group.append(s)
                    log_size += s.size
                    index_size += s.offset_index.size_in_bytes
                    time_index_size += s.time_index.size_in_bytes
                    i += 1
                else:
                    break
            groups.append(group)
        return groups

    # ------------------------------------------------------------------ rewrite

    def clean_segments(
        self,
        lg: Log,
        tp: TopicPartition,
        segments: list[LogSegment],
        current_time: int,
        stats: CleanerStats,
        upper_bound_offset_of_round: int,
        *,
        drop_tombstones: bool = True,
        transaction_metadata: CleanedTransactionMetadata | None = None,
    ) -> None:
        """Clean a group into one ``.cleaned`` segment and swap it in (Kafka's
        ``cleanSegments``); without ``drop_tombstones`` every tombstone and every transaction
        marker stays, its delete horizon passed or not, and so do the ``.txnindex`` entries
        of the group. ``transaction_metadata`` (the round's) drops aborted transactional
        data; without it that stays too."""
        config = lg.config
        cleaned = LogSegment.open(
            lg.dir,
            segments[0].base_offset,
            config,
            file_already_exists=False,
            file_suffix=lfu.CLEANED_FILE_SUFFIX,
        )
        swapping = False
        try:
            active_producers = lg.last_records_of_active_producers()
            delete_retention_ms = int(config.get("delete.retention.ms"))
            writer = SegmentWriter(cleaned, self.throttler, stats)
            last_dropped: RecordBatchHeader | None = None
            # The entries of the aborted transactions whose markers stay go to the cleaned
            # segment's index as the markers are read (Kafka's); a log that keeps its markers
            # keeps all of them.
            keep_entries = transaction_metadata is None or not drop_tombstones
            if transaction_metadata is not None:
                transaction_metadata.cleaned_index = None if keep_entries else cleaned.txn_index
            for segment in segments:
                last_dropped = self.clean_into(
                    tp,
                    segment.log,
                    writer,
                    active_producers,
                    upper_bound_offset_of_round,
                    delete_retention_ms,
                    current_time,
                    stats,
                    drop_tombstones=drop_tombstones,
                    transaction_metadata=transaction_metadata,
                )
            if last_dropped is not None:
                # Keep the group's last batch, emptied: the cleaned segment ends where its
                # group ended (see the module docstring).
                writer.write(empty_batch_of(last_dropped), last_dropped)
            writer.flush()
            if keep_entries:
                for segment in segments:
                    for txn in segment.txn_index.all_aborted_txns():
                        cleaned.txn_index.append(txn)
            cleaned.on_become_inactive_segment()
            cleaned.flush()
            cleaned.set_last_modified(segments[-1].last_modified)
            log.info(
                "%s: swapping in cleaned segment %d for %s",
                lg,
                cleaned.base_offset,
                [s.base_offset for s in segments],
            )
            swapping = True
            lg.replace_segments([cleaned], segments)
        except LogCleaningAbortedError:
            # replace_segments refuses before renaming anything.
            cleaned.close_handlers()
            cleaned.delete_if_exists()
            raise
        except BaseException:
            if not swapping:
                cleaned.close_handlers()
                cleaned.delete_if_exists()
            # else: a rename failed mid-swap; loading the log completes or undoes it.
            raise

    def clean_into(
        self,
        tp: TopicPartition,
        records: FileRecords,
        writer: SegmentWriter,
        active_producers: Mapping[int, tuple[int, int]],
        upper_bound_offset_of_round: int,
        delete_retention_ms: int,
        current_time: int,
        stats: CleanerStats,
        *,
        drop_tombstones: bool = True,
        transaction_metadata: CleanedTransactionMetadata | None = None,
    ) -> RecordBatchHeader | None:
        """Copy what stays of the batches of ``records`` (a segment's) to ``writer`` (Kafka's
        ``cleanInto``); returns the header of the last batch when it was dropped entirely.

        With ``transaction_metadata`` (fed every batch, in order) the batches of aborted
        transactions go, and, with ``drop_tombstones`` too, so do the markers whose
        transactions have no data left once their delete horizon has passed (a marker gets
        its horizon, ``current_time + delete_retention_ms``, in the first round that finds
        it so). Without it transactional data and markers stay as they are.

        The remote compactor calls it too, on a downloaded remote segment."""
        offset_map = self.offset_map
        table = offset_map.table
        latest_offset = offset_map.latest_offset
        last_dropped: RecordBatchHeader | None = None
        producers = (
            active_producers if isinstance(active_producers, dict) else dict(active_producers)
        )
        drop_markers = transaction_metadata is not None and drop_tombstones

        def on_chunk(chunk: bytes) -> None:
            self.check_done(tp)
            self.throttler.maybe_throttle(len(chunk))

        def skip(chunk: bytes, off: int) -> int:
            # The batches that go entirely, in one call per run; what it leaves comes below.
            nonlocal last_dropped
            off, size, count, invalid, last_pos = table.filter_run(
                chunk, off, latest_offset, upper_bound_offset_of_round, producers
            )
            if last_pos >= 0:
                stats.bytes_read += size
                stats.messages_read += count
                stats.invalid_messages += invalid
                last_dropped = next(iter_headers(chunk, last_pos))
            return off

        for chunk, header in read_batches(
            records,
            0,
            self.io_buffer_size,
            self.max_io_buffer_size,
            on_chunk=on_chunk,
            skip=skip,
        ):
            batch_size = header.size_in_bytes
            stats.bytes_read += batch_size
            attributes = header.attributes
            last_offset = header.base_offset + header.last_offset_delta
            producer_id = header.producer_id
            retain_empty = last_offset + 1 == upper_bound_offset_of_round
            if producer_id != NO_PRODUCER_ID:
                last = active_producers.get(producer_id)
                if last is not None:
                    last_data_offset, producer_epoch = last
                    if last_data_offset >= 0:
                        retain_empty = retain_empty or last_offset == last_data_offset
                    else:
                        retain_empty = retain_empty or (
                            bool(attributes & CONTROL_FLAG_MASK)
                            and header.producer_epoch == producer_epoch
                        )
            has_horizon = bool(attributes & DELETE_HORIZON_FLAG_MASK)
            discard = (
                transaction_metadata is not None
                and transaction_metadata.should_discard_batch(chunk, header)
            )
            if attributes & CONTROL_FLAG_MASK:
                count = header.records_count
                stats.messages_read += count
                if not drop_markers:
                    stats.messages_written += count
                    writer.write(_slice(chunk, header), header)
                    last_dropped = None
                    continue
                # Kafka: a marker goes once its transaction has no data left and its delete
                # horizon has passed; it gets that horizon in the first round that finds it
                # without data.
                if count and not (
                    discard and has_horizon and header.base_timestamp <= current_time
                ):
                    stats.messages_written += count
                    if discard and not has_horizon:
                        horizon = current_time + delete_retention_ms
                        kept = list(range(count))
                        writer.write(retained_batch(chunk, header, kept, horizon), header)
                    else:
                        writer.write(_slice(chunk, header), header)
                    last_dropped = None
                elif retain_empty:
                    writer.write(empty_batch_of(header), header)
                    last_dropped = None
                else:
                    last_dropped = header
                continue
            if discard:  # a batch of an aborted transaction: all of it goes
                stats.messages_read += header.records_count
                if retain_empty:
                    writer.write(empty_batch_of(header), header)
                    last_dropped = None
                else:
                    last_dropped = header
                continue
            retain_deletes = (
                not drop_tombstones or not has_horizon or current_time < header.base_timestamp
            )
            data, pos, end = records_section(chunk, header, False)
            count = header.records_count
            stats.messages_read += count
            filtered, tombstones, later_tombstone, invalid = table.filter_batch(
                data, pos, end, count, header.base_offset, header.position, latest_offset
            )
            stats.invalid_messages += invalid
            if tombstones and not retain_deletes:
                dropped = set(tombstones)
                kept = [i for i in (range(count) if filtered is None else filtered)
                        if i not in dropped]  # fmt: skip
                contains_tombstones = later_tombstone
            else:
                kept = list(range(count)) if filtered is None else filtered
                contains_tombstones = later_tombstone or bool(tombstones)
            if kept:
                stats.messages_written += len(kept)
                need_horizon = contains_tombstones and not has_horizon
                if len(kept) == count and not need_horizon:
                    writer.write(_slice(chunk, header), header)
                else:
                    if need_horizon:
                        horizon = current_time + delete_retention_ms
                    else:
                        horizon = header.base_timestamp if has_horizon else -1
                    writer.write(retained_batch(chunk, header, kept, horizon), header)
                last_dropped = None
            elif retain_empty:
                writer.write(empty_batch_of(header), header)
                last_dropped = None
            else:
                last_dropped = header
        return last_dropped


def retained_batch(chunk: bytes, header: RecordBatchHeader, kept: list[int], horizon: int) -> bytes:
    """The batch ``header`` (in ``chunk``) keeping only the records at the indexes ``kept``
    (ascending, at least one), as Kafka's ``filterTo`` writes it: same compression,
    baseOffset, lastOffsetDelta, producer id/epoch, baseSequence, leader epoch; the first kept
    record's timestamp as baseTimestamp, or the delete horizon ``horizon`` (>= 0) with the
    hasDeleteHorizonMs attribute; a new CRC. An uncompressed batch goes through the compiled
    record rewrite when it is built (the same bytes: :func:`retained_batch_py` is the
    reference)."""
    attributes = header.attributes
    if _rebuild_records is None or attributes & COMPRESSION_CODEC_MASK:
        return retained_batch_py(chunk, header, kept, horizon)
    data, pos, end = records_section(chunk, header, False)
    log_append_time = header.max_timestamp if attributes & TIMESTAMP_TYPE_MASK else -1
    payload, base_timestamp, max_timestamp = _rebuild_records(
        data, pos, end, header.records_count, header.position, kept,
        header.base_timestamp, horizon, log_append_time,
    )  # fmt: skip
    new_attributes = attributes & (
        TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
    )
    if horizon >= 0:
        new_attributes |= DELETE_HORIZON_FLAG_MASK
    head = HEADER_STRUCT.pack(
        header.base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),
        header.partition_leader_epoch,
        CURRENT_MAGIC,
        0,
        new_attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(kept),
    )
    crc = _crc32c.crc32c(payload, value=_crc32c.crc32c(head[CRC_START:]))
    return b"".join((head[:CRC_OFFSET], crc.to_bytes(4, "big"), head[CRC_START:], payload))


def retained_batch_py(
    chunk: bytes, header: RecordBatchHeader, kept: list[int], horizon: int
) -> bytes:
    """:func:`retained_batch` by decoding the batch and building a new one (the reference;
    compressed batches always take it)."""
    attributes = header.attributes
    all_records = read_records(chunk, header)
    builder = RecordBatchBuilder(
        attributes & COMPRESSION_CODEC_MASK,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=bool(attributes & TRANSACTIONAL_FLAG_MASK),
        is_control=bool(attributes & CONTROL_FLAG_MASK),
        timestamp_type=1 if attributes & TIMESTAMP_TYPE_MASK else 0,
        delete_horizon_ms=horizon,
    )
    base = header.base_offset
    for i in kept:
        record = all_records[i]
        builder.append(
            record.timestamp, record.key, record.value, record.headers,
            offset_delta=record.offset - base,
        )  # fmt: skip
    builder.override_last_offset(header.base_offset + header.last_offset_delta)
    return builder.build()


def _slice(chunk: bytes, header: RecordBatchHeader) -> memoryview:
    return memoryview(chunk)[header.position : header.position + header.size_in_bytes]


def empty_batch_of(header: RecordBatchHeader) -> bytes:
    return build_empty_batch(
        base_offset=header.base_offset,
        last_offset=header.base_offset + header.last_offset_delta,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        max_timestamp=header.max_timestamp,
        timestamp_type=1 if header.attributes & TIMESTAMP_TYPE_MASK else 0,
        is_transactional=bool(header.attributes & TRANSACTIONAL_FLAG_MASK),
        is_control=bool(header.attributes & CONTROL_FLAG_MASK),
    )


class SegmentWriter:
    """Buffers the batches of a cleaned segment and appends them about every
    ``index.interval.bytes``, so the cleaned segment is indexed as densely as an appended one.
    Not thread-safe."""

    def __init__(self, segment: LogSegment, throttler: Throttler, stats: CleanerStats) -> None:
        self._segment = segment
        self._throttler = throttler
        self._stats = stats
        self._interval = max(segment.index_interval_bytes, 4096)
        self._buf = bytearray()
        self._last_offset = -1
        self._max_timestamp = -1
        self._offset_of_max_timestamp = -1

    def write(self, batch: bytes | memoryview, original: RecordBatchHeader) -> None:
        self._buf += batch
        last_offset = original.base_offset + original.last_offset_delta
        self._last_offset = last_offset
        max_timestamp = HEADER_STRUCT.unpack_from(batch, 0)[8]
        if max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = last_offset
        if len(self._buf) >= self._interval:
            self.flush()

    def flush(self) -> None:
        if not self._buf:
            return
        n = len(self._buf)
        self._segment.append(
            self._last_offset, self._max_timestamp, self._offset_of_max_timestamp, self._buf
        )
        self._stats.bytes_written += n
        self._throttler.maybe_throttle(n)
        self._buf = bytearray()
        self._max_timestamp = -1
        self._offset_of_max_timestamp = -1
