"""The group coordinator's test parts: a virtual-clock event loop, scripted consumers
(:class:`Member`), a started coordinator over an in-memory store, error codes.

Every test runs its own event loop (``@async_test``: pytest-asyncio is not used) on a virtual
clock (:class:`VirtualClockLoop`): the coordinator's timers are ``loop.call_later``/``call_at``,
and this loop's clock only moves when every task waits for a timer, straight to the earliest
one. Timers fire in deadline order and at their exact time however loaded the machine is, so
the tests assert exact durations (the initial delay, a session, a rebalance timeout) instead
of wall-clock ranges, and take no real time waiting.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tierlog.coordinator.group.group_coordinator import GroupCoordinator
from tierlog.coordinator.group.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    decode_key,
)
from tierlog.coordinator.group.member_metadata import JoinResult, SyncResult
from tierlog.coordinator.offset_store import InMemoryOffsetStore

NONE = 0
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82

DELAY_MS = 60  # group.initial.rebalance.delay.ms in these tests


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock stands still while anything is ready to run, and jumps to
    the next timer when nothing is: no timer fires early or late, whatever the machine's
    load. Sockets still work (polled without waiting); with no timer at all it blocks on
    them as usual."""

    def __init__(self) -> None:
        self._now = 1000.0
        loop = self

        class JumpingSelector(selectors.DefaultSelector):
            def select(self, timeout: float | None = None) -> Any:
                if timeout is None:
                    return super().select(None)
                ready = super().select(0)
                if not ready:
                    loop._now += timeout  # idle until the next timer: it is due now
                return ready

        super().__init__(JumpingSelector())

    def time(self) -> float:
        return self._now


def run_virtual(coro: Awaitable[None]) -> None:
    """Run ``coro`` on a fresh :class:`VirtualClockLoop` (20 virtual seconds at most)."""

    async def main() -> None:
        await asyncio.wait_for(coro, timeout=20)

    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        runner.run(main())


#: Rounding error allowed on a virtual time reached by many small sleeps.
EPS = 1e-6


def now() -> float:
    """The running loop's clock (virtual in these tests), in seconds."""
    return asyncio.get_running_loop().time()


def async_test(fn: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    """Run an ``async def`` test on a fresh virtual clock, with a hard timeout."""

    def run() -> None:
        run_virtual(fn())

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


async def started(store: InMemoryOffsetStore | None = None, **kw: Any) -> GroupCoordinator:
    kw.setdefault("initial_rebalance_delay_ms", DELAY_MS)
    kw.setdefault("min_session_timeout_ms", 10)
    kw.setdefault("max_session_timeout_ms", 60_000)
    kw.setdefault("offsets_topic_num_partitions", 5)
    coord = GroupCoordinator(store if store is not None else InMemoryOffsetStore(), **kw)
    await coord.start()
    return coord


@dataclass
class Member:
    """A scripted consumer."""

    coord: GroupCoordinator
    client_id: str
    group: str = "g"
    protocols: list[tuple[str, bytes]] = field(default_factory=lambda: [("range", b"r")])
    session_ms: int = 5000
    rebalance_ms: int = 2000
    instance: str | None = None
    protocol_type: str = "consumer"
    member_id: str = ""
    generation: int = -1
    last: JoinResult | None = None

    async def join(self, require_known: bool = False) -> JoinResult:
        r = await self.coord.join_group(
            self.group,
            self.member_id,
            self.instance,
            self.protocol_type,
            self.protocols,
            self.session_ms,
            self.rebalance_ms,
            self.client_id,
            "/127.0.0.1",
            require_known,
        )
        if r.error_code in (NONE, MEMBER_ID_REQUIRED):
            self.member_id = r.member_id
        if r.error_code == NONE:
            self.generation = r.generation_id
            self.last = r
        return r

    async def sync(self, assignments: dict[str, bytes] | None = None) -> SyncResult:
        return await self.coord.sync_group(
            self.group,
            self.generation,
            self.member_id,
            self.instance,
            self.protocol_type,
            self.last.protocol_name if self.last else None,
            assignments or {},
        )

    def heartbeat(self) -> int:
        return self.coord.heartbeat(self.group, self.generation, self.member_id, self.instance)

    async def commit(
        self, offsets: dict[tuple[str, int], tuple[int, int, str | None]]
    ) -> dict[tuple[str, int], int]:
        return await self.coord.commit_offsets(
            self.group, self.generation, self.member_id, self.instance, offsets
        )

    @property
    def is_leader(self) -> bool:
        return self.last is not None and self.last.leader_id == self.member_id


async def join_all(members: list[Member]) -> list[JoinResult]:
    return list(await asyncio.gather(*(m.join() for m in members)))


async def sync_all(members: list[Member]) -> list[SyncResult]:
    """Everyone syncs; the leader assigns ``b"a-<client id>"`` to each member."""
    by_id = {m.member_id: m for m in members}

    async def one(m: Member) -> SyncResult:
        assignments = {}
        if m.is_leader:
            assert m.last is not None
            assignments = {
                mid: f"a-{by_id[mid].client_id}".encode() for mid, _, _ in m.last.members
            }
        return await m.sync(assignments)

    return list(await asyncio.gather(*(one(m) for m in members)))


async def stable_group(coord: GroupCoordinator, n: int, **kw: Any) -> list[Member]:
    members = [Member(coord, f"c{i}", **kw) for i in range(n)]
    results = await join_all(members)
    assert [r.error_code for r in results] == [NONE] * n
    syncs = await sync_all(members)
    assert [s.error_code for s in syncs] == [NONE] * n
    assert coord.group_manager.describe_group(members[0].group).state == "Stable"
    return members


async def until(condition: Callable[[], bool], step: float = 0.001) -> float:
    """Wait for a state, polling every ``step`` (5 s deadline); the time it was seen."""
    deadline = now() + 5
    while not condition():
        assert now() < deadline, "the state was not reached"
        await asyncio.sleep(step)
    return now()


def stored_generation(store: InMemoryOffsetStore, coord: GroupCoordinator, group: str) -> Any:
    """The group's latest GroupMetadataValue in the store (None if none)."""
    values = [
        GroupMetadataValue.decode(v)
        for k, v in store.partitions[coord.group_manager.partition_for(group)]
        if isinstance(decode_key(k), GroupMetadataKey) and v is not None
    ]
    return values[-1] if values else None


async def heartbeat_until(members: list[Member], code: int, every: float = 0.01) -> None:
    """Heartbeat like a consumer until each member sees ``code``."""
    waiting = list(members)
    while waiting:
        waiting = [m for m in waiting if m.heartbeat() != code]
        await asyncio.sleep(every)
