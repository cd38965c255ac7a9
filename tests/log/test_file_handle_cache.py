"""The bounded set of open segment files: more segment files than descriptors, read and written
correctly; busy handles never closed under a reader; deleted files readable until released."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import real_parts
from tierlog.errors import CorruptIndexError
from tierlog.log import file_handle_cache as fhc
from tierlog.log.file_records import FileRecords
from tierlog.log.offset_index import OffsetIndex
from tierlog.log.time_index import TimeIndex

from .conftest import build_batch


def open_fds() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


@pytest.fixture
def small_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[fhc.FileHandleCache]:
    """A process cache of 8 descriptors for the test (every file opened in it registers)."""
    cache = fhc.FileHandleCache(8)
    monkeypatch.setattr(fhc, "_default", cache)
    yield cache


def test_many_files_stay_within_the_budget_and_read_back(
    small_cache: fhc.FileHandleCache, tmp_path: Path
) -> None:
    before = open_fds()
    files = []
    batches = []
    for i in range(60):
        records = FileRecords(tmp_path / f"{i:020d}.log")
        batch = build_batch(3, base_offset=i * 3)
        records.append(batch)
        files.append(records)
        batches.append(batch)
        assert len(small_cache) <= 8
        assert open_fds() - before <= 8
    assert small_cache.evictions >= 52
    # Every file reads back its own bytes, reopened from its path when it was closed.
    for records, batch in zip(files, batches, strict=True):
        assert records.read(0, len(batch)) == batch
        assert [h.base_offset for h in records.batches_from(0)] == [build_offset(batch)]
        assert open_fds() - before <= 8
    # Appends to a closed-and-reopened file land after the existing bytes.
    more = build_batch(2, base_offset=3)
    files[0].append(more)
    assert files[0].read(0, 1 << 20) == batches[0] + more
    for records in files:
        records.close()
    assert len(small_cache) == 0
    assert open_fds() == before


def build_offset(batch: bytes) -> int:
    return int.from_bytes(batch[:8], "big")


def test_indexes_are_mapped_lazily_and_unmapped_past_the_budget(
    small_cache: fhc.FileHandleCache, tmp_path: Path
) -> None:
    before = open_fds()
    indexes: list[OffsetIndex | TimeIndex] = []
    for i in range(20):
        base = i * 100
        oi = OffsetIndex(tmp_path / f"{base:020d}.index", base, 4096)
        ti = TimeIndex(tmp_path / f"{base:020d}.timeindex", base, 4096)
        for k in range(1, 10):
            oi.append(base + k, k * 100)
            ti.maybe_append(1000 + k, base + k)
        indexes += [oi, ti]
        assert open_fds() - before <= 8
    for i, idx in enumerate(indexes):
        base = (i // 2) * 100
        if isinstance(idx, OffsetIndex):
            got = idx.lookup(base + 5)
            assert (got.offset, got.position) == (base + 5, 500)
        else:
            found = idx.lookup(1005)
            assert (found.timestamp, found.offset) == (1005, base + 5)
        assert open_fds() - before <= 8
    # Flushing an index whose dirty mapping was dropped fsyncs the file instead.
    for idx in indexes:
        idx.flush()
        idx.close()
    assert open_fds() == before
    reopened = OffsetIndex(tmp_path / f"{0:020d}.index", 0, 4096)
    assert reopened.entries == 9
    assert reopened.lookup(7).position == 700
    reopened.close()


def test_a_deleted_file_stays_readable_after_its_descriptor_was_evicted(
    small_cache: fhc.FileHandleCache, tmp_path: Path
) -> None:
    path = tmp_path / "0.log"
    records = FileRecords(path)
    batch = build_batch(3)
    records.append(batch)
    others = [FileRecords(tmp_path / f"{i}.other") for i in range(1, 20)]
    assert records.fd == -1  # evicted by the others
    assert records.delete_if_exists()  # opened again before the unlink, then kept
    assert not path.exists()
    fd = records.fd
    assert fd >= 0
    more = [FileRecords(tmp_path / f"{i}.more") for i in range(20, 40)]
    assert records.read(0, len(batch)) == batch  # never evicted since
    del records
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)  # the finalizer closed it
    for r in others + more:
        r.close()


def test_a_busy_descriptor_is_never_closed_under_its_reader(
    small_cache: fhc.FileHandleCache, tmp_path: Path
) -> None:
    """Readers scan files (small buffers: many reads per scan) while another thread opens
    files past the budget: every read returns the file's own bytes, never another file's
    through a descriptor number closed and reused under it."""
    files = []
    for i in range(24):
        r = FileRecords(tmp_path / f"{i:020d}.log")
        for k in range(20):
            r.append(build_batch(2, base_offset=i * 1000 + 2 * k))
        files.append(r)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(n: int) -> None:
        try:
            while not stop.is_set():
                for i in range(n, len(files), 3):
                    got = [h.base_offset for h in files[i].batches_from(0, buffer_size=128)]
                    assert got == [i * 1000 + 2 * k for k in range(20)], (i, got)
                    pos = files[i].search_for_offset_from_position(i * 1000 + 21, 0)
                    assert pos is not None and pos.offset == i * 1000 + 21
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for _ in range(200):
        if stop.is_set():
            break
        extra = FileRecords(tmp_path / "churn.log")
        extra.close()
    stop.set()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert small_cache.evictions > 0
    for r in files:
        r.close()


def test_the_budget_can_be_lowered_at_runtime(
    small_cache: fhc.FileHandleCache, tmp_path: Path
) -> None:
    files = [FileRecords(tmp_path / f"{i}.log") for i in range(8)]
    assert len(small_cache) == 8
    small_cache.set_max_open(3)
    assert len(small_cache) == 3
    assert sum(f.fd >= 0 for f in files) == 3
    with pytest.raises(ValueError):
        small_cache.set_max_open(0)
    for f in files:
        f.close()


def test_an_index_append_on_a_full_disk_is_an_error_not_a_crash(tmp_path: Path) -> None:
    """A preallocated index is sparse: storing an entry into a hole of a full tmpfs through
    the mapping raises SIGBUS and kills the process. The append allocates blocks first, so a
    full disk is an OSError(ENOSPC) for that append and the index stays usable."""
    with real_parts.tmpfs(tmp_path / "disk", "1m") as disk:
        index = OffsetIndex(disk / "0.index", 0, 512 * 1024)  # sparse: no blocks yet
        filler = disk / "filler"
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(bytes(64 * 1024))
                f.flush()
        with pytest.raises(OSError) as raised:
            for offset in range(1, 60_000):
                index.append(offset, offset * 10)
        assert raised.value.errno == errno.ENOSPC
        written = index.entries
        assert index.lookup(written).offset == written  # what was appended reads back
        filler.unlink()
        index.append(written + 1, 1)  # room again: appends go on
        index.close()


def test_an_untrimmed_index_left_by_a_crash_is_read_only_up_to_its_first_hole(
    tmp_path: Path,
) -> None:
    """A crash leaves the active segment's index preallocated and sparse. On a full tmpfs even
    a read of a hole through a mapping is SIGBUS: opening it reads only the blocks before the
    first hole, and the sanity check then rejects the zeros (the loader rebuilds it)."""
    with real_parts.tmpfs(tmp_path / "disk", "1m") as disk:
        path = disk / "0.index"
        index = OffsetIndex(path, 0, 512 * 1024)
        for offset in range(1, 4):
            index.append(offset, offset * 10)
        index.flush()
        del index  # a crash: never trimmed
        gc.collect()
        assert path.stat().st_size == 512 * 1024
        with open(disk / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(bytes(64 * 1024))
                f.flush()
        reopened = OffsetIndex(path, 0, 512 * 1024)
        assert reopened.entries == 4096 // 8  # the allocated page, not the 65,536 slots
        with pytest.raises(CorruptIndexError):
            reopened.sanity_check()
        assert reopened.entry(2).offset == 3  # what was written reads back
        reopened.close_handler()


def test_a_finalizer_run_by_the_gc_inside_an_eviction_never_waits(
    small_cache: fhc.FileHandleCache, tmp_path: Path
) -> None:
    """The garbage collector runs finalizers at any allocation, also on a thread that holds
    the cache's lock in the middle of an eviction: the finalizer must not wait for it (a
    deadlock). It closes the descriptor; the cache drops the entry at its next eviction."""
    records = FileRecords(tmp_path / "0.log")
    fd = records.fd
    done = threading.Event()

    def gc_during_eviction() -> None:
        with small_cache._lock:  # the eviction's hold of the cache lock
            records._finalizer()  # what the collector would run here
        done.set()

    t = threading.Thread(target=gc_during_eviction, daemon=True)
    t.start()
    t.join(30)
    assert done.is_set(), "the finalizer waited for the cache lock"
    with pytest.raises(OSError):
        os.fstat(fd)
    assert len(small_cache) == 1  # left behind, already closed
    small_cache.set_max_open(1)
    others = [FileRecords(tmp_path / f"{i}.log") for i in range(1, 3)]
    assert len(small_cache) == 1  # the closed entry went first
    for r in others:
        r.close()
