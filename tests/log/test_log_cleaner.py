"""The log cleaner against a model: the latest record of every key below the cleaned offset,
tombstones gone once their delete horizon passed, offsets increasing, nothing at or past the
first uncleanable offset touched; producer state kept; crash safety of the swap at every file
operation, checked by reloading the directory with the real loader."""

from __future__ import annotations

import pathlib
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import real_parts
from tierlog.errors import InvalidRecord
from tierlog.log import cleaner as cleaner_module
from tierlog.log import offset_map as offset_map_module
from tierlog.log.cleaner import Cleaner, CleanerStats
from tierlog.log.log import Log
from tierlog.log.log_cleaner import CleanerConfig, LogCleaner
from tierlog.log.log_cleaner_manager import (
    CLEANER_OFFSET_CHECKPOINT_FILENAME,
    LogCleanerManager,
    cleanable_offsets,
)
from tierlog.log.log_manager import LogManager
from tierlog.log.offset_map import SkimpyOffsetMap
from tierlog.log.throttler import Throttler
from tierlog.records.default_records import build_batch, read_records
from tierlog.records.record_batch import (
    DELETE_HORIZON_FLAG_MASK,
    RecordBatchHeader,
    iter_headers,
    validate_batch,
)

from .conftest import T0, Clock, make_config

TP = ("my-topic", 0)
DAY = 86_400_000

Rec = tuple[int, bytes | None, bytes | None]  # offset, key, value


@pytest.fixture(autouse=True, params=["c-table", "dict-table"])
def offset_table(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on both paths: the compiled offset table and record rewrite, and
    the pure-Python references (tierlog.log.offset_map.DictTable, cleaner.retained_batch_py)."""
    if request.param == "c-table":
        if not offset_map_module.HAS_OFFSET_MAP_SPEEDUPS:
            # Justified: the suite's second pass (TIERLOG_NO_EXTENSIONS=1) runs without the C
            # table on purpose; tests/records/test_offset_map_speedups.py fails in the first
            # pass if it is missing where a compiler exists.
            pytest.skip(f"{real_parts.BY_DESIGN}the C offset map is not built in this run")
    else:
        monkeypatch.setattr(offset_map_module, "_Table", offset_map_module.DictTable)
        monkeypatch.setattr(cleaner_module, "_rebuild_records", None)
    return str(request.param)


def compact_config(**overrides: object) -> object:
    base = {"cleanup_policy": "compact", "segment_bytes": 2000, "min_cleanable_dirty_ratio": 0.01}
    base.update(overrides)
    return make_config(**base)


def batches(log: Log) -> list[tuple[RecordBatchHeader, bytes]]:
    """Every batch of the log (header with position 0, its bytes), CRC-checked."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30).records
        headers = list(iter_headers(data))
        if not headers:
            break
        for h in headers:
            raw = data[h.position : h.position + h.size_in_bytes]
            out.append((validate_batch(raw), raw))
        offset = headers[-1].next_offset
    return out


def records(log: Log) -> list[Rec]:
    out: list[Rec] = []
    for header, raw in batches(log):
        out += [(r.offset, r.key, r.value) for r in read_records(raw, header)]
    return out


def append(log: Log, items: list[tuple[bytes | None, bytes | None]], ts: int, **kw: object) -> int:
    batch = build_batch([(ts, k, v) for k, v in items], **kw)  # type: ignore[arg-type]
    info = log.append(batch)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def clean_once(log: Log, now: int, offset_map_memory: int = 1 << 20) -> tuple[int, int, int]:
    """One cleaning round as the LogCleaner runs it; (first dirty, first uncleanable, end)."""
    manager = LogCleanerManager([log.dir.parent], lambda: {TP: log}, time_ms=lambda: now)
    cleanable = manager.grab_filthiest_compacted_log(now)
    if cleanable is None:
        return -1, -1, -1
    cleaner = Cleaner(SkimpyOffsetMap(offset_map_memory), time_ms=lambda: now)
    end = cleanable.first_dirty_offset
    try:
        end, _ = cleaner.do_clean(cleanable, now)
    finally:
        manager.done_cleaning(TP, log.dir.parent, end)
    return cleanable.first_dirty_offset, cleanable.first_uncleanable_offset, end


# --------------------------------------------------------------------------- the model


@dataclass
class ModelBatch:
    records: list[Rec]
    horizon: int | None = None


class Model:
    """What the log must hold: Kafka's compaction rules applied to plain lists."""

    def __init__(self) -> None:
        self.batches: list[ModelBatch] = []

    def append(self, first_offset: int, items: list[tuple[bytes | None, bytes | None]]) -> None:
        self.batches.append(
            ModelBatch([(first_offset + i, k, v) for i, (k, v) in enumerate(items)])
        )

    def clean(self, end: int, now: int, retention_ms: int) -> None:
        latest: dict[bytes, int] = {}
        for b in self.batches:
            for offset, key, _ in b.records:
                if offset < end and key is not None:
                    latest[key] = offset
        for b in self.batches:
            kept = []
            for rec in b.records:
                offset, key, value = rec
                if offset >= end:
                    kept.append(rec)
                elif key is None or latest[key] != offset:
                    continue
                elif value is not None or b.horizon is None or now < b.horizon:
                    kept.append(rec)
            if (
                any(v is None for _, _, v in kept)
                and b.horizon is None
                and any(o < end for o, _, _ in b.records)
            ):
                b.horizon = now + retention_ms
            b.records = kept

    def records(self) -> list[Rec]:
        return [r for b in self.batches for r in b.records]


keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"a-much-longer-key-than-16-bytes"])
values = st.one_of(st.none(), st.binary(min_size=1, max_size=30))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.tuples(keys, values), min_size=1, max_size=4)),
        st.tuples(st.just("roll"), st.none()),
        st.tuples(st.just("clean"), st.none()),
        st.tuples(st.just("advance"), st.integers(1, 3 * DAY)),
    ),
    max_size=40,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=ops, codec=st.sampled_from([0, 1, 4]))
