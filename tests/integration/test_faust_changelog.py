"""A real stateful stream processor on a compacted changelog: faust-streaming's word count
(tests/integration/faust_wordcount.py) against a real broker.

quixstreams would be the first choice, but no release of it accepts the confluent-kafka 2.16.1
the test extra pins (3.x needs confluent-kafka < 2.13; the only other candidate, 0.5.7, is the
old C#-based library and needs pandas < 2, which the spark extra's pandas 2.3.3 excludes);
faust-streaming speaks Kafka through aiokafka, which the extra already has.

The worker counts words into a table whose every update goes to its compacted changelog topic;
the broker's cleaner compacts that topic while the worker runs (fewer records than faust wrote,
the latest count of every word kept); a new worker process, whose in-memory table starts empty,
rebuilds it from the compacted changelog and holds the same counts; words sent after the
restart add to those counts."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests import real_parts
from tests.broker_process import ROOT
from tests.integration.clients import cf_create_topic, cf_high_watermark, cf_produce
from tests.integration.conftest import BrokerProcess, running_broker
from tests.integration.test_compaction import read_all

faust = real_parts.import_module("faust", "faust-streaming (the test extra)")

CHANGELOG = "wordcount-counts-changelog"
WORDS = [f"word{i:02d}" for i in range(30)]


class Worker:
    """``faust worker`` of the word count app in a child process, its output in a file."""

    def __init__(self, workdir: Path, bootstrap: str, guarantee: str = "at_least_once") -> None:
        self.out = workdir / "worker.log"
        env = dict(os.environ)
        env["WORDCOUNT_BROKER"] = bootstrap
        env["WORDCOUNT_GUARANTEE"] = guarantee
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.start_offset = self.out.stat().st_size if self.out.exists() else 0
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen(
                # --without-web: faust's worker command starts its web server on 0.0.0.0:6066
                # whatever the app says (its --with-web default wins over web_enabled).
                [sys.executable, "-m", "tests.integration.faust_wordcount",
                 "--datadir", str(workdir / "faust-data"), "worker", "--without-web",
                 "--loglevel", "info"],
                stdout=out, stderr=subprocess.STDOUT, cwd=workdir, env=env,
            )  # fmt: skip
        real_parts.used("faust-streaming", f"{faust.__version__} worker")

    def output(self) -> str:
        with open(self.out, "rb") as f:
            f.seek(self.start_offset)
            return f.read().decode(errors="replace")

    def latest_counts(self) -> dict[str, int] | None:
        """The table as the worker printed it last (None before its recovery completed)."""
        # (faust routes print() through its logging: "[time] [pid] [WARNING] COUNTS {...}")
        lines = [ln for ln in self.output().splitlines() if "COUNTS {" in ln]
        return json.loads(lines[-1].split("COUNTS ", 1)[1]) if lines else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"faust did not stop:\n{self.output()[-3000:]}") from None

    def tail(self) -> str:
        return self.output()[-4000:]


def wait_until(what: str, predicate: Any, worker: Worker, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert worker.proc.poll() is None, f"faust exited:\n{worker.tail()}"
        assert time.monotonic() < deadline, f"{what} within {timeout} s:\n{worker.tail()}"
        time.sleep(0.3)


def changelog_latest(b: BrokerProcess) -> tuple[dict[str, int], int]:
    """The changelog's latest value per key (faust's JSON key and value) and its record count
    (nothing before faust created the topic)."""
    from confluent_kafka.admin import AdminClient

    if (
        CHANGELOG
        not in AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics
    ):
        return {}, 0
    messages = read_all(b, CHANGELOG)
    latest = {json.loads(m.key()): json.loads(m.value()) for m in messages}
    return latest, len(messages)


def topic_config(b: BrokerProcess, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    configs = a.describe_configs([res])[res].result(20)
    return {name: entry.value for name, entry in configs.items()}


def committed(b: BrokerProcess, group: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=20)
    finally:
        c.close()
    return int(tp.offset)


def test_faust_table_changelog_compacts_and_restores(tmp_path: Path) -> None:
    rng = random.Random(1313)
    with running_broker(tmp_path / "broker", "log.cleaner.backoff.ms=100") as b:
        cf_create_topic(b.bootstrap, "words")
        first = [rng.choice(WORDS) for _ in range(4000)]
        cf_produce(b.bootstrap, "words", [(w.encode(), w.encode()) for w in first], partition=0)
        expected = collections.Counter(first)

        worker = Worker(tmp_path, b.bootstrap)
        try:
            # The worker counted everything: the changelog's latest values are the counts.
            wait_until(
                "the changelog holding every count",
                lambda: changelog_latest(b)[0] == expected,
                worker,
            )
            written = cf_high_watermark(b.bootstrap, CHANGELOG)
            assert written >= len(first)  # one changelog record per update
            # The topic faust created is compacted, and our cleaner compacts it while the
            # worker runs: far fewer records than were written, the latest count of each word.
            wait_until(
                "the changelog compacted",
                lambda: changelog_latest(b)[1] < written // 4,
                worker,
            )
            latest, left = changelog_latest(b)
            assert latest == expected
            assert topic_config(b, CHANGELOG)["cleanup.policy"] == "compact"  # faust's choice
            assert "swapping in cleaned segment" in b.log_text()
            wait_until("the table printed", lambda: worker.latest_counts() == expected, worker)
            # Stop once faust has committed its progress on the source topic (at-least-once:
            # otherwise a restart would count some words twice).
            wait_until(
                "faust's commit", lambda: committed(b, "wordcount", "words") == len(first), worker
            )
        finally:
            worker.stop()
        print(f"changelog: {written} records written, {left} left after compaction")

        # A new worker: its in-memory table is rebuilt from the compacted changelog alone.
        worker = Worker(tmp_path, b.bootstrap)
        try:
            restored = wait_until("the table recovered", worker.latest_counts, worker)
            assert restored == expected
            assert "Restore complete" in worker.output()
            # Counting goes on from the restored counts.
            second = [rng.choice(WORDS) for _ in range(300)]
            cf_produce(
                b.bootstrap, "words", [(w.encode(), w.encode()) for w in second], partition=0
            )
            expected.update(second)
            wait_until(
                "the counts after the restart",
                lambda: worker.latest_counts() == expected,
                worker,
            )
            assert changelog_latest(b)[0] == expected
        finally:
            worker.stop()
