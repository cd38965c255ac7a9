"""Client quotas (Kafka's ``producer_byte_rate`` / ``consumer_byte_rate``): entities and their
precedence, the throttle-time arithmetic, and the quota file of a single node. The cluster's
store (``/config/users``, ``/config/clients``) is :mod:`tierlog.cluster.zk_client_quotas`;
the broker's wiring and the APIs are :mod:`tierlog.server.client_quotas`."""
