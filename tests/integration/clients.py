"""Small helpers around the three client libraries, shared by the integration tests."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Iterable
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    from kafka.admin import KafkaAdminClient

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

Record = tuple[bytes | None, bytes | None]


# --------------------------------------------------------------------------- confluent-kafka


def cf_producer(bootstrap: str, **conf: Any) -> Producer:
    base = {"bootstrap.servers": bootstrap, "linger.ms": 5, "socket.timeout.ms": 10_000}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(base)


def cf_produce(
    bootstrap: str, topic: str, records: Iterable[Record], partition: int = -1, **conf: Any
) -> list[tuple[int, int]]:
    """Produce and flush; (partition, offset) per acknowledged record, in produce order."""
    p = cf_producer(bootstrap, **conf)
    results: list[Any] = []
    errors: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            results.append((msg.partition(), msg.offset()))

    for key, value in records:
        while True:
            try:
                p.produce(topic, value=value, key=key, partition=partition, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
    remaining = p.flush(30)
    assert remaining == 0, f"{remaining} records not delivered"
    assert not errors, errors[:5]
    return results


def cf_consume(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partitions: Iterable[int] = (0,),
    offset: int = 0,
    timeout: float = 30.0,
    **conf: Any,
) -> list[Any]:
    """``count`` messages read with assign() (no group) from ``offset``."""
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": "unused",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
    }
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    c = Consumer(base)
    try:
        c.assign([TopicPartition(topic, p, offset) for p in partitions])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for m in c.consume(min(10_000, count - len(out)), 0.5):
                if m.error():
                    raise KafkaException(m.error())
                out.append(m)
        return out
    finally:
        c.close()


def cf_high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    finally:
        c.close()


def cf_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def cf_create_topic(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    a = cf_admin(bootstrap)
    fs = a.create_topics([NewTopic(topic, partitions, 1, config=configs)], operation_timeout=10)
    for f in fs.values():
        f.result(15)


# --------------------------------------------------------------------------- kafka-python


def kp_producer(bootstrap: str, **conf: Any) -> Any:
    return kafka.KafkaProducer(bootstrap_servers=bootstrap, **conf)


def kp_consumer(bootstrap: str, *topics: str, **conf: Any) -> Any:
    conf.setdefault("auto_offset_reset", "earliest")
    conf.setdefault("consumer_timeout_ms", 15_000)
    return kafka.KafkaConsumer(*topics, bootstrap_servers=bootstrap, **conf)


def kp_admin(bootstrap: str) -> Any:
    return KafkaAdminClient(bootstrap_servers=bootstrap)


# --------------------------------------------------------------------------- aiokafka


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def cf_values(bootstrap: str, topic: str, count: int, per_partition: int = 1) -> list[bytes]:
    """The sorted values of a topic of ``count`` partitions holding ``per_partition`` records
    each (partitions 0 .. count - 1, read with assign())."""
    got = cf_consume(bootstrap, topic, count * per_partition, partitions=range(count), timeout=60)
    return sorted(m.value() for m in got)
