"""Fixtures that run ``tierlog serve`` as a real subprocess on a loopback port of the
kernel's choosing (tests/broker_process.py).

* ``broker`` (session): one broker shared by the tests that do not restart it; each test uses
  its own topic and group names (``unique``).
* ``fresh_broker`` (function): a broker of its own, for restart and crash tests.
* ``tiered_broker`` (session, once per remote store: a local dir, and SeaweedFS S3 marked
  ``s3``): a broker with tiered storage on and fast tasks, shared by the tiered scenarios.
* ``tiered_env`` (function, per remote store): a store of its own and a factory of brokers
  on it, for restart, kill and fault tests.

The broker's stderr goes to ``<tmp>/broker.log``; a failing test prints its tail.
"""

from __future__ import annotations

import contextlib
import gc
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# kafka-python 3.0.12 uses importlib.resources.read_text, deprecated in 3.11: import it once
# with that warning silenced (pytest turns warnings into errors); later imports are cached.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.admin
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.parser
    import kafka.protocol.producer
    import kafka.record.memory_records  # noqa: F401

from tests import broker_process
from tests.integration.tiered_support import TIERED_BROKER, RemoteStore, make_store

__all__ = ["BrokerProcess", "running_broker"]


class BrokerProcess(broker_process.BrokerProcess):
    """A broker of the integration tests: group rebalances start after 200 ms, not 3 s."""

    defaults = ("group.initial.rebalance.delay.ms=200",)


@contextlib.contextmanager
def running_broker(workdir: Path, *overrides: str, **kw: Any) -> Iterator[BrokerProcess]:
    with broker_process.running_broker(workdir, *overrides, cls=BrokerProcess, **kw) as b:
        assert isinstance(b, BrokerProcess)
        yield b


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker")) as b:
        yield b
        assert b.alive(), f"the shared broker died:\n{b.tail()}"


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "broker") as b:
        yield b


TIERED_KINDS = ["file", pytest.param("s3", marks=pytest.mark.s3)]


@pytest.fixture(scope="session", params=TIERED_KINDS)
def tiered_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    kind = request.param
    sw = request.getfixturevalue("seaweedfs") if kind == "s3" else None
    workdir = tmp_path_factory.mktemp(f"tiered-{kind}")
    store = make_store(kind, workdir, sw)
    try:
        with running_broker(workdir, *TIERED_BROKER, *store.overrides(), metrics=True) as b:
            b.store = store  # type: ignore[attr-defined]
            yield b
            assert b.alive(), f"the shared tiered broker died:\n{b.tail()}"
    finally:
        store.close()


class TieredEnv:
    """A remote store of its own and the brokers started on it (one at a time)."""

    def __init__(self, kind: str, workdir: Path, store: RemoteStore) -> None:
        self.kind = kind
        self.workdir = workdir
        self.store = store
        self.broker: BrokerProcess | None = None
        self.faults = workdir / "faults"
        self.faults.mkdir(parents=True, exist_ok=True)

    def start(self, *extra: str, faults: bool = False, metrics: bool = False) -> BrokerProcess:
        """Start (or restart, keeping port and data) the broker; ``faults`` runs it through
        tests/integration/tiered_launcher.py (fault hooks driven by files in :attr:`faults`)."""
        port = self.broker.port if self.broker is not None else None
        if self.broker is not None and self.broker.alive():
            self.broker.stop()
        b = BrokerProcess(
            self.workdir,
            *TIERED_BROKER,
            *self.store.overrides(),
            *extra,
            port=port,
            module="tests.integration.tiered_launcher" if faults else "tierlog.cli",
            env={"TIERLOG_TEST_FAULTS": str(self.faults)} if faults else None,
            metrics=metrics,
        )
        if self.broker is not None:
            b.starts = self.broker.starts
        self.broker = b
        b.store = self.store  # type: ignore[attr-defined]
        b.start()
        return b


@pytest.fixture(params=TIERED_KINDS)
def tiered_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TieredEnv]:
    kind = request.param
    sw = request.getfixturevalue("seaweedfs") if kind == "s3" else None
    workdir = tmp_path / "broker"
    workdir.mkdir()
    env = TieredEnv(kind, workdir, make_store(kind, workdir, sw))
    try:
        yield env
    finally:
        if env.broker is not None and env.broker.alive():
            with contextlib.suppress(RuntimeError):
                env.broker.stop()
        env.store.close()


@pytest.fixture
def unique() -> str:
    """A name fragment unique to the test (topics and groups of the shared broker)."""
    return uuid.uuid4().hex[:10]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
            # Client libraries (kafka-python) leave sockets to the GC when a broker restarts
            # under them; that is theirs, not ours.
            item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
            item.add_marker(
                pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
            )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed:
        for name in ("fresh_broker", "broker", "tiered_broker", "tiered_env"):
            b = item.funcargs.get(name) if hasattr(item, "funcargs") else None  # type: ignore[attr-defined]
            if isinstance(b, TieredEnv):
                b = b.broker
            if isinstance(b, BrokerProcess):
                report.sections.append((f"{name} log tail", b.tail(80)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Collect the sockets client libraries leaked before pytest reports unraisable
    exceptions, with ResourceWarning ignored as in the integration tests themselves:
    kafka-python never closes a socket whose connect was refused (it stays in a reference
    cycle until a collection), and such a socket, collected at the end of the session where
    warnings are errors, failed a run whose tests all passed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