def test_cleaner_matches_model(tmp_path_factory: pytest.TempPathFactory, ops, codec) -> None:
    log_dir = tmp_path_factory.mktemp("c") / "my-topic-0"
    clock = Clock()
    log = Log.open(log_dir, compact_config(segment_bytes=600), time_ms=clock)
    model = Model()
    retention = DAY
    try:
        for op, arg in [*ops, ("roll", None), ("clean", None)]:
            if op == "append":
                first = append(log, arg, clock.now, compression_type=codec)
                model.append(first, arg)
            elif op == "roll":
                log.roll()
            elif op == "advance":
                clock.advance(arg)
            else:
                before = batches(log)
                _, uncleanable, end = clean_once(log, clock.now)
                if end < 0:
                    continue
                assert end <= uncleanable
                model.clean(end, clock.now, retention)
                after = batches(log)
                # Nothing at or past the first uncleanable offset is touched.
                assert [raw for h, raw in before if h.base_offset >= uncleanable] == [
                    raw for h, raw in after if h.base_offset >= uncleanable
                ]
            assert records(log) == model.records()
            offsets = [h.base_offset for h, _ in batches(log)]
            assert offsets == sorted(set(offsets))
        # A restart reads the same.
        expected = records(log)
        log.close()
        log = Log.open(log_dir, compact_config(segment_bytes=600), time_ms=clock)
        assert records(log) == expected
    finally:
        log.close()


# --------------------------------------------------------------------------- rules


