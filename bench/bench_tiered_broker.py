"""Tiered storage through the broker: ``tierlog serve`` with remote storage on a local dir and
on a real S3 server (SeaweedFS, started here on 127.0.0.1), read by confluent-kafka.

Prints ``name: value unit (ratio vs baseline)`` per backend:

* sequential consume (assign from offset 0, librdkafka) of a fully tiered partition, index
  cache cold (deleted before a broker restart), vs the same records in a partition of the same
  broker that is only local -- the baseline measured in the same run; then the tiered
  partition again with a warm index cache; ``ROUNDS`` rounds (a fresh broker each, warmed by one
  fetch of each topic's last record), which topic goes first alternating, ratios as median
  (min, max) of the rounds;
* remote requests per cold segment read during that consume (S3: counted by a TCP proxy in
  front of the server; goal 2: one indexes GET + one ranged data GET per segment and fetch;
  the read-ahead's ranged GETs are 4 MiB runs);
* the same partitions read by a minimal wire client (sequential 1 MiB Fetch v12 over one
  connection, no record decoding): what the broker serves without a consumer's CPU (on a
  2-core machine the consumer, the broker and the S3 server compete for the cores);
* produce + tier everything: the records' bytes over the wall clock from the first produce
  to the last local segment deleted after its COPY_SEGMENT_FINISHED (200 ms task interval).

``BENCH_QUICK=1``: 200,000 records of 100 bytes instead of 1,000,000. ``BENCH_PREFETCH_BYTES=0``:
the broker's ``remote.log.reader.prefetch.max.bytes`` (default: the broker's, parallel block
reads ahead on; 0: one ranged read per fetch, as before the read-ahead). ``BENCH_BACKENDS=s3``
(or ``file``): only those backends (default: both). ``BENCH_ROUNDS``: rounds (even; default 2
quick, 4).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_tiered_read import start_weed  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.conftest import ACCESS_KEY, BUCKET, SECRET_KEY, stop_seaweedfs  # noqa: E402
from tests.integration.tiered_support import fetch  # noqa: E402
from tests.tiered.conftest import RequestCounter  # noqa: E402

QUICK = bool(os.environ.get("BENCH_QUICK"))
N = 200_000 if QUICK else 1_000_000
RECORD_SIZE = 100
SEGMENT_BYTES = 8 << 20
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 2 if QUICK else 4))  # even: each topic first as often
BACKENDS = os.environ.get("BENCH_BACKENDS", "file,s3").split(",")

PRODUCER_CONF = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "none",
}
CONSUMER_CONF = {
    "group.id": "bench",
    "enable.auto.commit": False,
    "enable.partition.eof": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 1_048_576,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 262_144,
    "fetch.queue.backoff.ms": 5,
}


def report(name: str, value: float, unit: str, ratio: float | None = None, goal: str = "") -> None:
    tail = f" ({ratio:.2f} vs baseline{', goal ' + goal if goal else ''})" if ratio else ""
    print(f"{name}: {value:,.2f} {unit}{tail}", flush=True)


def spread(name: str, ratios: list[float], goal: str = "") -> None:
    """A ratio to the baseline over rounds: median (min-max)."""
    tail = f", goal {goal}" if goal else ""
    print(f"{name}: {statistics.median(ratios):.2f} vs baseline (min {min(ratios):.2f}, "
          f"max {max(ratios):.2f}, {len(ratios)} rounds{tail})", flush=True)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    def __init__(self, workdir: Path, overrides: list[str]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.overrides = [
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"log.dirs={workdir / 'logs'}",
            "remote.log.storage.system.enable=true",
            "remote.log.manager.task.interval.ms=200",
            "log.retention.check.interval.ms=200",
            "remote.log.metadata.topic.num.partitions=3",
            *(
                [f"remote.log.reader.prefetch.max.bytes={os.environ['BENCH_PREFETCH_BYTES']}"]
                if "BENCH_PREFETCH_BYTES" in os.environ
                else []
            ),
            "offsets.topic.num.partitions=3",
            *overrides,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [sys.executable, "-m", "tierlog.cli", "serve"]
        for o in self.overrides:
            args += ["--override", o]
        env = {**os.environ, "TIERLOG_LOG_LEVEL": "WARNING"}
        log = open(self.workdir / "broker.log", "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("broker did not start")

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def produce(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    value = b"x" * RECORD_SIZE
    for _ in range(N):
        try:
            p.produce(topic, value)
        except BufferError:
            p.poll(0.001)
            p.produce(topic, value)
    assert p.flush(120) == 0


def consume(bootstrap: str, topic: str) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONF})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    t0 = time.perf_counter()
    while got < N and time.perf_counter() - t0 < 300:
        for m in c.consume(100_000, 1.0):
            if m.error() is None:
                got += 1
    dt = time.perf_counter() - t0
    c.close()
    if got < N:
        raise RuntimeError(f"consumed {got} of {N}")
    return dt


def wire_consume(bootstrap: str, topic: str) -> tuple[float, int]:
    """Sequential 1 MiB Fetch v12 requests over one connection, no record decoding (what
    the broker itself serves, without a consumer's CPU): (seconds, bytes)."""
    import datetime
    import importlib

    from tests.integration.wire import WireClient, request_class

    from tierlog.server.remote_read_ahead import next_fetch_offset

    cls = request_class(1, 12)
    m = importlib.import_module(cls.__module__)
    c = WireClient(bootstrap, timeout=60)
    offset, total = 0, 0
    t0 = time.perf_counter()
    try:
        while offset < N:
            part = m.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
            req = cls(
                max_wait=datetime.timedelta(milliseconds=500),
                min_bytes=1,
                topics=(m.FetchTopic(topic=topic, partitions=(part,)),),
                forgotten_topics_data=(),
            )
            p = c.call(req).responses[0].partitions[0]
            if p.error_code or not p.records:
                raise RuntimeError(f"fetch at {offset}: error {p.error_code}")
            total += len(p.records)
            nxt = next_fetch_offset(p.records)
            assert nxt is not None and nxt > offset
            offset = nxt
    finally:
        c.close()
    return time.perf_counter() - t0, total


def offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """(local log start, log end) through ListOffsets -4 / -1 (kafka-python)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient
        from kafka.structs import TopicPartition as KTP

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tp = KTP(topic, 0)
        local = admin.list_partition_offsets({tp: -4})[tp].offset
        end = admin.list_partition_offsets({tp: -1})[tp].offset
        return int(local), int(end)
    finally:
        admin.close()


def run(backend: str, workdir: Path, overrides: list[str], counter: RequestCounter | None) -> None:
    workdir.mkdir(parents=True)
    b = Broker(workdir, overrides)
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topics = [
        NewTopic("local", 1, 1, config={"segment.bytes": str(SEGMENT_BYTES)}),
        NewTopic(
            "tiered",
            1,
            1,
            config={
                "segment.bytes": str(SEGMENT_BYTES),
                "remote.storage.enable": "true",
                "local.retention.ms": "1000",
            },
        ),
    ]
    for f in admin.create_topics(topics).values():
        f.result(30)
    produce(b.bootstrap, "local")
    t0 = time.perf_counter()
    produce(b.bootstrap, "tiered")
    while offsets(b.bootstrap, "tiered")[0] < N:
        time.sleep(0.1)
    tier_s = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in (workdir / "logs" / "local-0").glob("*.log"))
    report(f"{backend} produce + tier everything (broker)", size / tier_s / 1e6, "MB/s")
    # Rounds, alternating which topic goes first (the machine is shared and noisy): each round
    # a fresh broker process with no index cache on disk (cold), then the same partition again
    # (warm); the local partition read between them. Ratios: median (min-max) of the rounds.
    mb = N * (RECORD_SIZE + 8) / 1e6  # record payload + key/overhead, same for both
    cold_r, warm_r, wire_r, locals_, colds, wire_local = [], [], [], [], [], []
    for i in range(ROUNDS):
        b.stop()
        shutil.rmtree(workdir / "logs" / "remote-log-index-cache", ignore_errors=True)
        b.start()
        # A fresh process's first requests pay for imports and first calls: one fetch of the
        # last record of each topic first, so neither topic's figure carries them (the tiered
        # one warms one segment's indexes of the 13: the read stays cold).
        for t in ("local", "tiered"):
            got = fetch(b.bootstrap, [(t, 0, N - 1)])[(t, 0)]
            if got[0] != 0 or not got[1]:
                raise RuntimeError(f"warm-up fetch of {t}: {got[0]}")
        if i % 2:
            local = consume(b.bootstrap, "local")
            cold = consume(b.bootstrap, "tiered")
        else:
            cold = consume(b.bootstrap, "tiered")
            local = consume(b.bootstrap, "local")
        warm = consume(b.bootstrap, "tiered")
        order = ("tiered", "local") if i % 2 else ("local", "tiered")
        rates = {}
        for t in order:
            secs, n_bytes = wire_consume(b.bootstrap, t)
            rates[t] = n_bytes / secs
        locals_.append(N / local)
        colds.append(N / cold)
        wire_local.append(rates["local"])
        cold_r.append(local / cold)
        warm_r.append(local / warm)
        wire_r.append(rates["tiered"] / rates["local"])
    report(f"{backend} consume local (median of {ROUNDS})", statistics.median(locals_),
           "records/s")  # fmt: skip
    spread(f"{backend} consume fully tiered, cold index cache", cold_r, ">= 0.9"
           if backend == "file" else ">= 0.8")  # fmt: skip
    spread(f"{backend} consume fully tiered, warm index cache", warm_r)
    report(f"{backend} consume fully tiered, cold", statistics.median(colds) * mb / N, "MB/s")
    report(f"{backend} wire fetch loop (no decode), local", statistics.median(wire_local) / 1e6,
           "MB/s")  # fmt: skip
    spread(f"{backend} wire fetch loop (no decode), fully tiered", wire_r)
    b.stop()
    if counter is None:
        return
    # Request counts: the broker again, cold, through the counting proxy.
    b.overrides = [
        f"rsm.config.s3.endpoint={counter.endpoint}" if o.startswith("rsm.config.s3.endpoint=")
        else o
        for o in b.overrides
    ]  # fmt: skip
    shutil.rmtree(workdir / "logs" / "remote-log-index-cache", ignore_errors=True)
    b.start()
    counter.clear()
    consume(b.bootstrap, "tiered")
    requests = list(counter.requests)
    index_gets = sum(1 for r in requests if r.startswith("GET ") and ".indexes" in r)
    data_gets = sum(1 for r in requests if r.startswith("GET ") and ".indexes" not in r)
    heads = sum(1 for r in requests if r.startswith("HEAD "))
    n_segments = -(-size // SEGMENT_BYTES)
    mib = -(-size // (1 << 20))
    report(f"{backend} cold consume: indexes GETs per remote segment", index_gets / n_segments,
           "requests", goal="1")  # fmt: skip
    report(f"{backend} cold consume: data GETs per MiB consumed", data_gets / mib, "requests",
           goal="~0.25: 4 MiB reads (+ the cold read and short reads at segment ends)")  # fmt: skip
    report(f"{backend} cold consume: HEAD requests", heads, "requests", goal="0")
    # One Fetch of one cold segment (fresh broker, no index cache): the exact count. The last
    # record: its segment ends there and the read ahead of the next offset (local) needs no
    # remote request, so only this read is counted.
    b.stop()
    shutil.rmtree(workdir / "logs" / "remote-log-index-cache", ignore_errors=True)
    b.start()
    counter.clear()
    r = fetch(b.bootstrap, [("tiered", 0, N - 1)])
    assert r[("tiered", 0)][0] == 0 and r[("tiered", 0)][1]
    time.sleep(0.5)
    report(f"{backend} remote requests for one cold segment read", len(counter.requests),
           "requests", goal="2 (Kafka: 4)")  # fmt: skip
    b.stop()


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-tiered-broker-"))
    sw = start_weed(root / "seaweedfs")
    counter = RequestCounter(sw.port)
    try:
        if "file" in BACKENDS:
            file = [f"rsm.config.uri={(root / 'remote').as_uri()}"]
            run("file", root / "file", file, None)
        s3 = [
            f"rsm.config.uri=s3://{BUCKET}/bench",
            f"rsm.config.s3.endpoint={sw.endpoint}",
            "rsm.config.s3.region=us-east-1",
            f"rsm.config.s3.access.key={ACCESS_KEY}",
            f"rsm.config.s3.secret.key={SECRET_KEY}",
        ]
        if "s3" in BACKENDS:
            run("s3", root / "s3", s3, counter)
    finally:
        counter.close()
        stop_seaweedfs(sw)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
