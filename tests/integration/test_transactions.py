"""Transactions end to end with real clients against a real ``tierlog serve``: the
confluent-kafka, kafka-python and aiokafka transactional producers commit and abort, and
read_committed / read_uncommitted consumers read exactly the right records; a zombie with the
same transactional id is fenced; read-process-write with ``send_offsets_to_transaction``
commits offsets only with the transaction; a transaction left open past its timeout is
aborted by the coordinator."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.integration.clients import cf_create_topic, run
from tests.integration.conftest import BrokerProcess, running_broker

# The coordinator checks for timed-out transactions every second here (Kafka: 10 s).
TXN_BROKER = (
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
    "transaction.state.log.num.partitions=10",
)


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("txn-broker"), *TXN_BROKER) as b:
        yield b
        assert b.alive(), f"the transactions broker died:\n{b.tail()}"


def read_values(
    bootstrap: str,
    topic: str,
    isolation: str,
    until: set[bytes],
    *,
    partitions: int = 1,
    timeout: float = 60.0,
) -> list[bytes]:
    """Values of ``topic`` from the start in ``isolation`` until every value of ``until`` was
    read (the last transaction's records: anything the isolation level should have hidden is
    before them in the log)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while not until <= set(out):
            assert time.monotonic() < deadline, f"read {len(out)} values, missing some of {until}"
            for m in c.consume(1000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                out.append(m.value())
        return out
    finally:
        c.close()


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


# --------------------------------------------------------------------------- confluent-kafka


def cf_txn_producer(bootstrap: str, txn_id: str, **conf: Any) -> Producer:
    p = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **conf}
    )
    p.init_transactions(30)
    return p


def test_confluent_commit_and_abort(txn_broker, unique):
    b = txn_broker.bootstrap
    topic = f"cf-{unique}"
    cf_create_topic(b, topic, partitions=2)
    p = cf_txn_producer(b, f"cf-{unique}")
    committed, aborted, last = values("a", 50), values("b", 50), values("c", 10)
    for batch, commit in ((committed, True), (aborted, False), (last, True)):
        p.begin_transaction()
        for i, v in enumerate(batch):
            p.produce(topic, v, partition=i % 2)
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(30)
            p.abort_transaction(30)
    p.flush(30)
    rc = read_values(b, topic, "read_committed", set(last), partitions=2)
    assert sorted(rc) == sorted(committed + last)
    ru = read_values(b, topic, "read_uncommitted", set(last), partitions=2)
    assert sorted(ru) == sorted(committed + aborted + last)


def test_confluent_zombie_is_fenced(txn_broker, unique):
    b = txn_broker.bootstrap
    topic = f"zombie-{unique}"
    cf_create_topic(b, topic)
    txn_id = f"zombie-{unique}"
    zombie = cf_txn_producer(b, txn_id)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(30)
    # A new instance with the same id fences the zombie and aborts its open transaction.
    fresh = cf_txn_producer(b, txn_id)
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh")
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as e:
        zombie.produce(topic, b"late")
        zombie.commit_transaction(30)
    err = e.value.args[0]
    assert err.fatal() or err.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), err
    assert read_values(b, topic, "read_committed", {b"fresh"}) == [b"fresh"]


def test_read_process_write_offsets_only_with_the_transaction(txn_broker, unique):
    b = txn_broker.bootstrap
    src, dst, group = f"src-{unique}", f"dst-{unique}", f"rpw-{unique}"
    cf_create_topic(b, src)
    cf_create_topic(b, dst)
    plain = Producer({"bootstrap.servers": b})
    for v in values("in", 20):
        plain.produce(src, v)
    plain.flush(30)
    consumer = Consumer(
        {
            "bootstrap.servers": b,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(src, 0, 0)])
    p = cf_txn_producer(b, f"rpw-{unique}")

    def committed_offset() -> int:
        # read_uncommitted: OffsetFetch without require_stable answers at once (a
        # read_committed consumer is told UNSTABLE_OFFSET_COMMIT while a transaction is open).
        c = Consumer(
            {"bootstrap.servers": b, "group.id": group, "isolation.level": "read_uncommitted"}
        )
        try:
            (tp,) = c.committed([TopicPartition(src, 0)], timeout=30)
            return int(tp.offset)
        finally:
            c.close()

    def process(n: int, commit: bool) -> list[bytes]:
        got: list[bytes] = []
        while len(got) < n:
            got.extend(m.value() for m in consumer.consume(n - len(got), 1) if not m.error())
        p.begin_transaction()
        for v in got:
            p.produce(dst, v.replace(b"in", b"out"))
        pos = consumer.position([TopicPartition(src, 0)])
        p.send_offsets_to_transaction(pos, consumer.consumer_group_metadata(), 30)
        # offsets of an open transaction are not visible
        assert committed_offset() == (-1001 if n == 10 else 10)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        return got

    process(10, commit=True)
    assert committed_offset() == 10
    process(5, commit=False)
    assert committed_offset() == 10  # the aborted transaction's offsets never show
    process(5, commit=True)
    assert committed_offset() == 20
    consumer.close()
    expected = values("out", 10) + [f"out-{i}".encode() for i in range(15, 20)]
    assert read_values(b, dst, "read_committed", set(expected)) == expected
    # The offsets are in __consumer_offsets: a restarted broker loads the same ones.
    txn_broker.restart()
    assert committed_offset() == 20