def test_last_value_of_every_key_and_groups_merge(open_log, clock: Clock) -> None:
    log = open_log(compact_config(segment_bytes=3000))
    for i in range(400):
        append(log, [(b"k%d" % (i % 10), b"v%d" % i)], clock.now)
    log.roll()
    segments_before = log.number_of_segments
    _, _, end = clean_once(log, clock.now)
    assert end == 400
    assert records(log) == [(390 + i, b"k%d" % i, b"v%d" % (390 + i)) for i in range(10)]
    # Groups are made of the sizes before cleaning: the next round merges the small
    # cleaned segments into one, up to segment.bytes.
    append(log, [(b"k0", b"last")], clock.now)
    log.roll()
    clean_once(log, clock.now)
    assert log.number_of_segments == 2 < segments_before
    assert records(log)[-1] == (400, b"k0", b"last")
    assert (log.dir.parent / CLEANER_OFFSET_CHECKPOINT_FILENAME).read_text().splitlines()[
        2
    ] == "my-topic 0 401"


def test_active_segment_and_min_compaction_lag_are_not_cleaned(open_log, clock: Clock) -> None:
    log = open_log(compact_config(min_compaction_lag_ms=60_000))
    for i in range(50):
        append(log, [(b"k", b"%d" % i)], clock.now)
    log.roll()
    for i in range(50, 60):
        append(log, [(b"k", b"%d" % i)], clock.now)
    assert clean_once(log, clock.now)[2] == -1  # everything is younger than the lag
    clock.advance(60_001)
    _, uncleanable, end = clean_once(log, clock.now)
    assert uncleanable == log.active_segment.base_offset == end == 50
    assert records(log) == [(49, b"k", b"49")] + [(i, b"k", b"%d" % i) for i in range(50, 60)]


def test_dirty_ratio_and_max_compaction_lag(open_log, clock: Clock) -> None:
    log = open_log(compact_config(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=DAY))
    for i in range(100):
        append(log, [(b"k%d" % i, b"v")], clock.now)
    log.roll()
    clean_once(log, clock.now)  # first round: all dirty, ratio 1.0
    append(log, [(b"k0", b"new")], clock.now)
    log.roll()
    assert clean_once(log, clock.now)[2] == -1  # dirty ratio far below 0.9
    clock.advance(DAY + 1)
    assert clean_once(log, clock.now)[2] > 0  # max.compaction.lag.ms forces it


def test_tombstone_kept_until_delete_horizon_then_removed(open_log, clock: Clock) -> None:
    log = open_log(compact_config(delete_retention_ms=1000))
    append(log, [(b"a", b"1"), (b"b", b"1")], clock.now)
    append(log, [(b"a", None)], clock.now)
    log.roll()
    clean_once(log, clock.now)
    assert records(log) == [(1, b"b", b"1"), (2, b"a", None)]
    tombstone_batch = next(h for h, _ in batches(log) if h.base_offset == 2)
    assert tombstone_batch.attributes & DELETE_HORIZON_FLAG_MASK
    assert tombstone_batch.base_timestamp == clock.now + 1000
    # Before the horizon a new round keeps it; after, the next round drops it.
    append(log, [(b"c", b"1")], clock.now)
    log.roll()
    clean_once(log, clock.now)
    assert (2, b"a", None) in records(log)
    clock.advance(1000)
    append(log, [(b"c", b"2")], clock.now)
    log.roll()
    clean_once(log, clock.now)
    assert records(log) == [(1, b"b", b"1"), (4, b"c", b"2")]


def test_compact_and_delete_honours_retention(open_log, clock: Clock) -> None:
    log = open_log(compact_config(cleanup_policy="compact,delete", retention_ms=DAY))
    for i in range(60):
        append(log, [(b"k%d" % (i % 3), b"%d" % i)], T0 + i)
    log.roll()
    clean_once(log, clock.now)
    assert len(records(log)) == 3
    clock.advance(2 * DAY)
    append(log, [(b"k9", b"x")], clock.now)
    log.delete_old_segments()
    assert records(log) == [(60, b"k9", b"x")]


