"""The KIP-848 side of the coordinator on a virtual clock over an in-memory store: session
and rebalance timeouts fence members, the group is rebuilt from the store after a restart,
classic and consumer groups share the id space as Kafka 4's, commits and fetches check member
epochs, ListGroups / DescribeGroups / DeleteGroups know both kinds."""

from __future__ import annotations

import asyncio
import uuid

from tierlog.coordinator.group.consumer_group import (
    ConsumerGroupConfig,
    ConsumerGroupState,
    HeartbeatRequest,
    TopicImage,
)
from tierlog.coordinator.group.consumer_group_records import decode_consumer_group_key
from tierlog.coordinator.offset_store import InMemoryOffsetStore

from .group_parts import (
    GROUP_ID_NOT_FOUND,
    INCONSISTENT_GROUP_PROTOCOL,
    NONE,
    UNKNOWN_MEMBER_ID,
    Member,
    async_test,
    now,
    stable_group,
    started,
)

FENCED_MEMBER_EPOCH = 110
STALE_MEMBER_EPOCH = 113
NON_EMPTY_GROUP = 68

T1 = uuid.UUID(int=11)
TOPICS = {"orders": TopicImage(T1, 4)}
CONFIG = ConsumerGroupConfig(session_timeout_ms=3000, heartbeat_interval_ms=500)


async def coordinator(store=None):
    return await started(store, consumer_group_config=CONFIG, topics=lambda: TOPICS)


def join_req(member_id, **kw):
    return HeartbeatRequest(
        member_id,
        0,
        rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 1000),
        subscribed_topic_names=("orders",),
        owned_topic_partitions={},
        **kw,
    )


@async_test
async def test_join_answers_after_the_records_are_stored_and_a_restart_keeps_the_group():
    store = InMemoryOffsetStore()
    coord = await coordinator(store)
    a = await coord.consumer_groups.heartbeat("g", join_req("a"))
    assert (a.error_code, a.member_epoch, a.heartbeat_interval_ms) == (NONE, 1, 500)
    assert a.assignment == {T1: frozenset(range(4))}
    types = sorted(
        {decode_consumer_group_key(k).record_type for p in store.partitions.values() for k, _ in p}
    )
    assert types == [3, 5, 6, 7, 8]
    commit = await coord.commit_offsets("g", 1, "a", None, {("orders", 0): (7, -1, "m")})
    assert commit == {("orders", 0): NONE}
    await coord.stop()

    again = await coordinator(store)
    group = again.group_manager.consumer_groups["g"]
    assert (group.group_epoch, group.assignment_epoch) == (1, 1)
    assert group.members["a"].assignment.assigned == {T1: frozenset(range(4))}
    assert group.state is ConsumerGroupState.STABLE
    assert again.offset_manager.fetch_offsets("g", [("orders", 0)])[1] == {
        ("orders", 0): (7, -1, "m")
    }
    # the member goes on with its epoch
    r = await again.consumer_groups.heartbeat("g", HeartbeatRequest("a", 1))
    assert (r.error_code, r.member_epoch) == (NONE, 1)
    await again.stop()


@async_test
async def test_session_timeout_fences_a_silent_member():
    coord = await coordinator()
    await coord.consumer_groups.heartbeat("g", join_req("a"))
    t0 = now()
    b = await coord.consumer_groups.heartbeat("g", join_req("b"))
    assert b.member_epoch == 2
    group = coord.group_manager.consumer_groups["g"]

    async def keep_a_alive():
        while "b" in group.members:
            m = group.members["a"]
            owned = dict(m.assignment.assigned)
            await coord.consumer_groups.heartbeat(
                "g", HeartbeatRequest("a", m.member_epoch, owned_topic_partitions=owned)
            )
            await asyncio.sleep(0.5)

    await keep_a_alive()
    assert abs(now() - t0 - 3.0) <= 0.5  # b's session: 3 s
    assert set(group.members) == {"a"}
    r = await coord.consumer_groups.heartbeat("g", HeartbeatRequest("b", 2))
    assert r.error_code == UNKNOWN_MEMBER_ID
    await coord.stop()


@async_test
async def test_a_member_that_does_not_revoke_in_time_is_fenced():
    coord = await coordinator()
    await coord.consumer_groups.heartbeat("g", join_req("a", rebalance_timeout_ms=800))
    await coord.consumer_groups.heartbeat("g", join_req("b"))
    group = coord.group_manager.consumer_groups["g"]
    r = await coord.consumer_groups.heartbeat("g", HeartbeatRequest("a", 1))  # told to revoke
    assert sum(len(p) for p in r.assignment.values()) == 2
    t0 = now()
    while "a" in group.members:  # b keeps heartbeating, a never acknowledges
        await coord.consumer_groups.heartbeat("g", HeartbeatRequest("b", 2))
        await asyncio.sleep(0.1)
    assert abs(now() - t0 - 0.8) <= 0.15
    r = await coord.consumer_groups.heartbeat(
        "g", HeartbeatRequest("b", group.members["b"].member_epoch, owned_topic_partitions={})
    )
    assert sum(len(p) for p in r.assignment.values()) == 4
    r = await coord.consumer_groups.heartbeat("g", HeartbeatRequest("a", 1))
    assert r.error_code == UNKNOWN_MEMBER_ID
    await coord.stop()


