"""tierlog.tiered: KIP-405 tiered storage — remote log metadata and remote storage.

Metadata: the segment/partition state machines, the metadata value types, Kafka's metadata
record serde, the per-partition columnar cache and its file, the RemoteLogMetadataManager
implementations. Storage: see :mod:`tierlog.tiered.storage`. The remote log manager, the
remote index cache, quotas and metrics (:class:`RemoteLogManager`, :class:`RemoteIndexCache`,
...) are imported on first use, so importing this package does not need prometheus_client.
"""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from tierlog.tiered.metrics import RemoteStorageMetrics, start_metrics_server
    from tierlog.tiered.quota import TokenBucket
    from tierlog.tiered.remote_index_cache import RemoteIndexCache
    from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig
    from tierlog.tiered.remote_log_reader import RemoteLogReadResult, RemoteStorageFetchInfo

_LAZY = {
    "RemoteLogManager": "tierlog.tiered.remote_log_manager",
    "RemoteLogManagerConfig": "tierlog.tiered.remote_log_manager",
    "RemoteStorageFetchInfo": "tierlog.tiered.remote_log_reader",
    "RemoteLogReadResult": "tierlog.tiered.remote_log_reader",
    "RemoteIndexCache": "tierlog.tiered.remote_index_cache",
    "RemoteStorageMetrics": "tierlog.tiered.metrics",
    "start_metrics_server": "tierlog.tiered.metrics",
    "TokenBucket": "tierlog.tiered.quota",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    # remote log manager, index cache, quotas, metrics (lazy)
    "RemoteLogManager",
    "RemoteLogManagerConfig",
    "RemoteStorageFetchInfo",
    "RemoteLogReadResult",
    "RemoteIndexCache",
    "RemoteStorageMetrics",
    "start_metrics_server",
    "TokenBucket",
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
