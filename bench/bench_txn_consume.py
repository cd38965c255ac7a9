"""read_committed vs read_uncommitted consume of the same transactional topic (issue 11; goal
>= 0.95).

The topic is written by hand as a transactional producer and its coordinator would: batches
of 100 records of 100 bytes from producer ids of their own, 1,000 records (10 batches) per
transaction, one transaction in 20 aborted (then a second topic: none aborted), each ended
by a COMMIT or ABORT marker (WriteTxnMarkers). librdkafka then reads the whole partition
from offset 0 to its end, once per isolation level in each round, timed from the first record
delivered to the end of the partition (a new consumer each time: its start is the same in both
levels and not timed). The machine is shared and noisy, so the rounds alternate the order
(ABBA: a drift in the load weighs on both alike) after one warm-up round not counted; the
figures are medians with their min and max of each level's offsets/s and of the ratio within
each round (read_uncommitted time / read_committed time over the same offsets: >= 1 when
read_committed is as fast), whose median is the figure against the goal.
read_committed does more work on both sides: the broker collects the aborted transactions of
every fetched range from the ``.txnindex`` files (a bisection, TransactionIndex) and reads only
up to the last stable offset, and the client drops the aborted records.

Knobs: ``--records N`` (default 1,000,000; ``BENCH_QUICK=1`` -> 100,000), ``--rounds``
(default 5; ``BENCH_QUICK=1`` -> 3).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.broker_process import running_broker
from tests.integration.txn_support import (
    produce_batch,
    txn_batch,
    write_txn_markers,
)
from tests.integration.wire import WireClient, create_topics

RECORD_SIZE = 100
BATCH_RECORDS = 100
TXN_RECORDS = 1_000
ABORT_EVERY = 20
GOAL = 0.95

CONSUMER_CONF = {
    "group.id": "bench",
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 1_048_576,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 262_144,
    "fetch.queue.backoff.ms": 5,
}


def write_topic(bootstrap: str, topic: str, records: int, abort_every: int) -> tuple[int, int]:
    """The transactions, one in ``abort_every`` aborted (0: none); (records committed,
    records aborted)."""
    c = WireClient(bootstrap, timeout=60)
    committed = aborted = 0
    try:
        assert create_topics(c, {topic: 1}) == {topic: 0}
        values = [b"%08d" % i + b"x" * (RECORD_SIZE - 8) for i in range(BATCH_RECORDS)]
        pid_base = random.randrange(10**12, 2 * 10**12)
        for t in range(records // TXN_RECORDS):
            pid = pid_base + t
            for b in range(TXN_RECORDS // BATCH_RECORDS):
                batch = txn_batch(pid, values, base_sequence=b * BATCH_RECORDS)
                code, _ = produce_batch(c, topic, 0, batch, acks=1)
                assert code == 0, code
            commit = not abort_every or t % abort_every != abort_every - 1
            assert write_txn_markers(c, pid, commit, {topic: [0]}) == {(topic, 0): 0}
            if commit:
                committed += TXN_RECORDS
            else:
                aborted += TXN_RECORDS
    finally:
        c.close()
    return committed, aborted


def consume(bootstrap: str, topic: str, isolation: str) -> tuple[float, int]:
    """Seconds from the first record delivered to the end of the partition, and the records
    delivered."""
    c = Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation, **CONSUMER_CONF})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        t0: float | None = None
        deadline = time.perf_counter() + 600
        while time.perf_counter() < deadline:
            for m in c.consume(100_000, 1.0):
                err = m.error()
                if err is None:
                    if t0 is None:
                        t0 = time.perf_counter()
                    got += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    assert t0 is not None, f"{isolation}: no record before the end"
                    return time.perf_counter() - t0, got
                else:
                    raise RuntimeError(str(err))
        raise RuntimeError(f"{isolation}: no end of partition after 600 s ({got} records)")
    finally:
        c.close()


def spread(values: list[float], fmt: str) -> str:
    return (
        f"median {statistics.median(values):{fmt}} "
        f"(min {min(values):{fmt}}, max {max(values):{fmt}}, {len(values)} rounds)"
    )


def measure(bootstrap: str, records: int, abort_every: int, rounds: int) -> None:
    topic = f"txn-consume-{abort_every}"
    t0 = time.perf_counter()
    committed, aborted = write_topic(bootstrap, topic, records, abort_every)
    total = committed + aborted
    print(
        f"wrote {total:,} records in {total // TXN_RECORDS}"
        f" transactions ({aborted:,} aborted) in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    expected = {"read_uncommitted": total, "read_committed": committed}

    def run(isolation: str) -> float:
        dt, got = consume(bootstrap, topic, isolation)
        if got != expected[isolation]:
            raise RuntimeError(f"{isolation}: {got} records, expected {expected[isolation]}")
        return total / dt  # offsets/s: the same offsets in both levels

    run("read_uncommitted"), run("read_committed")  # warm-up: page cache, index loads
    rates: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
    ratios: list[float] = []
    for r in range(rounds):
        order = ["read_uncommitted", "read_committed"]
        if r % 4 in (1, 2):
            order.reverse()
        for isolation in order:
            rates[isolation].append(run(isolation))
        ratios.append(rates["read_committed"][-1] / rates["read_uncommitted"][-1])
        print(
            f"round {r}: read_uncommitted {rates['read_uncommitted'][-1]:,.0f}, "
            f"read_committed {rates['read_committed'][-1]:,.0f} offsets/s ({ratios[-1]:.2f})",
            flush=True,
        )
    what = f"1 in {abort_every} aborted" if abort_every else "none aborted"
    mb = RECORD_SIZE / 1e6
    for isolation in ("read_uncommitted", "read_committed"):
        v = rates[isolation]
        print(
            f"consume {isolation} ({what}): {spread(v, ',.0f')} offsets/s "
            f"({statistics.median(v) * mb:.1f} MB/s)"
        )
    verdict = "met" if statistics.median(ratios) >= GOAL else "NOT met"
    print(
        f"read_committed / read_uncommitted ({what}) per round: {spread(ratios, '.2f')} "
        f"(goal >= {GOAL}: {verdict})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    quick = bool(os.environ.get("BENCH_QUICK"))
    parser.add_argument("--records", type=int, default=100_000 if quick else 1_000_000)
    parser.add_argument("--rounds", type=int, default=3 if quick else 5)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp,
        running_broker(Path(tmp) / "broker") as b,
    ):
        for abort_every in (ABORT_EVERY, 0):
            measure(b.bootstrap, args.records, abort_every, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
