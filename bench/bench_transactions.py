"""Transactions benchmark: transactional produce against idempotent produce, same broker, same
run.

confluent-kafka producers (acks=all, idempotence on, linger.ms=5) send 100-byte records to a
2-partition topic of one ``tierlog serve``; the transactional one commits every 1,000 records
(begin, 1,000 produces, commit_transaction: AddPartitionsToTxn, EndTxn, the markers). The modes
alternate for ``--rounds`` rounds and the best run of each counts (the machine is shared and
noisy: each round's ratio is printed too). The figure is transactional records/s with its ratio
against idempotent records/s (goal >= 0.8).

Knobs: ``--records N`` (default 400,000; ``BENCH_QUICK=1`` -> 60,000), ``--per-txn``,
``--rounds`` (default 3).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_broker import tierlog_broker  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

RECORD = b"x" * 100


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


def idempotent(bootstrap: str, topic: str, n: int) -> float:
    p = producer(bootstrap)
    t0 = time.perf_counter()
    produce_all(p, topic, n)
    assert p.flush(120) == 0
    return n / (time.perf_counter() - t0)


def transactional(bootstrap: str, topic: str, n: int, per_txn: int, run: int) -> float:
    p = producer(bootstrap, **{"transactional.id": f"bench-{run}"})
    p.init_transactions(30)
    t0 = time.perf_counter()
    for start in range(0, n, per_txn):
        p.begin_transaction()
        produce_all(p, topic, min(per_txn, n - start))
        p.commit_transaction(60)
    return n / (time.perf_counter() - t0)


def main() -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=60_000 if quick else 400_000)
    ap.add_argument("--per-txn", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, tierlog_broker(Path(d)) as b:
        bootstrap = f"127.0.0.1:{b.port}"
        idem: list[float] = []
        txn: list[float] = []
        for run in range(args.rounds):
            topic = f"idem-{run}"
            create_topic(bootstrap, topic)
            idem.append(idempotent(bootstrap, topic, args.records))
            topic = f"txn-{run}"
            create_topic(bootstrap, topic)
            txn.append(transactional(bootstrap, topic, args.records, args.per_txn, run))
            print(
                f"round {run}: idempotent {idem[-1]:,.0f}, transactional {txn[-1]:,.0f} "
                f"records/s ({txn[-1] / idem[-1]:.2f})",
                flush=True,
            )
    best_idem, best_txn = max(idem), max(txn)
    print(f"idempotent produce: {best_idem:,.0f} records/s (baseline)")
    print(
        f"transactional produce, {args.per_txn} records per transaction: "
        f"{best_txn:,.0f} records/s ({best_txn / best_idem:.2f} vs idempotent)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
