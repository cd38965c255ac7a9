"""Log compaction with a real broker and confluent-kafka: a compacted topic shrinks to its
live keys, a tombstone goes once delete.retention.ms has passed, a restarted broker reads the
same, a record without a key is refused, and SIGKILLs while the cleaner runs lose no key's
latest acknowledged value."""

from __future__ import annotations

import itertools
import os
import random
import signal
import threading
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


SWAP_KILLS = 20


@pytest.mark.slow
def test_sigkill_at_chosen_steps_of_the_clean_reads_before_or_after(tmp_path):
    """20 SIGKILLs while the cleaner cleans: two in three at a chosen step of its swap (each
    kind of step in turn -- .cleaned renamed to .swap, an old file renamed to .deleted, a
    .deleted file removed, .swap renamed to its final name -- the 1st to 3rd of its kind,
    tests/integration/cleaner_launcher.py: the process kills itself there), one in three at
    a random moment while a throttled cleaner writes its .cleaned segment. After each
    restart:

    - recovery completed: the broker started, and its log names every compaction file the
      dead process left (deleted, or its swap completed);
    - the log reads as before or after a clean, never a mix: offsets strictly increase, every
      record read is the one acknowledged at that offset (nothing moved, nothing invented),
      and every key's latest acknowledged value is there, at its offset."""
    rng = random.Random(1305)
    faults = tmp_path / "faults"
    faults.mkdir()
    topic = "swap-crash"
    produced: dict[int, tuple[bytes, bytes]] = {}  # offset -> (key, value), acknowledged
    b = BrokerProcess(
        tmp_path / "broker",
        "log.cleaner.backoff.ms=50",
        "log.cleaner.io.max.bytes.per.second=400000",
        module="tests.integration.cleaner_launcher",
        env={"TIERLOG_TEST_FAULTS": str(faults)},
    )
    (tmp_path / "broker").mkdir()
    b.start()
    partition_dir = b.log_dir / f"{topic}-0"
    outcomes: list[str] = []
    try:
        cf_create_topic(
            b.bootstrap,
            topic,
            **{
                "cleanup.policy": "compact",
                "segment.bytes": "16384",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )

        def restart(kill: int) -> None:
            """Start again after a kill; recovery must have handled what the dead process
            left (each leftover file named in the log since the start)."""
            left = sorted(
                p.name for p in partition_dir.iterdir() if p.name.endswith(_COMPACTION_SUFFIXES)
            )
            b.start()
            text = b.log_since_start()
            for name in left:
                assert name in text or name.rsplit(".", 1)[0] in text, (
                    f"kill {kill + 1} ({outcomes[-1]}): recovery said nothing of {name}"
                )

        for kill in range(SWAP_KILLS):
            at_step = kill % 3 != 2
            # Keys written once (their only value lives on in the cleaned part of the log,
            # so a clean that lost old segments would lose them), then many updates of 40 keys.
            burst = [(b"once-%02d-%02d" % (kill, i), b"only") for i in range(20)]
            burst += [
                (b"k%02d" % rng.randrange(40), b"%d-%d-" % (kill, i) + b"z" * 80)
                for i in range(1500)
            ]
            if not at_step:
                # Watched from before the burst: the cleaner cleans the segments the burst
                # rolls while it is still being produced, and on a slow machine it has often
                # cleaned them all by the time the last record is acknowledged (no .cleaned
                # file left to see after the burst).
                killer = _KillWhileCleaning(b, partition_dir, rng.uniform(0.0, 0.5))
                killer.start()
                random_killed: list[bool] = []

                def on_random_death(kill: int = kill, killed: list = random_killed) -> None:
                    b.proc.wait()
                    outcomes.append("random")
                    killed.append(True)
                    restart(kill)

                produced.update(_produce_acknowledged(b, topic, burst, on_death=on_random_death))
                killer.join(120)
                assert killer.fired, "no .cleaned segment appeared within 120 s"
                if not random_killed:
                    on_random_death()
            else:
                # Armed before the burst: the cleaner's next steps count; the broker may die
                # while the burst is being produced (the idempotent producer delivers the
                # rest once it is back).
                kind = STEP_KINDS[sum(o != "random" for o in outcomes) % len(STEP_KINDS)]
                step = rng.randrange(1, 4)
                (faults / "kill-at-step").write_text(f"kill{kill} {kind} {step}")
                killed: list[bool] = []

                def on_death(
                    kill: int = kill, kind: str = kind, step: int = step, killed: list = killed
                ) -> None:
                    b.proc.wait()
                    what = (faults / "killed").read_text().split()
                    assert what[:3] == [f"kill{kill}", kind, str(step)], what
                    outcomes.append(f"{kind} {what[3]}")
                    (faults / "kill-at-step").unlink()
                    killed.append(True)
                    restart(kill)

                produced.update(_produce_acknowledged(b, topic, burst, on_death=on_death))
                if not killed:
                    _wait_for(lambda: not b.alive(), 120, f"no {kind} step {step} reached")
                    on_death()
            _assert_before_or_after(read_all(b, topic), produced, f"kill {kill + 1}")
        # Every kind of step was hit (twice or more), and the random kills too.
        hit = [o.split()[0] for o in outcomes]
        assert all(hit.count(k) >= 2 for k in STEP_KINDS), outcomes
        assert hit.count("random") == SWAP_KILLS // 3
    finally:
        if b.alive():
            b.stop(signal.SIGKILL)
        print(outcomes)


_COMPACTION_SUFFIXES = (".cleaned", ".swap", ".deleted")
STEP_KINDS = ("cleaned-to-swap", "to-deleted", "unlink-deleted", "swap-to-final")


class _KillWhileCleaning(threading.Thread):
    """SIGKILLs the broker ``delay`` seconds after a ``.cleaned`` file first appears in
    ``partition_dir`` (polled every 5 ms: a throttled clean writes for far longer)."""

    def __init__(self, b: BrokerProcess, partition_dir: Any, delay: float) -> None:
        super().__init__(daemon=True)
        self.b, self.partition_dir, self.delay = b, partition_dir, delay
        self.fired = False

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while not any(self.partition_dir.glob("*.cleaned")):
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
        time.sleep(self.delay)  # a random moment of the clean
        os.kill(self.b.proc.pid, signal.SIGKILL)
        self.fired = True


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _produce_acknowledged(
    b: BrokerProcess,
    topic: str,
    records: list[tuple[bytes, bytes]],
    on_death: Any = None,
) -> dict[int, tuple[bytes, bytes]]:
    """Produce with acks=all, idempotent; the acknowledged records by offset. When the broker
    dies meanwhile, ``on_death()`` (which restarts it) is called once."""
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5,
                  "enable.idempotence": True, "batch.size": 8192,
                  "message.timeout.ms": 120_000, "reconnect.backoff.ms": 20,
                  "reconnect.backoff.max.ms": 200})  # fmt: skip
    acked: dict[int, tuple[bytes, bytes]] = {}
    errors: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = (msg.key(), msg.value())

    for key, value in records:
        p.produce(topic, key=key, value=value, partition=0, on_delivery=cb)
        p.poll(0)
    deadline = time.monotonic() + 150
    while len(p) and time.monotonic() < deadline:
        p.poll(0.05)
        if on_death is not None and not b.alive():
            on_death()
            on_death = None
    assert len(p) == 0 and not errors, (len(p), errors[:3])
    return acked


def _assert_before_or_after(
    messages: list[Any], produced: dict[int, tuple[bytes, bytes]], when: str
) -> None:
    offsets = [m.offset() for m in messages]
    assert all(a < b for a, b in itertools.pairwise(offsets)), f"{when}: order"
    for m in messages:
        assert produced.get(m.offset()) == (m.key(), m.value()), (
            f"{when}: offset {m.offset()} reads {m.key()!r}={m.value()!r}, "
            f"acknowledged {produced.get(m.offset())}"
        )
    latest_offset: dict[bytes, int] = {}
    for offset in sorted(produced):
        latest_offset[produced[offset][0]] = offset
    missing = set(latest_offset.values()) - set(offsets)
    assert not missing, f"{when}: the latest records at {sorted(missing)[:5]} are gone"
