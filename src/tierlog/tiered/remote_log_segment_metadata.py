"""Value types of the remote log metadata (Kafka's storage-api ``remote.storage`` package).

All are frozen, slotted dataclasses: immutable, thread-safe to share, compared by value.
A segment's metadata changes only by building a new instance with
:meth:`RemoteLogSegmentMetadata.create_with_updates`.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from tierlog.tiered.remote_log_segment_state import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
)


def kafka_uuid_str(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def kafka_uuid_from_str(s: str) -> uuid.UUID:
    """Inverse of :func:`kafka_uuid_str`. Raises ValueError on a malformed string."""
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    return uuid.UUID(bytes=raw)


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition of a topic, with the topic's id (Kafka's ``TopicIdPartition``)."""

    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{kafka_uuid_str(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """Universally unique id of one upload attempt of a segment (a new UUID per attempt)."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    def __str__(self) -> str:
        return f"{self.topic_id_partition}:{kafka_uuid_str(self.id)}"


def _sorted_epochs(epochs: Mapping[int, int]) -> dict[int, int]:
    return {e: epochs[e] for e in sorted(epochs)}


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """Metadata of a remote log segment (Kafka's ``RemoteLogSegmentMetadata``).

    ``end_offset`` is inclusive. ``segment_leader_epochs`` maps each leader epoch present in the
    segment to the first offset of that epoch in the segment, sorted by epoch; it is never
    empty. ``custom_metadata`` is what the RemoteStorageManager returned from the copy.

    Raises:
        ValueError: negative start offset, end before start, or no leader epochs.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_idx_empty: bool = False

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(f"start offset {self.start_offset} of a remote segment is negative")
        if self.end_offset < self.start_offset:
            raise ValueError(
                f"end offset {self.end_offset} is below start offset {self.start_offset}"
            )
        if not self.segment_leader_epochs:
            raise ValueError("segment_leader_epochs can not be empty")
        object.__setattr__(
            self, "segment_leader_epochs", _sorted_epochs(self.segment_leader_epochs)
        )
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))

    def __hash__(self) -> int:
        return hash((self.remote_log_segment_id, self.state, self.event_timestamp_ms))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def create_with_updates(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """A copy with the update's broker id, event time, custom metadata and state.

        Raises:
            ValueError: the update is for another segment.
        """
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(
                f"update for {update.remote_log_segment_id} applied to {self.remote_log_segment_id}"
            )
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=self.remote_log_segment_id,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            segment_size_in_bytes=self.segment_size_in_bytes,
            segment_leader_epochs=self.segment_leader_epochs,
            custom_metadata=update.custom_metadata,
            state=update.state,
            txn_idx_empty=self.txn_idx_empty,
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of a remote segment (Kafka's ``RemoteLogSegmentMetadataUpdate``)."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    """A deletion state change of a whole remote partition (Kafka's class of that name)."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", RemotePartitionDeleteState(self.state))


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """A segment's metadata without its topic partition (Kafka's snapshot record, apiKey 3).

    Kafka 3.6-3.7 wrote these into its per-partition ``remote_log_snapshot`` file, where the
    partition is implied by the file.
    """

    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int] = field(default_factory=dict)
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_idx_empty: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "segment_leader_epochs", _sorted_epochs(self.segment_leader_epochs)
        )
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))

    def __hash__(self) -> int:
        return hash((self.segment_id, self.state, self.event_timestamp_ms))

    @classmethod
    def create(cls, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        return cls(
            segment_id=metadata.remote_log_segment_id.id,
            start_offset=metadata.start_offset,
            end_offset=metadata.end_offset,
            max_timestamp_ms=metadata.max_timestamp_ms,
            broker_id=metadata.broker_id,
            event_timestamp_ms=metadata.event_timestamp_ms,
            segment_size_in_bytes=metadata.segment_size_in_bytes,
            segment_leader_epochs=metadata.segment_leader_epochs,
            custom_metadata=metadata.custom_metadata,
            state=metadata.state,
            txn_idx_empty=metadata.txn_idx_empty,
        )

    def to_metadata(self, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(topic_id_partition, self.segment_id),
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=self.broker_id,
            event_timestamp_ms=self.event_timestamp_ms,
            segment_size_in_bytes=self.segment_size_in_bytes,
            segment_leader_epochs=self.segment_leader_epochs,
            custom_metadata=self.custom_metadata,
            state=self.state,
            txn_idx_empty=self.txn_idx_empty,
        )


RemoteLogMetadata = (
    RemoteLogSegmentMetadata
    | RemoteLogSegmentMetadataUpdate
    | RemotePartitionDeleteMetadata
    | RemoteLogSegmentMetadataSnapshot
)

__all__ = [
    "TopicIdPartition",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemotePartitionDeleteMetadata",
    "RemoteLogSegmentMetadataSnapshot",
    "RemoteLogMetadata",
    "kafka_uuid_str",
    "kafka_uuid_from_str",
]
