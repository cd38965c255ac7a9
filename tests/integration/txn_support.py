"""Transactions by hand over raw kio requests (wire.py): transactional batches, WriteTxnMarkers
as a coordinator sends it, and Fetch / ListOffsets in either isolation level.

Independent of tierlog's coordinator: the tests pick producer ids themselves and play the
coordinator's part, so the log side is checked on its own.
"""

from __future__ import annotations

import datetime
import importlib
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tests.integration.wire import WireClient, request_class
from tierlog.records import RecordBatchBuilder
from tierlog.records.record_batch import RecordBatchHeader, iter_headers

WRITE_TXN_MARKERS = 27
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


def _module(cls: type[Any]) -> Any:
    return importlib.import_module(cls.__module__)


def txn_batch(
    producer_id: int,
    values: Sequence[bytes],
    *,
    producer_epoch: int = 0,
    base_sequence: int = 0,
    timestamp: int | None = None,
    transactional: bool = True,
) -> bytes:
    """One (transactional) batch of ``values`` from ``producer_id`` (timestamped now unless
    told: an old timestamp would make the log roll a segment on time)."""
    if timestamp is None:
        timestamp = int(time.time() * 1000)
    b = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    for v in values:
        b.append(timestamp, None, v)
    return b.build()


def produce_batch(
    c: WireClient,
    topic: str,
    partition: int,
    batch: bytes,
    *,
    transactional_id: str | None = "txn-test",
    acks: int = -1,
) -> tuple[int, int]:
    """Produce v9 of one batch: (error code, base offset)."""
    cls = request_class(0, 9)
    m = _module(cls)
    req = cls(
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            m.TopicProduceData(
                name=topic,
                partition_data=(m.PartitionProduceData(index=partition, records=batch),),
            ),
        ),
    )
    (p,) = [p for t in c.call(req).responses for p in t.partition_responses]
    return int(p.error_code), int(p.base_offset)


def write_txn_markers(
    c: WireClient,
    producer_id: int,
    commit: bool,
    partitions: dict[str, Iterable[int]],
    *,
    producer_epoch: int = 0,
    coordinator_epoch: int = 0,
    version: int = 1,
) -> dict[tuple[str, int], int]:
    """WriteTxnMarkers of one marker: each partition's error code."""
    cls = request_class(WRITE_TXN_MARKERS, version)
    m = _module(cls)
    req = cls(
        markers=(
            m.WritableTxnMarker(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transaction_result=commit,
                topics=tuple(
                    m.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps))
                    for t, ps in partitions.items()
                ),
                coordinator_epoch=coordinator_epoch,
            ),
        )
    )
    resp = c.call(req)
    (marker,) = resp.markers
    assert marker.producer_id == producer_id
    return {
        (t.name, int(p.partition_index)): int(p.error_code)
        for t in marker.topics
        for p in t.partitions
    }


@dataclass(frozen=True)
class FetchedPartition:
    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]] | None  # (producer id, first offset)
    records: bytes


