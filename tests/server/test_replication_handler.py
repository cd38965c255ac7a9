"""The leader's answer to OffsetsForLeaderEpoch for one partition (handlers/replication.py),
over a real leader epoch cache: Kafka's ``Partition.lastOffsetForLeaderEpoch`` cases."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tierlog.log.checkpoint_file import InMemoryLeaderEpochCheckpoint
from tierlog.log.leader_epoch_file_cache import LeaderEpochFileCache
from tierlog.server.handlers.replication import last_offset_for_leader_epoch


@dataclass
class FakeLog:
    leader_epoch_cache: LeaderEpochFileCache
    log_end_offset: int


@dataclass
class FakePartition:
    log: FakeLog

    def leader_epoch_error(self, current_leader_epoch: int) -> int:
        return 0  # the leader, any epoch (the checks are Partition's: tests/cluster)


def partition(entries: list[tuple[int, int]], leo: int) -> FakePartition:
    cache = LeaderEpochFileCache(InMemoryLeaderEpochCheckpoint())
    for epoch, start in entries:
        cache.assign(epoch, start)
    return FakePartition(FakeLog(cache, leo))


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (5, (5, 30)),  # the latest epoch ends at the log end offset
        (4, (3, 20)),  # unknown epoch: the largest below it, ending where 5 starts
        (3, (3, 20)),
        (2, (1, 10)),
        (1, (1, 10)),
        (0, (0, 5)),  # below the earliest: itself, ending where the first known one starts
        (6, (-1, -1)),  # above the latest: UNDEFINED
        (-1, (-1, -1)),  # UNDEFINED_EPOCH asked
    ],
)
def test_end_offset_of_a_leader_epoch(requested, expected):
    p = partition([(1, 5), (3, 10), (5, 20)], leo=30)
    assert last_offset_for_leader_epoch(p, -1, requested) == (0, *expected)  # type: ignore[arg-type]


def test_empty_cache_is_undefined_without_error():
    p = partition([], leo=0)
    assert last_offset_for_leader_epoch(p, 0, 0) == (0, -1, -1)  # type: ignore[arg-type]
