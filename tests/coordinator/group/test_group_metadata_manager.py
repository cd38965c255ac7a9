"""The group metadata manager: offsets (commit, fetch, store failures), persistence (replay of
``__consumer_offsets``), admin (DeleteGroups, ListGroups, DescribeGroups, partition_for) and
the partitions a broker owns in a cluster (on_election, on_resignation).

Test parts (virtual clock, scripted members): tests/coordinator/group/group_parts.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tierlog.coordinator.group.group_coordinator import GroupCoordinator
from tierlog.coordinator.group.group_metadata_manager import java_string_hash
from tierlog.coordinator.group.group_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
)
from tierlog.coordinator.offset_store import InMemoryOffsetStore
from tierlog.errors import KafkaStorageError

from .group_parts import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    DELAY_MS,
    EPS,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    NON_EMPTY_GROUP,
    NONE,
    NOT_COORDINATOR,
    OFFSET_METADATA_TOO_LARGE,
    UNKNOWN_MEMBER_ID,
    Member,
    async_test,
    join_all,
    now,
    stable_group,
    started,
    stored_generation,
    sync_all,
    until,
)

# =========================================================================== offsets


@async_test
async def test_commit_and_fetch_offsets():
    coord = await started()
    (a,) = await stable_group(coord, 1)
    offsets = {
        ("t", 0): (10, 3, "meta"),
        ("t", 1): (-1, -1, None),  # kafkajs commits -1 and -2 and reads them back
        ("u", 0): (-2, -1, ""),
    }
    assert await a.commit(offsets) == dict.fromkeys(offsets, NONE)
    err, fetched = coord.offset_manager.fetch_offsets("g", [("t", 0), ("t", 1), ("u", 0), ("t", 9)])
    assert err == NONE
    assert fetched == {
        ("t", 0): (10, 3, "meta"),
        ("t", 1): (-1, -1, ""),
        ("u", 0): (-2, -1, ""),
        ("t", 9): (-1, -1, ""),
    }
    assert coord.offset_manager.fetch_offsets("g", None)[1].keys() == offsets.keys()
    assert coord.offset_manager.fetch_offsets("nogroup", [("t", 0)]) == (
        NONE,
        {("t", 0): (-1, -1, "")},
    )
    assert coord.offset_manager.fetch_offsets("nogroup", None) == (NONE, {})
    # last commit wins
    await a.commit({("t", 0): (11, 3, "m2")})
    assert coord.offset_manager.fetch_offsets("g", [("t", 0)])[1] == {("t", 0): (11, 3, "m2")}
    await coord.stop()


@async_test
async def test_offset_metadata_too_large_only_fails_that_partition():
    coord = await started()
    (a,) = await stable_group(coord, 1)
    result = await a.commit({("t", 0): (1, -1, "x" * 4097), ("t", 1): (2, -1, "x" * 4096)})
    assert result == {("t", 0): OFFSET_METADATA_TOO_LARGE, ("t", 1): NONE}
    # the limit counts Java chars (UTF-16 units): an emoji is two
    result = await a.commit({("t", 2): (1, -1, "😀" * 2049)})
    assert result == {("t", 2): OFFSET_METADATA_TOO_LARGE}
    assert coord.offset_manager.fetch_offsets("g", [("t", 0)])[1][("t", 0)][0] == -1
    await coord.stop()


@async_test
async def test_standalone_commits_with_generation_minus_one():
    coord = await started()
    result = await coord.commit_offsets("simple", -1, "", None, {("t", 0): (42, -1, None)})
    assert result == {("t", 0): NONE}
    assert coord.group_manager.list_groups() == [("simple", "", "Empty")]
    assert coord.offset_manager.fetch_offsets("simple", [("t", 0)])[1] == {("t", 0): (42, -1, "")}
    # a generation for a group that does not exist is stale
    result = await coord.commit_offsets("nogroup", 3, "m", None, {("t", 0): (1, -1, None)})
    assert result == {("t", 0): ILLEGAL_GENERATION}
    # standalone commits to a group with members are refused
    await stable_group(coord, 1)
    result = await coord.commit_offsets("g", -1, "", None, {("t", 0): (1, -1, None)})
    assert result == {("t", 0): UNKNOWN_MEMBER_ID}
    # the empty group id is allowed for offsets (old clients), not for membership
    assert await coord.commit_offsets("", -1, "", None, {("t", 0): (7, -1, None)}) == {
        ("t", 0): NONE
    }
    await coord.stop()


@async_test
async def test_commit_is_answered_only_after_the_store_append():
    store = InMemoryOffsetStore()
    store.append_delay = 0.05
    coord = await started(store)
    task = asyncio.ensure_future(coord.commit_offsets("s", -1, "", None, {("t", 0): (1, -1, None)}))
    await asyncio.sleep(0.01)
    assert not task.done()
    assert not store.partitions[coord.group_manager.partition_for("s")]
    assert await task == {("t", 0): NONE}
    assert len(store.partitions[coord.group_manager.partition_for("s")]) == 1
    await coord.stop()


@async_test
async def test_store_failures_become_retriable_errors():
    store = InMemoryOffsetStore()
    coord = await started(store)
    a, b = [Member(coord, f"c{i}") for i in range(2)]
    await join_all([a, b])
    store.fail_with = KafkaStorageError("disk gone")
    result = await coord.commit_offsets("s", -1, "", None, {("t", 0): (1, -1, None)})
    assert result == {("t", 0): COORDINATOR_NOT_AVAILABLE}
    assert coord.offset_manager.fetch_offsets("s", [("t", 0)])[1] == {("t", 0): (-1, -1, "")}
    # storing the leader's assignment fails: everyone is told, the group rebalances
    syncs = await sync_all([a, b])
    assert {s.error_code for s in syncs} == {COORDINATOR_NOT_AVAILABLE}
    assert coord.group_manager.describe_group("g").state == "PreparingRebalance"
    store.fail_with = None
    await join_all([a, b])
    assert {s.error_code for s in await sync_all([a, b])} == {NONE}
    await coord.stop()


# =========================================================================== persistence


@async_test
async def test_replay_rebuilds_offsets_and_groups():
    store = InMemoryOffsetStore()
    coord = await started(store)
    a, b = await stable_group(coord, 2, session_ms=300)
    await a.commit({("t", 0): (5, 1, "x"), ("t", 1): (6, 1, None)})
    await a.commit({("t", 0): (7, 2, "y")})  # last writer wins on replay
    await coord.commit_offsets("simple", -1, "", None, {("u", 3): (-2, -1, None)})
    await coord.stop()

    # every record sits in its group's partition and decodes
    for partition, records in store.partitions.items():
        for key, value in records:
            k = decode_key(key)
            assert k is not None and coord.group_manager.partition_for(k.group) == partition
            assert value is not None

    coord2 = await started(store)
    assert coord2.offset_manager.fetch_offsets("g", None)[1] == {
        ("t", 0): (7, 2, "y"),
        ("t", 1): (6, 1, ""),
    }
    assert coord2.offset_manager.fetch_offsets("simple", None)[1] == {("u", 3): (-2, -1, "")}
    d = coord2.group_manager.describe_group("g")
    assert (d.state, d.protocol) == ("Stable", "range")
    assert sorted((m[0], m[5]) for m in d.members) == sorted(
        [(a.member_id, b"a-c0"), (b.member_id, b"a-c1")]
    )
    assert sorted(coord2.group_manager.list_groups()) == [
        ("g", "consumer", "Stable"),
        ("simple", "", "Empty"),
    ]
    # the members carry on with the generation they had
    for m in (a, b):
        m.coord = coord2
        assert m.heartbeat() == NONE
        assert (await m.sync()).assignment in (b"a-c0", b"a-c1")
    await coord2.stop()


@async_test
async def test_replayed_members_expire_without_heartbeats():
    store = InMemoryOffsetStore()
    coord = await started(store)
    await stable_group(coord, 2, session_ms=100)
    await coord.stop()
    coord2 = await started(store)
    t0 = now()
    assert coord2.group_manager.describe_group("g").state == "Stable"
    emptied_at = await until(lambda: coord2.group_manager.describe_group("g").state == "Empty")
    assert 0.1 - EPS <= emptied_at - t0 <= 0.101 + EPS  # their 100 ms sessions, from the load
    # the empty generation is stored in the background: stop only once it is
    await until(lambda: stored_generation(store, coord2, "g").generation == 2)
    assert stored_generation(store, coord2, "g").members == ()
    await coord2.stop()
    coord3 = await started(store)
    assert coord3.group_manager.describe_group("g").state == "Empty"
    await coord3.stop()


@async_test
async def test_replay_skips_foreign_and_corrupt_records():
    store = InMemoryOffsetStore()
    coord = GroupCoordinator(store, offsets_topic_num_partitions=1)
    good_key = OffsetCommitKey("g", "t", 0).encode()
    store.partitions[0] = [
        (b"\x00\x03\x00\x01g", b"\x00\x00"),  # a KIP-848 record type: not ours
        (b"\x00", b""),  # garbage key
        (good_key, b"\x00\x03\x00"),  # truncated value
        (good_key, OffsetCommitValue(9, -1, "", 1).encode()),
        (OffsetCommitKey("gone", "t", 0).encode(), OffsetCommitValue(1).encode()),
        (OffsetCommitKey("gone", "t", 0).encode(), None),  # tombstone
    ]
    await coord.start()
    assert coord.offset_manager.fetch_offsets("g", None)[1] == {("t", 0): (9, -1, "")}
    assert [g for g, _, _ in coord.group_manager.list_groups()] == ["g"]
    await coord.stop()


# =========================================================================== admin


@async_test
async def test_delete_groups():
    store = InMemoryOffsetStore()
    coord = await started(store)
    await stable_group(coord, 1)
    await coord.commit_offsets(
        "empty", -1, "", None, {("t", 0): (1, -1, None), ("t", 1): (2, -1, None)}
    )
    result = await coord.group_manager.delete_groups(["g", "empty", "unknown", "empty"])
    assert result == {"g": NON_EMPTY_GROUP, "empty": NONE, "unknown": GROUP_ID_NOT_FOUND}
    assert coord.group_manager.describe_group("empty").state == "Dead"
    assert coord.offset_manager.fetch_offsets("empty", [("t", 0)])[1] == {("t", 0): (-1, -1, "")}
    assert [g for g, _, _ in coord.group_manager.list_groups()] == ["g"]
    tail = store.partitions[coord.group_manager.partition_for("empty")][-3:]
    assert [(decode_key(k), v) for k, v in tail] == [
        (GroupMetadataKey("empty"), None),
        (OffsetCommitKey("empty", "t", 0), None),
        (OffsetCommitKey("empty", "t", 1), None),
    ]
    assert (await coord.group_manager.delete_groups(["empty"])) == {"empty": GROUP_ID_NOT_FOUND}
    await coord.stop()
    coord2 = await started(store)
    assert coord2.group_manager.describe_group("empty").state == "Dead"
    assert coord2.offset_manager.fetch_offsets("empty", None)[1] == {}
    # the id can be used again
    assert (await coord2.commit_offsets("empty", -1, "", None, {("t", 0): (3, -1, None)})) == {
        ("t", 0): NONE
    }
    await coord2.stop()


@async_test
async def test_list_and_describe():
    coord = await started()
    await stable_group(coord, 2)
    await coord.commit_offsets("simple", -1, "", None, {("t", 0): (1, -1, None)})
    joining = asyncio.ensure_future(Member(coord, "x", group="joining").join())
    await asyncio.sleep(0.005)
    assert sorted(coord.group_manager.list_groups()) == [
        ("g", "consumer", "Stable"),
        ("joining", "consumer", "PreparingRebalance"),
        ("simple", "", "Empty"),
    ]
    assert coord.group_manager.list_groups(["stable", "EMPTY"]) == [
        ("g", "consumer", "Stable"),
        ("simple", "", "Empty"),
    ]
    assert coord.group_manager.list_groups(["Dead"]) == []
    d = coord.group_manager.describe_group("joining")
    assert (d.state, d.protocol, len(d.members)) == ("PreparingRebalance", "", 1)
    assert d.members[0][4:] == (b"", b"")  # no metadata unless Stable
    d = coord.group_manager.describe_group("unknown")
    assert (d.error_code, d.state, d.protocol_type, d.members) == (NONE, "Dead", "", [])
    await joining
    await coord.stop()


def test_partition_for_matches_java_string_hash_code():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("😀") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair
    assert java_string_hash("polygenelubricants") == -(2**31)
    coord = GroupCoordinator(InMemoryOffsetStore(), offsets_topic_num_partitions=50)
    assert coord.group_manager.partition_for("polygenelubricants") == 0  # Utils.abs(MIN_VALUE) == 0
    assert coord.group_manager.partition_for("hello") == 99162322 % 50
    h = java_string_hash("console-consumer-12345")
    assert coord.group_manager.partition_for("console-consumer-12345") == abs(h) % 50
    with pytest.raises(ValueError):
        GroupCoordinator(InMemoryOffsetStore(), offsets_topic_num_partitions=0)


# =========================================================================== cluster ownership


@async_test
async def test_cluster_partitions_load_on_election_and_drop_on_resignation():
    store = InMemoryOffsetStore()
    kw: dict[str, Any] = {"initial_rebalance_delay_ms": DELAY_MS, "min_session_timeout_ms": 10}
    coord = GroupCoordinator(store, offsets_topic_num_partitions=5, **kw)
    p = coord.group_manager.partition_for("g")
    store.partitions[p].append(
        (OffsetCommitKey("g", "t", 0).encode(), OffsetCommitValue(7, -1, "m", 1).encode())
    )
    await coord.start(cluster=True)
    assert coord.group_manager.availability_error() == NONE
    assert not coord.group_manager.owns("g")
    # not this broker's partition: every API says NOT_COORDINATOR
    m = Member(coord, "c")
    assert (await m.join()).error_code == NOT_COORDINATOR
    assert coord.offset_manager.fetch_offsets("g", None) == (NOT_COORDINATOR, {})
    assert m.heartbeat() == NOT_COORDINATOR
    assert coord.group_manager.describe_group("g").error_code == NOT_COORDINATOR
    coord.on_resignation(p)  # not owned: nothing happens
    # elected: loading until the replay ran, then served with the stored offsets
    coord.on_election(p)
    coord.on_election(p)  # already loading: ignored
    assert coord.offset_manager.fetch_offsets("g", None) == (COORDINATOR_LOAD_IN_PROGRESS, {})
    assert (await m.join()).error_code == COORDINATOR_LOAD_IN_PROGRESS
    assert m.heartbeat() == COORDINATOR_LOAD_IN_PROGRESS
    await until(lambda: coord.group_manager.owns("g"))
    assert coord.offset_manager.fetch_offsets("g", None) == (NONE, {("t", 0): (7, -1, "m")})
    assert not coord.group_manager.owns("h") or coord.group_manager.partition_for("h") == p
    # a join parked in the initial delay is answered NOT_COORDINATOR on resignation
    task = asyncio.ensure_future(m.join())
    await until(lambda: coord.group_manager.describe_group("g").state == "PreparingRebalance")
    coord.on_resignation(p)
    r = await task
    assert r.error_code == NOT_COORDINATOR and r.member_id.startswith("c-")
    assert not coord.group_manager.owns("g")
    assert coord.offset_manager.fetch_offsets("g", None) == (NOT_COORDINATOR, {})
    assert coord.group_manager.list_groups() == []
    # elected again: the committed offset is back; a resignation while loading cancels it
    coord.on_election(p)
    coord.on_resignation(p)
    await asyncio.sleep(0.01)
    assert not coord.group_manager.owns("g")
    coord.on_election(p)
    await until(lambda: coord.group_manager.owns("g"))
    assert coord.offset_manager.fetch_offsets("g", None) == (NONE, {("t", 0): (7, -1, "m")})
    assert [g for g, _, _ in coord.group_manager.list_groups()] == ["g"]
    await coord.stop()
    assert coord.group_manager.availability_error() == COORDINATOR_NOT_AVAILABLE
