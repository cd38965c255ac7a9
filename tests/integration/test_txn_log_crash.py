"""Crash test of the log's transactions: hand-written transactions at full speed while the
broker is SIGKILLed at random moments and restarted. Afterwards the test plays the
coordinator's recovery (a decided COMMIT is written again, an undecided transaction is
aborted) and a read_committed consumer must see exactly the committed transactions, each
whole, and nothing aborted or unfinished: producer state, the .txnindex files and the last
stable offset all survive crash recovery."""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass, field

from tests.integration.conftest import BrokerProcess
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    cf_read,
    list_latest_offset,
    produce_batch,
    txn_batch,
    write_txn_markers,
)
from tests.integration.wire import WireClient, create_topics
from tierlog.records import build_batch

KILLS = 5
BATCHES = 3  # per transaction
PER_BATCH = 4


@dataclass
class Txn:
    pid: int
    commit: bool
    values: list[bytes] = field(default_factory=list)
    state: str = "started"  # -> "data" (every batch acked) -> "marker sent" -> "done"


def test_sigkill_during_transactions_read_committed_sees_exactly_the_committed(
    fresh_broker: BrokerProcess,
):
    b = fresh_broker
    topic = "txn-crash"
    rng = random.Random(1105)
    c = WireClient(b.bootstrap)
    try:
        assert create_topics(c, {topic: 1}) == {topic: 0}
    finally:
        c.close()
    txns: list[Txn] = []
    stop = threading.Event()
    base = rng.randrange(10**12, 2 * 10**12)

    def writer() -> None:
        conn: WireClient | None = None
        while not stop.is_set():
            t = Txn(base + len(txns), commit=len(txns) % 3 != 2)
            txns.append(t)
            try:
                if conn is None:
                    conn = WireClient(b.bootstrap, timeout=5)
                for j in range(BATCHES):
                    values = [b"%d-%d-%d" % (t.pid, j, k) for k in range(PER_BATCH)]
                    batch = txn_batch(t.pid, values, base_sequence=j * PER_BATCH)
                    code, _ = produce_batch(conn, topic, 0, batch)
                    if code:
                        raise ConnectionError(f"produce error {code}")
                    t.values += values
                t.state = "data"
                t.state = "marker sent"
                got = write_txn_markers(conn, t.pid, t.commit, {topic: [0]})
                if got != {(topic, 0): 0}:
                    raise ConnectionError(f"marker error {got}")
                t.state = "done"
            except (OSError, ConnectionError):
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)  # the broker is restarting; the next transaction retries
        if conn is not None:
            conn.close()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.3, 1.2))
            b.stop(signal.SIGKILL)
            time.sleep(rng.uniform(0.0, 0.3))
            b.start()
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    done = [t for t in txns if t.state == "done"]
    assert len(done) > 20, f"only {len(done)} transactions finished"

    # The coordinator's recovery: a decided commit is completed, anything else aborted.
    c = WireClient(b.bootstrap)
    try:
        for t in txns:
            if t.state == "done":
                continue
            t.commit = t.commit and t.state == "marker sent"
            assert write_txn_markers(c, t.pid, t.commit, {topic: [0]}) == {(topic, 0): 0}
        end = build_batch([(int(time.time() * 1000), None, b"END")])
        code, _ = produce_batch(c, topic, 0, end, transactional_id=None)
        assert code == 0
        assert list_latest_offset(c, topic, 0, READ_COMMITTED) == list_latest_offset(
            c, topic, 0, READ_UNCOMMITTED
        )
    finally:
        c.close()

    got = cf_read(b.bootstrap, topic, "read_committed", until=b"END")
    assert got[-1] == b"END"
    got = got[:-1]
    committed = {t.pid: t.values for t in txns if t.commit}
    aborted = {t.pid for t in txns if not t.commit}
    by_pid: dict[int, list[bytes]] = {}
    for v in got:
        by_pid.setdefault(int(v.split(b"-")[0]), []).append(v)
    assert not set(by_pid) & aborted, "records of aborted transactions were read"
    assert set(by_pid) == {pid for pid, values in committed.items() if values}
    for pid, values in by_pid.items():
        assert values == committed[pid], f"transaction {pid} is not whole or not in order"
    print(
        f"{b.starts - 1} kills, {len(txns)} transactions ({len(done)} finished before a kill "
        f"hit them), {len(committed)} committed, {len(got)} records read committed"
    )
