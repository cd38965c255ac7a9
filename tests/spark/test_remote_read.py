"""Direct remote reads: data partly remote, partly local; on a local dir and on SeaweedFS (S3),
where the objects are encrypted at rest (``rsm.config.encryption.*``: the broker encrypts, the
Spark source decrypts with the same ``tierlog.remote.encryption.*`` key).

The broker tiers the topic's rolled segments and deletes their local copies
(tests/spark/tiering.py); the active segments stay local only. Reading with
``tierlog.remote.*`` options must give exactly the rows reading through the broker (which then
serves the remote offsets itself) gives.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import BrokerProcess, create_topic, produce
from tests.spark.test_batch_read import as_dicts
from tests.spark.tiering import TIERED_TOPIC_CONFIGS, tiering_overrides, wait_until_tiered
from tierlog.spark.options import parse_source_options
from tierlog.spark.planning import Planner
from tierlog.tiered import RemoteLogSegmentMetadata

T0 = 1_700_000_000_000
TOPIC = "tiered"
PER_PARTITION = 1500


@dataclass
class Tiered:
    broker: BrokerProcess
    remote: dict[str, str]  # tierlog.remote.* options
    segments: list[RemoteLogSegmentMetadata]
    remote_dir: Path | None

    def options(self, **extra: str) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.broker.bootstrap,
            "subscribe": TOPIC,
            **{f"tierlog.remote.{k}": v for k, v in self.remote.items()},
            **extra,
        }


@pytest.fixture(
    scope="module", params=["local-dir", pytest.param("seaweedfs", marks=pytest.mark.s3)]
)
def tiered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp(f"tiered-{request.param}")
    remote_dir = None
    if request.param == "seaweedfs":
        sw = request.getfixturevalue("seaweedfs")
        key_file = workdir / "remote.key"
        key_file.write_bytes(os.urandom(32))
        rsm_config = {
            "uri": f"s3://{sw.bucket}/{uuid.uuid4().hex}",
            "s3.endpoint": sw.endpoint,
            "s3.region": "us-east-1",
            "s3.access.key": sw.access_key,
            "s3.secret.key": sw.secret_key,
            "encryption.enabled": "true",
            "encryption.key.file": str(key_file),
        }
    else:
        remote_dir = workdir / "remote"
        rsm_config = {"uri": f"file://{remote_dir}"}
    broker = BrokerProcess(workdir, *tiering_overrides(rsm_config))
    broker.start()
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_topic(
            admin,
            TOPIC,
            2,
            **{"segment.bytes": "32768", "index.interval.bytes": "2048", **TIERED_TOPIC_CONFIGS},
        )
        for start in range(0, PER_PARTITION, 250):
            produce(
                broker.bootstrap,
                TOPIC,
                [
                    {
                        "key": b"k%d" % i,
                        "value": b"%05d" % i + bytes(95),
                        "partition": p,
                        "timestamp": T0 + i,
                        "headers": [("n", b"%d" % i)] if i % 5 == 0 else [],
                    }
                    for p in range(2)
                    for i in range(start, start + 250)
                ],
                **{"compression.type": "lz4" if start % 500 else "none", "batch.size": 16384},
            )
        segments = wait_until_tiered(broker.bootstrap, TOPIC, workdir / "logs", rsm_config)
        yield Tiered(broker, rsm_config, segments, remote_dir)
    finally:
        broker.stop()


def read(spark: Any, options: dict[str, str]) -> Any:
    r = spark.read.format("tierlog")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def stream_available_now(
    spark: Any, options: dict[str, str], checkpoint: Path
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every row a streaming read with availableNow delivers
    from ``checkpoint`` on."""
    seen: list[tuple[int, int, bytes]] = []

    def collect(df: Any, batch_id: int) -> None:
        rows = df.select("partition", "offset", "value").collect()
        seen.extend((r["partition"], r["offset"], bytes(r["value"])) for r in rows)

    r = spark.readStream.format("tierlog")
    for k, v in options.items():
        r = r.option(k, v)
    q = (
        r.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120) and q.exception() is None
    return seen


