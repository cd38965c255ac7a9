"""Crash test for transactions: a confluent-kafka transactional producer commits and aborts
transactions of 2 partitions at full speed while the broker (partition leader and transaction
coordinator at once) is SIGKILLed at random moments and restarted. Afterwards a
read_committed consumer sees every committed transaction whole, no record of an aborted one,
and of the transactions whose outcome the producer never learned, each whole or not at all."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.integration.clients import cf_create_topic

KILLS = 8
RECORDS_PER_TXN = 20
PARTITIONS = 2


def _producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 2,
            "transaction.timeout.ms": 20_000,
            "message.timeout.ms": 20_000,
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "socket.connection.setup.timeout.ms": 2000,
        }
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            p.init_transactions(10)
            return p
        except KafkaException as e:
            if time.monotonic() > deadline or e.args[0].fatal():
                raise


@pytest.mark.slow
def test_sigkill_loop_keeps_transactions_atomic(fresh_broker):
    b = fresh_broker
    rng = random.Random(1111)
    topic, txn_id = "txn-crash", "txn-crash-producer"
    cf_create_topic(b.bootstrap, topic, partitions=PARTITIONS)
    committed: set[int] = set()  # commit_transaction returned
    aborted: set[int] = set()  # abort_transaction returned, or never got to commit
    unknown: set[int] = set()  # commit raised: either outcome is allowed
    stop = threading.Event()
    errors: list[str] = []

    def produce_loop() -> None:
        p = _producer(b.bootstrap, txn_id)
        n = 0
        while not stop.is_set():
            n += 1
            commit = rng.random() < 0.75
            try:
                p.begin_transaction()
                for i in range(RECORDS_PER_TXN):
                    p.produce(topic, f"{n}:{i}".encode(), partition=i % PARTITIONS)
                if commit:
                    p.commit_transaction(30)
                    committed.add(n)
                else:
                    p.flush(30)  # the records reach the log before the abort
                    p.abort_transaction(30)
                    aborted.add(n)
            except KafkaException as e:
                err = e.args[0]
                errors.append(str(err))
                (unknown if commit else aborted).add(n)
                if err.txn_requires_abort():
                    try:
                        p.abort_transaction(30)
                        if commit:
                            unknown.discard(n)
                            aborted.add(n)
                        continue
                    except KafkaException as e2:
                        errors.append(f"abort: {e2.args[0]}")
                # fatal, or the abort failed: a new instance fences this one
                p = _producer(b.bootstrap, txn_id)
        p.flush(30)

    t = threading.Thread(target=produce_loop, daemon=True)
    t.start()
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.5, 2.0))
            b.stop(signal.SIGKILL)
            time.sleep(rng.uniform(0.0, 0.3))
            b.start()
        time.sleep(2.0)
    finally:
        stop.set()
        t.join(180)
    assert not t.is_alive(), "the producer thread did not stop"
    assert len(committed) > 20, f"only {len(committed)} transactions committed; {errors[:5]}"

    # A last transaction by a new instance: it fences the old one (aborting anything left
    # open), and once it is visible every earlier transaction is decided.
    last = _producer(b.bootstrap, txn_id)
    last.begin_transaction()
    for part in range(PARTITIONS):
        last.produce(topic, f"end:{part}".encode(), partition=part)
    last.commit_transaction(60)

    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "checker",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    seen: Counter[int] = Counter()
    ends = 0
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 300
        while ends < PARTITIONS:
            assert time.monotonic() < deadline, f"end markers not read ({ends})"
            for m in c.consume(5000, 1.0):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                txn, _, _i = m.value().decode().partition(":")
                if txn == "end":
                    ends += 1
                else:
                    seen[int(txn)] += 1
    finally:
        c.close()
    visible_aborted = sorted(set(seen) & aborted)
    assert not visible_aborted, f"aborted transactions visible: {visible_aborted[:10]}"
    missing = sorted(committed - set(seen))
    assert not missing, f"committed transactions missing: {missing[:10]}"
    partial = {n: k for n, k in seen.items() if k != RECORDS_PER_TXN}
    assert not partial, f"transactions seen in part (or twice): {list(partial.items())[:10]}"
    assert set(seen) <= committed | unknown
    print(
        f"{b.starts - 1} kills, {len(committed)} committed, {len(aborted)} aborted, "
        f"{len(unknown)} unknown ({len(set(seen) & unknown)} visible), {len(errors)} errors"
    )
