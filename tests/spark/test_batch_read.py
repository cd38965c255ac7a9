"""Batch reads on a real SparkSession against a real broker: exact rows, every column."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import pytest

from tests.spark.conftest import BrokerProcess, create_topic, produce

T0 = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def expected_rows(topic: str, partitions: int, per_partition: int) -> list[dict[str, Any]]:
    """Records with known keys, values, headers and timestamps; offsets follow from order."""
    rows = []
    for p in range(partitions):
        for i in range(per_partition):
            n = p * 1000 + i
            rows.append(
                {
                    "key": None if i % 7 == 3 else b"key-%d" % n,
                    "value": None if i % 11 == 5 else b"value-%d-" % n + b"x" * (i % 150),
                    "topic": topic,
                    "partition": p,
                    "offset": i,
                    "timestamp": T0 + 1000 * i + p,
                    "timestampType": 0,
                    "headers": [
                        {"key": "h", "value": b"%d" % n},
                        {"key": "n", "value": None},
                    ]
                    if i % 3 == 0
                    else None,
                }
            )
    return rows


def produce_rows(bootstrap: str, topic: str, rows: list[dict[str, Any]]) -> None:
    """Partition by partition, in offset order, switching compression codec every 10 records."""
    for p in sorted({r["partition"] for r in rows}):
        part = [r for r in rows if r["partition"] == p]
        for start in range(0, len(part), 10):
            codec = CODECS[(start // 10) % len(CODECS)]
            produce(
                bootstrap,
                topic,
                [
                    {
                        "key": r["key"],
                        "value": r["value"],
                        "partition": p,
                        "timestamp": r["timestamp"],
                        "headers": [(h["key"], h["value"]) for h in r["headers"] or []],
                    }
                    for r in part[start : start + 10]
                ],
                **{"compression.type": codec},
            )


def as_dicts(df: Any) -> list[dict[str, Any]]:
    out = []
    for row in df.collect():
        d = row.asDict(recursive=True)
        ts = d["timestamp"]
        d["timestamp"] = int(ts.replace(tzinfo=UTC).timestamp() * 1000)
        if d.get("key") is not None:
            d["key"] = bytes(d["key"])
        if d.get("value") is not None:
            d["value"] = bytes(d["value"])
        if "headers" in d and d["headers"] is not None:
            d["headers"] = [
                {"key": h["key"], "value": None if h["value"] is None else bytes(h["value"])}
                for h in d["headers"]
            ]
        out.append(d)
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


@pytest.fixture(scope="module")
def dataset(broker: BrokerProcess, admin: Any) -> tuple[str, list[dict[str, Any]]]:
    topic = "batch-exact"
    create_topic(admin, topic, 3)
    rows = expected_rows(topic, 3, 60)
    produce_rows(broker.bootstrap, topic, rows)
    return topic, rows


def read(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    r = spark.read.format("tierlog").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_every_column_of_every_record(spark: Any, broker: BrokerProcess, dataset: Any) -> None:
    topic, rows = dataset
    df = read(spark, broker, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert as_dicts(df) == rows
    without = as_dicts(read(spark, broker, subscribe=topic))
    assert without == [{k: v for k, v in r.items() if k != "headers"} for r in rows]


def test_by_offsets(spark: Any, broker: BrokerProcess, dataset: Any) -> None:
    topic, rows = dataset
    df = read(
        spark,
        broker,
        assign=f'{{"{topic}":[0,2]}}',
        startingOffsets=f'{{"{topic}":{{"0":5,"2":-2}}}}',
        endingOffsets=f'{{"{topic}":{{"0":17,"2":-1}}}}',
        includeHeaders="true",
    )
    want = [
        r for r in rows if (r["partition"] == 0 and 5 <= r["offset"] < 17) or r["partition"] == 2
    ]
    assert as_dicts(df) == want


def test_by_timestamps(spark: Any, broker: BrokerProcess, dataset: Any) -> None:
    topic, rows = dataset
    # Partition p's record i has timestamp T0 + 1000 i + p.
    df = read(
        spark,
        broker,
        subscribe=topic,
        startingTimestamp=str(T0 + 10_000),
        endingTimestamp=str(T0 + 20_000),
        includeHeaders="true",
    )
    # Start: the first offset with timestamp >= T0+10000 is 10 in every partition; end: the
    # first offset with timestamp >= T0+20000 is 20 (exclusive).
    want = [r for r in rows if 10 <= r["offset"] < 20]
    assert as_dicts(df) == want
    by_partition = read(
        spark,
        broker,
        subscribe=topic,
        startingOffsetsByTimestamp=(
            f'{{"{topic}":{{"0":{T0 + 3_000},"1":{T0 + 50_500},"2":{T0}}}}}'
        ),
        endingOffsetsByTimestamp=(
            f'{{"{topic}":{{"0":{T0 + 4_000},"1":{T0 + 10**9},"2":{T0 + 1002}}}}}'
        ),
    )
    got = [(r["partition"], r["offset"]) for r in as_dicts(by_partition)]
    assert got == [(0, 3)] + [(1, i) for i in range(51, 60)] + [(2, 0)]


def test_starting_timestamp_past_the_end(spark: Any, broker: BrokerProcess, dataset: Any) -> None:
    topic, _ = dataset
    late = str(T0 + 10**9)
    with pytest.raises(Exception, match="no record has a timestamp"):
        read(spark, broker, subscribe=topic, startingTimestamp=late).collect()
    df = read(
        spark,
        broker,
        subscribe=topic,
        startingTimestamp=late,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert df.count() == 0


def test_min_partitions_splits_ranges(spark: Any, broker: BrokerProcess, dataset: Any) -> None:
    topic, rows = dataset
    df = read(spark, broker, subscribe=topic, minPartitions="12", includeHeaders="true")
    assert df.rdd.getNumPartitions() >= 12
    assert as_dicts(df) == rows
    df = read(spark, broker, subscribe=topic, maxRecordsPerPartition="7")
    assert df.rdd.getNumPartitions() == 3 * 9
    assert df.count() == len(rows)


def test_subscribe_pattern_and_aggregation(spark: Any, broker: BrokerProcess, dataset: Any) -> None:
    _topic, rows = dataset
    df = read(spark, broker, subscribePattern="batch-ex.*")
    got = {
        r["partition"]: r["n"]
        for r in df.groupBy("partition").count().withColumnRenamed("count", "n").collect()
    }
    assert got == {0: 60, 1: 60, 2: 60}
    total = df.selectExpr("sum(length(value)) as s").collect()[0]["s"]
    assert total == sum(len(r["value"]) for r in rows if r["value"] is not None)


def test_option_errors_surface_at_load(spark: Any, broker: BrokerProcess) -> None:
    with pytest.raises(Exception, match="Only one of the following options"):
        read(spark, broker, subscribe="a", assign='{"a":[0]}')
    with pytest.raises(Exception, match="unknown option"):
        read(spark, broker, subscribe="a", startingOffset="earliest")
    with pytest.raises(Exception, match="starting offset can't be latest"):
        read(spark, broker, subscribe="a", startingOffsets="latest").collect()
    with pytest.raises(Exception, match="must be specified"):
        spark.read.format("tierlog").option("subscribe", "a").load()


def test_unknown_topic_reads_nothing(spark: Any, broker: BrokerProcess) -> None:
    assert read(spark, broker, subscribe="no-such-topic").count() == 0


def test_data_loss(spark: Any, broker: BrokerProcess, admin: Any, unique: str) -> None:
    from confluent_kafka import TopicPartition

    topic = f"loss-{unique}"
    create_topic(admin, topic, 1)
    produce(broker.bootstrap, topic, [{"value": b"%d" % i, "timestamp": T0 + i} for i in range(20)])
    futures = admin.delete_records([TopicPartition(topic, 0, 8)])
    for f in futures.values():
        f.result(30)
    start = f'{{"{topic}":{{"0":2}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, broker, subscribe=topic, startingOffsets=start).collect()
    df = read(spark, broker, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert sorted(r["offset"] for r in df.collect()) == list(range(8, 20))
    assert read(spark, broker, subscribe=topic).count() == 12  # earliest = the log start


@pytest.fixture
def pushdown(spark: Any) -> Any:
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    yield spark
    spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_filter_pushdown(pushdown: Any, broker: BrokerProcess, dataset: Any) -> None:
    from pyspark.sql import functions as F

    spark = pushdown
    topic, rows = dataset
    df = read(spark, broker, subscribe=topic, includeHeaders="true")
    narrowed = df.where("partition = 1 and offset >= 10 and offset < 20")
    assert narrowed.rdd.getNumPartitions() == 1  # one partition, one range left to read
    assert as_dicts(narrowed) == [r for r in rows if r["partition"] == 1 and 10 <= r["offset"] < 20]

    in_list = df.where(F.col("partition").isin(0, 2) & (F.col("offset") <= 3))
    assert as_dicts(in_list) == [r for r in rows if r["partition"] != 1 and r["offset"] <= 3]

    # T0 is 2023-11-14 22:13:20 UTC; record i of partition p has timestamp T0 + 1000 i + p.
    since = df.where(F.col("timestamp") >= F.lit("2023-11-14 22:14:10").cast("timestamp"))
    assert as_dicts(since) == [r for r in rows if r["timestamp"] >= T0 + 50_000]
    # The time index narrowed each partition to offsets [50, 60): 2 pieces of 5, not 12.
    split = read(spark, broker, subscribe=topic, maxRecordsPerPartition="5")
    split = split.where(F.col("timestamp") >= F.lit("2023-11-14 22:14:10").cast("timestamp"))
    assert split.rdd.getNumPartitions() == 3 * 2
    after = df.where(F.col("timestamp") > F.lit("2023-11-14 22:14:10.001").cast("timestamp"))
    assert as_dicts(after) == [r for r in rows if r["timestamp"] > T0 + 50_001]
    assert as_dicts(df.where("offset > 1000")) == []
