"""Faults around the RemoteLogManager: remote storage failing during copy and read, crashes
in the middle of an upload or a delete, corrupt index cache files, corrupt or vanished remote
objects, slow remote reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tierlog.errors import RemoteResourceNotFoundError, RemoteStorageError, RequestTimedOut
from tierlog.records.record_batch import iter_headers
from tierlog.tiered import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
from tierlog.tiered.remote_index_cache import DIR_NAME, RemoteIndexCache, file_name_prefix
from tierlog.tiered.remote_log_manager import (
    RemoteLogManager,
    RemoteLogManagerConfig,
    RemoteStorageFetchInfo,
)
from tierlog.tiered.storage import EventType, PyArrowRemoteStorageManager

from .tiered_harness import HOUR, T0, World, config

S = RemoteLogSegmentState


class Crash(BaseException):
    """The broker dies: nothing after this point runs (not an Exception: no cleanup)."""


class FaultyRSM(PyArrowRemoteStorageManager):
    """Writes the .log object of an upload, then fails (``mode='error'``) or dies
    (``mode='crash'``) before the indexes object; or runs ``before_read`` (a test's gate or
    barrier) at the start of each segment read, counting the reads in progress."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.upload_faults: list[str] = []
        self.before_read: Callable[[], object] | None = None
        self.reads_in_progress = 0
        self._reads_lock = threading.Lock()

    def copy_log_segment_data(self, metadata, segment_data):
        if self.upload_faults:
            mode = self.upload_faults.pop(0)
            self._write(self.object_path(metadata, ".log"), [b"partial upload"])
            if mode == "crash":
                raise Crash
            raise RemoteStorageError("injected: connection reset during upload")
        return super().copy_log_segment_data(metadata, segment_data)

    def fetch_log_segment(self, metadata, start_position, end_position=None):
        with self._reads_lock:
            self.reads_in_progress += 1
        try:
            if self.before_read is not None:
                self.before_read()
            return super().fetch_log_segment(metadata, start_position, end_position)
        finally:
            with self._reads_lock:
                self.reads_in_progress -= 1


def remote_objects(root: Path) -> set[str]:
    return {p.name for p in (root / "remote").rglob("*") if p.is_file()}


def expected_objects(w: World) -> set[str]:
    out = set()
    for md in w.rlmm.list_remote_log_segments(w.tp):
        assert md.state == S.COPY_SEGMENT_FINISHED
        name = w.base_rsm.object_path(md, "").rsplit("/", 1)[1]
        out |= {name + ".log", name + ".indexes"}
    return out


def faulty_world(tmp_path: Path, **kw) -> tuple[World, FaultyRSM]:
    rsm = FaultyRSM(f"file://{tmp_path}/remote")
    w = World(tmp_path, topic_config=config(local_retention_ms=0), rsm=rsm, **kw)
    return w, rsm


# ---------------------------------------------------------------------------------- copy faults


def test_failed_copy_cleans_up_and_is_retried_no_local_deletion(tmp_path) -> None:
    w, rsm = faulty_world(tmp_path)
    try:
        w.fill_segments(4)
        rsm.upload_faults.append("error")
        w.rlm.run_copy(w.tp)
        # the first segment failed: its partial object is gone, no FINISHED, nothing copied
        assert w.rlmm.list_remote_log_segments(w.tp) == []
        assert remote_objects(tmp_path) == set()
        copies = w.rsm.events_of(EventType.COPY_SEGMENT)
        assert len(copies) == 1 and copies[0].error is not None
        deletes = w.rsm.events_of(EventType.DELETE_SEGMENT)
        assert [d.segment_id for d in deletes] == [copies[0].segment_id]
        w.clock.now = T0 + HOUR
        assert w.log.delete_old_segments() == 0
        assert w.log.local_log_start_offset == 0
        # the retry uses a new segment id and succeeds
        w.rlm.run_copy(w.tp)
        mds = w.rlmm.list_remote_log_segments(w.tp)
        assert len(mds) == 3
        assert copies[0].segment_id not in {m.remote_log_segment_id for m in mds}
        assert remote_objects(tmp_path) == expected_objects(w)
        assert w.log.delete_old_segments() == 3
    finally:
        w.close()


