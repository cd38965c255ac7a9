"""Broker metrics cost: produce throughput with ``metrics.port`` on (and Prometheus scraping it)
vs off, in one run.

Two ``tierlog serve`` processes, identical but for ``metrics.port``; runs alternate between them
(off, on, off, on, ...) so that the shared machine's noise hits both alike, and the median of
each side is compared. While the metrics broker is measured, a scraper thread reads its
``/metrics`` once a second (Prometheus' default is every 15 s: this is the harsher case).

Figures (``name: value unit (ratio vs baseline)``, the baseline being the broker without
metrics):

* in-process: one produce request's work in the replica manager (a 100-record batch appended to
  a real log) with and without what metrics add per request; thread CPU time, minimum of
  alternating rounds: the figure least disturbed by the other processes on the machine;

* wire produce, 1 MB batches (9,000 records of 100 bytes): what the broker sustains;
* wire produce, small batches (100 records): ~100x more requests per byte, so the per-request
  counting (RequestMetrics, BrokerTopicMetrics) weighs the most;
* confluent-kafka produce (librdkafka, acks=all): what a real client sees.

Each also as the broker's CPU time per record (from /proc), whose ratio is the throughput a
CPU-bound broker keeps; it is far less sensitive than wall time to other processes on the
cores (this machine's load average is often above its 2 cores).

The goal (issue 15) is a ratio of at least 0.97. ``--aa`` runs the same with metrics off on
both sides (an A/A run: how far from 1.0 the machine's noise alone puts the ratios);
``--no-scrape`` leaves the endpoint unscraped. Knobs: ``--records N`` (default 2,000,000;
``BENCH_QUICK=1`` -> 100,000), ``--rounds R`` (default 5), ``--partitions P`` (default 1).
Run: ``.venv/bin/python bench/bench_metrics.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from kio.index import load_request_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_broker import (
    RECORD_SIZE,
    Broker,
    WireConnection,
    create_topic,
    free_port,
    produce,
    wait_port,
)

from tierlog.records.default_records import build_batch

IN_FLIGHT = 8


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of a process, in ns resolution (``/proc/PID/task/*/schedstat``;
    /proc/PID/stat counts 10 ms ticks, too coarse for runs of a second). Threads that ended
    are not counted: the broker's threads live as long as it does."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


@contextlib.contextmanager
def broker(workdir: Path, metrics_port: int | None) -> Iterator[Broker]:
    port = free_port()
    overrides = [
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        f"log.dirs={workdir / 'logs'}",
        "offsets.topic.num.partitions=1",
    ]
    if metrics_port is not None:
        overrides.append(f"metrics.port={metrics_port}")
    args = [sys.executable, "-m", "tierlog.cli", "serve"]
    for o in overrides:
        args += ["--override", o]
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "tierlog.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        b = Broker("tierlog-metrics" if metrics_port else "tierlog", proc, port)
        try:
            wait_port(port, proc)
            yield b
        finally:
            b.stop()


class Scraper:
    """Reads ``/metrics`` every ``interval`` seconds while running."""

    def __init__(self, port: int, interval: float = 1.0) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval = interval
        self.scrapes = 0
        self.bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as r:
            text: str = r.read().decode()
        self.scrapes += 1
        self.bytes = len(text)
        return text

    def __enter__(self) -> Scraper:
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(self.interval):
                self.scrape()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def produce_wire(bootstrap: str, topic: str, partitions: int, n: int, batch_records: int) -> float:
    """``n`` records in batches of ``batch_records``, acks=-1, pipelined; seconds taken."""
    cls = load_request_schema(0, 9)
    mod = sys.modules[cls.__module__]
    batch = build_batch([(int(time.time() * 1000), None, b"x" * RECORD_SIZE)] * batch_records)
    timeout = datetime.timedelta(seconds=30)
    conn = WireConnection(bootstrap)
    frames = [
        conn.encode(
            cls(
                transactional_id=None,
                acks=-1,
                timeout=timeout,
                topic_data=(
                    mod.TopicProduceData(
                        name=topic,
                        partition_data=(mod.PartitionProduceData(index=p, records=batch),),
                    ),
                ),
            )
        )
        for p in range(partitions)
    ]
    batches = -(-n // batch_records)
    sent = done = 0
    t0 = time.perf_counter()
    while done < batches:
        while sent < batches and sent - done < IN_FLIGHT:
            conn.sock.sendall(frames[sent % partitions])
            sent += 1
        resp = conn.read(0, 9)
        for t in resp.responses:  # type: ignore[attr-defined]
            for p in t.partition_responses:
                if p.error_code != 0:
                    raise RuntimeError(f"produce failed: {p.error_code}")
        done += 1
    dt = time.perf_counter() - t0
    conn.close()
    return dt


def in_process(rounds: int = 41, appends: int = 2_000) -> tuple[float, float]:
    """What metrics add to one produce request, without the network and other processes' noise:
    ``ReplicaManager.append_records`` of a 100-record batch as the broker does it, alone (off)
    and with what metrics add per request (on: BrokerTopicStats counting in the replica manager,
    the dispatch's two clock reads and RequestStats.record). Thread CPU time, the minimum of
    alternating rounds (the least disturbed). Returns (off, on) in microseconds per request."""
    from tierlog.log.log_config import LogConfig
    from tierlog.log.log_manager import LogManager
    from tierlog.server.broker_metrics import BrokerTopicStats, RequestStats
    from tierlog.server.replica_manager import ReplicaManager

    batch = build_batch([(int(time.time() * 1000), None, b"x" * RECORD_SIZE)] * 100)
    with tempfile.TemporaryDirectory(prefix="bench-metrics-rm-") as tmp:
        lm = LogManager([Path(tmp)], LogConfig())
        lm.startup()
        try:
            lm.create_topic("t", 1, {})
            rm = ReplicaManager(lm)
            stats = RequestStats()
            clock = time.perf_counter
            best = {"off": float("inf"), "on": float("inf")}
            for r in range(rounds):
                for side in ("off", "on") if r % 2 == 0 else ("on", "off"):
                    append = rm.append_records
                    t0 = time.thread_time()
                    if side == "on":
                        rm.topic_stats = BrokerTopicStats()
                        for _ in range(appends):
                            c0 = clock()
                            append("t", 0, batch)
                            stats.record(0, 9, (clock() - c0) * 1000.0)
                    else:
                        rm.topic_stats = None
                        for _ in range(appends):
                            append("t", 0, batch)
                    best[side] = min(best[side], (time.thread_time() - t0) / appends * 1e6)
        finally:
            lm.shutdown()
    return best["off"], best["on"]


def line(name: str, value: float, unit: str, ratio: float | None, base: str) -> None:
    fmt = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    extra = f" ({ratio:.3f}x vs {base})" if ratio is not None else ""
    print(f"{name}: {fmt} {unit}{extra}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap.add_argument("--records", type=int, default=100_000 if quick else 2_000_000)
    ap.add_argument("--rounds", type=int, default=2 if quick else 5)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--no-scrape", action="store_true", help="measure without a scraper")
    ap.add_argument(
        "--aa",
        action="store_true",
        help="A/A calibration: the 'on' broker has no metrics either (the ratio shows the noise)",
    )
    args = ap.parse_args(argv)
    n, parts = args.records, args.partitions
    off_us, on_us = in_process()
    added_us = max(on_us - off_us, 0.0)
    line("in-process append of a 100-record batch, metrics off", off_us, "us", None, "")
    line("in-process append of a 100-record batch, metrics on", on_us, "us", off_us / on_us,
         "metrics off")  # fmt: skip
    line("added by metrics per produce request", added_us, "us", None, "")
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        metrics_port = free_port()
        with (
            broker(Path(tmp) / "off", None) as off,
            broker(Path(tmp) / "on", None if args.aa else metrics_port) as on,
        ):
            scraper = Scraper(metrics_port)
            if not args.aa:
                scraper.scrape()  # the endpoint answers before anything is measured
            scraping = not (args.aa or args.no_scrape)
            small = n // 2
            # Produce requests per wire run, one partition each (librdkafka's own batching is
            # not known here).
            requests = [-(-n // 9_000), -(-small // 100), 0]
            kinds: list[tuple[str, Callable[[str, str], float], int]] = [
                ("wire produce 1MB batches", lambda b, t: produce_wire(b, t, parts, n, 9_000), n),
                ("wire produce 100-record batches",
                 lambda b, t: produce_wire(b, t, parts, small, 100), small),
                ("confluent-kafka produce", lambda b, t: produce(b, t, n // 2), n // 2),
            ]  # fmt: skip
            for i, (name, run, count) in enumerate(kinds):
                times: dict[str, list[float]] = {"off": [], "on": []}
                cpus: dict[str, list[float]] = {"off": [], "on": []}
                for r in range(args.rounds):
                    order = [("off", off), ("on", on)]
                    for side, b in order if r % 2 == 0 else order[::-1]:
                        topic = f"bench-{i}-{r}-{side}"
                        create_topic(b.bootstrap, topic, parts)
                        cpu0 = cpu_seconds(b.proc.pid)
                        if side == "on" and scraping:
                            with scraper:
                                times[side].append(run(b.bootstrap, topic))
                        else:
                            times[side].append(run(b.bootstrap, topic))
                        cpus[side].append(cpu_seconds(b.proc.pid) - cpu0)
                rate_off = count / statistics.median(times["off"])
                rate_on = count / statistics.median(times["on"])
                line(f"{name}, metrics off", rate_off, "records/s", None, "")
                line(f"{name}, metrics on", rate_on, "records/s", rate_on / rate_off,
                     "metrics off")  # fmt: skip
                # Broker CPU per record: far less sensitive than wall time to the other
                # processes sharing the cores. Ratio = the throughput a CPU-bound broker keeps.
                us_off = statistics.median(cpus["off"]) / count * 1e6
                us_on = statistics.median(cpus["on"]) / count * 1e6
                line(f"{name}, broker CPU metrics off", us_off, "us/record", None, "")
                line(f"{name}, broker CPU metrics on", us_on, "us/record", us_off / us_on,
                     "metrics off (CPU-bound throughput)")  # fmt: skip
                # The broker's whole CPU cost of a request (codec, dispatch, handler, append)
                # against what metrics add to it: the ratio a CPU-bound broker keeps, with the
                # noise of the end-to-end runs left out.
                if requests[i]:
                    per_request = us_off * count / requests[i]
                    line(
                        f"{name}, broker CPU per request",
                        per_request,
                        "us",
                        per_request / (per_request + added_us),
                        "itself plus the added cost",
                    )
            if args.aa:
                return 0
            text = scraper.scrape()
            print(
                f"scrapes: {scraper.scrapes} of {len(text):,} bytes "
                f"({sum(1 for x in text.splitlines() if x and not x.startswith('#'))} samples)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
