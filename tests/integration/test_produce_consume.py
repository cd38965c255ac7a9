"""Produce with every compression and acks setting, consume with and without groups, with
kafka-python, confluent-kafka (librdkafka) and aiokafka against a real ``tierlog serve``.

Codecs per client: confluent-kafka and aiokafka (through cramjam) do all five; kafka-python
3.0.12 here has only gzip built in (no python-snappy / lz4 / zstandard installed), so it is
tested with none and gzip, and its snappy/lz4/zstd batches are covered by the other two.
"""

from __future__ import annotations

import json
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.integration.clients import (
    cf_consume,
    cf_create_topic,
    cf_produce,
    kp_consumer,
    kp_producer,
    run,
)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 300


def _records(prefix: str, n: int = N) -> list[tuple[bytes | None, bytes | None]]:
    return [(f"k{i % 7}".encode(), f"{prefix}-{i}".encode() * 3) for i in range(n)]


def _values(msgs: list) -> list[bytes]:
    return [m.value() for m in msgs]


# --------------------------------------------------------------------------- confluent-kafka


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_produce_every_codec_and_acks(broker, unique, codec, acks):
    topic = f"cf-{codec}-{acks}-{unique}"
    records = _records(topic)
    conf = {"compression.type": codec, "acks": acks}
    if acks != "all":
        conf["enable.idempotence"] = False
    results = cf_produce(broker.bootstrap, topic, records, **conf)
    if acks != "0":
        assert [o for _, o in results] == list(range(N))
    got = cf_consume(broker.bootstrap, topic, N)
    assert _values(got) == [v for _, v in records]
    assert [m.offset() for m in got] == list(range(N))
    assert [m.key() for m in got] == [k for k, _ in records]


def test_confluent_headers_keys_nulls_and_timestamps(broker, unique):
    from confluent_kafka import Producer

    topic = f"cf-hdr-{unique}"
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, value=None, key=b"tombstone")
    p.produce(topic, value=b"v", key=None, headers=[("h1", b"a"), ("h2", None)])
    p.produce(topic, value=b"t", timestamp=1_600_000_000_000)
    assert p.flush(15) == 0
    got = cf_consume(broker.bootstrap, topic, 3)
    assert got[0].value() is None and got[0].key() == b"tombstone"
    assert got[1].headers() == [("h1", b"a"), ("h2", None)]
    assert got[2].timestamp()[1] == 1_600_000_000_000