def test_copy_failures_are_retried_with_backoff_by_the_scheduler(tmp_path) -> None:
    rlm_config = RemoteLogManagerConfig(
        remote_log_manager_task_interval_ms=60_000,  # only the first run + backoff retries
        remote_log_manager_task_retry_backoff_ms=20,
        remote_log_manager_task_retry_backoff_max_ms=200,
    )
    w = World(tmp_path, topic_config=config(local_retention_ms=0), rlm_config=rlm_config)
    try:
        w.fill_segments(3)
        w.rsm.fail(EventType.COPY_SEGMENT, times=2)
        w.rlm.close()  # the World's manager has no scheduler: replace it by one that has
        w.rlm = RemoteLogManager(
            rlm_config, w.rsm, w.rlmm, RemoteIndexCache(w.rsm, tmp_path / "c2", 1 << 20),
            w.logs.get, 1, time_ms=w.clock,
        )  # fmt: skip
        w.rlm.on_leadership_change({w.tp}, set())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if len(w.rlmm.list_remote_log_segments(w.tp)) == 2 and all(
                m.state == S.COPY_SEGMENT_FINISHED for m in w.rlmm.list_remote_log_segments(w.tp)
            ):
                break
            time.sleep(0.02)
        copies = w.rsm.events_of(EventType.COPY_SEGMENT)
        assert [c.error is not None for c in copies] == [True, True, False, False]
        assert len(w.rlmm.list_remote_log_segments(w.tp)) == 2
    finally:
        w.close()


# ---------------------------------------------------------------------------------- crashes


def test_crash_in_the_middle_of_an_upload_converges_after_restart(tmp_path) -> None:
    w, rsm = faulty_world(tmp_path)
    w.fill_segments(4)
    before = w.local_bytes()
    rsm.upload_faults.append("crash")
    with pytest.raises(Crash):
        w.rlm.run_copy(w.tp)
    # what the dead broker left: COPY_SEGMENT_STARTED and a partial .log object
    assert [m.state for m in w.rlmm.list_remote_log_segments(w.tp)] == [S.COPY_SEGMENT_STARTED]
    assert len(remote_objects(tmp_path)) == 1
    w.rlm.close()
    # restart: a new manager over the same log, metadata and storage
    w2 = World(tmp_path, logs=w.logs, rsm=PyArrowRemoteStorageManager(f"file://{tmp_path}/remote"),
               rlmm=w.rlmm, clock=w.clock)  # fmt: skip
    try:
        w2.rlm.run_expiration(w2.tp)  # deletes the dangling upload
        w2.rlm.run_copy(w2.tp)
        mds = w2.rlmm.list_remote_log_segments(w2.tp)
        assert [m.state for m in mds] == [S.COPY_SEGMENT_FINISHED] * 3
        assert remote_objects(tmp_path) == expected_objects(w2)  # no orphan
        w2.clock.now = T0 + HOUR
        w2.log.delete_old_segments()
        assert w2.remote_bytes(0, w2.log.local_log_start_offset) + w2.local_bytes() == before
    finally:
        w2.close()


def test_crash_in_the_middle_of_a_delete_converges_after_restart(tmp_path) -> None:
    w = World(tmp_path, topic_config=config(local_retention_ms=0))
    w.fill_segments(4)
    w.rlm.run_copy(w.tp)
    md = w.rlmm.list_remote_log_segments(w.tp)[0]
    # the broker marked DELETE_SEGMENT_STARTED and removed the indexes object, then died
    w.rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, T0, None, S.DELETE_SEGMENT_STARTED, 1
        )
    )
    Path(w.base_rsm.object_path(md, ".indexes")).unlink()
    w.rlm.close()
    w2 = World(tmp_path, logs=w.logs, rsm=w.base_rsm, rlmm=w.rlmm, clock=w.clock)
    try:
        w2.rlm.run_expiration(w2.tp)
        mds = w2.rlmm.list_remote_log_segments(w2.tp)
        assert md.remote_log_segment_id not in {m.remote_log_segment_id for m in mds}
        assert [m.state for m in mds] == [S.COPY_SEGMENT_FINISHED] * 2
        assert remote_objects(tmp_path) == expected_objects(w2)
    finally:
        w2.close()


# ---------------------------------------------------------------------------------- read faults


