"""The compiled record decoder (``tierlog.records._speedups._decode``) against the numpy one.

Differential: random batches (every codec, headers, nulls, LogAppendTime, offset gaps, random
offset ranges) give equal Arrow batches; malformed records sections (random byte flips,
truncations, wrong record counts) raise the same error class in both, or decode equally.
"""

from __future__ import annotations

import os
import shutil
import sysconfig

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import real_parts

real_parts.import_module("numpy", "numpy (the spark extra)")

from tests.records.strategies import FAST, raw_batch  # noqa: E402
from tierlog.errors import CorruptRecordError, InvalidRecord  # noqa: E402
from tierlog.records import RECORD_BATCH_OVERHEAD, build_batch  # noqa: E402
from tierlog.spark.arrow_decode import HAS_SPEEDUPS, PartitionDecoder  # noqa: E402

TS = 1_700_000_000_000
NO_EXTENSIONS = os.environ.get("TIERLOG_NO_EXTENSIONS", "") == "1"

# Justified: the suite's second pass (TIERLOG_NO_EXTENSIONS=1, scripts/check) runs without the
# C decoder on purpose; in the first pass test_fast_path_loaded_when_expected fails if it is
# missing where a compiler exists, so these cannot go unrun silently.
needs_c = pytest.mark.skipif(
    not HAS_SPEEDUPS, reason=f"{real_parts.BY_DESIGN}the C decoder is not built in this run"
)


def test_fast_path_loaded_when_expected() -> None:
    """The suite runs twice in CI; make sure the 'with extensions' run really had them."""
    compiler = shutil.which(
        sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc"
    )
    if HAS_SPEEDUPS:
        real_parts.used("C record decoder", "tierlog.records._speedups._decode")
    if NO_EXTENSIONS:
        assert not HAS_SPEEDUPS
    elif compiler is not None:
        assert HAS_SPEEDUPS, "a C compiler exists but tierlog.records._speedups._decode is missing"


records_st = st.lists(
    st.tuples(
        st.integers(-5000, 2**40).map(lambda d: TS + d),
        st.none() | st.binary(max_size=30),
        st.none() | st.binary(max_size=30) | st.binary(min_size=200, max_size=300),
        st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=8)), max_size=2),
    ),
    min_size=1,
    max_size=30,
)


@st.composite
def buffers_st(draw: st.DrawFn) -> tuple[bytes, int]:
    out = []
    offset = draw(st.integers(0, 10**6))
    for _ in range(draw(st.integers(1, 4))):
        records = draw(records_st)
        out.append(
            build_batch(
                records,
                draw(st.sampled_from([0, 0, 1, 2, 3, 4])),
                base_offset=offset,
                timestamp_type=draw(st.integers(0, 1)),
            )
        )
        offset += len(records) + draw(st.integers(0, 5))
    return b"".join(out), offset


def _decode(buf: bytes, start: int, end: int, headers: bool, *, c: bool) -> object:
    decoder = PartitionDecoder(
        "t", 3, start, end, include_headers=headers, check_crc=False, use_speedups=c
    )
    try:
        batch = decoder.decode(buf).batch
    except (CorruptRecordError, InvalidRecord) as exc:
        return type(exc)
    return None if batch is None else batch.to_pylist()


@needs_c
@FAST
@given(buffers_st(), st.booleans(), st.data())
def test_c_equals_numpy(data: tuple[bytes, int], headers: bool, d: st.DataObject) -> None:
    buf, next_offset = data
    start = d.draw(st.integers(0, next_offset + 1))
    end = d.draw(st.integers(start, next_offset + 2))
    assert _decode(buf, start, end, headers, c=True) == _decode(buf, start, end, headers, c=False)


@st.composite
def malformed_st(draw: st.DrawFn) -> bytes:
    """One uncompressed batch whose records section was damaged (CRC recomputed)."""
    records = draw(records_st)
    section = bytearray(build_batch(records)[RECORD_BATCH_OVERHEAD:])
    count = len(records)
    how = draw(st.sampled_from(["flip", "truncate", "extend", "count"]))
    if how == "flip":
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(section) - 1))
            section[i] = draw(st.integers(0, 255))
    elif how == "truncate":
        del section[draw(st.integers(0, len(section) - 1)) :]
    elif how == "extend":
        section += draw(st.binary(min_size=1, max_size=12))
    else:
        count = draw(st.integers(0, 2 * count + 2))
    return raw_batch(bytes(section), records_count=count, last_offset_delta=max(count - 1, 0))


@needs_c
@FAST
@given(malformed_st(), st.booleans())
def test_malformed_input_raises_the_same_error(buf: bytes, headers: bool) -> None:
    assert _decode(buf, 0, 2**62, headers, c=True) == _decode(buf, 0, 2**62, headers, c=False)


@needs_c
def test_bounds_are_checked_directly() -> None:
    """The C entry point on its own, with sections that lie about the buffer."""
    import numpy as np

    from tierlog.records._speedups._decode import decode_records

    good = build_batch([(TS, b"k", b"v")])[RECORD_BATCH_OVERHEAD:]
    info = np.array([[0, len(good), 1, 0, TS, TS, 0]], dtype=np.int64)
    assert decode_records(good, info.tobytes(), 0, 10, False)[0] == 1
    for lie in ([0, len(good) + 1, 1], [5, 2, 1], [-1, len(good), 1], [0, len(good), -1]):
        bad = info.copy()
        bad[0, :3] = lie
        with pytest.raises(ValueError):
            decode_records(good, bad.tobytes(), 0, 10, False)
    with pytest.raises(CorruptRecordError):
        decode_records(good, np.array([[0, len(good), 10**9, 0, 0, 0, 0]]).tobytes(), 0, 10, False)
    with pytest.raises(ValueError):
        decode_records(good, b"\0" * 7, 0, 10, False)
    for cut in range(len(good)):
        info2 = np.array([[0, cut, 1, 0, TS, TS, 0]], dtype=np.int64)
        with pytest.raises((CorruptRecordError, InvalidRecord)):
            decode_records(good[:cut], info2.tobytes(), 0, 10, False)
