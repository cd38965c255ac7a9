"""What ZooKeeper watches cost at many partitions: a 3-broker cluster (RF 3) on a real ZooKeeper.

tierlog's brokers learn partition state from ZooKeeper watches (one per partition per broker,
see tierlog.cluster.zk_broker) instead of Kafka's LeaderAndIsr/UpdateMetadata requests. For
``--partitions`` partitions (topics of ``--per-topic``) this prints:

* CreateTopics until every partition has a leader and a full ISR on every broker's metadata
  (wall seconds, and per partition);
* a broker restart after a clean shutdown until it says it started and until it leads its
  preferred partitions again (its watches re-read every state znode);
* each broker's resident memory, per partition;
* the baseline: the same partitions created on a single node (no ZooKeeper), same run, and
  the ratio.

    .venv/bin/python bench/bench_cluster_metadata.py [--partitions 10000] [--per-topic 100]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.integration.cluster_support import Cluster, wait_for  # noqa: E402
from tests.integration.wire import WireClient, request_class  # noqa: E402
from tests.zookeeper_process import ZooKeeperProcess  # noqa: E402


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def create(bootstrap: str, names: list[str], per_topic: int, rf: int) -> None:
    cls = request_class(19, 5)
    m = sys.modules[cls.__module__]
    c = WireClient(bootstrap, timeout=600)
    try:
        for i in range(0, len(names), 20):
            req = cls(
                topics=tuple(
                    m.CreatableTopic(
                        name=n,
                        num_partitions=per_topic,
                        replication_factor=rf,
                        assignments=(),
                        configs=(),
                    )
                    for n in names[i : i + 20]
                ),
                timeout=datetime.timedelta(seconds=600),
                validate_only=False,
            )
            errors = {t.name: int(t.error_code) for t in c.call(req).topics}
            assert not any(errors.values()), errors
    finally:
        c.close()


def metadata_partitions(bootstrap: str) -> tuple[int, int]:
    """(partitions with a leader, partitions with a full ISR of 3) in one broker's Metadata."""
    cls = request_class(3, 12)
    c = WireClient(bootstrap, timeout=120)
    try:
        resp = c.call(cls(topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False))  # fmt: skip
    finally:
        c.close()
    led = full = 0
    for t in resp.topics:
        if str(t.name).startswith("__"):
            continue
        for p in t.partitions:
            led += int(p.leader_id) >= 0
            full += len(p.isr_nodes) == 3
    return led, full


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=100)
    args = ap.parse_args()
    n_topics = max(1, args.partitions // args.per_topic)
    total = n_topics * args.per_topic
    names = [f"t{i:05d}-{uuid.uuid4().hex[:6]}" for i in range(n_topics)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "zk").mkdir()
        zk = ZooKeeperProcess(root / "zk")
        zk.start()
        cluster = Cluster(root / "cluster", f"{zk.connect_string}/bench", 3,
                          "auto.leader.rebalance.enable=false")  # fmt: skip
        try:
            cluster.start()
            idle = {i: rss(b.proc.pid) for i, b in cluster.brokers.items() if b.proc}
            t0 = time.monotonic()
            create(cluster.brokers[1].bootstrap, names, args.per_topic, 3)
            created = time.monotonic() - t0
            for b in cluster:
                wait_for(
                    f"{total} partitions healthy on {b.bootstrap}",
                    lambda b=b: metadata_partitions(b.bootstrap) == (total, total),
                    1800,
                )
            healthy = time.monotonic() - t0
            mem = {i: rss(b.proc.pid) for i, b in cluster.brokers.items() if b.proc}
            b1 = cluster.brokers[1]
            b1.stop(timeout=600)
            t1 = time.monotonic()
            b1.start(timeout=600)
            started = time.monotonic() - t1
            wait_for("broker 1 back in every ISR",
                     lambda: metadata_partitions(b1.bootstrap) == (total, total), 1800)  # fmt: skip
            back = time.monotonic() - t1
        finally:
            cluster.stop(timeout=600)  # controlled shutdowns move thousands of leaders
            zk.stop()
        (root / "single").mkdir()
        single = BrokerProcess(root / "single")
        single.start()
        try:
            t2 = time.monotonic()
            create(single.bootstrap, [f"s-{n}" for n in names], args.per_topic, 1)
            single_created = time.monotonic() - t2
        finally:
            single.stop()
    print(f"partitions: {total} ({n_topics} topics of {args.per_topic}), RF 3 on 3 brokers")
    print(f"CreateTopics answered: {created:.1f} s; every broker's metadata healthy after "
          f"{healthy:.1f} s ({healthy / total * 1000:.2f} ms per partition)")  # fmt: skip
    print(f"single node, same partitions, RF 1: {single_created:.1f} s; "
          f"cluster/single: {healthy / single_created:.1f}x")  # fmt: skip
    print(f"broker restart: started in {started:.1f} s, back in every ISR after {back:.1f} s")
    for i in sorted(mem):
        print(f"broker {i}: {mem[i] / 2**20:.0f} MB resident "
              f"({(mem[i] - idle[i]) / total / 1024:.1f} KB per partition above idle)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
