"""One Python client library across a leader failover, in its own process (the test that
drives it is tests/integration/test_cluster_failover.py; kafkajs does the same in
js/failover_client.js): a process, so that what a library leaves behind when a broker dies
(kafka-python drops the sockets of its failed connections unclosed) stays out of pytest's.

    python -m tests.integration.failover_client LIBRARY BOOTSTRAP TOPIC COUNT GO_FILE

Produces COUNT/2 records one at a time (idempotent, acks=all), prints ``HALF``, waits for
GO_FILE (the test kills the leader, then creates it), produces the rest with the same
producer, reads the topic from the start with the same library's consumer and prints one
JSON line: ``{"acked": [[value, offset], ...], "consumed": [[offset, value], ...]}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer


def _kafka_python_client(bootstrap: str, topic: str, count: int, go: Callable[[], None]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka
        import kafka.errors

    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, retries=1000,
        request_timeout_ms=30_000, delivery_timeout_ms=180_000, metadata_max_age_ms=1000,
    )  # fmt: skip
    acked = []
    for i in range(count):
        if i == count // 2:
            go()
        v = f"kafka-python-{i}".encode()
        md = producer.send(topic, v, partition=0).get(timeout=180)
        acked.append((v, md.offset))
    producer.close()
    consumer = kafka.KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=f"kp-{uuid.uuid4().hex}",
        auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=60_000,
    )  # fmt: skip
    consumed = []
    deadline = time.monotonic() + 60
    while len(consumed) < count:
        try:
            for m in consumer:
                consumed.append((m.offset, m.value))
                if len(consumed) >= count:
                    break
            else:
                break  # consumer_timeout_ms without a record
        except kafka.errors.KafkaConnectionError:
            # kafka-python 3.0.12 lets a failed metadata refresh out of the consumer's poll:
            # ensure_coordinator_ready_async awaits the refresh it asks for after
            # InvalidMetadataError without catching a connection error, and the refresh goes
            # to its least loaded node, which can be the killed broker of the bootstrap list.
            # An application retries the poll, as here.
            assert time.monotonic() < deadline, "kafka-python kept failing to reach a broker"
            time.sleep(0.2)
    consumer.close()
    return acked, consumed


def _confluent_client(bootstrap: str, topic: str, count: int, go: Callable[[], None]) -> Any:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
         "message.timeout.ms": 180_000, "topic.metadata.refresh.interval.ms": 1000}
    )  # fmt: skip
    acked = []
    for i in range(count):
        if i == count // 2:
            go()
        v = f"confluent-{i}".encode()
        out: list[Any] = []
        producer.produce(
            topic, v, partition=0, on_delivery=lambda e, m, out=out: out.append((e, m))
        )
        producer.flush(180)
        assert out and out[0][0] is None, out
        acked.append((v, out[0][1].offset()))
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cf-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    consumed = []
    deadline = time.monotonic() + 60
    while len(consumed) < count and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            if m.error() is None:
                consumed.append((m.offset(), m.value()))
    c.close()
    return acked, consumed


def _aiokafka_client(bootstrap: str, topic: str, count: int, go: Callable[[], None]) -> Any:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> Any:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
            request_timeout_ms=30_000, metadata_max_age_ms=1000,
        )  # fmt: skip
        await producer.start()
        acked = []
        try:
            for i in range(count):
                if i == count // 2:
                    await asyncio.to_thread(go)
                v = f"aiokafka-{i}".encode()
                deadline = time.monotonic() + 180
                while True:  # aiokafka gives up on a batch after request_timeout_ms
                    try:
                        md = await producer.send_and_wait(topic, v, partition=0)
                        break
                    except KafkaTimeoutError:
                        assert time.monotonic() < deadline, "aiokafka never got its ack"
                acked.append((v, md.offset))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=f"aio-{uuid.uuid4().hex}",
            auto_offset_reset="earliest", enable_auto_commit=False,
        )  # fmt: skip
        await consumer.start()
        consumed = []
        try:
            deadline = time.monotonic() + 60
            while len(consumed) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for msgs in batches.values():
                    consumed.extend((m.offset, m.value) for m in msgs)
        finally:
            await consumer.stop()
        return acked, consumed

    from aiokafka.errors import KafkaTimeoutError

    return asyncio.run(run())


CLIENTS = {
    "kafka-python": _kafka_python_client,
    "confluent": _confluent_client,
    "aiokafka": _aiokafka_client,
}


def main() -> None:
    library, bootstrap, topic, count, go_file = sys.argv[1:6]

    def go() -> None:
        print("HALF", flush=True)
        while not Path(go_file).exists():
            time.sleep(0.05)

    acked, consumed = CLIENTS[library](bootstrap, topic, int(count), go)
    print(
        json.dumps(
            {
                "acked": [[v.decode(), o] for v, o in acked],
                "consumed": [[o, v.decode()] for o, v in consumed],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
