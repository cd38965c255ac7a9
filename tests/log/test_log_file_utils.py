"""On-disk names of segment files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.log import log_file_utils as lfu


def test_names() -> None:
    d = Path("/data/orders-0")
    assert lfu.filename_prefix_from_offset(0) == "00000000000000000000"
    assert lfu.filename_prefix_from_offset(2**63 - 1) == "9223372036854775807"[-20:].rjust(20, "0")
    assert lfu.log_file(d, 368769) == d / "00000000000000368769.log"
    assert lfu.log_file(d, 5, lfu.DELETED_FILE_SUFFIX) == d / "00000000000000000005.log.deleted"
    assert lfu.offset_index_file(d, 5) == d / "00000000000000000005.index"
    assert (
        lfu.offset_index_file(d, 5, lfu.SWAP_FILE_SUFFIX) == d / "00000000000000000005.index.swap"
    )
    assert lfu.time_index_file(d, 5) == d / "00000000000000000005.timeindex"
    assert (
        lfu.transaction_index_file(d, 5, ".cleaned") == d / "00000000000000000005.txnindex.cleaned"
    )
    assert lfu.producer_snapshot_file(d, 5) == d / "00000000000000000005.snapshot"
    assert lfu.log_dir_name("orders", 3) == "orders-3"
    with pytest.raises(ValueError):
        lfu.filename_prefix_from_offset(-1)


def test_offset_from_file_name() -> None:
    assert lfu.offset_from_file_name("00000000000000368769.log") == 368769
    assert lfu.offset_from_file_name("00000000000000000005.index.deleted") == 5
    assert lfu.offset_from_file_name(Path("/x/00000000000000000007.snapshot")) == 7
    assert lfu.offset_from_file(Path("/x/00000000000000000008.timeindex")) == 8
    for bad in ("leader-epoch-checkpoint", "abc.log", ".log", "00000000000000000001"):
        with pytest.raises(ValueError):
            lfu.offset_from_file_name(bad)


def test_predicates() -> None:
    assert lfu.is_log_file(Path("00000000000000000000.log"))
    assert not lfu.is_log_file(Path("00000000000000000000.log.deleted"))
    assert lfu.is_index_file("00000000000000000000.index")
    assert lfu.is_index_file("00000000000000000000.timeindex")
    assert lfu.is_index_file("00000000000000000000.txnindex")
    assert not lfu.is_index_file("00000000000000000000.index.swap")
    assert not lfu.is_index_file("00000000000000000000.log")
    assert lfu.is_snapshot_file("00000000000000000000.snapshot")
    assert not lfu.is_snapshot_file("notes.snapshot")
    assert not lfu.is_snapshot_file("00000000000000000000.snapshot.deleted")
