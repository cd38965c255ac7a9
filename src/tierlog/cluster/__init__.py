"""tierlog.cluster: a replicated cluster in Kafka's ZooKeeper-mode design."""
