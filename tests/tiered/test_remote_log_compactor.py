"""Compacted topics on the remote tier (tierlog; Kafka refuses them): only cleaned segments are
copied, remote segments are compacted again against all later data and swapped in through the
metadata state machine, and an interrupted swap converges. Real Logs, the real log cleaner, a
file:// remote store, the in-memory metadata manager; the tests drive the tasks."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tierlog.errors import RemoteStorageError
from tierlog.log.cleaner import Cleaner
from tierlog.log.log_cleaner_manager import LogCleanerManager
from tierlog.log.offset_map import SkimpyOffsetMap
from tierlog.records.default_records import build_batch, iter_records
from tierlog.tiered import RemoteLogSegmentState
from tierlog.tiered.remote_log_compactor import superseded_segments

from .tiered_harness import HOUR, T0, World, config

S = RemoteLogSegmentState
TP = ("orders", 0)
KEYS = 10


def _world(tmp_path: Path, **overrides: object) -> tuple[World, LogCleanerManager]:
    values: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 2048,
        "min_cleanable_dirty_ratio": "0.01",
        "remote_log_compaction_interval_ms": 0,
        "delete_retention_ms": HOUR,
    }
    values.update(overrides)
    w = World(tmp_path, topic_config=config(**values))
    w.clock.now = T0 + 3 * HOUR  # the records (T0 + i) are older than the default lag (0)
    manager = LogCleanerManager([w.log_dir], lambda: {TP: w.log}, time_ms=w.clock)
    w.rlm._cleaner_coordination = lambda: manager
    return w, manager


def _update(w: World, n: int, start: int, *, tombstones: frozenset[int] = frozenset()) -> None:
    """``n`` single-record batches, key ``k<i % KEYS>``, value ``v<i>`` (None for the keys
    in ``tombstones``), timestamps T0 + i."""
    for i in range(start, start + n):
        k = i % KEYS
        value = None if k in tombstones else f"v{i}".encode() * 8
        w.log.append(build_batch([(T0 + i, f"k{k}".encode(), value)]), leader_epoch=0)
    w.log.update_high_watermark(w.log.log_end_offset)


def _clean(w: World, manager: LogCleanerManager, *, due: bool = True) -> int:
    """One round of the local cleaner (``due``: the log must be dirty enough for one); the
    new first dirty offset."""
    cleanable = manager.grab_filthiest_compacted_log(w.clock())
    if cleanable is None and not due:
        return manager.first_dirty_offset(TP) or 0
    assert cleanable is not None
    end = cleanable.first_dirty_offset
    try:
        end, _ = Cleaner(SkimpyOffsetMap(1 << 20), time_ms=w.clock).do_clean(cleanable, w.clock())
    finally:
        manager.done_cleaning(TP, w.log_dir, end)
    return end


def _finished(w: World) -> list:
    return [m for m in w.rlmm.list_remote_log_segments(w.tp) if m.state == S.COPY_SEGMENT_FINISHED]


def _everything(w: World) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record readable from offset 0: the remote part through
    the RemoteLogManager, then the local part."""
    highest = w.rlm.highest_offset_in_remote_storage(w.tp)
    data = w.remote_bytes(0, highest + 1) if highest >= 0 else b""
    out = [(r.offset, r.key, r.value) for _, recs in iter_records(data) for r in recs]
    local = [(r.offset, r.key, r.value) for _, recs in iter_records(w.local_bytes()) for r in recs]
    return out + [r for r in local if r[0] > highest]


def _latest(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for _, k, v in records:
        assert k is not None
        out[k] = v
    return out


def _expected(n: int, tombstones: frozenset[int] = frozenset()) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for i in range(n):
        k = i % KEYS
        out[f"k{k}".encode()] = None if k in tombstones else f"v{i}".encode() * 8
    return out


def test_only_cleaned_segments_old_enough_are_copied(tmp_path: Path) -> None:
    w, manager = _world(tmp_path, remote_log_compaction_lag_ms=10 * HOUR)
    _update(w, 300, 0)
    w.rlm.run_copy(w.tp)
    assert _finished(w) == []  # never cleaned: nothing is copied
    first_dirty = _clean(w, manager)
    w.rlm.run_copy(w.tp)
    assert _finished(w) == []  # cleaned, but younger than the lag
    w.clock.now += 10 * HOUR
    w.rlm.run_copy(w.tp)
    copied = _finished(w)
    assert copied and max(m.end_offset for m in copied) < first_dirty
    assert manager.cleaning_state(TP) is None  # the copy resumed the cleaner
    # The cleaner leaves what is tiered alone: a second round keeps the remote boundary.
    _update(w, 300, 300)
    highest = w.rlm.highest_offset_in_remote_storage(w.tp)
    _clean(w, manager)
    local_bases = [s.base_offset for s in w.log.segments.values()]
    assert highest + 1 in local_bases
    assert _latest(_everything(w)) == _expected(600)


def test_recompaction_shrinks_remote_and_keeps_every_latest_value(tmp_path: Path) -> None:
    w, manager = _world(tmp_path)
    n = 0
    for _ in range(4):  # updates, clean, copy: remote grows with values later overwritten
        _update(w, 300, n)
        n += 300
        _clean(w, manager)
        w.rlm.run_copy(w.tp)
    before = _finished(w)
    assert len(before) >= 3
    before_bytes = sum(m.segment_size_in_bytes for m in before)
    before_records = _everything(w)
    w.rlm.run_expiration(w.tp)
    assert w.rlm.remote_compaction_passes(w.tp) == 1
    after = _finished(w)
    after_bytes = sum(m.segment_size_in_bytes for m in after)
    assert after_bytes < before_bytes / 2
    # Same offsets covered, nothing left STARTED or being deleted.
    assert min(m.start_offset for m in after) == min(m.start_offset for m in before)
    assert max(m.end_offset for m in after) == max(m.end_offset for m in before)
    assert {m.state for m in w.rlmm.list_remote_log_segments(w.tp)} == {S.COPY_SEGMENT_FINISHED}
    records = _everything(w)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))  # offsets only increase, no record twice
    assert set(records) <= set(before_records)  # nothing new, only fewer
    assert _latest(records) == _expected(n)
    remote = [r for r in records if r[0] <= w.rlm.highest_offset_in_remote_storage(w.tp)]
    assert len({k for _, k, _ in remote}) == len(remote)  # one record per key remotely
    # Nothing changed since: the next run does not pass again.
    w.rlm.run_expiration(w.tp)
    assert w.rlm.remote_compaction_passes(w.tp) == 1


