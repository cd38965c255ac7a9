"""Rebalance time of a 3-member group: the classic protocol against KIP-848's, same broker,
same run.

confluent-kafka consumers (librdkafka 2.16) on a 6-partition topic. One round: two members
are stable; a third subscribes, and the clock runs until the three assignments cover every
partition exactly once ("join"); then one member closes and the clock runs until the two
left cover them again ("leave"). Both protocols heartbeat every 500 ms (classic:
``heartbeat.interval.ms``; consumer: the broker's ``group.consumer.heartbeat.interval.ms``),
and ``group.initial.rebalance.delay.ms`` does not apply (the group is never empty). The
figures are medians of ``--rounds`` rounds (``BENCH_QUICK=1``: 2), printed with the
consumer/classic ratio.

    .venv/bin/python bench/bench_rebalance.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer  # noqa: E402
from tests.broker_process import running_broker  # noqa: E402
from tests.integration.clients import cf_create_topic  # noqa: E402

QUICK = bool(os.environ.get("BENCH_QUICK"))
PARTITIONS = 6


def consumer(bootstrap: str, group: str, protocol: str) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        conf |= {"session.timeout.ms": 10_000, "heartbeat.interval.ms": 500}
    return Consumer(conf)


def settled(consumers: list[Consumer], deadline: float) -> float:
    """Poll until the assignments cover every partition once, each member having some; the
    time it took."""
    t0 = time.monotonic()
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.01)
        assigned = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
        flat = sorted(p for a in assigned for p in a)
        if flat == list(range(PARTITIONS)) and all(assigned):
            return time.monotonic() - t0
    raise RuntimeError(f"did not settle: {assigned}")


def one_round(bootstrap: str, topic: str, protocol: str) -> tuple[float, float]:
    group = f"bench-{protocol}-{uuid.uuid4().hex[:8]}"
    members = [consumer(bootstrap, group, protocol) for _ in range(2)]
    for c in members:
        c.subscribe([topic])
    settled(members, time.monotonic() + 60)
    third = consumer(bootstrap, group, protocol)
    third.subscribe([topic])
    join = settled([*members, third], time.monotonic() + 60)
    members[0].close()
    leave = settled([members[1], third], time.monotonic() + 60)
    members[1].close()
    third.close()
    return join, leave


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2 if QUICK else 5)
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_broker(
            Path(tmp) / "b",
            "group.consumer.heartbeat.interval.ms=500",
            "group.consumer.min.heartbeat.interval.ms=100",
        ) as b,
    ):
        topic = "rebalance"
        cf_create_topic(b.bootstrap, topic, PARTITIONS)
        results: dict[str, list[tuple[float, float]]] = {"classic": [], "consumer": []}
        for _ in range(args.rounds):  # interleaved, so both see the same machine load
            for protocol in results:
                results[protocol].append(one_round(b.bootstrap, topic, protocol))
    med = {
        p: (statistics.median(j for j, _ in r), statistics.median(lv for _, lv in r))
        for p, r in results.items()
    }
    for i, what in enumerate(("join of a 3rd member", "leave of a member")):
        classic, modern = med["classic"][i], med["consumer"][i]
        print(f"rebalance, {what}, classic protocol: {classic * 1000:.0f} ms (baseline)")
        print(
            f"rebalance, {what}, consumer protocol (KIP-848): {modern * 1000:.0f} ms "
            f"({modern / classic:.2f}x classic)"
        )


if __name__ == "__main__":
    main()
