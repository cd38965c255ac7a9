"""The cluster: ZooKeeper layout and client, the controller, partitions and replication."""