def test_remote_error_during_read_is_a_clear_storage_error(tmp_path) -> None:
    w = World(tmp_path, partitions=2, topic_config=config(local_retention_ms=0))
    try:
        for tp in w.tps:
            w.fill_segments(3, tp=tp)
        w.copy_all()
        w.rsm.fail(EventType.FETCH_INDEXES)
        with pytest.raises(RemoteStorageError, match="injected FETCH_INDEXES"):
            w.rlm.read(RemoteStorageFetchInfo(w.tp, 0, 100, True))
        # nothing was cached by the failed read: the next one works
        assert w.rlm.read(RemoteStorageFetchInfo(w.tp, 0, 100, True)).records
        w.rsm.fail(EventType.FETCH_SEGMENT)
        with pytest.raises(RemoteStorageError, match="injected FETCH_SEGMENT"):
            w.rlm.read(RemoteStorageFetchInfo(w.tp, 0, 100, True))
        m = w.rlm.metrics.partition(w.tp)
        assert m.fetch_errors._value.get() == 2
    finally:
        w.close()


def test_remote_object_deleted_behind_our_back(tmp_path) -> None:
    w = World(tmp_path, partitions=2, topic_config=config(local_retention_ms=0))
    try:
        for tp in w.tps:
            w.fill_segments(3, tp=tp)
        w.copy_all()
        gone = w.rlmm.list_remote_log_segments(w.tps[1])[0]
        Path(w.base_rsm.object_path(gone, ".log")).unlink()
        results = w.rlm.read_many([RemoteStorageFetchInfo(tp, 0, 500, True) for tp in w.tps])
        assert results[0].error is None and results[0].info is not None
        assert results[0].info.records
        assert isinstance(results[1].error, RemoteResourceNotFoundError)
        assert ".log" in str(results[1].error)
        # cold cache and the indexes object gone too
        Path(w.base_rsm.object_path(gone, ".indexes")).unlink()
        w.cache.remove(gone.remote_log_segment_id.id)
        with pytest.raises(RemoteResourceNotFoundError, match="indexes"):
            w.rlm.read(RemoteStorageFetchInfo(w.tps[1], 0, 500, True))
    finally:
        w.close()


def test_corrupt_remote_data_is_never_returned(tmp_path) -> None:
    w = World(tmp_path, topic_config=config(local_retention_ms=0))
    try:
        w.fill_segments(3)
        w.rlm.run_copy(w.tp)
        md = w.rlmm.list_remote_log_segments(w.tp)[0]
        path = Path(w.base_rsm.object_path(md, ".log"))
        data = bytearray(path.read_bytes())
        data[100] ^= 0xFF  # inside the first batch's records: only the CRC notices
        path.write_bytes(bytes(data))
        with pytest.raises(RemoteStorageError, match="CRC"):
            w.rlm.read(RemoteStorageFetchInfo(w.tp, 0, 10_000, True))
    finally:
        w.close()


def test_slow_remote_read_times_out_without_blocking_the_others(tmp_path) -> None:
    w, rsm = faulty_world(tmp_path, partitions=2)
    gate = threading.Event()
    barrier = threading.Barrier(2, timeout=30)
    try:
        for tp in w.tps:
            w.fill_segments(3, tp=tp)
        w.copy_all()
        for tp in w.tps:  # warm the index cache
            w.rlm.read(RemoteStorageFetchInfo(tp, 0, 100, True))

        # reads that cannot finish before the gate opens (30 s at most): read_many answers
        # at its deadline instead of waiting for them
        def held() -> None:
            if not gate.wait(30):
                raise RemoteStorageError("the gate never opened")

        rsm.before_read = held
        t0 = time.monotonic()
        results = w.rlm.read_many(
            [RemoteStorageFetchInfo(tp, 0, 100, True) for tp in w.tps], timeout_ms=100
        )
        assert time.monotonic() - t0 >= 0.09  # it did wait for the deadline
        assert not gate.is_set()
        assert all(isinstance(r.error, RequestTimedOut) for r in results)
        assert all(r.error is not None and r.error.retriable for r in results)
        gate.set()
        deadline = time.monotonic() + 30
        while rsm.reads_in_progress:  # the abandoned reads finish
            assert time.monotonic() < deadline
            time.sleep(0.01)

        # in parallel: each read waits at a barrier until the other one is in progress too
        # (one after the other, the first would wait there until read_many's deadline)
        rsm.before_read = barrier.wait
        results = w.rlm.read_many(
            [RemoteStorageFetchInfo(tp, 0, 100, True) for tp in w.tps], timeout_ms=20_000
        )
        assert [r.error for r in results] == [None, None]
        assert all(r.info is not None and r.info.records for r in results)
    finally:
        gate.set()
        barrier.abort()
        w.close()


