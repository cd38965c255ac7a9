"""tierlog.tiered: KIP-405 tiered storage — remote log metadata and remote storage.

Metadata: the segment/partition state machines, the metadata value types, Kafka's metadata
record serde, the per-partition columnar cache and its file, the RemoteLogMetadataManager
implementations. Storage: see :mod:`tierlog.tiered.storage`.
"""

from tierlog.tiered.remote_log_metadata_cache import RemoteLogMetadataCache
from tierlog.tiered.remote_log_metadata_manager import (
    DEFAULT_METADATA_TOPIC_PARTITIONS,
    REMOTE_LOG_METADATA_TOPIC_NAME,
    InMemoryMetadataPublisher,
    InMemoryRemoteLogMetadataManager,
    MetadataPublisher,
    RemoteLogMetadataManager,
    TopicBasedRemoteLogMetadataManager,
    metadata_partition_for,
)
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
    kafka_uuid_from_str,
    kafka_uuid_str,
)
from tierlog.tiered.remote_log_segment_state import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    is_valid_partition_delete_transition,
    is_valid_transition,
)

__all__ = [
    # states
    "RemoteLogSegmentState",
    "RemotePartitionDeleteState",
    "is_valid_transition",
    "is_valid_partition_delete_transition",
    # values
    "TopicIdPartition",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemotePartitionDeleteMetadata",
    "RemoteLogSegmentMetadataSnapshot",
    "RemoteLogMetadata",
    "kafka_uuid_str",
    "kafka_uuid_from_str",
    # cache and managers
    "RemoteLogMetadataCache",
    "RemoteLogMetadataManager",
    "InMemoryRemoteLogMetadataManager",
    "TopicBasedRemoteLogMetadataManager",
    "MetadataPublisher",
    "InMemoryMetadataPublisher",
    "metadata_partition_for",
    "REMOTE_LOG_METADATA_TOPIC_NAME",
    "DEFAULT_METADATA_TOPIC_PARTITIONS",
]
