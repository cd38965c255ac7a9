"""ReplicaFetcher's answers to a leader's partition errors: how long the partition waits
before it is fetched again (no I/O: a fetch response is fed to the fetcher)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from tests.cluster.test_partition import FakeLog
from tierlog.cluster.partition import Partition
from tierlog.cluster.replica_fetcher import (
    LEADER_CATCH_UP_BACKOFF_MS,
    FetcherConfig,
    ReplicaFetcher,
)

BACKOFF_MS = 1000


def fetcher() -> ReplicaFetcher:
    def no_client() -> Any:
        raise AssertionError("no connection in this test")

    return ReplicaFetcher(
        2, 0, FetcherConfig(broker_id=1, backoff_ms=BACKOFF_MS), lambda _b: None, no_client,
        lambda _p: None,
    )  # fmt: skip


def follower() -> Partition:
    p = Partition("t", 0, FakeLog(), None, local_broker_id=1)  # type: ignore[arg-type]
    assert p.make_follower(2, 5, (1, 2), (1, 2), 0)
    return p


def waits_after(code: int) -> float:
    f, p = fetcher(), follower()
    f.add(p)
    before = time.monotonic()
    f._process_partition(p, SimpleNamespace(error_code=code))
    assert f._ready_partitions() == []
    return f._delayed_until[("t", 0)] - before


@pytest.mark.parametrize("code", [75, 6])  # UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER
def test_a_leader_that_has_not_applied_the_new_state_is_asked_again_soon(code: int) -> None:
    waited = waits_after(code)
    assert LEADER_CATCH_UP_BACKOFF_MS / 1000 <= waited < LEADER_CATCH_UP_BACKOFF_MS / 1000 + 0.5


def test_a_fenced_follower_waits_the_backoff_for_the_metadata_to_move_it() -> None:
    waited = waits_after(74)  # FENCED_LEADER_EPOCH: this follower's epoch is older
    assert BACKOFF_MS / 1000 <= waited < BACKOFF_MS / 1000 + 0.5


def test_a_new_state_clears_the_wait() -> None:
    f, p = fetcher(), follower()
    f.add(p)
    f._process_partition(p, SimpleNamespace(error_code=74))
    assert f._ready_partitions() == []
    f.add(p)  # the metadata moved it (a new epoch): fetched at once
    assert f._ready_partitions() == [p]
