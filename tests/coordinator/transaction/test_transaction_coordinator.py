"""TransactionCoordinator over an in-memory ``__transaction_state`` and a recording marker
writer: init, epochs and fencing, commit and abort with markers, timeouts, failover."""

from __future__ import annotations

import asyncio
import itertools

from tests.coordinator.group.group_parts import async_test
from tierlog.coordinator.offset_store import InMemoryOffsetStore
from tierlog.coordinator.transaction import TransactionCoordinator, TxnMarkerEntry
from tierlog.coordinator.transaction.transaction_log import decode_key, decode_value
from tierlog.coordinator.transaction.transaction_state import TransactionState

S = TransactionState
NOT_COORDINATOR = 16
NOT_LEADER = 6
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Writer:
    """Records markers; ``fail`` maps (topic, partition) to errors returned first."""

    def __init__(self) -> None:
        self.written: list[tuple[TxnMarkerEntry, str, int]] = []
        self.fail: dict[tuple[str, int], list[int]] = {}
        self.gone: set[tuple[str, int]] = set()
        self.calls = 0

    async def write_txn_markers(self, entries):
        self.calls += 1
        out = {}
        for e in entries:
            for tp in e.partitions:
                errors = self.fail.get(tp)
                if errors:
                    out[(e.producer_id, *tp)] = errors.pop(0)
                    continue
                self.written.append((e, *tp))
                out[(e.producer_id, *tp)] = 0
        return out

    def partition_exists(self, topic, partition):
        return (topic, partition) not in self.gone


ids = itertools.count(100)


async def coordinator(store=None, writer=None, clock=None, partitions=3, epoch=0, **kw):
    tc = TransactionCoordinator(
        store if store is not None else InMemoryOffsetStore(),
        writer if writer is not None else Writer(),
        lambda: next(ids),
        transaction_topic_partition_count=partitions,
        time_ms=clock or Clock(),
        **kw,
    )
    tc.start()
    for p in range(partitions):
        tc.on_election(p, epoch)
    await settle(tc)
    return tc


async def settle(tc: TransactionCoordinator) -> None:
    """Until no background work (loads, markers) is left (virtual time: retries' backoff
    passes at once)."""
    for _ in range(1000):
        await asyncio.sleep(0.01)
        if not tc.txn_manager.loading_partitions() and not tc.marker_channel.in_flight:
            return
    raise AssertionError("coordinator did not settle")


def state(tc, txn_id):
    return tc.txn_manager.get_transaction_state(txn_id)[1].transaction_metadata


@async_test
async def test_init_commit_and_markers():
    w = Writer()
    store = InMemoryOffsetStore()
    tc = await coordinator(store, w)
    err, pid, epoch = await tc.init_producer_id("app", 60_000)
    assert (err, epoch) == (0, 0)
    assert await tc.add_partitions_to_transaction("app", pid, 0, {("t", 0), ("t", 1)}) == 0
    assert await tc.add_partitions_to_transaction("app", pid, 0, {("t", 0)}) == 0  # no-op
    assert await tc.end_transaction("app", pid, 0, commit=True) == 0
    await settle(tc)
    assert sorted((tp, e.commit, e.producer_epoch) for e, *tp in w.written) == [
        (["t", 0], True, 0), (["t", 1], True, 0),
    ]  # fmt: skip
    assert state(tc, "app").state is S.COMPLETE_COMMIT
    # the log has every state in order: Empty, Ongoing, PrepareCommit, CompleteCommit
    p = tc.txn_manager.partition_for("app")
    values = [decode_value(v) for k, v in store.replay(p) if decode_key(k) == "app"]
    assert [v.transaction_status for v in values] == [
        S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT,
    ]  # fmt: skip
    # committing again is answered as done; aborting it is not allowed
    assert await tc.end_transaction("app", pid, 0, commit=True) == 0
    assert await tc.end_transaction("app", pid, 0, commit=False) == INVALID_TXN_STATE
    await tc.stop()


@async_test
async def test_zombie_is_fenced():
    tc = await coordinator()
    _, pid, e0 = await tc.init_producer_id("app", 60_000)
    _, pid2, e1 = await tc.init_producer_id("app", 60_000)  # a second instance
    assert (pid2, e1) == (pid, e0 + 1)
    assert await tc.add_partitions_to_transaction("app", pid, e0, {("t", 0)}) == PRODUCER_FENCED
    assert await tc.end_transaction("app", pid, e0, commit=True) == PRODUCER_FENCED
    assert await tc.add_partitions_to_transaction("app", pid + 1, e1, {("t", 0)}) == (
        INVALID_PRODUCER_ID_MAPPING
    )
    assert await tc.add_partitions_to_transaction("nobody", pid, e1, {("t", 0)}) == (
        INVALID_PRODUCER_ID_MAPPING
    )
    # KIP-360: naming a stale epoch is fenced; the current one bumps; a retry of it repeats
    assert (await tc.init_producer_id("app", 60_000, (pid, 17)))[0] == PRODUCER_FENCED
    assert await tc.init_producer_id("app", 60_000, (pid, e1)) == (0, pid, e1 + 1)
    assert await tc.init_producer_id("app", 60_000, (pid, e1)) == (0, pid, e1 + 1)
    await tc.stop()


