"""Spark read of a tiered transactional topic vs the same topic written without transactions
(issue 11; goal >= 0.9).

Two topics of N records of 100 bytes (2 partitions, batches of 1,000 records, 8 MiB
segments), written offline with ``Log.append``: ``plain``, batches without producer ids, and
``txn``, the same batches each the one batch of a transaction of its own producer, ended by a
COMMIT marker (as a transactional producer writing 1,000 records per transaction and its
coordinator would). A real ``tierlog serve`` then tiers both (local-dir remote storage, local
copies deleted; the active segments stay local). Measured after a warm-up: a full-column
aggregation of each topic with ``format("tierlog")``, ``kafka.isolation.level=read_committed``
and direct remote reads, interleaved ``BENCH_SPARK_REPEAT`` times (default 2), best run each.
The ratio is the transactional topic's rows/s over the plain one's.

N = 4,000,000 (``BENCH_SPARK_RECORDS`` overrides; ``BENCH_QUICK=1``: 1,000,000).

    .venv/bin/python bench/bench_spark_txn.py
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_spark import Broker, aggregate, session, timed  # noqa: E402
from tests.spark.tiering import (  # noqa: E402
    TIERED_TOPIC_CONFIGS,
    tiering_overrides,
    wait_until_tiered,
)

from tierlog.log.log_config import LogConfig  # noqa: E402
from tierlog.log.log_manager import LogManager  # noqa: E402
from tierlog.records import (  # noqa: E402
    CONTROL_TYPE_COMMIT,
    EndTransactionMarker,
    RecordBatchBuilder,
    build_end_txn_marker_batch,
)

QUICK = bool(os.environ.get("BENCH_QUICK"))
RECORDS = int(os.environ.get("BENCH_SPARK_RECORDS", 1_000_000 if QUICK else 4_000_000))
PARTITIONS = 2
BATCH_RECORDS = 1000
SEGMENT_BYTES = 8 << 20
REPEAT = int(os.environ.get("BENCH_SPARK_REPEAT", 2))
T0 = 1_700_000_000_000
TOPICS = ("plain", "txn")


def batch(values: list[bytes], ts: int, producer_id: int = -1) -> bytes:
    b = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=producer_id >= 0,
    )
    for i, v in enumerate(values):
        b.append(ts + i, b"k%07d" % i, v)
    return b.build()


def build_logs(log_dir: Path) -> int:
    """Both topics, written offline; returns the records of each."""
    lm = LogManager([log_dir], LogConfig(), node_id=0)
    lm.startup()
    values = [[os.urandom(100) for _ in range(BATCH_RECORDS)] for _ in range(8)]
    batches = RECORDS // BATCH_RECORDS // PARTITIONS
    pid = random.randrange(10**12, 2 * 10**12)
    try:
        for topic in TOPICS:
            lm.create_topic(topic, PARTITIONS, {"segment.bytes": str(SEGMENT_BYTES)})
        for p in range(PARTITIONS):
            plain = lm.get_log("plain", p)
            txn = lm.get_log("txn", p)
            assert plain is not None and txn is not None
            for j in range(batches):
                ts = T0 + j * BATCH_RECORDS
                plain.append(batch(values[j % 8], ts))
                pid += 1
                txn.append(batch(values[j % 8], ts, pid))
                commit = EndTransactionMarker(CONTROL_TYPE_COMMIT, 0)
                marker = build_end_txn_marker_batch(
                    commit, producer_id=pid, producer_epoch=0, timestamp=ts + BATCH_RECORDS
                )
                txn.append(marker, origin_client=False, origin_coordinator=True)
            for lg in (plain, txn):
                lg.update_high_watermark(lg.log_end_offset)
    finally:
        lm.shutdown()
    return batches * BATCH_RECORDS * PARTITIONS


def enable_tiering(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in TIERED_TOPIC_CONFIGS.items()
    ]
    resources = [ConfigResource("topic", t, incremental_configs=entries) for t in TOPICS]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(30)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-spark-txn-"))
    broker: Broker | None = None
    spark: Any = None
    try:
        t0 = time.perf_counter()
        n = build_logs(tmp / "logs")
        remote = {"uri": f"file://{tmp / 'remote'}"}
        broker = Broker(tmp, *tiering_overrides(remote))
        enable_tiering(broker.bootstrap)
        tiered = {}
        for topic in TOPICS:
            segs = wait_until_tiered(broker.bootstrap, topic, tmp / "logs", remote, timeout=900)
            tiered[topic] = sum(s.end_offset - s.start_offset + 1 for s in segs)
        print(
            f"# {n:,} records of 100 bytes per topic in {PARTITIONS} partitions, tiered "
            f"{tiered['plain'] / n:.0%} (plain) / {tiered['txn'] / n:.0%} (txn, markers "
            f"included) of the offsets; setup {time.perf_counter() - t0:.0f} s; best of "
            f"{REPEAT} runs",
            flush=True,
        )
        spark = session("local[2]", tmp / "spark")

        def df(topic: str) -> Any:
            r = spark.read.format("tierlog")
            opts = {
                "kafka.bootstrap.servers": broker.bootstrap if broker else "",
                "subscribe": topic,
                "kafka.isolation.level": "read_committed",
                **{f"tierlog.remote.{k}": v for k, v in remote.items()},
            }
            for k, v in opts.items():
                r = r.option(k, v)
            return r.load()

        for topic in TOPICS:  # warm-up, and the answers
            row = aggregate(df(topic))
            assert row["keys"] == n and row["value_bytes"] == 100 * n, (topic, row)
        best: dict[str, float] = {}
        for _ in range(REPEAT):
            for topic in TOPICS:
                dt, _ = timed(lambda t=topic: aggregate(df(t)))
                best[topic] = max(best.get(topic, 0.0), n / dt)
        print(f"spark aggregation, plain topic: {best['plain']:,.0f} rows/s", flush=True)
        print(
            f"spark aggregation, transactional topic (read_committed): {best['txn']:,.0f} rows/s "
            f"({best['txn'] / best['plain']:.2f} vs plain, goal >= 0.9)",
            flush=True,
        )
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
