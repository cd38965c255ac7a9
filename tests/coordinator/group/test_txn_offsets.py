"""Transactional offset commits (TxnOffsetCommit): pending until the producer's marker,
visible on commit, dropped on abort, and the same after a reload of the partition."""

from __future__ import annotations

from tests.coordinator.group.group_parts import async_test, started
from tierlog.coordinator.offset_store import InMemoryOffsetStore


def committed(coord, group):
    return coord.offset_manager.fetch_offsets(group, [("t", 0)])[1][("t", 0)][0]


@async_test
async def test_pending_until_commit_marker_then_visible():
    store = InMemoryOffsetStore()
    coord = await started(store)
    p = coord.group_manager.partition_for("g")
    codes = await coord.commit_txn_offsets("g", 42, 0, -1, "", None, {("t", 0): (10, -1, "m")})
    assert codes == {("t", 0): 0}
    assert committed(coord, "g") == -1
    assert coord.offset_manager.has_pending_txn_offsets("g", ("t", 0))
    coord.on_transaction_completed(42, [p + 1], commit=True)  # another partition: no effect
    assert committed(coord, "g") == -1
    store.write_marker(p, 42, commit=True)
    coord.on_transaction_completed(42, [p], commit=True)
    assert committed(coord, "g") == 10
    assert not coord.offset_manager.has_pending_txn_offsets("g", ("t", 0))
    # aborted offsets never show
    await coord.commit_txn_offsets("g", 43, 0, -1, "", None, {("t", 0): (20, -1, "")})
    store.write_marker(p, 43, commit=False)
    coord.on_transaction_completed(43, [p], commit=False)
    assert committed(coord, "g") == 10
    # an open transaction at reload stays pending
    await coord.commit_txn_offsets("g", 44, 0, -1, "", None, {("t", 0): (30, -1, "")})
    await coord.stop()

    reloaded = await started(store)
    assert committed(reloaded, "g") == 10
    assert reloaded.offset_manager.has_pending_txn_offsets("g", ("t", 0))
    reloaded.on_transaction_completed(44, [p], commit=True)
    assert committed(reloaded, "g") == 30
    await reloaded.stop()


@async_test
async def test_member_checks():
    coord = await started()
    assert await coord.commit_txn_offsets("g", 1, 0, 5, "", None, {("t", 0): (1, -1, "")}) == {
        ("t", 0): 22  # ILLEGAL_GENERATION
    }
    assert await coord.commit_txn_offsets("g", 1, 0, -1, "m", None, {("t", 0): (1, -1, "")}) == {
        ("t", 0): 25  # UNKNOWN_MEMBER_ID
    }
    assert await coord.commit_txn_offsets("", 1, 0, -1, "", None, {("t", 0): (1, -1, "")}) == {
        ("t", 0): 24  # INVALID_GROUP_ID
    }
    await coord.stop()
