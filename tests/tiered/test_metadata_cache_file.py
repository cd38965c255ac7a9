from __future__ import annotations

import gc
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings

from tests.tiered.kafka_model import KafkaCacheModel
from tests.tiered.strategies import TP, segment, update
from tests.tiered.test_remote_log_metadata_cache import (
    _check_same,
    build_synthetic_cache,
    scenarios,
)
from tierlog.errors import (
    CorruptMetadataCacheError,
    InvalidRemoteStateTransitionError,
    RemoteResourceNotFoundError,
)
from tierlog.tiered import metadata_cache_file
from tierlog.tiered import remote_log_metadata_cache as cache_mod
from tierlog.tiered.remote_log_metadata_cache import RemoteLogMetadataCache
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState as S


def _apply(target, op, md, state, idx):
    try:
        if op == "add":
            target.add_copy_in_progress_segment(md)
        elif op == "update":
            target.update_remote_log_segment_metadata(update(md, state, event_ts=idx))
        else:
            target.mark_initialized() if hasattr(target, "mark_initialized") else None
            if isinstance(target, KafkaCacheModel):
                target.initialized = True
    except (ValueError, InvalidRemoteStateTransitionError, RemoteResourceNotFoundError) as e:
        return type(e)
    return None


@pytest.mark.parametrize("chunk_rows", [3, 4096])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scenario=scenarios())
def test_round_trip_mid_scenario_then_continue(monkeypatch, chunk_rows, scenario):
    """Save and load halfway: the loaded cache answers and evolves exactly like the model."""
    monkeypatch.setattr(cache_mod, "CHUNK_ROWS", chunk_rows)
    pool, ops = scenario
    cache, model = RemoteLogMetadataCache(TP), KafkaCacheModel()
    half = len(ops) // 2
    for op, idx, state in ops[:half]:
        assert _apply(cache, op, pool[idx], state, idx) == _apply(model, op, pool[idx], state, idx)
    data = metadata_cache_file.encode(cache, {7: 1234})
    loaded, offsets = metadata_cache_file.decode(data)
    assert offsets == {7: 1234}
    assert loaded.topic_id_partition == TP
    if model.initialized:
        loaded.mark_initialized()
    _check_same(loaded, model)
    for op, idx, state in ops[half:]:
        assert _apply(loaded, op, pool[idx], state, idx) == _apply(model, op, pool[idx], state, idx)
        _check_same(loaded, model)


def test_save_load_file_with_custom_metadata(tmp_path):
    cache = RemoteLogMetadataCache(TP)
    a = segment(0, 9, custom=b"abc")
    b = segment(10, 19)
    cache.add_copy_in_progress_segment(a)
    cache.add_copy_in_progress_segment(b)
    cache.update_remote_log_segment_metadata(update(b, S.COPY_SEGMENT_FINISHED, custom=b""))
    path = tmp_path / "p" / "cache"
    metadata_cache_file.save(path, cache, {0: 5, 3: 9})
    assert not list(path.parent.glob("*.tmp"))
    loaded, offsets = metadata_cache_file.load(path)
    assert offsets == {0: 5, 3: 9}
    assert loaded.list_all() == cache.list_all()
    assert [m.custom_metadata for m in loaded.list_all()] == [b"abc", b""]
    assert not loaded.is_initialized


def test_missing_file_is_a_corrupt_cache(tmp_path):
    with pytest.raises(CorruptMetadataCacheError):
        metadata_cache_file.load(tmp_path / "nope")


def test_every_flipped_byte_and_truncation_is_detected():
    cache = RemoteLogMetadataCache(TP)
    for i in range(5):
        cache.add_copy_in_progress_segment(segment(i * 10, i * 10 + 9, {i: i * 10}))
    data = metadata_cache_file.encode(cache, {1: 2})
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x41
        with pytest.raises(CorruptMetadataCacheError):
            metadata_cache_file.decode(bytes(bad))
    for n in range(len(data)):
        with pytest.raises(CorruptMetadataCacheError):
            metadata_cache_file.decode(data[:n])


def test_one_million_segments_load_fast_and_small(tmp_path):
    n = 1_000_000
    cache = build_synthetic_cache(n)
    path = tmp_path / "cache"
    metadata_cache_file.save(path, cache, {0: 2 * n})
    del cache
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        loaded, offsets = metadata_cache_file.load(path)
        gc.collect()
        per_segment = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    t0 = time.perf_counter()
    loaded, offsets = metadata_cache_file.load(path)
    elapsed = time.perf_counter() - t0
    assert offsets == {0: 2 * n}
    assert len(loaded) == n
    assert per_segment <= 40, per_segment
    assert elapsed < 2.0, elapsed
    assert loaded.remote_log_segment_metadata(9, 999_999_999).start_offset == 999_999_000
