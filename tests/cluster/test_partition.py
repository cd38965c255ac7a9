"""Partition (cluster/partition.py), sans-IO: a leader's high watermark, ISR expansion and
shrink (Kafka's Partition.scala and Replica.scala rules), epoch fencing; a fake log stands in
for the real one (only its offsets and epoch cache matter here)."""

from __future__ import annotations

import asyncio
from typing import Any

from tierlog.cluster.partition import Partition, ReplicaState
from tierlog.cluster.replica_fetcher import whole_batches
from tierlog.records import build_batch

LAG_MS = 10_000


class FakeEpochCache:
    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None


class FakeLog:
    def __init__(self) -> None:
        self.log_end_offset = 0
        self.high_watermark = 0
        self.leader_epoch_cache = FakeEpochCache()

    def assign_epoch_start_offset(self, epoch: int, offset: int) -> None:
        self.leader_epoch_cache.entries.append((epoch, offset))

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        offset = min(offset, self.log_end_offset)
        if offset > self.high_watermark:
            self.high_watermark = offset
            return True
        return False


def leader(isr: tuple[int, ...] = (1, 2, 3), epoch: int = 1, leo: int = 0, now: int = 0) -> Any:
    lg = FakeLog()
    lg.log_end_offset = leo
    p = Partition("t", 0, lg, None, local_broker_id=1)  # type: ignore[arg-type]
    assert p.make_leader(epoch, isr, (1, 2, 3), 0, now)
    return p, lg


# --------------------------------------------------------------------------- high watermark


def test_the_high_watermark_is_the_smallest_log_end_offset_in_the_isr() -> None:
    p, lg = leader()
    lg.log_end_offset = 10
    assert not p.maybe_increment_high_watermark()  # the followers' offsets are unknown yet
    p.update_follower_fetch_state(2, 10, now_ms=1)
    assert lg.high_watermark == 0
    p.update_follower_fetch_state(3, 7, now_ms=1)
    assert lg.high_watermark == 7
    p.update_follower_fetch_state(3, 10, now_ms=2)
    assert lg.high_watermark == 10


def test_a_replica_outside_the_isr_does_not_hold_the_high_watermark_back() -> None:
    p, lg = leader(isr=(1, 2))
    lg.log_end_offset = 10
    p.update_follower_fetch_state(2, 10, now_ms=1)
    assert lg.high_watermark == 10  # replica 3 never fetched: not in the ISR


def test_the_high_watermark_never_goes_down() -> None:
    p, lg = leader(isr=(1, 2))
    lg.log_end_offset = 10
    p.update_follower_fetch_state(2, 10, now_ms=1)
    p.update_isr((1, 2, 3), 1)  # 3 joins with a lower offset than the high watermark
    p.update_follower_fetch_state(3, 4, now_ms=2)
    assert lg.high_watermark == 10


def test_a_fetch_past_the_leaders_log_end_is_not_counted() -> None:
    """A fetch offset beyond the leader's log end (the follower has another leader's
    records) must not make the leader believe its own suffix is replicated."""
    p, lg = leader()
    lg.log_end_offset = 10
    assert not p.update_follower_fetch_state(2, 15, now_ms=1)
    assert not p.update_follower_fetch_state(3, 15, now_ms=1)
    assert lg.high_watermark == 0
    assert p.remote_replicas[2].log_end_offset == -1


def test_acks_all_waits_for_the_high_watermark_and_fails_when_leadership_moves() -> None:
    async def scenario() -> tuple[bool, bool]:
        p, lg = leader(isr=(1, 2))
        lg.log_end_offset = 5
        done = asyncio.ensure_future(p.wait_for_high_watermark(5, 10))
        await asyncio.sleep(0)
        assert not done.done()
        p.update_follower_fetch_state(2, 5, now_ms=1)
        first = await done
        lg.log_end_offset = 8
        moved = asyncio.ensure_future(p.wait_for_high_watermark(8, 10))
        await asyncio.sleep(0)
        p.make_follower(2, 2, (1, 2), (1, 2, 3), 1)
        return first, await moved

    assert asyncio.run(scenario()) == (True, False)


