"""Log compaction with a real broker and confluent-kafka: a compacted topic shrinks to its
live keys, a tombstone goes once delete.retention.ms has passed, a restarted broker reads the
same, a record without a key is refused, and SIGKILLs while the cleaner runs lose no key's
latest acknowledged value."""

from __future__ import annotations

import random
import signal
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.integration.clients import (
    cf_consume,
    cf_create_topic,
    cf_high_watermark,
    cf_produce,
)
from tests.integration.conftest import BrokerProcess, running_broker

KEYS = 100
UPDATES = 20_000
CLEANER = ("log.cleaner.backoff.ms=100",)


def read_all(b: BrokerProcess, topic: str) -> list[Any]:
    """Every record from the log start to the high watermark (compaction leaves offset gaps:
    read until the last offset below the high watermark, not a count)."""
    hw = cf_high_watermark(b.bootstrap, topic)
    out: list[Any] = []
    if hw == 0:
        return out
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                out.append(m)
            if out and out[-1].offset() >= hw - 1:
                return out
        last = out[-1].offset() if out else None
        raise AssertionError(f"read {len(out)} records up to offset {last}, not to {hw - 1}")
    finally:
        c.close()


def latest(messages: list[Any]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for m in messages:
        out[m.key()] = m.value()
    return out


def test_compacted_topic_shrinks_to_live_keys(tmp_path):
    with running_broker(tmp_path / "broker", *CLEANER) as b:
        topic = "changelog"
        cf_create_topic(
            b.bootstrap,
            topic,
            **{
                "cleanup.policy": "compact",
                "segment.bytes": "65536",
                "segment.ms": "1000",
                "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "2000",
            },
        )
        rng = random.Random(13)
        updates = [
            (b"key-%03d" % rng.randrange(KEYS), b"value-%06d-" % i + b"x" * 60)
            for i in range(UPDATES)
        ]
        updates += [(b"key-%03d" % k, b"final-%03d" % k) for k in range(KEYS)]
        updates.append((b"key-007", None))  # a tombstone
        cf_produce(b.bootstrap, topic, updates, partition=0, linger_ms=20, batch_size=16384)
        expected = latest_of(updates)
        assert expected[b"key-007"] is None

        # Ticks: one record a poll on a key of its own, so segment.ms rolls the active
        # segment and what came before becomes cleanable.
        ticks = 0

        def tick() -> None:
            nonlocal ticks
            ticks += 1
            cf_produce(b.bootstrap, topic, [(b"tick", b"%d" % ticks)], partition=0)

        deadline = time.monotonic() + 60
        while True:
            tick()
            messages = read_all(b, topic)
            live = [m for m in messages if m.key() != b"tick"]
            if len(live) == KEYS:
                break
            assert time.monotonic() < deadline, f"{len(live)} records left of {len(updates)}"
            time.sleep(0.2)
        # Compacted: the latest value of every key, the tombstone still there.
        assert {m.key(): m.value() for m in live} == expected
        offsets = [m.offset() for m in messages]
        assert offsets == sorted(set(offsets))
        assert len(messages) - len(live) < 50  # ticks since the last roll, plus one

        # Once delete.retention.ms has passed, a later round removes the tombstone.
        deadline = time.monotonic() + 60
        while any(m.key() == b"key-007" for m in messages):
            assert time.monotonic() < deadline, "the tombstone is still there"
            time.sleep(0.2)
            tick()
            messages = read_all(b, topic)
        after_tombstone = {m.key(): m.value() for m in messages if m.key() != b"tick"}
        del expected[b"key-007"]
        assert after_tombstone == expected

        # A restarted broker reads the same (the latest value of every key, the same end).
        before = latest(messages)
        hw = cf_high_watermark(b.bootstrap, topic)
        b.restart()
        assert cf_high_watermark(b.bootstrap, topic) == hw
        assert latest(read_all(b, topic)) == before
        assert "swapping in cleaned segment" in b.log_text()


def latest_of(updates: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for k, v in updates:
        out[k] = v
    return out


def test_record_without_key_is_refused_with_invalid_record(broker, unique):
    topic = f"compacted-{unique}"
    cf_create_topic(broker.bootstrap, topic, **{"cleanup.policy": "compact"})
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    p.produce(topic, value=b"no key", partition=0, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD
    assert cf_high_watermark(broker.bootstrap, topic) == 0
    # With a key it goes in; a topic without compaction takes keyless records.
    cf_produce(broker.bootstrap, topic, [(b"k", b"v")], partition=0)
    plain = f"plain-{unique}"
    cf_create_topic(broker.bootstrap, plain)
    cf_produce(broker.bootstrap, plain, [(None, b"v")], partition=0)
    assert len(cf_consume(broker.bootstrap, plain, 1)) == 1


def test_consumer_offsets_are_compacted_by_the_cleaner(tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    overrides = ("offsets.topic.num.partitions=1", "offsets.topic.segment.bytes=8192")
    with running_broker(tmp_path / "broker", *CLEANER, *overrides) as b:
        topic = "committed"
        cf_create_topic(b.bootstrap, topic)
        cf_produce(b.bootstrap, topic, [(b"k", b"v")], partition=0)
        c = Consumer(
            {"bootstrap.servers": b.bootstrap, "group.id": "g", "enable.auto.commit": False}
        )
        try:
            for i in range(2000):
                c.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
        finally:
            c.close()
        deadline = time.monotonic() + 60
        # Compacted: one record of the group in the cleaned segments, plus the commits in the
        # active segment (about 60 fit its 8 KiB).
        while len(records := read_all(b, "__consumer_offsets")) > 100:
            assert time.monotonic() < deadline, f"{len(records)} records in __consumer_offsets"
            time.sleep(0.2)
        b.restart()
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g"})
        try:
            (tp,) = c.committed([TopicPartition(topic, 0)], timeout=30)
        finally:
            c.close()
        assert tp.offset == 1999


KILLS = 20


@pytest.mark.slow
def test_sigkill_while_cleaning_keeps_every_latest_acknowledged_value(tmp_path):
    rng = random.Random(405)
    topic = "compacted-crash"
    acked: dict[bytes, bytes] = {}
    with running_broker(tmp_path / "broker", "log.cleaner.backoff.ms=50") as b:
        cf_create_topic(
            b.bootstrap,
            topic,
            **{
                "cleanup.policy": "compact",
                "segment.bytes": "16384",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        started = time.monotonic()
        for kill in range(KILLS):
            burst = [
                (b"k%02d" % rng.randrange(40), b"%d-%d-" % (kill, i) + b"y" * 80)
                for i in range(1500)
            ]
            cf_produce(
                b.bootstrap, topic, burst, partition=0, acks="all", linger_ms=5, batch_size=8192
            )
            acked.update(burst)
            time.sleep(rng.uniform(0.0, 0.4))  # a random moment, usually mid-clean
            b.stop(signal.SIGKILL)
            b.start()
            assert latest(read_all(b, topic)) == acked, f"after kill {kill + 1}"
            assert time.monotonic() - started < 120, f"only {kill + 1} kills in 120 s"
        text = b.log_text()
        assert text.count("swapping in cleaned segment") > 0
