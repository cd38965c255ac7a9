"""The transactional producer and the consumer of each client library (confluent-kafka,
kafka-python, aiokafka) behind one small interface, so a scenario runs unchanged with each:
the producer is driven a step at a time (begin, send, flush, commit or abort) and the consumer
reads partitions from offset 0 in either isolation level, with offsets."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka


def cf_txn_producer(bootstrap: str, txn_id: str, **conf: Any) -> Producer:
    p = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **conf}
    )
    p.init_transactions(30)
    return p


Delivered = tuple[int, int, bytes]  # partition, offset, value


class TxnProducer(Protocol):
    """One transactional producer of a client library (initialized), driven a step at a
    time; every step blocks until the client is done with it."""

    def begin(self) -> None: ...

    def send(self, partition: int, value: bytes) -> None: ...

    def flush(self) -> list[Delivered]:
        """Wait until every record sent so far is acknowledged; those sent since the last
        flush, with their offsets."""
        ...

    def end(self, commit: bool) -> None:
        """Commit or abort the transaction."""
        ...

    def close(self) -> None: ...


class TxnClient(Protocol):
    """A client library: its transactional producer and its consumer."""

    name: str

    def producer(self, bootstrap: str, topic: str, txn_id: str) -> TxnProducer: ...

    def read(
        self, bootstrap: str, topic: str, isolation: str, last: dict[int, int]
    ) -> dict[int, list[tuple[int, bytes]]]:
        """(offset, value) of each partition's records from offset 0 in ``isolation`` (no
        group), until the one at ``last[partition]`` was read."""
        ...


def read_until(
    poll: Callable[[], Iterable[tuple[int, int, bytes]]], last: dict[int, int], what: str
) -> dict[int, list[tuple[int, bytes]]]:
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in last}
    deadline = time.monotonic() + 60
    while any(not out[p] or out[p][-1][0] < last[p] for p in last):
        assert time.monotonic() < deadline, (
            f"{what}: not at {last} after 60 s; read {[(p, len(rs)) for p, rs in out.items()]}"
        )
        for partition, offset, value in poll():
            out[partition].append((offset, value))
    return out


class _CfProducer:
    def __init__(self, bootstrap: str, topic: str, txn_id: str) -> None:
        self.topic = topic
        self.p = cf_txn_producer(bootstrap, txn_id)
        self.delivered: list[Delivered] = []
        self.errors: list[Any] = []

    def _cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.delivered.append((msg.partition(), msg.offset(), msg.value()))

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, partition: int, value: bytes) -> None:
        self.p.produce(self.topic, value, partition=partition, on_delivery=self._cb)

    def flush(self) -> list[Delivered]:
        assert self.p.flush(30) == 0
        assert not self.errors, self.errors[:3]
        out, self.delivered = self.delivered, []
        return out

    def end(self, commit: bool) -> None:
        if commit:
            self.p.commit_transaction(30)
        else:
            self.p.abort_transaction(30)

    def close(self) -> None:
        self.p.flush(30)


class ConfluentKafka:
    name = "confluent-kafka"

    def producer(self, bootstrap: str, topic: str, txn_id: str) -> TxnProducer:
        return _CfProducer(bootstrap, topic, txn_id)

    def read(
        self, bootstrap: str, topic: str, isolation: str, last: dict[int, int]
    ) -> dict[int, list[tuple[int, bytes]]]:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "reader",
                "enable.auto.commit": False,
                "isolation.level": isolation,
            }
        )

        def poll() -> list[tuple[int, int, bytes]]:
            out = []
            for m in c.consume(1000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                partition, offset, value = m.partition(), m.offset(), m.value()
                assert partition is not None and offset is not None and value is not None
                out.append((partition, offset, value))
            return out

        try:
            c.assign([TopicPartition(topic, p, 0) for p in last])
            return read_until(poll, last, f"{self.name} {isolation}")
        finally:
            c.close()


class _KpProducer:
    def __init__(self, bootstrap: str, topic: str, txn_id: str) -> None:
        self.topic = topic
        self.p = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
        self.p.init_transactions()
        self.sent: list[tuple[Any, bytes]] = []

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, partition: int, value: bytes) -> None:
        self.sent.append((self.p.send(self.topic, value, partition=partition), value))

    def flush(self) -> list[Delivered]:
        self.p.flush()
        out = []
        for future, value in self.sent:
            md = future.get(timeout=30)
            out.append((md.partition, md.offset, value))
        self.sent = []
        return out

    def end(self, commit: bool) -> None:
        if commit:
            self.p.commit_transaction()
        else:
            self.p.abort_transaction()

    def close(self) -> None:
        self.p.close()


class KafkaPython:
    name = "kafka-python"

    def producer(self, bootstrap: str, topic: str, txn_id: str) -> TxnProducer:
        return _KpProducer(bootstrap, topic, txn_id)

    def read(
        self, bootstrap: str, topic: str, isolation: str, last: dict[int, int]
    ) -> dict[int, list[tuple[int, bytes]]]:
        c = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
        )

        def poll() -> list[tuple[int, int, bytes]]:
            return [
                (r.partition, r.offset, r.value)
                for records in c.poll(timeout_ms=500).values()
                for r in records
            ]

        try:
            tps = [kafka.TopicPartition(topic, p) for p in last]
            c.assign(tps)
            for tp in tps:
                c.seek(tp, 0)
            return read_until(poll, last, f"{self.name} {isolation}")
        finally:
            c.close()


class _AioProducer:
    """aiokafka's producer on an event loop of its own, run a step at a time."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str) -> None:
        from aiokafka import AIOKafkaProducer

        async def start() -> AIOKafkaProducer:
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
            await p.start()
            return p

        self.topic = topic
        self.loop = asyncio.new_event_loop()
        self.p = self.loop.run_until_complete(start())
        self.sent: list[tuple[asyncio.Future[Any], bytes]] = []

    def begin(self) -> None:
        self.loop.run_until_complete(self.p.begin_transaction())

    def send(self, partition: int, value: bytes) -> None:
        future = self.loop.run_until_complete(self.p.send(self.topic, value, partition=partition))
        self.sent.append((future, value))

    def flush(self) -> list[Delivered]:
        mds = self.loop.run_until_complete(asyncio.gather(*(f for f, _ in self.sent)))
        out = [(md.partition, md.offset, v) for md, (_, v) in zip(mds, self.sent, strict=True)]
        self.sent = []
        return out

    def end(self, commit: bool) -> None:
        if commit:
            self.loop.run_until_complete(self.p.commit_transaction())
        else:
            self.loop.run_until_complete(self.p.abort_transaction())

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.p.stop())
        finally:
            self.loop.close()


class AioKafka:
    name = "aiokafka"

    def producer(self, bootstrap: str, topic: str, txn_id: str) -> TxnProducer:
        return _AioProducer(bootstrap, topic, txn_id)

    def read(
        self, bootstrap: str, topic: str, isolation: str, last: dict[int, int]
    ) -> dict[int, list[tuple[int, bytes]]]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as AioTP

        async def start() -> AIOKafkaConsumer:
            c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
            )
            await c.start()
            tps = [AioTP(topic, p) for p in last]
            c.assign(tps)
            for tp in tps:
                c.seek(tp, 0)
            return c

        def poll() -> list[tuple[int, int, bytes]]:
            got = loop.run_until_complete(c.getmany(timeout_ms=500))
            out = []
            for tp, records in got.items():
                for r in records:
                    assert r.value is not None
                    out.append((tp.partition, r.offset, r.value))
            return out

        loop = asyncio.new_event_loop()
        try:
            c = loop.run_until_complete(start())
            try:
                return read_until(poll, last, f"{self.name} {isolation}")
            finally:
                loop.run_until_complete(c.stop())
        finally:
            loop.close()


CLIENTS: list[TxnClient] = [ConfluentKafka(), KafkaPython(), AioKafka()]
