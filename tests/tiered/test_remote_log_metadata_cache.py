from __future__ import annotations

import gc
import os
import tracemalloc
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tiered.kafka_model import KafkaCacheModel
from tests.tiered.strategies import TP, segment, update
from tierlog.errors import InvalidRemoteStateTransitionError, RemoteResourceNotFoundError
from tierlog.tiered import remote_log_metadata_cache as cache_mod
from tierlog.tiered.remote_log_metadata_cache import EpochState, RemoteLogMetadataCache, _Chunk
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState as S


def finished(cache: RemoteLogMetadataCache, *args, **kwargs):
    md = segment(*args, **kwargs)
    cache.add_copy_in_progress_segment(md)
    cache.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
    return md.create_with_updates(update(md, S.COPY_SEGMENT_FINISHED))


def test_started_segment_is_listed_but_not_readable():
    cache = RemoteLogMetadataCache(TP)
    md = segment(0, 99)
    cache.add_copy_in_progress_segment(md)
    assert cache.remote_log_segment_metadata(0, 50) is None
    assert cache.highest_offset_for_epoch(0) is None
    assert cache.list_remote_log_segments(0) == [md]
    assert cache.list_all() == [md]
    assert cache.remote_log_size() == 1000


def test_finished_segment_is_readable_and_round_trips_every_field():
    cache = RemoteLogMetadataCache(TP)
    md = segment(100, 199, {3: 100, 4: 150}, size=12345, event_ts=5, max_ts=2**40, broker=7)
    cache.add_copy_in_progress_segment(md)
    upd = update(md, S.COPY_SEGMENT_FINISHED, event_ts=6, broker=9, custom=b"\x01xyz")
    cache.update_remote_log_segment_metadata(upd)
    want = md.create_with_updates(upd)
    assert cache.remote_log_segment_metadata(3, 100) == want
    assert cache.remote_log_segment_metadata(3, 149) == want
    assert cache.remote_log_segment_metadata(3, 150) is None  # offset 150 belongs to epoch 4
    assert cache.remote_log_segment_metadata(4, 150) == want
    assert cache.remote_log_segment_metadata(4, 199) == want
    assert cache.remote_log_segment_metadata(4, 200) is None
    assert cache.remote_log_segment_metadata(5, 150) is None
    assert cache.highest_offset_for_epoch(3) == 149
    assert cache.highest_offset_for_epoch(4) == 199


def test_delete_lifecycle():
    cache = RemoteLogMetadataCache(TP)
    md = finished(cache, 0, 99)
    cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(0, 10) is None
    assert [m.state for m in cache.list_remote_log_segments(0)] == [S.DELETE_SEGMENT_STARTED]
    cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_all() == []
    assert len(cache) == 0
    assert cache.highest_offset_for_epoch(0) == 99  # never decreases, as Kafka


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED),
        (S.DELETE_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    ],
)
def test_illegal_transitions_raise(src, dst):
    cache = RemoteLogMetadataCache(TP)
    md = segment(0, 9)
    cache.add_copy_in_progress_segment(md)
    if src != S.COPY_SEGMENT_STARTED:
        if src == S.DELETE_SEGMENT_STARTED:
            cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
        else:
            cache.update_remote_log_segment_metadata(update(md, src))
    with pytest.raises(InvalidRemoteStateTransitionError):
        if dst == S.COPY_SEGMENT_STARTED:
            cache.add_copy_in_progress_segment(md)
        else:
            cache.update_remote_log_segment_metadata(update(md, dst))


def test_add_requires_started_and_update_rejects_started():
    cache = RemoteLogMetadataCache(TP)
    with pytest.raises(ValueError):
        cache.add_copy_in_progress_segment(segment(0, 9, state=S.COPY_SEGMENT_FINISHED))
    md = segment(0, 9)
    cache.add_copy_in_progress_segment(md)
    with pytest.raises(ValueError):
        cache.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_STARTED))


def test_unknown_segment_update_dropped_until_initialized():
    cache = RemoteLogMetadataCache(TP)
    md = segment(0, 9)
    cache.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
    cache.mark_initialized()
    assert cache.is_initialized
    with pytest.raises(RemoteResourceNotFoundError):
        cache.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))


def test_self_transitions_are_idempotent():
    cache = RemoteLogMetadataCache(TP)
    md = segment(0, 9)
    cache.add_copy_in_progress_segment(md)
    cache.add_copy_in_progress_segment(md)
    cache.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
    cache.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
    assert len(cache.list_all()) == 1
    assert cache.remote_log_segment_metadata(0, 5) is not None


