"""Broker metrics on ``metrics.port`` (issue 15), scraped over HTTP from a real broker process
and parsed by prometheus_client's own text parser, cross-checked against what real clients
sent; DescribeLogDirs (API 35) through kafka-python's admin client."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.clients import cf_consume, cf_create_topic, cf_produce, kp_admin
from tests.integration.conftest import running_broker
from tests.integration.metrics_support import scrape, value
from tests.integration.wire import WireClient, create_topics, one_record, produce, request_class
from tierlog.tiered.metrics import RemoteStorageMetrics
from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A broker with ``metrics.port`` and tiered storage off."""
    with running_broker(tmp_path_factory.mktemp("metrics-broker"), metrics=True) as b:
        yield b


BTM = "kafka_server_BrokerTopicMetrics_"
REQ = "kafka_network_RequestMetrics_"


def test_the_endpoint_answers_with_tiering_off(mbroker):
    s = scrape(mbroker)
    names = {n for n, _ in s}
    for name in (
        BTM + "BytesInPerSec_total",
        BTM + "MessagesInPerSec_total",
        BTM + "FailedFetchRequestsPerSec_total",
        "kafka_server_ReplicaManager_PartitionCount",
        "kafka_server_ReplicaManager_UnderReplicatedPartitions",
        "kafka_controller_KafkaController_ActiveControllerCount",
        "kafka_controller_KafkaController_OfflinePartitionsCount",
    ):
        assert name in names, name
    # The log cleaner's gauges are on the broker's endpoint too (log.cleaner.enable=true).
    assert "kafka_log_LogCleaner_DeadThreadCount" in names
    # No tiered storage: none of its series.
    assert not any("Remote" in n for n in names)
    assert value(s, "kafka_controller_KafkaController_ActiveControllerCount") == 1
    assert value(s, "kafka_controller_KafkaController_OfflinePartitionsCount") == 0
    assert value(s, "kafka_server_ReplicaManager_UnderReplicatedPartitions") == 0


def test_produce_and_fetch_counters_match_what_clients_sent(mbroker, unique):
    b = mbroker
    topic = f"m-{unique}"
    cf_create_topic(b.bootstrap, topic, 2)
    before = scrape(b)
    records = [(f"k{i}".encode(), b"v" * (100 + i)) for i in range(500)]
    cf_produce(b.bootstrap, topic, records)
    after = scrape(b)
    payload = sum(len(k) + len(v) for k, v in records)
    t = {"topic": topic}
    assert value(after, BTM + "MessagesInPerSec_total", **t) == len(records)
    assert value(after, BTM + "BytesInPerSec_total", **t) >= payload
    assert value(after, BTM + "TotalProduceRequestsPerSec_total", **t) >= 1
    assert value(after, BTM + "FailedProduceRequestsPerSec_total", **t) == 0
    # The all-topics series (no topic label) moved at least as much.
    for name in ("MessagesInPerSec_total", "BytesInPerSec_total"):
        grew = value(after, BTM + name) - value(before, BTM + name)
        assert grew >= value(after, BTM + name, **t)
    # Log gauges: end offsets add up to the records, sizes to the bytes in.
    ends = [
        value(after, "kafka_log_Log_LogEndOffset", topic=topic, partition=str(p)) for p in (0, 1)
    ]
    sizes = [value(after, "kafka_log_Log_Size", topic=topic, partition=str(p)) for p in (0, 1)]
    assert sum(ends) == len(records)
    assert sum(sizes) == value(after, BTM + "BytesInPerSec_total", **t)
    assert value(after, "kafka_log_Log_LogStartOffset", topic=topic, partition="0") == 0

    got = cf_consume(b.bootstrap, topic, len(records), partitions=(0, 1))
    assert len(got) == len(records)
    read = scrape(b)
    assert value(read, BTM + "BytesOutPerSec_total", **t) >= sum(sizes)
    assert value(read, BTM + "TotalFetchRequestsPerSec_total", **t) >= 2
    assert value(read, BTM + "FailedFetchRequestsPerSec_total", **t) == 0
    assert value(read, "kafka_server_ReplicaManager_PartitionCount") >= 2
    assert value(read, "kafka_server_ReplicaManager_LeaderCount") == value(
        read, "kafka_server_ReplicaManager_PartitionCount"
    )


def test_a_failed_produce_is_counted_once(mbroker, unique):
    b = mbroker
    topic = f"fail-{unique}"
    c = WireClient(b.bootstrap)
    try:
        assert create_topics(c, {topic: 1}, **{"max.message.bytes": "1000"}) == {topic: 0}
        ok = one_record(b"x" * 10)
        assert produce(c, topic, [0], ok) == {0: 0}
        # MESSAGE_TOO_LARGE (10): the batch is bigger than the topic's max.message.bytes.
        assert produce(c, topic, [0], one_record(b"x" * 5000)) == {0: 10}
    finally:
        c.close()
    s = scrape(b)
    t = {"topic": topic}
    assert value(s, BTM + "TotalProduceRequestsPerSec_total", **t) == 2
    assert value(s, BTM + "FailedProduceRequestsPerSec_total", **t) == 1
    assert value(s, BTM + "MessagesInPerSec_total", **t) == 1
    assert value(s, BTM + "BytesInPerSec_total", **t) == len(ok)


