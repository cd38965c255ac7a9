"""Tiered storage across replicas: a real ZooKeeper and three ``tierlog serve`` processes sharing
one ``file://`` remote store, with confluent-kafka, in one run on one machine.

Figures (``name: value unit (ratio vs baseline)``):

* **new replica**: a partition of ``--size-mb`` MB (default 1024) on brokers 1 and 2 is
  reassigned to 1 and 3 (AlterPartitionReassignments); measured: the bytes broker 3 holds for
  it once it is in the ISR (a follower stores what it fetches, nothing else) and the seconds
  from the request to the ISR. Once for a tiered topic whose leader keeps ``--local-mb`` MB
  locally (``local.retention.bytes``), once for the same data in an untiered topic: the
  baseline. Goal: tiered bytes <= 0.05 of untiered bytes.
* **remote consume after failover**: a fully tiered topic (everything but the active segment
  in remote storage) read from offset 0 by one consumer through its leader, then the leader
  is SIGKILLed and the same read runs through the new leader (which reads the same remote
  objects with its own metadata and index caches). ``--rounds`` reads on each side: the
  first reads (both with cold caches) and the best reads are compared. Ratio new / old
  throughput; goal >= 0.9.

Knobs: ``--size-mb``, ``--local-mb``, ``--consume-mb``, ``--rounds`` (reads on each side: the
best of each, and the new leader's first, cold one). ``BENCH_QUICK=1`` scales down.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

from tierlog.tools.zookeeper_server import ZooKeeperServer, available  # noqa: E402

MB = 1_000_000
RECORD = 10_000
SEGMENT_BYTES = 16 * 1024 * 1024


def line(name: str, value: float, unit: str, ratio: float | None = None, base: str = "") -> None:
    fmt = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    extra = f" ({ratio:.3f}x vs {base})" if ratio is not None else ""
    print(f"{name}: {fmt} {unit}{extra}", flush=True)


def wait_for(what: str, probe: object, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            if probe():  # type: ignore[operator]
                return
        except Exception as e:  # a broker restarting
            last = e
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}: {last}")


class Bench:
    def __init__(self, work: Path, zk: ZooKeeperServer) -> None:
        self.remote = work / "remote"
        self.remote.mkdir()
        connect = f"{zk.connect_string}/bench-{uuid.uuid4().hex[:8]}"
        self.brokers: dict[int, BrokerProcess] = {}
        for i in (1, 2, 3):
            d = work / f"broker-{i}"
            d.mkdir()
            self.brokers[i] = BrokerProcess(
                d,
                f"zookeeper.connect={connect}",
                f"broker.id={i}",
                "zookeeper.session.timeout.ms=6000",
                "offsets.topic.replication.factor=3",
                "offsets.topic.num.partitions=3",
                "remote.log.storage.system.enable=true",
                f"rsm.config.uri={self.remote.as_uri()}",
                "remote.log.metadata.topic.num.partitions=3",
                "remote.log.manager.task.interval.ms=500",
                "log.retention.check.interval.ms=500",
                "auto.leader.rebalance.enable=false",
            )
        for b in self.brokers.values():
            b.start()
        wait_for("3 live brokers", lambda: len(self.admin().list_topics(timeout=5).brokers) == 3)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive())

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000})

    def partition(self, topic: str) -> object:
        t = self.admin().list_topics(topic, timeout=5).topics[topic]
        if t.error is not None:
            raise RuntimeError(str(t.error))
        return t.partitions[0]

    def create(self, topic: str, replicas: list[int], configs: dict[str, str]) -> None:
        a = self.admin()
        a.create_topics(
            [NewTopic(topic, num_partitions=1, replica_assignment=[replicas], config=configs)],
            operation_timeout=30,
        )[topic].result(60)
        wait_for(
            f"{topic} healthy",
            lambda: len(self.partition(topic).isrs) == len(replicas),  # type: ignore[attr-defined]
        )

    def produce(self, topic: str, total: int) -> None:
        errors: list[str] = []

        def done(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "batch.size": 1_000_000,
                "message.timeout.ms": 600_000,
            }
        )
        value = os.urandom(RECORD)
        for _ in range(total // RECORD):
            while True:
                try:
                    p.produce(topic, value, partition=0, on_delivery=done)
                    break
                except BufferError:
                    p.poll(0.01)
        if p.flush(600) or errors:
            raise RuntimeError(f"produce failed: {errors[:3]}")

    def list_offset(self, topic: str, spec: int) -> int:
        from tests.integration.tiered_support import list_offsets

        return list_offsets(self.bootstrap, topic, spec)

    def partition_bytes(self, broker: int, topic: str) -> int:
        d = self.brokers[broker].log_dir / f"{topic}-0"
        return sum(f.stat().st_size for f in d.glob("*.log")) if d.is_dir() else 0

    def reassign(self, topic: str, target: list[int]) -> float:
        from kafka import KafkaAdminClient
        from kafka import TopicPartition as KTopicPartition

        kp = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            t0 = time.perf_counter()
            kp.alter_partition_reassignments({KTopicPartition(topic, 0): target})

            def done() -> bool:
                p = self.partition(topic)
                ongoing = kp.list_partition_reassignments([KTopicPartition(topic, 0)])
                return sorted(p.isrs) == sorted(target) and not ongoing  # type: ignore[attr-defined]

            wait_for(f"{topic} reassigned", done)
            return time.perf_counter() - t0
        finally:
            kp.close()

    def consume_all(self, topic: str, end: int) -> float:
        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "fetch.max.bytes": 52_428_800,
                "max.partition.fetch.bytes": 10_485_760,
            }
        )
        c.assign([TopicPartition(topic, 0, 0)])
        t0 = time.perf_counter()
        last = -1
        try:
            while last < end - 1:
                for m in c.consume(1000, timeout=5.0):
                    if m.error() is not None:
                        raise RuntimeError(str(m.error()))
                    last = m.offset()
            return time.perf_counter() - t0
        finally:
            c.close()

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.alive():
                b.stop(timeout=120)


def new_replica(bench: Bench, size: int, local: int) -> None:
    results = {}
    for tiered in (False, True):
        topic = f"{'tiered' if tiered else 'plain'}-{uuid.uuid4().hex[:6]}"
        configs = {"segment.bytes": str(SEGMENT_BYTES)}
        if tiered:
            configs |= {"remote.storage.enable": "true", "local.retention.bytes": str(local)}
        bench.create(topic, [1, 2], configs)
        bench.produce(topic, size)
        end = bench.list_offset(topic, -1)
        if tiered:
            wait_for(
                "tiered and locally retained",
                lambda t=topic: (
                    bench.list_offset(t, -4) > 0
                    and bench.partition_bytes(1, t) <= local + 2 * SEGMENT_BYTES
                ),
            )
        seconds = bench.reassign(topic, [1, 3])
        results[tiered] = (bench.partition_bytes(3, topic), seconds)
        print(f"# {topic}: {end} records, leader holds {bench.partition_bytes(1, topic):,} B "
              "locally", flush=True)  # fmt: skip
    (plain_b, plain_s), (tiered_b, tiered_s) = results[False], results[True]
    line("new replica, untiered: bytes", plain_b / MB, "MB")
    line("new replica, untiered: seconds to ISR", plain_s, "s")
    line("new replica, tiered: bytes", tiered_b / MB, "MB", tiered_b / plain_b, "untiered")
    line("new replica, tiered: seconds to ISR", tiered_s, "s", tiered_s / plain_s, "untiered")


def remote_consume_after_failover(bench: Bench, size: int, rounds: int) -> None:
    topic = f"cold-{uuid.uuid4().hex[:6]}"
    bench.create(
        topic,
        [1, 2, 3],
        {
            "segment.bytes": str(SEGMENT_BYTES),
            "remote.storage.enable": "true",
            "local.retention.bytes": "1",
        },
    )
    bench.produce(topic, size)
    end = bench.list_offset(topic, -1)
    wait_for("fully tiered", lambda: bench.list_offset(topic, -4) > end - SEGMENT_BYTES // RECORD)
    old = bench.partition(topic).leader  # type: ignore[attr-defined]
    before = [bench.consume_all(topic, end) for _ in range(rounds)]
    bench.brokers[old].stop(signal.SIGKILL)
    wait_for("a new leader", lambda: bench.partition(topic).leader not in (old, -1))  # type: ignore[attr-defined]
    after = [bench.consume_all(topic, end) for _ in range(rounds)]
    mb = size / MB
    print(f"# reads, old leader: {[round(mb / s) for s in before]} MB/s; new leader (the first "
          f"one cold): {[round(mb / s) for s in after]} MB/s", flush=True)  # fmt: skip
    line("remote consume, old leader (first read)", mb / before[0], "MB/s")
    line("remote consume, new leader (first read)", mb / after[0], "MB/s",
         before[0] / after[0], "old leader's first")  # fmt: skip
    line("remote consume, old leader (best)", mb / min(before), "MB/s")
    line("remote consume, new leader (best)", mb / min(after), "MB/s",
         min(before) / min(after), "old leader's best")  # fmt: skip
    bench.brokers[old].start()


def main(argv: list[str] | None = None) -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=100 if quick else 1024)
    ap.add_argument("--local-mb", type=int, default=10)
    ap.add_argument("--consume-mb", type=int, default=100 if quick else 500)
    ap.add_argument("--rounds", type=int, default=3, help="reads on each side of the failover")
    args = ap.parse_args(argv)
    why = available()
    if why is not None:
        print(f"# bench_cluster_tiered: skipped: {why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-cluster-tiered-") as tmp:
        work = Path(tmp)
        zk = ZooKeeperServer(work / "zookeeper")
        zk.start()
        bench = Bench(work, zk)
        try:
            new_replica(bench, args.size_mb * MB, args.local_mb * MB)
            remote_consume_after_failover(bench, args.consume_mb * MB, args.rounds)
        finally:
            bench.stop()
            zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
