"""A day of page views: produce, let them tier, aggregate with Spark, write the results back.

Run from the repository root (needs the ``spark`` extra)::

    make example            # or: .venv/bin/python examples/daily_pipeline.py

What it does, with nothing but a temporary directory:

1. starts ``tierlog serve`` on a free loopback port with tiered storage on (remote storage in a
   local directory, 1 MiB segments, local retention of a few seconds), unless
   ``--bootstrap host:port`` points at a running broker;
2. produces one day of page-view events (JSON values, keyed by user, timestamps spread over
   yesterday) to ``page-views``;
3. waits (up to ``--tier-wait`` seconds) until the broker has copied segments to remote storage;
4. with Spark, reads exactly yesterday (``startingTimestamp`` / ``endingTimestamp``), remote
   segments straight from the remote storage directory, and counts views and distinct users
   per page and hour;
5. writes the hourly results as JSON to ``page-views-hourly`` and reads them back.

The same code runs against Kafka by changing ``format("tierlog")`` to ``format("kafka")``
(and dropping the ``tierlog.remote.*`` options).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/help", "/account", "/blog"]
SOURCE, RESULTS = "page-views", "page-views-hourly"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(workdir: Path, remote_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    overrides = [
        f"listeners=PLAINTEXT://{bootstrap}",
        f"log.dirs={workdir / 'logs'}",
        "log.retention.ms=-1",  # a day of history is kept; only local copies age out
        "remote.log.storage.system.enable=true",
        f"rsm.config.uri=file://{remote_dir}",
        "remote.log.manager.task.interval.ms=1000",
        "log.retention.check.interval.ms=1000",
    ]
    args = [sys.executable, "-m", "tierlog.cli", "serve"]
    for o in overrides:
        args += ["--override", o]
    log = open(workdir / "broker.log", "wb")  # noqa: SIM115 - lives as long as the broker
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"broker exited, see {workdir / 'broker.log'}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, bootstrap
        except OSError:
            time.sleep(0.1)
    raise SystemExit("broker did not start")


def create_topics(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    tiered = {
        "remote.storage.enable": "true",
        "segment.bytes": str(1 << 20),
        "local.retention.ms": "5000",
    }
    for topic, config in ((SOURCE, tiered), (RESULTS, {})):
        try:
            admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)
        except Exception as e:
            if "already exists" in str(e):
                continue
            if config:
                print(f"  (tiered storage not available on this broker: {e}; local only)")
                admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
            else:
                raise


def produce_day(bootstrap: str, day: datetime, events: int) -> None:
    from confluent_kafka import Producer

    rng = random.Random(42)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "zstd"})
    start_ms = int(day.timestamp() * 1000)
    step = 86_400_000 / events
    for i in range(events):
        user = f"user-{rng.randrange(5000)}"
        event = {"user": user, "page": rng.choice(PAGES), "ms": rng.randrange(20, 2000)}
        while True:
            try:
                p.produce(
                    SOURCE,
                    key=user.encode(),
                    value=json.dumps(event).encode(),
                    timestamp=start_ms + int(i * step),
                )
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def remote_segments(options: dict[str, str]) -> int:
    from tierlog.spark.options import parse_source_options
    from tierlog.spark.planning import Planner

    with Planner(parse_source_options(options, streaming=False)) as planner:
        tps = planner.partitions()
        layouts = planner.layouts(tps, with_remote=True)
    return sum(len(layout.remote_segments) for layout in layouts.values())


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # every Spark socket on loopback
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tierlog.spark import TierlogDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tierlog-daily-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TierlogDataSource)
    return spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--remote-uri", help="its remote storage (tierlog.remote.uri)")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--tier-wait", type=float, default=30.0)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="tierlog-example-"))
    broker = None
    spark = None
    try:
        if args.bootstrap:
            bootstrap, remote_uri = args.bootstrap, args.remote_uri
        else:
            remote_dir = workdir / "remote"
            broker, bootstrap = start_broker(workdir, remote_dir)
            remote_uri = f"file://{remote_dir}"
            print(f"1. broker on {bootstrap}, remote storage {remote_uri}")
        create_topics(bootstrap, 3)

        yesterday = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        yesterday -= timedelta(days=1)
        t0 = time.monotonic()
        produce_day(bootstrap, yesterday, args.events)
        print(
            f"2. produced {args.events:,} page views of {yesterday:%Y-%m-%d} "
            f"in {time.monotonic() - t0:.1f} s"
        )

        options = {"kafka.bootstrap.servers": bootstrap, "subscribe": SOURCE}
        if remote_uri:
            options["tierlog.remote.uri"] = remote_uri
            deadline = time.monotonic() + args.tier_wait
            tiered = remote_segments(options)
            while tiered == 0 and time.monotonic() < deadline:
                time.sleep(1)
                tiered = remote_segments(options)
            print(
                f"3. {tiered} segments are in remote storage"
                + ("" if tiered else " (the broker has not tiered any: reading via the broker)")
            )

        spark = spark_session()
        from pyspark.sql import functions as F

        start_ms = int(yesterday.timestamp() * 1000)
        reader = spark.read.format("tierlog")
        for k, v in options.items():
            reader = reader.option(k, v)
        views = (
            reader.option("startingTimestamp", str(start_ms))
            .option("endingTimestamp", str(start_ms + 86_400_000))
            .load()
        )
        event = F.from_json(
            F.col("value").cast("string"), "user string, page string, ms int"
        ).alias("e")
        hourly = (
            views.select(F.date_trunc("hour", "timestamp").alias("hour"), event)
            .groupBy("hour", "e.page")
            .agg(
                F.count("*").alias("views"),
                F.approx_count_distinct("e.user").alias("users"),
                F.avg("e.ms").alias("avg_ms"),
            )
        )
        t0 = time.monotonic()
        out = hourly.select(
            F.col("page").alias("key"),
            F.to_json(F.struct("hour", "page", "views", "users", "avg_ms")).alias("value"),
        )
        out.write.format("tierlog").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", RESULTS
        ).mode("append").save()
        print(
            f"4. aggregated {views.count():,} views into hourly results "
            f"in {time.monotonic() - t0:.1f} s"
        )

        back = (
            spark.read.format("tierlog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", RESULTS)
            .load()
            .select(
                F.from_json(
                    F.col("value").cast("string"),
                    "hour timestamp, page string, views long, users long",
                ).alias("r")
            )
            .select("r.*")
        )
        print(f"5. {back.count()} hourly rows in {RESULTS}; busiest page-hours:")
        for row in back.orderBy(F.desc("views")).limit(5).collect():
            print(
                f"   {row['hour']:%H:00} {row['page']:<10} {row['views']:>6} views "
                f"{row['users']:>5} users"
            )
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.terminate()
            broker.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
