"""Streaming reads and writes: availableNow, restart from the checkpoint, limits, data loss."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import BrokerProcess, create_topic, produce

T0 = 1_700_000_000_000


class Collector:
    """A foreachBatch sink that remembers every (batch id, rows) it was given."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[int, int, bytes]]]] = []
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [(r["partition"], r["offset"], bytes(r["value"])) for r in df.collect()]
        with self._lock:
            self.batches.append((batch_id, rows))

    @property
    def rows(self) -> list[tuple[int, int, bytes]]:
        return sorted(r for _, rows in self.batches for r in rows)


def run_available_now(
    spark: Any, broker: BrokerProcess, checkpoint: Path, sink: Collector, **options: str
) -> None:
    r = spark.readStream.format("tierlog").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    query = (
        r.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None


def values(topic_records: range, partitions: int) -> list[dict[str, Any]]:
    return [
        {"value": b"v%d" % i, "partition": i % partitions, "timestamp": T0 + i}
        for i in topic_records
    ]


def test_restart_reads_exactly_the_new_rows_once(
    spark: Any, broker: BrokerProcess, admin: Any, tmp_path: Path, unique: str
) -> None:
    topic = f"stream-{unique}"
    create_topic(admin, topic, 2)
    produce(broker.bootstrap, topic, values(range(0, 40), 2))
    checkpoint = tmp_path / "checkpoint"
    options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "15"}

    first = Collector()
    run_available_now(spark, broker, checkpoint, first, **options)
    assert sorted(v for _, _, v in first.rows) == sorted(b"v%d" % i for i in range(40))
    assert len(first.batches) >= 3  # 40 records, at most 15 per micro-batch
    assert all(len(rows) <= 15 for _, rows in first.batches)

    # Stopped; more records, a new partition; restart from the same checkpoint.
    produce(broker.bootstrap, topic, values(range(40, 70), 2))
    from confluent_kafka.admin import NewPartitions

    for f in admin.create_partitions([NewPartitions(topic, 3)]).values():
        f.result(30)
    produce(broker.bootstrap, topic, [{"value": b"new-p2", "partition": 2}])

    second = Collector()
    run_available_now(spark, broker, checkpoint, second, **options)
    assert sorted(v for _, _, v in second.rows) == sorted(
        [b"v%d" % i for i in range(40, 70)] + [b"new-p2"]
    )
    assert (2, 0, b"new-p2") in second.rows
    assert min(b for b, _ in second.batches) > max(b for b, _ in first.batches)

    # Nothing new: nothing read.
    third = Collector()
    run_available_now(spark, broker, checkpoint, third, **options)
    assert third.rows == []


def test_starting_offsets_latest_and_timestamps(
    spark: Any, broker: BrokerProcess, admin: Any, tmp_path: Path, unique: str
) -> None:
    topic = f"stream-latest-{unique}"
    create_topic(admin, topic, 1)
    produce(broker.bootstrap, topic, values(range(10), 1))
    sink = Collector()
    run_available_now(spark, broker, tmp_path / "a", sink, subscribe=topic)  # default: latest
    assert sink.rows == []
    produce(broker.bootstrap, topic, values(range(10, 13), 1))
    run_available_now(spark, broker, tmp_path / "a", sink, subscribe=topic)
    assert [o for _, o, _ in sink.rows] == [10, 11, 12]

    by_time = Collector()
    run_available_now(
        spark, broker, tmp_path / "b", by_time, subscribe=topic, startingTimestamp=str(T0 + 8)
    )
    assert [o for _, o, _ in by_time.rows] == [8, 9, 10, 11, 12]


def test_data_loss_after_retention(
    spark: Any, broker: BrokerProcess, admin: Any, tmp_path: Path, unique: str
) -> None:
    from confluent_kafka import TopicPartition

    topic = f"stream-loss-{unique}"
    create_topic(admin, topic, 1)
    produce(broker.bootstrap, topic, values(range(10), 1))
    options = {"subscribe": topic, "startingOffsets": "earliest"}
    sink = Collector()
    run_available_now(spark, broker, tmp_path / "cp", sink, **options)
    assert len(sink.rows) == 10
    # The query is stopped at offset 10; more arrives and is deleted before the restart.
    produce(broker.bootstrap, topic, values(range(10, 30), 1))
    for f in admin.delete_records([TopicPartition(topic, 0, 25)]).values():
        f.result(30)

    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(spark, broker, tmp_path / "cp", Collector(), **options)
    skipped = Collector()
    run_available_now(spark, broker, tmp_path / "cp", skipped, **options, failOnDataLoss="false")
    assert [o for _, o, _ in skipped.rows] == list(range(25, 30))


def test_stream_to_topic_then_read_back(
    spark: Any, broker: BrokerProcess, admin: Any, tmp_path: Path, unique: str
) -> None:
    source, target = f"s-in-{unique}", f"s-out-{unique}"
    create_topic(admin, source, 2)
    create_topic(admin, target, 1)
    produce(broker.bootstrap, source, values(range(25), 2))
    query = (
        spark.readStream.format("tierlog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "upper(cast(value as string)) as value")
        .writeStream.format("tierlog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "w"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    back = (
        spark.read.format("tierlog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", target)
        .load()
    )
    assert sorted(bytes(r["value"]) for r in back.collect()) == sorted(
        b"V%d" % i for i in range(25)
    )
