"""TimeIndex: Kafka's append semantics, oracle lookups, the reserved roll slot, corruption."""

from __future__ import annotations

import bisect
import random
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import CorruptIndexError, IndexOffsetOverflowError, InvalidOffsetError
from tierlog.log.log_file_utils import time_index_file
from tierlog.log.time_index import TimeIndex, TimestampOffset

BASE = 1000


def new_index(d: Path, base: int = BASE, max_entries: int = 30) -> TimeIndex:
    return TimeIndex(time_index_file(d, base), base, max_entries * 12)


def test_empty(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    assert idx.last_entry() == TimestampOffset(-1, BASE)
    assert idx.lookup(10**13) == TimestampOffset(-1, BASE)
    idx.sanity_check()
    idx.close()


def test_maybe_append_only_indexes_larger_timestamps(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    idx.maybe_append(100, BASE + 1)
    idx.maybe_append(100, BASE + 2)  # same timestamp: skipped
    idx.maybe_append(90, BASE + 3)  # smaller timestamp: skipped
    idx.maybe_append(-1, BASE + 4)  # no timestamp: skipped
    assert idx.entries == 1
    idx.maybe_append(150, BASE + 5)
    idx.maybe_append(200, BASE + 5)  # same offset, larger timestamp: appended (Kafka allows it)
    assert idx.entries_list() == [
        TimestampOffset(100, BASE + 1),
        TimestampOffset(150, BASE + 5),
        TimestampOffset(200, BASE + 5),
    ]
    assert idx.last_entry() == TimestampOffset(200, BASE + 5)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(300, BASE + 4)  # offset going backwards is a bug, even if skipped
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(100, BASE + 4)
    with pytest.raises(IndexOffsetOverflowError):
        idx.maybe_append(400, BASE + 2**31)
    assert idx.entries == 3
    idx.close()


def test_no_timestamps_keep_the_index_empty(tmp_path: Path) -> None:
    idx = new_index(tmp_path)
    for i in range(5):
        idx.maybe_append(-1, BASE + i)
    assert idx.entries == 0
    idx.close()


def test_last_slot_is_reserved_for_roll(tmp_path: Path) -> None:
    idx = new_index(tmp_path, max_entries=3)
    assert idx.max_entries == 3
    idx.maybe_append(10, BASE)
    assert not idx.is_full()
    idx.maybe_append(20, BASE + 1)
    assert idx.is_full()  # 2 of 3 slots: the third is reserved
    with pytest.raises(ValueError, match="full"):
        idx.maybe_append(30, BASE + 2)
    idx.maybe_append(30, BASE + 2, skip_full_check=True)  # the roll-time entry
    assert idx.entries == 3
    idx.maybe_append(30, BASE + 2, skip_full_check=True)  # repeated on close: a no-op
    with pytest.raises(ValueError):
        idx.maybe_append(40, BASE + 3, skip_full_check=True)  # no slot at all
    assert idx.entries == 3
    idx.close()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 10**6), unique=True, max_size=40).map(sorted),
    st.lists(st.integers(-5, 10**6 + 5), max_size=30),
)
def test_lookup_matches_bisect(timestamps: list[int], targets: list[int]) -> None:
    offsets = [BASE + 3 * i for i in range(len(timestamps))]
    with tempfile.TemporaryDirectory() as d:
        idx = new_index(Path(d), max_entries=64)
        for ts, o in zip(timestamps, offsets, strict=True):
            idx.maybe_append(ts, o)
        for t in [*targets, *timestamps]:
            i = bisect.bisect_right(timestamps, t) - 1
            expected = (
                TimestampOffset(-1, BASE) if i < 0 else TimestampOffset(timestamps[i], offsets[i])
            )
            assert idx.lookup(t) == expected
        idx.close()


