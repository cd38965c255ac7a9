"""Inter-broker client benchmark: a follower's fetch loop against a real single-node broker.

One :class:`~tierlog.cluster.broker_client.BrokerClient` (the replica fetcher's) sends Fetch
v12 requests one at a time, as a fetcher does, each answered with ``--partition-max-bytes``
(default 1 MiB, Kafka's ``replica.fetch.max.bytes``) of a partition written beforehand (in
the page cache), for ``--fetches`` fetches per round and ``--rounds`` rounds.

Figures (the best round of each), each with its ratio against a **baseline** measured in the
same run, rounds taking turns: the same fetches over a plain blocking socket that only reads
each response's bytes into one reused buffer (no framing beyond the size, no parse), the floor
any client of this broker has:

* **client cpu per 100 MB received**: CPU seconds of this process (the client: receive,
  framing, kio's parse) per 100 MB of records;
* **broker cpu per 100 MB served**: the broker process's utime + stime (/proc) per 100 MB;
* **fetch loop**: MB/s of records through the loop (one fetch in flight: bounded by the round
  trip, as a follower that is behind).

``BENCH_QUICK=1`` scales down.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic  # noqa: E402
from kio.schema.types import BrokerId, TopicName  # noqa: E402
from kio.static.primitive import i8, i32, i32Timedelta, i64  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.integration import wire  # noqa: E402

from tierlog.cluster.broker_client import BrokerClient  # noqa: E402

TOPIC = "bench-fetch"
RECORD = 1000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fetch_request(offset: int, partition_max_bytes: int) -> FetchRequest:
    return FetchRequest(
        replica_id=BrokerId(-1),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=0)),
        min_bytes=i32(1),
        max_bytes=i32(10 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            FetchTopic(
                topic=TopicName(TOPIC),
                partitions=(
                    FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(offset),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(partition_max_bytes),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def fill(bootstrap: str, records: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 100_000})
    value = os.urandom(RECORD)
    for _ in range(records):
        while True:
            try:
                p.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120):
        raise RuntimeError("records left unacknowledged")


def _figures(total: int, cpu0: float, broker0: float, t0: float, pid: int) -> dict[str, float]:
    wall = time.perf_counter() - t0
    per100 = 1e8 / total
    return {
        "client": (time.process_time() - cpu0) * per100,
        "broker": (cpu_seconds(pid) - broker0) * per100,
        "loop": total / 1e6 / wall,
    }


def _offsets(args: argparse.Namespace) -> list[int]:
    step = args.partition_max_bytes // (RECORD + 70)  # about one response of records
    last_start = args.records - 2 * step
    out, offset = [], 0
    for _ in range(args.fetches):
        out.append(offset)
        offset = offset + step if offset < last_start else 0
    return out


async def client_round(
    client: BrokerClient, pid: int, args: argparse.Namespace
) -> dict[str, float]:
    """One round of the BrokerClient loop."""
    total = 0
    cpu0, broker0, t0 = time.process_time(), cpu_seconds(pid), time.perf_counter()
    for offset in _offsets(args):
        response = await client.request(
            fetch_request(offset, args.partition_max_bytes), api_version=12, timeout_s=30
        )
        total += len(response.responses[0].partitions[0].records or b"")
    return _figures(total, cpu0, broker0, t0, pid)


def raw_round(sock: socket.socket, pid: int, args: argparse.Namespace) -> dict[str, float]:
    """One round of the baseline: the same requests (encoded before the clock starts), each
    response's bytes read into one reused buffer and counted, nothing parsed."""
    requests = [
        wire.encode(fetch_request(offset, args.partition_max_bytes), i)
        for i, offset in enumerate(_offsets(args))
    ]
    buf = memoryview(bytearray(args.partition_max_bytes + (1 << 20)))
    total = 0
    cpu0, broker0, t0 = time.process_time(), cpu_seconds(pid), time.perf_counter()
    for data in requests:
        sock.sendall(data)
        size = int.from_bytes(wire.recv_exact(sock, 4), "big")
        got = 0
        while got < size:
            n = sock.recv_into(buf[got:size])
            if not n:
                raise ConnectionError("the broker closed the connection")
            got += n
        total += size  # the response's frame: its records and ~100 bytes of fields
    return _figures(total, cpu0, broker0, t0, pid)


async def fetch_loops(port: int, broker_pid: int, args: argparse.Namespace) -> None:
    client = BrokerClient("bench-broker-client")
    await client.connect("127.0.0.1", port, timeout_s=10)
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    best: dict[str, dict[str, float]] = {"client": {}, "raw": {}}
    try:
        for rnd in range(args.rounds):
            rows = {"client": await client_round(client, broker_pid, args)}
            rows["raw"] = raw_round(sock, broker_pid, args)
            for name, figures in rows.items():
                print(
                    f"# round {rnd + 1}, {name}: client {figures['client']:.3f} cpu s and broker"
                    f" {figures['broker']:.3f} cpu s per 100 MB, {figures['loop']:.0f} MB/s",
                    flush=True,
                )
                b = best[name]
                for k, v in figures.items():
                    b[k] = max(b.get(k, v), v) if k == "loop" else min(b.get(k, v), v)
    finally:
        sock.close()
        await client.close()
    c, r = best["client"], best["raw"]
    print(
        f"client cpu per 100 MB received, best: {c['client']:.3f} cpu s"
        f" ({c['client'] / r['client']:.2f}x vs raw socket read {r['client']:.3f})"
    )
    print(
        f"broker cpu per 100 MB served, best: {c['broker']:.3f} cpu s"
        f" ({c['broker'] / r['broker']:.2f}x vs raw socket read {r['broker']:.3f})"
    )
    print(
        f"fetch loop (one fetch in flight), best: {c['loop']:,.0f} MB/s"
        f" ({c['loop'] / r['loop']:.2f}x vs raw socket read {r['loop']:,.0f})"
    )


def main() -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000, help="records of 1000 B written")
    ap.add_argument("--fetches", type=int, default=100 if quick else 300)
    ap.add_argument("--rounds", type=int, default=3 if quick else 5)
    ap.add_argument("--partition-max-bytes", type=int, default=1 << 20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-broker-client-") as tmp:
        broker = BrokerProcess(Path(tmp), "offsets.topic.num.partitions=1")
        broker.start()
        try:
            fill(broker.bootstrap, args.records)
            assert broker.proc is not None and broker.port is not None
            asyncio.run(fetch_loops(broker.port, broker.proc.pid, args))
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
