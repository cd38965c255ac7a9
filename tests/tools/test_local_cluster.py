"""``tierlog cluster`` (``make cluster``) as people run it: a real process that starts a real
ZooKeeper and three real brokers; confluent-kafka produces and consumes through them; Ctrl-C
(SIGINT) stops everything, brokers first."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests import real_parts
from tierlog.tools import zookeeper_server
from tierlog.tools.local_cluster import broker_properties

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


class Launcher:
    """``tierlog cluster`` as a child process, its output read line by line."""

    def __init__(self, *args: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")])
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tierlog.cli", "cluster", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def wait_for(self, pattern: str, timeout: float = 120.0) -> re.Match[str]:
        """The first line (from the start) that matches ``pattern``."""
        rx = re.compile(pattern)
        for line in self.lines:
            if m := rx.search(line):
                return m
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._q.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if m := rx.search(line):
                return m
        raise AssertionError(f"no line matching {pattern!r}; output:\n" + "\n".join(self.lines))

    def output(self) -> str:
        while True:
            try:
                line = self._q.get(timeout=5)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
        return "\n".join(self.lines)


def _pids(text: str) -> list[int]:
    return [int(p) for p in re.findall(r"\(pid (\d+)\)", text)]


def _gone(pid: int) -> bool:
    """Not running: no such process, or a zombie not yet reaped by its (dead) parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_make_cluster_serves_replicated_topics_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    why = zookeeper_server.available()
    if why is not None:
        real_parts.missing("ZooKeeper", why)
    data = tmp_path / "cluster"
    launcher = Launcher(
        "--data-dir", str(data), "--ports", "0,0,0", "--zookeeper-port", "0", "--no-install",
        "--override", "zookeeper.session.timeout.ms=6000",
    )  # fmt: skip
    try:
        bootstrap = launcher.wait_for(r"bootstrap\.servers=(\S+)").group(1)
        zk = launcher.wait_for(r"zookeeper\.connect=(\S+)").group(1)
        real_parts.used(
            "tierlog cluster", f"ZooKeeper ({zookeeper_server.ZOOKEEPER_JAR}) and 3 brokers"
        )
        assert zk.endswith("/tierlog")  # Kafka's chroot, as a real cluster would use
        assert len(bootstrap.split(",")) == 3
        pids = _pids("\n".join(launcher.lines))
        assert len(pids) == 4  # ZooKeeper and three brokers

        # Each broker runs with the server.properties the launcher wrote: its own id and dir.
        for i in (1, 2, 3):
            props = (data / f"broker-{i}" / "server.properties").read_text()
            assert f"broker.id={i}\n" in props
            assert f"log.dirs={(data / f'broker-{i}' / 'logs').resolve()}\n" in props
            assert (data / f"broker-{i}" / "logs" / "meta.properties").exists()

        topic = f"demo-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 3)], operation_timeout=30)[topic].result(30)
        deadline = time.monotonic() + 60
        while True:  # the default replication factor is 3: every partition on every broker
            parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
            if len(parts) == 3 and all(len(p.isrs) == 3 for p in parts.values()):
                break
            assert time.monotonic() < deadline, parts
            time.sleep(0.2)
        assert all(sorted(p.replicas) == [1, 2, 3] for p in parts.values())

        values = [f"record-{i}".encode() for i in range(300)]
        acked: list[bytes] = []
        errors: list[str] = []
        producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )
        for i, v in enumerate(values):
            producer.produce(
                topic,
                v,
                partition=i % 3,
                on_delivery=lambda err, msg: (
                    errors.append(str(err)) if err else acked.append(msg.value())
                ),
            )
        assert producer.flush(60) == 0
        assert not errors and sorted(acked) == sorted(values)

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"g-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        try:
            while len(got) < len(values) and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and not m.error():
                    got.append(m.value())
        finally:
            consumer.close()
        assert sorted(got) == sorted(values)
    finally:
        if launcher.proc.poll() is None:
            launcher.proc.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            rc = launcher.proc.wait(120)
        except subprocess.TimeoutExpired:
            launcher.proc.kill()
            launcher.proc.wait()
            raise
    out = launcher.output()
    assert rc == 0, out
    # Brokers first, one at a time (a controlled shutdown each), ZooKeeper last.
    stops = [line for line in out.splitlines() if re.search(r"stopped in|stopping ZooKeeper", line)]
    assert [s.split()[2] for s in stops[:3]] == ["broker"] * 3 and "ZooKeeper" in stops[3], out
    assert all("(exit 0)" in s for s in stops[:3]), out
    for pid in pids:
        assert _gone(pid), f"process {pid} still runs after tierlog cluster exited"
    for i in (1, 2, 3):
        assert "tierlog broker stopped cleanly" in (data / f"broker-{i}" / "broker.log").read_text()


def test_broker_properties_are_a_real_clusters() -> None:
    text = broker_properties(
        2,
        host="127.0.0.1",
        port=9093,
        log_dir=Path("/d/broker-2/logs"),
        zookeeper_connect="127.0.0.1:2181/tierlog",
        brokers=3,
    )
    from tierlog.server.config.properties import parse_properties
    from tierlog.server.kafka_config import KafkaConfig

    props = parse_properties(text)
    assert props["broker.id"] == "2" and props["zookeeper.connect"] == "127.0.0.1:2181/tierlog"
    assert props["default.replication.factor"] == "3" and props["min.insync.replicas"] == "2"
    config = KafkaConfig(props)  # every key is one the broker knows
    assert config.node_id == 2 and config.offsets_topic_replication_factor == 3


def test_without_zookeeper_it_says_exactly_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(zookeeper_server, "ZOOKEEPER_JAR", tmp_path / "no-zookeeper.jar")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # not root: never installs
    why = zookeeper_server.ensure_installed(lambda line: None)
    assert why is not None
    assert "sudo apt-get install zookeeper" in why and "not root" in why

    from tierlog.cli import main

    assert main(["cluster", "--data-dir", str(tmp_path / "c"), "--no-install"]) == 1
    err = capsys.readouterr().err
    assert "cannot run ZooKeeper" in err and "apt-get install zookeeper" in err
    assert not (tmp_path / "c").exists()  # nothing started, nothing written
