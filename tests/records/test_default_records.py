"""Building and decoding the records of a batch: round trips, golden bytes, malformed input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.errors import CorruptRecordError, InvalidRecord, UnsupportedCompressionType
from tierlog.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    Record,
    RecordBatchBuilder,
    build_batch,
    compress,
    control_record_type,
    decode_records,
    encode_varint,
    end_transaction_marker,
    iter_headers,
    iter_records,
    read_header,
    read_records,
    validate_batch,
)

from .strategies import FAST, raw_batch, record_tuples, timestamps

ALL_CODECS = [
    COMPRESSION_NONE,
    COMPRESSION_GZIP,
    COMPRESSION_SNAPPY,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
]


def expected(base_offset: int, items, deltas=None) -> list[Record]:  # type: ignore[no-untyped-def]
    deltas = range(len(items)) if deltas is None else deltas
    return [
        Record(base_offset + d, ts, key, value, tuple(hdrs))
        for d, (ts, key, value, hdrs) in zip(deltas, items, strict=True)
    ]


# --------------------------------------------------------------------------- golden bytes


def test_golden_uncompressed_batch() -> None:
    """One record, laid out by hand from the protocol guide."""
    record_body = (
        b"\x00"  # attributes
        + b"\x00"  # timestampDelta 0
        + b"\x00"  # offsetDelta 0
        + b"\x02k"  # key length 1, "k"
        + b"\x04vv"  # value length 2, "vv"
        + b"\x02"  # 1 header
        + b"\x02h"  # header key length 1, "h"
        + b"\x01"  # header value null (-1)
    )
    records = bytes([len(record_body) * 2]) + record_body  # varint length
    expected_batch = raw_batch(
        records,
        base_offset=0,
        base_timestamp=1_234,
        max_timestamp=1_234,
    )
    builder = RecordBatchBuilder()
    assert builder.append(1_234, b"k", b"vv", [("h", None)]) == 0
    assert builder.build() == expected_batch
    header = read_header(expected_batch)
    assert (header.batch_length, header.last_offset_delta, header.records_count) == (
        49 + len(records),
        0,
        1,
    )
    assert decode_records(expected_batch) == [Record(0, 1_234, b"k", b"vv", (("h", None),))]


def test_header_fields() -> None:
    builder = RecordBatchBuilder(
        COMPRESSION_ZSTD,
        base_offset=1_000,
        partition_leader_epoch=3,
        producer_id=77,
        producer_epoch=5,
        base_sequence=40,
        is_transactional=True,
    )
    builder.append(500, None, b"a")
    builder.append(400, None, b"b")  # timestamps need not increase
    builder.append(700, None, b"c", offset_delta=5)  # a gap, as after compaction
    assert len(builder) == 3
    batch = builder.build()
    header = validate_batch(batch)
    assert header.base_offset == 1_000
    assert header.partition_leader_epoch == 3
    assert header.magic == 2
    assert header.compression_type == COMPRESSION_ZSTD
    assert header.is_transactional and not header.is_control_batch
    assert header.timestamp_type == 0
    assert header.last_offset_delta == 5
    assert header.records_count == 3
    assert (header.base_timestamp, header.max_timestamp) == (500, 700)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 5, 40)
    assert header.last_sequence == 45
    assert decode_records(batch) == [
        Record(1_000, 500, None, b"a"),
        Record(1_001, 400, None, b"b"),
        Record(1_005, 700, None, b"c"),
    ]


def test_size_in_bytes_tracks_the_uncompressed_batch() -> None:
    builder = RecordBatchBuilder()
    assert builder.size_in_bytes == 61
    builder.append(0, b"key", b"value", [("a", b"b")])
    assert builder.size_in_bytes == len(builder.build())


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("codec", ALL_CODECS)
@FAST
@given(
    items=record_tuples,
    base_offset=st.integers(0, 2**62),
    producer=st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1)),
    base_sequence=st.integers(-1, 2**31 - 1),
    transactional=st.booleans(),
)
def test_round_trip(codec, items, base_offset, producer, base_sequence, transactional) -> None:  # type: ignore[no-untyped-def]
    builder = RecordBatchBuilder(
        codec,
        base_offset=base_offset,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    offsets = [builder.append(*item) for item in items]
    assert offsets == list(range(base_offset, base_offset + len(items)))
    batch = builder.build()
    header = validate_batch(batch)
    assert header.compression_type == codec
    assert header.records_count == len(items) == header.last_offset_delta + 1
    assert header.base_timestamp == items[0][0]
    assert header.max_timestamp == max(ts for ts, *_ in items)
    assert (header.producer_id, header.producer_epoch) == producer
    assert header.is_transactional == transactional
    records = decode_records(batch)
    assert records == expected(base_offset, items)
    # Decoded records rebuild the very same bytes (compression is deterministic).
    assert (
        build_batch(
            records,
            codec,
            base_offset=base_offset,
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=base_sequence,
            is_transactional=transactional,
        )
        == batch
    )


@FAST
@given(
    items=record_tuples,
    gaps=st.lists(st.integers(1, 1000), min_size=25, max_size=25),
    codec=st.sampled_from(ALL_CODECS),
)
def test_round_trip_with_offset_gaps(items, gaps, codec) -> None:  # type: ignore[no-untyped-def]
    deltas, delta = [], -1
    for gap in gaps[: len(items)]:
        delta += gap
        deltas.append(delta)
    builder = RecordBatchBuilder(codec, base_offset=10)
    for (ts, key, value, hdrs), d in zip(items, deltas, strict=True):
        builder.append(ts, key, value, hdrs, offset_delta=d)
    batch = builder.build()
    assert read_header(batch).last_offset_delta == deltas[-1]
    assert decode_records(batch) == expected(10, items, deltas)


@FAST
@given(items=record_tuples, log_append_time=timestamps, codec=st.sampled_from(ALL_CODECS))
def test_round_trip_log_append_time(items, log_append_time, codec) -> None:  # type: ignore[no-untyped-def]
    batch = build_batch(items, codec, timestamp_type=1)
    header = read_header(batch)
    assert header.timestamp_type == 1
    # Every record takes maxTimestamp, whatever its delta says.
    assert {r.timestamp for r in decode_records(batch)} == {header.max_timestamp}


@FAST
@given(items=record_tuples, prefix=st.binary(max_size=70), suffix=st.binary(max_size=70))
def test_decode_at_a_position_in_any_buffer_type(items, prefix, suffix) -> None:  # type: ignore[no-untyped-def]
    batch = build_batch(items)
    buf = prefix + batch + suffix
    want = expected(0, items)
    for view in (buf, bytearray(buf), memoryview(buf), memoryview(bytearray(buf))):
        assert decode_records(view, len(prefix)) == want
        assert decode_records(view, len(prefix), check_crc=False) == want
    assert all(
        type(r.value) in (bytes, type(None)) for r in decode_records(bytearray(buf), len(prefix))
    )


def test_decoded_records_are_ordinary_frozen_records() -> None:
    """The decoder fills slots directly; the result must be indistinguishable from Record()."""
    (decoded,) = decode_records(build_batch([(7, b"k", None, (("a", b"b"),))], base_offset=3))
    made = Record(3, 7, b"k", None, (("a", b"b"),))
    assert decoded == made and hash(decoded) == hash(made) and repr(decoded) == repr(made)
    with pytest.raises(AttributeError):
        decoded.offset = 4  # type: ignore[misc]


def test_large_values_and_many_records() -> None:
    big = bytes(range(256)) * 1_000  # multi-byte lengths, several lz4/xerial blocks
    items = [(i, b"%d" % i, big if i % 100 == 0 else b"v" * (i % 300), ()) for i in range(2_000)]
    for codec in ALL_CODECS:
        assert decode_records(build_batch(items, codec)) == expected(0, items)


def test_non_ascii_header_keys() -> None:
    hdrs = (("clé", b"1"), ("ключ", None), ("", b""), ("🔑", b"\x00"))
    assert decode_records(build_batch([(0, None, None, hdrs)]))[0].headers == hdrs


# --------------------------------------------------------------------------- control batches


@pytest.mark.parametrize("control_type", [CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT])
def test_control_batch(control_type: int) -> None:
    key, value = end_transaction_marker(control_type, coordinator_epoch=9)
    assert key == b"\x00\x00\x00" + bytes([control_type])
    assert value == b"\x00\x00\x00\x00\x00\x09"
    builder = RecordBatchBuilder(
        producer_id=5, producer_epoch=1, is_transactional=True, is_control=True
    )
    builder.append(100, key, value)
    batch = builder.build()
    header = validate_batch(batch)
    assert header.is_control_batch and header.is_transactional
    (record,) = decode_records(batch)
    assert (record.key, record.value) == (key, value)
    assert control_record_type(record.key) == control_type


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00"])
def test_control_record_type_short_key(key: bytes | None) -> None:
    with pytest.raises(InvalidRecord):
        control_record_type(key)


# --------------------------------------------------------------------------- builder misuse


def test_builder_rejects_bad_arguments() -> None:
    with pytest.raises(UnsupportedCompressionType):
        RecordBatchBuilder(5)
    with pytest.raises(ValueError, match="timestamp_type"):
        RecordBatchBuilder(timestamp_type=2)
    with pytest.raises(ValueError, match="without records"):
        RecordBatchBuilder().build()
    builder = RecordBatchBuilder()
    builder.append(0, None, None, offset_delta=3)
    with pytest.raises(ValueError, match="offset_delta"):
        builder.append(0, None, None, offset_delta=3)
    with pytest.raises(ValueError, match="int64"):
        builder.append(2**63, None, None)
    bad_fields: list[dict[str, Any]] = [
        {"producer_epoch": 2**15},
        {"base_offset": 2**63},
        {"base_sequence": -(2**31) - 1},
    ]
    for bad in bad_fields:
        b = RecordBatchBuilder(**bad)
        b.append(0, None, None)
        with pytest.raises(ValueError, match="range"):
            b.build()


def test_build_is_repeatable() -> None:
    builder = RecordBatchBuilder(COMPRESSION_LZ4)
    builder.append(1, b"a", b"b")
    first = builder.build()
    assert builder.build() == first
    builder.append(2, b"c", b"d")
    assert decode_records(builder.build())[-1] == Record(1, 2, b"c", b"d")


# --------------------------------------------------------------------------- iter_records


def batches() -> tuple[bytes, list[list[Record]]]:
    parts, want = [], []
    base = 0
    for codec, n in [(COMPRESSION_NONE, 3), (COMPRESSION_LZ4, 5), (COMPRESSION_GZIP, 1)]:
        items = [(base + i, b"k", b"v%d" % i, ()) for i in range(n)]
        parts.append(build_batch(items, codec, base_offset=base))
        want.append(expected(base, items))
        base += n
    return b"".join(parts), want


def test_iter_records_whole() -> None:
    buf, want = batches()
    got = list(iter_records(buf))
    assert [records for _, records in got] == want
    assert [h.compression_type for h, _ in got] == [0, 3, 1]


def test_iter_records_byte_by_byte() -> None:
    buf, want = batches()
    ends = [h.position + h.size_in_bytes for h in iter_headers(buf)]
    for cut in range(len(buf) + 1):
        got = [records for _, records in iter_records(buf[:cut])]
        assert got == want[: sum(e <= cut for e in ends)]


@pytest.mark.parametrize("garbage", [b"\x00" * 7, b"\xff" * 200, b"\x00" * 200])
def test_iter_records_trailing_garbage(garbage: bytes) -> None:
    buf, want = batches()
    assert [r for _, r in iter_records(memoryview(buf + garbage))] == want
    assert [r for _, r in iter_records(buf + garbage, check_crc=False)] == want


def test_iter_records_raises_on_a_corrupt_complete_batch() -> None:
    buf, _ = batches()
    corrupt = bytearray(buf)
    corrupt[-1] ^= 0x55  # inside the last batch
    it = iter_records(corrupt)
    next(it)
    next(it)
    with pytest.raises(CorruptRecordError, match="crc"):
        next(it)


def test_read_records_after_iter_headers() -> None:
    buf, want = batches()
    assert [read_records(buf, h) for h in iter_headers(buf)] == want


# --------------------------------------------------------------------------- malformed records


def record(body: bytes) -> bytes:
    """A record: varint length + body."""
    return encode_varint(len(body)) + body


GOOD_BODY = b"\x00\x00\x00\x02k\x02v\x00"  # attrs, ts 0, offset 0, key "k", value "v", 0 headers


def test_raw_batch_helper_is_valid() -> None:
    assert decode_records(raw_batch(record(GOOD_BODY))) == [Record(0, 0, b"k", b"v")]


@pytest.mark.parametrize(
    ("records", "count", "error", "match"),
    [
        (record(GOOD_BODY), 2, InvalidRecord, "declares 2 records"),
        (record(GOOD_BODY) * 2, 1, InvalidRecord, "bytes after"),
        (record(GOOD_BODY) + b"\x00", 1, InvalidRecord, "bytes after"),
        (b"", 1, InvalidRecord, "declares 1 records"),
        (record(GOOD_BODY), -1, InvalidRecord, "negative"),
        (encode_varint(50) + GOOD_BODY, 1, CorruptRecordError, "length 50"),
        (encode_varint(-1) + GOOD_BODY, 1, CorruptRecordError, "length -1"),
        (encode_varint(3) + b"\x00\x00\x00", 1, CorruptRecordError, "length 3"),
        # Declares 9 bytes, fields take 8: the record length disagrees with its content.
        (encode_varint(9) + GOOD_BODY + b"\x00", 1, InvalidRecord, "invalid record size"),
        # key length 5 runs past the record
        (record(b"\x00\x00\x00\x10key\x02v\x00"), 1, CorruptRecordError, "key of 8 bytes"),
        (record(b"\x00\x00\x00\x01\x0av\x00"), 1, CorruptRecordError, "value of 5 bytes"),
        # negative header count
        (record(b"\x00\x00\x00\x01\x01\x01"), 1, InvalidRecord, "headers -1"),
        # header count far larger than the bytes left
        (record(b"\x00\x00\x00\x01\x01\xfe\x01\x00\x00"), 1, InvalidRecord, "headers 127"),
        # negative header key length
        (record(b"\x00\x00\x00\x01\x01\x02\x01\x01"), 1, InvalidRecord, "header key size -1"),
        # header value runs past the record
        (record(b"\x00\x00\x00\x01\x01\x02\x02h\x10ab"), 1, CorruptRecordError, "header value"),
        # a varint cut by the end of the data
        (record(b"\x00\x00\x00\x01\x01") + b"", 1, CorruptRecordError, "length"),
        (b"\x10\x00\xff\xff", 1, CorruptRecordError, "length 8"),
        # an overlong varint inside a record
        (
            record(b"\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00\x01\x01\x00"),
            1,
            CorruptRecordError,
            "10 bytes",
        ),
    ],
)
def test_malformed_records(records: bytes, count: int, error: type[Exception], match: str) -> None:
    batch = raw_batch(records, records_count=count)
    with pytest.raises(error, match=match):
        decode_records(batch)


def test_truncated_varint_at_the_end_of_the_data() -> None:
    """A record whose last varint is cut: the length says it ends past the data."""
    body = b"\x00\x00\x00\x01\x01\x80"  # header count varint continues past the data
    batch = raw_batch(encode_varint(len(body)) + body)
    with pytest.raises(CorruptRecordError):
        decode_records(batch)


@pytest.mark.parametrize(
    "codec", [COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
)
def test_bad_compressed_payload(codec: int) -> None:
    batch = raw_batch(b"this is not a compressed stream", attributes=codec)
    with pytest.raises(CorruptRecordError, match="decompress"):
        decode_records(batch)


@pytest.mark.parametrize("codec", [COMPRESSION_SNAPPY, COMPRESSION_LZ4])
def test_compressed_records_with_extra_bytes(codec: int) -> None:
    section = compress(codec, record(GOOD_BODY) + b"\x00\x00")
    with pytest.raises(InvalidRecord, match="2 bytes after"):
        decode_records(raw_batch(section, attributes=codec))


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_empty_batch(codec: int) -> None:
    """Compaction keeps empty batches (no records section) for producer state."""
    batch = raw_batch(b"", records_count=0, attributes=codec)
    assert decode_records(batch) == []
    assert [r for _, r in iter_records(batch + batch)] == [[], []]
    with pytest.raises(InvalidRecord, match="declares 1 records"):
        decode_records(raw_batch(b"", records_count=1, attributes=codec))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_in_attributes(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionType):
        decode_records(raw_batch(record(GOOD_BODY), attributes=codec))


@FAST
@given(
    section=st.binary(max_size=120),
    count=st.integers(-2, 6),
    attributes=st.sampled_from([0, 0, 0, 1, 2, 3, 4, 8]),
)
def test_garbage_records_only_raise_our_errors(section: bytes, count: int, attributes: int) -> None:
    batch = raw_batch(section, records_count=count, attributes=attributes)
    try:
        records = decode_records(batch)
    except (CorruptRecordError, InvalidRecord):
        return
    assert len(records) == count


@FAST
@given(items=record_tuples, data=st.data())
def test_mutated_records_only_raise_our_errors(items, data) -> None:  # type: ignore[no-untyped-def]
    """Flip bytes inside valid records (fixing up the CRC): decode succeeds or raises ours."""
    batch = build_batch(items)
    section = bytearray(batch[61:])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(section) - 1))
        section[i] = data.draw(st.integers(0, 255))
    mutated = raw_batch(bytes(section), records_count=len(items))
    try:
        decode_records(mutated)
    except (CorruptRecordError, InvalidRecord):
        pass
