"""``read_keys`` (the log cleaner's view of a batch: offsets, keys, has-a-value) against the
full decoder, and its compiled twin (``_speedups/_keys.c``) against the pure-Python reference:
equal results on random batches of every codec, the same error class on malformed ones."""

from __future__ import annotations

import os
import shutil
import sysconfig

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import real_parts
from tests.records.strategies import FAST, raw_batch, record_tuples
from tierlog.errors import CorruptRecordError, InvalidRecord
from tierlog.records import RECORD_BATCH_OVERHEAD, build_batch, read_header, read_records
from tierlog.records.record_keys import HAS_KEYS_SPEEDUPS, read_keys, read_keys_py

NO_EXTENSIONS = os.environ.get("TIERLOG_NO_EXTENSIONS", "") == "1"

# Justified: the suite's second pass (TIERLOG_NO_EXTENSIONS=1, scripts/check) runs without the
# C twin on purpose; in the first pass test_keys_fast_path_loaded_when_expected fails if it is
# missing where a compiler exists, so these cannot go unrun silently.
needs_c = pytest.mark.skipif(
    not HAS_KEYS_SPEEDUPS, reason=f"{real_parts.BY_DESIGN}the C twin is not built in this run"
)


def test_keys_fast_path_loaded_when_expected() -> None:
    compiler = shutil.which(
        sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc"
    )
    if HAS_KEYS_SPEEDUPS:
        real_parts.used("C key scanner", "tierlog.records._speedups._keys")
    if NO_EXTENSIONS:
        assert not HAS_KEYS_SPEEDUPS
    elif compiler is not None:
        assert HAS_KEYS_SPEEDUPS, "a C compiler exists but _speedups._keys is missing"


@FAST
@given(records=record_tuples, codec=st.sampled_from([0, 1, 2, 3, 4]), base=st.integers(0, 2**40))
def test_read_keys_matches_the_decoder(records, codec, base) -> None:
    batch = build_batch(records, codec, base_offset=base)
    header = read_header(batch)
    decoded = read_records(batch, header)
    expected = (
        [r.offset for r in decoded],
        [r.key for r in decoded],
        [r.value is not None for r in decoded],
    )
    assert read_keys_py(batch, header) == expected
    assert read_keys(batch, header) == expected
    assert read_keys(bytearray(batch), header) == expected


def _outcome(fn, batch: bytes) -> object:
    header = read_header(batch)
    try:
        return fn(batch, header)
    except (CorruptRecordError, InvalidRecord) as e:
        return type(e)


@needs_c
@FAST
@given(
    records=record_tuples,
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 60),
    count_delta=st.integers(-2, 2),
)
def test_c_twin_fails_like_the_reference(records, flips, cut, count_delta) -> None:
    section = bytearray(build_batch(records)[RECORD_BATCH_OVERHEAD:])
    for at, value in flips:
        if section:
            section[at % len(section)] = value
    section = section[: max(0, len(section) - cut)]
    batch = raw_batch(bytes(section), records_count=max(0, len(records) + count_delta))
    assert _outcome(read_keys, batch) == _outcome(read_keys_py, batch)
