"""The log cleaner on transactional data: an aborted value never shadows a committed one, and
the cleaned segments keep their .txnindex entries, so read_committed reads the same before
and after a clean."""

from __future__ import annotations

from tierlog.log.log import Log
from tierlog.log.transaction_index import AbortedTxn, AbortedTxnFilter
from tierlog.records import RecordBatchBuilder
from tierlog.records.default_records import read_records

from .conftest import Clock
from .test_log_cleaner import append, batches, clean_once, compact_config, records
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
