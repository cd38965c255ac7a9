"""The Spark source on a replicated tiered topic (issue 10): three ``tierlog serve`` processes on
a real ZooKeeper sharing one remote store, partitions led by different brokers.

* Reads through the brokers and with direct remote reads give exactly the produced rows.
* A leader SIGKILLed in the middle of a read: the job still returns exactly the rows (the
  source's fetches follow the partition to its new leader).
* The same job on a Spark standalone cluster (a master and two workers started with PySpark's
  own ``spark-class`` on 127.0.0.1), not only ``local[2]``: the pipeline's scale-out is
  Spark's.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import real_parts
from tests.integration.cluster_support import Cluster, wait_for
from tests.integration.tiered_support import TIERED_BROKER
from tests.spark.conftest import produce, require_spark
from tests.spark.tiering import TIERED_TOPIC_CONFIGS
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

T0 = 1_700_000_000_000
PARTITIONS = 3
PER_PARTITION = 1200


def _rows() -> list[tuple[int, int, bytes]]:
    return [
        (p, i, b"%d-%05d-" % (p, i) + bytes(90))
        for p in range(PARTITIONS)
        for i in range(PER_PARTITION)
    ]


@pytest.fixture(scope="module")
def tiered_cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[tuple[Cluster, str, Path]]:
    root = tmp_path_factory.mktemp("spark-cluster")
    remote = root / "remote"
    c = Cluster(
        root,
        f"{zookeeper.connect_string}/spark-{uuid.uuid4().hex}",
        3,
        *TIERED_BROKER,
        f"rsm.config.uri={remote.as_uri()}",
        "log.retention.ms=-1",  # the records carry fixed 2023 timestamps
        "default.replication.factor=3",
    )
    c.start()
    try:
        topic = f"spark-{uuid.uuid4().hex[:8]}"
        c.create_topic(
            topic,
            PARTITIONS,
            3,
            **{"segment.bytes": "32768", **TIERED_TOPIC_CONFIGS},
        )
        produce(
            c.bootstrap,
            topic,
            [{"value": v, "partition": p, "timestamp": T0 + i} for p, i, v in _rows()],
            **{"batch.size": 16384, "acks": "all"},
        )

        def tiered() -> bool:
            for b in c.brokers.values():
                for p in range(PARTITIONS):
                    logs = sorted((b.log_dir / f"{topic}-{p}").glob("*.log"))
                    if not logs or logs[0].stem == "0" * 20:
                        return False
            return True

        wait_for(f"{topic} tiered on every replica", tiered, 120)
        yield c, topic, remote
    finally:
        c.stop()


def _options(c: Cluster, topic: str, remote: Path | None) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": c.bootstrap, "subscribe": topic}
    if remote is not None:
        opts["tierlog.remote.uri"] = remote.as_uri()
    return opts


def _read(
    spark: Any, options: dict[str, str], *, slow: bool = False
) -> list[tuple[int, int, bytes]]:
    r = spark.read.format("tierlog")
    for k, v in options.items():
        r = r.option(k, v)
    df = r.load().select("partition", "offset", "value")
    if slow:  # stretch the job so that a broker can die in the middle of it

        def slowly(batches: Iterator[Any]) -> Iterator[Any]:
            for b in batches:
                time.sleep(0.3)
                yield b

        df = df.mapInPandas(slowly, df.schema)
    return sorted((r["partition"], r["offset"], bytes(r["value"])) for r in df.collect())


def test_partitions_led_by_different_brokers_read_whole(
    spark: Any, tiered_cluster: tuple[Cluster, str, Path]
) -> None:
    c, topic, remote = tiered_cluster
    leaders = {p.leader for p in c.partitions(topic).values()}
    assert len(leaders) == PARTITIONS, leaders
    expected = _rows()
    assert _read(spark, _options(c, topic, None)) == expected
    assert _read(spark, _options(c, topic, remote)) == expected


@pytest.mark.parametrize("direct", [False, True], ids=["through-brokers", "direct-remote"])
def test_a_leader_killed_mid_read_loses_nothing(
    spark: Any, tiered_cluster: tuple[Cluster, str, Path], direct: bool
) -> None:
    c, topic, remote = tiered_cluster
    victim = c.leader(topic, 0)
    sc = spark.sparkContext
    result: list[Any] = []

    def job() -> None:
        try:
            result.append(_read(spark, _options(c, topic, remote if direct else None), slow=True))
        except Exception as e:  # reported below, with the Python side's traceback
            import traceback

            result.append(RuntimeError(f"{e}\n{traceback.format_exc()[-5000:]}"))

    t = threading.Thread(target=job)
    t.start()
    try:
        wait_for("the job running", lambda: sc.statusTracker().getActiveStageIds(), 60)
        time.sleep(1.0)  # a few tasks done, most to come
        assert t.is_alive(), "the job ended before the kill"
        c.brokers[victim].stop(sig=signal.SIGKILL)
        t.join(300)
    finally:
        c.brokers[victim].start()
    assert not t.is_alive()
    if isinstance(result[0], Exception):
        pytest.fail(str(result[0]))
    assert result[0] == _rows()
    c.wait_healthy(topic, PARTITIONS, 3)


def _spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master and two workers (one core each) on 127.0.0.1, started with
    PySpark's own ``bin/spark-class``; the master URL."""
    require_spark()
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not spark_class.exists():
        real_parts.missing("Spark standalone", f"{spark_class} is missing from pyspark")
    work = tmp_path_factory.mktemp("spark-standalone")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    port, ui = _free_port(), _free_port()
    master = [
        "org.apache.spark.deploy.master.Master",
        *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
    ]
    procs = [_spawn([str(spark_class), *master], work / "master.log", env)]
    url = f"spark://127.0.0.1:{port}"
    try:
        for i in range(2):
            worker = [
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
                *("--webui-port", str(_free_port()), "--work-dir", str(work / f"worker-{i}")),
                url,
            ]
            procs.append(_spawn([str(spark_class), *worker], work / f"worker-{i}.log", env))

        def registered() -> bool:
            text = (work / "master.log").read_text(errors="replace")
            return text.count("Registering worker") >= 2

        wait_for("two workers registered with the master", registered, 120)
        real_parts.used("Spark standalone", f"{url}, 2 workers")
        yield url
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def test_the_same_job_on_a_spark_standalone_cluster(
    spark: Any, standalone: str, tiered_cluster: tuple[Cluster, str, Path]
) -> None:
    """The session of the other tests is ``local[2]``; this job runs in a second application
    on the standalone cluster (its executors on the two workers)."""
    c, topic, remote = tiered_cluster
    code = f"""
import sys
from pyspark.sql import SparkSession
from tierlog.spark import TierlogDataSource
s = (SparkSession.builder.master({standalone!r}).appName("tierlog-standalone")
     .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
     .config("spark.driver.bindAddress", "127.0.0.1").config("spark.executor.memory", "512m")
     .getOrCreate())
s.dataSource.register(TierlogDataSource)
df = (s.read.format("tierlog").option("kafka.bootstrap.servers", {c.bootstrap!r})
      .option("subscribe", {topic!r}).option("tierlog.remote.uri", {remote.as_uri()!r}).load())
rows = df.selectExpr("partition", "offset", "hex(value) AS v").collect()
hosts = {{e.host() for e in s.sparkContext._jsc.sc().statusTracker().getExecutorInfos()}}
execs = s.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
print("ROWS", len(rows), "EXECUTORS", execs)
for r in sorted((r["partition"], r["offset"], r["v"]) for r in rows):
    print("ROW", r[0], r[1], r[2])
s.stop()
"""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, out.stderr[-5000:]
    lines = out.stdout.splitlines()
    summary = next(line for line in lines if line.startswith("ROWS"))
    assert summary.split()[3] == "2", summary  # both workers ran executors
    got = [
        (int(p), int(o), bytes.fromhex(v))
        for _, p, o, v in (line.split() for line in lines if line.startswith("ROW "))
    ]
    assert got == _rows()
