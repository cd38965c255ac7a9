"""Admin APIs with real clients: topics, partitions, configs, cluster, DeleteRecords, and
ListOffsets (earliest / latest / max timestamp / earliest local / by timestamp)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from tests.integration.clients import cf_admin, cf_consume, cf_produce, kp_admin


def _wait(futures: dict, timeout: float = 15) -> dict:
    return {k: f.result(timeout) for k, f in futures.items()}


def test_create_describe_alter_delete_topic_with_confluent(broker, unique):
    a = cf_admin(broker.bootstrap)
    topic = f"adm-{unique}"
    # validate_only creates nothing
    _wait(a.create_topics([NewTopic(topic, 2, 1)], validate_only=True))
    assert topic not in a.list_topics(timeout=10).topics
    _wait(a.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3600000"})]))
    md = a.list_topics(timeout=10).topics[topic]
    assert sorted(md.partitions) == [0, 1]
    assert md.partitions[0].leader == 0 and md.partitions[0].replicas == [0]

    with pytest.raises(KafkaException) as e:
        _wait(a.create_topics([NewTopic(topic, 1, 1)]))
    assert "TOPIC_ALREADY_EXISTS" in str(e.value)
    with pytest.raises(KafkaException) as e:
        _wait(a.create_topics([NewTopic(f"{topic}-rf", 1, 3)]))
    assert "INVALID_REPLICATION_FACTOR" in str(e.value)
    with pytest.raises(KafkaException) as e:
        _wait(a.create_topics([NewTopic(f"{topic}-bad", 1, 1, config={"retention.ms": "x"})]))
    assert "INVALID_CONFIG" in str(e.value)
    with pytest.raises(KafkaException):
        _wait(a.create_topics([NewTopic("bad/name", 1, 1)]))

    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = _wait(a.describe_configs([res]))[res]
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].is_default
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert len(configs) > 20  # every topic config, defaults included

    # IncrementalAlterConfigs: set one, delete another
    inc = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("segment.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    _wait(a.incremental_alter_configs([inc]))
    configs = _wait(a.describe_configs([res]))[res]
    assert configs["segment.bytes"].value == "2000000"
    assert configs["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].is_default
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # CreatePartitions
    _wait(a.create_partitions([NewPartitions(topic, 4)]))
    assert sorted(a.list_topics(topic, timeout=10).topics[topic].partitions) == [0, 1, 2, 3]
    with pytest.raises(KafkaException):
        _wait(a.create_partitions([NewPartitions(topic, 2)]))
    cf_produce(broker.bootstrap, topic, [(None, b"p3")], partition=3)
    assert cf_consume(broker.bootstrap, topic, 1, partitions=[3])[0].value() == b"p3"

    # DeleteTopics
    _wait(a.delete_topics([topic]))
    deadline = time.monotonic() + 10
    while topic in a.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in a.list_topics(timeout=10).topics


def test_broker_configs_and_cluster(broker):
    a = cf_admin(broker.bootstrap)
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = _wait(a.describe_configs([res]))[res]
    # The value it was started with (port 0: the kernel chose the port, tests/broker_process.py).
    listeners = [o for o in broker.started_overrides if o.startswith("listeners=")]
    assert configs["listeners"].value == listeners[-1].removeprefix("listeners=")
    assert configs["group.initial.rebalance.delay.ms"].value == "200"
    assert configs["num.partitions"].is_default
    cluster = a.describe_cluster().result(10)
    assert cluster.controller.id == 0
    assert [n.id for n in cluster.nodes] == [0]
    assert len(cluster.cluster_id) == 22


def test_admin_with_kafka_python(broker, unique):
    from kafka.admin import ConfigResource as KRes
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewPartitions as KNewPartitions
    from kafka.admin import NewTopic as KNewTopic

    admin = kp_admin(broker.bootstrap)
    try:
        topic = f"kadm-{unique}"
        admin.create_topics([KNewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
        assert topic in admin.list_topics()
        admin.create_partitions({topic: KNewPartitions(3)})
        admin.alter_configs([KRes(ConfigResourceType.TOPIC, topic, configs={"flush.ms": "5000"})])
        desc = admin.describe_configs([KRes(ConfigResourceType.TOPIC, topic)])
        assert desc["topic"][topic]["flush.ms"]["value"] == "5000"
        meta = admin.describe_topics([topic])
        assert len(meta[0]["partitions"]) == 3
        admin.delete_topics([topic])
    finally:
        admin.close()


def test_delete_records_then_earliest_offset(broker, unique):
    topic = f"delrec-{unique}"
    cf_produce(broker.bootstrap, topic, [(None, f"v{i}".encode()) for i in range(100)])
    a = cf_admin(broker.bootstrap)
    tp = TopicPartition(topic, 0, 40)
    futures = a.delete_records([tp])  # keep the dict: its futures complete through it
    res = futures[tp].result(10)
    assert res.low_watermark == 40
    earliest = a.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert earliest[TopicPartition(topic, 0)].result(10).offset == 40
    # consumers reading from 0 get OFFSET_OUT_OF_RANGE and reset to earliest (40)
    got = cf_consume(broker.bootstrap, topic, 60, offset=-2)
    assert got[0].offset() == 40 and got[0].value() == b"v40"
    # kafka-python sees the same low watermark
    from kafka.structs import TopicPartition as KTP

    admin = kp_admin(broker.bootstrap)
    try:
        ko = admin.list_partition_offsets({KTP(topic, 0): -2})
        assert ko[KTP(topic, 0)].offset == 40
        # DeleteRecords to the high watermark (-1)
        admin.delete_records({KTP(topic, 0): -1})
        ko = admin.list_partition_offsets({KTP(topic, 0): -2})
        assert ko[KTP(topic, 0)].offset == 100
    finally:
        admin.close()


def test_list_offsets_special_and_by_timestamp(broker, unique):
    from confluent_kafka import Producer

    topic = f"lo-{unique}"
    base = 1_700_000_000_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):  # timestamps base, base+1000, ... in separate batches
        p.produce(topic, value=f"t{i}".encode(), timestamp=base + i * 1000)
        p.flush(10)
    p.produce(topic, value=b"peak", timestamp=base + 50_000)
    p.produce(topic, value=b"after", timestamp=base + 20_000)
    assert p.flush(10) == 0
    a = cf_admin(broker.bootstrap)
    tp = TopicPartition(topic, 0)

    def lookup(spec):
        futures = a.list_offsets({tp: spec})
        return futures[tp].result(10)

    assert lookup(OffsetSpec.earliest()).offset == 0
    assert lookup(OffsetSpec.latest()).offset == 12
    assert lookup(OffsetSpec.max_timestamp()).offset == 10
    assert lookup(OffsetSpec.for_timestamp(base + 3500)).offset == 4
    assert lookup(OffsetSpec.for_timestamp(base + 3000)).offset == 3
    assert lookup(OffsetSpec.for_timestamp(base + 60_000)).offset == -1

    # librdkafka's offsets_for_times, kafka-python's offsets_for_times, and -4 (earliest local)
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    r = c.offsets_for_times([TopicPartition(topic, 0, base + 7000)], timeout=10)
    c.close()
    assert r[0].offset == 7
    from kafka.structs import TopicPartition as KTP

    admin = kp_admin(broker.bootstrap)
    try:
        ko = admin.list_partition_offsets({KTP(topic, 0): -4})
        assert ko[KTP(topic, 0)].offset == 0
        ko = admin.list_partition_offsets({KTP(topic, 0): base + 9000})
        assert ko[KTP(topic, 0)].offset == 9
    finally:
        admin.close()


CLUSTER_OPERATIONS = {
    "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
    "ALTER", "DESCRIBE",
}  # fmt: skip
TOPIC_OPERATIONS = {
    "READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
}  # fmt: skip


def test_authorized_operations_without_authorizer_are_all_of_them(broker, unique):
    """Kafka answers every operation a resource type has when no authorizer is on (and the
    omitted marker only when not asked)."""
    from confluent_kafka import TopicCollection

    a = cf_admin(broker.bootstrap)
    topic = f"ops-{unique}"
    _wait(a.create_topics([NewTopic(topic, 1, 1)]))
    cluster = a.describe_cluster(include_authorized_operations=True).result(10)
    assert {op.name for op in cluster.authorized_operations} == CLUSTER_OPERATIONS
    assert a.describe_cluster().result(10).authorized_operations is None
    (desc,) = a.describe_topics(
        TopicCollection([topic]), include_authorized_operations=True
    ).values()
    assert {op.name for op in desc.result(10).authorized_operations} == TOPIC_OPERATIONS
    # DescribeGroups too (librdkafka's describe_consumer_groups)
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as TP

    group = f"ops-group-{unique}"
    offsets = ConsumerGroupTopicPartitions(group, [TP(topic, 0, 0)])
    a.alter_consumer_group_offsets([offsets])[group].result(10)
    (g,) = a.describe_consumer_groups([group], include_authorized_operations=True).values()
    assert {op.name for op in g.result(10).authorized_operations} == {"READ", "DESCRIBE", "DELETE"}
    # kafka-python's DescribeCluster and Metadata with authorized operations
    k = kp_admin(broker.bootstrap)
    try:
        described = k.describe_cluster()
        md = k._manager.run(k._get_cluster_metadata, [topic])
    finally:
        k.close()
    # (kafka-python decodes the bit field into operation names)
    assert set(described["authorized_operations"]) == CLUSTER_OPERATIONS
    (t,) = md["topics"]
    assert set(t["authorized_operations"]) == TOPIC_OPERATIONS
