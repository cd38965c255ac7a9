"""The replicated cluster: brokers coordinated through Apache ZooKeeper in Kafka's
ZooKeeper-mode layout (issue 9).

* :mod:`~tierlog.cluster.zk_data` -- sans-IO: the znode paths and the JSON of each znode.
* :mod:`~tierlog.cluster.kafka_zk_client` -- :class:`KafkaZkClient`, Kafka's metadata
  operations over kazoo: registration, the controller election and its fencing, topics,
  partition state compare-and-set, pipelined batch reads and writes.
* :mod:`~tierlog.cluster.zookeeper_client` -- :class:`ZooKeeperClient`, the session under it:
  connection, session events, pipelined requests with retries, watches.
* :mod:`~tierlog.cluster.zk_watches` -- children and data watches that survive reconnections.
"""

from tierlog.cluster.kafka_zk_client import KafkaZkClient
from tierlog.cluster.zk_data import (
    BrokerEndPoint,
    BrokerInfo,
    ControllerInfo,
    PartitionState,
    TopicAssignment,
)
from tierlog.cluster.zk_watches import WatchHandle
from tierlog.cluster.zookeeper_client import ControllerMovedError, ZooKeeperClient, parse_connect

__all__ = [
    "BrokerEndPoint",
    "BrokerInfo",
    "ControllerInfo",
    "ControllerMovedError",
    "KafkaZkClient",
    "PartitionState",
    "TopicAssignment",
    "WatchHandle",
    "ZooKeeperClient",
    "parse_connect",
]