def test_most_data_is_remote(tiered: Tiered) -> None:
    for p in range(2):
        segs = [s for s in tiered.segments if s.topic_id_partition.partition == p]
        assert len(segs) >= 3
        assert segs[-1].end_offset + 1 >= PER_PARTITION // 2  # at least half is tiered
        assert segs[-1].end_offset + 1 < PER_PARTITION  # and the tail is local only
    opts = parse_source_options(tiered.options(), streaming=False)
    with Planner(opts) as planner:
        ranges = planner.plan_batch()
    remote = [r for r in ranges if r.segment is not None]
    assert len(remote) == len(tiered.segments)  # one input partition per remote segment
    assert {r.partition for r in ranges if r.segment is None} == {0, 1}  # plus the tails
    assert sum(r.size for r in ranges) == 2 * PER_PARTITION


def test_same_rows_from_remote_storage_and_through_the_broker(spark: Any, tiered: Tiered) -> None:
    direct = read(spark, tiered.options(includeHeaders="true"))
    # The small segments of a partition and its tail are packed into one Spark partition...
    assert direct.rdd.getNumPartitions() == 2
    # ...unless packing is off: then one per remote segment plus the tails.
    unpacked = read(
        spark, tiered.options(includeHeaders="true", **{"tierlog.maxPartitionBytes": "0"})
    )
    assert unpacked.rdd.getNumPartitions() == len(tiered.segments) + 2
    assert as_dicts(unpacked) == as_dicts(direct)
    through_broker = {
        k: v for k, v in tiered.options(includeHeaders="true").items() if "remote" not in k
    }
    rows = as_dicts(direct)
    assert rows == as_dicts(read(spark, through_broker))
    assert len(rows) == 2 * PER_PARTITION
    assert [r["offset"] for r in rows if r["partition"] == 1] == list(range(PER_PARTITION))
    first = rows[0]
    assert first["key"] == b"k0" and first["value"] == b"00000" + bytes(95)
    assert first["headers"] == [{"key": "n", "value": b"0"}]
    assert first["timestamp"] == T0


def test_ranges_inside_segments_and_split(spark: Any, tiered: Tiered) -> None:
    # Start in the middle of a remote segment (offset index lookup), end in the local tail,
    # and split into more pieces than there are segments.
    seg = [s for s in tiered.segments if s.topic_id_partition.partition == 0][1]
    start = (seg.start_offset + seg.end_offset) // 2
    options = tiered.options(
        startingOffsets=f'{{"{TOPIC}":{{"0":{start},"1":-2}}}}',
        endingOffsets=f'{{"{TOPIC}":{{"0":{PER_PARTITION - 3},"1":-1}}}}',
        minPartitions="40",
    )
    options.pop("subscribe")
    options["assign"] = f'{{"{TOPIC}":[0,1]}}'
    df = read(spark, options)
    assert df.rdd.getNumPartitions() >= 40
    got = sorted((r["partition"], r["offset"], bytes(r["value"][:5])) for r in df.collect())
    want = [(0, i, b"%05d" % i) for i in range(start, PER_PARTITION - 3)] + [
        (1, i, b"%05d" % i) for i in range(PER_PARTITION)
    ]
    assert got == want


def test_remote_objects_are_what_is_read(spark: Any, tiered: Tiered, tmp_path: Path) -> None:
    """Break the remote copy (not the broker's): the direct read fails, so it did read it."""
    if tiered.remote_dir is not None:
        broken = tmp_path / "broken"
        shutil.copytree(tiered.remote_dir, broken)
        for obj in broken.rglob("*.log"):
            data = bytearray(obj.read_bytes())
            data[200] ^= 0xFF
            obj.write_bytes(bytes(data))
        options = tiered.options()
        options["tierlog.remote.uri"] = f"file://{broken}"
        match = "corrupt|CRC|Corrupt"
    else:
        # encrypted at rest: another key cannot read the objects, and says why
        other = tmp_path / "other.key"
        other.write_bytes(os.urandom(32))
        options = tiered.options()
        options["tierlog.remote.encryption.key.file"] = str(other)
        with pytest.raises(Exception, match="encrypted with another key"):
            read(spark, options).count()
        options = tiered.options()
        options["tierlog.remote.s3.secret.key"] = "wrong"
        match = "(?i)s3|access|signature|denied|forbidden"
    with pytest.raises(Exception, match=match):
        read(spark, options).count()


