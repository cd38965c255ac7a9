"""The 61-byte header view: CRC-32C, validation, iteration over a buffer, in-place patches."""

from __future__ import annotations

import pytest

from tierlog.errors import CorruptRecordError
from tierlog.records import (
    COMPRESSION_LZ4,
    RecordBatchBuilder,
    build_batch,
    compute_crc,
    crc32c,
    decode_records,
    iter_headers,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from tierlog.records.record_batch import CRC_OFFSET


def make_batch(n: int = 3, *, compression_type: int = 0, base_offset: int = 0) -> bytes:
    return build_batch(
        [(1_000 + i, b"k%d" % i, b"value %d" % i) for i in range(n)],
        compression_type,
        base_offset=base_offset,
    )


@pytest.mark.parametrize(
    ("data", "crc"),
    [
        (b"", 0x00000000),
        (b"123456789", 0xE3069283),  # the CRC-32C check value
        (b"\x00" * 32, 0x8A9136AA),  # RFC 3720 B.4
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
    ],
)
def test_crc32c_golden(data: bytes, crc: int) -> None:
    assert crc32c(data) == crc
    assert crc32c(bytearray(data)) == crc
    assert crc32c(memoryview(data)) == crc


def test_validate_and_crc_cover_bytes_21_to_end() -> None:
    batch = make_batch()
    header = validate_batch(batch)
    assert header.crc == crc32c(batch[21:]) == compute_crc(batch, header)
    assert header.size_in_bytes == len(batch)


@pytest.mark.parametrize("index", [17, 20, 21, 22, 30, 60, 61, -1])
def test_flipped_byte_fails_crc(index: int) -> None:
    batch = bytearray(make_batch())
    batch[index] ^= 0x01
    with pytest.raises(CorruptRecordError, match="crc"):
        validate_batch(batch)
    with pytest.raises(CorruptRecordError, match="crc"):
        decode_records(bytes(batch))


def test_bytes_outside_the_crc_do_not_matter() -> None:
    batch = bytearray(make_batch())
    batch[0] ^= 0xFF  # baseOffset
    batch[13] ^= 0xFF  # partitionLeaderEpoch
    validate_batch(batch)


def test_wrong_magic() -> None:
    batch = bytearray(make_batch())
    batch[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batch(batch)


def test_every_truncation_fails_validation() -> None:
    batch = make_batch()
    for cut in range(len(batch)):
        with pytest.raises(CorruptRecordError, match=r"truncated|batchLength"):
            validate_batch(batch[:cut])
        with pytest.raises(CorruptRecordError):
            decode_records(batch[:cut])


def test_max_size() -> None:
    batch = make_batch()
    validate_batch(batch, max_size=len(batch))
    with pytest.raises(CorruptRecordError, match="size"):
        validate_batch(batch, max_size=len(batch) - 1)


# --------------------------------------------------------------- iter_headers as a stream parser


def stream() -> tuple[bytes, list[int]]:
    """Three batches back to back and the offset where each ends."""
    batches = [make_batch(1), make_batch(5, base_offset=1), make_batch(2, base_offset=6)]
    ends, pos = [], 0
    for b in batches:
        pos += len(b)
        ends.append(pos)
    return b"".join(batches), ends


def test_iter_headers_whole_buffer() -> None:
    buf, ends = stream()
    headers = list(iter_headers(buf))
    assert [h.position + h.size_in_bytes for h in headers] == ends
    assert [h.base_offset for h in headers] == [0, 1, 6]
    assert [h.records_count for h in headers] == [1, 5, 2]


def test_iter_headers_byte_by_byte() -> None:
    """Every prefix yields exactly the batches that are complete in it."""
    buf, ends = stream()
    for cut in range(len(buf) + 1):
        complete = [h.position + h.size_in_bytes for h in iter_headers(buf[:cut])]
        assert complete == [e for e in ends if e <= cut]
        # The same through start/end on the whole buffer, and through a memoryview.
        window = [h.position + h.size_in_bytes for h in iter_headers(memoryview(buf), 0, cut)]
        assert window == complete


@pytest.mark.parametrize(
    "garbage",
    [b"\x00", b"\xff" * 100, b"\x00" * 100, b"garbage", bytes(range(60))],
    ids=["one-byte", "ff", "zeros", "text", "short"],
)
def test_iter_headers_stops_at_trailing_garbage(garbage: bytes) -> None:
    buf, ends = stream()
    headers = list(iter_headers(buf + garbage))
    assert [h.position + h.size_in_bytes for h in headers] == ends


def test_iter_headers_start_end() -> None:
    buf, ends = stream()
    assert [h.position for h in iter_headers(buf, ends[0])] == [ends[0], ends[1]]
    assert [h.position for h in iter_headers(buf, ends[0], ends[1])] == [ends[0]]
    assert list(iter_headers(buf, ends[0], ends[1] - 1)) == []


# --------------------------------------------------------------- in-place patches


def test_set_base_offset_keeps_crc() -> None:
    batch = bytearray(make_batch(4, compression_type=COMPRESSION_LZ4))
    crc_before = batch[CRC_OFFSET : CRC_OFFSET + 4]
    set_base_offset(batch, 0, 1_000_000_007)
    assert batch[CRC_OFFSET : CRC_OFFSET + 4] == crc_before
    header = validate_batch(batch)
    assert header.base_offset == 1_000_000_007
    assert header.last_offset == 1_000_000_010
    assert [r.offset for r in decode_records(batch)] == list(range(1_000_000_007, 1_000_000_011))


def test_set_partition_leader_epoch_keeps_crc() -> None:
    batch = bytearray(make_batch())
    crc_before = bytes(batch[CRC_OFFSET : CRC_OFFSET + 4])
    set_partition_leader_epoch(batch, 0, 42)
    assert bytes(batch[CRC_OFFSET : CRC_OFFSET + 4]) == crc_before
    assert validate_batch(batch).partition_leader_epoch == 42


def test_patches_at_a_position_in_a_larger_buffer() -> None:
    buf, ends = stream()
    mutable = bytearray(buf)
    view = memoryview(mutable)
    set_base_offset(view, ends[0], 500)
    set_partition_leader_epoch(view, ends[0], 7)
    set_log_append_time(view, ends[0], 99_999)
    first, second, third = (validate_batch(mutable, p) for p in (0, ends[0], ends[1]))
    assert (second.base_offset, second.partition_leader_epoch) == (500, 7)
    assert second.max_timestamp == 99_999 and second.timestamp_type == 1
    # The neighbours are untouched.
    assert mutable[: ends[0]] == buf[: ends[0]] and mutable[ends[1] :] == buf[ends[1] :]
    assert first.timestamp_type == third.timestamp_type == 0


@pytest.mark.parametrize("compression_type", [0, COMPRESSION_LZ4])
def test_set_log_append_time_recomputes_crc(compression_type: int) -> None:
    original = make_batch(5, compression_type=compression_type)
    batch = bytearray(original)
    set_log_append_time(batch, 0, 1_700_000_000_123)
    assert batch[CRC_OFFSET : CRC_OFFSET + 4] != original[CRC_OFFSET : CRC_OFFSET + 4]
    header = validate_batch(batch)
    assert header.timestamp_type == 1
    assert header.max_timestamp == 1_700_000_000_123
    assert header.compression_type == compression_type  # other attribute bits kept
    assert header.base_timestamp == read_header(original).base_timestamp
    # LogAppendTime: every record reads the batch's maxTimestamp.
    assert {r.timestamp for r in decode_records(batch)} == {1_700_000_000_123}


def test_log_append_time_from_the_builder_matches_the_patch() -> None:
    """A builder in LogAppendTime mode and a patched CreateTime batch are the same bytes."""
    records = [(5, b"k", b"v", ()), (9, None, b"w", ())]
    patched = bytearray(build_batch(records))
    set_log_append_time(patched, 0, 9)
    assert bytes(patched) == build_batch(records, timestamp_type=1)
    builder = RecordBatchBuilder(timestamp_type=1)
    builder.append(5, b"k", b"v")
    builder.append(9, None, b"w")
    assert builder.build() == bytes(patched)
