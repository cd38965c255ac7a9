"""One partition hosted by this broker, as leader or follower (Kafka's ``kafka.cluster.Partition``
and ``Replica``).

The replication state lives here; the I/O does not: the ZooKeeper write of an ISR change is the
replica manager's (:mod:`tierlog.server.replica_manager`), the clock is passed in.

Leader side (cluster-reference §3):

* each follower's fetch offset is its log end offset (LEO); Kafka's ``Replica.updateFetchState``
  rule sets its ``last_caught_up_time_ms``: the time of this fetch when it asked for the leader's
  LEO, else the time of its previous fetch when it asked for at least the LEO the leader had then;
* high watermark = the smallest LEO over the leader and the ISR (with the members an ISR
  change being written adds, KIP-497's maximal ISR), and it never goes down;
* a follower leaves the ISR when it has not caught up for ``replica.lag.time.max.ms``
  (:meth:`Partition.out_of_sync_replicas`) and joins when its LEO reaches the high watermark and
  the start of the current leader epoch (:meth:`Partition.update_follower_fetch_state`);
* ``acks=all`` waits (:meth:`Partition.wait_for_high_watermark`) until the high watermark passes
  its last offset.

A single node is a cluster of one: the broker is the leader, the only replica and the whole ISR,
so the high watermark follows the LEO after every append.

Not thread-safe: the event loop thread owns every Partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uuid

    from tierlog.log.log import Log

__all__ = ["Partition", "ReplicaState"]

#: No leader (Kafka's LeaderAndIsr.NoLeader); -2 marks a partition being deleted.
NO_LEADER = -1


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ``Replica``)."""

    log_end_offset: int = -1
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0

    def update_fetch_state(self, fetch_offset: int, now_ms: int, leader_end_offset: int) -> None:
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_end_offset: int, now_ms: int, lag_ms: int) -> bool:
        return (
            self.log_end_offset == leader_end_offset
            or now_ms - self.last_caught_up_time_ms <= lag_ms
        )


