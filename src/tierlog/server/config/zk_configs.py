"""The ZooKeeper-mode keys (Kafka's ``ZkConfigs``): ``zookeeper.*``; without
``zookeeper.connect`` the broker is a single node.
"""

from __future__ import annotations

from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import define as _d
from tierlog.server.config_def import ignored as _ignored

__all__ = ["ZK_CONFIGS"]

# fmt: off
ZK_CONFIGS: tuple[BrokerConfigDef, ...] = (
    _d("zookeeper.connect", "string", None, None,
       "ZooKeeper ensemble host:port[,host:port...][/chroot]; unset: a single node."),
    _d("zookeeper.session.timeout.ms", "int", 18_000, _min(1), "ZooKeeper session timeout."),
    _d("zookeeper.connection.timeout.ms", "int", None, _min(1),
       "Longest wait for the first ZooKeeper connection (default: the session timeout)."),
    _ignored("zookeeper.max.in.flight.requests", "int", 10, _min(1), "kazoo pipelines freely"),
    _ignored("zookeeper.set.acl", "boolean", False, None, "no ZooKeeper ACLs yet"),
)
# fmt: on
