"""TransactionIndex: Kafka's .txnindex format, searches, truncation, corruption."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import CorruptIndexError
from tierlog.log.transaction_index import (
    ABORTED_TXN_SIZE,
    AbortedTxn,
    TransactionIndex,
    collect_aborted_txns,
)


def test_entries_are_kafkas_34_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0)
    index.append(AbortedTxn(7, 10, 20, 11))
    index.append(AbortedTxn(8, 12, 25, 26))
    # version int16 0, producerId int64, firstOffset int64, lastOffset int64, LSO int64
    assert path.read_bytes() == struct.pack(">hqqqq", 0, 7, 10, 20, 11) + struct.pack(
        ">hqqqq", 0, 8, 12, 25, 26
    )
    assert ABORTED_TXN_SIZE == 34
    reopened = TransactionIndex(path, 0)
    assert reopened.all_aborted_txns() == [AbortedTxn(7, 10, 20, 11), AbortedTxn(8, 12, 25, 26)]


def test_a_segment_without_aborts_has_no_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0, exists=False)
    assert index.is_empty()
    assert index.collect_aborted_txns(0, 100).aborted_transactions == []
    index.flush()
    assert not path.exists()


def test_collect_stops_at_an_entry_whose_lso_reaches_the_bound(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    index.append(AbortedTxn(1, 0, 5, 3))  # another transaction was open from 3
    index.append(AbortedTxn(2, 3, 9, 10))  # nothing open after it
    index.append(AbortedTxn(3, 12, 15, 16))
    r = index.collect_aborted_txns(4, 10)
    assert r.aborted_transactions == [AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 9, 10)]
    assert r.is_complete
    r = index.collect_aborted_txns(6, 20)  # (1) ended before 6
    assert r.aborted_transactions == [AbortedTxn(2, 3, 9, 10), AbortedTxn(3, 12, 15, 16)]
    assert not r.is_complete


def test_truncate_reset_rename_delete(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0)
    for i in range(3):
        index.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10 + 6))
    index.truncate_to(15)  # the marker at 15 goes, the one at 5 stays
    assert [t.producer_id for t in index] == [0]
    assert len(path.read_bytes()) == ABORTED_TXN_SIZE
    index.rename_to(path.with_name(path.name + ".deleted"))
    assert not path.exists() and index.path.exists()
    index.reset()
    assert index.is_empty() and not index.path.exists()
    index.append(AbortedTxn(9, 1, 2, 3))
    assert index.delete_if_exists()
    assert not index.delete_if_exists()


def test_markers_must_increase(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError, match="must increase sequentially"):
        index.append(AbortedTxn(2, 1, 5, 6))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x00" * 33, "not a multiple of 34"),
        (struct.pack(">hqqqq", 1, 1, 2, 3, 4), "unexpected version 1"),
    ],
)
def test_corrupt_files_are_reported(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "0.txnindex"
    path.write_bytes(data)
    with pytest.raises(CorruptIndexError, match=why):
        TransactionIndex(path, 0).sanity_check()


txns = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 100), st.integers(0, 30), st.integers(0, 50)).map(
        lambda t: (t[0], t[1], t[1] + t[2], t[1] + t[2] + 1 + t[3])
    ),
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(entries=txns, start=st.integers(0, 200), length=st.integers(1, 200))
def test_collect_matches_a_linear_oracle(
    entries: list[tuple[int, int, int, int]], start: int, length: int
) -> None:
    aborted = [AbortedTxn(*e) for e in entries]
    upper = start + length
    result = collect_aborted_txns(aborted, start, upper)
    # Oracle: the prefix up to the first entry whose LSO reaches the bound, filtered.
    cut = next((i + 1 for i, t in enumerate(aborted) if t.last_stable_offset >= upper), None)
    prefix = aborted if cut is None else aborted[:cut]
    assert result.aborted_transactions == [
        t for t in prefix if t.last_offset >= start and t.first_offset < upper
    ]
    assert result.is_complete == (cut is not None)


# Entries as a log appends them: markers (last offsets) increasing; any first offset below the
# marker; any LSO (the search must not rely on LSO <= last offset + 1 for its exact answer).
ordered_txns = st.lists(
    st.tuples(st.integers(0, 5), st.integers(1, 6), st.integers(0, 12), st.integers(0, 90)),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(
    steps=ordered_txns,
    fetch=st.integers(0, 100),
    length=st.integers(-5, 60),
    reopen=st.booleans(),
)
def test_the_index_search_is_kafkas_scan(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[int, int, int, int]],
    fetch: int,
    length: int,
    reopen: bool,
) -> None:
    """The bisected search (O(log n + k)) answers what Kafka's linear scan answers, for any
    range (also an empty or inverted one), after appends or after loading the file."""
    path = tmp_path_factory.mktemp("txn") / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0)
    last = 0
    aborted = []
    for pid, gap, span, lso in steps:
        last += gap
        txn = AbortedTxn(pid, max(0, last - span), last, lso)
        index.append(txn)
        aborted.append(txn)
    if reopen:
        index = TransactionIndex(path, 0)
    upper = fetch + length
    assert index.collect_aborted_txns(fetch, upper) == collect_aborted_txns(aborted, fetch, upper)


def test_a_file_whose_markers_do_not_increase_is_scanned(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    entries = [AbortedTxn(1, 10, 20, 21), AbortedTxn(2, 0, 5, 6), AbortedTxn(3, 30, 40, 41)]
    path.write_bytes(b"".join(t.encode() for t in entries))
    index = TransactionIndex(path, 0)
    for fetch, upper in [(0, 50), (6, 22), (21, 35), (3, 4)]:
        assert index.collect_aborted_txns(fetch, upper) == collect_aborted_txns(
            entries, fetch, upper
        )