def test_producer_state_survives_cleaning(open_log, clock: Clock, log_dir: Path) -> None:
    log = open_log(compact_config())
    pid, epoch = 7, 3
    for seq in range(5):
        batch = build_batch(
            [(clock.now, b"k", b"p%d" % seq)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
        log.append(batch)
    for i in range(10):
        append(log, [(b"k", b"later%d" % i)], clock.now)
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    clean_once(log, clock.now)
    # The producer's last batch is kept, emptied: header only, offsets and sequence intact.
    kept = [h for h, _ in batches(log) if h.producer_id == pid]
    assert [(h.base_offset, h.records_count, h.base_sequence, h.producer_epoch) for h in kept] == [
        (4, 0, 4, epoch)
    ]
    assert records(log) == [(14, b"k", b"later9")]
    log.close()
    log = open_log(compact_config())
    entry = log.producer_state_manager.last_entry(pid)
    assert entry is not None and entry.last_seq == 4 and entry.producer_epoch == epoch
    # A retry of the last batch is still a duplicate.
    retry = build_batch(
        [(clock.now, b"k", b"p4")], producer_id=pid, producer_epoch=epoch, base_sequence=4
    )
    assert log.append(retry).duplicate


def test_offset_map_full_cleans_what_it_mapped(open_log, clock: Clock) -> None:
    log = open_log(compact_config(segment_bytes=1500))
    for i in range(200):
        append(log, [(b"key%03d" % i, b"v")], clock.now)
        append(log, [(b"key%03d" % i, b"w")], clock.now)
    log.roll()
    rounds = 0
    while clean_once(log, clock.now, offset_map_memory=24 * 100)[2] >= 0:
        rounds += 1
        assert rounds < 50
    assert rounds > 1
    assert records(log) == [(2 * i + 1, b"key%03d" % i, b"w") for i in range(200)]


def test_a_fetch_skips_segments_left_with_only_empty_batches(open_log, clock: Clock) -> None:
    """Every segment but the last one superseded: the cleaner leaves each its last batch,
    emptied. A read from the start returns records, not ten fetches of empty batches
    (librdkafka gives up after ten fetches without a record)."""
    log = open_log(compact_config(segment_bytes=1000))  # one group per segment
    for segment in range(12):
        for i in range(10):
            append(log, [(b"k%d" % i, b"%d-%d" % (segment, i))], clock.now)
        log.roll()
    clean_once(log, clock.now)
    assert log.number_of_segments == 13
    assert all(len(batches_of(s)) == 1 for s in log.segments.values()[:11])
    info = log.read(0, 1 << 20)
    headers = list(iter_headers(info.records))
    assert headers[0].base_offset == 110
    assert sum(h.records_count for h in headers) == 10
    assert records(log) == [(110 + i, b"k%d" % i, b"11-%d" % i) for i in range(10)]


def batches_of(segment) -> list[RecordBatchHeader]:
    return list(segment.log.batches_from(0))


def test_keyless_records_are_refused_on_compacted_topics(open_log, clock: Clock) -> None:
    log = open_log(compact_config())
    with pytest.raises(InvalidRecord) as e:
        log.append(build_batch([(clock.now, b"k", b"v"), (clock.now, None, b"v")]))
    assert e.value.record_errors == (
        (1, "Compacted topic cannot accept message without key in topic partition my-topic-0."),
    )
    assert log.log_end_offset == 0


def test_keyless_records_are_accepted_without_compaction(open_log, clock: Clock) -> None:
    log = open_log(make_config())
    log.append(build_batch([(clock.now, None, b"v")]))
    assert log.log_end_offset == 1


def test_reads_run_during_a_clean_and_see_every_latest_value(open_log, clock: Clock, monkeypatch):
    """A reader scans the whole log again and again while rounds of cleaning run; every scan
    sees the latest value of every key, offsets increasing. The cleaner waits inside its swap
    for a scan that started after the swap began: it would wait forever if reads blocked on
    a clean."""
    log = open_log(compact_config(segment_bytes=1500))
    expected: dict[bytes, bytes] = {}
    for i in range(600):
        key, value = b"k%d" % (i % 9), b"%d" % i
        append(log, [(key, value)], clock.now)
        expected[key] = value
        if i % 150 == 149:
            log.roll()
    log.roll()
    swapping = threading.Event()
    read_during_swap = threading.Event()
    stop = threading.Event()
    failures: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            started_during_swap = swapping.is_set()
            seen = records(log)
            offsets = [o for o, _, _ in seen]
            if offsets != sorted(set(offsets)):
                failures.append(f"offsets out of order: {offsets}")
            if {k: v for _, k, v in seen} != expected:
                failures.append(f"a scan saw {seen}")
            if started_during_swap:
                read_during_swap.set()

    original = Log.replace_segments

    def replace_after_a_read(self, new, old):
        swapping.set()
        assert read_during_swap.wait(60), "no read completed while the cleaner was swapping"
        original(self, new, old)

    monkeypatch.setattr(Log, "replace_segments", replace_after_a_read)
    t = threading.Thread(target=reader)
    t.start()
    try:
        clean_once(log, clock.now)
    finally:
        stop.set()
        t.join()
    assert failures == []
    assert len(records(log)) == 9


# --------------------------------------------------------------------------- crash safety


class Crash(BaseException):
    """Stands for the process dying at one file operation."""


@pytest.fixture
def file_ops(monkeypatch) -> Iterator[Callable[..., list[str]]]:
    """``arm(n, log_dir, image)`` makes the n-th rename/unlink raise Crash after copying
    ``log_dir`` to ``image``: the disk as the dying process left it (the cleanup code that
    runs on the exception cannot touch the image). ``arm(None)`` only counts; returns the
    list of operations seen."""
    state: dict[str, object] = {"n": None, "ops": [], "dir": None, "image": None}
    real_replace = pathlib.Path.replace
    real_unlink = pathlib.Path.unlink

    def hit(kind: str, path: pathlib.Path) -> None:
        ops = state["ops"]
        assert isinstance(ops, list)
        ops.append(f"{kind} {path.name}")
        if state["n"] is not None and len(ops) == state["n"]:
            assert isinstance(state["dir"], Path) and isinstance(state["image"], Path)
            shutil.copytree(state["dir"], state["image"])
            raise Crash(ops[-1])

    def replace(self, target):
        hit("rename", self)
        return real_replace(self, target)

    def unlink(self, missing_ok=False):
        hit("unlink", self)
        return real_unlink(self, missing_ok=missing_ok)

    def arm(n: int | None, log_dir: Path | None = None, image: Path | None = None) -> list[str]:
        state["n"] = n
        state["ops"] = []
        state["dir"] = log_dir
        state["image"] = image
        monkeypatch.setattr(pathlib.Path, "replace", replace)
        monkeypatch.setattr(pathlib.Path, "unlink", unlink)
        ops = state["ops"]
        assert isinstance(ops, list)
        return ops

    yield arm
    monkeypatch.undo()


CRASH_CONFIG = {"segment_bytes": 1 << 20}


def _fill_for_crash(log: Log, clock: Clock) -> None:
    """Six small segments: one cleaning group, so one swap replaces them all."""
    for i in range(300):
        append(log, [(b"k%d" % (i % 7), b"%d" % i)], clock.now, compression_type=i % 2)
        if i == 150:
            append(log, [(b"k3", None)], clock.now)
        if i % 50 == 49:
            log.roll()
    log.roll()


def _records_after_reload(log_dir: Path, clock: Clock) -> list[Rec]:
    log = Log.open(log_dir, compact_config(**CRASH_CONFIG), time_ms=clock)
    try:
        return records(log)
    finally:
        log.close()


def test_crash_at_every_file_operation_reads_before_or_after(
    tmp_path: Path, clock: Clock, file_ops
) -> None:
    # The reference run: how many file operations a clean does, and the log after it.
    reference = tmp_path / "ref" / "my-topic-0"
    log = Log.open(reference, compact_config(**CRASH_CONFIG), time_ms=clock)
    _fill_for_crash(log, clock)
    before = records(log)
    ops = file_ops(None)
    clean_once(log, clock.now)
    file_ops(None)
    total = len(ops)
    after = records(log)
    log.close()
    assert after != before and total > 5
    assert any(".swap" in op for op in ops) and sum(".deleted" in op for op in ops) >= 6 * 3

    outcomes = set()
    for n in range(1, total + 1):
        log_dir = tmp_path / f"crash{n}" / "my-topic-0"
        log = Log.open(log_dir, compact_config(**CRASH_CONFIG), time_ms=clock)
        _fill_for_crash(log, clock)
        image = tmp_path / f"image{n}" / "my-topic-0"
        file_ops(n, log_dir, image)
        with pytest.raises(Crash):
            clean_once(log, clock.now)
        file_ops(None)
        log.segments.close()
        # Reload what the process left on disk with the real loader.
        got = _records_after_reload(image, clock)
        assert got in (before, after), f"crash at operation {n} ({ops[n - 1]})"
        outcomes.add("after" if got == after else "before")
        leftovers = [
            p.name for p in image.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")
        ]
        assert leftovers == []
    assert outcomes == {"before", "after"}


def test_crash_while_writing_the_cleaned_segment(tmp_path: Path, clock: Clock, monkeypatch) -> None:
    log_dir = tmp_path / "my-topic-0"
    log = Log.open(log_dir, compact_config(**CRASH_CONFIG), time_ms=clock)
    _fill_for_crash(log, clock)
    before = records(log)

    image = tmp_path / "image" / "my-topic-0"
    real_flush = cleaner_module.SegmentWriter.flush
    flushes = []

    def die(self):
        real_flush(self)
        flushes.append(1)
        if len(flushes) == 1:  # the cleaned segment is written, not swapped
            shutil.copytree(log_dir, image)
            raise Crash("writing")

    monkeypatch.setattr(cleaner_module.SegmentWriter, "flush", die)
    with pytest.raises(Crash):
        clean_once(log, clock.now)
    monkeypatch.undo()
    log.segments.close()
    assert any(p.name.endswith(".log.cleaned") for p in image.iterdir())
    assert _records_after_reload(image, clock) == before
    assert not any(p.name.endswith(".cleaned") for p in image.iterdir())


def test_swap_leftovers_are_completed_by_the_loader(tmp_path: Path, clock: Clock) -> None:
    """The exact files Kafka leaves when it dies after the swap rename: a .log.swap with its
    indexes and the old segments still in place."""
    src = tmp_path / "src" / "my-topic-0"
    log = Log.open(src, compact_config(**CRASH_CONFIG), time_ms=clock)
    _fill_for_crash(log, clock)
    copy = tmp_path / "copy" / "my-topic-0"
    log.flush()
    shutil.copytree(src, copy)
    clean_once(log, clock.now)
    after = records(log)
    first = log.segments.values()[0]
    log.close()
    for suffix in (".log", ".index", ".timeindex"):
        name = f"{first.base_offset:020d}{suffix}"
        shutil.copy(src / name, copy / (name + ".swap"))
    assert _records_after_reload(copy, clock) == after[: len(_records_after_reload(copy, clock))]
    assert not any(p.name.endswith(".swap") for p in copy.iterdir())


# --------------------------------------------------------------------------- threads and wiring


def test_log_cleaner_threads_compact_and_checkpoint(tmp_path: Path, clock: Clock) -> None:
    log = Log.open(tmp_path / "my-topic-0", compact_config(), time_ms=clock)
    for i in range(200):
        append(log, [(b"k%d" % (i % 4), b"%d" % i)], clock.now)
    log.roll()
    cleaner = LogCleaner(
        CleanerConfig(num_threads=2, dedupe_buffer_size=1 << 20, backoff_ms=60_000),
        [tmp_path],
        lambda: {TP: log},
        time_ms=clock,
    )
    cleaner.startup()
    try:
        assert cleaner.await_rounds(2, timeout=60)
        cleaner.wakeup()
        assert cleaner.await_rounds(3, timeout=60)
    finally:
        cleaner.shutdown()
    assert [r[1] for r in records(log)] == [b"k0", b"k1", b"k2", b"k3"]
    assert cleaner.cleaner_manager.all_cleaner_checkpoints() == {TP: 200}
    log.close()


def test_cleaner_metrics_have_kafka_names(tmp_path: Path, clock: Clock) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from tierlog.log.cleaner_metrics import register_cleaner_metrics

    log = Log.open(tmp_path / "my-topic-0", compact_config(), time_ms=clock)
    for i in range(200):
        append(log, [(b"k%d" % (i % 4), b"%d" % i)], clock.now)
    log.roll()
    cleaner = LogCleaner(
        CleanerConfig(num_threads=1, dedupe_buffer_size=1 << 20, backoff_ms=60_000),
        [tmp_path],
        lambda: {TP: log},
        time_ms=clock,
    )
    registry = CollectorRegistry()
    running: list[LogCleaner] = []
    register_cleaner_metrics(registry, lambda: running[0] if running else None)
    assert b"LogCleaner" not in generate_latest(registry)  # no cleaner: no series
    running.append(cleaner)
    cleaner.startup()
    try:
        assert cleaner.await_rounds(1, timeout=60)
    finally:
        cleaner.shutdown()
    # The last look for work found the log clean; the metric is the last look's (Kafka's).
    for i in range(200):
        append(log, [(b"k%d" % (i % 4), b"%d" % i)], clock.now)
    log.roll()
    manager = cleaner.cleaner_manager
    grabbed = manager.grab_filthiest_compacted_log()
    assert grabbed is not None
    manager.done_cleaning(TP, tmp_path, grabbed.first_dirty_offset)
    manager.mark_partition_uncleanable(TP)
    clock.now += 5000
    values = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    p, m = "kafka_log_LogCleaner_", "kafka_log_LogCleanerManager_"
    # 200 records on 4 keys: the map held 4 of its slots; 4 of 200 records were kept.
    assert 0 < values[p + "cleaner_recopy_percent"] < 10
    assert values[p + "max_buffer_utilization_percent"] == 0  # 4 of 43,690 slots
    assert values[p + "max_clean_time_secs"] >= 0
    assert values[p + "DeadThreadCount"] == 0
    assert values[m + "max_dirty_percent"] == int(100 * grabbed.cleanable_ratio) > 90
    assert values[m + "time_since_last_run_ms"] == 5000
    labels = f'{{logDirectory="{tmp_path}"}}'
    assert values[m + "uncleanable_partitions_count" + labels] == 1
    assert values[m + "uncleanable_bytes" + labels] == log.segments.size_in_bytes()
    log.close()


def test_log_manager_runs_the_cleaner_and_aborts_it_on_delete(tmp_path: Path) -> None:
    lm = LogManager(
        [tmp_path / "logs"],
        make_config(),
        cleaner_config=CleanerConfig(dedupe_buffer_size=1 << 20, backoff_ms=60_000),
    )
    lm.startup()
    try:
        assert lm.cleaner is not None
        lm.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": "2000"})
        lg = lm.get_log("t", 0)
        assert lg is not None
        for i in range(200):
            lg.append(build_batch([(T0, b"k%d" % (i % 3), b"%d" % i)]))
        lg.roll()
        lg.update_high_watermark(lg.log_end_offset)
        rounds = lm.cleaner.rounds
        lm.cleaner.wakeup()
        assert lm.cleaner.await_rounds(rounds + 1, timeout=60)
        assert len(records(lg)) == 3
        lm.delete_topic("t")
    finally:
        lm.shutdown()


def test_throttler_sleeps_to_the_rate() -> None:
    now = [0.0]
    slept: list[float] = []
    throttler = Throttler(
        1000.0,
        check_interval_ms=100,
        sleep=lambda s: slept.append(s),
        monotonic=lambda: now[0],
    )
    now[0] = 0.2
    throttler.maybe_throttle(1000)  # 1000 bytes in 0.2 s at 1000 B/s: 0.8 s too fast
    assert slept == [pytest.approx(0.8)]


def test_cleanable_offsets_reset_an_invalid_checkpoint(open_log, clock: Clock) -> None:
    log = open_log(compact_config())
    for i in range(20):
        append(log, [(b"k", b"%d" % i)], clock.now)
    log.roll()
    offsets = cleanable_offsets(log, 10_000, clock.now)
    assert offsets.first_dirty_offset == 0 and offsets.force_update_checkpoint
    assert CleanerStats().bytes_read == 0


@pytest.mark.slow
def test_a_million_updates_of_100_keys_compact_to_100_plus_the_dirty_ratio(
    tmp_path: Path, clock: Clock
) -> None:
    """1,000,000 updates of 100 keys, appended while the cleaner threads run (Kafka's
    default min.cleanable.dirty.ratio 0.5, 1 MiB segments): once the cleaner has nothing
    left to do, the cleaned part holds one record per key and the rest is what the dirty
    ratio (or the active segment) leaves uncleaned."""
    ratio = 0.5
    log = Log.open(
        tmp_path / "my-topic-0",
        compact_config(segment_bytes=1 << 20, min_cleanable_dirty_ratio=ratio),
        time_ms=clock,
    )
    cleaner = LogCleaner(
        CleanerConfig(num_threads=1, dedupe_buffer_size=1 << 20, backoff_ms=50),
        [tmp_path],
        lambda: {TP: log},
        time_ms=clock,
    )
    latest: dict[bytes, bytes] = {}
    cleaner.startup()
    try:
        for j in range(1000):
            items = [
                (b"key-%03d" % (i % 100), b"update-%08d" % (j * 1000 + i)) for i in range(1000)
            ]
            append(log, items, clock.now)  # type: ignore[arg-type]
            latest.update(items)
        # Stable: two whole rounds after the last append found nothing (the checkpoint
        # did not move between them).
        manager = cleaner.cleaner_manager
        before: int | None = -1
        while True:
            assert cleaner.await_rounds(cleaner.rounds + 2, timeout=120)
            now = manager.first_dirty_offset(TP)
            if now == before:
                break
            before = now
    finally:
        cleaner.shutdown()
    assert log.log_end_offset == 1_000_000
    first_dirty = manager.first_dirty_offset(TP)
    assert first_dirty is not None
    recs = records(log)
    clean = [r for r in recs if r[0] < first_dirty]
    dirty = [r for r in recs if r[0] >= first_dirty]
    assert len(clean) == len({k for _, k, _ in clean}) <= 100  # one record per key
    # What stays dirty is below the ratio (or the active segment, never cleaned).
    dirty_bytes = sum(s.size for s in log.segments.values() if s.base_offset >= first_dirty)
    active = log.active_segment
    assert dirty_bytes <= ratio * log.segments.size_in_bytes() or (
        first_dirty >= active.base_offset
    )
    assert len(recs) <= 100 + len(dirty) and len(recs) < 1_000_000 * 0.1
    assert {k: v for _, k, v in recs} == latest
    size = log.segments.size_in_bytes()
    print(f"1M updates of 100 keys: {len(recs)} records left ({len(clean)} cleaned, "
          f"{len(dirty)} dirty from {first_dirty}), {size} bytes")  # fmt: skip
    log.close()
