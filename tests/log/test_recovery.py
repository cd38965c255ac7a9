"""Opening and recovering logs: the seed's two corruption kinds, index rebuilds, leftovers,
a Kafka-format directory written by hand from kafka-python batches, and 10,000 random
crash points that must recover to exactly the valid prefix."""

from __future__ import annotations

import base64
import os
import random
import shutil
import struct
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.log.time_index import TimestampOffset
from tierlog.records.record_batch import iter_headers, set_base_offset

from .conftest import T0, Clock, build_batch, make_config, read_all

OpenLog = Callable[..., Log]


def fill(log: Log, n: int, *, seed: int = 0, value_size: int = 40, epoch: int = 0) -> None:
    rng = random.Random(seed)
    for i in range(n):
        count = rng.randint(1, 4)
        codec = "gzip" if rng.random() < 0.2 else "none"
        log.append(
            build_batch(
                count,
                timestamp=T0 + i * 10,
                value_size=rng.randint(1, value_size),
                compression=codec,
            ),
            leader_epoch=epoch,
        )


def segment_files(dir: Path, suffix: str = ".log") -> list[Path]:
    return sorted(dir.glob(f"*{suffix}"))


# ---------------------------------------------------------------------- the seed's corruptions


def test_truncated_tail_is_cut(open_log: OpenLog, log_dir: Path) -> None:
    config = make_config(segment_bytes=2000)
    log = open_log(config)
    fill(log, 60)
    data = read_all(log)
    log.close()
    last = segment_files(log_dir)[-1]
    headers = list(iter_headers(last.read_bytes()))
    cut = headers[-1].position + 20
    os.truncate(last, cut)
    log = open_log(config, had_clean_shutdown=False, recovery_point=0)
    assert last.stat().st_size == headers[-1].position
    assert log.log_end_offset == headers[-1].base_offset
    assert read_all(log) == data[: len(data) - headers[-1].size_in_bytes]
    assert log.append(build_batch(1)).first_offset == headers[-1].base_offset


def test_appended_garbage_is_cut(open_log: OpenLog, log_dir: Path) -> None:
    config = make_config(segment_bytes=2000)
    log = open_log(config)
    fill(log, 60)
    data = read_all(log)
    end = log.log_end_offset
    log.close()
    last = segment_files(log_dir)[-1]
    size = last.stat().st_size
    with open(last, "ab") as f:
        f.write(os.urandom(1000))
    log = open_log(config, had_clean_shutdown=False, recovery_point=0)
    assert last.stat().st_size == size
    assert (log.log_end_offset, read_all(log)) == (end, data)


def test_zero_filled_tail_of_a_preallocated_segment(open_log: OpenLog, log_dir: Path) -> None:
    config = make_config(preallocate="true", segment_bytes=100_000)
    log = open_log(config)
    fill(log, 20)
    data = read_all(log)
    end = log.log_end_offset
    # crash: nothing trimmed, indexes left preallocated
    log.flush()
    active = log.active_segment
    assert active.log.file_length() == 100_000
    del log
    log = open_log(config, had_clean_shutdown=False, recovery_point=0)
    assert (log.log_end_offset, read_all(log)) == (end, data)
    assert log.append(build_batch(1)).first_offset == end


def test_corruption_in_a_middle_segment_deletes_later_segments(
    open_log: OpenLog, log_dir: Path
) -> None:
    config = make_config(segment_bytes=1000)
    log = open_log(config)
    fill(log, 80)
    log.close()
    files = segment_files(log_dir)
    assert len(files) > 4
    victim = files[2]
    headers = list(iter_headers(victim.read_bytes()))
    with open(victim, "r+b") as f:
        f.seek(headers[1].position + 40)
        f.write(b"\xff\xfe\xfd")
    log = open_log(config, had_clean_shutdown=False, recovery_point=0)
    assert log.log_end_offset == headers[1].base_offset
    assert segment_files(log_dir) == files[:3]
    assert log.segments.base_offsets() == [int(f.name[:20]) for f in files[:3]]


