"""A read ahead that fails while a fetch waits on it (tierlog.server.remote_read_ahead): it is
speculative, so its failure must not fail the consumer's fetch -- a fresh read is done, and
only when that fails too does the partition answer KAFKA_STORAGE_ERROR (56).

Real parts: a LogManager with a tiered topic on disk, a RemoteLogManager over a ``file://``
remote store under tmp_path, the ReplicaManager's fetch path. The store's ranged reads are
scripted: the read ahead's read is held until the test lets it fail, so the fetch takes it
while it is still in flight."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tierlog.errors import RemoteStorageError
from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.records.default_records import build_batch
from tierlog.records.record_batch import iter_headers
from tierlog.server.remote_read_ahead import next_fetch_offset
from tierlog.server.replica_manager import (
    FetchPartitionRequest,
    FetchPartitionResult,
    ReplicaManager,
)
from tierlog.tiered import InMemoryRemoteLogMetadataManager, TopicIdPartition
from tierlog.tiered.remote_index_cache import RemoteIndexCache
from tierlog.tiered.remote_log_manager import (
    RemoteLogManager,
    RemoteLogManagerConfig,
    RemoteStorageFetchInfo,
)
from tierlog.tiered.storage import PyArrowRemoteStorageManager

TOPIC = "orders"
PARTITION_MAX_BYTES = 400  # a few batches per fetch: the next fetch starts in remote data
KAFKA_STORAGE_ERROR = 56


class ScriptedRSM(PyArrowRemoteStorageManager):
    """A file:// store whose ranged reads (``fetch_log_segment``) follow ``script``, one step
    per read while it lasts: ``"pass"`` reads; ``"hold"`` signals :attr:`held`, waits for
    :attr:`release` and fails (a read ahead caught by a connection reset). With
    :attr:`down`, every other read fails (the store is down)."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.script: list[str] = []
        self.down = False
        self.reads = 0
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def fetch_log_segment(self, metadata, start_position, end_position=None):
        with self._lock:
            self.reads += 1
            step = self.script.pop(0) if self.script else "pass"
        if step == "hold":
            self.held.set()
            if not self.release.wait(60):  # a broken test must not hang the suite
                raise AssertionError("the held read was never released")
            raise RemoteStorageError("injected: connection reset during the read ahead")
        if self.down:
            raise RemoteStorageError("injected: remote storage is down")
        return super().fetch_log_segment(metadata, start_position, end_position)


@dataclass
class Tiered:
    lm: LogManager
    lg: Log
    tp: TopicIdPartition
    rsm: ScriptedRSM
    rlm: RemoteLogManager
    rm: ReplicaManager


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[Tiered]:
    lm = LogManager([tmp_path / "logs"], LogConfig(), remote_log_storage_system_enable=True)
    lm.startup()
    info = lm.create_topic(
        TOPIC,
        1,
        {"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1"},
    )
    lg = lm.get_log(TOPIC, 0)
    assert lg is not None
    now = int(time.time() * 1000)
    for i in range(40):
        lg.append(build_batch([(now + i, b"k", b"%03d" % i * 30)] * 2), leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)
    tp = TopicIdPartition(info.topic_id, TOPIC, 0)
    rsm = ScriptedRSM((tmp_path / "remote").as_uri())
    rlm = RemoteLogManager(
        # A deadline no loaded machine reaches: a read ahead answered empty by the deadline
        # would prove nothing.
        RemoteLogManagerConfig(remote_fetch_max_wait_ms=60_000),
        rsm,
        InMemoryRemoteLogMetadataManager(),
        RemoteIndexCache(rsm, tmp_path / "index-cache", 1 << 20),
        lambda t: lm.get_log(t.topic, t.partition),
        broker_id=0,
        start_scheduler=False,
    )
    rm = ReplicaManager(lm, remote_log_manager=rlm)
    try:
        rlm.on_leadership_change({tp}, set())
        rlm.run_copy(tp)
        lg.delete_old_segments()
        assert lg.log_start_offset == 0 and lg.local_log_start_offset > 20  # mostly remote
        yield Tiered(lm, lg, tp, rsm, rlm, rm)
    finally:
        rsm.release.set()
        rm.wake_all()
        rlm.close()
        lm.shutdown()


def _request(offset: int) -> list[FetchPartitionRequest]:
    return [FetchPartitionRequest(TOPIC, 0, offset, PARTITION_MAX_BYTES)]


async def _fetch(rm: ReplicaManager, offset: int) -> FetchPartitionResult:
    (r,) = await rm.fetch(
        _request(offset), max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0
    )
    return r


def _first_fetch(t: Tiered) -> int:
    """Fetch offset 0 from remote storage; the offset the consumer fetches next (the one
    read ahead, whose read is held)."""
    t.rsm.script = ["pass", "hold"]  # the fetch's own read, then the read ahead's
    r = asyncio.run(_fetch(t.rm, 0))
    assert r.error_code == 0 and r.records
    nxt = next_fetch_offset(r.records)
    assert nxt is not None and nxt < t.lg.local_log_start_offset  # still remote
    assert t.rsm.held.wait(30), "the read ahead never started"
    return nxt


async def _fetch_taking_the_read_ahead(t: Tiered, offset: int) -> FetchPartitionResult:
    """Fetch ``offset`` while its read ahead is in flight, then let the read ahead fail."""
    task = asyncio.create_task(_fetch(t.rm, offset))
    await asyncio.sleep(0)  # the fetch runs up to its wait: it has taken the read ahead
    read_ahead = t.rm._read_ahead
    assert read_ahead is not None and read_ahead.hits == 1  # taken while still in flight
    assert not task.done()
    t.rsm.release.set()
    return await task


def test_a_failed_read_ahead_is_followed_by_a_fresh_read(tiered: Tiered) -> None:
    t = tiered
    nxt = _first_fetch(t)
    reads = t.rsm.reads
    r = asyncio.run(_fetch_taking_the_read_ahead(t, nxt))
    assert r.error_code == 0
    assert t.rsm.reads > reads  # the fresh read went to the store
    expected = t.rlm.read(RemoteStorageFetchInfo(t.tp, nxt, PARTITION_MAX_BYTES, True)).records
    assert expected and bytes(r.records) == bytes(expected)


def test_a_failed_read_ahead_and_a_failed_fresh_read_answer_storage_error(tiered: Tiered) -> None:
    t = tiered
    nxt = _first_fetch(t)
    t.rsm.down = True  # the fresh read fails too
    reads = t.rsm.reads
    r = asyncio.run(_fetch_taking_the_read_ahead(t, nxt))
    assert (r.error_code, bytes(r.records)) == (KAFKA_STORAGE_ERROR, b"")
    assert t.rsm.reads > reads  # a fresh read was tried
    # Nothing of the failure is kept: once the store is back the same fetch gets its data.
    t.rsm.down = False
    r = asyncio.run(_fetch(t.rm, nxt))
    assert r.error_code == 0
    first = next(iter_headers(bytes(r.records)))
    assert first.base_offset <= nxt <= first.last_offset