def test_lookup_large_index(tmp_path: Path) -> None:
    rng = random.Random(2)
    n = 2000  # > 682 warm entries
    timestamps = sorted(rng.sample(range(1_700_000_000_000, 1_700_000_000_000 + 50 * n), n))
    idx = new_index(tmp_path, max_entries=n + 1)
    for i, ts in enumerate(timestamps):
        idx.maybe_append(ts, BASE + 2 * i)
    for t in rng.sample(timestamps, 200) + [
        rng.randrange(timestamps[0] - 5, timestamps[-1] + 5) for _ in range(500)
    ]:
        i = bisect.bisect_right(timestamps, t) - 1
        expected = (
            TimestampOffset(-1, BASE) if i < 0 else TimestampOffset(timestamps[i], BASE + 2 * i)
        )
        assert idx.lookup(t) == expected
    idx.close()


def test_truncate_to(tmp_path: Path) -> None:
    for target, kept in [
        (BASE, 0),
        (BASE + 10, 1),  # entry at exactly BASE+10 goes too
        (BASE + 11, 2),
        (BASE + 25, 3),
        (BASE + 1000, 4),
    ]:
        d = tmp_path / str(target)
        d.mkdir()
        idx = new_index(d)
        for i, o in enumerate([BASE + 5, BASE + 10, BASE + 20, BASE + 30]):
            idx.maybe_append(100 * (i + 1), o)
        idx.truncate_to(target)
        assert idx.entries == kept
        expected_last = idx.entry(kept - 1) if kept else TimestampOffset(-1, BASE)
        assert idx.last_entry() == expected_last
        idx.maybe_append(10_000, BASE + 2000)  # appending resumes
        idx.close()


def test_reopen_keeps_entries_and_trims_file(tmp_path: Path) -> None:
    path = time_index_file(tmp_path, BASE)
    idx = TimeIndex(path, BASE, 50 * 12)
    for i in range(7):
        idx.maybe_append(1000 + i, BASE + i)
    idx.close()
    assert path.stat().st_size == 7 * 12
    again = TimeIndex(path, BASE, 50 * 12)
    again.sanity_check(full=True)
    assert again.entries == 7
    assert again.last_entry() == TimestampOffset(1006, BASE + 6)
    assert again.lookup(1003) == TimestampOffset(1003, BASE + 3)
    assert again.resize(50 * 12)
    assert again.last_entry() == TimestampOffset(1006, BASE + 6)
    again.maybe_append(2000, BASE + 100)
    again.close()


def test_golden_bytes_big_endian(tmp_path: Path) -> None:
    path = time_index_file(tmp_path, 7)
    assert path.name == "00000000000000000007.timeindex"
    idx = TimeIndex(path, 7, 4096)
    idx.maybe_append(0x0102030405060708, 9)
    idx.close()
    assert path.read_bytes() == bytes.fromhex("0102030405060708 00000002")


def test_sanity_check(tmp_path: Path) -> None:
    path = time_index_file(tmp_path, 0)
    path.write_bytes(bytes(13))
    idx = TimeIndex(path, 0, 4096)
    with pytest.raises(CorruptIndexError, match="multiple of 12"):
        idx.sanity_check()
    idx.close_handler()

    path.write_bytes(struct.pack(">qiqi", 200, 1, 100, 2))
    idx = TimeIndex(path, 0, 4096)
    with pytest.raises(CorruptIndexError, match="less than the first timestamp"):
        idx.sanity_check()
    idx.close_handler()

    path.write_bytes(struct.pack(">qi", 200, -1))
    idx = TimeIndex(path, 0, 4096)
    with pytest.raises(CorruptIndexError, match="less than the first offset"):
        idx.sanity_check()
    idx.close_handler()

    path.write_bytes(struct.pack(">qiqiqi", 100, 1, 300, 2, 200, 3))
    idx = TimeIndex(path, 0, 4096)
    idx.sanity_check()
    with pytest.raises(CorruptIndexError, match="entry 2"):
        idx.sanity_check(full=True)
    idx.close_handler()


def test_sanity_check_catches_untrimmed_file_after_crash(tmp_path: Path) -> None:
    path = time_index_file(tmp_path, 0)
    idx = TimeIndex(path, 0, 10 * 12)
    idx.maybe_append(1_700_000_000_000, 3)
    idx.flush()
    idx.close_handler()
    reopened = TimeIndex(path, 0, 10 * 12)
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check()
    reopened.close_handler()
