"""A read ahead that fails while a fetch waits on it (tierlog.server.remote_read_ahead): it is
speculative, so its failure must not fail the consumer's fetch -- a fresh read is done, and
only when that fails too does the partition answer KAFKA_STORAGE_ERROR (56).

Real parts (tests/server/tiered_parts.py): a tiered partition on disk, a RemoteLogManager over
a ``file://`` remote store under tmp_path, the ReplicaManager's fetch path. The store's ranged
reads are scripted: the read ahead's read is held until the test lets it fail, so the fetch
takes it while it is still in flight."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.errors import RemoteStorageError
from tierlog.records.record_batch import iter_headers
from tierlog.server.fetch_path import FetchPartitionRequest, FetchPartitionResult
from tierlog.server.remote_read_ahead import next_fetch_offset
from tierlog.server.replica_manager import ReplicaManager
from tierlog.tiered.remote_log_manager import RemoteLogManagerConfig, RemoteStorageFetchInfo
from tierlog.tiered.storage import PyArrowRemoteStorageManager

from .tiered_parts import TOPIC, TieredPartition, tiered_partition

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


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[TieredPartition]:
    # A deadline no loaded machine reaches: a read ahead answered empty by the deadline would
    # prove nothing.
    config = RemoteLogManagerConfig(remote_fetch_max_wait_ms=60_000)
    with tiered_partition(tmp_path, rsm_class=ScriptedRSM, rlm_config=config) as t:
        try:
            yield t
        finally:
            _rsm(t).release.set()


def _rsm(t: TieredPartition) -> ScriptedRSM:
    assert isinstance(t.rsm, ScriptedRSM)
    return t.rsm


def _request(offset: int) -> list[FetchPartitionRequest]:
    return [FetchPartitionRequest(TOPIC, 0, offset, PARTITION_MAX_BYTES)]


async def _fetch(rm: ReplicaManager, offset: int) -> FetchPartitionResult:
    (r,) = await rm.fetch(
        _request(offset), max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0
    )
    return r


def _first_fetch(t: TieredPartition) -> int:
    """Fetch offset 0 from remote storage; the offset the consumer fetches next (the one
    read ahead, whose read is held)."""
    _rsm(t).script = ["pass", "hold"]  # the fetch's own read, then the read ahead's
    r = asyncio.run(_fetch(t.rm, 0))
    assert r.error_code == 0 and r.records
    nxt = next_fetch_offset(r.records)
    assert nxt is not None and nxt < t.lg.local_log_start_offset  # still remote
    assert _rsm(t).held.wait(30), "the read ahead never started"
    return nxt


async def _fetch_taking_the_read_ahead(t: TieredPartition, offset: int) -> FetchPartitionResult:
    """Fetch ``offset`` while its read ahead is in flight, then let the read ahead fail."""
    task = asyncio.create_task(_fetch(t.rm, offset))
    await asyncio.sleep(0)  # the fetch runs up to its wait: it has taken the read ahead
    read_ahead = t.rm._remote.read_ahead
    assert read_ahead is not None and read_ahead.hits == 1  # taken while still in flight
    assert not task.done()
    _rsm(t).release.set()
    return await task


def test_a_failed_read_ahead_is_followed_by_a_fresh_read(tiered: TieredPartition) -> None:
    t = tiered
    nxt = _first_fetch(t)
    reads = _rsm(t).reads
    r = asyncio.run(_fetch_taking_the_read_ahead(t, nxt))
    assert r.error_code == 0
    assert _rsm(t).reads > reads  # the fresh read went to the store
    expected = t.rlm.read(RemoteStorageFetchInfo(t.tp, nxt, PARTITION_MAX_BYTES, True)).records
    assert expected and bytes(r.records) == bytes(expected)


def test_a_failed_read_ahead_and_a_failed_fresh_read_answer_storage_error(
    tiered: TieredPartition,
) -> None:
    t = tiered
    nxt = _first_fetch(t)
    _rsm(t).down = True  # the fresh read fails too
    reads = _rsm(t).reads
    r = asyncio.run(_fetch_taking_the_read_ahead(t, nxt))
    assert (r.error_code, bytes(r.records)) == (KAFKA_STORAGE_ERROR, b"")
    assert _rsm(t).reads > reads  # a fresh read was tried
    # Nothing of the failure is kept: once the store is back the same fetch gets its data.
    _rsm(t).down = False
    r = asyncio.run(_fetch(t.rm, nxt))
    assert r.error_code == 0
    first = next(iter_headers(bytes(r.records)))
    assert first.base_offset <= nxt <= first.last_offset
