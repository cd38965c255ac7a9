"""quixstreams' word count (tests/integration/quix/wordcount.py) with
``processing_guarantee="exactly-once"`` against a real broker, across a SIGKILL and restart of
the broker in the middle of the app's transaction.

quixstreams 3.28.1 runs in a virtual environment of its own (tests/integration/quix_venv.py:
it needs confluent-kafka < 2.13, this venv pins 2.16.1), the app a child process of that venv's
Python. Its transactional producer commits the output records, the state's changelog records
and the source offsets together; its consumer reads with ``read_committed``.

The output topic carries one record per word counted, the word's new count: read with
read_committed, the values of every word are exactly 1, 2, ..., n (a record counted twice would
repeat a value, a lost one would leave a gap)."""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import real_parts
from tests.broker_process import ROOT
from tests.integration import quix_venv
from tests.integration.clients import cf_create_topic, cf_produce
from tests.integration.conftest import BrokerProcess, running_broker
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    fetch_partition,
    list_latest_offset,
    read_batches,
)
from tests.integration.wire import WireClient

APP = ROOT / "tests" / "integration" / "quix" / "wordcount.py"
GROUP = "quix-wordcount"  # the app's consumer group (wordcount.py)
WORDS_TOPIC = "words"
TOTALS = "wordcount-totals"
WORDS = [f"word{i:02d}" for i in range(30)]


@pytest.fixture(scope="session")
def quix_python() -> Path:
    """quixstreams' venv Python, the venv made when missing (pip from PyPI)."""
    try:
        python = quix_venv.ensure()
        detail = quix_venv.version()
    except (quix_venv.VenvError, OSError, subprocess.SubprocessError) as e:
        real_parts.missing("quixstreams (its own venv)", f"cannot make {quix_venv.VENV}: {e}")
    real_parts.used("quixstreams", f"{detail} in {quix_venv.VENV}")
    return python