def test_stream_with_remote_reads(spark: Any, tiered: Tiered, tmp_path: Path) -> None:
    options = tiered.options(startingOffsets="earliest", maxOffsetsPerTrigger="1000")
    rows = stream_available_now(spark, options, tmp_path / "cp")
    assert sorted((p, o) for p, o, _ in rows) == [
        (p, i) for p in range(2) for i in range(PER_PARTITION)
    ]


# It deletes objects of a copy of the local-dir store, so it runs on that backend only.
@pytest.mark.parametrize("tiered", ["local-dir"], indirect=True)
def test_deleted_remote_segment_falls_back_to_the_broker(tiered: Tiered, tmp_path: Path) -> None:
    """A segment deleted from remote storage after planning (retention) is read through the
    broker instead, from where the remote read got to: no gap, no duplicate."""
    from tierlog.spark.read import read_range

    assert tiered.remote_dir is not None
    copy = tmp_path / "remote"
    shutil.copytree(tiered.remote_dir, copy)
    options = parse_source_options(
        {**tiered.options(), "tierlog.remote.uri": f"file://{copy}"}, streaming=False
    )
    with Planner(options) as planner:
        ranges = [r for r in planner.plan_batch() if r.segment is not None]
    target = ranges[1]
    assert target.segment is not None
    objects = list(copy.glob(f"*/{target.partition}/{target.segment.start_offset:020d}-*"))
    assert len(objects) == 2  # .log and .indexes
    for obj in objects:
        obj.unlink()
    offsets = [
        o for batch in read_range(target, options) for o in batch.column("offset").to_pylist()
    ]
    assert offsets == list(range(target.start, target.end))


def test_by_timestamps_across_remote_and_local(spark: Any, tiered: Tiered) -> None:
    """startingTimestamp / endingTimestamp: the window starts inside a remote segment (found
    with the remote time indexes) and ends in the local tail; every column is exact."""
    lo, hi = T0 + 300, T0 + PER_PARTITION - 100  # record i has timestamp T0 + i
    options = tiered.options(
        includeHeaders="true", startingTimestamp=str(lo), endingTimestamp=str(hi)
    )
    rows = as_dicts(read(spark, options))
    assert rows == as_dicts(
        read(spark, {k: v for k, v in options.items() if not k.startswith("tierlog.remote.")})
    )
    want = [(p, i) for p in range(2) for i in range(300, PER_PARTITION - 100)]
    assert sorted((r["partition"], r["offset"]) for r in rows) == want
    for r in rows:
        i = r["offset"]
        assert r["timestamp"] == T0 + i and r["key"] == b"k%d" % i
        assert r["value"] == b"%05d" % i + bytes(95)
        assert r["headers"] == ([{"key": "n", "value": b"%d" % i}] if i % 5 == 0 else None)


def test_write_tier_stream_write_more_restart(spark: Any, tiered: Tiered, tmp_path: Path) -> None:
    """Rows written with Spark are tiered by the broker; a stream (availableNow) reads them,
    remote segments straight from remote storage; more rows are written; the restarted stream
    reads exactly the new rows, once."""
    from confluent_kafka.admin import AdminClient

    topic = f"tiered-stream-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": tiered.broker.bootstrap})
    create_topic(admin, topic, 2, **{"segment.bytes": "32768", **TIERED_TOPIC_CONFIGS})

    def write(start: int, stop: int) -> None:
        df = spark.createDataFrame(
            [(b"k%d" % i, b"%05d" % i + bytes(95), i % 2) for i in range(start, stop)],
            "key binary, value binary, partition int",
        )
        (
            df.write.format("tierlog")
            .option("kafka.bootstrap.servers", tiered.broker.bootstrap)
            .option("topic", topic)
            .option("kafka.batch.size", "16384")  # batches must fit a 32 KiB segment
            .mode("append")
            .save()
        )

    def stream() -> list[bytes]:
        options = {**tiered.options(startingOffsets="earliest"), "subscribe": topic}
        return sorted(v[:5] for _, _, v in stream_available_now(spark, options, tmp_path / "cp"))

    write(0, 1200)
    segments = wait_until_tiered(
        tiered.broker.bootstrap, topic, tiered.broker.workdir / "logs", tiered.remote
    )
    assert {s.topic_id_partition.partition for s in segments} == {0, 1}
    assert stream() == [b"%05d" % i for i in range(1200)]
    write(1200, 1500)
    assert stream() == [b"%05d" % i for i in range(1200, 1500)]
