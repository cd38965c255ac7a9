"""Client quotas: what the check costs every Produce and Fetch, and what a 1 MB/s
``producer_byte_rate`` quota does to two producers sharing a broker.

Figures (``name: value unit (ratio vs baseline)``):

* in process, ns per :meth:`ClientQuotas.throttle_produce` call: no quota configured (the
  cost on every request of a broker without quotas; baseline: an empty method call), 100
  entities configured but none for this client, and this client's quota matched and recorded;
* a real broker, two confluent-kafka producers (client ids ``slow`` and ``fast``, 64 KB
  records, acks=1) for ``--seconds`` each run: first without any quota (the baseline), then
  with 1 MB/s on ``slow`` (``quota.window.num=3``). Reported: each producer's MB/s, the
  throttled rate against its quota, and ``fast``'s rate against its own rate without the quota
  (unaffected ≈ 1.0 or more: ``slow`` no longer competes for the broker).

Knobs: ``--seconds S`` (default 10; ``BENCH_QUICK=1`` → 5), ``--calls N`` (default 1,000,000;
quick → 100,000).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.broker_process import running_broker  # noqa: E402
from tests.integration.wire import WireClient, request_class  # noqa: E402

from tierlog.quotas.client_quota_entity import DEFAULT, ClientQuotaEntity  # noqa: E402
from tierlog.server.client_quotas import ClientQuotas, MemoryQuotaStore  # noqa: E402

MB = 1 << 20
QUICK = os.environ.get("BENCH_QUICK") == "1"


class _Empty:
    def call(self, user: str, client_id: str | None, size: int) -> int:
        return 0


def _per_call_ns(fn: object, calls: int) -> float:
    f = fn  # bound method
    t0 = time.perf_counter()
    for _ in range(calls):
        f("alice", "app", 1000)  # type: ignore[operator]
    return (time.perf_counter() - t0) / calls * 1e9


def bench_in_process(calls: int) -> None:
    baseline = _per_call_ns(_Empty().call, calls)
    none = ClientQuotas(MemoryQuotaStore())
    others = ClientQuotas(MemoryQuotaStore())
    others.apply(
        {ClientQuotaEntity(None, f"client-{i}"): {"producer_byte_rate": 1e9} for i in range(100)}
    )
    matched = ClientQuotas(MemoryQuotaStore())
    matched.apply({ClientQuotaEntity(None, DEFAULT): {"producer_byte_rate": 1e12}})
    for name, q in (("no quota", none), ("100 other entities", others), ("matched", matched)):
        ns = _per_call_ns(q.throttle_produce, calls)
        print(f"throttle_produce, {name}: {ns:.0f} ns/call ({ns / baseline:.1f}x an empty call)")


def _alter_slow(bootstrap: str, rate: int) -> None:
    cls = request_class(49, 1)
    m = importlib.import_module(cls.__module__)
    req = cls(
        entries=(
            m.EntryData(
                entity=(m.EntityData(entity_type="client-id", entity_name="slow"),),
                ops=(m.OpData(key="producer_byte_rate", value=float(rate), remove=False),),
            ),
        ),
        validate_only=False,
    )
    c = WireClient(bootstrap)
    try:
        resp = c.call(req)
    finally:
        c.sock.close()
    assert all(int(e.error_code.value) == 0 for e in resp.entries), resp


def _produce(bootstrap: str, topic: str, client_id: str, seconds: float, out: dict) -> None:
    delivered: list[tuple[float, int]] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": 1,
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 4096,
        }
    )
    value = b"x" * 65536

    def done(err: object, msg: object) -> None:
        if err is None:
            delivered.append((time.monotonic(), 65536))

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, value=value, on_delivery=done)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.flush(60)
    out["delivered"] = delivered


def _run(bootstrap: str, seconds: float) -> tuple[float, float]:
    """(slow, fast) MB/s, measured over the run's last 60% (after the first windows)."""
    results: dict[str, dict] = {"slow": {}, "fast": {}}
    t0 = time.monotonic()
    threads = [
        threading.Thread(target=_produce, args=(bootstrap, f"q-{n}", n, seconds, results[n]))
        for n in results
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    start, end = t0 + 0.4 * seconds, t0 + seconds

    def rate(name: str) -> float:
        got = sum(n for t, n in results[name]["delivered"] if start <= t < end)
        return got / (end - start) / MB

    return rate("slow"), rate("fast")


def _fresh_run(seconds: float, quota: int | None) -> tuple[float, float]:
    """One run on a broker of its own (the previous run's gigabytes do not weigh on it)."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-quotas-") as tmp,
        running_broker(Path(tmp) / "b", "quota.window.num=3") as b,
    ):
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        fs = admin.create_topics([NewTopic(f"q-{n}", 1, 1) for n in ("slow", "fast")])
        for f in fs.values():
            f.result(30)
        del admin, fs  # its connection closed before the broker stops (no reconnect noise)
        if quota is not None:
            _alter_slow(b.bootstrap, quota)
        return _run(b.bootstrap, seconds)


def bench_broker(seconds: float) -> None:
    slow0, fast0 = _fresh_run(seconds, None)
    print(f"no quota: slow {slow0:.1f} MB/s, fast {fast0:.1f} MB/s (baseline)")
    slow1, fast1 = _fresh_run(seconds, MB)
    print(f"throttled producer (1 MB/s quota): {slow1:.2f} MB/s "
          f"({slow1:.2f}x the quota, {slow1 / slow0:.3f}x its rate without)")  # fmt: skip
    print(f"other producer: {fast1:.1f} MB/s ({fast1 / fast0:.2f}x its rate without "
          "the other's quota)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0 if QUICK else 10.0)
    ap.add_argument("--calls", type=int, default=100_000 if QUICK else 1_000_000)
    args = ap.parse_args()
    bench_in_process(args.calls)
    bench_broker(args.seconds)


if __name__ == "__main__":
    main()
