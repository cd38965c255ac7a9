"""The log cleaner on transactional data (KIP-98, as Kafka's Cleaner does it): an aborted value
never shadows a committed one, the batches of aborted transactions go, and the markers go once
their transactions have no data left and their delete horizon has passed; read_committed and
read_uncommitted read the latest committed value of every key before and after a clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.log.log import Log
from tierlog.log.transaction_index import AbortedTxn, AbortedTxnFilter
from tierlog.records import RecordBatchBuilder
from tierlog.records.control_records import read_end_txn_marker
from tierlog.records.default_records import read_records
from tierlog.records.record_batch import DELETE_HORIZON_FLAG_MASK

from .conftest import Clock
from .test_log_cleaner import (
    CRASH_CONFIG,
    Crash,
    append,
    batches,
    clean_once,
    compact_config,
    records,
)
from .test_log_cleaner import file_ops as file_ops  # the crash fixture
from .test_log_cleaner import offset_table as offset_table  # both paths: C and Python
from .test_transactions import marker


def txn(log: Log, pid: int, items: list[tuple[bytes, bytes]], ts: int, seq: int = 0) -> int:
    b = RecordBatchBuilder(
        producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
    )
    for k, v in items:
        b.append(ts, k, v)
    first = log.append(b.build()).first_offset
    log.update_high_watermark(log.log_end_offset)
    return first


def end(log: Log, pid: int, commit: bool) -> int:
    at = log.append(marker(pid, commit), origin_client=False, origin_coordinator=True)
    log.update_high_watermark(log.log_end_offset)
    return at.first_offset


def read_committed(log: Log) -> dict[bytes, bytes | None]:
    """The latest committed value of every key, as a read_committed consumer sees the log."""
    txns = AbortedTxnFilter(log.collect_aborted_transactions(0, log.log_end_offset))
    out: dict[bytes, bytes | None] = {}
    for header, raw in batches(log):
        if txns.is_aborted(raw, header) or header.is_control_batch:
            continue
        for r in read_records(raw, header):
            assert r.key is not None
            out[r.key] = r.value
    return out


def test_aborted_values_never_shadow_committed_ones(open_log, clock: Clock) -> None:
    log = open_log(compact_config(segment_bytes=600))
    append(log, [(b"k1", b"v1"), (b"k2", b"v2")], clock.now)
    first = txn(log, 7, [(b"k1", b"aborted1"), (b"k2", b"aborted2")], clock.now)
    txn(log, 8, [(b"k2", b"c2")], clock.now)
    at = end(log, 7, commit=False)
    end(log, 8, commit=True)
    for i in range(40):  # other keys, enough to roll segments and make the log dirty
        append(log, [(b"f%d" % (i % 5), b"x" * 20)], clock.now)
    log.roll()
    before = read_committed(log)
    assert before[b"k1"] == b"v1" and before[b"k2"] == b"c2"
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [
        AbortedTxn(7, first, at, first + 2)  # P8's transaction was open after the abort
    ]
    assert (1, b"k2", b"v2") in records(log)
    clean_once(log, clock.now)
    assert read_committed(log) == before
    # The cleaned segment carries the abort, and the older committed k2 went.
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [
        AbortedTxn(7, first, at, first + 2)
    ]
    assert (1, b"k2", b"v2") not in records(log)
    assert (0, b"k1", b"v1") in records(log)


def read_uncommitted(log: Log) -> dict[bytes, bytes | None]:
    """The latest value of every key over all data records, as a read_uncommitted consumer
    sees the log."""
    out: dict[bytes, bytes | None] = {}
    for header, raw in batches(log):
        if header.is_control_batch:
            continue
        for r in read_records(raw, header):
            assert r.key is not None
            out[r.key] = r.value
    return out


def markers(log: Log) -> list[tuple[int, int, bool, bool]]:
    """(offset, producer id, is commit, has a delete horizon) of every marker."""
    out = []
    for header, raw in batches(log):
        if header.is_control_batch and header.records_count:
            m = read_end_txn_marker(raw, header)
            assert m is not None
            out.append(
                (
                    header.base_offset,
                    header.producer_id,
                    m.is_commit,
                    bool(header.attributes & DELETE_HORIZON_FLAG_MASK),
                )
            )
    return out


def file_bytes(log: Log) -> bytes:
    """The bytes of every segment file of the log, as a dump reads them."""
    return b"".join(p.read_bytes() for p in sorted(Path(log.dir).glob("*.log")))


def roll_dirty(log: Log, clock: Clock, n: int = 30) -> None:
    """Appends filler on other keys and rolls, so the log has a dirty section to clean."""
    for i in range(n):
        append(log, [(b"f%d" % (i % 5), b"x" * 20)], clock.now)
    log.roll()


def test_aborted_data_goes_and_markers_go_after_delete_retention(open_log, clock: Clock) -> None:
    retention = 60_000
    log = open_log(compact_config(segment_bytes=600, delete_retention_ms=retention))
    append(log, [(b"k1", b"v1"), (b"k2", b"v2")], clock.now)
    first = txn(
        log, 7, [(b"k1", b"ABORTED1"), (b"k2", b"ABORTED2"), (b"k3", b"ABORTED3")], clock.now
    )
    txn(log, 8, [(b"k2", b"c2"), (b"k4", b"c4")], clock.now)
    abort_at = end(log, 7, commit=False)
    commit_at = end(log, 8, commit=True)
    # Later transactions of both producers: the ones above are no longer their last batches
    # (the last batch of a producer stays, with its transaction's marker, as in Kafka).
    txn(log, 7, [(b"k5", b"c5")], clock.now, seq=3)
    txn(log, 8, [(b"k6", b"c6")], clock.now, seq=2)
    end(log, 7, commit=True)
    end(log, 8, commit=True)
    roll_dirty(log, clock)
    expected = {b"k1": b"v1", b"k2": b"c2", b"k4": b"c4", b"k5": b"c5", b"k6": b"c6"}
    before = read_committed(log)
    assert {k: before[k] for k in expected} == expected and b"k3" not in before
    assert read_uncommitted(log)[b"k3"] == b"ABORTED3"
    assert file_bytes(log).count(b"ABORTED") == 3

    # Round 1: the aborted batch goes; its marker and .txnindex entry stay (the transaction
    # had data in this round), as does the COMMIT marker of P8's first transaction.
    clean_once(log, clock.now)
    assert b"ABORTED" not in file_bytes(log)
    assert read_committed(log) == before
    assert read_uncommitted(log) == before
    assert (abort_at, 7, False, False) in markers(log)
    assert (commit_at, 8, True, False) in markers(log)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [
        AbortedTxn(7, first, abort_at, first + 3)
    ]

    # New values of P8's committed keys: its transaction's data goes in round 2.
    append(log, [(b"k2", b"n2"), (b"k4", b"n4")], clock.now)
    before = {**before, b"k2": b"n2", b"k4": b"n4"}
    # Round 2: the aborted transaction has no data left: its marker gets a delete horizon
    # and its entry goes. The committed one still had data in this round.
    roll_dirty(log, clock)
    clean_once(log, clock.now)
    assert (abort_at, 7, False, True) in markers(log)
    assert (commit_at, 8, True, False) in markers(log)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    assert read_committed(log) == before == read_uncommitted(log)
    assert b"c2" not in file_bytes(log)
    # Round 3: now the committed one has none either.
    roll_dirty(log, clock)
    clean_once(log, clock.now)
    assert (commit_at, 8, True, True) in markers(log)

    # Still there just before the horizon; gone after it. The markers of the producers'
    # last transactions stay.
    roll_dirty(log, clock)
    clean_once(log, clock.now + retention - 1)
    assert {m[0] for m in markers(log)} >= {abort_at, commit_at}
    roll_dirty(log, clock)
    clean_once(log, clock.now + retention + 1)
    left = {m[0] for m in markers(log)}
    assert abort_at not in left and commit_at not in left
    assert len(left) == 2
    assert read_committed(log) == before == read_uncommitted(log)
    # The log reads the same after a reopen (producer state rebuilt from what is left).
    log.close()
    reopened = open_log(compact_config(segment_bytes=600, delete_retention_ms=retention))
    assert read_committed(reopened) == before == read_uncommitted(reopened)
    assert reopened.last_stable_offset == reopened.log_end_offset


def test_last_batch_of_an_active_producer_stays_empty_with_its_marker(
    open_log, clock: Clock
) -> None:
    log = open_log(compact_config(segment_bytes=600, delete_retention_ms=0))
    first = txn(log, 9, [(b"a", b"ABORTED")], clock.now)
    abort_at = end(log, 9, commit=False)
    roll_dirty(log, clock)
    for now in (clock.now, clock.now + 10, clock.now + 20):
        clean_once(log, now)
        roll_dirty(log, clock)
    # Kafka's RETAIN_EMPTY: the batch keeps the producer's epoch and sequence, emptied; the
    # marker (and its entry) stay while a batch of the transaction is in the log.
    kept = [h for h, _ in batches(log) if h.producer_id == 9]
    assert [(h.base_offset, h.records_count, h.is_control_batch) for h in kept] == [
        (first, 0, False),
        (abort_at, 1, True),
    ]
    assert b"ABORTED" not in file_bytes(log)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [
        AbortedTxn(9, first, abort_at, abort_at + 1)
    ]


def test_cleaned_marker_is_a_valid_control_batch(open_log, clock: Clock) -> None:
    """A marker rewritten with a delete horizon stays a control batch with its record."""
    log = open_log(compact_config(segment_bytes=600))
    txn(log, 7, [(b"k", b"v")], clock.now)
    at = end(log, 7, commit=True)
    txn(log, 7, [(b"k", b"w")], clock.now, seq=1)
    end(log, 7, commit=True)
    roll_dirty(log, clock)
    clean_once(log, clock.now)
    roll_dirty(log, clock)
    clean_once(log, clock.now)
    ((h, raw),) = [(h, raw) for h, raw in batches(log) if h.base_offset == at]
    assert h.is_control_batch and h.is_transactional and h.attributes & DELETE_HORIZON_FLAG_MASK
    m = read_end_txn_marker(raw, h)
    assert m is not None and m.is_commit


def _fill_with_transactions(log: Log, clock: Clock) -> None:
    """Segments of one cleaning group holding committed and aborted transactions, the
    markers of the first ones in other segments than their data."""
    for i in range(6):
        append(log, [(b"k%d" % j, b"plain-%d-%d" % (i, j)) for j in range(4)], clock.now)
        txn(log, 7, [(b"k%d" % i, b"ABORTED-%d" % i)], clock.now, seq=i)
        txn(log, 8, [(b"k%d" % (i + 1), b"c-%d" % i)], clock.now, seq=i)
        log.roll()
        end(log, 7, commit=False)
        end(log, 8, commit=True)
    log.roll()


def _state(log_dir: Path, clock: Clock) -> tuple[object, ...]:
    log = Log.open(log_dir, compact_config(**CRASH_CONFIG), time_ms=clock)
    try:
        return (
            records(log),
            read_committed(log),
            log.collect_aborted_transactions(0, log.log_end_offset),
            log.last_stable_offset == log.log_end_offset,
        )
    finally:
        log.close()


def test_crash_at_every_file_operation_with_transactions(
    tmp_path: Path, clock: Clock, file_ops
) -> None:
    reference = tmp_path / "ref" / "my-topic-0"
    log = Log.open(reference, compact_config(**CRASH_CONFIG), time_ms=clock)
    _fill_with_transactions(log, clock)
    log.close()
    before = _state(reference, clock)
    log = Log.open(reference, compact_config(**CRASH_CONFIG), time_ms=clock)
    ops = file_ops(None)
    clean_once(log, clock.now)
    file_ops(None)
    total = len(ops)
    log.close()
    after = _state(reference, clock)
    assert b"ABORTED" not in b"".join(p.read_bytes() for p in reference.glob("*.log"))
    assert after[1] == before[1] and after[0] != before[0] and after[3]

    outcomes = set()
    for n in range(1, total + 1):
        log_dir = tmp_path / f"crash{n}" / "my-topic-0"
        log = Log.open(log_dir, compact_config(**CRASH_CONFIG), time_ms=clock)
        _fill_with_transactions(log, clock)
        image = tmp_path / f"image{n}" / "my-topic-0"
        file_ops(n, log_dir, image)
        with pytest.raises(Crash):
            clean_once(log, clock.now)
        file_ops(None)
        log.segments.close()
        got = _state(image, clock)
        assert got in (before, after), f"crash at operation {n} ({ops[n - 1]})"
        outcomes.add("after" if got == after else "before")
    assert outcomes == {"before", "after"}
