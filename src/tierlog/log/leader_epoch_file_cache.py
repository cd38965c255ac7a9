"""Kafka's leader epoch cache: which leader epoch wrote which range of offsets.

Each entry ``(epoch, start_offset)`` says the first offset written in ``epoch``; an epoch ends
where the next one starts (the last one at the log end offset). Entries are strictly
increasing in both epoch and start offset. Followers use :meth:`end_offset_for`
(OffsetsForLeaderEpoch) to find where their log diverges from the leader's; tiered storage
records each segment's epochs (:meth:`epochs_between`) and uploads the checkpoint.

Persisted in the partition's ``leader-epoch-checkpoint`` (see
:class:`~tierlog.log.checkpoint_file.LeaderEpochCheckpointFile`) after every change.
"""

from __future__ import annotations

import bisect
import logging
import threading

from tierlog.log.checkpoint_file import EpochEntry, LeaderEpochCheckpoint

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochFileCache",
]

#: OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

log = logging.getLogger(__name__)


def _truncate_from_start(entries: list[EpochEntry], start_offset: int) -> list[EpochEntry]:
    """Drop entries starting at or before ``start_offset`` but keep the last of them, moved up
    to start at ``start_offset``. Returns the removed entries (in place on ``entries``)."""
    removed: list[EpochEntry] = []
    while entries and entries[0].start_offset <= start_offset:
        removed.append(entries.pop(0))
    if removed:
        entries.insert(0, EpochEntry(removed[-1].epoch, start_offset))
    return removed


def _truncate_from_end(entries: list[EpochEntry], end_offset: int) -> list[EpochEntry]:
    """Drop entries starting at or after ``end_offset`` (none for a negative offset)."""
    removed: list[EpochEntry] = []
    if end_offset >= 0:
        while entries and entries[-1].start_offset >= end_offset:
            removed.append(entries.pop())
    return removed


