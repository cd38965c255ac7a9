"""The replicated cluster: brokers coordinated through Apache ZooKeeper in Kafka's
ZooKeeper-mode layout (issue 9).

* :mod:`~tierlog.cluster.zk_data` -- sans-IO: the znode paths and the JSON of each znode.
* :mod:`~tierlog.cluster.zookeeper_client` -- :class:`ZooKeeperClient`, one session over
  kazoo: connection, session events, pipelined requests with retries, watches
  (:mod:`~tierlog.cluster.zk_watches`: children and data watches that survive reconnections).
* :mod:`~tierlog.cluster.kafka_zk_client` -- :class:`KafkaZkClient`, Kafka's metadata
  operations: registration, the controller election and its fencing, topics, partition state
  compare-and-set, pipelined batch reads and writes.
* :mod:`~tierlog.cluster.replica_assignment`, :mod:`~tierlog.cluster.leader_election` --
  sans-IO: Kafka's replica placement and leader election rules.
* :mod:`~tierlog.cluster.controller` -- :class:`KafkaController`, elected through
  ``/controller``: it decides leaders and ISRs and writes them to ZooKeeper.
* :mod:`~tierlog.cluster.zk_broker` -- a broker's side: registration, the metadata watches
  (:mod:`~tierlog.cluster.metadata_cache`), ISR writes, controlled shutdown;
  :mod:`~tierlog.cluster.zk_admin` -- topic creation and deletion through ZooKeeper.
* :mod:`~tierlog.cluster.partition` -- a hosted partition as leader or follower (HW, ISR);
  :mod:`~tierlog.cluster.replica_fetcher` -- followers fetching from leaders over
  :mod:`~tierlog.cluster.broker_client`.

Nothing is re-exported here: a single node imports :mod:`~tierlog.cluster.partition` and
never loads kazoo.
"""
