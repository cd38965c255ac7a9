"""Remote storage: the RemoteStorageManager interface, a pyarrow.fs backend, a recording double."""

from tierlog.tiered.storage.pyarrow_remote_storage_manager import PyArrowRemoteStorageManager
from tierlog.tiered.storage.recording_remote_storage_manager import (
    EventType,
    RecordingRemoteStorageManager,
    RemoteStorageEvent,
)
from tierlog.tiered.storage.remote_storage_manager import (
    ALL_INDEX_TYPES,
    IndexType,
    LogSegmentData,
    RemoteStorageManager,
    map_exceptions,
)

__all__ = [
    "ALL_INDEX_TYPES",
    "IndexType",
    "LogSegmentData",
    "RemoteStorageManager",
    "map_exceptions",
    "PyArrowRemoteStorageManager",
    "RecordingRemoteStorageManager",
    "RemoteStorageEvent",
    "EventType",
]