def test_open_transaction_is_aborted_after_its_timeout(txn_broker, unique):
    b = txn_broker.bootstrap
    topic = f"timeout-{unique}"
    cf_create_topic(b, topic)
    stuck = cf_txn_producer(b, f"stuck-{unique}", **{"transaction.timeout.ms": 2000})
    stuck.begin_transaction()
    stuck.produce(topic, b"never")
    stuck.flush(30)
    # The coordinator aborts it (markers written): read_committed moves past it.
    other = cf_txn_producer(b, f"other-{unique}")
    other.begin_transaction()
    other.produce(topic, b"after")
    other.commit_transaction(30)
    assert read_values(b, topic, "read_committed", {b"after"}, timeout=60) == [b"after"]
    log = txn_broker.log_since_start()
    assert f"stuck-{unique}: transaction of producer" in log and "timed out" in log
    with pytest.raises(KafkaException):
        stuck.commit_transaction(30)


# --------------------------------------------------------------------------- kafka-python


def test_kafka_python_commit_and_abort(txn_broker, unique):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaProducer

    b = txn_broker.bootstrap
    topic = f"kp-{unique}"
    cf_create_topic(b, topic)
    p = KafkaProducer(bootstrap_servers=b, transactional_id=f"kp-{unique}")
    p.init_transactions()
    committed, aborted, last = values("a", 30), values("b", 30), values("c", 5)
    for batch, commit in ((committed, True), (aborted, False), (last, True)):
        p.begin_transaction()
        for v in batch:
            p.send(topic, v)
        if commit:
            p.commit_transaction()
        else:
            p.flush()
            p.abort_transaction()
    p.close()
    assert read_values(b, topic, "read_committed", set(last)) == committed + last
    assert read_values(b, topic, "read_uncommitted", set(last)) == committed + aborted + last


# --------------------------------------------------------------------------- aiokafka


def test_aiokafka_commit_and_abort(txn_broker, unique):
    from aiokafka import AIOKafkaProducer

    b = txn_broker.bootstrap
    topic = f"aio-{unique}"
    cf_create_topic(b, topic)
    committed, aborted, last = values("a", 30), values("b", 30), values("c", 5)

    async def go() -> None:
        p = AIOKafkaProducer(bootstrap_servers=b, transactional_id=f"aio-{unique}")
        await p.start()
        try:
            for batch, commit in ((committed, True), (aborted, False), (last, True)):
                await p.begin_transaction()
                for v in batch:
                    await p.send(topic, v)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()

    run(go())
    assert read_values(b, topic, "read_committed", set(last)) == committed + last
    assert read_values(b, topic, "read_uncommitted", set(last)) == committed + aborted + last


# --------------------------------------------------------------------------- admin


def test_describe_and_list_transactions_with_kafka_python_admin(txn_broker, unique):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient

    b = txn_broker.bootstrap
    topic = f"admin-{unique}"
    cf_create_topic(b, topic, partitions=2)
    txn_id = f"admin-{unique}"
    p = cf_txn_producer(b, txn_id, **{"transaction.timeout.ms": 120_000})
    p.begin_transaction()
    p.produce(topic, b"x", partition=1)
    p.flush(30)
    admin = KafkaAdminClient(bootstrap_servers=b)
    try:
        d = admin.describe_transactions([txn_id])[txn_id]
        assert d.state.value == "Ongoing"
        assert d.transaction_timeout_ms == 120_000
        assert {(tp.topic, tp.partition) for tp in d.topic_partitions} == {(topic, 1)}
        listed = [
            t
            for ts in admin.list_transactions(
                state_filters=["Ongoing"], transactional_id_pattern=f"admin-{unique}.*"
            ).values()
            for t in ts
        ]
        assert [t.transactional_id for t in listed] == [txn_id]
        p.commit_transaction(30)
        # EndTxn is answered at PrepareCommit; CompleteCommit follows once the markers are in.
        deadline = time.monotonic() + 30
        while (state := admin.describe_transactions([txn_id])[txn_id].state.value) != (
            "CompleteCommit"
        ):
            assert state == "PrepareCommit" and time.monotonic() < deadline, state
            time.sleep(0.05)
        assert not [
            t
            for ts in admin.list_transactions(state_filters=["Ongoing"]).values()
            for t in ts
            if t.transactional_id == txn_id
        ]
    finally:
        admin.close()
