"""Running out of a resource fails one request, never the broker (issue: scale, part 1).

Each test makes the exhaustion happen for real: a low ``ulimit -n`` for the broker process
(set in the child before exec), a log dir on a tmpfs mounted full. Each asserts the failing
request's error code, that the other partitions keep serving, and that the broker restarts.
"""

from __future__ import annotations

import datetime
import importlib
import time
from pathlib import Path
from typing import Any

from tests import real_parts
from tests.integration.clients import cf_consume
from tests.integration.conftest import BrokerProcess, running_broker
from tests.integration.wire import WireClient, request_class
from tierlog.records import build_batch
from tierlog.records.record_batch import iter_headers

KAFKA_STORAGE_ERROR = 56
T0 = 1_700_000_000_000


def _module(cls: type[Any]) -> Any:
    return importlib.import_module(cls.__module__)


def create_topics(c: WireClient, topics: dict[str, int], **configs: str) -> dict[str, int]:
    """CreateTopics v5 over one connection: each topic's error code."""
    cls = request_class(19, 5)
    m = _module(cls)
    req = cls(
        topics=tuple(
            m.CreatableTopic(
                name=name,
                num_partitions=n,
                replication_factor=1,
                assignments=(),
                configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
            )
            for name, n in topics.items()
        ),
        timeout=datetime.timedelta(seconds=30),
        validate_only=False,
    )
    resp = c.call(req)
    return {t.name: t.error_code for t in resp.topics}


def produce(c: WireClient, topic: str, partitions: range, value: bytes) -> dict[int, int]:
    """One record to each partition (Produce v9, acks=1): each partition's error code."""
    cls = request_class(0, 9)
    m = _module(cls)
    batch = build_batch([(T0, b"k", value)])
    req = cls(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            m.TopicProduceData(
                name=topic,
                partition_data=tuple(
                    m.PartitionProduceData(index=p, records=batch) for p in partitions
                ),
            ),
        ),
    )
    resp = c.call(req)
    return {p.index: p.error_code for t in resp.responses for p in t.partition_responses}