def test_duplicate_upload_after_leader_change_unreferences_the_older_one():
    # Kafka's case 1: L0 uploaded S0 0-100, L1 uploaded S1 0-200 in the same epoch.
    cache = RemoteLogMetadataCache(TP)
    s0 = finished(cache, 0, 100)
    s1 = finished(cache, 0, 200)
    assert (
        cache.remote_log_segment_metadata(0, 50).remote_log_segment_id == s1.remote_log_segment_id
    )
    assert {m.remote_log_segment_id for m in cache.list_remote_log_segments(0)} == {
        s0.remote_log_segment_id,
        s1.remote_log_segment_id,
    }


def test_overlapping_uploads_serve_the_newer_lineage():
    # Kafka's case 2: S0 10-90; then S1 5-100 and S2 101-200.
    cache = RemoteLogMetadataCache(TP)
    finished(cache, 10, 90, {0: 10})
    s1 = finished(cache, 5, 100, {0: 5})
    s2 = finished(cache, 101, 200, {0: 101})
    assert (
        cache.remote_log_segment_metadata(0, 95).remote_log_segment_id == s1.remote_log_segment_id
    )
    assert (
        cache.remote_log_segment_metadata(0, 50).remote_log_segment_id == s1.remote_log_segment_id
    )
    assert (
        cache.remote_log_segment_metadata(0, 150).remote_log_segment_id == s2.remote_log_segment_id
    )
    assert [m.start_offset for m in cache.list_remote_log_segments(0)] == [5, 10, 101]


# ------------------------------------------------------------------ differential vs Kafka


def _pool(draw):
    n = draw(st.integers(1, 7))
    pool = []
    for _ in range(n):
        start = draw(st.integers(0, 60))
        length = draw(st.integers(0, 30))
        end = start + length
        first_epoch = draw(st.integers(0, 3))
        epochs = {first_epoch: start}
        if length and draw(st.booleans()):
            epochs[first_epoch + draw(st.integers(1, 2))] = start + draw(st.integers(1, length))
        if draw(st.integers(0, 9)) == 0:  # many epochs: exercises the > 5 entries overflow
            epochs = {e: start for e in range(7)}
            epochs[6] = end
        pool.append(segment(start, end, epochs, size=draw(st.integers(0, 2**31 - 1))))
    return pool


@st.composite
def scenarios(draw):
    pool = _pool(draw)
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["add", "update", "update", "init"]),
                st.integers(0, len(pool) - 1),
                st.sampled_from(list(S)),
            ),
            max_size=40,
        )
    )
    return pool, ops


def _key(mds):
    return sorted(mds, key=lambda m: (m.start_offset, m.remote_log_segment_id.id))


def _check_same(cache, model):
    for epoch in range(7):
        assert cache.highest_offset_for_epoch(epoch) == model.highest_offset_for_epoch(epoch)
        assert _key(cache.list_remote_log_segments(epoch)) == model.list_remote_log_segments(epoch)
        assert cache.remote_log_size(epoch) == sum(
            m.segment_size_in_bytes for m in model.list_remote_log_segments(epoch)
        )
        for offset in range(0, 95, 3):
            got = cache.remote_log_segment_metadata(epoch, offset)
            assert got == model.remote_log_segment_metadata(epoch, offset), (epoch, offset)
    assert _key(cache.list_all()) == model.list_remote_log_segments(None)
    assert [m.start_offset for m in cache.list_all()] == sorted(
        m.start_offset for m in cache.list_all()
    )
    assert len(cache) == len(model.id_to_md)


@pytest.mark.parametrize("chunk_rows", [2, 4096])
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scenario=scenarios())
def test_matches_kafka_model(monkeypatch, chunk_rows, scenario):
    monkeypatch.setattr(cache_mod, "CHUNK_ROWS", chunk_rows)
    pool, ops = scenario
    cache, model = RemoteLogMetadataCache(TP), KafkaCacheModel()
    for op, idx, state in ops:
        md = pool[idx]
        if op == "init":
            cache.mark_initialized()
            model.initialized = True
            continue
        results = []
        for target in (cache, model):
            try:
                if op == "add":
                    target.add_copy_in_progress_segment(md)
                else:
                    target.update_remote_log_segment_metadata(update(md, state, event_ts=idx))
                results.append(None)
            except (
                ValueError,
                InvalidRemoteStateTransitionError,
                RemoteResourceNotFoundError,
            ) as e:
                results.append(type(e))
        assert results[0] == results[1], (op, idx, state)
        _check_same(cache, model)


