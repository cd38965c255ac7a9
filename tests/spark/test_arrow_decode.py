"""The columnar decoder against its pure-Python reference and against decode_records.

No Spark: record batches built with tierlog.records (every codec, headers, null keys/values,
LogAppendTime, offset gaps, transactions and control batches), decoded in random ranges and
split at random points, must give the reference's rows exactly.

Every test runs twice: with the compiled per-record loop (``_speedups/_decode.c``) when it
is built, and with the numpy one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.records.strategies import FAST, raw_batch
from tierlog.errors import CorruptRecordError, InvalidRecord
from tierlog.records import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    Record,
    build_batch,
    decode_records,
    end_transaction_marker,
)
from tierlog.spark import arrow_decode
from tierlog.spark.arrow_decode import (
    HAS_SPEEDUPS,
    PartitionDecoder,
    decode_to_arrow_py,
    empty_batch,
    kafka_schema,
)

TS = 1_700_000_000_000


@pytest.fixture(scope="module", params=["c", "numpy"] if HAS_SPEEDUPS else ["numpy"], autouse=True)
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """PartitionDecoder's per-record loop: the compiled one, then the numpy one (module
    scope, so Hypothesis tests see no function-scoped fixture)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arrow_decode, "HAS_SPEEDUPS", request.param == "c")
        yield request.param


headers_st = st.lists(
    st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=20)), max_size=3
).map(tuple)
payload_st = st.none() | st.binary(max_size=40) | st.binary(min_size=100, max_size=300)


@st.composite
def batches_st(draw: st.DrawFn) -> tuple[bytes, int]:
    """Concatenated batches of random records; returns (buffer, next offset)."""
    out = []
    offset = draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 30))
        gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
        records = []
        delta = -1
        for i in range(n):
            delta += 1 + gaps[i]
            records.append(
                Record(
                    offset=offset + delta,
                    timestamp=TS + draw(st.integers(-5000, 2**31)),
                    key=draw(payload_st),
                    value=draw(payload_st),
                    headers=draw(headers_st),
                )
            )
        out.append(
            build_batch(
                records,
                draw(st.integers(0, 4)),
                base_offset=offset,
                timestamp_type=draw(st.integers(0, 1)),
            )
        )
        offset += delta + 1
    return b"".join(out), offset


def fast(
    buf: bytes,
    start: int,
    end: int,
    *,
    include_headers: bool = False,
    read_committed: bool = True,
    aborted: list[tuple[int, int]] | None = None,
) -> pa.RecordBatch:
    """The fast path, or an empty batch of the right schema when no row is in range."""
    decoder = PartitionDecoder(
        "t", 7, start, end, include_headers=include_headers, read_committed=read_committed
    )
    decoder.add_aborted_transactions(aborted or ())
    result = decoder.decode(buf)
    return result.batch if result.batch is not None else empty_batch(include_headers)


@FAST
@given(batches_st(), st.booleans(), st.data())
def test_fast_path_equals_reference(
    data: tuple[bytes, int], headers: bool, d: st.DataObject
) -> None:
    buf, next_offset = data
    start = d.draw(st.integers(0, next_offset + 1))
    end = d.draw(st.integers(start, next_offset + 2))
    expected = decode_to_arrow_py(buf, start, end, "t", 7, include_headers=headers)
    got = fast(buf, start, end, include_headers=headers)
    assert got.schema == kafka_schema(headers)
    assert got.equals(expected), (got.to_pylist()[:3], expected.to_pylist()[:3])


@FAST
@given(batches_st())
def test_reference_equals_decode_records(data: tuple[bytes, int]) -> None:
    buf, _ = data
    rows = decode_to_arrow_py(buf, 0, 2**62, "t", 7, include_headers=True).to_pylist()
    expected = []
    pos = 0
    while pos < len(buf):
        size = int.from_bytes(buf[pos + 8 : pos + 12], "big") + 12
        append_time = buf[pos + 22] & 0x08
        max_ts = int.from_bytes(buf[pos + 35 : pos + 43], "big", signed=True)
        for r in decode_records(buf, pos):
            expected.append(
                (
                    r.offset,
                    r.key,
                    r.value,
                    max_ts if append_time else r.timestamp,
                    [{"key": k, "value": v} for k, v in r.headers] or None,
                )
            )
        pos += size
    got = [
        (
            row["offset"],
            row["key"],
            row["value"],
            int(row["timestamp"].timestamp() * 1000),
            row["headers"],
        )
        for row in rows
    ]
    assert got == expected


