"""FileRecords, LogSegment and LogSegments against oracles built from kafka-python batches."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.errors import LogSegmentOffsetOverflowError
from tierlog.log import file_records
from tierlog.log.file_records import FileRecords
from tierlog.log.log_segment import LogSegment, RollParams
from tierlog.log.log_segments import LogSegments
from tierlog.records.record_batch import iter_headers, read_header, set_base_offset

from .conftest import T0, Clock, build_batch, make_config

INT32_MAX = 2**31 - 1


def patched(batch: bytes, base_offset: int) -> bytearray:
    buf = bytearray(batch)
    set_base_offset(buf, 0, base_offset)
    return buf


def fill(
    segment: LogSegment, sizes: list[int], *, ts: int = T0, start: int | None = None
) -> list[tuple[int, int, int, int]]:
    """Append one batch per entry of ``sizes`` (record counts); returns (base, last,
    position, size) per batch."""
    layout = []
    offset = segment.base_offset if start is None else start
    for i, count in enumerate(sizes):
        batch = patched(build_batch(count, timestamp=ts + i * 10, value_size=20), offset)
        last = offset + count - 1
        position = segment.size
        segment.append(last, ts + i * 10 + count - 1, last, batch)
        layout.append((offset, last, position, len(batch)))
        offset = last + 1
    return layout


@pytest.fixture
def clock() -> Clock:
    return Clock()


def open_segment(
    tmp_path: Path, base: int = 0, clock: Clock | None = None, **overrides: object
) -> LogSegment:
    return LogSegment.open(tmp_path, base, make_config(**overrides), time_ms=clock or Clock())


# ---------------------------------------------------------------------- FileRecords


def test_file_records_append_read_scan(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    batches = [patched(build_batch(n), base) for n, base in ((2, 0), (3, 2), (1, 5))]
    for b in batches:
        assert records.append(b) == len(b)
    data = b"".join(batches)
    assert records.size_in_bytes() == len(data)
    assert records.read(0, 10_000) == data
    assert records.read(5, 10) == data[5:15]
    assert records.read(len(data), 10) == b""
    headers = list(records.batches_from(0))
    assert [h.base_offset for h in headers] == [0, 2, 5]
    assert [h.position for h in headers] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    # tiny buffers exercise the chunk boundaries
    assert [h.base_offset for h in records.batches_from(0, buffer_size=61)] == [0, 2, 5]
    assert records.search_for_offset_from_position(3, 0) == (
        4,
        headers[1].position,
        len(batches[1]),
    )
    assert records.search_for_offset_from_position(5, 0) == (
        5,
        headers[2].position,
        len(batches[2]),
    )
    assert records.search_for_offset_from_position(6, 0) is None
    records.close()


def test_file_records_append_with_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = FileRecords(tmp_path / "0.log")
    assert records.append(memoryview(b"0123456789")[4:], b"ab") == 8
    assert records.append(b"", b"") == 0
    # short writes: the rest goes out with plain pwrites until everything is written
    calls: list[int] = []
    real_pwrite = os.pwrite

    def short_pwritev(fd: int, buffers: list[bytes], offset: int) -> int:
        return real_pwrite(fd, bytes(buffers[0])[:1], offset)

    def short_pwrite(fd: int, data: bytes, offset: int) -> int:
        calls.append(len(data))
        return real_pwrite(fd, bytes(data)[:3], offset)

    monkeypatch.setattr(file_records.os, "pwritev", short_pwritev)
    monkeypatch.setattr(file_records.os, "pwrite", short_pwrite)
    assert records.append(b"wxyz", b"PQ") == 6
    assert calls == [5, 2]
    monkeypatch.undo()
    assert records.size_in_bytes() == 14
    assert records.read(0, 100) == b"ab456789PQwxyz"
    records.close()


def test_file_records_truncate_and_partial_tail(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    b1, b2 = build_batch(2), patched(build_batch(2), 2)
    records.append(b1)
    records.append(b2[:30])  # a torn write
    assert [h.base_offset for h in records.batches_from(0)] == [0]
    assert records.truncate_to(len(b1)) == 30
    with pytest.raises(ValueError):
        records.truncate_to(len(b1) + 1)
    records.close()
    assert (tmp_path / "0.log").stat().st_size == len(b1)


def test_file_records_preallocate_and_trim(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log", init_file_size=1 << 20, preallocate=True)
    assert records.size_in_bytes() == 0
    assert records.file_length() == 1 << 20
    b = build_batch(3)
    records.append(b)
    assert [h.base_offset for h in records.batches_from(0)] == [0]
    records.trim()
    assert records.file_length() == len(b)
    records.close()


def test_file_records_unlinked_file_stays_readable_until_released(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    records = FileRecords(path)
    b = build_batch(3)
    records.append(b)
    fd = records.fd
    assert records.delete_if_exists()
    assert not path.exists()
    assert records.read(0, len(b)) == b  # still readable through the open descriptor
    assert not records.delete_if_exists()
    del records
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)  # the finalizer closed it


# ---------------------------------------------------------------------- LogSegment


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=40),
    interval=st.sampled_from([0, 50, 200, 1000, 4096]),
)
def test_read_at_every_offset_returns_its_batch(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], interval: int
) -> None:
    tmp = tmp_path_factory.mktemp("seg")
    segment = open_segment(tmp, 100, index_interval_bytes=interval)
    layout = fill(segment, sizes)
    data = segment.log.read(0, segment.size)
    for base, last, position, size in layout:
        for offset in range(base, last + 1):
            info = segment.read(offset, 1 << 20)
            assert info is not None
            assert info.records == data[position:]
            found = segment.translate_offset(offset)
            assert found == (last, position, size)
    assert segment.read(layout[-1][1] + 1, 1000) is None
    assert segment.read_next_offset() == layout[-1][1] + 1
    # Kafka's index rule: an entry when more than `interval` bytes were appended since the last
    expected = []
    since = 0
    for _base, last, position, size in layout:
        if since > interval:
            expected.append((last, position))
            since = 0
        since += size
    assert [(e.offset, e.position) for e in segment.offset_index.entries_list()] == expected
    segment.close()


def test_read_size_limits(tmp_path: Path) -> None:
    segment = open_segment(tmp_path)
    layout = fill(segment, [5, 5, 5])
    size0 = layout[0][3]
    # max_size cuts into the second batch: partial trailing batch
    info = segment.read(0, size0 + 10)
    assert info is not None and len(info.records) == size0 + 10
    assert not info.first_entry_incomplete
    # smaller than the first batch: min_one_message returns it whole
    info = segment.read(0, 10, min_one_message=True)
    assert info is not None and len(info.records) == size0
    info = segment.read(0, 10)
    assert info is not None and len(info.records) == 10 and info.first_entry_incomplete
    info = segment.read(0, 0)
    assert info is not None and info.records == b""
    # max_position stops at a batch boundary
    info = segment.read(0, 1 << 20, max_position=layout[2][2])
    assert info is not None and len(info.records) == layout[2][2]
    with pytest.raises(ValueError):
        segment.read(0, -1)
    segment.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=30),
    interval=st.sampled_from([0, 50, 200, 1000, 4096]),
    first=st.integers(0, 29),
    max_size=st.integers(1, 6000),
    min_one=st.booleans(),
    bound=st.booleans(),
)
def test_a_whole_batches_read_ends_at_the_last_batch_it_holds_whole(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    interval: int,
    first: int,
    max_size: int,
    min_one: bool,
    bound: bool,
) -> None:
    """A follower's read: the same bytes as a plain read, cut after its last whole batch,
    whatever the index looks like (the cut walks headers from an index entry)."""
    segment = open_segment(tmp_path_factory.mktemp("seg"), 100, index_interval_bytes=interval)
    layout = fill(segment, sizes)
    first %= len(layout)
    base, _last, start, _size = layout[first]
    max_position = layout[-1][2] if bound and first < len(layout) - 1 else None
    plain = segment.read(base, max_size, max_position, min_one)
    whole = segment.read(base, max_size, max_position, min_one, whole_batches=True)
    assert plain is not None and whole is not None
    ends = [
        p + n - start for _b, _l, p, n in layout[first:] if max_position is None or p < max_position
    ]
    fitting = [e for e in ends if e <= len(plain.records)]
    if fitting:
        assert whole.records == plain.records[: fitting[-1]]
    else:  # not even the first batch whole (no min_one_message): left as it was read
        assert whole.records == plain.records and not min_one
    assert whole.first_entry_incomplete == plain.first_entry_incomplete
    segment.close()


def test_recover_rebuilds_identical_indexes_and_cuts_garbage(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, index_interval_bytes=100)
    layout = fill(segment, [3] * 30)
    entries = segment.offset_index.entries_list()
    time_entries = segment.time_index.entries_list()
    assert len(entries) > 5
    size = segment.size
    segment.log.append(b"\x00\x01garbage" * 20)
    assert segment.recover() == 180
    assert segment.size == size
    assert segment.offset_index.entries_list() == entries
    # recovery also appends the final max-timestamp entry
    assert segment.time_index.entries_list()[: len(time_entries)] == time_entries
    assert segment.max_timestamp_so_far == T0 + 29 * 10 + 2
    assert segment.read_next_offset() == layout[-1][1] + 1
    segment.close()


@pytest.mark.parametrize("cut", [1, 30, 61, 100])
def test_recover_truncated_tail(tmp_path: Path, cut: int) -> None:
    segment = open_segment(tmp_path)
    layout = fill(segment, [4] * 5)
    last_base, _, last_position, last_size = layout[-1]
    segment.log.truncate_to(last_position + min(cut, last_size - 1))
    assert segment.recover() == min(cut, last_size - 1)
    assert segment.size == last_position
    assert segment.read_next_offset() == last_base
    segment.close()


def test_recover_rejects_crc_mismatch(tmp_path: Path) -> None:
    segment = open_segment(tmp_path)
    layout = fill(segment, [4] * 5)
    position = layout[2][2]
    path = segment.log.path
    segment.close()
    with open(path, "r+b") as f:
        f.seek(position + 70)
        byte = f.read(1)
        f.seek(position + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    segment = LogSegment.open(tmp_path, 0, make_config(), file_already_exists=True)
    assert segment.recover() > 0
    assert segment.size == position
    segment.close()


def test_truncate_to(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, index_interval_bytes=0)
    layout = fill(segment, [3] * 10)
    base, _last, position, _ = layout[4]
    removed = segment.truncate_to(base + 1)  # mid-batch: the whole batch goes
    assert removed == layout[-1][2] + layout[-1][3] - position
    assert segment.size == position
    assert segment.read_next_offset() == base
    assert all(e.offset < base for e in segment.offset_index.entries_list())
    assert segment.max_timestamp_so_far == T0 + 3 * 10 + 2
    assert segment.truncate_to(10_000) == 0
    segment.close()


def test_should_roll(tmp_path: Path, clock: Clock) -> None:
    segment = open_segment(tmp_path, 0, clock, segment_ms=1000)
    fill(segment, [1], ts=T0)

    def params(ts: int, size: int = 10, offset: int = 5, seg_bytes: int = 1 << 20) -> RollParams:
        return RollParams(1000, seg_bytes, ts, offset, size, clock())

    assert not segment.should_roll(params(T0 + 1000))
    assert segment.should_roll(params(T0 + 1001))  # by the first batch's timestamp
    assert segment.should_roll(params(T0, seg_bytes=segment.size + 5))  # by size
    assert segment.should_roll(params(T0, offset=INT32_MAX + 1))  # relative offset overflow
    assert segment.should_roll(params(T0, offset=-1))
    segment.close()


def test_should_roll_by_creation_time_without_timestamps(tmp_path: Path, clock: Clock) -> None:
    segment = open_segment(tmp_path, 0, clock)
    segment.append(0, -1, -1, build_batch(1, timestamps=[-1]))
    p = RollParams(1000, 1 << 30, -1, 1, 10, clock.now + 1000)
    assert not segment.should_roll(p)
    p = RollParams(1000, 1 << 30, -1, 1, 10, clock.now + 1001)
    assert segment.should_roll(p)
    segment.close()


def test_should_roll_when_index_full(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, segment_index_bytes=24, index_interval_bytes=0)
    offset = 0
    while not segment.should_roll(RollParams(10**12, 1 << 30, T0 + offset, offset, 100, T0)):
        segment.append(offset, T0 + offset, offset, patched(build_batch(1), offset))
        offset += 1
    # 24 bytes: 2 time index entries of 12 bytes, one kept for the entry written at roll, and
    # 3 offset index entries of 8 bytes. The first batch (position 0) gets no entry, the second
    # one in each index: the time index is then full, the offset index is not.
    assert offset == 2
    assert segment.time_index.is_full()
    assert not segment.offset_index.is_full()
    segment.close()


def test_append_offset_overflow_raises(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, 10)
    with pytest.raises(LogSegmentOffsetOverflowError):
        segment.append(10 + INT32_MAX + 1, T0, 10, patched(build_batch(1), 10 + INT32_MAX + 1))
    segment.close()


def test_find_offset_by_timestamp_per_record(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, index_interval_bytes=50)
    records: list[tuple[int, int]] = []  # (offset, timestamp)
    offset = 0
    for i in range(20):
        stamps = [T0 + i * 100 + j * 7 for j in range(5)]
        codec = ["none", "gzip", "zstd", "lz4"][i % 4]
        batch = patched(build_batch(5, timestamps=stamps, compression=codec), offset)
        segment.append(offset + 4, max(stamps), offset + 4, batch)
        records += [(offset + j, ts) for j, ts in enumerate(stamps)]
        offset += 5
    for target in range(T0 - 5, T0 + 2000, 13):
        expected = next(((ts, o) for o, ts in records if ts >= target), None)
        assert segment.find_offset_by_timestamp(target) == expected, target
    # with a starting offset
    assert segment.find_offset_by_timestamp(T0, starting_offset=12) == (T0 + 200 + 14, 12)
    assert segment.offset_of_max_timestamp() == (T0 + 1900 + 28, 99)
    segment.close()


def test_close_reopen_keeps_max_timestamp_and_trims(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, 0, index_interval_bytes=10)
    fill(segment, [2] * 10)
    max_ts = segment.max_timestamp_so_far
    segment.close()
    assert (tmp_path / "00000000000000000000.index").stat().st_size % 8 == 0
    assert (tmp_path / "00000000000000000000.index").stat().st_size < 10 * 1024 * 1024
    segment = LogSegment.open(tmp_path, 0, make_config(), file_already_exists=True)
    segment.sanity_check()
    assert segment.max_timestamp_so_far == max_ts
    assert segment.largest_timestamp == max_ts
    segment.close()


def test_on_become_inactive_trims_preallocated_files(tmp_path: Path) -> None:
    segment = LogSegment.open(tmp_path, 0, make_config(), init_file_size=1 << 20, preallocate=True)
    fill(segment, [2] * 3)
    assert segment.log.file_length() == 1 << 20
    segment.on_become_inactive_segment()
    assert segment.log.file_length() == segment.size
    assert segment.offset_index.file_length == segment.offset_index.length
    segment.close()


def test_delete_keeps_reads_working(tmp_path: Path) -> None:
    segment = open_segment(tmp_path)
    fill(segment, [2] * 3)
    before = segment.read(0, 1 << 20)
    segment.delete_if_exists()
    assert segment.deleted
    assert segment.read(0, 1 << 20) == before
    assert segment.translate_offset(3) is not None


def test_change_file_suffixes(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, 5)
    fill(segment, [1])
    segment.change_file_suffixes("", ".deleted")
    assert segment.has_suffix(".deleted")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000005.index.deleted",
        "00000000000000000005.log.deleted",
        "00000000000000000005.timeindex.deleted",
    ]
    segment.delete_if_exists()
    assert not list(tmp_path.iterdir())


def test_headers_survive_append(tmp_path: Path) -> None:
    segment = open_segment(tmp_path)
    batch = build_batch(3)
    segment.append(2, T0 + 2, 2, batch)
    data = segment.log.read(0, segment.size)
    assert data == batch
    header = read_header(data)
    assert (header.base_offset, header.last_offset, header.records_count) == (0, 2, 3)
    assert [h.base_offset for h in iter_headers(data)] == [0]
    segment.close()


# ---------------------------------------------------------------------- LogSegments


def test_log_segments_navigation(tmp_path: Path) -> None:
    segments = LogSegments()
    with pytest.raises(LookupError):
        _ = segments.active_segment
    created = [open_segment(tmp_path, base) for base in (0, 100, 250)]
    for s in reversed(created):
        segments.add(s)
    assert segments.base_offsets() == [0, 100, 250]
    snapshot = segments.values()
    assert segments.floor_segment(99) is created[0]
    assert segments.floor_segment(100) is created[1]
    assert segments.floor_segment(10**9) is created[2]
    assert segments.higher_segment(100) is created[2]
    assert segments.higher_segment(250) is None
    assert segments.lower_segment(100) is created[0]
    assert segments.active_segment is created[2]
    assert segments.first_segment is created[0]
    assert segments.get(100) is created[1] and segments.get(101) is None
    assert [s.base_offset for s in segments.values_between(120, 251)] == [100, 250]
    assert segments.remove(100) is created[1]
    assert segments.remove(100) is None
    assert segments.base_offsets() == [0, 250]
    assert [s.base_offset for s in snapshot] == [0, 100, 250]  # snapshots are immutable
    assert segments.number_of_segments == 2
    for s in created:
        s.close()


@pytest.mark.parametrize("chunk", [61, 100, 257, 4096])
def test_recover_with_small_read_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Batches straddling the recovery buffer, and batches larger than it."""
    from tierlog.log import log_segment_recovery

    monkeypatch.setattr(log_segment_recovery, "RECOVERY_CHUNK_SIZE", chunk)
    segment = open_segment(tmp_path, index_interval_bytes=100)
    layout = fill(segment, [1, 7, 2, 12, 1, 5] * 4)
    entries = segment.offset_index.entries_list()
    segment.log.append(b"\x00" * 30)
    assert segment.recover() == 30
    assert segment.offset_index.entries_list() == entries
    assert segment.read_next_offset() == layout[-1][1] + 1
    segment.close()
