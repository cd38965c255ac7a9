"""A compacted topic written by a confluent-kafka transactional producer, on a real broker with
its log cleaner: the cleaner removes the aborted transaction's records and, once
delete.retention.ms has passed, the markers of the transactions that have no data left
(KIP-98, as Kafka's cleaner does), and both isolation levels read the latest committed value
of every key."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.integration.clients import cf_create_topic, cf_produce
from tests.integration.conftest import BrokerProcess, running_broker
from tierlog.records import iter_headers, read_end_txn_marker

BROKER = (
    "log.cleaner.backoff.ms=100",
    "transaction.state.log.num.partitions=1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
)
KEYS = 20


def read_latest(b: BrokerProcess, topic: str, isolation: str) -> dict[bytes, bytes | None]:
    """The latest value of every key of partition 0 in ``isolation``, read to its end."""
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: dict[bytes, bytes | None] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    raise KafkaException(err)
                out[m.key()] = m.value()
        raise AssertionError(f"{isolation}: no end of partition after 30 s")
    finally:
        c.close()


def dump(b: BrokerProcess, topic: str) -> tuple[bytes, list[tuple[int, bool]]]:
    """The bytes of the partition's segment files, and (offset, is commit) of every marker in
    them, read from the files as a dump tool does."""
    files = sorted(Path(b.log_dir, f"{topic}-0").glob("*.log"))
    data = b"".join(f.read_bytes() for f in files)
    found = []
    for h in iter_headers(data):
        if h.is_control_batch and h.records_count:
            m = read_end_txn_marker(data, h)
            assert m is not None
            found.append((h.base_offset, m.is_commit))
    return data, found


def test_aborted_records_and_markers_are_removed_from_a_compacted_topic(tmp_path: Path):
    with running_broker(tmp_path / "broker", *BROKER) as b:
        topic = "txn-changelog"
        cf_create_topic(
            b.bootstrap,
            topic,
            **{
                "cleanup.policy": "compact",
                "segment.ms": "1000",
                "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "3000",
            },
        )
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "txn-compaction"})
        p.init_transactions(30)
        keys = [b"k%02d" % i for i in range(KEYS)]
        plan: list[tuple[list[tuple[bytes, bytes]], bool]] = [
            ([(k, b"first-" + k) for k in keys], True),
            ([(k, b"ABORTED-" + k) for k in keys] + [(b"only-aborted", b"ABORTED")], False),
            ([(k, b"last-" + k) for k in keys], True),
        ]
        for items, commit in plan:
            p.begin_transaction()
            for k, v in items:
                p.produce(topic, v, k, partition=0)
            if commit:
                p.commit_transaction(30)
            else:
                p.flush(30)
                p.abort_transaction(30)
        expected: dict[bytes, bytes | None] = {k: b"last-" + k for k in keys}
        # The coordinator writes the markers after EndTxn answers: wait for the last one.
        deadline = time.monotonic() + 30
        while len(found := dump(b, topic)[1]) < 3:
            assert time.monotonic() < deadline, f"markers in the log: {found}"
            time.sleep(0.05)
        data, found = dump(b, topic)
        assert data.count(b"ABORTED") == KEYS + 1
        assert [commit for _, commit in found] == [True, False, True]
        last_marker = found[-1][0]

        # Ticks on a key of their own: segment.ms rolls the active segment, so what came
        # before becomes cleanable, and later rounds have something dirty to clean.
        ticks = 0

        def tick() -> None:
            nonlocal ticks
            ticks += 1
            cf_produce(b.bootstrap, topic, [(b"tick", b"%d" % ticks)], partition=0)

        def state() -> tuple[bool, list[int]]:
            data, found = dump(b, topic)
            return b"ABORTED" in data, [offset for offset, _ in found]

        # The aborted records go first; the markers of the first two transactions later
        # (their transactions have no data left, then delete.retention.ms passes); the
        # marker of the producer's last transaction stays (its data is live).
        seen: list[tuple[bool, list[int]]] = []
        deadline = time.monotonic() + 90
        while True:
            tick()
            now = state()
            if not seen or seen[-1] != now:
                seen.append(now)
            if now == (False, [last_marker]):
                break
            assert b.alive(), b.tail()
            assert time.monotonic() < deadline, f"states seen: {seen}"
            time.sleep(0.2)
        # Aborted data went before the markers: a state without aborted data but with all
        # three markers was seen.
        assert (False, [m for m, _ in found]) in seen, seen
        expected[b"tick"] = b"%d" % ticks
        for isolation in ("read_committed", "read_uncommitted"):
            assert read_latest(b, topic, isolation) == expected, isolation

    # A restarted broker reads the same.
    with running_broker(tmp_path / "broker", *BROKER) as b:
        for isolation in ("read_committed", "read_uncommitted"):
            assert read_latest(b, topic, isolation) == expected, isolation
        # The producer's state survived: it can go on.
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "txn-compaction"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"after", b"k00", partition=0)
        p.commit_transaction(30)
        expected[b"k00"] = b"after"
        assert read_latest(b, topic, "read_committed") == expected