@FAST
@given(batches_st(), st.data())
def test_split_buffers_continue_where_the_last_complete_batch_ended(
    data: tuple[bytes, int], d: st.DataObject
) -> None:
    buf, next_offset = data
    cut = d.draw(st.integers(0, len(buf)))
    decoder = PartitionDecoder("t", 7, 0, 2**62)
    first = decoder.decode(buf[:cut])
    rest = buf[first.bytes_consumed :]
    second = decoder.decode(rest)
    parts = [b for b in (first.batch, second.batch) if b is not None]
    got = pa.Table.from_batches(parts, schema=kafka_schema(False))
    assert got.equals(pa.Table.from_batches([decode_to_arrow_py(buf, 0, 2**62, "t", 7)]))
    assert max(first.next_offset, second.next_offset) == next_offset
    assert first.bytes_consumed + second.bytes_consumed == len(buf)


@FAST
@given(batches_st(), st.integers(1, 4096), st.integers(0, 200), st.data())
def test_windows_give_the_rows_of_one_decode(
    data: tuple[bytes, int], window: int, torn: int, d: st.DataObject
) -> None:
    """decode_windows over a buffer (windows smaller and larger than its batches, a torn
    batch at the end) gives exactly decode's rows, consumed bytes and next offset."""
    buf, next_offset = data
    start = d.draw(st.integers(0, next_offset + 1))
    first_size = int.from_bytes(buf[8:12], "big") + 12 if buf else 0
    tail = buf[: min(torn, first_size - 1)]  # the start of the first batch again: partial
    decoder = PartitionDecoder("t", 7, start, 2**62)
    results = list(decoder.decode_windows(buf + tail, window))
    parts = [r.batch for r in results if r.batch is not None]
    got = pa.Table.from_batches(parts, schema=kafka_schema(False))
    assert got.equals(pa.Table.from_batches([fast(buf, start, 2**62)]))
    assert all(r.batch is None or r.batch.num_rows > 0 for r in results)
    consumed = [r.bytes_consumed for r in results]
    assert consumed == sorted(set(consumed))  # strictly increasing, from the buffer's start
    assert (consumed[-1] if results else 0) == len(buf)
    assert max((r.next_offset for r in results), default=-1) == (next_offset if buf else -1)


def test_columns_of_one_record() -> None:
    buf = build_batch(
        [(TS, b"k", b"v" * 50, [("h1", b"x"), ("h2", None)]), (TS + 5, None, None)],
        base_offset=40,
    )
    rows = fast(buf, 0, 100, include_headers=True).to_pylist()
    assert [(r["key"], r["value"], r["offset"], r["partition"], r["topic"]) for r in rows] == [
        (b"k", b"v" * 50, 40, 7, "t"),
        (None, None, 41, 7, "t"),
    ]
    assert rows[0]["headers"] == [{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}]
    assert rows[1]["headers"] is None
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [TS, TS + 5]
    assert [r["timestampType"] for r in rows] == [0, 0]


def test_log_append_time_takes_the_batch_max_timestamp() -> None:
    buf = bytearray(build_batch([(TS, b"a", b"1"), (TS + 9, b"b", b"2")], timestamp_type=1))
    rows = fast(bytes(buf), 0, 10).to_pylist()
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [TS + 9, TS + 9]
    assert [r["timestampType"] for r in rows] == [1, 1]


