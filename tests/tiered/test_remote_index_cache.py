"""RemoteIndexCache: one remote request per miss, files on disk, LRU by bytes, eviction safe
against readers, single flight, startup cleanup and checks, stale entries."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tierlog.errors import RemoteStorageError
from tierlog.log.offset_index import OffsetIndex
from tierlog.tiered.remote_index_cache import RemoteIndexCache, file_name_prefix
from tierlog.tiered.remote_log_segment_metadata import RemoteLogSegmentMetadata
from tierlog.tiered.storage import (
    EventType,
    IndexType,
    RecordingRemoteStorageManager,
    RemoteStorageManager,
)

from .tiered_harness import World, config


class GatedRSM(RecordingRemoteStorageManager):
    """Blocks fetch_indexes until released; optionally fails it or corrupts its result."""

    def __init__(self, delegate: RemoteStorageManager) -> None:
        super().__init__(delegate)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.error: BaseException | None = None
        self.corrupt = False

    def fetch_indexes(self, metadata, index_types=tuple(IndexType)):
        self.entered.set()
        self.gate.wait(10)
        result = super().fetch_indexes(metadata, index_types)
        if self.error is not None:
            raise self.error
        if self.corrupt:
            result[IndexType.OFFSET] = result[IndexType.OFFSET][:-3]
        return result


@pytest.fixture(scope="module")
def segments(tmp_path_factory) -> tuple[World, list[RemoteLogSegmentMetadata]]:
    root = tmp_path_factory.mktemp("ric")
    w = World(root, topic_config=config(index_interval_bytes=100, segment_bytes=2048))
    w.fill_segments(6)
    w.rlm.run_copy(w.tp)
    yield w, w.rlmm.list_remote_log_segments(w.tp)
    w.close()


def cache_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_miss_fetches_all_indexes_in_one_request_and_keeps_them_on_disk(segments, tmp_path):
    w, mds = segments
    rsm = RecordingRemoteStorageManager(w.base_rsm)
    cache = RemoteIndexCache(rsm, tmp_path / "c", 1 << 20)
    md = mds[1]
    local = w.log.segments.get(md.start_offset)
    assert local is not None
    for offset in range(md.start_offset, md.end_offset + 1):
        assert cache.lookup_offset(md, offset) == local.offset_index.lookup(offset).position
    fetches = rsm.events_of(EventType.FETCH_INDEXES)
    assert len(fetches) == 1
    assert fetches[0].index_types == {IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION}
    assert len(rsm.events) == 1
    prefix = file_name_prefix(md)
    assert prefix.startswith(f"{md.start_offset}_")
    assert cache_files(tmp_path / "c") == sorted(
        [f"{prefix}.index", f"{prefix}.timeindex", f"{prefix}.txnindex"]
    )
    assert (tmp_path / "c" / f"{prefix}.index").read_bytes() == local.offset_index.path.read_bytes()
    assert cache.size_bytes == sum(p.stat().st_size for p in (tmp_path / "c").iterdir())
    assert cache.hits > 0 and cache.misses == 1
    cache.close()
    # a restart serves from disk, without remote requests
    rsm.clear()
    again = RemoteIndexCache(rsm, tmp_path / "c", 1 << 20)
    assert (
        again.lookup_offset(md, md.end_offset) == local.offset_index.lookup(md.end_offset).position
    )
    assert rsm.events == []
    again.close()


def test_lookup_timestamp(segments, tmp_path):
    w, mds = segments
    cache = RemoteIndexCache(w.base_rsm, tmp_path / "c", 1 << 20)
    md = mds[2]
    local = w.log.segments.get(md.start_offset)
    assert local is not None
    entries = local.time_index.entries_list()
    assert entries
    ts, off = entries[0].timestamp, entries[0].offset
    found = cache.lookup_timestamp(md, ts, md.start_offset)
    assert found is not None
    assert found == local.offset_index.lookup(off)
    # a start offset later than the time index entry wins
    found = cache.lookup_timestamp(md, ts, md.end_offset)
    assert found == local.offset_index.lookup(md.end_offset)
    assert cache.lookup_timestamp(md, entries[-1].timestamp + 1, 0) is None
    cache.close()


def test_lru_eviction_by_bytes(segments, tmp_path):
    w, mds = segments
    rsm = RecordingRemoteStorageManager(w.base_rsm)
    probe = RemoteIndexCache(rsm, tmp_path / "probe", 1 << 20)
    sizes = []
    for md in mds[:3]:
        with probe.get_index_entry(md) as e:
            sizes.append(e.size_bytes)
    probe.close()
    cache = RemoteIndexCache(rsm, tmp_path / "c", sizes[0] + sizes[1] + 1)
    cache.lookup_offset(mds[0], 0)
    cache.lookup_offset(mds[1], mds[1].start_offset)
    cache.lookup_offset(mds[0], 0)  # 0 is now the most recently used
    cache.lookup_offset(mds[2], mds[2].start_offset)  # evicts 1
    ids = [md.remote_log_segment_id.id for md in mds]
    assert ids[0] in cache and ids[2] in cache and ids[1] not in cache
    assert cache.size_bytes <= sizes[0] + sizes[1] + 1
    names = cache_files(tmp_path / "c")
    assert not any(n.startswith(file_name_prefix(mds[1])) for n in names)
    assert not any(n.endswith((".deleted", ".tmp")) for n in names)
    cache.close()


def test_eviction_and_removal_are_safe_for_readers_holding_the_entry(segments, tmp_path):
    w, mds = segments
    cache = RemoteIndexCache(w.base_rsm, tmp_path / "c", 1)  # every new entry evicts the others
    md = mds[1]
    local = w.log.segments.get(md.start_offset)
    assert local is not None
    with cache.get_index_entry(md) as held:
        cache.lookup_offset(mds[2], mds[2].start_offset)  # evicts md's entry
        assert md.remote_log_segment_id.id not in cache
        names = cache_files(tmp_path / "c")
        assert any(n.endswith(".deleted") for n in names)  # renamed, still open
        # the held entry still answers (no use-after-close)
        assert held.lookup_offset(md.end_offset) == local.offset_index.lookup(md.end_offset)
        # a new reader of the same segment downloads it again next to the retired files
        assert cache.lookup_offset(md, md.end_offset) == held.lookup_offset(md.end_offset).position
        cache.remove(md.remote_log_segment_id.id)
        assert held.lookup_offset(md.start_offset).position == 0
    assert not any(n.endswith(".deleted") for n in cache_files(tmp_path / "c"))
    assert not held.offset_index.path.exists()
    cache.close()


def test_concurrent_misses_fetch_once(segments, tmp_path):
    w, mds = segments
    rsm = GatedRSM(w.base_rsm)
    cache = RemoteIndexCache(rsm, tmp_path / "c", 1 << 20)
    md = mds[0]
    results: list[int] = []

    def lookup() -> None:
        results.append(cache.lookup_offset(md, md.end_offset))

    threads = [threading.Thread(target=lookup) for _ in range(6)]
    for t in threads:
        t.start()
    assert rsm.entered.wait(5)
    rsm.gate.set()
    for t in threads:
        t.join()
    assert len(results) == 6 and len(set(results)) == 1
    assert len(rsm.events_of(EventType.FETCH_INDEXES)) == 1
    cache.close()


def test_a_failed_fetch_fails_every_waiter_once_and_caches_nothing(segments, tmp_path):
    w, mds = segments
    rsm = GatedRSM(w.base_rsm)
    rsm.error = RemoteStorageError("injected: S3 503 SlowDown")
    cache = RemoteIndexCache(rsm, tmp_path / "c", 1 << 20)
    errors: list[BaseException] = []

    def lookup() -> None:
        try:
            cache.lookup_offset(mds[0], 0)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=lookup) for _ in range(4)]
    for t in threads:
        t.start()
    assert rsm.entered.wait(5)
    rsm.gate.set()
    for t in threads:
        t.join()
    assert len(errors) == 4 and all(isinstance(e, RemoteStorageError) for e in errors)
    assert len(rsm.events_of(EventType.FETCH_INDEXES)) == 1
    assert len(cache) == 0 and cache_files(tmp_path / "c") == []
    rsm.error = None
    assert cache.lookup_offset(mds[0], 0) == 0
    cache.close()


def test_removal_during_an_in_flight_fetch_leaves_no_stale_entry(segments, tmp_path):
    w, mds = segments
    rsm = GatedRSM(w.base_rsm)
    cache = RemoteIndexCache(rsm, tmp_path / "c", 1 << 20)
    md = mds[3]
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(cache.lookup_offset(md, md.end_offset)))
    t.start()
    assert rsm.entered.wait(5)
    cache.remove(md.remote_log_segment_id.id)  # the segment was deleted remotely meanwhile
    rsm.gate.set()
    t.join()
    assert len(result) == 1  # the reader that started before the removal is served
    assert md.remote_log_segment_id.id not in cache
    assert cache_files(tmp_path / "c") == []
    cache.close()


def test_corrupt_indexes_from_remote_storage_are_not_cached(segments, tmp_path):
    w, mds = segments
    rsm = GatedRSM(w.base_rsm)
    rsm.gate.set()
    rsm.corrupt = True
    cache = RemoteIndexCache(rsm, tmp_path / "c", 1 << 20)
    with pytest.raises(RemoteStorageError, match="corrupt index in remote storage"):
        cache.lookup_offset(mds[0], 0)
    assert cache_files(tmp_path / "c") == [] and len(cache) == 0
    cache.close()


def test_startup_removes_leftovers_and_incomplete_entries(segments, tmp_path):
    w, mds = segments
    d = tmp_path / "c"
    cache = RemoteIndexCache(w.base_rsm, d, 1 << 20)
    for md in mds[:2]:
        cache.lookup_offset(md, md.start_offset)
    cache.close()
    p0, p1 = file_name_prefix(mds[0]), file_name_prefix(mds[1])
    (d / f"{p1}.timeindex").unlink()  # incomplete entry
    (d / f"{p0}.index.tmp").write_bytes(b"half a download")
    (d / f"{p0}.index.3.deleted").write_bytes(b"evicted")
    (d / "unrelated.txt").write_text("not ours")
    rsm = RecordingRemoteStorageManager(w.base_rsm)
    cache = RemoteIndexCache(rsm, d, 1 << 20)
    assert cache_files(d) == sorted(
        [f"{p0}.index", f"{p0}.timeindex", f"{p0}.txnindex", "unrelated.txt"]
    )
    assert mds[0].remote_log_segment_id.id in cache and len(cache) == 1
    cache.lookup_offset(mds[0], 0)
    assert rsm.events == []
    cache.close()


def test_closed_cache_refuses_lookups_and_keeps_files(segments, tmp_path):
    w, mds = segments
    cache = RemoteIndexCache(w.base_rsm, tmp_path / "c", 1 << 20)
    cache.lookup_offset(mds[0], 0)
    cache.close()
    cache.close()
    with pytest.raises(RemoteStorageError, match="closed"):
        cache.lookup_offset(mds[0], 0)
    assert len(cache_files(tmp_path / "c")) == 3


def test_entries_are_read_only_views_of_kafka_index_files(segments, tmp_path):
    w, mds = segments
    cache = RemoteIndexCache(w.base_rsm, tmp_path / "c", 1 << 20)
    md = mds[0]
    with cache.get_index_entry(md) as entry:
        assert isinstance(entry.offset_index, OffsetIndex)
        assert not entry.offset_index.writable
        floor, nxt, _after = entry.position_bounds(md.start_offset)
        assert floor == 0 and (nxt is None or nxt > 0)
        assert entry.aborted_transactions(0, 10**9) == []
    cache.close()