@async_test
async def test_classic_and_consumer_groups_share_the_id_space():
    coord = await coordinator()
    await stable_group(coord, 2, group="classic")
    r = await coord.consumer_groups.heartbeat("classic", join_req("x"))
    assert r.error_code == GROUP_ID_NOT_FOUND
    assert r.error_message == "Group classic is not a consumer group."

    await coord.consumer_groups.heartbeat("modern", join_req("a"))
    joined = await Member(coord, "late", group="modern").join()
    assert joined.error_code == INCONSISTENT_GROUP_PROTOCOL
    listed = coord.group_manager.list_groups()
    assert [g[0] for g in listed] == ["classic"]
    assert coord.group_manager.list_consumer_groups() == ["modern"]
    assert coord.group_manager.describe_group("modern").error_code == GROUP_ID_NOT_FOUND
    d = coord.consumer_groups.describe("classic")
    assert (d.error_code, d.error_message) == (
        GROUP_ID_NOT_FOUND,
        "Group classic is not a consumer group.",
    )
    assert coord.consumer_groups.describe("modern").members[0].member_id == "a"
    assert (await coord.group_manager.delete_groups(["modern"])) == {"modern": NON_EMPTY_GROUP}

    # An empty classic group (offsets only) becomes a consumer group and keeps its offsets;
    # an empty consumer group becomes a classic one again on JoinGroup.
    await coord.commit_offsets("simple", -1, "", None, {("orders", 1): (5, -1, "")})
    r = await coord.consumer_groups.heartbeat("simple", join_req("s"))
    assert r.error_code == NONE
    assert coord.offset_manager.fetch_offsets("simple", [("orders", 1)])[1][("orders", 1)][0] == 5
    assert (
        await coord.consumer_groups.heartbeat("simple", HeartbeatRequest("s", -1))
    ).error_code == NONE
    m = Member(coord, "back", group="simple")
    assert (await m.join()).error_code == NONE
    assert "simple" not in coord.group_manager.consumer_groups
    assert coord.offset_manager.fetch_offsets("simple", [("orders", 1)])[1][("orders", 1)][0] == 5
    await coord.stop()


@async_test
async def test_commits_and_fetches_check_the_member_epoch():
    coord = await coordinator()
    await coord.consumer_groups.heartbeat("g", join_req("a"))
    offsets = {("orders", 0): (3, -1, None)}
    assert await coord.commit_offsets("g", 0, "a", None, offsets) == {
        ("orders", 0): STALE_MEMBER_EPOCH
    }
    assert await coord.commit_offsets("g", 1, "zz", None, offsets) == {
        ("orders", 0): UNKNOWN_MEMBER_ID
    }
    assert await coord.commit_offsets("g", -1, "", None, offsets) == {
        ("orders", 0): UNKNOWN_MEMBER_ID
    }
    assert await coord.commit_offsets("g", 1, "a", None, offsets) == {("orders", 0): NONE}
    assert coord.offset_manager.fetch_offsets("g", None, "a", 0)[0] == STALE_MEMBER_EPOCH
    assert coord.offset_manager.fetch_offsets("g", None, "a", 1) == (
        NONE,
        {("orders", 0): (3, -1, "")},
    )
    assert coord.offset_manager.fetch_offsets("g", None) == (NONE, {("orders", 0): (3, -1, "")})
    # Leave, then the empty group can be deleted; its records are tombstoned.
    await coord.consumer_groups.heartbeat("g", HeartbeatRequest("a", -1))
    assert await coord.group_manager.delete_groups(["g"]) == {"g": NONE}
    assert coord.consumer_groups.describe("g").error_code == GROUP_ID_NOT_FOUND
    await coord.stop()


@async_test
async def test_a_fenced_epoch_and_an_unknown_group():
    coord = await coordinator()
    await coord.consumer_groups.heartbeat("g", join_req("a"))
    r = await coord.consumer_groups.heartbeat("g", HeartbeatRequest("a", 9))
    assert r.error_code == FENCED_MEMBER_EPOCH
    r = await coord.consumer_groups.heartbeat("nope", HeartbeatRequest("a", 1))
    assert r.error_code == GROUP_ID_NOT_FOUND
    await coord.stop()


@async_test
async def test_an_invalid_join_changes_no_group():
    coord = await coordinator()
    await coord.commit_offsets("simple", -1, "", None, {("orders", 0): (1, -1, "")})
    r = await coord.consumer_groups.heartbeat("simple", join_req("s", server_assignor="sticky"))
    assert r.error_code == 112  # UNSUPPORTED_ASSIGNOR
    r = await coord.consumer_groups.heartbeat("fresh", join_req("s", rebalance_timeout_ms=-1))
    assert r.error_code == 42  # INVALID_REQUEST
    assert [g[0] for g in coord.group_manager.list_groups()] == ["simple"]
    assert coord.group_manager.list_consumer_groups() == []
    await coord.stop()