# --------------------------------------------------------------------------- ISR expansion


def test_a_follower_joins_the_isr_at_the_high_watermark_and_in_the_current_epoch() -> None:
    p, lg = leader(isr=(1, 2), leo=20, epoch=3)
    assert p.leader_epoch_start_offset == 20
    lg.log_end_offset = 30
    p.update_follower_fetch_state(2, 30, now_ms=1)
    assert lg.high_watermark == 30
    assert not p.update_follower_fetch_state(3, 25, now_ms=1)  # below the high watermark
    assert p.update_follower_fetch_state(3, 30, now_ms=2)


def test_a_follower_below_the_epoch_start_does_not_join() -> None:
    """Partition.scala: a replica not yet caught up into the current leader epoch could be
    elected without records the ISR acknowledged."""
    p, lg = leader(isr=(1,), leo=20, epoch=3)
    lg.high_watermark = 10
    assert not p.update_follower_fetch_state(2, 15, now_ms=1)  # >= HW, < epoch start
    assert p.update_follower_fetch_state(2, 20, now_ms=2)


def test_no_expansion_while_an_isr_change_is_pending_and_never_for_a_member() -> None:
    p, lg = leader(isr=(1, 2))
    lg.log_end_offset = 5
    assert not p.update_follower_fetch_state(2, 5, now_ms=1)  # already in the ISR
    p.isr_change_pending = True
    assert not p.update_follower_fetch_state(3, 5, now_ms=1)
    p.update_isr((1, 2, 3), 1)  # the write landed
    assert not p.isr_change_pending and p.isr == {1, 2, 3}


def test_an_unknown_replica_never_joins() -> None:
    p, _ = leader(isr=(1, 2))
    assert not p.update_follower_fetch_state(9, 0, now_ms=1)


# --------------------------------------------------------------------------- ISR shrink


def test_a_follower_that_stops_catching_up_leaves_after_the_lag_time() -> None:
    p, lg = leader(now=0)
    lg.log_end_offset = 10
    p.update_follower_fetch_state(2, 10, now_ms=1000)
    p.update_follower_fetch_state(3, 10, now_ms=1000)
    lg.log_end_offset = 20  # new records; 3 fetches no more, 2 keeps up
    p.update_follower_fetch_state(2, 20, now_ms=1000 + LAG_MS)
    assert p.out_of_sync_replicas(1000 + LAG_MS, LAG_MS) == set()
    assert p.out_of_sync_replicas(1001 + LAG_MS, LAG_MS) == {3}


def test_an_idle_follower_at_the_log_end_stays_in_sync() -> None:
    """Kafka's isCaughtUp: a follower at the leader's log end offset is in sync whatever
    the time since it last fetched (nothing to fetch); the controller removes dead ones."""
    p, lg = leader(now=0)
    lg.log_end_offset = 10
    p.update_follower_fetch_state(2, 10, now_ms=1)
    p.update_follower_fetch_state(3, 10, now_ms=1)
    assert p.out_of_sync_replicas(10 * LAG_MS, LAG_MS) == set()


def test_the_last_caught_up_rule_of_a_slow_follower() -> None:
    """Kafka's Replica.updateFetchState: a fetch at the leader's log end counts as caught up
    now; one at least at the log end the leader had at the previous fetch counts as caught
    up at the previous fetch's time; one below, not at all."""
    r = ReplicaState()
    r.update_fetch_state(10, now_ms=100, leader_end_offset=10)
    assert r.last_caught_up_time_ms == 100
    r.update_fetch_state(10, now_ms=200, leader_end_offset=15)  # behind: leader moved on
    assert r.last_caught_up_time_ms == 100  # at the previous end (10): the previous time
    r.update_fetch_state(15, now_ms=300, leader_end_offset=20)  # reached the previous end
    assert r.last_caught_up_time_ms == 200
    r.update_fetch_state(16, now_ms=400, leader_end_offset=30)  # below the previous end (20)
    assert r.last_caught_up_time_ms == 200
    assert not r.is_caught_up(30, now_ms=200 + LAG_MS + 1, lag_ms=LAG_MS)
    assert r.is_caught_up(16, now_ms=10**9, lag_ms=LAG_MS)  # at the leader's log end