def fetch_partition(
    c: WireClient,
    topic: str,
    partition: int,
    offset: int,
    isolation_level: int,
    *,
    max_bytes: int = 1 << 20,
) -> FetchedPartition:
    """Fetch v12 of one partition from ``offset``, no wait."""
    cls = request_class(1, 12)
    m = _module(cls)
    req = cls(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=(
            m.FetchTopic(
                topic=topic,
                partitions=(
                    m.FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    (p,) = [p for t in c.call(req).responses for p in t.partitions]
    aborted = (
        None
        if p.aborted_transactions is None
        else [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions]
    )
    return FetchedPartition(
        int(p.error_code),
        int(p.high_watermark),
        int(p.last_stable_offset),
        aborted,
        bytes(p.records or b""),
    )


def read_batches(
    bootstrap: str, topic: str, partition: int = 0
) -> Iterator[tuple[bytes, RecordBatchHeader]]:
    """Every batch of a partition up to its high watermark, read uncommitted fetch after
    fetch: (the fetched records, the batch's header in them)."""
    c = WireClient(bootstrap)
    try:
        offset = 0
        while True:
            got = fetch_partition(c, topic, partition, offset, READ_UNCOMMITTED)
            assert got.error_code == 0, got.error_code
            headers = list(iter_headers(got.records))
            for h in headers:
                yield got.records, h
            if not headers or headers[-1].last_offset + 1 >= got.high_watermark:
                return
            offset = headers[-1].last_offset + 1
    finally:
        c.close()


def list_latest_offset(c: WireClient, topic: str, partition: int, isolation_level: int) -> int:
    """ListOffsets v7 LATEST (-1) in ``isolation_level``."""
    cls = request_class(2, 7)
    m = _module(cls)
    req = cls(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(
            m.ListOffsetsTopic(
                name=topic,
                partitions=(m.ListOffsetsPartition(partition_index=partition, timestamp=-1),),
            ),
        ),
    )
    (p,) = [p for t in c.call(req).topics for p in t.partitions]
    assert p.error_code == 0, p
    return int(p.offset)


# ---------------------------------------------------------------------------- a scenario


class TxnScenario:
    """Writes a partition's transactions by hand and remembers what each isolation level must
    read: every data record in offset order, and whether its transaction committed (True),
    aborted (False) or is still open (None; plain records are True at once)."""

    def __init__(self, c: WireClient, topic: str, partition: int = 0) -> None:
        self.c = c
        self.topic = topic
        self.partition = partition
        self.records: list[list[Any]] = []  # [value, committed]
        self._open: dict[int, list[int]] = {}
        self._seq: dict[int, int] = {}
        #: producer id -> first offset of each transaction it aborted
        self.aborted: list[tuple[int, int]] = []
        self._first: dict[int, int] = {}

    def txn(self, pid: int, values: Sequence[bytes]) -> int:
        seq = self._seq.get(pid, 0)
        code, offset = produce_batch(
            self.c, self.topic, self.partition, txn_batch(pid, values, base_sequence=seq)
        )
        assert code == 0, code
        self._seq[pid] = seq + len(values)
        self._first.setdefault(pid, offset)
        for v in values:
            self._open.setdefault(pid, []).append(len(self.records))
            self.records.append([v, None])
        return offset

    def plain(self, values: Sequence[bytes]) -> int:
        b = RecordBatchBuilder()
        for v in values:
            b.append(int(time.time() * 1000), None, v)
        code, offset = produce_batch(
            self.c, self.topic, self.partition, b.build(), transactional_id=None
        )
        assert code == 0, code
        self.records.extend([v, True] for v in values)
        return offset

    def end(self, pid: int, commit: bool) -> None:
        got = write_txn_markers(self.c, pid, commit, {self.topic: [self.partition]})
        assert got == {(self.topic, self.partition): 0}, got
        for i in self._open.pop(pid, []):
            self.records[i][1] = commit
        first = self._first.pop(pid, None)
        if first is not None and not commit:
            self.aborted.append((pid, first))

    def committed(self) -> list[bytes]:
        """What read_committed reads up to the first open transaction."""
        out = []
        for v, state in self.records:
            if state is None:
                break
            if state:
                out.append(v)
        return out

    def everything(self) -> list[bytes]:
        return [v for v, _ in self.records]


def cf_read(
    bootstrap: str, topic: str, isolation: str, *, until: bytes | None = None
) -> list[bytes]:
    """The values of partition 0 read by librdkafka from offset 0 in ``isolation``: up to the
    record ``until`` (included), else up to the end it reports (EOF: the LSO or the HW)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": until is None,
            "isolation.level": isolation,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    raise KafkaException(err)
                out.append(m.value())
                if m.value() == until:
                    return out
        raise AssertionError(f"{isolation}: no end after 60 s; read {len(out)} records")
    finally:
        c.close()


def kp_read(bootstrap: str, topic: str, isolation: str, *, until: bytes) -> list[bytes]:
    """The values of partition 0 read by kafka-python from offset 0 up to ``until``."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka

    c = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
    )
    try:
        tp = kafka.TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500).values():
                for r in records:
                    out.append(r.value)
                    if r.value == until:
                        return out
        raise AssertionError(f"{isolation}: {until!r} not read after 60 s; read {len(out)}")
    finally:
        c.close()


def aio_read(bootstrap: str, topic: str, isolation: str, *, until: bytes) -> list[bytes]:
    """The values of partition 0 read by aiokafka from offset 0 up to ``until``."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[bytes]:
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
        )
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            out: list[bytes] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=500)).values():
                    for r in records:
                        assert r.value is not None
                        out.append(r.value)
                        if r.value == until:
                            return out
            raise AssertionError(f"{isolation}: {until!r} not read after 60 s; read {len(out)}")
        finally:
            await c.stop()

    return asyncio.run(run())
