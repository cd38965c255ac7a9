"""Kafka's ``LocalLog``: the segments of one partition in its directory.

Directory ``<log.dir>/<topic>-<partition>/``::

    00000000000000000000.log / .index / .timeindex     segments (see log_segment)
    00000000000000368769.log / .index / .timeindex
    00000000000000368769.snapshot                      producer state at a segment roll
    leader-epoch-checkpoint                            epoch -> start offset
    partition.metadata                                 topic id

What is local to the directory lives here: the segment list (copy-on-write, see
:mod:`.log_segments`), the log end offset with the position of its batch, the recovery point
(everything below it is fsynced) and the background flush of rolled segments, and the swap of
cleaned segments (:meth:`LocalLog.replace_segments`). Offsets a consumer sees (log start,
high watermark), the append path, producer state and leader epochs are
:class:`~tierlog.log.unified_log.UnifiedLog`'s, which extends this class.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from tierlog.errors import LogCleaningAbortedError
from tierlog.log import log_file_utils as lfu
from tierlog.log.log_config import LogConfig
from tierlog.log.log_segment import LogSegment
from tierlog.log.log_segments import LogSegments

__all__ = ["LocalLog", "LogOffsetMetadata", "parse_topic_partition"]

log = logging.getLogger(__name__)


class LogOffsetMetadata(NamedTuple):
    """An offset and where its batch starts: segment base offset and byte position."""

    offset: int
    segment_base_offset: int
    position: int


def parse_topic_partition(dir: Path) -> tuple[str, int]:
    """``(topic, partition)`` from a directory named ``<topic>-<partition>`` (the topic may
    contain '-'); also accepts Kafka's ``<topic>-<partition>.<id>-delete`` / ``-future``.

    Raises:
        ValueError: the name does not have that form.
    """
    name = Path(dir).name
    if name.endswith((lfu.DELETE_DIR_SUFFIX, lfu.FUTURE_DIR_SUFFIX)) and "." in name:
        name = name[: name.rindex(".")]
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isdigit():
        raise ValueError(f"directory {name!r} is not named <topic>-<partition>")
    return topic, int(partition)


def _safe_parse(dir: Path) -> tuple[str, int]:
    try:
        return parse_topic_partition(dir)
    except ValueError:
        return Path(dir).name, -1


class LocalLog:
    """The local segments of one log (Kafka's ``LocalLog``).

    Thread-safety: as Kafka's, it relies on the lock of the log that extends it
    (:class:`~tierlog.log.unified_log.UnifiedLog`): segment changes happen under ``_lock``;
    :meth:`flush` has its own lock; readers take none (copy-on-write segment list).
    """

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        segments: LogSegments,
        *,
        recovery_point: int,
        log_end_offset: int,
        time_ms: Callable[[], int],
    ) -> None:
        self._dir = Path(dir)
        self._topic, self._partition = _safe_parse(self._dir)
        self._config = config
        self._segments = segments
        self._time_ms = time_ms
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._closed = False
        active = segments.active_segment
        self._leo = LogOffsetMetadata(log_end_offset, active.base_offset, active.size)
        self._recovery_point = recovery_point
        self.last_flush_time_ms = time_ms()
        #: Where the high watermark's batch starts (a cache of the read path).
        self._hw_metadata: LogOffsetMetadata | None = None

        # Background flush of rolled segments (Kafka schedules "flush-log" on roll).
        self._flusher: threading.Thread | None = None
        self._flusher_lock = threading.Lock()
        self._pending_flush_offset = 0

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def segments(self) -> LogSegments:
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active_segment

    @property
    def log_end_offset(self) -> int:
        return self._leo.offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._leo

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self._leo.offset - self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return self._segments.size_in_bytes()

    @property
    def number_of_segments(self) -> int:
        return self._segments.number_of_segments

    @property
    def closed(self) -> bool:
        return self._closed

    def _schedule_flush(self, offset: int) -> None:
        """Flush everything below ``offset`` in the background (coalescing requests)."""
        with self._flusher_lock:
            self._pending_flush_offset = max(self._pending_flush_offset, offset)
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._run_flusher, name=f"flush-{self._dir.name}", daemon=True
                )
                self._flusher.start()

    def _run_flusher(self) -> None:
        while True:
            with self._flusher_lock:
                # A truncation may have moved the log end below a pending target: flush()
                # caps at the log end, so clamp here or the loop would never finish.
                target = min(self._pending_flush_offset, self._leo.offset)
                self._pending_flush_offset = target
                if target <= self._recovery_point or self._closed:
                    self._flusher = None
                    return
            try:
                self.flush(target)
            except (OSError, ValueError) as e:
                log.error("%s: background flush to %d failed: %s", self, target, e)
                with self._flusher_lock:
                    self._flusher = None
                return

    def await_background_flush(self, timeout: float | None = None) -> None:
        """Wait for the background flush of rolled segments (tests, shutdown)."""
        flusher = self._flusher
        if flusher is not None:
            flusher.join(timeout)

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, ``offset``) (default: the
        log end offset) and advance the recovery point to ``offset``."""
        with self._flush_lock:
            target = self._leo.offset if offset is None else min(offset, self._leo.offset)
            if target <= self._recovery_point or self._closed:
                return
            for segment in self._segments.values_between(self._recovery_point, target):
                try:
                    segment.flush()
                except FileNotFoundError:
                    if self._segments.get(segment.base_offset) is segment:
                        raise
                    # Replaced meanwhile (the cleaner's swap, retention): its files are
                    # gone, and whoever wrote the replacement flushed it.
            self._recovery_point = target
            self.last_flush_time_ms = self._time_ms()

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush; True when it flushed."""
        now = self._time_ms() if now_ms is None else now_ms
        if now - self.last_flush_time_ms >= self._config.flush_ms and self.unflushed_messages > 0:
            self.flush()
            return True
        return False

    def _remove_and_delete_segments(self, segments: list[LogSegment]) -> None:
        # Out of the copy-on-write list first: new readers cannot find them any more, and
        # readers holding an older snapshot keep reading the unlinked files.
        self._segments.remove_all([s.base_offset for s in segments])
        for segment in segments:
            segment.delete_if_exists()

    def non_active_log_segments_from(self, offset: int) -> tuple[LogSegment, ...]:
        """Segments from the one holding ``offset`` up to, not including, the active one."""
        snapshot = self._segments.snapshot()
        segments = snapshot.segments
        start = max(0, snapshot.floor_index(offset))
        return segments[start : len(segments) - 1]

    def replace_segments(
        self, new_segments: list[LogSegment], old_segments: list[LogSegment]
    ) -> None:
        """Swap cleaned segments in for the segments they were cleaned from (Kafka's
        ``replaceSegments``), crash-safe in Kafka's order:

        1. each new segment's files go from ``.cleaned`` to ``.swap`` (log file first): a
           ``.log.swap`` without ``.cleaned`` files at or below its offset is complete;
        2. the segment list is replaced in one copy-on-write step: readers see the old
           segments or the new ones, never a mix;
        3. the old segments' files are renamed to ``.deleted`` and deleted (readers holding
           them keep reading the unlinked files);
        4. ``.swap`` becomes the final name.

        A crash before 1 completes leaves ``.cleaned`` files that loading deletes (the log
        reads as before); a crash after leaves ``.swap`` files that loading completes (the log
        reads as after). See :mod:`tierlog.log.log_loader`.

        Raises:
            LogCleaningAbortedError: an old segment is no longer in the log (retention or a
                truncation removed it meanwhile) or the log is closed; nothing was renamed.
            OSError: a rename failed.
        """
        new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
        with self._lock:
            if self._closed:
                raise LogCleaningAbortedError(f"{self} is closed")
            for segment in old_segments:
                if self._segments.get(segment.base_offset) is not segment:
                    raise LogCleaningAbortedError(
                        f"segment {segment.base_offset} of {self} changed while it was cleaned"
                    )
            for segment in reversed(new_sorted):
                segment.change_file_suffixes(lfu.CLEANED_FILE_SUFFIX, lfu.SWAP_FILE_SUFFIX)
            lfu.fsync_dir(self._dir)
            self._segments.replace(new_sorted, [s.base_offset for s in old_segments])
            # Positions inside the old segments are gone with them.
            self._hw_metadata = None
            for segment in old_segments:
                segment.change_file_suffixes("", lfu.DELETED_FILE_SUFFIX)
            lfu.fsync_dir(self._dir)
            for segment in old_segments:
                segment.delete_if_exists()
            for segment in new_sorted:
                segment.change_file_suffixes(lfu.SWAP_FILE_SUFFIX, "")
            lfu.fsync_dir(self._dir)
