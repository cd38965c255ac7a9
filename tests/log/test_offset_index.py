"""OffsetIndex: oracle lookups, truncation, reopening, fullness, corruption, byte format."""

from __future__ import annotations

import bisect
import random
import struct
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import CorruptIndexError, IndexOffsetOverflowError, InvalidOffsetError
from tierlog.log.log_file_utils import offset_index_file
from tierlog.log.offset_index import OffsetIndex, OffsetPosition

BASE = 45


def new_index(tmp_path: Path, base: int = BASE, max_index_size: int = 30 * 8) -> OffsetIndex:
    return OffsetIndex(offset_index_file(tmp_path, base), base, max_index_size)


def oracle_lookup(offsets: list[int], positions: list[int], target: int) -> OffsetPosition:
    i = bisect.bisect_right(offsets, target) - 1
    return OffsetPosition(BASE, 0) if i < 0 else OffsetPosition(offsets[i], positions[i])


def random_entries(rng: random.Random, n: int) -> tuple[list[int], list[int]]:
    offsets = sorted(rng.sample(range(BASE, BASE + 20 * n + 1), n))
    positions = sorted(rng.sample(range(0, 4096 * n), n))
    return offsets, positions


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), unique=True, max_size=40).map(sorted),
    st.lists(st.integers(BASE - 10, BASE + 10_010), max_size=30),
)
def test_lookup_matches_bisect(relative: list[int], targets: list[int]) -> None:
    offsets = [BASE + r for r in relative]
    positions = [r * 7 for r in relative]
    with tempfile.TemporaryDirectory() as d:
        idx = new_index(Path(d), max_index_size=64 * 8)
        for o, p in zip(offsets, positions, strict=True):
            idx.append(o, p)
        assert idx.entries == len(offsets)
        assert idx.last_offset == (offsets[-1] if offsets else BASE)
        for t in [*targets, *offsets]:
            assert idx.lookup(t) == oracle_lookup(offsets, positions, t)
        idx.close()


def test_lookup_large_index_warm_and_cold(tmp_path: Path) -> None:
    rng = random.Random(11)
    n = 3000  # > 1024 warm entries
    offsets, positions = random_entries(rng, n)
    idx = new_index(tmp_path, max_index_size=n * 8)
    for o, p in zip(offsets, positions, strict=True):
        idx.append(o, p)
    assert idx.is_full()
    for t in [BASE - 1, BASE, offsets[-1] + 5, *rng.sample(offsets, 300)] + [
        rng.randrange(BASE, offsets[-1] + 10) for _ in range(700)
    ]:
        assert idx.lookup(t) == oracle_lookup(offsets, positions, t)
    idx.close()


