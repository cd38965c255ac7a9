"""Consumer groups against a real broker: a group of three rebalancing as members join and
leave, the bounded join wait, and committed offsets surviving restarts (clean and SIGKILL)."""

from __future__ import annotations

import re
import signal
import time

from confluent_kafka import Consumer, TopicPartition

from tests.integration.clients import cf_create_topic, cf_produce, kp_admin, kp_consumer


def _consumer(bootstrap: str, group: str, **conf) -> Consumer:
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 500,
    }
    base.update(conf)
    return Consumer(base)


def _pump(consumers: list[Consumer], seen: list[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            for m in c.consume(500, 0.05):
                assert not m.error(), m.error()
                seen.append(m.value())


def _settle(consumers: list[Consumer], seen: list[bytes], partitions: int, timeout: float = 30):
    """Poll every consumer until their assignments cover all partitions exactly once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _pump(consumers, seen, 0.2)
        assigned = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
        flat = sorted(p for a in assigned for p in a)
        if flat == list(range(partitions)) and all(assigned):
            return assigned
    raise AssertionError(f"group did not settle: {[c.assignment() for c in consumers]}")


def test_three_consumers_rebalance_as_members_join_and_leave(broker, unique):
    topic = f"grp3-{unique}"
    group = f"g3-{unique}"
    cf_create_topic(broker.bootstrap, topic, 6)
    values = [f"r{i}".encode() for i in range(600)]
    cf_produce(broker.bootstrap, topic, [(f"k{i}".encode(), v) for i, v in enumerate(values)])

    seen: list[bytes] = []
    a = _consumer(broker.bootstrap, group)
    a.subscribe([topic])
    assert _settle([a], seen, 6) == [[0, 1, 2, 3, 4, 5]]

    b = _consumer(broker.bootstrap, group)
    b.subscribe([topic])
    sizes = sorted(len(x) for x in _settle([a, b], seen, 6))
    assert sizes == [3, 3]

    c = _consumer(broker.bootstrap, group)
    c.subscribe([topic])
    assert sorted(len(x) for x in _settle([a, b, c], seen, 6)) == [2, 2, 2]

    _pump([a, b, c], seen, 1.0)
    for x in (a, b, c):
        x.commit(asynchronous=False)
    b.close()  # LeaveGroup: the others take over its partitions
    assert sorted(len(x) for x in _settle([a, c], seen, 6)) == [3, 3]
    a.close()
    assert _settle([c], seen, 6) == [[0, 1, 2, 3, 4, 5]]
    c.close()
    assert set(seen) == set(values)  # every record delivered (some twice around rebalances)

    admin = kp_admin(broker.bootstrap)
    desc = admin.describe_groups([group])[group]
    admin.close()
    assert desc["group_state"] == "Empty"


def test_lone_consumer_joins_within_the_initial_delay(broker, unique):
    """Never half a session timeout (Tansu's behaviour): delay (200 ms here) + a little."""
    topic = f"join-{unique}"
    cf_produce(broker.bootstrap, topic, [(None, b"x")])
    c = _consumer(broker.bootstrap, f"gj-{unique}", **{"session.timeout.ms": 45_000})
    t0 = time.monotonic()
    c.subscribe([topic])
    m = None
    while m is None and time.monotonic() - t0 < 20:
        m = c.poll(0.1)
    elapsed = time.monotonic() - t0
    c.close()
    assert m is not None and m.value() == b"x"
    assert elapsed < 5, f"first assignment took {elapsed:.1f}s"


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = _consumer(bootstrap, group)
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return [tp.offset for tp in tps]
    finally:
        c.close()


def test_committed_offsets_survive_restarts(fresh_broker):
    b = fresh_broker
    topic, group = "persist", "persist-group"
    cf_create_topic(b.bootstrap, topic, 2)
    cf_produce(b.bootstrap, topic, [(None, f"v{i}".encode()) for i in range(100)], partition=0)
    cf_produce(b.bootstrap, topic, [(None, f"w{i}".encode()) for i in range(50)], partition=1)
    c = _consumer(b.bootstrap, group)
    c.commit(
        offsets=[TopicPartition(topic, 0, 70), TopicPartition(topic, 1, 20)], asynchronous=False
    )
    c.close()
    # kafkajs commits -1/-2 and reads them back: negative offsets are stored as given
    admin = kp_admin(b.bootstrap)
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    admin.alter_group_offsets("neg-group", {KTP(topic, 0): OffsetAndMetadata(-2, "", -1)})
    admin.close()

    assert b.stop() == 0  # SIGTERM: clean shutdown
    assert "stopped cleanly" in b.log_since_start()
    b.start()
    assert _committed(b.bootstrap, group, topic, 2) == [70, 20]
    admin = kp_admin(b.bootstrap)
    neg = admin.list_group_offsets("neg-group")["neg-group"]
    admin.close()
    assert neg[KTP(topic, 0)].offset == -2

    # commit again, then SIGKILL: nothing was flushed, the page cache keeps the commit
    c = _consumer(b.bootstrap, group)
    c.commit(offsets=[TopicPartition(topic, 0, 99)], asynchronous=False)
    c.close()
    b.stop(signal.SIGKILL)
    b.start()
    assert _committed(b.bootstrap, group, topic, 2) == [99, 20]

    # a consumer of the group resumes from the committed offset
    kc = kp_consumer(b.bootstrap, topic, group_id=group, consumer_timeout_ms=6000)
    rest = sorted(m.value for m in kc)
    kc.close()
    assert rest == sorted([b"v99"] + [f"w{i}".encode() for i in range(20, 50)])


def test_sigint_is_a_clean_shutdown_too(fresh_broker):
    b = fresh_broker
    cf_produce(b.bootstrap, "ctrl-c", [(None, b"x")] * 10)
    assert b.stop(signal.SIGINT) == 0
    assert "stopped cleanly" in b.log_since_start()
    assert (b.log_dir / ".kafka_cleanshutdown").exists()
    partitions = [d for d in b.log_dir.iterdir() if d.is_dir()]
    assert any(d.name == "ctrl-c-0" for d in partitions)
    b.start()
    # this start found every partition (the first start's line does not count), left them
    # to their first use (the marker vouches for them), and took the clean shutdown marker
    loaded = re.findall(r"loaded (\d+) logs from .* \((\d+) more to open", b.log_since_start())
    assert loaded == [("0", str(len(partitions)))]
    assert not (b.log_dir / ".kafka_cleanshutdown").exists()


def test_commits_with_flush_per_message_go_through_the_writer_thread(tmp_path):
    """log.flush.interval.messages=1 makes every __consumer_offsets append fsync: the store must
    append in a thread (the event loop keeps serving) and commits still read back."""
    from tests.integration.conftest import running_broker

    with running_broker(tmp_path / "b", "log.flush.interval.messages=1") as b:
        topic, group = "flushed", "flushed-group"
        cf_create_topic(b.bootstrap, topic, 1)
        cf_produce(b.bootstrap, topic, [(None, b"x")] * 10, partition=0)
        c = _consumer(b.bootstrap, group)
        for offset in (3, 7, 10):
            c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        c.close()
        assert _committed(b.bootstrap, group, topic, 1) == [10]
        b.stop(signal.SIGKILL)
        b.start()
        assert _committed(b.bootstrap, group, topic, 1) == [10]
