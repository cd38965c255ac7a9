"""The broker's config definitions, one module per area as Kafka splits them.

Each module holds one area's table of :class:`~tierlog.server.config_def.BrokerConfigDef`
rows (and the parsing or validation that belongs to that area alone):

* :mod:`.server_configs` — identity and roles, I/O threads, rack, controlled shutdown,
  observability (Kafka's ``ServerConfigs``, ``KRaftConfigs``);
* :mod:`.socket_server_configs` — listeners and sockets, ``Endpoint`` parsing
  (``SocketServerConfigs``);
* :mod:`.zk_configs` — ``zookeeper.*`` (``ZkConfigs``);
* :mod:`.replication_configs` — followers, the ISR, leader balance (``ReplicationConfigs``);
* :mod:`.server_log_configs` — log dirs, retention, flush, the topic-config synonyms
  (``ServerLogConfigs``);
* :mod:`.cleaner_config` — ``log.cleaner.*`` (``CleanerConfig``);
* :mod:`.group_coordinator_config` — groups and ``__consumer_offsets``
  (``GroupCoordinatorConfig``);
* :mod:`.transaction_configs` — ``__transaction_state`` and transaction timeouts
  (``TransactionLogConfigs``, ``TransactionStateManagerConfigs``);
* :mod:`.remote_log_manager_config` — tiered storage (``RemoteLogManagerConfig``);
* :mod:`.quota_configs` — client quota windows (``QuotaConfigs``);
* :mod:`.properties` — the ``java.util.Properties`` file syntax.

The TLS and SASL keys live in :mod:`tierlog.security.security_config`.
:class:`~tierlog.server.kafka_config.KafkaConfig` assembles the tables into
:data:`~tierlog.server.kafka_config.BROKER_CONFIGS` and validates a whole configuration.
"""