def test_a_new_leader_counts_its_isr_as_just_caught_up() -> None:
    p, lg = leader(isr=(1, 2), now=5000)
    lg.log_end_offset = 10  # nobody fetched yet
    assert p.out_of_sync_replicas(5000 + LAG_MS, LAG_MS) == set()
    assert p.out_of_sync_replicas(5001 + LAG_MS, LAG_MS) == {2}


# --------------------------------------------------------------------------- epochs, roles


def test_leader_epoch_fencing() -> None:
    p, _ = leader(epoch=5)
    assert p.leader_epoch_error(-1) == 0  # not checked
    assert p.leader_epoch_error(5) == 0
    assert p.leader_epoch_error(4) == 74  # FENCED_LEADER_EPOCH
    assert p.leader_epoch_error(6) == 75  # UNKNOWN_LEADER_EPOCH
    p.make_follower(2, 6, (2, 3), (1, 2, 3), 1)
    assert p.leader_epoch_error(6) == 6  # NOT_LEADER_OR_FOLLOWER


def test_a_new_epoch_starts_at_the_log_end_and_stale_leadership_is_refused() -> None:
    p, lg = leader(epoch=2, leo=40)
    assert lg.leader_epoch_cache.entries == [(2, 40)]
    assert not p.make_leader(1, (1, 2, 3), (1, 2, 3), 0, 0)  # older epoch
    assert not p.make_follower(2, 1, (2,), (1, 2, 3), 0)
    assert p.is_leader and p.leader_epoch == 2
    assert p.make_follower(2, 3, (2, 3), (1, 2, 3), 1)
    assert not p.make_follower(2, 3, (2, 3), (1, 2, 3), 1)  # nothing changed
    assert not p.is_leader and p.remote_replicas == {}


# --------------------------------------------------------------------------- fetched data


def test_a_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    a = build_batch([(1, b"k", b"a" * 100)])
    b = build_batch([(2, b"k", b"b" * 100)], base_offset=1)
    assert bytes(whole_batches(a + b) or b"") == a + b
    assert bytes(whole_batches(a + b[:-1]) or b"") == a
    assert bytes(whole_batches(a + b[:5]) or b"") == a  # not even a whole header
    assert bytes(whole_batches(a[:50]) or b"") == b""
    assert whole_batches(b"") == b""
    assert whole_batches(None) is None


def test_a_replica_being_added_holds_the_high_watermark_back() -> None:
    """KIP-497's maximal ISR: from the moment a follower is proposed for the ISR, the high
    watermark waits for it too, so once the write lands it has every acknowledged record;
    a shrink is not assumed before it lands."""
    p, lg = leader(isr=(1, 2))
    lg.log_end_offset = 10
    p.update_follower_fetch_state(2, 10, now_ms=1)
    assert lg.high_watermark == 10
    p.update_follower_fetch_state(3, 10, now_ms=1)
    p.propose_isr(frozenset({1, 2, 3}))
    lg.log_end_offset = 20
    p.update_follower_fetch_state(2, 20, now_ms=2)
    assert lg.high_watermark == 10  # 3 is still at 10
    p.update_follower_fetch_state(3, 20, now_ms=2)
    assert lg.high_watermark == 20
    p.update_isr((1, 2, 3), 1)
    assert p.pending_isr is None and p.maximal_isr == {1, 2, 3}
    # A shrink being written: the leaving member still counts until it lands.
    p.propose_isr(frozenset({1, 2}))
    assert p.maximal_isr == {1, 2, 3}
    lg.log_end_offset = 30
    p.update_follower_fetch_state(2, 30, now_ms=3)
    assert lg.high_watermark == 20
    p.isr_change_failed()
    assert not p.isr_change_pending and p.maximal_isr == {1, 2, 3}