class LeaderEpochFileCache:
    """The (epoch -> start offset) history of one partition replica.

    Thread-safe: every method takes an internal lock. Changes are written to the checkpoint
    synchronously before the method returns (Kafka flushes truncations asynchronously; a
    stale checkpoint after a crash is corrected by the truncations of log recovery either way).
    :meth:`assign` is idempotent for an epoch that is already the latest.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpoint) -> None:
        """Load the entries from ``checkpoint``, re-applying Kafka's monotonicity rules.

        Raises:
            CorruptCheckpointError: the checkpoint file is malformed.
        """
        self._checkpoint = checkpoint
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []  # sorted by epoch and by start offset
        for entry in checkpoint.read():
            self._assign(entry)

    @property
    def checkpoint(self) -> LeaderEpochCheckpoint:
        return self._checkpoint

    # ------------------------------------------------------------------ updates

    def _is_update_needed(self, entry: EpochEntry) -> bool:
        if not self._entries:
            return True
        latest = self._entries[-1]
        return entry.epoch != latest.epoch or entry.start_offset < latest.start_offset

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"received invalid partition leader epoch entry {entry}")
        if not self._is_update_needed(entry):
            return False
        # Remove entries that would break monotonicity: every entry with an epoch >= the new
        # one or a start offset >= the new one (scanning back from the latest).
        removed: list[EpochEntry] = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            log.warning(
                "new epoch entry %s caused truncation of conflicting entries %s; "
                "cache now contains %d entries",
                entry,
                removed,
                len(self._entries),
            )
        self._entries.append(entry)
        return True

    def assign(self, epoch: int, start_offset: int, *, durable: bool = True) -> None:
        """Record that ``epoch`` starts at ``start_offset`` and write the checkpoint (with
        ``durable=False`` without fsync: see :meth:`UnifiedLog.assign_epoch_start_offset`).

        Kafka's rules: nothing changes when ``epoch`` is already the latest epoch and
        ``start_offset`` is not smaller than its start (the common case: called for every
        appended batch). Otherwise every entry with an epoch >= ``epoch`` or a start offset
        >= ``start_offset`` is removed first, so the history stays monotonic -- a lower epoch
        therefore replaces the later ones (the log has been truncated back to it).

        Raises:
            ValueError: a negative epoch or start offset.
            OSError: the checkpoint could not be written.
        """
        with self._lock:
            if self._assign(EpochEntry(epoch, start_offset)):
                self._write(durable=durable)

    def assign_entries(self, entries: list[EpochEntry]) -> None:
        """Assign several entries in order with a single checkpoint write."""
        with self._lock:
            changed = False
            for entry in entries:
                changed = self._assign(entry) or changed
            if changed:
                self._write()

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries whose start offset is >= ``end_offset`` (log truncated to it).

        A negative ``end_offset`` (UNDEFINED_EPOCH_OFFSET) changes nothing.
        """
        with self._lock:
            if _truncate_from_end(self._entries, end_offset):
                self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget history before ``start_offset`` (the log start offset moved up to it).

        The latest entry starting at or before ``start_offset`` is kept, with its start
        moved up to ``start_offset``; earlier ones are removed. ``truncate_from_start(6)``
        keeps an entry at 6 unchanged.
        """
        with self._lock:
            if _truncate_from_start(self._entries, start_offset):
                self._write()

    def clear_and_flush(self) -> None:
        """Remove every entry and write the empty checkpoint."""
        with self._lock:
            self._entries.clear()
            self._write()

    def clear(self) -> None:
        """Remove every entry without writing the checkpoint."""
        with self._lock:
            self._entries.clear()

    def flush(self) -> None:
        """Write the current entries to the checkpoint."""
        with self._lock:
            self._write()

    def _write(self, *, durable: bool = True) -> None:
        self._checkpoint.write(list(self._entries), durable=durable)

    # ------------------------------------------------------------------ queries

    def non_empty(self) -> bool:
        with self._lock:
            return bool(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        """The entry of the latest epoch, or None when empty."""
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The latest epoch (the current leader's, on the leader), or None when empty."""
        entry = self.latest_entry
        return entry.epoch if entry is not None else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        """The oldest entry, or None when empty."""
        with self._lock:
            return self._entries[0] if self._entries else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        """The entry of exactly ``epoch``, if cached."""
        with self._lock:
            for entry in self._entries:
                if entry.epoch == epoch:
                    return entry
            return None

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The largest cached epoch below ``epoch`` (default: below the latest epoch)."""
        with self._lock:
            if epoch is None:
                if not self._entries:
                    return None
                epoch = self._entries[-1].epoch
            i = bisect.bisect_left(self._epochs(), epoch)
            return self._entries[i - 1].epoch if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest cached epoch above ``epoch``."""
        with self._lock:
            i = bisect.bisect_right(self._epochs(), epoch)
            return self._entries[i].epoch if i < len(self._entries) else None

    def _epochs(self) -> list[int]:
        return [e.epoch for e in self._entries]

    def epoch_entries(self) -> list[EpochEntry]:
        """A copy of all entries, oldest first."""
        with self._lock:
            return list(self._entries)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset``: the latest entry starting at or before it."""
        with self._lock:
            i = bisect.bisect_right([e.start_offset for e in self._entries], offset)
            return self._entries[i - 1].epoch if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: (epoch, end offset) for OffsetsForLeaderEpoch.

        The epoch returned is the largest cached epoch <= ``requested_epoch``; the end offset
        is the start offset of the first epoch after it, or ``log_end_offset`` when the latest
        epoch is requested. A requested epoch below every cached one returns
        (requested_epoch, start of the first epoch); UNDEFINED_EPOCH, an empty cache or an
        epoch above the latest returns ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``.
        """
        with self._lock:
            undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return undefined
            if self._entries[-1].epoch == requested_epoch:
                # The leader's current epoch: it ends at the log end offset. (A consumer
                # validating its position after a rebalance may ask for it.)
                return requested_epoch, log_end_offset
            epochs = self._epochs()
            higher = bisect.bisect_right(epochs, requested_epoch)
            if higher == len(epochs):
                # Larger than every known epoch.
                return undefined
            higher_start = self._entries[higher].start_offset
            if higher == 0:
                # Smaller than every known epoch: data of earlier epochs is gone; the follower
                # should replicate from the first known epoch's start.
                return requested_epoch, higher_start
            return self._entries[higher - 1].epoch, higher_start

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """The entries covering offsets ``[start_offset, end_offset)``, clipped to the range.

        The first entry's start is moved up to ``start_offset`` (when >= 0); entries starting
        at or after ``end_offset`` are dropped.
        """
        with self._lock:
            entries = list(self._entries)
        if start_offset >= 0:
            _truncate_from_start(entries, start_offset)
        _truncate_from_end(entries, end_offset)
        return entries

    def epochs_between(self, start_offset: int, end_offset: int) -> dict[int, int]:
        """``{epoch: start offset}`` for the epochs overlapping ``[start_offset, end_offset)``.

        Start offsets are clipped to ``start_offset`` -- the segment leader epochs of a remote
        segment's metadata (KIP-405).
        """
        return {
            e.epoch: e.start_offset for e in self.epoch_entries_in_range(start_offset, end_offset)
        }

    def __repr__(self) -> str:
        with self._lock:
            return f"LeaderEpochFileCache({self._entries!r})"
