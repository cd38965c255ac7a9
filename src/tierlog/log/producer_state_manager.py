"""Idempotent-producer state of one partition, and Kafka's producer snapshot files.

For every producer id the partition remembers its epoch and its last five batches (sequence
range and offsets). A produce retry whose batch matches one of them is a duplicate: the
broker answers with the original offsets instead of appending again. A batch whose first
sequence does not follow the last one is out of order; a batch from an older epoch is fenced.

The state is rebuilt on startup from the latest snapshot plus a replay of the log after it.
Snapshot file ``<20-digit offset>.snapshot`` (the state of every batch *before* that offset),
all integers big-endian, Kafka's ``PID_SNAPSHOT_MAP_SCHEMA`` version 1::

    Version:        int16    1
    Crc:            uint32   CRC-32C of every byte after this field
    ProducerEntries: int32 count, then per producer (46 bytes):
        ProducerId             int64
        ProducerEpoch          int16
        LastSequence           int32    -1 when no batch is retained
        LastOffset             int64    last offset of the last batch, -1 when none
        OffsetDelta            int32    last offset - first offset of that batch
        Timestamp              int64    max timestamp of that batch (the producer's last)
        CoordinatorEpoch       int32    of the last transaction marker (-1: none)
        CurrentTxnFirstOffset  int64    first offset of the open transaction (-1: none)

Only the last batch of each producer survives a snapshot, as in Kafka.

Transactions: a producer's first transactional batch opens its transaction
(``current_txn_first_offset``, an *ongoing* transaction keyed by that offset); its COMMIT or
ABORT marker (a control batch) completes it, returning a :class:`CompletedTxn` the log turns
into a ``.txnindex`` entry when aborted. A completed transaction stays *unreplicated* until
the high watermark passes its marker. The first unstable offset is the smallest first offset
of an ongoing or unreplicated transaction; the log's last stable offset is
``min(first unstable offset, high watermark)``::

    offsets:   ... 10 [P1 data 11..14 ..... P1 COMMIT 20] 21 [P2 data 22 ... (open)
                       ^ ongoing(P1) until 20 is written, unreplicated until HW > 20
                                                              ^ first unstable offset = 22
"""

from __future__ import annotations

import logging
import struct
import threading
import types
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.errors import (
    CorruptSnapshotError,
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequenceNumber,
    TransactionCoordinatorFenced,
)
from tierlog.log.log_file_utils import (
    DELETED_FILE_SUFFIX,
    is_snapshot_file,
    offset_from_file_name,
    producer_snapshot_file,
    write_atomically,
)
from tierlog.records.control_records import EndTransactionMarker
from tierlog.records.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RecordBatchHeader,
    crc32c,
)

log = logging.getLogger(__name__)

#: How many recent batches per producer are kept for duplicate detection (Kafka's 5, the
#: maximum ``max.in.flight.requests.per.connection`` with idempotence).
NUM_BATCHES_TO_RETAIN = 5
PRODUCER_SNAPSHOT_VERSION = 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
INT32_MAX = 2**31 - 1