@async_test
async def test_init_while_ongoing_aborts_with_bumped_epoch():
    w = Writer()
    tc = await coordinator(writer=w)
    _, pid, e0 = await tc.init_producer_id("app", 60_000)
    await tc.add_partitions_to_transaction("app", pid, e0, {("t", 0)})
    assert (await tc.init_producer_id("app", 60_000))[0] == CONCURRENT_TRANSACTIONS
    await settle(tc)
    ((entry, topic, part),) = w.written
    assert (entry.commit, entry.producer_epoch, topic, part) == (False, e0 + 1, "t", 0)
    assert state(tc, "app").state is S.COMPLETE_ABORT
    assert await tc.init_producer_id("app", 60_000) == (0, pid, e0 + 2)
    await tc.stop()


@async_test
async def test_markers_retried_until_written_and_concurrent_meanwhile():
    w = Writer()
    w.fail[("t", 0)] = [NOT_LEADER, -1] + [NOT_LEADER] * 8  # retried for ~3 s
    w.gone.add(("deleted", 0))
    tc = await coordinator(writer=w)
    _, pid, e = await tc.init_producer_id("app", 60_000)
    await tc.add_partitions_to_transaction("app", pid, e, {("t", 0), ("deleted", 0)})
    assert await tc.end_transaction("app", pid, e, commit=False) == 0
    # waits a moment for the completion, then tells the client to retry
    assert await tc.add_partitions_to_transaction("app", pid, e, {("t", 0)}) == (
        CONCURRENT_TRANSACTIONS
    )
    await settle(tc)
    assert [(tp, en.commit) for en, *tp in w.written] == [(["t", 0], False)]
    assert w.calls == 11
    assert state(tc, "app").state is S.COMPLETE_ABORT
    await tc.stop()


@async_test
async def test_timeout_aborts_and_fences():
    clock = Clock()
    w = Writer()
    tc = await coordinator(writer=w, clock=clock, abort_timed_out_interval_ms=10)
    _, pid, e = await tc.init_producer_id("app", 1000)
    await tc.add_partitions_to_transaction("app", pid, e, {("t", 0)})
    clock.now += 999
    tc.abort_timed_out_transactions()
    await settle(tc)
    assert state(tc, "app").state is S.ONGOING
    clock.now += 2
    await asyncio.sleep(0.05)  # the timer (virtual clock) fires
    await settle(tc)
    assert state(tc, "app").state is S.COMPLETE_ABORT
    assert [(en.commit, en.producer_epoch) for en, *_ in w.written] == [(False, e + 1)]
    assert await tc.end_transaction("app", pid, e, commit=True) == PRODUCER_FENCED
    await tc.stop()


@async_test
async def test_failover_completes_prepared_transaction():
    store = InMemoryOffsetStore()
    w = Writer()
    w.fail[("t", 0)] = [NOT_LEADER] * 1000  # the old coordinator never gets its marker out
    tc = await coordinator(store, w)
    _, pid, e = await tc.init_producer_id("app", 60_000)
    await tc.add_partitions_to_transaction("app", pid, e, {("t", 0)})
    assert await tc.end_transaction("app", pid, e, commit=True) == 0
    p = tc.txn_manager.partition_for("app")
    await asyncio.sleep(0.2)
    tc.on_resignation(p, 0)
    await tc.stop()
    # A new coordinator (epoch 1) loads PrepareCommit and finishes the job.
    w2 = Writer()
    tc2 = await coordinator(store, w2, epoch=1)
    assert [(en.commit, en.coordinator_epoch) for en, *_ in w2.written] == [(True, 1)]
    assert state(tc2, "app").state is S.COMPLETE_COMMIT
    await tc2.stop()


@async_test
async def test_errors():
    tc = await coordinator(transaction_max_timeout_ms=5000)
    assert (await tc.init_producer_id("app", 5001))[0] == INVALID_TRANSACTION_TIMEOUT
    assert (await tc.init_producer_id("", 100))[0] == 42
    assert (await tc.init_producer_id(None, 100))[0] == 0
    _, pid, e = await tc.init_producer_id("app", 5000)
    assert await tc.end_transaction("app", pid, e, commit=True) == INVALID_TXN_STATE
    p = tc.txn_manager.partition_for("app")
    tc.on_resignation(p)
    assert await tc.add_partitions_to_transaction("app", pid, e, {("t", 0)}) == NOT_COORDINATOR
    await tc.stop()


