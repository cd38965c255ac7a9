"""The partition log's historical home: :class:`Log` is Kafka's ``UnifiedLog``
(:mod:`.unified_log`) over its ``LocalLog`` (:mod:`.local_log`). Import from here or there."""

from tierlog.log.local_log import LocalLog, LogOffsetMetadata, parse_topic_partition
from tierlog.log.log_segment import FetchDataInfo
from tierlog.log.log_validator import LogAppendInfo
from tierlog.log.unified_log import (
    DELETE_TO_HIGH_WATERMARK,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    UnifiedLog,
)

#: The partition log (tierlog's name of UnifiedLog).
Log = UnifiedLog

__all__ = [
    "DELETE_TO_HIGH_WATERMARK",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "FetchDataInfo",
    "LocalLog",
    "Log",
    "LogAppendInfo",
    "LogOffsetMetadata",
    "UnifiedLog",
    "parse_topic_partition",
]
