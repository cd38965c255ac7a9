"""Fixtures of the Spark tests: one local SparkSession per test run, one broker process.

* ``spark`` (session): ``local[2]``, UI off, driver bound to 127.0.0.1, session time zone UTC,
  Python workers running this interpreter; ``tierlog`` registered.
* ``broker`` (session): ``tierlog serve`` as a subprocess on a loopback port (the
  tests/broker_process.py); each test uses its own topics (``unique``).
* ``admin`` / ``produce``: confluent-kafka helpers against that broker.

Tests that use the ``spark`` or ``broker`` fixtures are marked ``spark``; the others (decoder,
options) are plain unit tests that need pyarrow and numpy but no Spark.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import broker_process, real_parts

try:  # the spark extra: without numpy nothing here can even be imported
    import numpy  # noqa: F401
except ImportError:  # pragma: no cover
    if real_parts.REQUIRED:
        raise ImportError(
            "numpy (the spark extra) is missing and TIERLOG_REQUIRE_REAL_PARTS=1: "
            "make test installs it"
        ) from None
    collect_ignore_glob = ["test_*.py"]  # a developer without the spark extra


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; repeated here so tests/spark runs on its own too.
    config.addinivalue_line("markers", "spark: needs a local SparkSession (pyspark)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if here in Path(str(item.fspath)).parents and {"spark", "broker"} & set(fixtures):
            item.add_marker(pytest.mark.spark)


class BrokerProcess(broker_process.BrokerProcess):
    """A broker of the Spark tests (tests/broker_process.py)."""

    # The tests' records carry fixed 2023 timestamps: no time-based retention.
    defaults = ("log.retention.ms=-1",)


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
    require_spark()
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


def require_spark() -> str:
    """pyspark and a Java runtime, or :func:`tests.real_parts.missing`; the Java version."""
    try:
        import pyspark
    except ImportError as e:
        real_parts.missing("pyspark", f"cannot import pyspark ({e}): pip install -e '.[spark]'")
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None or not Path(java).exists():
        real_parts.missing("Java", "no java on PATH or in JAVA_HOME (Spark needs Java 17+)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    version = (out.stderr or out.stdout).splitlines()[0] if out.returncode == 0 else ""
    if not version:
        real_parts.missing("Java", f"{java} -version failed: {out.stderr.strip()}")
    real_parts.used("Spark", f"pyspark {pyspark.__version__} on {version} ({java})")
    return version


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