def test_segments_below_the_recovery_point_are_trusted(open_log: OpenLog, log_dir: Path) -> None:
    config = make_config(segment_bytes=1000)
    log = open_log(config)
    fill(log, 40)
    end = log.log_end_offset
    log.close()
    first = segment_files(log_dir)[0]
    with open(first, "r+b") as f:  # corrupt a record, not a header
        f.seek(100)
        f.write(b"\x00\x00")
    log = open_log(config, had_clean_shutdown=False, recovery_point=end)
    assert log.log_end_offset == end  # not scanned, as in Kafka


def test_clean_shutdown_skips_recovery(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log()
    fill(log, 10)
    end = log.log_end_offset
    log.close()
    log = open_log(had_clean_shutdown=True)
    assert log.recovery_point == end


# ---------------------------------------------------------------------- indexes and leftovers


def test_missing_and_corrupt_indexes_are_rebuilt(open_log: OpenLog, log_dir: Path) -> None:
    config = make_config(segment_bytes=2000, index_interval_bytes=100)
    log = open_log(config)
    fill(log, 60)
    data = read_all(log)
    log.close()
    indexes = {p.name: p.read_bytes() for p in log_dir.glob("*.index")}
    time_indexes = {p.name: p.read_bytes() for p in log_dir.glob("*.timeindex")}
    names = sorted(indexes)
    (log_dir / names[0]).unlink()
    (log_dir / names[1].replace(".index", ".timeindex")).unlink()
    (log_dir / names[2]).write_bytes(b"\x00" * 80)  # zero-filled: fails the sanity check
    log = open_log(config, had_clean_shutdown=True)
    assert read_all(log) == data
    for offset in range(0, log.log_end_offset, 7):
        assert log.read(offset, 1).records
    log.close()
    assert {p.name: p.read_bytes() for p in log_dir.glob("*.index")} == indexes
    assert {p.name: p.read_bytes() for p in log_dir.glob("*.timeindex")} == time_indexes


def test_leftover_files_are_removed(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log()
    fill(log, 5)
    log.close()
    leftovers = [
        "00000000000000000000.log.deleted",
        "00000000000000000003.log.cleaned",
        "00000000000000000003.index.swap",
        "leader-epoch-checkpoint.tmp",
        "00000000000000000099.index",  # orphan: no .log
        "00000000000000000099.timeindex",
    ]
    for name in leftovers:
        (log_dir / name).write_bytes(b"junk")
    log = open_log(had_clean_shutdown=True)
    assert not any((log_dir / name).exists() for name in leftovers)
    assert log.log_end_offset > 0


def test_corrupt_leader_epoch_checkpoint_is_rebuilt(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log(make_config(segment_bytes=1000))
    fill(log, 10)
    log.append(build_batch(2), leader_epoch=3)
    fill(log, 10, seed=1, epoch=3)
    fill(log, 10, seed=2, epoch=5)
    entries = log.leader_epoch_cache.epoch_entries()
    assert len(entries) == 3
    log.close()
    (log_dir / "leader-epoch-checkpoint").write_text("0\n2\nnot an entry\n")
    log = open_log(make_config(segment_bytes=1000), had_clean_shutdown=True)
    assert log.leader_epoch_cache.epoch_entries() == entries


def test_log_start_offset_checkpoint(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log(make_config(segment_bytes=1000))
    fill(log, 30)
    end = log.log_end_offset
    log.close()
    log = open_log(make_config(segment_bytes=1000), had_clean_shutdown=True, log_start_offset=5)
    assert log.log_start_offset == 5
    assert log.read(5, 100).records
    log.close()
    log = open_log(
        make_config(segment_bytes=1000), had_clean_shutdown=True, log_start_offset=end + 10
    )
    assert (log.log_start_offset, log.log_end_offset) == (end + 10, end + 10)
    assert log.segments.base_offsets() == [end + 10]


def test_tiered_log_without_a_start_checkpoint_starts_at_zero(
    open_log: OpenLog, log_dir: Path
) -> None:
    """A tiered log whose local segments start at 60 (the rest deleted once remote) and that
    crashed before its log start offset was ever checkpointed: the local segments say nothing
    of the log start, so it is 0 (Kafka's LogLoader), and tiered storage raises it to the
    earliest remote offset. Taking the first local segment's base would hide the remote part
    from every reader."""
    config = make_config(segment_bytes=1000, remote_storage_enable="true")
    log = open_log(config)
    fill(log, 30)
    log.close()
    first = segment_files(log_dir)[0]
    later = segment_files(log_dir)[1:]
    for f in log_dir.glob(f"{first.stem}.*"):
        f.unlink()  # what local retention does once the segment is remote
    log = open_log(config, had_clean_shutdown=False)
    assert log.log_start_offset == 0
    assert log.local_log_start_offset == int(later[0].stem)
    log.close()
    untiered = open_log(make_config(segment_bytes=1000), had_clean_shutdown=False)
    assert untiered.log_start_offset == int(later[0].stem)


# ---------------------------------------------------------------------- a Kafka-format directory


def kafka_index_files(batches: list[bytes], base: int, interval: int) -> tuple[bytes, bytes]:
    """The .index and .timeindex Kafka writes for these batches (one append per batch):
    an entry when more than ``interval`` bytes were appended since the last one, and a
    final time index entry for the max timestamp when the segment is rolled or closed."""
    index = bytearray()
    time_index = bytearray()
    position = 0
    since = 0
    max_ts, offset_of_max = -1, base
    last_time_entry = -1

    def time_entry(ts: int, offset: int) -> None:
        nonlocal last_time_entry
        if ts > last_time_entry:
            time_index.extend(struct.pack(">qi", ts, offset - base))
            last_time_entry = ts

    for batch in batches:
        h = next(iter_headers(batch))
        if h.max_timestamp > max_ts:
            max_ts, offset_of_max = h.max_timestamp, h.last_offset
        if since > interval:
            index.extend(struct.pack(">ii", h.last_offset - base, position))
            time_entry(max_ts, offset_of_max)
            since = 0
        since += len(batch)
        position += len(batch)
    time_entry(max_ts, offset_of_max)
    return bytes(index), bytes(time_index)


def write_kafka_dir(
    dir: Path, *, with_indexes: bool, interval: int
) -> tuple[list[bytes], uuid.UUID]:
    """A partition directory as a Kafka broker leaves it, built from kafka-python batches:
    two segments (epochs 0 and 1), leader-epoch-checkpoint, partition.metadata."""
    dir.mkdir(parents=True)
    topic_id = uuid.uuid4()
    all_batches: list[bytes] = []
    offset = 0
    for base, epoch, n in ((0, 0, 25), (None, 1, 15)):
        seg_base = offset if base is None else base
        batches = []
        for i in range(n):
            b = bytearray(build_batch(3, timestamp=T0 + offset * 10, value_size=30 + i))
            set_base_offset(b, 0, offset)
            struct.pack_into(">i", b, 12, epoch)
            batches.append(bytes(b))
            offset += 3
        (dir / f"{seg_base:020d}.log").write_bytes(b"".join(batches))
        if with_indexes:
            index, time_index = kafka_index_files(batches, seg_base, interval)
            (dir / f"{seg_base:020d}.index").write_bytes(index)
            (dir / f"{seg_base:020d}.timeindex").write_bytes(time_index)
        all_batches += batches
    (dir / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n1 75\n")
    tid = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    (dir / "partition.metadata").write_text(f"version: 0\ntopic_id: {tid}\n")
    return all_batches, topic_id


@pytest.mark.parametrize("with_indexes", [True, False])
def test_kafka_format_directory_opens_reads_and_recovers(
    tmp_path: Path, with_indexes: bool
) -> None:
    dir = tmp_path / "orders-2"
    config = make_config(index_interval_bytes=300)
    batches, topic_id = write_kafka_dir(dir, with_indexes=with_indexes, interval=300)
    written = {p.name: p.read_bytes() for p in dir.glob("*index")}
    log = Log.open(dir, config, had_clean_shutdown=True, time_ms=Clock())
    assert (log.topic, log.partition, log.topic_id) == ("orders", 2, topic_id)
    assert log.segments.base_offsets() == [0, 75]
    assert log.log_end_offset == 120
    assert read_all(log) == b"".join(batches)
    for offset in range(120):
        assert log.read(offset, 1).records == batches[offset // 3]
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()] == [
        (0, 0),
        (1, 75),
    ]
    assert log.offset_for_timestamp(T0 + 301) == TimestampOffset(T0 + 301, 31)
    assert log.offset_for_timestamp(T0 + 303) == TimestampOffset(T0 + 330, 33)
    log.close()
    if with_indexes:  # our indexes are byte-identical to Kafka's
        assert {p.name: p.read_bytes() for p in dir.glob("*index")} == written

    # crash: garbage after the last batch, unclean restart
    with open(dir / f"{75:020d}.log", "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x78\x00\x00\x01\x00garbage")
    log = Log.open(dir, config, had_clean_shutdown=False, recovery_point=0, time_ms=Clock())
    assert log.log_end_offset == 120
    assert read_all(log) == b"".join(batches)
    log.append(build_batch(1), leader_epoch=2)
    log.close()
    if with_indexes:
        assert (dir / f"{0:020d}.index").read_bytes() == written[f"{0:020d}.index"]


# ---------------------------------------------------------------------- random crash points

CRASH_POINTS = int(os.environ.get("TIERLOG_CRASH_POINTS", "10000"))


def restore(dir: Path, pristine: dict[str, bytes]) -> None:
    """Put back every file recovery changed or deleted (a size check suffices: recovery
    only truncates, rebuilds indexes -- every iteration rebuilds them anyway -- and deletes)."""
    present = {e.name: e.stat().st_size for e in os.scandir(dir)}
    for name in present.keys() - pristine.keys():
        (dir / name).unlink()
    for name, content in pristine.items():
        size = present.get(name)
        if size != len(content):
            # Overwrite in place: truncating to zero first makes ext4 flush on close.
            with open(dir / name, "r+b" if size is not None else "wb") as f:
                f.write(content)
                if size is not None and size > len(content):
                    f.truncate(len(content))


@pytest.fixture
def fast_tmp_path(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs when there is one: the crash loop recreates the segment files
    recovery deleted, and creating a file costs ~0.5 ms on the ext4 of these machines
    (13 us on tmpfs). Recovery itself does not care which file system it runs on."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    dir = Path(tempfile.mkdtemp(prefix="tierlog-crash-", dir=shm))
    try:
        yield dir
    finally:
        shutil.rmtree(dir, ignore_errors=True)


def test_random_crash_points_recover_to_the_valid_prefix(fast_tmp_path: Path) -> None:
    """Truncate a segment at a random byte, or truncate and append garbage (a block the
    inode claims but that was never written), then recover with recovery point 0: the log
    must hold exactly the batches before the damage."""
    dir = fast_tmp_path / "crash-0"
    config: LogConfig = make_config(segment_bytes=1200, index_interval_bytes=150)
    log = Log.open(dir, config, time_ms=Clock())
    fill(log, 50, value_size=60)
    log.close()
    pristine = {p.name: p.read_bytes() for p in dir.iterdir()}
    segments = sorted(n for n in pristine if n.endswith(".log"))
    assert len(segments) >= 4
    # (segment index, position, size, batch bytes) of every batch, in offset order
    layout = []
    for k, name in enumerate(segments):
        data = pristine[name]
        layout += [
            (k, h.position, h.size_in_bytes, data[h.position : h.position + h.size_in_bytes])
            for h in iter_headers(data)
        ]
    total = sum(len(pristine[n]) for n in segments)
    rng = random.Random(20240101)
    started = time.perf_counter()
    for i in range(CRASH_POINTS):
        restore(dir, pristine)
        # a random byte of the whole log (bigger segments are hit more often)
        point = rng.randrange(total + 1)
        k = 0
        while k < len(segments) - 1 and point > len(pristine[segments[k]]):
            point -= len(pristine[segments[k]])
            k += 1
        path = dir / segments[k]
        os.truncate(path, point)
        garbage = rng.random() < 0.5
        if garbage:
            with open(path, "ab") as f:
                f.write(rng.randbytes(rng.randint(1, 300)))
        damaged = point < len(pristine[segments[k]]) or garbage
        expected = b"".join(
            b
            for (s, pos, size, b) in layout
            if s < k or (s == k and pos + size <= point) or (s > k and not damaged)
        )
        log = Log.open(dir, config, had_clean_shutdown=False, recovery_point=0, time_ms=Clock())
        got = read_all(log)
        assert got == expected, f"crash point {i}: segment {k} byte {point} garbage={garbage}"
        del log
    elapsed = time.perf_counter() - started
    print(f"{CRASH_POINTS} crash points in {elapsed:.1f}s")
