"""Spark reads of a tierlog topic: the ``tierlog`` data source vs Parquet vs a Kafka consumer.

Prints ``name: value unit (ratio vs baseline)``. The data (not timed): a topic of N records
with 100-byte values (8-byte keys, uncompressed batches of 1000 records, 4 partitions,
64 MiB segments) written straight into a broker log dir; the same rows, decoded once,
written to a Parquet file. Then a real ``tierlog serve`` on that log dir with a local-dir
remote storage and tiered storage turned on for the topic (AlterConfigs): the broker tiers
every rolled segment (about 90 % of the records; the active segments stay local) and deletes
the local copies (tests/spark/tiering.py) before anything is measured. Then a local
SparkSession.

Measured after a warm-up query (Python workers started), each query ``BENCH_SPARK_REPEAT``
times (default 2, interleaved; the best is printed: the machines are shared and noisy):

* ``count()`` and a full-column aggregation (every column read) with ``format("tierlog")``,
  remote segments read straight from remote storage — vs the same on the Parquet file
  (goal: >= 0.5 of Parquet); the aggregation also with one Spark task per remote segment
  (``tierlog.maxPartitionBytes=0``);
* the ceiling of PySpark's Python data source path on this machine: a trivial Python data
  source yielding the same rows as Arrow batches read by pyarrow's C++ Parquet reader;
* the same through the broker only (no ``tierlog.remote.*`` options);
* a confluent-kafka consumer (``assign()``, no group) reading every record through the broker
  (goal: the direct Spark read >= 3x faster);
* scaling: the aggregation with ``local[1]`` vs ``local[2]``.

N = 10,000,000 (``BENCH_SPARK_RECORDS`` overrides; ``BENCH_QUICK=1``: 1,000,000).

    .venv/bin/python bench/bench_spark.py
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.compute  # noqa: E402 - pa.compute
import pyarrow.parquet as pq  # noqa: E402
from tests.spark.tiering import (  # noqa: E402
    TIERED_TOPIC_CONFIGS,
    tiering_overrides,
    wait_until_tiered,
)

from tierlog.log.log_config import LogConfig  # noqa: E402
from tierlog.log.log_manager import LogManager  # noqa: E402
from tierlog.records import build_batch  # noqa: E402
from tierlog.spark.arrow_decode import PartitionDecoder  # noqa: E402

QUICK = bool(os.environ.get("BENCH_QUICK"))
RECORDS = int(os.environ.get("BENCH_SPARK_RECORDS", 1_000_000 if QUICK else 10_000_000))
PARTITIONS = 4
BATCH_RECORDS = 1000
#: 64 MiB segments (about four per partition at 10 M records); smaller for small runs.
SEGMENT_BYTES = min(64 << 20, max(1 << 20, RECORDS * 115 // PARTITIONS // 4))
TOPIC = "bench"
REPEAT = int(os.environ.get("BENCH_SPARK_REPEAT", 2))
#: One Spark task per remote segment (no packing of small segments).
UNPACKED = {"tierlog.maxPartitionBytes": "0"}
T0 = 1_700_000_000_000


def report(name: str, value: float, unit: str, ratio: float | None = None, goal: str = "") -> None:
    tail = f" ({ratio:.2f} vs baseline{', goal ' + goal if goal else ''})" if ratio else ""
    print(f"{name}: {value:,.0f} {unit}{tail}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------ data


def build_log(log_dir: Path) -> int:
    """The topic, written offline with Log.append; returns the number of records."""
    lm = LogManager([log_dir], LogConfig(), node_id=0)
    lm.startup()
    try:
        lm.create_topic(TOPIC, PARTITIONS, {"segment.bytes": str(SEGMENT_BYTES)})
        templates = [
            build_batch(
                [
                    (T0 + b * BATCH_RECORDS + i, b"k%07d" % i, os.urandom(100))
                    for i in range(BATCH_RECORDS)
                ]
            )
            for b in range(8)
        ]
        batches = RECORDS // BATCH_RECORDS // PARTITIONS
        for p in range(PARTITIONS):
            log = lm.get_log(TOPIC, p)
            assert log is not None
            for j in range(batches):
                log.append(templates[j % len(templates)])
    finally:
        lm.shutdown()
    return batches * BATCH_RECORDS * PARTITIONS


def write_parquet(log_dir: Path, path: Path) -> None:
    """The same rows, decoded from the segment files, as one Parquet file."""
    writer: pq.ParquetWriter | None = None
    for p in range(PARTITIONS):
        decoder = PartitionDecoder(TOPIC, p, 0, 2**62)
        for seg in sorted((log_dir / f"{TOPIC}-{p}").glob("*.log")):
            result = decoder.decode(seg.read_bytes())
            if result.batch is None:
                continue
            if writer is None:
                writer = pq.ParquetWriter(path, result.batch.schema)
            writer.write_table(pa.Table.from_batches([result.batch]))
    assert writer is not None
    writer.close()


def enable_tiering(bootstrap: str) -> None:
    """Turn tiered storage on for the topic (written offline without it)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in TIERED_TOPIC_CONFIGS.items()
    ]
    resource = ConfigResource("topic", TOPIC, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


class Broker:
    def __init__(self, workdir: Path, *overrides: str) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "tierlog.cli", "serve"]
        for o in (
            f"listeners=PLAINTEXT://{self.bootstrap}",
            f"log.dirs={workdir / 'logs'}",
            "log.retention.ms=-1",  # the records carry fixed 2023 timestamps
            *overrides,
        ):
            args += ["--override", o]
        self.log = open(workdir / "broker.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("broker did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


# ------------------------------------------------------------------------------ spark


def session(master: str, tmp: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # every Spark socket on loopback
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tierlog.spark import TierlogDataSource

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp))
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TierlogDataSource)
    return spark