@async_test
async def test_verify_and_describe_and_list():
    tc = await coordinator()
    _, pid, e = await tc.init_producer_id("app", 60_000)
    await tc.add_partitions_to_transaction("app", pid, e, {("t", 0)})
    assert tc.verify_partitions_in_transaction("app", pid, e, {("t", 0), ("t", 1)}) == {
        ("t", 0): 0, ("t", 1): INVALID_TXN_STATE,
    }  # fmt: skip
    (d,) = tc.describe_transactions(["app"])
    assert (d.state, d.producer_id, d.topics) == ("Ongoing", pid, (("t", (0,)),))
    assert tc.describe_transactions(["nope"])[0].error_code == 105
    err, unknown, found = tc.txn_manager.list_transactions(["Ongoing", "Bogus"], [])
    assert (err, unknown, [m.transactional_id for m in found]) == (0, {"Bogus"}, ["app"])
    assert tc.txn_manager.list_transactions(["Empty"], [])[2] == []
    assert tc.txn_manager.list_transactions([], [pid + 1000])[2] == []
    await tc.stop()


@async_test
async def test_complete_record_retried_until_written():
    from tierlog.errors import NotEnoughReplicas

    store = InMemoryOffsetStore()
    w = Writer()
    tc = await coordinator(store, w)
    _, pid, e = await tc.init_producer_id("app", 60_000)
    await tc.add_partitions_to_transaction("app", pid, e, {("t", 0)})
    assert await tc.end_transaction("app", pid, e, commit=True) == 0
    store.fail_with = NotEnoughReplicas("the ISR is too small")
    await asyncio.sleep(1)
    assert len(w.written) == 1  # the markers are out, the Complete record is not
    assert state(tc, "app").state is S.PREPARE_COMMIT
    assert (await tc.init_producer_id("app", 60_000))[0] == CONCURRENT_TRANSACTIONS
    store.fail_with = None
    await settle(tc)
    assert state(tc, "app").state is S.COMPLETE_COMMIT
    await tc.stop()


@async_test
async def test_idle_transactional_id_expires():
    clock = Clock()
    store = InMemoryOffsetStore()
    tc = await coordinator(store, clock=clock, transactional_id_expiration_ms=10_000)
    _, pid, _ = await tc.init_producer_id("idle", 60_000)
    _, pid2, e2 = await tc.init_producer_id("busy", 60_000)
    await tc.add_partitions_to_transaction("busy", pid2, e2, {("t", 0)})  # Ongoing: kept
    clock.now += 10_000
    tc.remove_expired_transactional_ids()
    await settle(tc)
    assert tc.txn_manager.get_transaction_state("idle") == (0, None)
    assert state(tc, "busy").state is S.ONGOING
    p = tc.txn_manager.partition_for("idle")
    assert [v for k, v in store.replay(p) if decode_key(k) == "idle"][-1] is None  # tombstone
    # a reload does not bring it back; a new InitProducerId starts it afresh
    tc.on_resignation(p)
    tc.on_election(p, 1)
    await settle(tc)
    assert tc.txn_manager.get_transaction_state("idle") == (0, None)
    err, new_pid, epoch = await tc.init_producer_id("idle", 60_000)
    assert (err, epoch) == (0, 0) and new_pid != pid
    await tc.stop()


@async_test
async def test_transactional_produce_verification():
    tc = await coordinator()
    _, pid, e = await tc.init_producer_id("app", 60_000)
    verify = tc.verify_transactional_produce
    assert await verify("app", pid, e, "t", 0) == INVALID_TXN_STATE  # not added yet
    await tc.add_partitions_to_transaction("app", pid, e, {("t", 0)})
    assert await verify("app", pid, e, "t", 0) == 0
    assert await verify("app", pid, e, "t", 1) == INVALID_TXN_STATE
    assert await verify("app", pid, e - 1, "t", 0) == INVALID_PRODUCER_EPOCH
    assert await verify("unknown", pid, e, "t", 0) == INVALID_PRODUCER_EPOCH
    tc.on_resignation(tc.txn_manager.partition_for("app"))
    assert await verify("app", pid, e, "t", 0) == 0  # another broker's id: not checked here
    await tc.stop()


@async_test
async def test_next_transaction_waits_for_the_previous_ones_completion():
    w = Writer()
    w.fail[("t", 0)] = [NOT_LEADER, NOT_LEADER]  # the markers take ~0.15 s
    tc = await coordinator(writer=w)
    _, pid, e = await tc.init_producer_id("app", 60_000)
    await tc.add_partitions_to_transaction("app", pid, e, {("t", 0)})
    assert await tc.end_transaction("app", pid, e, commit=True) == 0
    assert state(tc, "app").state is S.PREPARE_COMMIT
    # the next transaction's first AddPartitionsToTxn is answered once the commit completed
    assert await tc.add_partitions_to_transaction("app", pid, e, {("t", 1)}) == 0
    assert len(w.written) == 1
    md = state(tc, "app")
    assert (md.state, md.topic_partitions) == (S.ONGOING, {("t", 1)})
    await tc.stop()
