"""LeaderEpochFileCache: cases ported from Kafka's LeaderEpochFileCacheTest, plus persistence."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tierlog.log.checkpoint_file import InMemoryLeaderEpochCheckpoint, LeaderEpochCheckpointFile
from tierlog.log.leader_epoch_file_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochFileCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def checkpoint(tmp_path: Path) -> LeaderEpochCheckpointFile:
    return LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")


@pytest.fixture
def cache(checkpoint: LeaderEpochCheckpointFile) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(checkpoint)


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, o) for e, o in pairs]


def test_previous_epoch(cache: LeaderEpochFileCache) -> None:
    assert cache.previous_epoch() is None
    cache.assign(2, 10)
    assert cache.previous_epoch() is None
    cache.assign(4, 15)
    assert cache.previous_epoch() == 2
    cache.assign(10, 20)
    assert cache.previous_epoch() == 4
    assert cache.previous_epoch(4) == 2
    assert cache.next_epoch(4) == 10
    assert cache.next_epoch(10) is None
    cache.truncate_from_end(18)
    assert cache.previous_epoch() == 2


def test_add_epoch_and_offset(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 10)
    assert cache.latest_epoch == 2
    assert cache.latest_entry == EpochEntry(2, 10)
    assert cache.earliest_entry == EpochEntry(2, 10)
    assert cache.epoch_entries() == entries((2, 10))
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_latest_epoch_requested_returns_log_end_offset(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 11)
    cache.assign(2, 12)
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_undefined_epoch_requested(cache: LeaderEpochFileCache) -> None:
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    cache.assign(2, 11)
    cache.assign(3, 12)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_does_not_overwrite_start_offset_of_assigned_epoch(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 9)
    cache.assign(2, 10)
    assert cache.epoch_entries() == entries((2, 9))
    cache.assign(2, 6)  # an earlier start for the same epoch does replace it
    assert cache.epoch_entries() == entries((2, 6))


def test_enforces_monotonically_increasing_start_offsets(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert cache.epoch_entries() == entries((3, 9))


def test_no_epoch_recorded(cache: LeaderEpochFileCache) -> None:
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(7, 0) == UNDEFINED
    assert cache.latest_epoch is None
    assert cache.latest_entry is None
    assert cache.earliest_entry is None
    assert not cache.non_empty()


def test_requested_epoch_less_than_first(cache: LeaderEpochFileCache) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_truncate_if_matching_epoch_but_earlier_start(cache: LeaderEpochFileCache) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    cache.assign(7, 12)
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_first_offset_of_subsequent_epoch(cache: LeaderEpochFileCache) -> None:
    for epoch, offset in [(1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)]:
        cache.assign(epoch, offset)
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_next_available_epoch_when_no_exact_match(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 10)
    cache.assign(2, 13)
    cache.assign(4, 17)
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_epoch_above_latest_is_undefined(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_lower_epoch_truncates_later_ones(cache: LeaderEpochFileCache) -> None:
    cache.assign(1, 5)
    cache.assign(2, 6)
    cache.assign(1, 7)
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED
    assert cache.epoch_entries() == entries((1, 7))


def test_offsets_increase_monotonically(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert cache.epoch_entries() == entries((3, 5))


def test_track_epochs_as_leaders_change(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)
    assert cache.end_offset_for(1, 5) == (1, 5)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


def test_truncate_from_end(cache: LeaderEpochFileCache) -> None:
    for epoch, offset in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, offset)
    cache.truncate_from_end(UNDEFINED_EPOCH_OFFSET)
    assert len(cache.epoch_entries()) == 3
    cache.truncate_from_end(9)
    assert cache.latest_epoch == 3
    assert cache.epoch_entries() == entries((2, 6), (3, 8))
    cache.truncate_from_end(8)  # on an epoch boundary: that epoch goes
    assert cache.epoch_entries() == entries((2, 6))


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (1, [(2, 6), (3, 8), (4, 11)]),  # too early: nothing changes
        (6, [(2, 6), (3, 8), (4, 11)]),  # the first offset: nothing changes
        (8, [(3, 8), (4, 11)]),
        (9, [(3, 9), (4, 11)]),
        (11, [(4, 11)]),
        (15, [(4, 15)]),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(
    cache: LeaderEpochFileCache, start: int, expected: list[tuple[int, int]]
) -> None:
    for epoch, offset in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, offset)
    cache.truncate_from_start(start)
    assert cache.epoch_entries() == entries(*expected)


def test_truncate_from_start_between_first_two(cache: LeaderEpochFileCache) -> None:
    for epoch, offset in [(0, 0), (1, 7), (2, 10)]:
        cache.assign(epoch, offset)
    cache.truncate_from_start(5)
    assert cache.epoch_entries() == entries((0, 5), (1, 7), (2, 10))


def test_truncations_of_empty_cache(cache: LeaderEpochFileCache) -> None:
    cache.truncate_from_start(7)
    cache.truncate_from_end(7)
    assert cache.epoch_entries() == []


def test_clear_and_flush(
    cache: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile
) -> None:
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.clear_and_flush()
    assert cache.epoch_entries() == []
    assert checkpoint.read() == []


def test_every_change_is_persisted(
    cache: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile
) -> None:
    cache.assign(2, 6)
    assert checkpoint.read() == entries((2, 6))
    cache.assign(3, 8)
    cache.assign(4, 11)
    assert checkpoint.read() == entries((2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(11)
    assert checkpoint.read() == entries((2, 6), (3, 8))
    cache.truncate_from_start(7)
    assert checkpoint.read() == entries((2, 7), (3, 8))
    assert checkpoint.path.read_text() == "0\n2\n2 7\n3 8\n"
    reloaded = LeaderEpochFileCache(LeaderEpochCheckpointFile(checkpoint.path))
    assert reloaded.epoch_entries() == entries((2, 7), (3, 8))


def test_loading_reapplies_monotonicity() -> None:
    # A hand-edited or stale checkpoint with a conflicting tail is cleaned up on load.
    cp = InMemoryLeaderEpochCheckpoint(entries((1, 0), (3, 10), (2, 20)))
    cache = LeaderEpochFileCache(cp)
    assert cache.epoch_entries() == entries((1, 0), (2, 20))


def test_assign_entries_writes_once() -> None:
    writes: list[list[EpochEntry]] = []

    class Recording(InMemoryLeaderEpochCheckpoint):
        def write(self, entries: Sequence[EpochEntry], *, durable: bool = True) -> None:
            writes.append(list(entries))

    cache = LeaderEpochFileCache(Recording())
    cache.assign_entries(entries((1, 0), (2, 5), (2, 7)))
    assert writes == [entries((1, 0), (2, 5))]
    cache.assign(2, 9)  # no change: no write
    assert len(writes) == 1


def test_invalid_entries_are_rejected(cache: LeaderEpochFileCache) -> None:
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


def test_epoch_for_offset(cache: LeaderEpochFileCache) -> None:
    assert cache.epoch_for_offset(5) is None
    for epoch, offset in [(2, 6), (3, 8), (5, 11)]:
        cache.assign(epoch, offset)
    assert cache.epoch_for_offset(5) is None
    assert cache.epoch_for_offset(6) == 2
    assert cache.epoch_for_offset(7) == 2
    assert cache.epoch_for_offset(8) == 3
    assert cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(11) == 5
    assert cache.epoch_for_offset(10**9) == 5
    assert cache.epoch_entry(3) == EpochEntry(3, 8)
    assert cache.epoch_entry(4) is None


def test_epochs_between(cache: LeaderEpochFileCache) -> None:
    for epoch, offset in [(0, 0), (1, 10), (3, 20), (4, 30)]:
        cache.assign(epoch, offset)
    # A remote segment [15, 25): epochs 1 (clipped to 15) and 3.
    assert cache.epochs_between(15, 25) == {1: 15, 3: 20}
    assert cache.epochs_between(0, 10) == {0: 0}
    assert cache.epochs_between(10, 11) == {1: 10}
    assert cache.epochs_between(35, 40) == {4: 35}
    assert cache.epochs_between(0, 100) == {0: 0, 1: 10, 3: 20, 4: 30}
    assert cache.epoch_entries_in_range(-1, 20) == entries((0, 0), (1, 10))
    # The cache itself is untouched.
    assert len(cache.epoch_entries()) == 4
