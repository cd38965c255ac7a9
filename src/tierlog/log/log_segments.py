"""Kafka's ``LogSegments``: the segments of one log, sorted by base offset.

Copy-on-write, as the seed describes: the collection is an immutable snapshot -- a tuple of
segments and the list of their base offsets for ``bisect`` -- replaced by one attribute
assignment on every add or remove. A reader takes the snapshot once and binary-searches it
while deletes and rolls proceed; it never blocks and never sees a half-updated list.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

from tierlog.log.log_segment import LogSegment

__all__ = ["LogSegments", "SegmentsSnapshot"]


class SegmentsSnapshot:
    """An immutable, sorted view of the segments at one moment."""

    __slots__ = ("base_offsets", "segments")

    def __init__(self, segments: tuple[LogSegment, ...]) -> None:
        self.segments = segments
        self.base_offsets = [s.base_offset for s in segments]

    def __len__(self) -> int:
        return len(self.segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self.segments)

    def floor_index(self, offset: int) -> int:
        """Index of the segment with the largest base offset <= ``offset``, or -1."""
        return bisect.bisect_right(self.base_offsets, offset) - 1

    def floor_segment(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self.base_offsets, offset) - 1
        return self.segments[i] if i >= 0 else None

    def higher_segment(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self.base_offsets, offset)
        return self.segments[i] if i < len(self.segments) else None

    def lower_segment(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_left(self.base_offsets, offset) - 1
        return self.segments[i] if i >= 0 else None

    def get(self, base_offset: int) -> LogSegment | None:
        i = bisect.bisect_left(self.base_offsets, base_offset)
        if i < len(self.segments) and self.base_offsets[i] == base_offset:
            return self.segments[i]
        return None

    def values_between(self, from_offset: int, to_offset: int) -> tuple[LogSegment, ...]:
        """Segments that may hold offsets in ``[from_offset, to_offset)``: the floor segment
        of ``from_offset`` (or the first) up to the last base offset below ``to_offset``."""
        start = max(0, bisect.bisect_right(self.base_offsets, from_offset) - 1)
        end = bisect.bisect_left(self.base_offsets, to_offset)
        return self.segments[start:end]


_EMPTY = SegmentsSnapshot(())


class LogSegments:
    """A sorted collection of segments keyed by base offset (Kafka's ``LogSegments``).

    Thread-safety: readers are lock-free on an immutable :class:`SegmentsSnapshot`; writers
    (add, remove) are serialised by an internal lock and publish a new snapshot atomically.
    ``add`` of an existing base offset replaces that segment.
    """

    def __init__(self) -> None:
        self._snapshot = _EMPTY
        self._write_lock = threading.Lock()

    # ------------------------------------------------------------------ updates

    def add(self, segment: LogSegment) -> LogSegment:
        """Insert ``segment`` (replacing one with the same base offset); returns it."""
        with self._write_lock:
            snap = self._snapshot
            segments = list(snap.segments)
            i = bisect.bisect_left(snap.base_offsets, segment.base_offset)
            if i < len(segments) and snap.base_offsets[i] == segment.base_offset:
                segments[i] = segment
            else:
                segments.insert(i, segment)
            self._snapshot = SegmentsSnapshot(tuple(segments))
        return segment

    def remove(self, base_offset: int) -> LogSegment | None:
        """Remove and return the segment at ``base_offset`` (None when absent)."""
        with self._write_lock:
            snap = self._snapshot
            i = bisect.bisect_left(snap.base_offsets, base_offset)
            if i >= len(snap.segments) or snap.base_offsets[i] != base_offset:
                return None
            removed = snap.segments[i]
            self._snapshot = SegmentsSnapshot(snap.segments[:i] + snap.segments[i + 1 :])
        return removed

    def remove_all(self, base_offsets: list[int] | set[int]) -> list[LogSegment]:
        """Remove several segments at once (one new snapshot); returns those removed."""
        wanted = set(base_offsets)
        with self._write_lock:
            snap = self._snapshot
            kept = tuple(s for s in snap.segments if s.base_offset not in wanted)
            removed = [s for s in snap.segments if s.base_offset in wanted]
            self._snapshot = SegmentsSnapshot(kept)
        return removed

    def replace(self, new_segments: list[LogSegment], old_base_offsets: list[int]) -> None:
        """Remove the segments at ``old_base_offsets`` and add ``new_segments`` (which may
        reuse those base offsets) in one new snapshot: readers see all old or all new."""
        wanted = set(old_base_offsets)
        with self._write_lock:
            kept = [s for s in self._snapshot.segments if s.base_offset not in wanted]
            new_offsets = {s.base_offset for s in new_segments}
            kept = [s for s in kept if s.base_offset not in new_offsets]
            kept.extend(new_segments)
            kept.sort(key=lambda s: s.base_offset)
            self._snapshot = SegmentsSnapshot(tuple(kept))

    def clear(self) -> list[LogSegment]:
        """Remove every segment; returns them."""
        with self._write_lock:
            removed = list(self._snapshot.segments)
            self._snapshot = _EMPTY
        return removed

    # ------------------------------------------------------------------ queries

    def snapshot(self) -> SegmentsSnapshot:
        """The current immutable view."""
        return self._snapshot

    def values(self) -> tuple[LogSegment, ...]:
        """All segments, oldest first (a snapshot)."""
        return self._snapshot.segments

    def values_between(self, from_offset: int, to_offset: int) -> tuple[LogSegment, ...]:
        return self._snapshot.values_between(from_offset, to_offset)

    def base_offsets(self) -> list[int]:
        return list(self._snapshot.base_offsets)

    def get(self, base_offset: int) -> LogSegment | None:
        return self._snapshot.get(base_offset)

    def contains(self, base_offset: int) -> bool:
        return self._snapshot.get(base_offset) is not None

    def floor_segment(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset <= ``offset``."""
        return self._snapshot.floor_segment(offset)

    def higher_segment(self, offset: int) -> LogSegment | None:
        """The segment with the smallest base offset > ``offset``."""
        return self._snapshot.higher_segment(offset)

    def lower_segment(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset < ``offset``."""
        return self._snapshot.lower_segment(offset)

    @property
    def first_segment(self) -> LogSegment | None:
        segments = self._snapshot.segments
        return segments[0] if segments else None

    @property
    def last_segment(self) -> LogSegment | None:
        segments = self._snapshot.segments
        return segments[-1] if segments else None

    @property
    def active_segment(self) -> LogSegment:
        """The last segment: the one appends go to.

        Raises:
            LookupError: there are no segments.
        """
        segments = self._snapshot.segments
        if not segments:
            raise LookupError("no segments")
        return segments[-1]

    @property
    def first_segment_base_offset(self) -> int | None:
        segments = self._snapshot.segments
        return segments[0].base_offset if segments else None

    @property
    def number_of_segments(self) -> int:
        return len(self._snapshot.segments)

    def is_empty(self) -> bool:
        return not self._snapshot.segments

    def size_in_bytes(self) -> int:
        """Total bytes of record batches over all segments."""
        return sum(s.size for s in self._snapshot.segments)

    def __len__(self) -> int:
        return len(self._snapshot.segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._snapshot.segments)

    def close(self) -> None:
        """Close every segment."""
        for segment in self._snapshot.segments:
            segment.close()

    def __repr__(self) -> str:
        return f"LogSegments({list(self._snapshot.base_offsets)})"