class QuixApp:
    """The word count app in a child process, its output in a file."""

    def __init__(self, python: Path, workdir: Path, bootstrap: str) -> None:
        self.out = workdir / "quix.log"
        self.start_offset = self.out.stat().st_size if self.out.exists() else 0
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen(
                [str(python), str(APP), bootstrap, str(workdir / "quix-state")],
                stdout=out, stderr=subprocess.STDOUT, cwd=workdir, env=env,
            )  # fmt: skip

    def tail(self) -> str:
        with open(self.out, "rb") as f:
            f.seek(self.start_offset)
            return f.read().decode(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def wait_until(what: str, predicate: Callable[[], Any], app: QuixApp, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert app.proc.poll() is None, f"the quix app exited:\n{app.tail()}"
        assert time.monotonic() < deadline, f"{what} within {timeout} s:\n{app.tail()}"
        time.sleep(0.2)


def committed(b: BrokerProcess) -> int:
    """The group's committed offset on ``words`` (stable: librdkafka's OffsetFetch asks for
    require_stable, so an offset of an open transaction is waited out)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP})
    try:
        (tp,) = c.committed([TopicPartition(WORDS_TOPIC, 0)], timeout=20)
    finally:
        c.close()
    return int(tp.offset)


def read_topic(b: BrokerProcess, topic: str, isolation: str) -> list[Any]:
    """Every record of partition 0 up to the end the isolation level allows."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    out: list[Any] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    raise KafkaException(m.error())
                out.append(m)
        raise AssertionError(f"{topic} not read to its end ({isolation}) within 30 s")
    finally:
        c.close()


def assert_exact_totals(messages: list[Any], expected: collections.Counter[str]) -> None:
    """Each word's values in the output topic are 1..n, n its count: nothing twice, no gap."""
    seen: dict[str, list[int]] = collections.defaultdict(list)
    for m in messages:
        seen[m.key().decode()].append(int(m.value()))
    assert {w: len(v) for w, v in seen.items()} == dict(expected)
    for word, values in seen.items():
        assert values == list(range(1, expected[word] + 1)), word


def open_transaction_on_totals(b: BrokerProcess) -> bool:
    c = WireClient(b.bootstrap)
    try:
        hw = list_latest_offset(c, TOTALS, 0, READ_UNCOMMITTED)
        return list_latest_offset(c, TOTALS, 0, READ_COMMITTED) < hw
    finally:
        c.close()


def send_words(b: BrokerProcess, rng: random.Random, n: int, expected: collections.Counter[str]):
    words = [rng.choice(WORDS) for _ in range(n)]
    cf_produce(b.bootstrap, WORDS_TOPIC, [(w.encode(), w.encode()) for w in words], partition=0)
    expected.update(words)


def pause_in_open_transaction(
    b: BrokerProcess, app: QuixApp, expected: collections.Counter[str], rng: random.Random
) -> None:
    """Stop the app (SIGSTOP) at a moment its transaction holds output records not yet
    committed (more words are sent whenever it has caught up)."""
    deadline = time.monotonic() + 60
    while True:
        assert app.proc.poll() is None, f"the quix app exited:\n{app.tail()}"
        app.proc.send_signal(signal.SIGSTOP)
        if open_transaction_on_totals(b):
            return
        app.proc.send_signal(signal.SIGCONT)
        assert time.monotonic() < deadline, f"no open transaction seen:\n{app.tail()}"
        if committed(b) == sum(expected.values()):
            send_words(b, rng, 500, expected)
        time.sleep(0.05)


def totals_batches(b: BrokerProcess) -> list[Any]:
    return [h for _, h in read_batches(b.bootstrap, TOTALS)]


def test_quix_exactly_once_word_count_across_broker_kill(tmp_path: Path, quix_python: Path) -> None:
    rng = random.Random(3281)
    expected: collections.Counter[str] = collections.Counter()
    # The coordinator looks for timed out transactions every second, not every 10 s.
    cleanup = "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000"
    with running_broker(tmp_path / "broker", cleanup) as b:
        cf_create_topic(b.bootstrap, WORDS_TOPIC)
        cf_create_topic(b.bootstrap, TOTALS)
        send_words(b, rng, 3000, expected)
        app = QuixApp(quix_python, tmp_path, b.bootstrap)
        try:
            wait_until("the first words counted", lambda: committed(b) > 0, app)
            # The app dies (SIGKILL) in the middle of a transaction: its successor (another
            # random transactional id) restores the state from the changelog's committed
            # records and counts on from the committed offset; the coordinator aborts the
            # dead run's transaction when it times out.
            pause_in_open_transaction(b, app, expected, rng)
            app.kill()
            app = QuixApp(quix_python, tmp_path, b.bootstrap)
            send_words(b, rng, 1000, expected)
            wait_until(
                "counting after the app's restart",
                lambda: committed(b) > sum(expected.values()) - 1000,
                app,
            )
            # The broker dies (SIGKILL) while the app's transaction is open, and comes back
            # on its port; then the app goes on (or, if it gave up, a new one starts and
            # restores its state from the changelog).
            pause_in_open_transaction(b, app, expected, rng)
            b.kill()
            b.start()
            app.proc.send_signal(signal.SIGCONT)
            send_words(b, rng, 1000, expected)
            survived = app.proc.poll() is None
            if not survived:
                app = QuixApp(quix_python, tmp_path, b.bootstrap)
            total = sum(expected.values())
            wait_until("every word committed", lambda: committed(b) == total, app, timeout=90)
            wait_until(
                "no transaction open on the output (the dead run's aborted on its timeout)",
                lambda: not open_transaction_on_totals(b),
                app,
            )
            committed_totals = read_topic(b, TOTALS, "read_committed")
            assert_exact_totals(committed_totals, expected)
            # Every output record went through quixstreams' transactional producer, its
            # transactions closed by markers.
            batches = totals_batches(b)
            data = [h for h in batches if not h.is_control_batch]
            assert data and all(h.is_transactional for h in data)
            assert any(h.is_control_batch for h in batches)
            # read_uncommitted also returns the killed app's aborted output: counts it had
            # sent and its successor sent again.
            uncommitted = read_topic(b, TOTALS, "read_uncommitted")
            assert len(uncommitted) > len(committed_totals)
            repeated = collections.Counter((m.key(), m.value()) for m in uncommitted)
            assert any(n > 1 for n in repeated.values())
            c = WireClient(b.bootstrap)
            try:
                fetched = fetch_partition(c, TOTALS, 0, 0, READ_COMMITTED, max_bytes=16 << 20)
            finally:
                c.close()
            assert fetched.aborted, "the killed run's transaction is listed as aborted"
            print(
                f"quix {'survived' if survived else 'was restarted after'} the broker kill; "
                f"{len(committed_totals)} output records read_committed, "
                f"{len(uncommitted)} read_uncommitted"
            )
        finally:
            app.kill()