def test_confluent_log_append_time_topic(broker, unique):
    topic = f"cf-lat-{unique}"
    cf_create_topic(broker.bootstrap, topic, **{"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    cf_produce(broker.bootstrap, topic, [(None, b"a"), (None, b"b")], compression_type="lz4")
    got = cf_consume(broker.bootstrap, topic, 2)  # librdkafka checks the CRC by default
    for m in got:
        ts_type, ts = m.timestamp()
        assert ts_type == 2  # TIMESTAMP_LOG_APPEND_TIME
        assert before - 5000 <= ts <= int(time.time() * 1000) + 5000


def test_confluent_consumer_group(broker, unique):
    topic = f"cf-group-{unique}"
    cf_create_topic(broker.bootstrap, topic, 3)
    records = _records(topic, 600)
    cf_produce(broker.bootstrap, topic, records)
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{unique}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 600 and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            assert not m.error(), m.error()
            got.append(m.value())
    c.commit(asynchronous=False)
    committed = c.committed(
        [__import__("confluent_kafka").TopicPartition(topic, p) for p in range(3)]
    )
    c.close()
    assert sorted(got) == sorted(v for _, v in records)
    assert sum(tp.offset for tp in committed) == 600


# --------------------------------------------------------------------------- kafka-python


@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("codec", [None, "gzip"])
def test_kafka_python_produce_codecs_and_acks(broker, unique, codec, acks):
    topic = f"kp-{codec}-{acks}-{unique}"
    records = _records(topic)
    p = kp_producer(
        broker.bootstrap,
        compression_type=codec,
        acks=acks,
        enable_idempotence=acks == "all",
        linger_ms=5,
    )
    futures = [p.send(topic, key=k, value=v) for k, v in records]
    p.flush(30)
    if acks != 0:
        assert [f.get(10).offset for f in futures] == list(range(N))
    p.close()
    # read back with kafka-python (no group) and with librdkafka
    c = kp_consumer(broker.bootstrap, consumer_timeout_ms=10_000)
    from kafka import TopicPartition

    c.assign([TopicPartition(topic, 0)])
    c.seek_to_beginning()
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == N:
            break
    c.close()
    assert got == [v for _, v in records]
    assert _values(cf_consume(broker.bootstrap, topic, N)) == got


def test_kafka_python_consumer_group_and_commit(broker, unique):
    topic = f"kp-group-{unique}"
    cf_create_topic(broker.bootstrap, topic, 2)
    records = _records(topic, 200)
    cf_produce(broker.bootstrap, topic, records, compression_type="gzip")
    group = f"kpg-{unique}"
    c = kp_consumer(broker.bootstrap, topic, group_id=group, enable_auto_commit=False)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 200:
            break
    c.commit()
    c.close()
    assert sorted(got) == sorted(v for _, v in records)
    # a new member of the group starts from the committed offsets: nothing left
    cf_produce(broker.bootstrap, topic, [(None, b"late")], partition=0)
    c2 = kp_consumer(broker.bootstrap, topic, group_id=group, consumer_timeout_ms=3000)
    rest = [m.value for m in c2]
    c2.close()
    assert rest == [b"late"]


# --------------------------------------------------------------------------- aiokafka


@pytest.mark.parametrize(
    ("codec", "acks"),
    [(c, "all") for c in CODECS] + [(None, 0), (None, 1), ("lz4", 1)],
)
def test_aiokafka_produce_codecs_and_acks(broker, unique, codec, acks):
    topic = f"aio-{codec}-{acks}-{unique}"
    records = _records(topic, 100)

    async def main() -> list[int]:
        p = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            compression_type=None if codec == "none" else codec,
            acks=acks,
            enable_idempotence=acks == "all",
        )
        await p.start()
        try:
            futs = [await p.send(topic, v, key=k) for k, v in records]
            metas = [await f for f in futs]
        finally:
            await p.stop()
        return [m.offset if m is not None else -1 for m in metas]

    offsets = run(main())
    if acks != 0:
        assert offsets == list(range(100))
    got = cf_consume(broker.bootstrap, topic, 100)
    assert _values(got) == [v for _, v in records]


def test_aiokafka_consumer_group(broker, unique):
    topic = f"aio-group-{unique}"
    records = _records(topic, 150)
    cf_produce(broker.bootstrap, topic, records, compression_type="zstd")

    async def main() -> list[bytes]:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=f"aio-{unique}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        out = []
        try:
            async for m in c:
                out.append(m.value)
                if len(out) == 150:
                    break
            await c.commit()
        finally:
            await c.stop()
        return out

    assert run(main()) == [v for _, v in records]


def test_long_poll_wakes_on_append(broker, unique):
    """A consumer parked in Fetch (fetch.wait.max.ms 20 s) gets a record appended meanwhile
    long before that."""
    topic = f"lp-{unique}"
    cf_produce(broker.bootstrap, topic, [(None, b"first")])
    from confluent_kafka import Consumer, TopicPartition

    max_wait_s = 20
    snapshots: list[dict] = []
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "fetch.wait.max.ms": max_wait_s * 1000,
            "enable.auto.commit": False,
            "statistics.interval.ms": 100,
            "stats_cb": lambda s: snapshots.append(json.loads(s)),
        }
    )
    try:
        t0 = time.monotonic()  # every Fetch of this consumer is sent after this
        c.assign([TopicPartition(topic, 0, 0)])
        assert c.poll(10).value() == b"first"
        # Parked: the consumer fetches from offset 1 and has a request open at the broker
        # (the Fetch is the only request it keeps open; librdkafka counts a request awaiting
        # its response once it is written to the socket).
        deadline = time.monotonic() + 30
        while not any(_fetch_parked(s, topic) for s in snapshots):
            assert time.monotonic() < deadline, "the consumer's next Fetch was never sent"
            assert c.poll(0.05) is None
        # The producer's connection, ApiVersions and Metadata are round trips through the
        # broker's event loop, after the Fetch reached its socket: the Fetch is parked when
        # the Produce comes.
        cf_produce(broker.bootstrap, topic, [(None, b"second")], linger_ms=0)
        m = c.poll(max_wait_s + 10)
        elapsed = time.monotonic() - t0
    finally:
        c.close()
    assert m is not None and m.value() == b"second"
    # not woken, the parked Fetch would be answered (empty) at its max wait after it was sent
    # (after t0), and only the next one would bring "second"
    assert elapsed < max_wait_s, f"long poll did not wake on append ({elapsed:.2f}s)"


def _fetch_parked(stats: dict, topic: str) -> bool:
    """A librdkafka statistics snapshot: partition 0 is fetched from offset 1 and broker 0
    has a request awaiting its response."""
    partition = stats["topics"].get(topic, {}).get("partitions", {}).get("0", {})
    brokers = [b for b in stats["brokers"].values() if b["nodeid"] == 0]
    return partition.get("next_offset") == 1 and any(b["waitresp_cnt"] >= 1 for b in brokers)
