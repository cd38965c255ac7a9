"""Parallel block reads ahead of sequential remote reads (RemoteSegmentPrefetcher), through a
RemoteLogManager on a file:// store with every remote call recorded."""

from __future__ import annotations

import time

import pytest

from tierlog.errors import RemoteStorageError
from tierlog.records.record_batch import iter_headers
from tierlog.tiered.remote_log_reader import RemoteStorageFetchInfo
from tierlog.tiered.remote_segment_prefetcher import RemoteSegmentPrefetcher
from tierlog.tiered.storage.recording_remote_storage_manager import (
    EventType,
    RemoteStorageEvent,
)

from .tiered_harness import HOUR, T0, World, config

BLOCK = 1024


@pytest.fixture
def world(tmp_path):
    w = World(
        tmp_path,
        topic_config=config(local_retention_ms=0, retention_ms=-1, segment_bytes=16 * BLOCK),
    )
    w.fill_segments(4, value_size=100)
    w.rlm.run_copy(w.tp)
    w.clock.now = T0 + HOUR
    w.log.delete_old_segments()
    assert w.log.local_log_start_offset > 0
    yield w
    w.close()


def use_prefetcher(w: World, **kw: float) -> RemoteSegmentPrefetcher:
    """A prefetcher of 1 KiB blocks; blocks even from this fast (file://) store unless told."""
    kw.setdefault("direct_below_s", 0.0)
    p = RemoteSegmentPrefetcher(w.rsm, block_size=BLOCK, **kw)  # type: ignore[arg-type]
    w.rlm.prefetcher = p
    return p