def aggregate(df: Any) -> Any:
    """Every column is read: a full-column aggregation."""
    from pyspark.sql import functions as F

    return df.agg(
        F.count("key").alias("keys"),
        F.sum(F.length("value")).alias("value_bytes"),
        F.sum(F.length("topic")).alias("topic_chars"),
        F.sum("partition").alias("partitions"),
        F.max("offset").alias("max_offset"),
        F.min("timestamp").alias("min_timestamp"),
        F.sum("timestampType").alias("types"),
    ).collect()[0]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def consume_with_confluent_kafka(bootstrap: str, total: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    n = 0
    size = 0
    t0 = time.perf_counter()
    while n < total:
        for m in c.consume(10_000, timeout=5.0):
            if m.error() is None:
                n += 1
                size += len(m.value())
    dt = time.perf_counter() - t0
    c.close()
    return dt


def ceiling_source() -> Any:
    """A Python data source yielding the same rows from per-partition Parquet files with
    pyarrow (C++): what PySpark's Python data source path costs with (almost) free decoding."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from tierlog.spark.datasource import KAFKA_SCHEMA

    class CeilingReader(DataSourceReader):
        def __init__(self, files: list[str]) -> None:
            self.files = files

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(f) for f in self.files]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow.parquet as pq

            yield from pq.ParquetFile(partition.value).iter_batches(batch_size=100_000)

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pyarrow-parquet"

        def schema(self) -> str:
            return KAFKA_SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            return CeilingReader(self.options["files"].split(","))

    return CeilingSource


def best_of(results: dict[str, list[float]], name: str) -> float:
    return max(results[name])


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    broker: Broker | None = None
    spark: Any = None
    try:
        log_dir = tmp / "logs"
        t0 = time.perf_counter()
        n = build_log(log_dir)
        parquet = tmp / "bench.parquet"
        write_parquet(log_dir, parquet)
        per_partition = []
        table = pq.read_table(parquet)
        for p in range(PARTITIONS):
            path = tmp / f"part-{p}.parquet"
            pq.write_table(table.filter(pa.compute.equal(table["partition"], p)), path)
            per_partition.append(str(path))
        del table
        remote = {"uri": f"file://{tmp / 'remote'}"}
        broker = Broker(tmp, *tiering_overrides(remote))
        enable_tiering(broker.bootstrap)
        segments = wait_until_tiered(broker.bootstrap, TOPIC, log_dir, remote, timeout=900)
        tiered = sum(s.end_offset - s.start_offset + 1 for s in segments)
        print(
            f"# {n:,} records of 100 bytes in {PARTITIONS} partitions, {len(segments)} remote "
            f"segments tiered by the broker ({tiered / n:.0%} of the records, local-dir "
            f"backend, local copies deleted); setup {time.perf_counter() - t0:.0f} s; best of "
            f"{REPEAT} runs (shared, noisy machine)",
            flush=True,
        )
        options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": TOPIC}
        direct_options = {**options, **{f"tierlog.remote.{k}": v for k, v in remote.items()}}

        results: dict[str, list[float]] = {}

        def measure(name: str, fn: Callable[[], Any]) -> None:
            dt, _ = timed(fn)
            results.setdefault(name, []).append(n / dt)

        for master in ("local[2]", "local[1]"):
            spark = session(master, tmp / "spark")
            spark.dataSource.register(ceiling_source())

            def tierlog_df(opts: dict[str, str], s: Any = spark) -> Any:
                r = s.read.format("tierlog")
                for k, v in opts.items():
                    r = r.option(k, v)
                return r.load()

            def ceiling_df(s: Any = spark) -> Any:
                return s.read.format("pyarrow-parquet").option("files", ",".join(per_partition))

            # Warm-up: Python workers started, modules imported; checks the answers.
            tierlog_df({**direct_options, "maxRecordsPerPartition": "1000"}).limit(10).collect()
            assert tierlog_df(direct_options).count() == n
            row = aggregate(tierlog_df(options))
            assert row["keys"] == n and row["value_bytes"] == 100 * n, row
            suffix = "" if master == "local[2]" else " local[1]"
            for _ in range(REPEAT):
                measure("agg direct" + suffix, lambda: aggregate(tierlog_df(direct_options)))
                if suffix:
                    continue
                measure(
                    "agg direct unpacked",
                    lambda: aggregate(tierlog_df({**direct_options, **UNPACKED})),
                )
                measure("count direct", lambda: tierlog_df(direct_options).count())
                measure("count broker", lambda: tierlog_df(options).count())
                measure("agg broker", lambda: aggregate(tierlog_df(options)))
                measure("count parquet", lambda s=spark: s.read.parquet(str(parquet)).count())
                measure("agg parquet", lambda s=spark: aggregate(s.read.parquet(str(parquet))))
                measure("count ceiling", lambda: ceiling_df().load().count())
                measure("agg ceiling", lambda: aggregate(ceiling_df().load()))
            spark.stop()
            spark = None

        dt = consume_with_confluent_kafka(broker.bootstrap, n)
        results["confluent-kafka"] = [n / dt]

        def r(name: str) -> float:
            return best_of(results, name)

        report("parquet count()", r("count parquet"), "rows/s")
        report("parquet full-column aggregation", r("agg parquet"), "rows/s")
        report("confluent-kafka consumer through the broker", r("confluent-kafka"), "rows/s")
        report(
            "python data source ceiling (pyarrow parquet reader) count()",
            r("count ceiling"),
            "rows/s",
            r("count ceiling") / r("count parquet"),
        )
        report(
            "python data source ceiling (pyarrow parquet reader) aggregation",
            r("agg ceiling"),
            "rows/s",
            r("agg ceiling") / r("agg parquet"),
        )
        report(
            "tierlog count(), remote segments direct",
            r("count direct"),
            "rows/s",
            r("count direct") / r("count parquet"),
            ">= 0.5 of parquet",
        )
        report(
            "tierlog full-column aggregation, remote direct",
            r("agg direct"),
            "rows/s",
            r("agg direct") / r("agg parquet"),
            ">= 0.5 of parquet",
        )
        report(
            "tierlog full-column aggregation, remote direct, one task per segment",
            r("agg direct unpacked"),
            "rows/s",
            r("agg direct unpacked") / r("agg parquet"),
        )
        report(
            "tierlog full-column aggregation, remote direct vs ceiling",
            r("agg direct"),
            "rows/s",
            r("agg direct") / r("agg ceiling"),
        )
        report(
            "tierlog full-column aggregation, remote direct vs confluent-kafka",
            r("agg direct"),
            "rows/s",
            r("agg direct") / r("confluent-kafka"),
            ">= 3x",
        )
        report(
            "tierlog count(), everything through the broker",
            r("count broker"),
            "rows/s",
            r("count broker") / r("confluent-kafka"),
        )
        report(
            "tierlog full-column aggregation, through the broker",
            r("agg broker"),
            "rows/s",
            r("agg broker") / r("confluent-kafka"),
        )
        report("tierlog full-column aggregation, local[1]", r("agg direct local[1]"), "rows/s")
        report(
            "tierlog full-column aggregation, local[2] vs local[1]",
            r("agg direct"),
            "rows/s",
            r("agg direct") / r("agg direct local[1]"),
        )
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