class Partition:
    """A hosted partition: its log, its replication state, and the requests waiting on it."""

    __slots__ = (
        "_hw_waiters",
        "_lock",
        "_waiters",
        "assigned_replicas",
        "index",
        "isr",
        "isr_change_pending",
        "leader_epoch",
        "leader_epoch_start_offset",
        "leader_id",
        "local_broker_id",
        "log",
        "partition_epoch",
        "pending_isr",
        "remote_replicas",
        "topic",
        "topic_id",
    )

    def __init__(
        self,
        topic: str,
        index: int,
        log: Log,
        topic_id: uuid.UUID | None,
        *,
        local_broker_id: int = 0,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.topic_id = topic_id
        self.local_broker_id = local_broker_id
        # A cluster of one until told otherwise (make_leader / make_follower).
        self.leader_id = local_broker_id
        self.leader_epoch = log.leader_epoch_cache.latest_epoch or 0
        self.leader_epoch_start_offset = 0
        self.partition_epoch = 0
        self.assigned_replicas: tuple[int, ...] = (local_broker_id,)
        self.isr: frozenset[int] = frozenset((local_broker_id,))
        self.remote_replicas: dict[int, ReplicaState] = {}
        #: An ISR change is being written to ZooKeeper; no other starts meanwhile.
        self.isr_change_pending = False
        #: The ISR being written (KIP-497's pending state), None when none is.
        self.pending_isr: frozenset[int] | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._hw_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._lock: asyncio.Lock | None = None

    # ----------------------------------------------------------------- state

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    def make_leader(
        self,
        leader_epoch: int,
        isr: Sequence[int],
        assigned: Sequence[int],
        partition_epoch: int,
        now_ms: int,
    ) -> bool:
        """Become (or stay) the leader of ``leader_epoch``: the epoch starts at the log end
        offset (so followers truncate against it, KIP-279), followers in the ISR count as just
        caught up. False when the request is stale (an older epoch)."""
        if leader_epoch < self.leader_epoch and self.is_leader:
            return False
        lg = self.log
        leo = lg.log_end_offset
        if lg.leader_epoch_cache.latest_epoch != leader_epoch:
            lg.assign_epoch_start_offset(leader_epoch, leo)
        new_epoch = leader_epoch != self.leader_epoch or not self.is_leader
        self.leader_id = self.local_broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.assigned_replicas = tuple(assigned)
        self.isr = frozenset(isr)
        self.isr_change_pending = False
        self.pending_isr = None
        if new_epoch:
            self.leader_epoch_start_offset = leo
            self.remote_replicas = {
                r: ReplicaState(last_caught_up_time_ms=now_ms if r in self.isr else 0)
                for r in assigned
                if r != self.local_broker_id
            }
        else:
            for r in assigned:
                if r != self.local_broker_id and r not in self.remote_replicas:
                    self.remote_replicas[r] = ReplicaState()
        self.maybe_increment_high_watermark()
        return True

    def make_follower(
        self,
        leader_id: int,
        leader_epoch: int,
        isr: Sequence[int],
        assigned: Sequence[int],
        partition_epoch: int,
    ) -> bool:
        """Follow ``leader_id`` in ``leader_epoch``; False when nothing changed (the same
        leader and epoch) or the request is stale."""
        if leader_epoch < self.leader_epoch:
            return False
        changed = leader_epoch != self.leader_epoch or leader_id != self.leader_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.assigned_replicas = tuple(assigned)
        self.isr = frozenset(isr)
        self.remote_replicas = {}
        self.isr_change_pending = False
        self.pending_isr = None
        self._fail_hw_waiters()
        return changed

    def update_isr(self, isr: Sequence[int], partition_epoch: int) -> None:
        """The ISR as written to ZooKeeper (by this leader or the controller)."""
        self.isr = frozenset(isr)
        self.partition_epoch = partition_epoch
        self.isr_change_pending = False
        self.pending_isr = None
        if self.is_leader:
            self.maybe_increment_high_watermark()

    def propose_isr(self, isr: frozenset[int]) -> None:
        """An ISR change is being written: none other starts until it lands
        (:meth:`update_isr`) or fails (:meth:`isr_change_failed`)."""
        self.isr_change_pending = True
        self.pending_isr = isr

    def isr_change_failed(self) -> None:
        self.isr_change_pending = False
        self.pending_isr = None

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR, with the replicas an ISR change in flight adds (KIP-497: an expansion is
        assumed before it is written, a shrink only once it is): the high watermark and
        acks=all wait for them, so a replica that joins has every acknowledged record."""
        if self.pending_isr is None:
            return self.isr
        return self.isr | self.pending_isr

    def leader_epoch_error(self, current_leader_epoch: int) -> int:
        """Kafka's ``getLocalLog(currentLeaderEpoch, fetchOnlyFromLeader=true)`` (KIP-320):
        NOT_LEADER_OR_FOLLOWER (6) when this broker does not lead; with an epoch given
        (>= 0), FENCED_LEADER_EPOCH (74) when it is older than ours, UNKNOWN_LEADER_EPOCH
        (75) when newer; else 0."""
        if not self.is_leader:
            return 6
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            return 74 if current_leader_epoch < self.leader_epoch else 75
        return 0

    # ----------------------------------------------------------------- leader side

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """Record a follower's fetch (its LEO is ``fetch_offset``); True when it should join the
        ISR (the caller writes that). Raises the high watermark when it can."""
        state = self.remote_replicas.get(replica_id)
        if state is None or fetch_offset > self.log.log_end_offset:
            # Past our log end: not a follower of this log (a fetch of another leader's
            # epoch, answered OFFSET_OUT_OF_RANGE); counting it would raise the high
            # watermark over records no follower has (Kafka reads before it updates).
            return False
        state.update_fetch_state(fetch_offset, now_ms, self.log.log_end_offset)
        self.maybe_increment_high_watermark()
        return (
            replica_id not in self.isr
            and not self.isr_change_pending
            and fetch_offset >= self.log.high_watermark
            and fetch_offset >= self.leader_epoch_start_offset
        )

    def out_of_sync_replicas(self, now_ms: int, lag_ms: int) -> set[int]:
        """The ISR members (other than the leader) that have not caught up for ``lag_ms``."""
        leo = self.log.log_end_offset
        out = set()
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            state = self.remote_replicas.get(r)
            if state is None or not state.is_caught_up(leo, now_ms, lag_ms):
                out.add(r)
        return out

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest LEO over the leader and the ISR (never lower); wakes the
        ``acks=all`` produces it completes and the fetches it makes data visible to."""
        if not self.is_leader:
            return False
        lg = self.log
        new_hw = lg.log_end_offset
        for r in self.maximal_isr:
            if r == self.local_broker_id:
                continue
            state = self.remote_replicas.get(r)
            leo = state.log_end_offset if state is not None else -1
            if leo < new_hw:
                new_hw = leo
        if new_hw < 0 or not lg.maybe_increment_high_watermark(new_hw):
            return False
        self._complete_hw_waiters(lg.high_watermark)
        self.wake_waiters()
        return True

    async def wait_for_high_watermark(self, offset: int, timeout_s: float) -> bool:
        """Wait until the high watermark is at least ``offset`` (acks=all). False on timeout
        or when this broker stops being the leader."""
        if self.log.high_watermark >= offset:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._hw_waiters.append((offset, fut))
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return False
        finally:
            if not fut.done():
                fut.cancel()
            self._hw_waiters = [w for w in self._hw_waiters if w[1] is not fut]
        return self.is_leader and self.log.high_watermark >= offset

    def _complete_hw_waiters(self, hw: int) -> None:
        if not self._hw_waiters:
            return
        keep = []
        for offset, fut in self._hw_waiters:
            if offset <= hw:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((offset, fut))
        self._hw_waiters = keep

    def _fail_hw_waiters(self) -> None:
        waiters, self._hw_waiters = self._hw_waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_result(None)  # the waiter sees it is no longer leader

    # ----------------------------------------------------------------- waiters

    def append_lock(self) -> asyncio.Lock:
        """Serialises appends that run in threads (FIFO: request order is kept)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def add_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.append(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass

    def wake_waiters(self) -> None:
        """Complete every parked fetch (after an append, a truncation or a deletion)."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def close(self) -> None:
        """The partition is no longer hosted (deleted, moved away): wake everything parked."""
        self.wake_waiters()
        self._fail_hw_waiters()

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return f"Partition({self.topic}-{self.index}, {role}, epoch {self.leader_epoch})"
