"""The classic group coordinator's membership protocol: joins, rebalances, sessions, static
members, lifecycle, and randomized runs that must keep the bookkeeping consistent.

Test parts (virtual clock, scripted members): tests/coordinator/group/group_parts.py.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Awaitable
from typing import Any

import pytest

from tierlog.coordinator.group.group_coordinator import GroupCoordinator
from tierlog.coordinator.group.group_metadata import GroupState
from tierlog.coordinator.group.member_metadata import JoinResult, SyncResult
from tierlog.coordinator.offset_store import InMemoryOffsetStore

from .group_parts import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    DELAY_MS,
    EPS,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NONE,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    Member,
    async_test,
    heartbeat_until,
    join_all,
    now,
    run_virtual,
    stable_group,
    started,
    stored_generation,
    sync_all,
    until,
)

# =========================================================================== joining


@async_test
async def test_single_member_join_sync_heartbeat():
    coord = await started()
    m = Member(coord, "solo")
    t0 = now()
    r = await m.join()
    assert r.error_code == NONE
    assert now() - t0 == pytest.approx(DELAY_MS / 1000)  # the initial delay, no more
    assert r.generation_id == 1
    assert r.leader_id == r.member_id
    assert r.member_id.startswith("solo-")
    assert (r.protocol_type, r.protocol_name) == ("consumer", "range")
    assert r.members == [(r.member_id, None, b"r")]
    assert coord.group_manager.describe_group("g").state == "CompletingRebalance"
    assert m.heartbeat() == NONE  # heartbeats are fine while completing

    s = await m.sync({m.member_id: b"mine"})
    assert s == SyncResult(NONE, "consumer", "range", b"mine")
    assert m.heartbeat() == NONE
    d = coord.group_manager.describe_group("g")
    assert (d.error_code, d.state, d.protocol_type, d.protocol) == (
        0,
        "Stable",
        "consumer",
        "range",
    )
    assert d.members == [(m.member_id, None, "solo", "/127.0.0.1", b"r", b"mine")]
    assert coord.group_manager.list_groups() == [("g", "consumer", "Stable")]
    # a SyncGroup in a Stable group returns the current assignment again
    assert (await m.sync()).assignment == b"mine"
    await coord.stop()


@async_test
async def test_member_id_required_flow():
    coord = await started()
    m = Member(coord, "cid")
    r = await m.join(require_known=True)
    assert r.error_code == MEMBER_ID_REQUIRED
    assert r.generation_id == -1
    prefix, _, uuid_part = r.member_id.partition("-")
    assert prefix == "cid" and len(uuid_part) == 36
    assert coord.group_manager.describe_group("g").state == "Empty"
    r2 = await m.join(require_known=True)
    assert r2.error_code == NONE
    assert r2.member_id == r.member_id
    assert r2.generation_id == 1
    await coord.stop()


@async_test
async def test_pending_member_expires_after_session_timeout():
    coord = await started()
    m = Member(coord, "cid", session_ms=50)
    t0 = now()
    assert (await m.join(require_known=True)).error_code == MEMBER_ID_REQUIRED
    pending = coord.group_manager.get_group("g").pending_members
    assert m.member_id in pending
    expired_at = await until(lambda: m.member_id not in pending)
    # its session, seen within the 1 ms poll (EPS: rounding of the summed poll steps)
    assert 0.05 - EPS <= expired_at - t0 <= 0.051 + EPS
    # no longer pending: its id is unknown now
    assert (await m.join(require_known=True)).error_code == UNKNOWN_MEMBER_ID
    await coord.stop()


@async_test
async def test_pending_member_holds_the_join_phase_until_it_joins():
    coord = await started()
    a, b = await stable_group(coord, 2)
    c = Member(coord, "late")
    assert (await c.join(require_known=True)).error_code == MEMBER_ID_REQUIRED
    # a pending member alone does not start a rebalance ...
    assert a.heartbeat() == NONE
    # ... but a rebalance waits for it
    a_join = asyncio.ensure_future(a.join())
    b_join = asyncio.ensure_future(b.join())
    await asyncio.sleep(0.05)
    assert not a_join.done()
    await c.join()
    results = await asyncio.gather(a_join, b_join)
    assert {r.generation_id for r in results} == {c.generation} == {2}
    await coord.stop()


@async_test
async def test_three_members_initial_delay_then_one_generation():
    coord = await started()
    members = [Member(coord, f"c{i}") for i in range(3)]
    t0 = now()

    async def staggered(i: int, m: Member) -> JoinResult:
        await asyncio.sleep(0.015 * i)
        return await m.join()

    results = await asyncio.gather(*(staggered(i, m) for i, m in enumerate(members)))
    # members arrived during the delay (at 15 and 30 ms): it is extended once, by one delay
    assert now() - t0 == pytest.approx(2 * DELAY_MS / 1000)
    assert {r.error_code for r in results} == {NONE}
    assert {r.generation_id for r in results} == {1}
    assert len({r.leader_id for r in results}) == 1
    leader = [m for m in members if m.is_leader]
    assert len(leader) == 1
    assert leader[0].member_id == members[0].member_id  # first to join leads
    assert sorted(mid for mid, _, _ in results[0].members) == sorted(m.member_id for m in members)
    assert [r.members for r in results[1:]] == [[], []]  # metadata goes to the leader only

    syncs = await sync_all(members)
    assert [s.assignment for s in syncs] == [b"a-c0", b"a-c1", b"a-c2"]
    assert coord.group_manager.describe_group("g").state == "Stable"
    await coord.stop()


@async_test
async def test_initial_delay_extension_is_bounded_by_the_rebalance_timeout():
    coord = await started(initial_rebalance_delay_ms=100)
    members = [Member(coord, f"c{i}", rebalance_ms=300) for i in range(7)]
    t0 = now()
    finished: list[float] = []

    async def staggered(i: int, m: Member) -> JoinResult:
        await asyncio.sleep(0.04 * i)  # a new member every 40 ms, until 240 ms
        r = await m.join()
        finished.append(now() - t0)
        return r

    results = await asyncio.gather(*(staggered(i, m) for i, m in enumerate(members)))
    assert {r.generation_id for r in results} == {1}
    # delay steps of 100 ms while members keep coming, but never past the 300 ms timeout
    # (members joined between 200 and 300 ms: one more step would end it at 400 ms)
    assert finished == [pytest.approx(0.3)] * len(members)
    await coord.stop()


@async_test
async def test_protocol_selection():
    coord = await started()
    a = Member(coord, "a", protocols=[("range", b"ra"), ("roundrobin", b"rra")])
    b = Member(coord, "b", protocols=[("roundrobin", b"rrb"), ("range", b"rb")])
    c = Member(coord, "c", protocols=[("roundrobin", b"rrc"), ("sticky", b"sc")])
    results = await join_all([a, b, c])
    # range is not supported by c: roundrobin is the only common protocol
    assert {r.protocol_name for r in results} == {"roundrobin"}
    leader = next(r for r in results if r.members)
    assert sorted(md for _, _, md in leader.members) == [b"rra", b"rrb", b"rrc"]

    g2 = [
        Member(coord, "x", group="g2", protocols=[("p", b""), ("q", b"")]),
        Member(coord, "y", group="g2", protocols=[("q", b""), ("p", b"")]),
        Member(coord, "z", group="g2", protocols=[("p", b""), ("q", b"")]),
    ]
    assert {r.protocol_name for r in await join_all(g2)} == {"p"}  # two votes against one
    await coord.stop()


@async_test
async def test_inconsistent_protocols_are_rejected():
    coord = await started()
    await stable_group(coord, 1)
    other_type = Member(coord, "x", protocol_type="connect")
    assert (await other_type.join()).error_code == INCONSISTENT_GROUP_PROTOCOL
    no_common = Member(coord, "y", protocols=[("sticky", b"")])
    assert (await no_common.join()).error_code == INCONSISTENT_GROUP_PROTOCOL
    nothing = Member(coord, "z", group="fresh", protocols=[])
    assert (await nothing.join()).error_code == INCONSISTENT_GROUP_PROTOCOL
    no_type = Member(coord, "z", group="fresh2", protocol_type="")
    assert (await no_type.join()).error_code == INCONSISTENT_GROUP_PROTOCOL
    await coord.stop()


@async_test
async def test_request_validation_errors():
    coord = await started(min_session_timeout_ms=100, max_session_timeout_ms=1000)
    (a,) = await stable_group(coord, 1, session_ms=500)
    assert (await Member(coord, "x", session_ms=50).join()).error_code == INVALID_SESSION_TIMEOUT
    assert (await Member(coord, "x", session_ms=2000).join()).error_code == INVALID_SESSION_TIMEOUT
    assert (await Member(coord, "x", group="").join()).error_code == INVALID_GROUP_ID
    assert coord.heartbeat("", 1, a.member_id, None) == INVALID_GROUP_ID
    stranger = Member(coord, "x", member_id="nobody", session_ms=500)
    assert (await stranger.join()).error_code == UNKNOWN_MEMBER_ID
    assert (
        await Member(coord, "x", group="nogroup", member_id="m", session_ms=500).join()
    ).error_code == (UNKNOWN_MEMBER_ID)
    await coord.stop()


@async_test
async def test_illegal_generation_and_unknown_member():
    coord = await started()
    (a,) = await stable_group(coord, 1)
    assert coord.heartbeat("g", a.generation + 1, a.member_id, None) == ILLEGAL_GENERATION
    assert coord.heartbeat("g", a.generation, "nobody", None) == UNKNOWN_MEMBER_ID
    assert coord.heartbeat("nogroup", 1, a.member_id, None) == UNKNOWN_MEMBER_ID
    sync = await coord.sync_group("g", a.generation - 1, a.member_id, None, None, None, {})
    assert sync.error_code == ILLEGAL_GENERATION
    sync = await coord.sync_group("g", a.generation, "nobody", None, None, None, {})
    assert sync.error_code == UNKNOWN_MEMBER_ID
    sync = await coord.sync_group("g", a.generation, a.member_id, None, "consumer", "other", {})
    assert sync.error_code == INCONSISTENT_GROUP_PROTOCOL
    sync = await coord.sync_group("nogroup", 1, a.member_id, None, None, None, {})
    assert sync.error_code == UNKNOWN_MEMBER_ID
    commit = await coord.commit_offsets(
        "g", a.generation + 1, a.member_id, None, {("t", 0): (1, -1, None)}
    )
    assert commit == {("t", 0): ILLEGAL_GENERATION}
    commit = await coord.commit_offsets(
        "g", a.generation, "nobody", None, {("t", 0): (1, -1, None)}
    )
    assert commit == {("t", 0): UNKNOWN_MEMBER_ID}
    await coord.stop()


# =========================================================================== rebalancing


@async_test
async def test_member_leaving_triggers_rebalance_and_others_rejoin():
    coord = await started()
    a, b, c = await stable_group(coord, 3)
    top, per_member = await coord.leave_group("g", [(c.member_id, None)])
    assert (top, per_member) == (NONE, [(c.member_id, None, NONE)])
    assert coord.group_manager.describe_group("g").state == "PreparingRebalance"
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    assert b.heartbeat() == REBALANCE_IN_PROGRESS
    assert c.heartbeat() == UNKNOWN_MEMBER_ID
    t0 = now()
    results = await join_all([a, b])
    assert now() - t0 == 0  # completes as soon as both rejoined: no timer had to fire
    assert {r.generation_id for r in results} == {2}
    assert sorted(mid for mid, _, _ in next(r for r in results if r.members).members) == sorted(
        [a.member_id, b.member_id]
    )
    syncs = await sync_all([a, b])
    assert sorted(s.assignment for s in syncs) == [b"a-c0", b"a-c1"]
    # leaving members that do not exist
    top, per_member = await coord.leave_group("g", [("ghost", None)])
    assert per_member == [("ghost", None, UNKNOWN_MEMBER_ID)]
    top, per_member = await coord.leave_group("nogroup", [("ghost", None)])
    assert (top, per_member) == (NONE, [("ghost", None, UNKNOWN_MEMBER_ID)])
    await coord.stop()


@async_test
async def test_last_member_leaving_empties_the_group():
    store = InMemoryOffsetStore()
    coord = await started(store)
    (a,) = await stable_group(coord, 1)
    await coord.leave_group("g", [(a.member_id, None)])
    d = coord.group_manager.describe_group("g")
    assert (d.state, d.members) == ("Empty", [])
    # the empty generation is stored in the background
    await until(lambda: stored_generation(store, coord, "g").generation == 2)
    assert stored_generation(store, coord, "g").members == ()
    await coord.stop()


@async_test
async def test_session_timeout_expires_a_silent_member():
    coord = await started()
    a, b, c = await stable_group(coord, 3, session_ms=150)
    t0 = now()  # the sync completed: every session restarted
    await heartbeat_until([a, b], REBALANCE_IN_PROGRESS)  # c stays silent
    # c's 150 ms session ran out; the others heard it at their next heartbeat (every 10 ms)
    assert 0.15 - EPS <= now() - t0 <= 0.16 + EPS
    assert c.heartbeat() == UNKNOWN_MEMBER_ID
    results = await join_all([a, b])
    assert {r.generation_id for r in results} == {2}
    await sync_all([a, b])
    assert len(coord.group_manager.describe_group("g").members) == 2
    # the survivors keep their membership as long as they heartbeat
    for _ in range(15):
        assert a.heartbeat() == NONE and b.heartbeat() == NONE
        await asyncio.sleep(0.01)
    await coord.stop()


@async_test
async def test_rebalance_timeout_removes_members_that_do_not_rejoin():
    coord = await started()
    a, b = await stable_group(coord, 2, rebalance_ms=300)
    d = Member(coord, "d", rebalance_ms=300)
    t0 = now()
    d_join = asyncio.ensure_future(d.join())
    await asyncio.sleep(0.01)
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    a_join = asyncio.ensure_future(a.join())
    joined_at: list[float] = []
    a_join.add_done_callback(lambda _: joined_at.append(now()))
    # b heartbeats but never rejoins: the join phase ends at the rebalance timeout
    while not a_join.done():
        b.heartbeat()
        await asyncio.sleep(0.02)
    assert joined_at == [pytest.approx(t0 + 0.3)]
    ra, rd = await asyncio.gather(a_join, d_join)
    assert ra.generation_id == rd.generation_id == 2
    assert b.heartbeat() == UNKNOWN_MEMBER_ID
    assert len(coord.group_manager.describe_group("g").members) == 2
    await coord.stop()


@async_test
async def test_members_that_never_sync_are_removed():
    coord = await started()
    a, b = [Member(coord, f"c{i}", rebalance_ms=150) for i in range(2)]
    await join_all([a, b])
    leader, follower = (a, b) if a.is_leader else (b, a)
    s = await leader.sync({leader.member_id: b"x", follower.member_id: b"y"})
    assert s.assignment == b"x"
    assert coord.group_manager.describe_group("g").state == "Stable"
    # the follower never sends SyncGroup: after the rebalance timeout it is dropped
    await heartbeat_until([leader], REBALANCE_IN_PROGRESS)
    assert follower.heartbeat() == UNKNOWN_MEMBER_ID
    await coord.stop()


@async_test
async def test_rejoin_during_completing_rebalance_fails_pending_syncs():
    coord = await started()
    a, b = [Member(coord, f"c{i}") for i in range(2)]
    await join_all([a, b])
    leader, follower = (a, b) if a.is_leader else (b, a)
    follower_sync = asyncio.ensure_future(follower.sync())
    await asyncio.sleep(0.01)
    assert not follower_sync.done()  # waits for the leader
    commit = await follower.commit({("t", 0): (1, -1, None)})
    assert commit == {("t", 0): REBALANCE_IN_PROGRESS}
    # the follower changes its subscription: rebalance, the parked sync is told to rejoin
    follower.protocols = [("range", b"new")]
    rejoin = asyncio.ensure_future(follower.join())
    assert (await follower_sync).error_code == REBALANCE_IN_PROGRESS
    await asyncio.gather(rejoin, leader.join())
    assert leader.generation == follower.generation == 2
    await coord.stop()


@async_test
async def test_a_follower_rejoining_a_stable_group_unchanged_gets_current_generation():
    coord = await started()
    a, b = await stable_group(coord, 2)
    follower = b if a.is_leader else a
    r = await follower.join()
    assert r.error_code == NONE and r.generation_id == 1 and r.members == []
    assert coord.group_manager.describe_group("g").state == "Stable"
    # whereas the leader rejoining forces a rebalance
    leader = a if a.is_leader else b
    leader_join = asyncio.ensure_future(leader.join())
    await asyncio.sleep(0.01)
    assert coord.group_manager.describe_group("g").state == "PreparingRebalance"
    await follower.join()
    assert (await leader_join).generation_id == 2
    await coord.stop()


# =========================================================================== static members


@async_test
async def test_static_member_rejoin_keeps_assignment_and_fences_old_id():
    coord = await started()
    a = Member(coord, "a", instance="inst-a")
    b = Member(coord, "b")
    # a static member is never told MEMBER_ID_REQUIRED
    ra = asyncio.ensure_future(a.join(require_known=True))
    await asyncio.sleep(0.005)
    await b.join()
    assert (await ra).error_code == NONE
    assert a.member_id.startswith("inst-a-")
    await sync_all([a, b])
    old_id, was_leader = a.member_id, a.is_leader
    leader_before = a.last.leader_id if a.last else None

    # a restarts: same instance id, no member id
    restarted = Member(coord, "a", instance="inst-a")
    r = await restarted.join()
    assert r.error_code == NONE
    assert r.member_id != old_id and r.generation_id == 1
    assert r.leader_id == leader_before  # old leader id: no trivial reassignment
    assert r.members == []
    assert coord.group_manager.describe_group("g").state == "Stable"  # no rebalance
    assert a.heartbeat() == FENCED_INSTANCE_ID
    assert restarted.heartbeat() == NONE
    assert (await restarted.sync()).assignment == b"a-a"
    members = {m[0] for m in coord.group_manager.describe_group("g").members}
    assert members == {restarted.member_id, b.member_id}
    # a joined first, so it led; its leadership moved to the new member id
    assert was_leader
    b.protocols = [("range", b"changed")]  # force a rebalance
    results = await asyncio.gather(b.join(), restarted.join())
    assert {r.leader_id for r in results} == {restarted.member_id}

    # admin removal by instance id
    _, per_member = await coord.leave_group("g", [("", "inst-a")])
    assert per_member == [("", "inst-a", NONE)]
    assert b.heartbeat() == REBALANCE_IN_PROGRESS
    await coord.stop()


@async_test
async def test_static_member_survives_a_rebalance_without_rejoining():
    coord = await started()
    a = Member(coord, "a", instance="inst-a", rebalance_ms=150)
    b = Member(coord, "b", rebalance_ms=150)
    await stable_group_of(coord, [a, b])
    c = Member(coord, "c", rebalance_ms=150)
    c_join = asyncio.ensure_future(c.join())
    await asyncio.sleep(0.01)
    await b.join()  # a (static) does not rejoin; the phase ends at the rebalance timeout
    assert (await c_join).generation_id == 2
    # the static member stays in the group (until its session expires)
    assert any(m[1] == "inst-a" for m in coord.group_manager.describe_group("g").members)
    await coord.stop()


async def stable_group_of(coord: GroupCoordinator, members: list[Member]) -> None:
    assert {r.error_code for r in await join_all(members)} == {NONE}
    assert {s.error_code for s in await sync_all(members)} == {NONE}


# =========================================================================== lifecycle


@async_test
async def test_requests_before_start_and_after_stop():
    coord = GroupCoordinator(InMemoryOffsetStore(), initial_rebalance_delay_ms=DELAY_MS)
    assert coord.group_manager.availability_error() == COORDINATOR_LOAD_IN_PROGRESS
    assert (await Member(coord, "x", session_ms=6000).join()).error_code == (
        COORDINATOR_LOAD_IN_PROGRESS
    )
    assert await coord.commit_offsets("g", -1, "", None, {("t", 0): (1, -1, None)}) == {
        ("t", 0): COORDINATOR_LOAD_IN_PROGRESS
    }
    await coord.start()
    with pytest.raises(RuntimeError):
        await coord.start()
    parked = asyncio.ensure_future(Member(coord, "x", session_ms=6000).join())
    await asyncio.sleep(0.005)
    await coord.stop()
    # parked requests are sent to find the coordinator again
    assert (await parked).error_code == NOT_COORDINATOR
    assert coord.offset_manager.fetch_offsets("g", None) == (COORDINATOR_NOT_AVAILABLE, {})
    assert coord.heartbeat("g", 1, "m", None) == COORDINATOR_NOT_AVAILABLE
    assert coord.group_manager.describe_group("g").error_code == COORDINATOR_NOT_AVAILABLE
    assert coord.group_manager.list_groups() == []


@async_test
async def test_cancelled_join_does_not_break_the_group():
    coord = await started()
    a, b = Member(coord, "a"), Member(coord, "b")
    a_task = asyncio.ensure_future(a.join())
    await asyncio.sleep(0.005)
    b_task = asyncio.ensure_future(b.join())
    await asyncio.sleep(0.005)
    b_task.cancel()  # b's connection closed while parked
    ra = await a_task
    assert ra.error_code == NONE and len(ra.members) == 2
    await coord.stop()


# =========================================================================== randomized


def check_invariants(coord: GroupCoordinator) -> None:
    """Bookkeeping that must hold between any two events."""
    for g in coord.group_manager.current_groups():
        ms = g.members
        assert all(mid == m.member_id for mid, m in ms.items())
        assert g.num_members_awaiting_join == sum(m.is_awaiting_join for m in ms.values())
        assert (g.leader_id in ms) if ms else g.leader_id is None
        assert g.static_members == {
            m.group_instance_id: mid for mid, m in ms.items() if m.group_instance_id is not None
        }
        assert +g.supported_protocols == Counter(n for m in ms.values() for n, _ in m.protocols)
        assert min(g.supported_protocols.values(), default=0) >= 0
        assert g.pending_sync_members <= ms.keys()
        assert not g.pending_members.keys() & ms.keys()
        if g.state is GroupState.EMPTY:
            assert not ms
        if g.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert ms and g.protocol_name is not None
        if g.state is GroupState.PREPARING_REBALANCE:
            assert g.join_timer is not None  # or the group would never leave it
        for m in ms.values():
            # every member can still expire, or is parked and will be rescheduled
            assert m.heartbeat_timer is not None or m.is_awaiting_join or m.is_awaiting_sync


PROTOCOL_SETS = [
    [("range", b"r")],
    [("range", b"r"), ("roundrobin", b"rr")],
    [("roundrobin", b"rr"), ("range", b"r2")],
]


async def well_behaved(m: Member, stop: asyncio.Event, synced: dict[str, bool]) -> None:
    """A consumer as real clients implement one: rejoin on 22/27, reset the id on 25/82."""
    while not stop.is_set():
        synced[m.client_id] = False
        r = await m.join(require_known=True)
        if r.error_code == MEMBER_ID_REQUIRED:
            continue
        if r.error_code in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
            m.member_id = ""
            continue
        if r.error_code != NONE:
            await asyncio.sleep(0.005)
            continue
        assignments = {mid: b"x" for mid, _, _ in r.members} if m.is_leader else {}
        s = await m.sync(assignments)
        if s.error_code in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
            m.member_id = ""
        if s.error_code != NONE:
            continue
        synced[m.client_id] = True
        while not stop.is_set():
            await asyncio.sleep(m.session_ms / 4000)
            err = m.heartbeat()
            if err in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
                m.member_id = ""
            if err != NONE:
                break


@pytest.mark.parametrize("seed", range(3))
def test_random_operations_keep_invariants_then_converge(seed, caplog):
    async def main() -> None:
        rng = random.Random(seed)
        store = InMemoryOffsetStore()
        store.append_delay = rng.choice([0.0, 0.003])
        coord = await started(store, initial_rebalance_delay_ms=20)
        clients = [
            Member(
                coord,
                f"c{i}",
                group=rng.choice(["g1", "g2"]),
                session_ms=rng.choice([60, 120, 300]),
                rebalance_ms=rng.choice([80, 200]),
                instance=f"i{i}" if rng.random() < 0.3 else None,
                protocols=rng.choice(PROTOCOL_SETS),
            )
            for i in range(5)
        ]
        tasks: set[asyncio.Future[Any]] = set()

        def spawn(coro: Awaitable[Any]) -> None:
            tasks.add(asyncio.ensure_future(coro))

        # phase 1: chaos - anything in any order, invariants checked after every event
        for _ in range(150):
            c = rng.choice(clients)
            op = rng.random()
            if op < 0.25:
                spawn(c.join(require_known=rng.random() < 0.5))
            elif op < 0.4:
                ids = [mid for mid, _, _ in c.last.members] if c.last else []
                spawn(c.sync(dict.fromkeys(ids, b"a")))
            elif op < 0.6:
                c.heartbeat()
            elif op < 0.65:
                spawn(coord.leave_group(c.group, [(c.member_id, c.instance)]))
            elif op < 0.75:
                tp = ("t", rng.randrange(3))
                spawn(c.commit({tp: (rng.randrange(-2, 100), -1, None)}))
            elif op < 0.8:
                c.member_id = ""  # the client restarted
            else:
                await asyncio.sleep(rng.random() * 0.02)
            await asyncio.sleep(0)
            check_invariants(coord)
        # every parked request is answered in bounded time (rebalance/session timeouts)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5)
            assert not pending
        check_invariants(coord)

        # phase 2: everyone behaves; each group must end Stable with exactly its clients
        stop = asyncio.Event()
        synced: dict[str, bool] = {}
        loops = [asyncio.ensure_future(well_behaved(c, stop, synced)) for c in clients]

        def converged() -> bool:
            for name in ("g1", "g2"):
                cs = [c for c in clients if c.group == name]
                g = coord.group_manager.get_group(name)
                if not cs:
                    continue
                if g is None or g.state is not GroupState.STABLE:
                    return False
                if set(g.members) != {c.member_id for c in cs}:
                    return False
                if not all(synced.get(c.client_id) and c.generation == g.generation_id for c in cs):
                    return False
            return True

        deadline = now() + 5
        while not converged():
            assert now() < deadline, f"no convergence: {list(coord.group_manager.current_groups())}"
            check_invariants(coord)
            await asyncio.sleep(0.01)
        stop.set()
        await coord.stop()
        await asyncio.wait_for(asyncio.gather(*loops), timeout=5)

    with caplog.at_level(logging.WARNING, logger="tierlog.coordinator.group"):
        run_virtual(main())
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
