"""Fixtures of the Spark tests: one local SparkSession per test run, one broker process.

* ``spark`` (session): ``local[2]``, UI off, driver bound to 127.0.0.1, session time zone UTC,
  Python workers running this interpreter; ``tierlog`` registered.
* ``broker`` (session): ``tierlog serve`` as a subprocess on a free loopback port (the
  approach of tests/integration/conftest.py); each test uses its own topics (``unique``).
* ``admin`` / ``produce``: confluent-kafka helpers against that broker.

Tests that use the ``spark`` or ``broker`` fixtures are marked ``spark``; the others (decoder,
options) are plain unit tests that need pyarrow and numpy but no Spark.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:  # the spark extra: without numpy/pyarrow nothing here can even be imported
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401
except ImportError:  # pragma: no cover
    collect_ignore_glob = ["test_*.py"]


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; repeated here so tests/spark runs on its own too.
    config.addinivalue_line("markers", "spark: needs a local SparkSession (pyspark)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if here in Path(str(item.fspath)).parents and {"spark", "broker"} & set(fixtures):
            item.add_marker(pytest.mark.spark)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """A ``tierlog serve`` child process with its own log dir and port."""

    def __init__(self, workdir: Path, *overrides: str) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.overrides = [
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"log.dirs={workdir / 'logs'}",
            # The tests' records carry fixed 2023 timestamps: no time-based retention.
            "log.retention.ms=-1",
            *overrides,
        ]
        self.log_path = workdir / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        args = [sys.executable, "-m", "tierlog.cli", "serve"]
        for o in self.overrides:
            args += ["--override", o]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited during startup:\n{self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker did not listen within {timeout}s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("broker"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # every Spark socket on loopback
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tierlog.spark import TierlogDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tierlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TierlogDataSource)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def admin(broker: BrokerProcess) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(admin: Any, name: str, partitions: int = 1, **config: str) -> None:
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)])
    for f in futures.values():
        f.result(30)


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]], **config: Any) -> None:
    """Produce dicts with value / key / partition / timestamp / headers; wait for all acks."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    p = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **config}
    )
    for r in records:
        kwargs = {k: r[k] for k in ("key", "partition", "timestamp", "headers") if k in r}
        p.produce(
            topic, value=r.get("value"), on_delivery=lambda e, m: e and errors.append(e), **kwargs
        )
    assert p.flush(30) == 0
    assert not errors, errors


@contextlib.contextmanager
def env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