_VERSION_CRC = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_OFFSET = 2
_ENTRIES_OFFSET = 6  # CRC covers [6, end)


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping from Int32 max to 0 (DefaultRecordBatch's)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement``, wrapping from 0 to Int32 max."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """True when ``next_seq`` directly follows ``last_seq`` (Int32 max is followed by 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Sequence range and offsets of one appended batch of a producer."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker at ``last_offset`` (Kafka's ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def _batches() -> deque[BatchMetadata]:
    return deque(maxlen=NUM_BATCHES_TO_RETAIN)


@dataclass(slots=True, eq=False)
class ProducerStateEntry:
    """What the partition knows about one producer id. Mutable; owned by the manager."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batch_metadata: deque[BatchMetadata] = field(default_factory=_batches)
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """Switch to ``producer_epoch``, forgetting the batches of the old epoch."""
        if self.producer_epoch != producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch
            return True
        return False

    def add_batch(self, producer_epoch: int, batch: BatchMetadata) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(batch)  # the deque drops the oldest beyond 5
        self.last_timestamp = batch.timestamp

    def batch_with_sequence_range(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batch_metadata:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def find_duplicate_batch(self, header: RecordBatchHeader) -> BatchMetadata | None:
        """The retained batch ``header`` duplicates (same epoch and sequence range), if any."""
        if header.producer_epoch != self.producer_epoch:
            return None
        return self.batch_with_sequence_range(header.base_sequence, header.last_sequence)


# --------------------------------------------------------------------------- snapshot codec


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a version-1 producer snapshot holding ``entries`` (sorted by id)."""
    ordered = sorted(entries, key=lambda e: e.producer_id)
    body = bytearray(_VERSION_CRC.size)
    body += _COUNT.pack(len(ordered))
    for e in ordered:
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
        )
    crc = crc32c(memoryview(body)[_ENTRIES_OFFSET:])
    _VERSION_CRC.pack_into(body, 0, PRODUCER_SNAPSHOT_VERSION, crc)
    return bytes(body)


def decode_snapshot(data: bytes, location: str = "<bytes>") -> list[ProducerStateEntry]:
    """Parse a producer snapshot.

    Raises:
        CorruptSnapshotError: too short, unknown version, CRC mismatch, or a bad entry count.
    """
    minimum = _ENTRIES_OFFSET + _COUNT.size
    if len(data) < minimum:
        raise CorruptSnapshotError(
            f"snapshot {location} failed schema validation: {len(data)} bytes, need {minimum}"
        )
    version, crc = _VERSION_CRC.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(
            f"snapshot {location} contained an unknown file version {version}"
        )
    computed = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if crc != computed:
        raise CorruptSnapshotError(
            f"snapshot {location} is corrupt (CRC is no longer valid). "
            f"Stored crc: {crc}. Computed crc: {computed}"
        )
    (count,) = _COUNT.unpack_from(data, _ENTRIES_OFFSET)
    if count < 0 or len(data) - minimum != count * _ENTRY.size:
        raise CorruptSnapshotError(
            f"snapshot {location} failed schema validation: {count} entries in "
            f"{len(data) - minimum} bytes"
        )
    entries = []
    for pid, epoch, seq, offset, delta, ts, coord, txn_first in _ENTRY.iter_unpack(
        memoryview(data)[minimum:]
    ):
        batches = _batches()
        if offset >= 0:
            first_seq = decrement_sequence(seq, delta) if seq >= 0 else seq
            batches.append(BatchMetadata(first_seq, seq, offset - delta, offset, ts))
        entries.append(
            ProducerStateEntry(
                pid, epoch, batches, coord, ts, txn_first if txn_first >= 0 else None
            )
        )
    return entries


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """The entries of the snapshot file at ``path``.

    Raises:
        CorruptSnapshotError: the file is corrupt.
        OSError: it cannot be read.
    """
    return decode_snapshot(Path(path).read_bytes(), str(path))


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry]) -> None:
    """Write a snapshot file atomically and durably. Raises OSError."""
    write_atomically(Path(path), encode_snapshot(entries))


# --------------------------------------------------------------------------- the manager


