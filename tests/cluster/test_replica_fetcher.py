"""ReplicaFetcher's answers to a leader's partition errors: how long the partition waits
before it is fetched again (no I/O: a fetch response is fed to the fetcher); and the bytes it
counts as received (``ReplicationBytesInPerSec``), appended to a real log."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.cluster.test_partition import FakeLog
from tierlog.cluster.partition import Partition
from tierlog.cluster.replica_fetcher import (
    LEADER_CATCH_UP_BACKOFF_MS,
    FetcherConfig,
    ReplicaFetcher,
    ReplicaFetcherManager,
)
from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.records.default_records import build_batch

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


def follower_of_a_real_log(tmp_path: Path) -> tuple[LogManager, Any, Partition]:
    """A log manager (shut it down), the log of ``t-0`` in it, and that partition as the
    follower of broker 2 at epoch 5."""
    lm = LogManager([tmp_path / "logs"], LogConfig())
    lm.startup()
    lm.create_topic("t", 1, {})
    lg = lm.get_log("t", 0)
    assert lg is not None
    p = Partition("t", 0, lg, None, local_broker_id=1)
    assert p.make_follower(2, 5, (1, 2), (1, 2), 0)
    return lm, lg, p


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


def test_the_bytes_received_are_counted_for_the_topic_a_partial_batch_included(
    tmp_path: Path,
) -> None:
    """The manager's counter, set after its fetcher started (as the broker sets it), counts
    every record byte of a partition answered without error; the log gets the whole
    batches; an error answer counts nothing."""
    lm, lg, p = follower_of_a_real_log(tmp_path)
    t0 = 1_700_000_000_000
    whole = build_batch([(t0, b"k", b"a" * 200)] * 3, partition_leader_epoch=5)
    cut = build_batch([(t0, b"k", b"b" * 200)] * 2, base_offset=3, partition_leader_epoch=5)
    received = whole + cut[: len(cut) // 2]  # the leader's read stopped inside a batch
    counted: list[tuple[str, int]] = []

    async def run() -> None:
        manager = ReplicaFetcherManager(
            FetcherConfig(broker_id=1, backoff_ms=BACKOFF_MS), lambda _b: None, _no_client,
            lambda _p: None,
        )  # fmt: skip
        manager.add(p)  # its fetcher starts (and backs off: no leader address)
        try:
            manager.on_replication_bytes_in = lambda topic, n: counted.append((topic, n))
            (f,) = manager._fetchers.values()
            answer = SimpleNamespace(
                error_code=0, diverging_epoch=None, records=received, high_watermark=3,
                log_start_offset=0,
            )  # fmt: skip
            f._process_partition(p, answer)
            f._process_partition(p, SimpleNamespace(error_code=74, records=b""))
        finally:
            await manager.shutdown()

    try:
        asyncio.run(run())
        assert counted == [("t", len(received))]
        assert lg.log_end_offset == 3  # the whole batch only: the rest is fetched again
        assert lg.size_in_bytes == len(whole) < len(received)
    finally:
        lm.shutdown()


def _no_client() -> Any:
    raise AssertionError("no connection in this test")


class _LeaderAnswers:
    """A connected client whose leader answers ListOffsets(earliest local) with ``offset``."""

    connected = True

    def __init__(self, offset: int) -> None:
        self.offset = offset

    async def request(self, _request: Any, **_kwargs: Any) -> Any:
        part = SimpleNamespace(error_code=0, offset=self.offset)
        return SimpleNamespace(topics=[SimpleNamespace(partitions=[part])])

    async def close(self) -> None:
        pass


def test_a_rebuild_from_remote_storage_that_ends_late_keeps_what_was_fetched_since(
    tmp_path: Path,
) -> None:
    """Stop 21's CI: a new leader epoch re-adds a partition to its fetcher while its rebuild
    from remote storage runs; the fetcher asks again, gets 109 again and starts a second
    rebuild. The first one ends, the follower fetches the leader's local part and joins the
    ISR; the second one, ending later, wiped that. Each rebuild now carries the fetch offset
    the leader answered 109 to, and applies only while the log still ends there."""
    lm, lg, p = follower_of_a_real_log(tmp_path)
    t0 = 1_700_000_000_000
    local_part = build_batch(
        [(t0, b"k", b"v" * 100)] * 4, base_offset=308, partition_leader_epoch=6
    )
    gates: list[asyncio.Event] = []
    asked: list[tuple[int, int, int]] = []

    async def tier_state_machine(
        q: Partition, leader_local_start: int, leader_start: int, fetch_offset: int
    ) -> None:
        # What the broker's tier state machine does, once its remote reads are done.
        asked.append((leader_local_start, leader_start, fetch_offset))
        gate = asyncio.Event()
        gates.append(gate)
        await gate.wait()
        q.log.restore_remote_log_aux_state(
            leader_local_start, leader_start, [], None, expected_log_end_offset=fetch_offset
        )

    async def settle() -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    async def run() -> None:
        f = ReplicaFetcher(
            2, 0, FetcherConfig(broker_id=1, backoff_ms=BACKOFF_MS), lambda _b: None, _no_client,
            lambda _p: None, tier_state_machine,
        )  # fmt: skip
        f._client = _LeaderAnswers(308)  # type: ignore[assignment]
        moved = SimpleNamespace(error_code=109, log_start_offset=0)
        f.add(p)
        f._process_partition(p, moved)
        await settle()
        assert p.make_follower(2, 6, (1, 2, 3), (1, 2), 0)  # the reassignment's new epoch
        f.remove(p)
        f.add(p)
        assert f._ready_partitions() == [p]
        f._process_partition(p, moved)  # asked again from 0 while the first rebuild runs
        await settle()
        assert asked == [(308, 0, 0), (308, 0, 0)]
        gates[0].set()
        await settle()
        assert (lg.log_start_offset, lg.log_end_offset) == (0, 308)
        answer = SimpleNamespace(
            error_code=0, diverging_epoch=None, records=local_part, high_watermark=312,
            log_start_offset=0,
        )  # fmt: skip
        f._process_partition(p, answer)
        assert (lg.log_end_offset, lg.size_in_bytes) == (312, len(local_part))
        gates[1].set()  # the late one
        await settle()
        await f.stop()

    try:
        asyncio.run(run())
        assert (lg.log_end_offset, lg.size_in_bytes) == (312, len(local_part))
    finally:
        lm.shutdown()