def wait_for(predicate, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_sequential_reads_return_the_same_bytes_as_plain_ranged_reads(world: World) -> None:
    end = world.log.local_log_start_offset
    plain = world.remote_bytes(0, end, max_bytes=1500)
    assert len(plain) > 3 * 16 * BLOCK * 0.9
    p = use_prefetcher(world)
    for max_bytes in (1500, 100, 5000):  # a block, less than one batch, several blocks
        assert world.remote_bytes(0, end, max_bytes=max_bytes) == plain
    assert p.blocks_hit > 0


def test_blocks_after_a_read_are_read_ahead_and_serve_the_next_read(world: World) -> None:
    p = use_prefetcher(world, max_depth=4)
    md = world.rlmm.list_remote_log_segments(world.tp)[0]
    world.rsm.clear()
    info = world.rlm.read(RemoteStorageFetchInfo(world.tp, md.start_offset, 100, True))
    # the segment's first read: one ranged read of exactly its range (a cold read costs one
    # data read), and block reads ahead from the aligned run holding its end, in parallel
    wait_for(lambda: len(world.rsm.events_of(EventType.FETCH_SEGMENT)) >= 2, "a block ahead")
    reads = world.rsm.events_of(EventType.FETCH_SEGMENT)
    own = next(e for e in reads if e.start_position == 0)
    ahead = sorted((e for e in reads if e is not own), key=lambda e: e.start_position)
    assert own.end_position is not None
    run = p.blocks_per_read * BLOCK
    assert ahead[0].start_position == (own.end_position + 1) // run * run
    assert all(e.start_position % run == 0 for e in ahead)
    wait_for(lambda: all(f.done() for st in p._streams.values() for f in st.blocks.values()),
             "the reads ahead")  # fmt: skip
    hits = p.blocks_hit
    # the next sequential reads find their blocks read ahead; no block is read twice
    offset = list(iter_headers(info.records))[-1].next_offset
    for _ in range(5):
        info = world.rlm.read(RemoteStorageFetchInfo(world.tp, offset, 1500, True))
        offset = list(iter_headers(info.records))[-1].next_offset
    assert p.blocks_hit > hits
    blocks = [e.start_position for e in world.rsm.events_of(EventType.FETCH_SEGMENT)
              if e is not own]  # fmt: skip
    assert len(blocks) == len(set(blocks))


def test_blocks_are_read_in_whole_aligned_runs_one_ranged_read_each(world: World) -> None:
    p = use_prefetcher(world, max_depth=2, blocks_per_read=4)
    mds = world.rlmm.list_remote_log_segments(world.tp)
    world.rsm.clear()
    end = mds[1].start_offset
    offset = 0
    while offset < end:
        info = world.rlm.read(RemoteStorageFetchInfo(world.tp, offset, 1500, True))
        offset = list(iter_headers(info.records))[-1].next_offset
    p.close()
    first = mds[0].remote_log_segment_id
    reads = [e for e in world.rsm.events_of(EventType.FETCH_SEGMENT) if e.segment_id == first]
    run = 4 * BLOCK
    size = mds[0].segment_size_in_bytes

    def whole_run(e: RemoteStorageEvent) -> bool:
        assert e.end_position is not None
        return e.start_position % run == 0 and e.end_position + 1 == min(
            e.start_position + run, size
        )

    runs = [e for e in reads if whole_run(e)]
    # besides them only the segment's first (cold) read, of its own range
    assert [e.start_position for e in reads if not whole_run(e)] == [0]
    assert len({e.start_position for e in runs}) == len(runs)  # none read twice
    # every block of the segment read once, by fewer requests than blocks
    assert sum(e.end_position + 1 - e.start_position for e in runs) == size  # type: ignore[operator]
    assert p.reads < p.blocks_read


def test_read_ahead_reaches_into_the_next_segment(world: World) -> None:
    use_prefetcher(world, max_depth=8)
    mds = world.rlmm.list_remote_log_segments(world.tp)
    world.rsm.clear()
    # the last batches of the first segment: depth blocks ahead run past its end
    world.rlm.read(RemoteStorageFetchInfo(world.tp, mds[0].end_offset, 100, True))
    second = mds[1].remote_log_segment_id
    wait_for(
        lambda: any(e.segment_id == second for e in world.rsm.events_of(EventType.FETCH_SEGMENT)),
        "a read of the next segment",
    )


def test_a_failed_block_is_read_once_more_and_a_second_failure_is_the_reads_error(
    world: World,
) -> None:
    end = world.log.local_log_start_offset
    plain = world.remote_bytes(0, end, max_bytes=1500)
    use_prefetcher(world)
    world.rsm.clear()
    world.rsm.fail(EventType.FETCH_SEGMENT, times=1)
    assert world.remote_bytes(0, end, max_bytes=1500) == plain
    failed = [e for e in world.rsm.events_of(EventType.FETCH_SEGMENT) if e.error is not None]
    assert len(failed) == 1
    use_prefetcher(world)  # nothing held
    world.rsm.fail(EventType.FETCH_SEGMENT, times=1000)
    with pytest.raises(RemoteStorageError, match="injected FETCH_SEGMENT failure"):
        world.rlm.read(RemoteStorageFetchInfo(world.tp, 0, 1500, True))


def test_blocks_held_never_exceed_max_bytes(world: World) -> None:
    p = use_prefetcher(world, max_depth=8, max_bytes=3 * BLOCK)
    end = world.log.local_log_start_offset
    offset = 0
    while offset < end:
        info = world.rlm.read(RemoteStorageFetchInfo(world.tp, offset, 1500, True))
        assert p._held <= 3
        assert sum(len(st.blocks) for st in p._streams.values()) == p._held
        offset = list(iter_headers(info.records))[-1].next_offset
    p.close()
    assert p._held == 0


def test_a_store_faster_than_direct_below_is_read_range_by_range(world: World) -> None:
    end = world.log.local_log_start_offset
    plain = world.remote_bytes(0, end, max_bytes=1500)
    use_prefetcher(world)
    assert world.remote_bytes(0, end, max_bytes=1500) == plain  # blocks
    p = use_prefetcher(world, direct_below_s=3600.0)
    world.rsm.clear()
    assert world.remote_bytes(0, end, max_bytes=1500) == plain
    reads = world.rsm.events_of(EventType.FETCH_SEGMENT)
    # the first read learns the store's latency from its blocks; every later one is direct:
    # one ranged read of its own range, nothing ahead, nothing held for it
    first_blocks = p.blocks_read
    assert first_blocks >= 1
    direct = reads[first_blocks:]
    assert len(direct) > 10
    assert any(e.start_position % BLOCK for e in direct)
    assert p.blocks_read == first_blocks


@pytest.mark.parametrize(
    "kw",
    [
        {"block_size": 0},
        {"blocks_per_read": 0},
        {"max_depth": 0},
        {"threads": 0},
        {"block_size": 4096, "max_bytes": 1024},
    ],
)
def test_bad_settings_are_refused(world: World, kw: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="prefetch block size"):
        RemoteSegmentPrefetcher(world.rsm, **kw)
