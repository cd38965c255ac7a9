"""Crash test: an idempotent acks=all producer at full speed while the broker is killed with
SIGKILL at random moments, 20 times, and restarted. Every acknowledged record must be read
back exactly once, at the offset it was acknowledged with, in produce order."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest
from confluent_kafka import Producer

from tests.integration.clients import cf_consume, cf_high_watermark, cf_values
from tests.integration.wire import (
    WireClient,
    create_topics,
    delete_topics,
    one_record,
    produce,
    request_class,
)

KILLS = 20


@pytest.mark.slow
def test_sigkill_loop_loses_and_duplicates_nothing_acknowledged(fresh_broker):
    b = fresh_broker
    rng = random.Random(20260)
    topic = "crash"
    acked: dict[int, int] = {}  # sequence number -> offset
    failed: list[str] = []
    stop = threading.Event()
    fatal: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(str(err))
            if err.fatal():
                fatal.append(str(err))
        else:
            acked[int(msg.value())] = msg.offset()

    p = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "socket.connection.setup.timeout.ms": 2000,
        }
    )
    produced = 0

    def produce_loop() -> None:
        nonlocal produced
        while not stop.is_set():
            try:
                p.produce(topic, value=str(produced).encode(), on_delivery=on_delivery)
                produced += 1
            except BufferError:
                p.poll(0.01)
                continue
            if produced % 500 == 0:
                p.poll(0)

    t = threading.Thread(target=produce_loop, daemon=True)
    t.start()
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.2, 1.2))
            b.stop(signal.SIGKILL)
            time.sleep(rng.uniform(0.0, 0.3))
            b.start()
        time.sleep(1.0)
    finally:
        stop.set()
        t.join(10)
    assert p.flush(120) == 0, "records still in flight after 120 s"
    assert not fatal, fatal[:3]
    assert len(acked) > 1000, f"only {len(acked)} records acknowledged"

    high_watermark = cf_high_watermark(b.bootstrap, topic)
    assert high_watermark > max(acked.values()), "the log ends before an acknowledged offset"
    # Read exactly to the high watermark: a count past the end would read until the deadline
    # and, on a slow machine, stop early in the middle of the log.
    read_started = time.monotonic()
    msgs = cf_consume(b.bootstrap, topic, high_watermark, timeout=300)
    read_seconds = time.monotonic() - read_started
    assert len(msgs) == high_watermark, f"read {len(msgs)} of {high_watermark} records in 300 s"
    seqs = [int(m.value()) for m in msgs]
    offsets = [m.offset() for m in msgs]
    assert offsets == list(range(len(msgs))), "gaps or reordering in the offsets"
    seen_at = {}
    for off, s in zip(offsets, seqs, strict=True):
        assert s not in seen_at, f"record {s} is in the log twice (offsets {seen_at[s]}, {off})"
        seen_at[s] = off
    for s, off in acked.items():
        assert seen_at.get(s) == off, f"acknowledged record {s} not at its offset {off}"
    assert seqs == sorted(seqs), "records are out of produce order"
    print(
        f"{b.starts - 1} kills, {len(acked)} acknowledged, {len(msgs)} in the log, "
        f"{len(failed)} delivery errors, read back in {read_seconds:.1f} s"
    )


def _topic_ids(c: WireClient) -> dict[str, tuple[str, int]]:
    """Metadata v12 for all topics: name -> (topic id, partition count)."""
    cls = request_class(3, 12)
    resp = c.call(
        cls(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )
    assert all(t.error_code == 0 for t in resp.topics)
    return {t.name: (str(t.topic_id), len(t.partitions)) for t in resp.topics}


def test_sigkill_right_after_create_and_delete_topics_loses_no_topic(fresh_broker):
    """``partition.metadata`` is written without fsync (the topic registry is the durable
    record): a broker SIGKILLed right after CreateTopics (and DeleteTopics) returned restarts
    with every created topic -- same ids, same partition counts, every partition writable --
    and without the deleted one."""
    b = fresh_broker
    topics = {f"born-{i}": 20 for i in range(5)}
    c = WireClient(b.bootstrap, timeout=60)
    try:
        assert create_topics(c, {"doomed": 3}) == {"doomed": 0}
        assert create_topics(c, topics) == dict.fromkeys(topics, 0)
        assert delete_topics(c, ["doomed"]) == {"doomed": 0}
        before = _topic_ids(c)
    finally:
        c.close()
    b.kill()
    b.start()
    c = WireClient(b.bootstrap, timeout=60)
    try:
        after = _topic_ids(c)
        assert {n: after.get(n) for n in topics} == {n: before[n] for n in topics}
        assert before[next(iter(topics))][1] == 20
        assert "doomed" not in after
        for name, n in topics.items():
            assert produce(c, name, range(n), one_record(name.encode())) == dict.fromkeys(
                range(n), 0
            )
    finally:
        c.close()
    for name, n in topics.items():
        assert cf_values(b.bootstrap, name, n) == [name.encode()] * n
