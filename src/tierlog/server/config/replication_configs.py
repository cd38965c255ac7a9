"""The replication keys (Kafka's ``ReplicationConfigs``): follower fetching, the ISR,
the inter-broker listener, the default replication factor and preferred-leader balance.
"""

from __future__ import annotations

from tierlog.log.log_config import LONG_MAX
from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import between as _between
from tierlog.server.config_def import define as _d

__all__ = ["REPLICATION_CONFIGS"]

# fmt: off
REPLICATION_CONFIGS: tuple[BrokerConfigDef, ...] = (
    _d("inter.broker.listener.name", "string", None, None,
       "Must name one of the listeners when set (single node: not otherwise used)."),
    _d("replica.lag.time.max.ms", "long", 30_000, _min(1),
       "A follower that has not caught up for this long leaves the ISR."),
    _d("replica.fetch.max.bytes", "int", 1_048_576, _min(0),
       "Bytes a follower fetches per partition per request."),
    _d("replica.fetch.response.max.bytes", "int", 10_485_760, _min(0),
       "Bytes a follower fetches per request."),
    _d("replica.fetch.wait.max.ms", "int", 500, _min(0), "Long-poll wait of follower fetches."),
    _d("replica.fetch.min.bytes", "int", 1, _min(1), "min_bytes of follower fetches."),
    _d("replica.fetch.backoff.ms", "int", 1000, _min(0),
       "Wait of a follower after a failed fetch before the next."),
    _d("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, _min(1),
       "Bytes per second a move between log dirs (AlterReplicaLogDirs) copies, at most."),
    _d("num.replica.fetchers", "int", 1, _min(1),
       "Fetcher tasks per source broker (partitions are hashed over them)."),
    _d("replica.high.watermark.checkpoint.interval.ms", "long", 5000, _min(1),
       "How often replication-offset-checkpoint is written."),
    _d("auto.leader.rebalance.enable", "boolean", True, None,
       "The controller moves leadership back to preferred replicas."),
    _d("leader.imbalance.check.interval.seconds", "long", 300, _min(1),
       "How often the controller checks the leader imbalance."),
    _d("leader.imbalance.per.broker.percentage", "int", 10, _between(0, 100),
       "Imbalance (percent of a broker's preferred partitions led elsewhere) that triggers "
       "preferred-leader elections."),
    _d("default.replication.factor", "int", 1, _min(1),
       "Replication factor of topics created without one (CreateTopics -1, auto-creation)."),
)
# fmt: on
