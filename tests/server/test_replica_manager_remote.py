"""ReplicaManager's remote reads with a stand-in remote log manager: every remote partition of
a fetch at once, each outcome mapped for that partition only, the deadline, the quota,
followers, and the read ahead."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from tierlog.errors import (
    CorruptRemoteDataError,
    OffsetOutOfRange,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.log.log_segment import FetchDataInfo
from tierlog.records.default_records import build_batch
from tierlog.server.fetch_path import FetchPartitionRequest
from tierlog.server.replica_manager import ReplicaManager

REMOTE_BELOW = 5  # offsets below this are "in remote storage"


def remote_batch(offset: int, n: int = 2) -> bytes:
    return build_batch([(1, b"r", b"%d" % i) for i in range(n)], base_offset=offset)


class FakeRLM:
    def __init__(self) -> None:
        self.config = SimpleNamespace(remote_fetch_max_wait_ms=300)
        self.reads_inline = False  # a remote store: reads on the reader pool
        self.quota_exceeded = False
        self.outcome: dict[int, object] = {}  # partition -> exception | "hang" | None (data)
        self.reads: list[tuple[int, int, int, bool]] = []
        self.read_threads: list[int] = []  # threads that called read() (inline reads)
        self.lock = threading.Lock()

    def needs_remote_read(self, lg, offset: int) -> bool:
        return lg.log_start_offset <= offset < REMOTE_BELOW

    def is_remote_fetch_quota_exceeded(self) -> bool:
        return self.quota_exceeded

    def read(self, fi) -> FetchDataInfo:
        """The read of a local store (``reads_inline``): here and now, same outcomes."""
        self.read_threads.append(threading.get_ident())
        fut = self.read_async(fi)
        assert fut.done(), "a local store never hangs in this stand-in"
        return fut.result()

    def read_async(self, fi) -> Future:
        tp = fi.topic_id_partition
        with self.lock:
            self.reads.append((tp.partition, fi.fetch_offset, fi.max_bytes, fi.min_one_message))
        fut: Future = Future()
        outcome = self.outcome.get(tp.partition)
        if outcome == "hang":
            return fut
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        elif fi.fetch_offset >= REMOTE_BELOW:
            fut.set_exception(OffsetOutOfRange("not remote"))
        else:
            fut.set_result(FetchDataInfo(fi.fetch_offset, remote_batch(fi.fetch_offset)))
        return fut


@pytest.fixture
def lm(tmp_path):
    m = LogManager([tmp_path / "logs"], LogConfig())
    m.startup()
    m.create_topic("t", 3, {})
    for p in range(3):
        lg = m.get_log("t", p)
        for i in range(4):
            lg.append(build_batch([(1, b"k", b"%d" % i)] * 2), leader_epoch=0)  # offsets 0-7
        lg.update_high_watermark(lg.log_end_offset)
    yield m
    m.shutdown()


@pytest.fixture
def rlm() -> FakeRLM:
    return FakeRLM()


@pytest.fixture
def rm(lm, rlm):
    return ReplicaManager(lm, remote_log_manager=rlm)  # type: ignore[arg-type]


def fetch(rm, parts, *, replica_id=-1, max_wait_ms=500, max_bytes=1 << 20):
    reqs = [FetchPartitionRequest("t", p, off, 1 << 16) for p, off in parts]
    return asyncio.run(
        rm.fetch(
            reqs,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=0,
            replica_id=replica_id,
        )
    )


def test_every_remote_partition_is_read_at_once_beside_local_ones(rm, rlm):
    r = fetch(rm, [(0, 0), (1, 2), (2, 6)])
    assert [x.error_code for x in r] == [0, 0, 0]
    assert bytes(r[0].records) == remote_batch(0) and bytes(r[1].records) == remote_batch(2)
    assert r[2].records  # local
    # Both submitted before either was awaited (then the reads ahead: 0 at 2, 1 at 4).
    assert [x[:2] for x in rlm.reads[:2]] == [(0, 0), (1, 2)]
    assert {x[:2] for x in rlm.reads[2:]} == {(0, 2), (1, 4)}
    # No data in the response yet when either was planned: both may return one whole batch.
    assert [x[3] for x in rlm.reads[:2]] == [True, True]


def test_each_partition_gets_its_own_error_others_unaffected(rm, rlm):
    rlm.outcome = {
        0: OffsetOutOfRange("gone"),
        1: RemoteResourceNotFoundError("object missing"),
        2: RemoteStorageError("S3 down"),
    }
    r = fetch(rm, [(0, 0), (1, 0), (2, 0)])
    # Missing or corrupt: UNKNOWN_SERVER_ERROR (Kafka's answer to a failed remote read, which
    # clients report); the store down: KAFKA_STORAGE_ERROR (retriable, ridden out).
    assert [(x.error_code, bytes(x.records)) for x in r] == [(1, b""), (-1, b""), (56, b"")]
    rlm.outcome = {2: CorruptRemoteDataError("bad CRC")}
    assert [x.error_code for x in fetch(rm, [(2, 0)])] == [-1]
    rlm.outcome = {1: RemoteStorageError("S3 down")}
    r = fetch(rm, [(0, 0), (1, 0), (2, 6)])
    assert [x.error_code for x in r] == [0, 56, 0]
    assert r[0].records and r[2].records and not r[1].records


def test_a_read_past_the_deadline_answers_empty_without_error(rm, rlm):
    rlm.outcome = {0: "hang"}
    t0 = time.monotonic()
    r = fetch(rm, [(0, 0), (1, 0)])
    assert 0.25 < time.monotonic() - t0 < 2
    assert (r[0].error_code, bytes(r[0].records)) == (0, b"")
    assert r[1].error_code == 0 and r[1].records


def test_quota_exceeded_answers_empty_after_the_long_poll(rm, rlm):
    rlm.quota_exceeded = True
    t0 = time.monotonic()
    r = fetch(rm, [(0, 0)], max_wait_ms=200)
    assert time.monotonic() - t0 >= 0.19
    assert (r[0].error_code, bytes(r[0].records)) == (0, b"")
    assert rlm.reads == []


def test_followers_get_offset_moved_to_tiered_storage(rm, rlm):
    r = fetch(rm, [(0, 0), (1, 6)], replica_id=1)
    assert r[0].error_code == 109 and r[1].error_code == 0
    assert rlm.reads == []


def test_the_next_fetch_is_read_ahead(rm, rlm):
    fetch(rm, [(0, 0)])
    assert (0, 2, 1 << 16, True) in rlm.reads  # started right after serving offset 0
    n = len(rlm.reads)
    r = fetch(rm, [(0, 2)])
    assert bytes(r[0].records) == remote_batch(2)
    assert all(x[1] != 2 for x in rlm.reads[n:])  # served from the read ahead


def test_a_long_outage_becomes_an_error_consumers_report(rm, rlm, monkeypatch):
    from tierlog.server import delayed_remote_fetch

    # Escalate after 1 x remote.fetch.max.wait.ms (300 ms here) of nothing but failures.
    monkeypatch.setattr(delayed_remote_fetch, "TRANSIENT_FAILURE_ROUNDS", 1)
    clock = [1000.0]
    monkeypatch.setattr(rm._remote, "clock", lambda: clock[0])
    rlm.outcome = {0: RemoteStorageError("S3 down")}
    assert [x.error_code for x in fetch(rm, [(0, 0)])] == [56]  # retriable at first
    clock[0] += 0.2
    assert [x.error_code for x in fetch(rm, [(0, 0)])] == [56]
    clock[0] += 0.2  # failing for 0.4 s > 0.3 s: told
    assert [x.error_code for x in fetch(rm, [(0, 0)])] == [-1]
    rlm.outcome = {}
    assert [x.error_code for x in fetch(rm, [(0, 0)])] == [0]  # a success resets
    rlm.outcome = {0: RemoteStorageError("S3 down")}
    clock[0] += 0.1
    assert [x.error_code for x in fetch(rm, [(0, 0)])] == [56]
    clock[0] += 10  # nobody read it for a while: a new run of failures, retriable again
    assert [x.error_code for x in fetch(rm, [(0, 0)])] == [56]


def test_a_local_store_is_read_on_the_event_loop_with_the_same_outcomes(rm, rlm):
    rm._remote.inline = True  # what RemoteLogManager.reads_inline says of a file:// store
    rlm.outcome = {1: RemoteResourceNotFoundError("object missing")}
    loop_threads: list[int] = []

    async def go():
        loop_threads.append(threading.get_ident())
        return await rm.fetch(
            [FetchPartitionRequest("t", p, off, 1 << 16) for p, off in [(0, 0), (1, 0), (2, 6)]],
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            replica_id=-1,
        )

    r = asyncio.run(go())
    assert [x.error_code for x in r] == [0, -1, 0]
    assert bytes(r[0].records) == remote_batch(0) and not r[1].records and r[2].records
    assert rlm.read_threads == loop_threads * 2  # both remote reads, on the loop's thread
    assert [x[:2] for x in rlm.reads] == [(0, 0), (1, 0)]  # nothing read ahead
    rlm.outcome = {0: RemoteStorageError("disk gone"), 2: OffsetOutOfRange("gone")}
    assert [x.error_code for x in fetch(rm, [(0, 0), (2, 0)])] == [56, 1]
    rlm.quota_exceeded = True
    n = len(rlm.reads)
    r = fetch(rm, [(0, 0)], max_wait_ms=100)
    assert (r[0].error_code, bytes(r[0].records)) == (0, b"") and len(rlm.reads) == n