def fetch(c: WireClient, topic: str, partitions: range) -> dict[int, tuple[int, int]]:
    """Fetch v12 from offset 0: each partition's (error code, number of batches)."""
    cls = request_class(1, 12)
    m = _module(cls)
    req = cls(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            m.FetchTopic(
                topic=topic,
                partitions=tuple(
                    m.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 16)
                    for p in partitions
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    resp = c.call(req)
    return {
        p.partition_index: (p.error_code, len(list(iter_headers(bytes(p.records or b"")))))
        for t in resp.responses
        for p in t.partitions
    }


def delete_topics(c: WireClient, names: list[str]) -> dict[str, int]:
    cls = request_class(20, 4)
    resp = c.call(cls(topic_names=tuple(names), timeout=datetime.timedelta(seconds=30)))
    return {r.name: r.error_code for r in resp.responses}


def values_of(bootstrap: str, topic: str, count: int, per_partition: int = 1) -> list[bytes]:
    """The values of a topic of ``count`` partitions holding ``per_partition`` records each."""
    got = cf_consume(bootstrap, topic, count * per_partition, partitions=range(count), timeout=60)
    return sorted(m.value() for m in got)


# ---------------------------------------------------------------------- open files


def test_many_partitions_in_a_low_open_files_limit(tmp_path: Path) -> None:
    """400 partitions (1,200 segment files and their mappings) under a limit of 300
    descriptors: every partition takes a record and reads it back, the broker never holds
    more than its limit, and it restarts into the same state."""
    topics = {f"many-{i}": 40 for i in range(10)}
    with running_broker(tmp_path / "b", "offsets.topic.num.partitions=5", nofile=300) as b:
        assert "open files: soft limit 300 (was 300), hard limit 300" in b.log_since_start()
        c = WireClient(b.bootstrap, timeout=60)
        try:
            assert create_topics(c, topics) == dict.fromkeys(topics, 0)
            for name, n in topics.items():
                assert produce(c, name, range(n), name.encode()) == dict.fromkeys(range(n), 0)
        finally:
            c.close()
        assert b.open_fds() <= 300
        for name, n in topics.items():
            assert values_of(b.bootstrap, name, n) == [name.encode()] * n
        assert b.open_fds() <= 300
        b.restart()
        assert "loaded 405 logs" in b.log_since_start()
        for name, n in list(topics.items())[:3]:
            assert values_of(b.bootstrap, name, n) == [name.encode()] * n
        assert b.open_fds() <= 300


def test_running_out_of_descriptors_fails_the_create_not_the_broker(tmp_path: Path) -> None:
    """With the segment-file budget lifted past the limit, CreateTopics eventually meets
    EMFILE: that topic answers KAFKA_STORAGE_ERROR and is rolled back, the log dir stays
    online, the partitions created before keep serving reads on the same connection, a
    delete that frees descriptors makes produce work again, and a restart with the default
    budget loads everything."""
    workdir = tmp_path / "b"
    b = BrokerProcess(
        workdir, "offsets.topic.num.partitions=5", "log.max.open.files=100000", nofile=200
    )
    workdir.mkdir()
    b.start()
    try:
        # Every request schema is imported (a thread at startup): none is needed later, when
        # an import could not open its file.
        deadline = time.monotonic() + 60
        while "protocol schemas of" not in b.log_since_start():
            assert time.monotonic() < deadline, b.tail()
            time.sleep(0.05)
        c = WireClient(b.bootstrap, timeout=60)
        created: list[str] = []
        failed: str | None = None
        for i in range(100):
            name = f"fill-{i}"
            code = create_topics(c, {name: 10})[name]
            if code == 0:
                created.append(name)
                if i == 0:
                    assert produce(c, name, range(10), b"before") == dict.fromkeys(range(10), 0)
                continue
            assert code == KAFKA_STORAGE_ERROR, f"{name}: error {code}"
            failed = name
            break
        assert failed is not None, "200 descriptors never ran out"
        assert len(created) >= 2, "the descriptors ran out too early to tell anything"
        log = b.log_since_start()
        assert "Too many open files" in log
        assert "offline" not in log
        # Reads need no new descriptor: they keep serving while none is left.
        assert fetch(c, created[0], range(10)) == dict.fromkeys(range(10), (0, 1))
        # A delete gives descriptors back; produce (which may need one) works again.
        assert delete_topics(c, [created[-1]]) == {created[-1]: 0}
        assert produce(c, created[0], range(10), b"after") == dict.fromkeys(range(10), 0)
        c.close()
        b.stop()
        # The default budget (half the limit) loads every log within the limit.
        b.extra_overrides.remove("log.max.open.files=100000")
        b.start()
        assert values_of(b.bootstrap, created[0], 10, per_partition=2) == sorted(
            [b"before", b"after"] * 10
        )
        assert b.open_fds() <= 200
        c = WireClient(b.bootstrap, timeout=60)
        try:  # the failed topic was rolled back: it can be created now
            assert create_topics(c, {failed: 10}) == {failed: 0}
        finally:
            c.close()
    finally:
        if b.alive():
            b.stop()


# ---------------------------------------------------------------------- disk space


def test_a_full_disk_fails_produce_with_a_storage_error_and_reads_go_on(tmp_path: Path) -> None:
    """The log dir on a 4 MiB tmpfs, filled by produce: the append that meets ENOSPC answers
    KAFKA_STORAGE_ERROR, what was acknowledged reads back, the dir stays online, a restart on
    the full disk works, and once a delete frees space produce works again."""
    with real_parts.tmpfs(tmp_path / "disk", "4m") as disk:
        b = BrokerProcess(
            tmp_path / "b",
            f"log.dirs={disk / 'logs'}",
            "offsets.topic.num.partitions=1",
            "log.segment.bytes=1048576",
            "log.index.size.max.bytes=65536",
        )
        (tmp_path / "b").mkdir()
        b.start()
        try:
            c = WireClient(b.bootstrap, timeout=60)
            assert create_topics(c, {"full": 1, "filler": 1}) == {"full": 0, "filler": 0}
            value = bytes(64 * 1024)
            acked = 0
            codes: dict[int, int] = {}
            for _ in range(200):
                codes = produce(c, "full", range(1), value)
                if codes[0] != 0:
                    break
                acked += 1
            assert codes == {0: KAFKA_STORAGE_ERROR}, f"after {acked} records: {codes}"
            assert acked >= 20
            assert "offline" not in b.log_since_start()
            # What was acknowledged reads back whole.
            assert len(cf_consume(b.bootstrap, "full", acked, timeout=60)) == acked
            c.close()
            b.stop()
            b.start()  # a restart on a full disk works
            assert len(cf_consume(b.bootstrap, "full", acked, timeout=60)) == acked
            # Deleting the topic frees the space (its dir is removed in the background).
            c = WireClient(b.bootstrap, timeout=60)
            assert delete_topics(c, ["full"]) == {"full": 0}
            deadline = time.monotonic() + 60
            while produce(c, "filler", range(1), b"x" * 1000) != {0: 0}:
                assert time.monotonic() < deadline, "produce never worked again after the delete"
                time.sleep(0.1)
            c.close()
        finally:
            if b.alive():
                b.stop()