def test_tombstones_stay_delete_retention_then_go_with_every_older_value(tmp_path: Path) -> None:
    w, manager = _world(tmp_path)
    _update(w, 300, 0)
    gone = frozenset({3})
    _update(w, 300, 300, tombstones=gone)
    _clean(w, manager)
    w.rlm.run_copy(w.tp)
    _update(w, 300, 600, tombstones=gone)  # later data, so the tombstones can be tiered
    _clean(w, manager)
    w.rlm.run_copy(w.tp)
    w.rlm.run_expiration(w.tp)
    latest = _latest(_everything(w))
    assert latest[b"k3"] is None  # the tombstone is still readable: within delete.retention.ms
    w.clock.now += 2 * HOUR
    w.rlm.run_expiration(w.tp)  # due: a kept tombstone's delete horizon passed
    highest = w.rlm.highest_offset_in_remote_storage(w.tp)
    remote_keys = {k for o, k, _ in _everything(w) if o <= highest}
    assert b"k3" not in remote_keys  # tombstone and every older value gone from remote
    assert {k: v for k, v in _latest(_everything(w)).items() if v is not None} == {
        k: v for k, v in _expected(900, gone).items() if v is not None
    }


def test_a_swap_interrupted_after_the_new_segment_finished_converges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, manager = _world(tmp_path)
    n = 0
    for _ in range(3):
        _update(w, 300, n)
        n += 300
        _clean(w, manager)
        w.rlm.run_copy(w.tp)
    old = {m.remote_log_segment_id.id for m in _finished(w)}

    def fail(*_args: object) -> None:
        raise RemoteStorageError("crash before the old segments go")

    with monkeypatch.context() as m:
        m.setattr(w.rlm, "_delete_remote_log_segment", fail)
        w.rlm.run_expiration(w.tp)
    both = _finished(w)
    new = [x for x in both if x.remote_log_segment_id.id not in old]
    assert new and len(both) > len(new)  # old and new finished side by side
    records = _everything(w)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert _latest(records) == _expected(n)
    stale = superseded_segments(both, lambda x: w.rlm._served_at_start(w.tp, x))
    assert {x.remote_log_segment_id.id for x in stale} <= old and stale
    w.rlm.run_expiration(w.tp)  # the next run deletes the superseded ones
    left = w.rlmm.list_remote_log_segments(w.tp)
    assert {x.state for x in left} == {S.COPY_SEGMENT_FINISHED}
    ids = {x.remote_log_segment_id.id for x in left}
    assert not ids & {x.remote_log_segment_id.id for x in stale}
    spans = sorted((x.start_offset, x.end_offset) for x in left)
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))  # no overlap
    assert _latest(_everything(w)) == _expected(n)


def test_a_pass_waits_for_the_dirty_ratio_of_newly_tiered_bytes(tmp_path: Path) -> None:
    w, manager = _world(tmp_path, min_cleanable_dirty_ratio="0.5")
    n = 0
    expected: dict[bytes, bytes | None] = {}

    def tier_round(records: int) -> None:
        """``records`` new keys, then the updates of KEYS keys that make the log dirty
        enough for a local clean; the cleaned segments are copied."""
        nonlocal n
        for i in range(n, n + records):
            w.log.append(build_batch([(T0 + i, b"u%d" % i, b"x" * 40)]), leader_epoch=0)
            expected[b"u%d" % i] = b"x" * 40
        n += records
        _update(w, 300, n)
        expected.update({f"k{i % KEYS}".encode(): f"v{i}".encode() * 8 for i in range(n, n + 300)})
        n += 300
        w.log.update_high_watermark(w.log.log_end_offset)
        _clean(w, manager, due=False)
        w.rlm.run_copy(w.tp)

    tier_round(600)
    w.rlm.run_expiration(w.tp)
    assert w.rlm.remote_compaction_passes(w.tp) == 1  # the first pass since the start
    clean = sum(m.segment_size_in_bytes for m in _finished(w))
    passes, waited = 1, False
    for _ in range(20):
        tier_round(100)
        dirty = sum(m.segment_size_in_bytes for m in _finished(w)) - clean
        due = dirty > 0.5 * (clean + dirty)
        w.rlm.run_expiration(w.tp)
        passes = w.rlm.remote_compaction_passes(w.tp)
        assert passes == (2 if due else 1)  # only once as many new bytes as the ratio says
        waited = waited or (dirty > 0 and not due)
        if passes == 2:
            break
    assert waited and passes == 2
    assert _latest(_everything(w)) == expected
