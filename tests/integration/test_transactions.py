"""Transactions end to end with real clients against a real ``tierlog serve``: the
confluent-kafka, kafka-python and aiokafka transactional producers commit and abort, and the
same library's read_committed / read_uncommitted consumers read exactly the right records, on
a plain topic and on a tiered topic whose transactional segments are only in remote storage; a
zombie with the same transactional id is fenced; read-process-write with
``send_offsets_to_transaction`` commits offsets only with the transaction; a transaction left
open past its timeout is aborted by the coordinator."""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.integration.clients import cf_create_topic, cf_produce
from tests.integration.conftest import BrokerProcess, running_broker
from tests.integration.tiered_support import (
    SEGMENT_BYTES,
    TIERED_BROKER,
    FileStore,
    at_rest,
    finished,
    local_segments,
    object_key,
    tiered_topic_configs,
    wait_until,
)
from tests.integration.txn_clients import (
    CLIENTS,
    Delivered,
    TxnClient,
    TxnProducer,
    cf_txn_producer,
)
from tests.integration.txn_support import READ_COMMITTED, READ_UNCOMMITTED, list_latest_offset
from tests.integration.wire import WireClient

# The coordinator checks for timed-out transactions every second here (Kafka: 10 s).
TXN_BROKER = (
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
    "transaction.state.log.num.partitions=10",
)


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module, tiered storage on (a ``file://`` store): topics with
    ``remote.storage.enable`` are tiered, the others plain."""
    workdir = tmp_path_factory.mktemp("txn-broker")
    store = FileStore(workdir / "remote")
    with running_broker(workdir, *TIERED_BROKER, *store.overrides(), *TXN_BROKER) as b:
        b.store = store  # type: ignore[attr-defined]
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


# ------------------------------------------------------- the client matrix: commit and abort
#
# Each client library's own transactional producers write to a topic of two partitions, and
# the same library's consumer reads it back from offset 0 in both isolation levels. On the
# tiered topic every segment holding transactional data (records and markers) is copied to
# remote storage and deleted locally before the consumers start: every transactional record
# they read comes from remote storage.

ROUNDS = 8
PER_SEND = 6  # records of one send step, over both partitions
VALUE_BYTES = 900  # about 34 records per segment (SEGMENT_BYTES): ~5 segments a partition
PARTITIONS = (0, 1)


def padded(label: str) -> bytes:
    return f"{label}|".encode().ljust(VALUE_BYTES, b"x")


def labels(records: dict[int, list[tuple[int, bytes]]]) -> dict[int, list[tuple[int, str]]]:
    """The records without their padding (a readable diff)."""
    return {p: [(o, v.split(b"|")[0].decode()) for o, v in rs] for p, rs in records.items()}


Transaction = tuple[bool, list[Delivered]]  # committed, its records


def write_transactions(
    client: TxnClient, bootstrap: str, topic: str, txn_id: str
) -> list[Transaction]:
    """Two transactional producers A and B of ``client`` in overlapping transactions: each
    round A begins and sends, B begins and sends, A sends again and ends, B sends again and
    ends; one of them commits and the other aborts (A commits in even rounds). Every send step
    is flushed, so in both partitions the batches of the two transactions alternate and each
    aborted transaction's data is interleaved with committed data."""
    a = client.producer(bootstrap, topic, f"{txn_id}-a")
    b = client.producer(bootstrap, topic, f"{txn_id}-b")

    def step(p: TxnProducer, tag: str) -> list[Delivered]:
        for i in range(PER_SEND):
            p.send(PARTITIONS[i % len(PARTITIONS)], padded(f"{tag}-{i}"))
        return p.flush()

    done: list[Transaction] = []
    try:
        for r in range(ROUNDS):
            a_commits = r % 2 == 0
            a.begin()
            from_a = step(a, f"r{r}-a")
            b.begin()
            from_b = step(b, f"r{r}-b")
            from_a += step(a, f"r{r}-a'")
            a.end(a_commits)
            from_b += step(b, f"r{r}-b'")
            b.end(not a_commits)
            done += [(a_commits, from_a), (not a_commits, from_b)]
    finally:
        a.close()
        b.close()
    return done


def wait_transactions_complete(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end offset once its last marker is written (EndTxn is answered
    before the markers are in: the last stable offset catches up with the high watermark)."""
    c = WireClient(bootstrap)
    try:

        def ends() -> dict[int, int] | None:
            out = {}
            for p in PARTITIONS:
                hw = list_latest_offset(c, topic, p, READ_UNCOMMITTED)
                if list_latest_offset(c, topic, p, READ_COMMITTED) != hw:
                    return None
                out[p] = hw
            return out

        got: dict[int, int] = wait_until(ends, timeout=30, what="the last markers")
        return got
    finally:
        c.close()


def assert_only_in_remote_storage(b: Any, topic: str, partition: int, end: int) -> list[int]:
    """Wait until every segment of ``partition`` below offset ``end`` is copied to remote
    storage and deleted from the local log dir; check both. The remote segments' base
    offsets."""
    off = wait_until(
        lambda: at_rest(b, topic, partition, local_retention_bytes=1),
        timeout=90,
        what=f"{topic}-{partition} copied and deleted locally",
    )
    assert off.earliest == 0 and off.local >= end, (off, end)
    local = local_segments(b, topic, partition)
    assert local and local[0][0] >= end, (local, end)  # the partition dir: nothing below end
    remote = sorted(finished(b, topic, partition), key=lambda s: int(s["start_offset"]))
    assert len(remote) >= 3, remote  # the transactions span several segments
    assert remote[0]["start_offset"] == 0 and remote[-1]["end_offset"] == off.local - 1, remote
    for x, y in itertools.pairwise(remote):
        assert x["end_offset"] + 1 == y["start_offset"], remote
    for s in remote:
        object_key(b.store, s["log_object"])  # in the store, not only in the metadata
        object_key(b.store, s["indexes_object"])
    return [int(s["start_offset"]) for s in remote]


# Plain records after the transactions, more than a segment's worth in each partition: the
# segment of the last marker rolls, so it is copied and deleted locally too.
AFTER = SEGMENT_BYTES // VALUE_BYTES + 2


@pytest.mark.parametrize("tiered", [False, True], ids=["plain", "tiered"])
@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_commit_and_abort(txn_broker, unique, client, tiered):
    b = txn_broker
    topic = f"{'tiered' if tiered else 'plain'}-{unique}"
    configs = tiered_topic_configs(local_retention_bytes="1") if tiered else {}
    cf_create_topic(b.bootstrap, topic, len(PARTITIONS), **configs)
    txns = write_transactions(client, b.bootstrap, topic, f"matrix-{unique}")
    written = [(p, o, v, committed) for committed, records in txns for p, o, v in records]
    txn_end = wait_transactions_complete(b.bootstrap, topic)
    after: dict[int, list[tuple[int, bytes]]] = {}
    for p in PARTITIONS:
        vals = [padded(f"after-{i}") for i in range(AFTER)]
        offsets = cf_produce(
            b.bootstrap, topic, [(None, v) for v in vals], partition=p, batch_size=8192
        )
        after[p] = [(o, v) for (_, o), v in zip(offsets, vals, strict=True)]
        assert after[p][0][0] >= txn_end[p]
    if tiered:
        for p in PARTITIONS:
            bases = assert_only_in_remote_storage(b, topic, p, txn_end[p])
            # An aborted transaction whose records are in two remote segments (its marker in
            # the later one or after it).
            spans = [
                base
                for committed, records in txns
                if not committed
                for base in bases
                if min(o for q, o, _ in records if q == p)
                < base
                <= max(o for q, o, _ in records if q == p)
            ]
            assert spans, (bases, [(c, [o for q, o, _ in rs if q == p]) for c, rs in txns])

    committed = {
        p: sorted((o, v) for q, o, v, c in written if q == p and c) + after[p] for p in PARTITIONS
    }
    everything = {
        p: sorted((o, v) for q, o, v, _ in written if q == p) + after[p] for p in PARTITIONS
    }
    for p in PARTITIONS:  # both outcomes in each partition, every record written once
        n = sum(1 for q, *_ in written if q == p)
        assert len(after[p]) < len(committed[p]) < len(everything[p]) == n + len(after[p])
        assert len({o for o, _ in everything[p]}) == len(everything[p])
    last = {p: after[p][-1][0] for p in PARTITIONS}
    for isolation, expected in (("read_committed", committed), ("read_uncommitted", everything)):
        got = client.read(b.bootstrap, topic, isolation, last)
        assert labels(got) == labels(expected), isolation
        assert got == expected, isolation


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