class ProducerStateManager:
    """Producer id -> :class:`ProducerStateEntry` for one partition, plus its snapshots.

    Thread-safety: the producer map and the offsets are *not* synchronised -- every call
    that reads or changes them (:meth:`check`, :meth:`update`, :meth:`take_snapshot`,
    :meth:`truncate_and_reload`, ...) must be made under the owning Log's lock. The set of
    snapshot files has its own lock, so :meth:`latest_snapshot_offset`,
    :meth:`oldest_snapshot_offset` and :meth:`snapshot_file_for` may be called from other
    threads (e.g. the tiered-storage copier).

    Usage on append, per batch with a producer id::

        duplicate = psm.check(header)       # may raise InvalidProducerEpoch/OutOfOrder...
        if duplicate: respond with duplicate.first_offset ..., do not append
        else: append, then psm.update(header, first_offset, last_offset, max_timestamp)

    and ``psm.update_map_end_offset(next_offset)`` after every append (batches without a
    producer id included). On roll: ``psm.take_snapshot(new_segment_base_offset)``.
    """

    def __init__(
        self,
        log_dir: Path,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        *,
        load_snapshots: bool = True,
    ) -> None:
        """``load_snapshots=False``: do not list the snapshot files now (a new log has none;
        a loaded one lists them in :meth:`remove_stray_snapshots`)."""
        self._log_dir = Path(log_dir)
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._snapshot_lock = threading.Lock()
        self._snapshots: dict[int, Path] = self._list_snapshots() if load_snapshots else {}
        self._last_map_offset = 0
        self._last_snap_offset = 0
        #: Open transactions: first offset -> producer id, in offset order.
        self._ongoing_txns: dict[int, int] = {}
        #: Completed transactions whose marker the high watermark has not passed yet:
        #: first offset -> (producer id, marker offset).
        self._unreplicated_txns: dict[int, tuple[int, int]] = {}
        self._first_unstable_offset: int | None = None

    @property
    def log_dir(self) -> Path:
        return self._log_dir

    @property
    def producer_id_expiration_ms(self) -> int:
        return self._producer_id_expiration_ms

    # ------------------------------------------------------------------ state

    @property
    def map_end_offset(self) -> int:
        """The offset up to which (exclusive) the producer map has been built."""
        return self._last_map_offset

    def update_map_end_offset(self, offset: int) -> None:
        """Set :attr:`map_end_offset`, e.g. to the log end offset after an append."""
        self._last_map_offset = offset

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        """A read-only view of producer id -> entry."""
        return types.MappingProxyType(self._producers)

    @property
    def producer_id_count(self) -> int:
        return len(self._producers)

    def is_empty(self) -> bool:
        return not self._producers

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The state of ``producer_id``, or None when it is unknown."""
        return self._producers.get(producer_id)

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        """Insert ``entry`` as is (snapshot loading, tests); its open transaction too."""
        self._producers[entry.producer_id] = entry
        first = entry.current_txn_first_offset
        if first is not None:
            self._ongoing_txns[first] = entry.producer_id
            self._ongoing_txns = dict(sorted(self._ongoing_txns.items()))
            self._update_first_unstable_offset()

    # ------------------------------------------------------------------ append path

    def check(
        self, header: RecordBatchHeader, marker: EndTransactionMarker | None = None
    ) -> BatchMetadata | None:
        """Validate a batch about to be appended against its producer's state.

        Returns the original :class:`BatchMetadata` when the batch duplicates one of the
        producer's retained batches (same epoch, same first and last sequence): answer with
        its offsets and do not append. Returns None when the batch should be appended --
        also for batches without a producer id and for producers not known yet (any
        sequence is accepted then, as in Kafka >= 2.5, since their state may have been
        removed by retention).

        A control batch carries its ``marker`` (from the coordinator): its coordinator epoch
        must not be older than the one of the producer's previous marker.

        Raises:
            InvalidProducerEpoch: the batch's epoch is older than the producer's.
            OutOfOrderSequenceNumber: same epoch and the first sequence does not follow the
                last one; or a new epoch whose first sequence is not 0.
            InvalidTxnState: a non-transactional batch while the producer's transaction is
                open.
            TransactionCoordinatorFenced: a marker from an older coordinator epoch.
        """
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return None
        if (
            marker is not None
            and entry.coordinator_epoch > marker.coordinator_epoch
            and header.producer_epoch >= entry.producer_epoch
        ):
            raise TransactionCoordinatorFenced(
                f"invalid coordinator epoch for producer {header.producer_id}: "
                f"{marker.coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)"
            )
        epoch = header.producer_epoch
        if epoch == entry.producer_epoch and not header.is_control_batch:
            duplicate = entry.find_duplicate_batch(header)
            if duplicate is not None:
                return duplicate
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpoch(
                f"epoch of producer {header.producer_id} at offset {header.base_offset} is "
                f"{epoch}, which is smaller than the last seen epoch {entry.producer_epoch}"
            )
        if header.is_control_batch:
            return None
        if (
            not header.is_transactional
            and entry.current_txn_first_offset is not None
            and epoch == entry.producer_epoch
        ):
            raise InvalidTxnState(
                f"expected a transactional write from producer {header.producer_id} at "
                f"offset {header.base_offset}: its transaction from offset "
                f"{entry.current_txn_first_offset} is open"
            )
        first_seq = header.base_sequence
        if epoch != entry.producer_epoch:
            # A bumped epoch must start again at sequence 0 (unless the old epoch is unknown).
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceNumber(
                    f"invalid sequence number for new epoch of producer {header.producer_id}: "
                    f"{epoch} (request epoch), {first_seq} (seq. number), "
                    f"{entry.producer_epoch} (current producer epoch)"
                )
        elif entry.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(
            entry.last_seq, first_seq
        ):
            raise OutOfOrderSequenceNumber(
                f"out of order sequence number for producer {header.producer_id}: "
                f"{first_seq} (incoming seq. number), {entry.last_seq} (current end sequence "
                f"number)"
            )
        return None

    def update(
        self,
        header: RecordBatchHeader,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        marker: EndTransactionMarker | None = None,
    ) -> CompletedTxn | None:
        """Record an appended batch at ``[first_offset, last_offset]`` with max ``timestamp``.

        Also moves :attr:`map_end_offset` up to ``last_offset + 1``. A no-op for batches
        without a producer id. A transactional data batch opens the producer's transaction
        when none is open. A control batch (``marker``: its COMMIT/ABORT, None for another
        control type) only updates the epoch and the coordinator epoch and ends the open
        transaction: the :class:`CompletedTxn` comes back (None when none was open). The
        caller then asks :meth:`last_stable_offset` for the ``.txnindex`` entry of an abort.
        """
        if header.producer_id == NO_PRODUCER_ID:
            return None
        pid = header.producer_id
        entry = self._producers.get(pid)
        if entry is None:
            entry = ProducerStateEntry(pid)
            self._producers[pid] = entry
        completed: CompletedTxn | None = None
        if header.is_control_batch:
            entry.maybe_update_producer_epoch(header.producer_epoch)
            entry.last_timestamp = timestamp
            if marker is not None:
                first = entry.current_txn_first_offset
                if first is not None:
                    completed = CompletedTxn(pid, first, last_offset, marker.is_abort)
                    if self._ongoing_txns.get(first) == pid:
                        del self._ongoing_txns[first]
                    self._unreplicated_txns[first] = (pid, last_offset)
                    self._update_first_unstable_offset()
                entry.current_txn_first_offset = None
                entry.coordinator_epoch = marker.coordinator_epoch
        else:
            entry.add_batch(
                header.producer_epoch,
                BatchMetadata(
                    header.base_sequence, header.last_sequence, first_offset, last_offset, timestamp
                ),
            )
            if header.is_transactional and entry.current_txn_first_offset is None:
                entry.current_txn_first_offset = first_offset
                self._ongoing_txns[first_offset] = pid
                self._update_first_unstable_offset()
        if last_offset + 1 > self._last_map_offset:
            self._last_map_offset = last_offset + 1
        return completed

    # ------------------------------------------------------------------ transactions

    def _update_first_unstable_offset(self) -> None:
        # Both maps are in offset order (appends come in offset order; a reload rebuilds
        # them in order), so their first keys are their minimums.
        ongoing = next(iter(self._ongoing_txns), None)
        unreplicated = min(self._unreplicated_txns, default=None)
        if ongoing is None:
            self._first_unstable_offset = unreplicated
        elif unreplicated is None:
            self._first_unstable_offset = ongoing
        else:
            self._first_unstable_offset = min(ongoing, unreplicated)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest ongoing or not yet replicated transaction; None
        when there is none. A plain attribute read: safe from any thread."""
        return self._first_unstable_offset

    @property
    def ongoing_txns(self) -> Mapping[int, int]:
        """First offset -> producer id of every open transaction, in offset order."""
        return types.MappingProxyType(self._ongoing_txns)

    def has_unreplicated_txns(self) -> bool:
        return bool(self._unreplicated_txns)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The last stable offset right after ``completed`` (Kafka's ``lastStableOffset``):
        the first offset of the earliest transaction still open, else the offset after the
        marker. Stored in the ``.txnindex`` entry of an abort."""
        for first, pid in self._ongoing_txns.items():
            if pid != completed.producer_id:
                return first
        return completed.last_offset + 1

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below ``high_watermark``."""
        if not self._unreplicated_txns:
            return
        done = [f for f, (_, last) in self._unreplicated_txns.items() if last < high_watermark]
        if done:
            for first in done:
                del self._unreplicated_txns[first]
            self._update_first_unstable_offset()

    def _reset_txns(self) -> None:
        self._ongoing_txns.clear()
        self._unreplicated_txns.clear()
        self._first_unstable_offset = None

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self._producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> None:
        """Forget producers idle for ``producer_id_expiration_ms`` (by their last timestamp)."""
        expired = [pid for pid, e in self._producers.items() if self._is_expired(now_ms, e)]
        for pid in expired:
            del self._producers[pid]

    # ------------------------------------------------------------------ snapshots

    def _list_snapshots(self) -> dict[int, Path]:
        try:
            paths = [p for p in self._log_dir.iterdir() if is_snapshot_file(p) and p.is_file()]
        except FileNotFoundError:
            return {}
        return {offset_from_file_name(p.name): p for p in paths}

    def take_snapshot(self, next_offset: int | None = None) -> Path | None:
        """Write ``<map_end_offset>.snapshot`` unless a snapshot at that offset exists.

        ``next_offset`` first moves :attr:`map_end_offset` there -- on roll, pass the new
        segment's base offset so the snapshot lines up with the segment boundary. Returns the
        file written, or None when the state has not advanced since the last snapshot.

        Raises:
            OSError: the snapshot could not be written.
        """
        if next_offset is not None:
            self._last_map_offset = next_offset
        if self._last_map_offset <= self._last_snap_offset:
            return None
        path = producer_snapshot_file(self._log_dir, self._last_map_offset)
        write_snapshot(path, self._producers.values())
        with self._snapshot_lock:
            self._snapshots[self._last_map_offset] = path
        self._last_snap_offset = self._last_map_offset
        log.debug(
            "wrote producer snapshot at offset %d with %d producer ids",
            self._last_map_offset,
            len(self._producers),
        )
        return path

    def latest_snapshot_offset(self) -> int | None:
        """Offset of the newest snapshot file, or None."""
        with self._snapshot_lock:
            return max(self._snapshots) if self._snapshots else None

    def oldest_snapshot_offset(self) -> int | None:
        """Offset of the oldest snapshot file, or None."""
        with self._snapshot_lock:
            return min(self._snapshots) if self._snapshots else None

    def snapshot_file_for(self, offset: int) -> Path | None:
        """The snapshot file at exactly ``offset`` (Kafka's ``fetchSnapshot``), or None."""
        with self._snapshot_lock:
            return self._snapshots.get(offset)

    def snapshot_offsets(self) -> list[int]:
        """Offsets of all snapshot files, ascending."""
        with self._snapshot_lock:
            return sorted(self._snapshots)

    def _remove_and_delete_snapshot(self, offset: int) -> None:
        with self._snapshot_lock:
            path = self._snapshots.pop(offset, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def remove_and_mark_snapshot_for_deletion(self, offset: int) -> Path | None:
        """Forget the snapshot at ``offset`` and rename it to ``*.snapshot.deleted``.

        Returns the new path, or None when there was no such snapshot (or it vanished).
        """
        with self._snapshot_lock:
            path = self._snapshots.pop(offset, None)
        if path is None:
            return None
        target = path.with_name(path.name + DELETED_FILE_SUFFIX)
        try:
            path.rename(target)
        except FileNotFoundError:
            return None
        return target

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete every snapshot at an offset below ``offset``."""
        for snapshot_offset in self.snapshot_offsets():
            if snapshot_offset < offset:
                self._remove_and_delete_snapshot(snapshot_offset)

    def delete_snapshots_after(self, offset: int) -> None:
        """Delete every snapshot at an offset above ``offset``."""
        for snapshot_offset in self.snapshot_offsets():
            if snapshot_offset > offset:
                self._remove_and_delete_snapshot(snapshot_offset)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots that match no segment, except the newest stray one when it is
        above every segment (the snapshot written by a clean shutdown at the log end)."""
        base_offsets = set(segment_base_offsets)
        with self._snapshot_lock:
            self._snapshots = self._list_snapshots()
        latest_stray: int | None = None
        for offset in self.snapshot_offsets():
            if offset in base_offsets:
                continue
            if latest_stray is not None:
                self._remove_and_delete_snapshot(latest_stray)
            latest_stray = offset
        if latest_stray is not None and base_offsets and latest_stray < max(base_offsets):
            self._remove_and_delete_snapshot(latest_stray)

    # ------------------------------------------------------------------ truncation and reload

    def truncate_and_reload(
        self, log_start_offset: int, log_end_offset: int, current_time_ms: int
    ) -> None:
        """Rebuild the map for a log now spanning ``[log_start_offset, log_end_offset)``.

        Deletes snapshots above ``log_end_offset`` and at or below ``log_start_offset`` (as
        Kafka does). If the map does not already end at ``log_end_offset``, it is cleared and
        reloaded from the newest remaining snapshot -- a corrupt one is deleted and the next
        older one tried -- and :attr:`map_end_offset` becomes that snapshot's offset (or
        ``log_start_offset`` without one). The caller then replays the log's batches from
        :attr:`map_end_offset` with :meth:`update`. Producers expired at
        ``current_time_ms`` are not loaded.

        Raises:
            OSError: a snapshot could not be read or deleted.
        """
        for offset in self.snapshot_offsets():
            if offset > log_end_offset or offset <= log_start_offset:
                self._remove_and_delete_snapshot(offset)
        if log_end_offset != self._last_map_offset:
            self._producers.clear()
            self._reset_txns()
            self._load_from_snapshot(log_start_offset, current_time_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _load_from_snapshot(self, log_start_offset: int, current_time_ms: int) -> None:
        while True:
            offset = self.latest_snapshot_offset()
            if offset is None:
                self._last_snap_offset = log_start_offset
                self._last_map_offset = log_start_offset
                return
            path = self.snapshot_file_for(offset) or producer_snapshot_file(self._log_dir, offset)
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, FileNotFoundError) as e:
                log.warning("failed to load producer snapshot from %s: %s", path, e)
                self._remove_and_delete_snapshot(offset)
                continue
            for entry in entries:
                if not self._is_expired(current_time_ms, entry):
                    self.load_producer_entry(entry)
            self._last_snap_offset = offset
            self._last_map_offset = offset
            return

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Bring :attr:`map_end_offset` up to a raised log start offset."""
        if self._last_map_offset < log_start_offset:
            self._last_map_offset = log_start_offset
        gone = [f for f, (_, last) in self._unreplicated_txns.items() if last < log_start_offset]
        for first in gone:
            del self._unreplicated_txns[first]
        self._update_first_unstable_offset()
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = latest if latest is not None else log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer, delete every snapshot, and start the map at ``offset``."""
        self._producers.clear()
        self._reset_txns()
        for snapshot_offset in self.snapshot_offsets():
            self._remove_and_delete_snapshot(snapshot_offset)
        self._last_snap_offset = 0
        self._last_map_offset = offset

    def update_parent_dir(self, parent_dir: Path) -> None:
        """Follow a rename of the partition directory."""
        self._log_dir = Path(parent_dir)
        with self._snapshot_lock:
            self._snapshots = {o: self._log_dir / p.name for o, p in self._snapshots.items()}

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager(log_dir={str(self._log_dir)!r}, "
            f"producers={len(self._producers)}, map_end_offset={self._last_map_offset})"
        )