def test_fetch_quota_throttles_remote_reads(tmp_path) -> None:
    w = World(
        tmp_path,
        topic_config=config(local_retention_ms=0),
        rlm_config=RemoteLogManagerConfig(remote_log_manager_fetch_max_bytes_per_second=100),
    )
    try:
        w.fill_segments(3)
        w.rlm.run_copy(w.tp)
        fi = RemoteStorageFetchInfo(w.tp, 0, 10_000, True)
        first = w.rlm.read_many([fi])[0]
        assert first.info is not None and len(first.info.records) > 100
        assert w.rlm.is_remote_fetch_quota_exceeded()
        second = w.rlm.read_many([fi])[0]
        assert second.throttled and second.info is not None and second.info.records == b""
    finally:
        w.close()


# ---------------------------------------------------------------------------------- index cache


@pytest.mark.parametrize("corruption", ["partial-entry", "offsets-out-of-order", "garbage-txn"])
def test_corrupted_index_cache_files_are_fetched_again(tmp_path, corruption) -> None:
    w = World(tmp_path, topic_config=config(local_retention_ms=0, index_interval_bytes=100))
    try:
        w.fill_segments(3)
        w.rlm.run_copy(w.tp)
        md = w.rlmm.list_remote_log_segments(w.tp)[0]
        expected = w.rlm.read(RemoteStorageFetchInfo(w.tp, md.end_offset, 10_000, True)).records
        cache_dir = tmp_path / "logs" / DIR_NAME
        prefix = file_name_prefix(md)
        w.cache.close()
        index = cache_dir / f"{prefix}.index"
        data = bytearray(index.read_bytes())
        assert len(data) >= 24, "need a few index entries"
        if corruption == "partial-entry":
            index.write_bytes(bytes(data[:-3]))
        elif corruption == "offsets-out-of-order":
            data[8:16] = data[0:8]  # entry 1 == entry 0: not increasing
            index.write_bytes(bytes(data))
        else:
            (cache_dir / f"{prefix}.txnindex").write_bytes(b"\x00" * 7)
        w.rlm.index_cache = w.cache = RemoteIndexCache(w.rsm, cache_dir, 1 << 20)
        w.rsm.clear()
        info = w.rlm.read(RemoteStorageFetchInfo(w.tp, md.end_offset, 10_000, True))
        assert info.records == expected
        assert [e.type for e in w.rsm.events] == [EventType.FETCH_INDEXES, EventType.FETCH_SEGMENT]
    finally:
        w.close()


def test_bad_cached_positions_are_detected_and_refetched(tmp_path) -> None:
    """An index whose entries are well-formed but point to the wrong bytes (bit rot in a
    position): the read notices that the data there is no batch, drops the entry and retries
    with fresh indexes -- the client still gets the right data."""
    w = World(tmp_path, topic_config=config(local_retention_ms=0, index_interval_bytes=100))
    try:
        w.fill_segments(3)
        w.rlm.run_copy(w.tp)
        md = w.rlmm.list_remote_log_segments(w.tp)[0]
        fi = RemoteStorageFetchInfo(w.tp, md.end_offset, 10_000, True)
        expected = w.rlm.read(fi).records
        w.cache.close()
        index = tmp_path / "logs" / DIR_NAME / f"{file_name_prefix(md)}.index"
        data = bytearray(index.read_bytes())
        last = len(data) - 8
        pos = int.from_bytes(data[last + 4 : last + 8], "big")
        data[last + 4 : last + 8] = (pos + 7).to_bytes(4, "big")  # still increasing
        index.write_bytes(bytes(data))
        w.rlm.index_cache = w.cache = RemoteIndexCache(w.rsm, index.parent, 1 << 20)
        assert w.rlm.read(fi).records == expected
        assert next(iter_headers(expected)).last_offset >= md.end_offset
    finally:
        w.close()


def test_concurrent_cold_reads_fetch_indexes_once(tmp_path) -> None:
    w, _rsm = faulty_world(tmp_path)
    try:
        w.fill_segments(3)
        w.rlm.run_copy(w.tp)
        w.rsm.clear()
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []

        def reader() -> None:
            barrier.wait()
            try:
                assert w.rlm.read(RemoteStorageFetchInfo(w.tp, 1, 200, True)).records
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=reader) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(w.rsm.events_of(EventType.FETCH_INDEXES)) == 1
        assert len(w.rsm.events_of(EventType.FETCH_SEGMENT)) == 8
    finally:
        w.close()