def test_many_rows_split_and_delete_from_front(monkeypatch):
    monkeypatch.setattr(cache_mod, "CHUNK_ROWS", 8)
    cache = RemoteLogMetadataCache(TP)
    mds = [finished(cache, i * 10, i * 10 + 9) for i in range(0, 100, 2)]
    mds += [finished(cache, i * 10, i * 10 + 9) for i in range(1, 100, 2)]  # middle inserts
    assert [m.start_offset for m in cache.list_all()] == list(range(0, 1000, 10))
    assert len(cache._chunks) > 5
    for off in range(0, 1000, 7):
        assert cache.remote_log_segment_metadata(0, off).start_offset == off // 10 * 10
    for md in sorted(mds, key=lambda m: m.start_offset)[:60]:
        cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
        cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED))
    assert [m.start_offset for m in cache.list_all()] == list(range(600, 1000, 10))
    assert cache.remote_log_segment_metadata(0, 599) is None
    assert cache.remote_log_segment_metadata(0, 655).start_offset == 650


# ------------------------------------------------------------------ memory


def build_synthetic_cache(n: int, *, records_per_segment: int = 1000) -> RemoteLogMetadataCache:
    """n FINISHED segments, a new leader epoch every 100k segments, one segment rolled per
    second and copied 30-60 s later, 1.00-1.07 MB each.

    Built straight into columns (adding 1M segments through the API takes ~20 s); the layout
    is what the API produces for the same segments (test_memory_per_segment_built_through_the_api
    checks the API path at 20k segments).
    """
    cache = RemoteLogMetadataCache(TP)
    rows = cache_mod.CHUNK_ROWS
    epoch_len = 100_000
    n_epochs = (n - 1) // epoch_len + 1
    maps = [((e, 0),) for e in range(n_epochs)]
    t0 = 1_700_000_000_000
    rps = records_per_segment
    chunks = []
    for lo in range(0, n, rows):
        idx = range(lo, min(n, lo + rows))
        chunks.append(
            _Chunk.build(
                os.urandom(16 * len(idx)),
                [i * rps for i in idx],
                [rps - 1] * len(idx),
                [t0 + i * 1000 - (i * 7919) % 500 for i in idx],
                [t0 + i * 1000 + 30_000 + (i * 104729) % 30_000 for i in idx],
                [1_000_000 + (i * 7919) % 70_000 for i in idx],
                [1 + i % 3 for i in idx],
                [i // epoch_len for i in idx],
                [int(S.COPY_SEGMENT_FINISHED) | (1 << 3)] * len(idx),
            )
        )
    epochs = {
        e: EpochState(
            min(n, (e + 1) * epoch_len) * rps - 1,
            e * epoch_len * rps,
            (min(n, (e + 1) * epoch_len) - 1) * rps,
            0,
            0,
        )
        for e in range(n_epochs)
    }
    cache._restore(chunks, maps, epochs, {})
    return cache


def test_synthetic_cache_answers_like_the_api_built_one():
    cache = build_synthetic_cache(250_000)
    assert len(cache) == 250_000
    md = cache.remote_log_segment_metadata(1, 123_456_789)
    assert md is not None and md.start_offset == 123_456_000 and md.end_offset == 123_456_999
    assert md.state == S.COPY_SEGMENT_FINISHED
    assert cache.remote_log_segment_metadata(0, 123_456_789) is None
    assert cache.highest_offset_for_epoch(2) == 249_999_999
    assert len(cache.list_remote_log_segments(1)) == 100_000
    # the 1,000,000-segment memory budget is checked after loading the cache file, see
    # test_metadata_cache_file.test_one_million_segments_load_fast_and_small


def test_memory_per_segment_built_through_the_api():
    n = 20_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache = RemoteLogMetadataCache(TP)
        for i in range(n):
            md = segment(
                i * 1000,
                i * 1000 + 999,
                {0: i * 1000},
                sid=uuid.UUID(bytes=os.urandom(16)),
                event_ts=1_700_000_000_000 + i * 1000,
                size=1_000_000 + i % 70_000,
            )
            cache.add_copy_in_progress_segment(md)
            cache.update_remote_log_segment_metadata(
                update(md, S.COPY_SEGMENT_FINISHED, event_ts=1_700_000_000_500 + i * 1000)
            )
        del md
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert (after - before) / n <= 40
