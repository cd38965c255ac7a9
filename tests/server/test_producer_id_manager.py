"""ProducerIdManager: ids never repeat, across restarts and crashes."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tierlog.errors import CoordinatorLoadInProgress, ZooKeeperClientError
from tierlog.server.producer_id_manager import PRODUCER_ID_BLOCK_FILENAME, ProducerIdManager


def test_ids_are_unique_within_and_across_restarts(tmp_path):
    seen: set[int] = set()
    for _ in range(3):
        m = ProducerIdManager(tmp_path, block_size=10)
        for _ in range(25):
            pid = m.generate_producer_id()
            assert pid not in seen
            seen.add(pid)
    assert len(seen) == 75


def test_block_is_reserved_before_the_first_id_is_given(tmp_path):
    m = ProducerIdManager(tmp_path, block_size=100)
    assert m.generate_producer_id() == 0
    text = (tmp_path / PRODUCER_ID_BLOCK_FILENAME).read_text()
    assert "next.block.start=100" in text
    # a crash now: the next process starts after the reserved block
    assert ProducerIdManager(tmp_path, block_size=100).generate_producer_id() == 100


def test_torn_file_jumps_far_ahead(tmp_path):
    (tmp_path / PRODUCER_ID_BLOCK_FILENAME).write_text("garbage")
    assert ProducerIdManager(tmp_path).generate_producer_id() >= 1 << 40


def test_cluster_blocks_are_claimed_ahead_in_a_thread(tmp_path):
    """A cluster's blocks come from ZooKeeper (here a stand-in of the compare-and-set's
    result): claimed in a thread, the next one when 90% of the block is given out, so ids
    keep coming without a wait; the first InitProducerId before any block arrived gets the
    retriable COORDINATOR_LOAD_IN_PROGRESS."""
    claims: list[tuple[int, str]] = []
    next_start = [5000]

    def allocate_block(size: int) -> int:
        claims.append((size, threading.current_thread().name))
        start = next_start[0]
        next_start[0] += size
        return start

    async def run() -> list[int]:
        m = ProducerIdManager(tmp_path, block_size=10, allocate_block=allocate_block)
        with pytest.raises(CoordinatorLoadInProgress, match="being claimed"):
            m.generate_producer_id()
        ids = []
        while len(ids) < 30:
            try:
                ids.append(m.generate_producer_id())
            except CoordinatorLoadInProgress:
                await asyncio.sleep(0.01)
        return ids

    ids = asyncio.run(run())
    assert ids == list(range(5000, 5030))
    assert len(claims) >= 3 and all(size == 10 for size, _ in claims)
    assert all(name != threading.main_thread().name for _, name in claims)
    assert not (tmp_path / PRODUCER_ID_BLOCK_FILENAME).exists()  # ZooKeeper's, not a file


def test_a_claim_waiting_for_zookeeper_does_not_hold_the_event_loop(tmp_path):
    """ZooKeeper away: the claim waits (here on an event) while the event loop goes on and
    InitProducerId is answered at once with the retriable error naming the failure; once
    the claim succeeds, ids come again."""
    gate = threading.Event()
    attempts = [0]

    def allocate_block(size: int) -> int:
        attempts[0] += 1
        if attempts[0] == 1:
            gate.wait(10)
            raise ZooKeeperClientError("no connection to ZooKeeper at zk:2181 for 3000 ms")
        return 0

    async def run() -> None:
        m = ProducerIdManager(tmp_path, block_size=100, allocate_block=allocate_block)
        m.prefetch()
        started = time.monotonic()
        for _ in range(5):
            with pytest.raises(CoordinatorLoadInProgress):
                m.generate_producer_id()
            await asyncio.sleep(0.01)
        assert time.monotonic() - started < 1.0  # answered while the claim still waits
        gate.set()
        while attempts[0] < 2 or m._claiming is not None:
            with pytest.raises(CoordinatorLoadInProgress) as e:
                m.generate_producer_id()
            await asyncio.sleep(0.01)
        assert "no connection to ZooKeeper" in str(e.value)
        assert m.generate_producer_id() == 0

    asyncio.run(run())