def test_total_time_histogram_counts_every_request(mbroker):
    """ListGroups is sent by no other client of this broker: its histogram count grows by
    exactly the requests sent, and RequestsPerSec agrees per version."""
    b = mbroker
    name = "ListGroups"
    before = scrape(b)
    sent = 7
    c = WireClient(b.bootstrap)
    try:
        cls = request_class(16, 4)
        for _ in range(sent):
            assert c.call(cls(states_filter=())).error_code == 0
    finally:
        c.close()
    after = scrape(b)
    count = REQ + "TotalTimeMs_count"
    assert value(after, count, request=name) - value(before, count, request=name) == sent
    inf = value(after, REQ + "TotalTimeMs_bucket", request=name, le="+Inf")
    assert inf == value(after, count, request=name)
    assert value(after, REQ + "TotalTimeMs_sum", request=name) > 0
    per_sec = REQ + "RequestsPerSec_total"
    grew = value(after, per_sec, request=name, version="4") - value(
        before, per_sec, request=name, version="4"
    )
    assert grew == sent


def test_consumer_group_lag_is_produced_minus_committed(mbroker, unique):
    b = mbroker
    topic, group = f"lag-{unique}", f"g-{unique}"
    cf_create_topic(b.bootstrap, topic, 1)
    produced = 40
    cf_produce(b.bootstrap, topic, [(None, b"x%d" % i) for i in range(produced)], partition=0)
    committed = 13
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, committed)], asynchronous=False)
    finally:
        c.close()
    s = scrape(b)
    labels = {"group": group, "topic": topic, "partition": "0"}
    assert value(s, "kafka_consumergroup_current_offset", **labels) == committed
    assert value(s, "kafka_consumergroup_lag", **labels) == produced - committed


def test_lag_of_a_consumer_protocol_group_too(mbroker, unique):
    """A KIP-848 group's commits count like a classic group's."""
    b = mbroker
    topic, group = f"lag848-{unique}", f"g848-{unique}"
    cf_create_topic(b.bootstrap, topic, 1)
    cf_produce(b.bootstrap, topic, [(None, b"x%d" % i) for i in range(30)], partition=0)
    c = Consumer(
        {"bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": "consumer"}
    )
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while not c.assignment():
            assert time.monotonic() < deadline, "no assignment"
            c.poll(0.1)
        c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        s = scrape(b)
    finally:
        c.close()
    labels = {"group": group, "topic": topic, "partition": "0"}
    assert value(s, "kafka_consumergroup_current_offset", **labels) == 7
    assert value(s, "kafka_consumergroup_lag", **labels) == 30 - 7


def test_describe_log_dirs_with_kafka_python(mbroker, unique):
    b = mbroker
    topic = f"dirs-{unique}"
    cf_create_topic(b.bootstrap, topic, 2)
    cf_produce(b.bootstrap, topic, [(None, b"y" * 200) for _ in range(30)], partition=1)
    s = scrape(b)
    admin = kp_admin(b.bootstrap)
    try:
        everything = admin.describe_log_dirs()
        one = admin.describe_log_dirs(topic_partitions={topic: [1]})
    finally:
        admin.close()
    [broker] = everything
    [d] = broker["log_dirs"]
    assert d["error_code"] == 0
    assert Path(d["log_dir"]) == Path(b.log_dir).resolve() or Path(d["log_dir"]) == b.log_dir
    parts = {(t["name"], p["partition_index"]): p for t in d["topics"] for p in t["partitions"]}
    for p in (0, 1):
        got = parts[(topic, p)]
        assert got["partition_size"] == value(
            s, "kafka_log_Log_Size", topic=topic, partition=str(p)
        )
        assert got["offset_lag"] == 0 and got["is_future_key"] is False
    assert parts[(topic, 1)]["partition_size"] > 30 * 200
    [[only]] = [one[0]["log_dirs"]]
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in only["topics"]
    ] == [(topic, [1])]


def test_the_grafana_dashboard_queries_only_served_series(mbroker):
    """docs/grafana/tierlog.json: every series its queries name is one the broker serves (the
    tiered ones as tiered storage registers them)."""
    dash = json.loads((Path(__file__).parents[2] / "docs/grafana/tierlog.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert exprs
    used = {m for e in exprs for m in re.findall(r"\bkafka_\w+", e)}
    served = {name for name, _ in scrape(mbroker)}
    tiered = RemoteStorageMetrics()
    tiered.partition(TopicIdPartition(uuid.uuid4(), "t", 0))
    served |= {s.name for fam in tiered.registry.collect() for s in fam.samples}
    assert used - served == set()
    # Both the broker's own and the tiered series are on the dashboard.
    assert "kafka_consumergroup_lag" in used
    assert "kafka_server_BrokerTopicMetrics_RemoteCopyBytesPerSec_total" in used
