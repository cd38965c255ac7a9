"""Transactions in the log: open transactions, the last stable offset, COMMIT/ABORT markers,
the segments' .txnindex, and all of it again after a clean restart and after a crash."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import InvalidProducerEpoch, InvalidTxnState, TransactionCoordinatorFenced
from tierlog.log.log import Log
from tierlog.log.producer_state_manager import read_snapshot
from tierlog.log.transaction_index import AbortedTxn
from tierlog.records import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    EndTransactionMarker,
    RecordBatchBuilder,
    build_end_txn_marker_batch,
)

from .conftest import T0, Clock, make_config

OpenLog = Callable[..., Log]


def data(pid: int, n: int, seq: int, *, epoch: int = 0, transactional: bool = True) -> bytes:
    b = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional
    )
    for i in range(n):
        b.append(T0, None, b"v%d" % i)
    return b.build()


def marker(pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    control = CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT
    return build_end_txn_marker_batch(
        EndTransactionMarker(control, coordinator_epoch),
        producer_id=pid,
        producer_epoch=epoch,
        timestamp=T0,
    )


def end(log: Log, pid: int, commit: bool, **kw: int) -> int:
    info = log.append(marker(pid, commit, **kw), origin_client=False, origin_coordinator=True)
    return info.first_offset


def txn_index_entries(log: Log) -> list[AbortedTxn]:
    return [t for s in log.segments.values() for t in s.txn_index.all_aborted_txns()]


def test_lso_follows_open_transactions_and_markers(open_log: OpenLog) -> None:
    log = open_log()
    log.append(data(-1, 2, -1, transactional=False))  # 0-1
    log.append(data(10, 3, 0))  # 2-4: P10 opens at 2
    log.append(data(20, 1, 0))  # 5: P20 opens at 5
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    assert end(log, 10, commit=False) == 6
    # The abort is not replicated yet: the LSO stays at P10's first offset.
    assert log.last_stable_offset == 2
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 5  # P20 still open
    assert txn_index_entries(log) == [AbortedTxn(10, 2, 6, 5)]
    assert end(log, 20, commit=True) == 7
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.high_watermark == 8
    assert txn_index_entries(log) == [AbortedTxn(10, 2, 6, 5)]  # commits are not indexed
    assert log.collect_aborted_transactions(0, 8) == [AbortedTxn(10, 2, 6, 5)]
    assert log.collect_aborted_transactions(7, 8) == []


def test_fencing_of_markers_and_data(open_log: OpenLog) -> None:
    log = open_log()
    log.append(data(1, 1, 0, epoch=3))
    with pytest.raises(InvalidProducerEpoch):
        end(log, 1, commit=True, epoch=2)
    with pytest.raises(InvalidTxnState, match="transaction from offset 0 is open"):
        log.append(data(1, 1, 1, epoch=3, transactional=False))
    end(log, 1, commit=True, epoch=3, coordinator_epoch=7)
    log.append(data(1, 1, 1, epoch=3))
    with pytest.raises(TransactionCoordinatorFenced):
        end(log, 1, commit=False, epoch=3, coordinator_epoch=6)
    # A follower appends the leader's batches as they are: no checks, same state.
    assert log.producer_state_manager.last_entry(1).coordinator_epoch == 7  # type: ignore[union-attr]


def test_snapshots_carry_the_open_transaction(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log(make_config(segment_bytes=200))
    log.append(data(5, 2, 0))  # P5 opens at 0
    while log.segments.number_of_segments < 2:
        log.append(data(-1, 1, -1, transactional=False))
    log.close()
    snapshots = sorted(log_dir.glob("*.snapshot"))
    assert snapshots
    (entry,) = read_snapshot(snapshots[-1])
    assert (entry.producer_id, entry.current_txn_first_offset) == (5, 0)
    reopened = open_log(make_config(segment_bytes=200), had_clean_shutdown=True)
    reopened.maybe_increment_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == 0
    end(reopened, 5, commit=False)
    reopened.maybe_increment_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == reopened.log_end_offset
    assert txn_index_entries(reopened) == [
        AbortedTxn(5, 0, reopened.log_end_offset - 1, reopened.log_end_offset)
    ]


# ----------------------------------------------------------------------------- interleavings

PIDS = (100, 200, 300)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.sampled_from(PIDS), st.integers(1, 4)),
        st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
        st.tuples(st.just("plain"), st.just(0), st.integers(1, 3)),
        st.tuples(st.just("hw"), st.just(0), st.integers(0, 3)),
    ),
    max_size=30,
)


class Model:
    """What the log should say: open transactions, markers above the HW, aborts."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}
        self.unreplicated: dict[int, int] = {}  # first offset -> marker offset
        self.aborted: list[tuple[int, int, int]] = []
        self.seq = dict.fromkeys(PIDS, 0)

    def lso(self, hw: int) -> int:
        unreplicated = [f for f, last in self.unreplicated.items() if last >= hw]
        return min([hw, *self.open.values(), *unreplicated])


def check(log: Log, model: Model) -> None:
    hw = log.high_watermark
    assert log.last_stable_offset == model.lso(hw)
    for first in model.open.values():
        assert log.last_stable_offset <= first
    got = [(t.producer_id, t.first_offset, t.last_offset) for t in txn_index_entries(log)]
    assert got == model.aborted
    collected = log.collect_aborted_transactions(0, log.log_end_offset + 1)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in collected] == model.aborted


@settings(max_examples=25, deadline=None)
@given(steps=ops, hw_lag=st.booleans())
def test_lso_never_passes_an_open_transaction(steps: list[tuple[str, int, int]], hw_lag: bool):
    tmp = Path(tempfile.mkdtemp())
    config = make_config(segment_bytes=400)
    try:
        log = Log.open(tmp / "t-0", config, time_ms=Clock())
        model = Model()
        for op, pid, arg in steps:
            if op == "data":
                first = log.append(data(pid, arg, model.seq[pid])).first_offset
                model.seq[pid] += arg
                model.open.setdefault(pid, first)
            elif op == "plain":
                log.append(data(-1, arg, -1, transactional=False))
            elif op == "end":
                at = end(log, pid, commit=bool(arg))
                first_offset = model.open.pop(pid, None)
                if first_offset is not None:
                    model.unreplicated[first_offset] = at
                    if not arg:
                        model.aborted.append((pid, first_offset, at))
            else:
                log.maybe_increment_high_watermark(
                    log.high_watermark + arg if hw_lag else log.log_end_offset
                )
            if not hw_lag:
                log.maybe_increment_high_watermark(log.log_end_offset)
            check(log, model)
        hw = log.high_watermark
        log.close()

        # A clean restart: the snapshot at the log end holds the open transactions. As in
        # Kafka, completed transactions above the high watermark no longer hold the LSO back
        # (aborted ones are in the .txnindex already).
        log = Log.open(
            tmp / "t-0", config, time_ms=Clock(), had_clean_shutdown=True, high_watermark=hw
        )
        unreplicated, model.unreplicated = model.unreplicated, {}
        check(log, model)
        log.close()
        model.unreplicated = {f: last for f, last in unreplicated.items() if last >= hw}

        # A crash: every segment is recovered; their .txnindex files are rebuilt.
        for f in (tmp / "t-0").glob("*.txnindex"):
            f.write_bytes(b"garbage")
        log = Log.open(
            tmp / "t-0",
            config,
            time_ms=Clock(),
            had_clean_shutdown=False,
            recovery_point=0,
            high_watermark=hw,
        )
        check(log, model)
        log.close()
    finally:
        shutil.rmtree(tmp)