def _txn_batch(pid: int, base: int, n: int) -> bytes:
    return build_batch(
        [(TS, None, b"%d" % (base + i)) for i in range(n)],
        base_offset=base,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def _marker(pid: int, offset: int, control_type: int) -> bytes:
    key, value = end_transaction_marker(control_type, 0)
    return build_batch(
        [(TS, key, value)],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )


def test_read_committed_skips_aborted_transactions_and_control_batches() -> None:
    buf = b"".join(
        [
            _txn_batch(1, 0, 2),  # 0-1 aborted
            _txn_batch(2, 2, 2),  # 2-3 committed
            _marker(1, 4, CONTROL_TYPE_ABORT),
            _marker(2, 5, CONTROL_TYPE_COMMIT),
            build_batch([(TS, None, b"6")], base_offset=6),
            _txn_batch(1, 7, 1),  # 7 committed (pid 1 again, a new transaction)
            _marker(1, 8, CONTROL_TYPE_COMMIT),
        ]
    )
    aborted = [(1, 0)]
    for decode in (
        lambda **kw: fast(buf, 0, 100, aborted=aborted, **kw),
        lambda **kw: decode_to_arrow_py(buf, 0, 100, "t", 7, aborted_transactions=aborted, **kw),
    ):
        committed = [r["value"] for r in decode().to_pylist()]
        assert committed == [b"2", b"3", b"6", b"7"]
        everything = [r["value"] for r in decode(read_committed=False).to_pylist()]
        assert everything == [b"0", b"1", b"2", b"3", b"6", b"7"]  # never control records


def test_crc_mismatch_is_corrupt() -> None:
    buf = bytearray(build_batch([(TS, b"k", b"value")]))
    buf[-3] ^= 0xFF  # a byte of the value
    with pytest.raises(CorruptRecordError, match="CRC"):
        PartitionDecoder("t", 0, 0, 10).decode(bytes(buf))
    assert PartitionDecoder("t", 0, 0, 10, check_crc=False).decode(bytes(buf)).batch is not None


def test_records_that_do_not_fill_their_batch_are_invalid() -> None:
    good = build_batch([(TS, b"k", b"value")])
    section = good[61:]
    with pytest.raises((InvalidRecord, CorruptRecordError)):
        PartitionDecoder("t", 0, 0, 10).decode(raw_batch(section + b"\x00", records_count=1))
    with pytest.raises((InvalidRecord, CorruptRecordError)):
        PartitionDecoder("t", 0, 0, 10).decode(raw_batch(section, records_count=2))
    # a record length that runs past the batch
    bad = bytes([section[0] + 40]) + section[1:]
    with pytest.raises((InvalidRecord, CorruptRecordError)):
        PartitionDecoder("t", 0, 0, 10).decode(raw_batch(bad, records_count=1))


def test_out_of_range_and_partial_buffers() -> None:
    buf = build_batch([(TS, None, b"a"), (TS, None, b"b")], base_offset=10)
    decoder = PartitionDecoder("t", 0, 100, 200)
    result = decoder.decode(buf)
    assert result.batch is None and result.next_offset == 12
    result = PartitionDecoder("t", 0, 0, 100).decode(buf[:-1])
    assert result.batch is None and result.next_offset == -1 and result.bytes_consumed == 0


@st.composite
def uniform_batches_st(draw: st.DrawFn) -> bytes:
    """Batches of same-size records with a few odd ones: the record-start speculation's
    runs, run breaks (deltas growing a byte, odd records) and its fallback."""
    out = []
    offset = 0
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 400))
        size = draw(st.integers(0, 300))
        odd = set(draw(st.lists(st.integers(0, n - 1), max_size=6)))
        step = draw(st.sampled_from([0, 1, 3, 40, 1000, 2**20]))
        records = [
            (
                TS + i * step,
                b"k%05d" % i,
                bytes(draw(st.integers(0, 400)) if i in odd else size),
            )
            for i in range(n)
        ]
        out.append(build_batch(records, draw(st.sampled_from([0, 4])), base_offset=offset))
        offset += n
    return b"".join(out)


@FAST
@given(uniform_batches_st(), st.booleans())
def test_uniform_records_equal_reference(buf: bytes, headers: bool) -> None:
    expected = decode_to_arrow_py(buf, 0, 2**62, "t", 7, include_headers=headers)
    assert fast(buf, 0, 2**62, include_headers=headers).equals(expected)
