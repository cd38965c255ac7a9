"""The tiered storage keys (Kafka's ``RemoteLogManagerConfig``, KIP-405): the remote log
manager's tasks, threads and quotas, ``__remote_log_metadata``, and the prefixes of the
plugins' own keys (``rsm.config.``, ``rlmm.config.``).
"""

from __future__ import annotations

from tierlog.log.log_config import LONG_MAX
from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import define as _d
from tierlog.server.config_def import ignored as _ignored
from tierlog.server.config_def import one_of as _one_of

__all__ = ["REMOTE_LOG_MANAGER_CONFIGS", "RLMM_CONFIG_PREFIX", "RSM_CONFIG_PREFIX"]

RSM_CONFIG_PREFIX = "rsm.config."
RLMM_CONFIG_PREFIX = "rlmm.config."

_NO_PLUGIN = "the built-in plugins are configured by rsm.config.* and rlmm.config.*"

# fmt: off
REMOTE_LOG_MANAGER_CONFIGS: tuple[BrokerConfigDef, ...] = (
    _d("remote.log.storage.system.enable", "boolean", False, None,
       "Enable tiered storage on this broker (topics opt in with remote.storage.enable)."),
    _d("remote.log.manager.task.interval.ms", "long", 30_000, _min(1),
       "Interval of the remote log manager's copy and expiration tasks."),
    _d("remote.log.reader.threads", "int", 10, _min(1), "Threads serving remote reads."),
    _d("remote.log.reader.max.pending.tasks", "int", 100, _min(1),
       "Remote reads queued before new ones are rejected."),
    _d("remote.log.reader.prefetch.max.bytes", "long", 64 << 20, _min(0),
       "tierlog: remote segment data read ahead of sequential consumers in parallel 1 MiB "
       "ranged reads, at most this much held (0: one ranged read per fetch, no read-ahead)."),
    _d("remote.log.manager.copier.thread.pool.size", "int", 10, _min(1),
       "Threads copying segments to remote storage."),
    _d("remote.log.manager.expiration.thread.pool.size", "int", 10, _min(1),
       "Threads expiring remote segments."),
    _d("remote.fetch.max.wait.ms", "int", 500, _min(1), "Longest wait of a fetch for remote data."),
    _d("remote.log.index.file.cache.total.size.bytes", "long", 1_073_741_824, _min(1),
       "Disk bound of <log.dir>/remote-log-index-cache."),
    _d("remote.log.manager.copy.max.bytes.per.second", "long", LONG_MAX, _min(1),
       "Quota on bytes copied to remote storage per second."),
    _d("remote.log.manager.fetch.max.bytes.per.second", "long", LONG_MAX, _min(1),
       "Quota on bytes read from remote storage per second."),
    _d("remote.log.metadata.topic.num.partitions", "int", 50, _min(1),
       "Partitions of __remote_log_metadata (also read as rlmm.config.<this key>, as Kafka)."),
    _d("remote.log.metadata.topic.replication.factor", "short", 3, _min(1),
       "Replicas of __remote_log_metadata in a cluster (created once that many brokers are "
       "alive; also read as rlmm.config.<this key>, as Kafka)."),
    _d("remote.log.manager.task.retry.backoff.ms", "long", 500, _min(1),
       "First backoff of a failed remote copy task; doubles on each further failure."),
    _d("remote.log.manager.task.retry.backoff.max.ms", "long", 30_000, _min(1),
       "Largest backoff of a failing remote copy task."),
    _d("remote.log.manager.task.retry.jitter", "double", 0.2, None,
       "Random jitter (+-fraction) applied to the remote copy task backoff."),
    # tierlog.*: Kafka has no such check; a key of ours under Kafka's remote.log.* could
    # collide with a future KIP's, and the prefix tells a reader no Kafka document covers it.
    _d("tierlog.remote.storage.startup.check", "string", "fail",
       _one_of("fail", "warn", "none"),
       "tierlog: at startup, write, read and delete a probe object in remote storage: fail "
       "(refuse to start when it fails), warn (log it and start anyway), none (no check)."),
    _d("remote.log.metadata.custom.metadata.max.bytes", "int", 128, _min(0),
       "Largest custom metadata a RemoteStorageManager may return per segment."),
    _ignored("remote.log.storage.manager.class.name", "string", None, None, _NO_PLUGIN),
    _ignored("remote.log.storage.manager.class.path", "string", None, None, _NO_PLUGIN),
    _ignored("remote.log.metadata.manager.class.name", "string", None, None, _NO_PLUGIN),
    _ignored("remote.log.metadata.manager.class.path", "string", None, None, _NO_PLUGIN),
    _ignored("remote.log.metadata.manager.listener.name", "string", None, None,
             "the metadata manager uses the broker's own log directly"),
    _d("remote.log.storage.manager.impl.prefix", "string", RSM_CONFIG_PREFIX, None,
       "Prefix of the RemoteStorageManager's keys."),
    _d("remote.log.metadata.manager.impl.prefix", "string", RLMM_CONFIG_PREFIX, None,
       "Prefix of the RemoteLogMetadataManager's keys."),
)
# fmt: on
