"""Option parsing of the tierlog data source (Spark's Kafka source options). No Spark needed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tierlog.errors import ConfigError
from tierlog.spark.options import (
    OffsetSpec,
    parse_sink_options,
    parse_source_options,
    partition_offsets_json,
)
from tierlog.spark.planning import OffsetRange, RangeConstraints, plan_ranges, split_ranges

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def src(streaming: bool | None = False, **options: Any) -> Any:
    return parse_source_options({**BASE, **options}, streaming=streaming)


def test_defaults() -> None:
    o = src(subscribe="a, b,,a")
    assert o.strategy == "subscribe" and o.topics == ("a", "b")
    assert o.starting == OffsetSpec("earliest") and o.ending == OffsetSpec("latest")
    assert o.fail_on_data_loss and not o.include_headers and not o.read_committed
    assert src(True, subscribe="a").starting == OffsetSpec("latest")
    assert o.remote is None


def test_names_are_case_insensitive() -> None:
    o = parse_source_options(
        {"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "ev.*", "INCLUDEHEADERS": "TRUE"},
        streaming=False,
    )
    assert o.strategy == "subscribePattern" and o.include_headers
    assert o.matches("events", False) and not o.matches("xevents", False)
    assert not o.matches("ev__internal", True)


def test_offsets_json_and_timestamps() -> None:
    o = src(
        assign='{"t":[0,1]}',
        startingOffsets='{"t":{"0":23,"1":-2}}',
        endingOffsets='{"t":{"0":-1,"1":50}}',
    )
    assert o.assigned == (("t", 0), ("t", 1))
    assert o.starting.offsets == {("t", 0): 23, ("t", 1): -2}
    assert o.ending.offsets == {("t", 0): -1, ("t", 1): 50}
    assert partition_offsets_json(o.starting.offsets) == '{"t":{"0":23,"1":-2}}'
    o = src(subscribe="t", startingTimestamp="1000", endingOffsetsByTimestamp='{"t":{"0":5000}}')
    assert o.starting == OffsetSpec("timestamp", timestamp=1000)
    assert o.ending.kind == "timestamps" and o.ending.offsets == {("t", 0): 5000}
    o = src(subscribe="t", startingTimestamp="7", startingOffsetsByTimestampStrategy="LATEST")
    assert o.starting.strategy == "latest"


@pytest.mark.parametrize(
    ("options", "key", "message"),
    [
        ({}, "subscribe", "One of the following options must be specified"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "assign", "Only one of the following"),
        ({"subscribe": " , "}, "subscribe", "No topics to subscribe to"),
        ({"subscribePattern": " "}, "subscribePattern", "Pattern to subscribe is empty"),
        ({"subscribePattern": "(("}, "subscribePattern", "not a valid regex"),
        ({"assign": "t"}, "assign", "No topicpartitions to assign"),
        ({"assign": '{"t":["x"]}'}, "assign", "list of ints"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "startingOffsets", "can't be latest"),
        (
            {"subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'},
            "startingOffsets",
            "can't be latest",
        ),
        ({"subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets", "can't be earliest"),
        ({"subscribe": "t", "startingOffsets": "{bad"}, "startingOffsets", "expected JSON"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, "startingOffsets", "-3"),
        ({"subscribe": "t", "startingTimestamp": "x"}, "startingTimestamp", "single long"),
        (
            {"subscribe": "t", "startingTimestamp": "1", "startingOffsets": "earliest"},
            "startingTimestamp",
            "only one of",
        ),
        (
            {
                "subscribe": "t",
                "startingOffsets": '{"t":{"0":9}}',
                "endingOffsets": '{"t":{"0":3}}',
            },
            "startingOffsets",
            "greater than the ending",
        ),
        (
            {
                "subscribe": "t",
                "startingOffsets": '{"t":{"0":1}}',
                "endingOffsets": '{"u":{"0":3}}',
            },
            "endingOffsets",
            "different partitions",
        ),
        (
            {"subscribe": "t", "startingOffsetsByTimestampStrategy": "maybe"},
            "startingOffsetsByTimestampStrategy",
            "error or latest",
        ),
        ({"subscribe": "t", "minPartitions": "0"}, "minPartitions", "must be positive"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "x"}, "maxOffsetsPerTrigger", "integer"),
        ({"subscribe": "t", "failOnDataLoss": "yes"}, "failOnDataLoss", "true or false"),
        (
            {"subscribe": "t", "kafka.auto.offset.reset": "x"},
            "kafka.auto.offset.reset",
            "startingOffsets",
        ),
        (
            {"subscribe": "t", "kafka.value.deserializer": "x"},
            "kafka.value.deserializer",
            "byte arrays",
        ),
        (
            {"subscribe": "t", "kafka.enable.auto.commit": "x"},
            "kafka.enable.auto.commit",
            "not supported",
        ),
        (
            {"subscribe": "t", "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "x"},
            "kafka.sasl.mechanism",
            "X is not supported",
        ),
        (
            {"subscribe": "t", "kafka.security.protocol": "TLS"},
            "kafka.security.protocol",
            "not one of PLAINTEXT",
        ),
        (
            {
                "subscribe": "t",
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-256",
            },
            "kafka.sasl.jaas.config",
            "ScramLoginModule required",
        ),
        (
            {
                "subscribe": "t",
                "kafka.security.protocol": "SSL",
                "kafka.ssl.truststore.location": "/nonexistent/ca.pem",
            },
            "kafka.ssl.truststore.location",
            "cannot read",
        ),
        ({"subscribe": "t", "kafka.ssl.nonsense": "x"}, "kafka.ssl.nonsense", "not supported"),
        (
            {"subscribe": "t", "kafka.isolation.level": "x"},
            "kafka.isolation.level",
            "read_committed",
        ),
        ({"subscribe": "t", "topic": "x"}, "topic", "write option"),
        ({"subscribe": "t", "subscribeTopics": "x"}, "subscribeTopics", "unknown option"),
        ({"subscribe": "t", "minOffsetsPerTrigger": "5"}, "minOffsetsPerTrigger", "not supported"),
        ({"subscribe": "t", "tierlog.remote.s3.endpoint": "x"}, "tierlog.remote.uri", "required"),
        ({"subscribe": "t", "tierlog.remote.bucket": "x"}, "tierlog.remote.bucket", "unknown"),
        ({"subscribe": "t", "path": "x"}, "path", "no path"),
    ],
)
def test_bad_batch_options(options: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        src(**options)
    assert info.value.key == key
    assert isinstance(info.value, ValueError)


def test_bootstrap_servers_are_required() -> None:
    with pytest.raises(ConfigError, match="must be specified") as info:
        parse_source_options({"subscribe": "t"}, streaming=False)
    assert info.value.key == "kafka.bootstrap.servers"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("endingOffsets", "latest"),
        ("endingTimestamp", "5"),
        ("endingOffsetsByTimestamp", '{"t":{"0":5}}'),
    ],
)
def test_ending_options_are_refused_in_streams(option: str, value: str) -> None:
    with pytest.raises(ConfigError, match="not valid in streaming queries"):
        src(True, subscribe="t", **{option: value})
    src(None, subscribe="t", **{option: value})  # schema(): direction not known yet


def test_stream_options() -> None:
    o = src(True, subscribe="t", startingOffsets="latest", maxOffsetsPerTrigger="100")
    assert o.max_offsets_per_trigger == 100 and o.starting.kind == "latest"


def test_reader_kafka_options_and_remote() -> None:
    o = src(
        subscribe="t",
        **{
            "kafka.isolation.level": "read_uncommitted",
            "kafka.max.partition.fetch.bytes": "1024",
            "kafka.client.id": "me",
            "kafka.group.id": "ignored",
            "groupIdPrefix": "ignored",
            "kafkaConsumer.pollTimeoutMs": "5000",
            "tierlog.remote.uri": "s3://bucket/prefix",
            "tierlog.remote.s3.endpoint": "http://127.0.0.1:1",
        },
    )
    assert not o.read_committed and o.max_partition_fetch_bytes == 1024
    assert o.client_id == "me" and o.request_timeout_ms == 5000
    assert o.remote == {"uri": "s3://bucket/prefix", "s3.endpoint": "http://127.0.0.1:1"}


def test_sink_options() -> None:
    o = parse_sink_options({**BASE, "topic": " out ", "kafka.linger.ms": "20"})
    assert o.topic == "out" and o.producer_config == {"linger.ms": "20"}
    assert parse_sink_options(BASE).topic is None
    for options, key in [
        ({"kafka.acks": "1"}, "kafka.acks"),
        ({"kafka.enable.idempotence": "false"}, "kafka.enable.idempotence"),
        ({"kafka.key.serializer": "x"}, "kafka.key.serializer"),
        ({"subscribe": "t"}, "subscribe"),
        ({"startingOffsets": "earliest"}, "startingOffsets"),
        ({"topic": " "}, "topic"),
        ({"colour": "red"}, "colour"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse_sink_options({**BASE, **options})
        assert info.value.key == key, options
    assert parse_sink_options({**BASE, "kafka.acks": "all"}).producer_config == {"acks": "all"}


# ------------------------------------------------------------------------------ planning


def test_plan_cuts_ranges_at_remote_segments() -> None:
    from tests.spark.tiering import segment_metadata
    from tierlog.spark.planning import PartitionLayout

    segs = (segment_metadata("t", 0, 0, 99), segment_metadata("t", 0, 100, 199))
    layouts = {("t", 0): PartitionLayout(0, 250, "h:1", segs), ("t", 1): PartitionLayout(0, 9, "")}
    ranges = plan_ranges({("t", 0): (50, 250), ("t", 1): (0, 9)}, layouts)
    assert [(r.partition, r.start, r.end, r.segment is not None) for r in ranges] == [
        (0, 50, 100, True),
        (0, 100, 200, True),
        (0, 200, 250, False),
        (1, 0, 9, False),
    ]
    assert ranges[0].segment is segs[0] and ranges[0].leader == "h:1"


def test_split_ranges_min_partitions_and_max_records() -> None:
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10)]
    cut = split_ranges(ranges, min_partitions=10)
    assert sum(r.size for r in cut) == 1010 and len(cut) >= 10
    assert [r.partition for r in cut].count(1) == 1  # small ranges are not shredded
    assert all(a.end == b.start for a, b in itertools.pairwise(cut) if a.partition == b.partition)
    cut = split_ranges(ranges, max_records_per_partition=300)
    assert [r.size for r in cut] == [250, 250, 250, 250, 10]
    assert split_ranges(ranges, min_partitions=1) == ranges


def test_pack_ranges_packs_small_consecutive_ranges_of_one_partition() -> None:
    from tests.spark.tiering import segment_metadata
    from tierlog.spark.planning import pack_ranges

    # Partition 0: four remote segments of 100 offsets and 1000 bytes, then a broker tail
    # (estimated at 10 bytes per offset); partition 1: broker only (no estimate).
    segs = [segment_metadata("t", 0, i * 100, i * 100 + 99, size=1000) for i in range(4)]
    ranges = [OffsetRange("t", 0, s.start_offset, s.end_offset + 1, segment=s) for s in segs]
    ranges += [
        OffsetRange("t", 0, 400, 450),
        OffsetRange("t", 1, 0, 10),
        OffsetRange("t", 1, 10, 20),
    ]

    def shape(groups: list[tuple[OffsetRange, ...]]) -> list[list[tuple[int, int]]]:
        return [[(r.partition, r.start) for r in g] for g in groups]

    assert shape(pack_ranges(ranges, 2500)) == [
        [(0, 0), (0, 100)],
        [(0, 200), (0, 300), (0, 400)],  # 2000 + the tail's 500
        [(1, 0)],  # nothing known about partition 1's size: alone
        [(1, 10)],
    ]
    assert shape(pack_ranges(ranges, 10**9))[0] == [(0, 0), (0, 100), (0, 200), (0, 300), (0, 400)]
    assert pack_ranges(ranges, 0) == [(r,) for r in ranges]
    # A range read from the middle of a segment counts its share of the segment's bytes.
    half = OffsetRange("t", 0, 50, 100, segment=segs[0])
    assert shape(pack_ranges([half, *ranges[1:3]], 2000)) == [[(0, 50), (0, 100)], [(0, 200)]]


def test_max_partition_bytes_option() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    assert parse_source_options(base, streaming=False).max_partition_bytes == 512 << 20
    opts = parse_source_options({**base, "tierlog.maxPartitionBytes": "0"}, streaming=False)
    assert opts.max_partition_bytes == 0
    with pytest.raises(ConfigError) as info:
        parse_source_options({**base, "tierlog.maxPartitionBytes": "-1"}, streaming=False)
    assert info.value.key == "tierlog.maxPartitionBytes"


def test_range_constraints() -> None:
    c = RangeConstraints()
    c.offsets_between(10, None)
    c.offsets_between(None, 20)
    c.only_partitions([1, 2])
    c.only_partitions([2, 3])
    assert c.keep(("t", 2)) and not c.keep(("t", 1))
    assert c.narrow(0, 100) == (10, 21)
    assert c.narrow(30, 100) == (30, 30)