def test_lookup_empty_and_below_first(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    assert idx.lookup(BASE + 100) == OffsetPosition(BASE, 0)
    assert idx.last_offset == BASE
    idx.append(BASE + 10, 100)
    assert idx.lookup(BASE + 9) == OffsetPosition(BASE, 0)
    assert idx.lookup(BASE + 10) == OffsetPosition(BASE + 10, 100)
    assert idx.lookup(10**12) == OffsetPosition(BASE + 10, 100)
    idx.close()


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    for i in range(1, 11):
        idx.append(BASE + i * 10, i * 1000)
    assert idx.fetch_upper_bound_offset(OffsetPosition(BASE, 0), 2500) == OffsetPosition(
        BASE + 30, 3000
    )
    assert idx.fetch_upper_bound_offset(OffsetPosition(BASE + 20, 2000), 1000) == OffsetPosition(
        BASE + 30, 3000
    )
    assert idx.fetch_upper_bound_offset(OffsetPosition(BASE, 0), 1000) == OffsetPosition(
        BASE + 10, 1000
    )
    assert idx.fetch_upper_bound_offset(OffsetPosition(BASE, 0), 10_001) is None
    idx.close()
    (tmp_path / "empty").mkdir()
    empty = new_index(tmp_path / "empty", 7)
    assert empty.fetch_upper_bound_offset(OffsetPosition(7, 0), 1) is None
    empty.close()


def test_entry(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    idx.append(BASE + 1, 10)
    idx.append(BASE + 2, 20)
    assert idx.entry(1) == OffsetPosition(BASE + 2, 20)
    assert idx.entries_list() == [OffsetPosition(BASE + 1, 10), OffsetPosition(BASE + 2, 20)]
    with pytest.raises(IndexError):
        idx.entry(2)
    with pytest.raises(IndexError):
        idx.entry(-1)
    idx.close()


def test_append_rejects_non_increasing_offsets(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    idx.append(BASE + 5, 0)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 5, 100)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 4, 100)
    assert idx.entries == 1
    idx.close()


def test_append_rejects_offsets_that_do_not_fit(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    assert idx.can_append_offset(BASE + 2**31 - 1)
    assert not idx.can_append_offset(BASE + 2**31)
    assert not idx.can_append_offset(BASE - 1)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(BASE + 2**31, 0)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(BASE - 1, 0)
    with pytest.raises(IndexOffsetOverflowError):
        idx.relative_offset(BASE - 1)
    assert idx.relative_offset(BASE + 2**31 - 1) == 2**31 - 1
    idx.append(BASE + 2**31 - 1, 0)
    assert idx.lookup(BASE + 2**31 + 100) == OffsetPosition(BASE + 2**31 - 1, 0)
    idx.close()


def test_append_rejects_positions_that_do_not_fit(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    with pytest.raises(ValueError, match="position"):
        idx.append(BASE + 1, -1)
    with pytest.raises(ValueError, match="position"):
        idx.append(BASE + 1, 2**31)
    assert idx.entries == 0
    idx.close()


def test_full_index(tmp_path: Path) -> None:
    idx = new_index(tmp_path, max_index_size=3 * 8 + 5)  # rounded down to 3 entries
    assert idx.max_entries == 3
    assert idx.file_length == 24
    for i in range(3):
        assert not idx.is_full()
        idx.append(BASE + i, i)
    assert idx.is_full()
    with pytest.raises(ValueError, match="full"):
        idx.append(BASE + 10, 10)
    idx.close()


def test_invalid_max_index_size_leaves_no_file(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 0)
    with pytest.raises(ValueError):
        OffsetIndex(path, 0)  # -1: only valid for existing files
    assert not path.exists()
    with pytest.raises(FileNotFoundError):
        OffsetIndex(path, 0, 4096, writable=False)


def test_truncate_to_matches_oracle(tmp_path: Path) -> None:
    rng = random.Random(5)
    offsets, positions = random_entries(rng, 25)
    for target in [BASE - 1, BASE, offsets[0], offsets[7], offsets[7] + 1, offsets[-1] + 1]:
        d = tmp_path / str(target)
        d.mkdir()
        idx = new_index(d)
        for o, p in zip(offsets, positions, strict=True):
            idx.append(o, p)
        idx.truncate_to(target)
        kept = [o for o in offsets if o < target]
        assert [e.offset for e in idx.entries_list()] == kept
        assert idx.last_offset == (kept[-1] if kept else BASE)
        # Appending continues after the truncation point.
        idx.append(max(target, BASE + 10_000), 10**6)
        idx.close()


def test_truncate_and_reset(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    for i in range(5):
        idx.append(BASE + i, i * 10)
    idx.truncate()
    assert idx.entries == 0
    assert idx.last_offset == BASE
    idx.append(BASE + 3, 30)
    idx.trim_to_valid_size()
    assert idx.file_length == 8
    assert idx.is_full()
    idx.reset()
    assert idx.entries == 0
    assert idx.file_length == 30 * 8
    assert not idx.is_full()
    idx.close()


def test_reopen_keeps_entries_and_trims_file(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, BASE)
    idx = OffsetIndex(path, BASE, 100 * 8)
    assert path.stat().st_size == 800  # preallocated
    for i in range(10):
        idx.append(BASE + i * 3, i * 100)
    idx.flush()
    idx.close()
    assert path.stat().st_size == 80  # trimmed on close
    assert idx.is_closed
    with pytest.raises(ValueError, match="closed"):
        idx.lookup(BASE)

    again = OffsetIndex(path, BASE, 100 * 8)
    again.sanity_check(full=True)
    assert again.entries == 10
    assert again.last_offset == BASE + 27
    assert again.lookup(BASE + 13) == OffsetPosition(BASE + 12, 400)
    assert again.is_full()  # trimmed: the segment grows it back when it becomes active
    assert again.resize(100 * 8)
    assert not again.resize(100 * 8 + 3)  # same size after rounding
    again.append(BASE + 30, 1000)
    assert again.entries == 11
    again.close()

    read_only = OffsetIndex(path, BASE, writable=False)
    assert read_only.entries == 11
    assert read_only.lookup(BASE + 100) == OffsetPosition(BASE + 30, 1000)
    with pytest.raises(ValueError):
        read_only.append(BASE + 40, 2000)
    read_only.close()
    assert path.stat().st_size == 88


def test_golden_bytes_big_endian(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 100)
    assert path.name == "00000000000000000100.index"
    idx = OffsetIndex(path, 100, 4096)
    idx.append(105, 4096)
    idx.append(100 + 0x01020304, 0x7FFFFFFF)
    idx.close()
    assert path.read_bytes() == bytes.fromhex("00000005 00001000 01020304 7fffffff")


def test_reads_a_kafka_written_file(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 1000)
    path.write_bytes(struct.pack(">iiiiii", 0, 0, 17, 4150, 35, 8302))
    idx = OffsetIndex(path, 1000, 4096)
    assert idx.entries == 3
    assert idx.lookup(1020) == OffsetPosition(1017, 4150)
    assert idx.lookup(1035) == OffsetPosition(1035, 8302)
    idx.sanity_check(full=True)
    idx.close()


def test_sanity_check_wrong_length(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 0)
    path.write_bytes(bytes(range(1, 10)))  # 9 bytes
    idx = OffsetIndex(path, 0, 4096)
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        idx.sanity_check()
    idx.close_handler()


def test_sanity_check_offsets_below_base(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 50)
    path.write_bytes(struct.pack(">ii", -3, 0))
    idx = OffsetIndex(path, 50, 4096)
    with pytest.raises(CorruptIndexError, match="less than the base offset"):
        idx.sanity_check()
    idx.close_handler()


def test_sanity_check_non_increasing_offsets(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 0)
    path.write_bytes(struct.pack(">iiii", 5, 0, 3, 100))
    idx = OffsetIndex(path, 0, 4096)
    with pytest.raises(CorruptIndexError, match="not larger than the first"):
        idx.sanity_check()
    idx.close_handler()

    path.write_bytes(struct.pack(">iiiiiiii", 1, 0, 5, 10, 3, 20, 7, 30))
    idx = OffsetIndex(path, 0, 4096)
    idx.sanity_check()  # the O(1) checks cannot see a dip in the middle
    with pytest.raises(CorruptIndexError, match="entry 2"):
        idx.sanity_check(full=True)
    idx.close_handler()


def test_sanity_check_catches_untrimmed_file_after_crash(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 0)
    idx = OffsetIndex(path, 0, 10 * 8)
    idx.append(3, 100)
    idx.append(8, 200)
    idx.flush()
    idx.close_handler()  # "crash": the preallocated zero tail is never trimmed
    reopened = OffsetIndex(path, 0, 10 * 8)
    assert reopened.entries == 10
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check()
    reopened.close_handler()


def test_rename_and_delete(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    idx.append(BASE + 1, 1)
    target = tmp_path / (idx.path.name + ".deleted")
    idx.rename_to(target)
    assert idx.path == target
    assert target.exists()
    assert idx.lookup(BASE + 1) == OffsetPosition(BASE + 1, 1)  # mapping still valid
    assert idx.delete_if_exists()
    assert not target.exists()
    assert not idx.delete_if_exists()


def test_lookups_concurrent_with_appends(tmp_path: Path) -> None:
    idx = new_index(tmp_path, max_index_size=6000 * 8)
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        rng = random.Random(threading.get_ident())
        while not stop.is_set():
            t = BASE + rng.randrange(0, 12_000)
            found = idx.lookup(t)
            # Offsets are BASE + 2i at position 10i: any answer must be a real entry <= t.
            if (
                found.offset > t
                or (found.offset - BASE) % 2
                or (found.offset != BASE and found.position != (found.offset - BASE) // 2 * 10)
            ):
                errors.append(f"{t} -> {found}")

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads:
        th.start()
    try:
        for i in range(1, 6000):
            idx.append(BASE + 2 * i, 10 * i)
    finally:
        stop.set()
        for th in threads:
            th.join()
    assert errors == []
    idx.close()
