"""Batch writes: produce from a DataFrame, read back every column."""

from __future__ import annotations

from typing import Any

import pytest

from tests.spark.conftest import BrokerProcess, create_topic


def read_back(spark: Any, broker: BrokerProcess, topic: str) -> list[Any]:
    df = (
        spark.read.format("tierlog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    return sorted(df.collect(), key=lambda r: (r["partition"], r["offset"]))


def test_write_then_read_back(spark: Any, broker: BrokerProcess, admin: Any, unique: str) -> None:
    topic = f"written-{unique}"
    create_topic(admin, topic, 3)
    df = spark.sql(
        """
        select cast(concat('k', id) as binary) as key,
               concat('value-', id) as value,
               cast(id % 3 as int) as partition,
               case when id % 2 = 0
                    then array(named_struct('key', 'id',
                                            'value', cast(cast(id as string) as binary)))
               end as headers,
               'ignored column' as comment
        from range(0, 300, 1, 4)
        """
    )
    df.write.format("tierlog").option("kafka.bootstrap.servers", broker.bootstrap).option(
        "topic", topic
    ).mode("append").save()
    rows = read_back(spark, broker, topic)
    assert len(rows) == 300
    by_id = {int(bytes(r["key"])[1:]): r for r in rows}
    assert sorted(by_id) == list(range(300))
    for i, r in by_id.items():
        assert bytes(r["value"]) == b"value-%d" % i
        assert r["partition"] == i % 3
        if i % 2 == 0:
            assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == [("id", b"%d" % i)]
        else:
            assert r["headers"] is None
    # Each partition's offsets are dense: no gaps, no duplicates.
    for p in range(3):
        offsets = [r["offset"] for r in rows if r["partition"] == p]
        assert offsets == list(range(len(offsets)))


def test_topic_column_and_default_partitioner(
    spark: Any, broker: BrokerProcess, admin: Any, unique: str
) -> None:
    a, b = f"col-a-{unique}", f"col-b-{unique}"
    create_topic(admin, a, 2)
    create_topic(admin, b, 1)
    df = spark.createDataFrame(
        [(a, "same-key", "1"), (b, None, "2"), (a, "same-key", "3")],
        "topic string, key string, value string",
    )
    df.write.format("tierlog").option("kafka.bootstrap.servers", broker.bootstrap).mode(
        "append"
    ).save()
    rows_a = read_back(spark, broker, a)
    assert sorted(bytes(r["value"]) for r in rows_a) == [b"1", b"3"]
    assert len({r["partition"] for r in rows_a}) == 1  # one key, one partition
    rows_b = read_back(spark, broker, b)
    assert [(r["key"], bytes(r["value"])) for r in rows_b] == [(None, b"2")]


@pytest.mark.parametrize(
    ("select", "options", "message"),
    [
        ("select 'x' as value", {}, "topic option required"),
        ("select 1 as value", {"topic": "t"}, "Value attribute type must be a string or binary"),
        ("select 'k' as key", {"topic": "t"}, "Required attribute 'value' not found"),
        ("select 'x' as value, 1L as partition", {"topic": "t"}, "Partition attribute type"),
        ("select 'x' as value, 5 as topic", {}, "Topic type must be a string"),
        ("select 'x' as value", {"topic": "t", "kafka.acks": "0"}, "acks=all"),
        ("select 'x' as value", {"topic": "t", "kafka.no.such.setting": "1"}, "configuration"),
    ],
)
def test_write_errors(
    spark: Any, broker: BrokerProcess, select: str, options: dict[str, str], message: str
) -> None:
    w = (
        spark.sql(select)
        .write.format("tierlog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
    )
    for k, v in options.items():
        w = w.option(k, v)
    with pytest.raises(Exception, match=message):
        w.mode("append").save()


def test_overwrite_is_refused(spark: Any, broker: BrokerProcess) -> None:
    w = spark.sql("select 'x' as value").write.format("tierlog")
    with pytest.raises(Exception, match="Overwrite not allowed"):
        w.option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "t").mode(
            "overwrite"
        ).save()


def test_delivery_failure_fails_the_write(spark: Any, broker: BrokerProcess) -> None:
    # A partition that does not exist: librdkafka reports UNKNOWN_PARTITION for the record,
    # the task fails instead of dropping it.
    df = spark.sql("select 'x' as value, 99 as partition")
    with pytest.raises(Exception, match=r"(?i)delivery to .* failed.*partition"):
        df.write.format("tierlog").option("kafka.bootstrap.servers", broker.bootstrap).option(
            "topic", "no-such-topic-for-writes"
        ).option("kafka.message.timeout.ms", "3000").mode("append").save()
