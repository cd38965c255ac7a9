"""A RemoteStorageManager test double that records every call (Kafka's LocalTieredStorage events).

Wrap any RemoteStorageManager; each call is recorded as a :class:`RemoteStorageEvent`, so
tests assert exactly which remote operations happened (e.g. "this cold read did one
FETCH_INDEXES and one FETCH_SEGMENT"). Failures can be injected per event type.
Thread-safe.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Collection
from dataclasses import dataclass

from tierlog.errors import RemoteStorageError
from tierlog.tiered.remote_log_segment_metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from tierlog.tiered.storage.remote_storage_manager import (
    ALL_INDEX_TYPES,
    IndexType,
    LogSegmentData,
    RemoteStorageManager,
)


class EventType(enum.Enum):
    """Kafka's ``LocalTieredStorageEvent.EventType`` names, plus FETCH_INDEXES (seed 001)."""

    COPY_SEGMENT = "COPY_SEGMENT"
    FETCH_SEGMENT = "FETCH_SEGMENT"
    FETCH_INDEXES = "FETCH_INDEXES"
    FETCH_OFFSET_INDEX = "FETCH_OFFSET_INDEX"
    FETCH_TIME_INDEX = "FETCH_TIME_INDEX"
    FETCH_TRANSACTION_INDEX = "FETCH_TRANSACTION_INDEX"
    FETCH_LEADER_EPOCH_CHECKPOINT = "FETCH_LEADER_EPOCH_CHECKPOINT"
    FETCH_PRODUCER_SNAPSHOT = "FETCH_PRODUCER_SNAPSHOT"
    DELETE_SEGMENT = "DELETE_SEGMENT"


_FETCH_INDEX_EVENT = {
    IndexType.OFFSET: EventType.FETCH_OFFSET_INDEX,
    IndexType.TIMESTAMP: EventType.FETCH_TIME_INDEX,
    IndexType.TRANSACTION: EventType.FETCH_TRANSACTION_INDEX,
    IndexType.LEADER_EPOCH: EventType.FETCH_LEADER_EPOCH_CHECKPOINT,
    IndexType.PRODUCER_SNAPSHOT: EventType.FETCH_PRODUCER_SNAPSHOT,
}


@dataclass(frozen=True, slots=True)
class RemoteStorageEvent:
    """One call: what, on which segment, with which arguments, and how it ended."""

    type: EventType
    segment_id: RemoteLogSegmentId
    start_position: int | None = None
    end_position: int | None = None
    index_types: frozenset[IndexType] | None = None
    error: BaseException | None = None


class RecordingRemoteStorageManager(RemoteStorageManager):
    """Delegates to ``delegate`` and records each call in :attr:`events`."""

    def __init__(self, delegate: RemoteStorageManager) -> None:
        self.delegate = delegate
        self._lock = threading.Lock()
        self.events: list[RemoteStorageEvent] = []
        self._failures: dict[EventType, list[BaseException]] = {}

    # ------------------------------------------------------------------ test API

    def fail(
        self, event_type: EventType, error: BaseException | None = None, times: int = 1
    ) -> None:
        """Make the next ``times`` calls of ``event_type`` raise ``error`` (default: a
        RemoteStorageError) before reaching the delegate."""
        err = (
            error
            if error is not None
            else RemoteStorageError(f"injected {event_type.name} failure")
        )
        with self._lock:
            self._failures.setdefault(event_type, []).extend([err] * times)

    def events_of(self, event_type: EventType) -> list[RemoteStorageEvent]:
        with self._lock:
            return [e for e in self.events if e.type is event_type]

    def clear(self) -> None:
        with self._lock:
            self.events.clear()
            self._failures.clear()

    def _record(self, event: RemoteStorageEvent) -> None:
        with self._lock:
            pending = self._failures.get(event.type)
            injected = pending.pop(0) if pending else None
            if injected is not None:
                event = RemoteStorageEvent(
                    event.type, event.segment_id, event.start_position, event.end_position,
                    event.index_types, injected,
                )  # fmt: skip
            self.events.append(event)
        if injected is not None:
            raise injected

    def _record_error(self, event: RemoteStorageEvent, error: BaseException) -> None:
        with self._lock:
            for i in range(len(self.events) - 1, -1, -1):
                if self.events[i] is event:
                    self.events[i] = RemoteStorageEvent(
                        event.type, event.segment_id, event.start_position, event.end_position,
                        event.index_types, error,
                    )  # fmt: skip
                    break

    # ------------------------------------------------------------------ RSM

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        ev = RemoteStorageEvent(EventType.COPY_SEGMENT, metadata.remote_log_segment_id)
        self._record(ev)
        try:
            return self.delegate.copy_log_segment_data(metadata, segment_data)
        except BaseException as e:
            self._record_error(ev, e)
            raise

    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> bytes:
        ev = RemoteStorageEvent(
            EventType.FETCH_SEGMENT, metadata.remote_log_segment_id, start_position, end_position
        )
        self._record(ev)
        try:
            return self.delegate.fetch_log_segment(metadata, start_position, end_position)
        except BaseException as e:
            self._record_error(ev, e)
            raise

    def fetch_indexes(
        self,
        metadata: RemoteLogSegmentMetadata,
        index_types: Collection[IndexType] = ALL_INDEX_TYPES,
    ) -> dict[IndexType, bytes]:
        ev = RemoteStorageEvent(
            EventType.FETCH_INDEXES,
            metadata.remote_log_segment_id,
            index_types=frozenset(index_types),
        )
        self._record(ev)
        try:
            return self.delegate.fetch_indexes(metadata, index_types)
        except BaseException as e:
            self._record_error(ev, e)
            raise

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        ev = RemoteStorageEvent(
            _FETCH_INDEX_EVENT[index_type],
            metadata.remote_log_segment_id,
            index_types=frozenset((index_type,)),
        )
        self._record(ev)
        try:
            return self.delegate.fetch_index(metadata, index_type)
        except BaseException as e:
            self._record_error(ev, e)
            raise

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        ev = RemoteStorageEvent(EventType.DELETE_SEGMENT, metadata.remote_log_segment_id)
        self._record(ev)
        try:
            self.delegate.delete_log_segment_data(metadata)
        except BaseException as e:
            self._record_error(ev, e)
            raise

    def close(self) -> None:
        self.delegate.close()


__all__ = ["EventType", "RecordingRemoteStorageManager", "RemoteStorageEvent"]
