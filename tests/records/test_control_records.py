"""Control records: the COMMIT/ABORT marker batch, byte for byte as Kafka writes it."""

from __future__ import annotations

import struct
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.errors import InvalidRecord
from tierlog.records import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    EndTransactionMarker,
    RecordBatchBuilder,
    build_end_txn_marker_batch,
    control_record_type,
    crc32c,
    decode_records,
    end_transaction_marker,
    read_end_txn_marker,
    read_header,
    validate_batch,
)
from tierlog.records.control_records import END_TXN_MARKER_BATCH_SIZE, control_record_key

from .strategies import FAST

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import default_records as kafka_records


def kafka_layout(
    control_type: int,
    coordinator_epoch: int,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    base_offset: int,
    partition_leader_epoch: int,
) -> bytes:
    """Kafka's MemoryRecordsBuilder output for withEndTransactionMarker, written out field by
    field from DefaultRecordBatch / DefaultRecord / EndTxnMarker, independently of the codec."""
    key = struct.pack(">hh", 0, control_type)  # ControlRecordType key, version 0
    value = struct.pack(">hi", 0, coordinator_epoch)  # EndTxnMarker v0
    body = (
        b"\x00"  # attributes
        + b"\x00"  # timestampDelta 0 (varlong)
        + b"\x00"  # offsetDelta 0 (varint)
        + b"\x08"  # keyLength 4 (zigzag)
        + key
        + b"\x0c"  # valueLength 6 (zigzag)
        + value
        + b"\x00"  # no headers
    )
    record = bytes([len(body) * 2]) + body  # length 16 (zigzag)
    after_crc = (
        struct.pack(">h", 0x30)  # attributes: transactional | control, CreateTime, none
        + struct.pack(">i", 0)  # lastOffsetDelta
        + struct.pack(">qq", timestamp, timestamp)  # first and max timestamp
        + struct.pack(">qhi", producer_id, producer_epoch, -1)  # base sequence -1
        + struct.pack(">i", 1)  # one record
        + record
    )
    return (
        struct.pack(">qiib", base_offset, 4 + 1 + 4 + len(after_crc), partition_leader_epoch, 2)
        + struct.pack(">I", crc32c(after_crc))
        + after_crc
    )


def test_commit_marker_batch_matches_kafkas_layout() -> None:
    batch = build_end_txn_marker_batch(
        EndTransactionMarker(CONTROL_TYPE_COMMIT, 7),
        producer_id=1000,
        producer_epoch=3,
        timestamp=1_700_000_000_123,
        base_offset=42,
        partition_leader_epoch=5,
    )
    assert batch == kafka_layout(CONTROL_TYPE_COMMIT, 7, 1000, 3, 1_700_000_000_123, 42, 5)
    assert len(batch) == END_TXN_MARKER_BATCH_SIZE == 78


ints16 = st.integers(-(2**15), 2**15 - 1)
ints32 = st.integers(-(2**31), 2**31 - 1)
ints64 = st.integers(-(2**63), 2**63 - 1)


@FAST
@given(
    control_type=st.sampled_from([CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT]),
    coordinator_epoch=ints32,
    producer_id=ints64,
    producer_epoch=ints16,
    timestamp=ints64,
    base_offset=ints64,
    partition_leader_epoch=ints32,
)
def test_marker_batches_round_trip_and_match_the_generic_builder(
    control_type: int,
    coordinator_epoch: int,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    base_offset: int,
    partition_leader_epoch: int,
) -> None:
    marker = EndTransactionMarker(control_type, coordinator_epoch)
    batch = build_end_txn_marker_batch(
        marker,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timestamp=timestamp,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
    )
    assert batch == kafka_layout(
        control_type,
        coordinator_epoch,
        producer_id,
        producer_epoch,
        timestamp,
        base_offset,
        partition_leader_epoch,
    )
    header = validate_batch(batch)
    assert header.is_control_batch and header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert read_end_txn_marker(batch, header) == marker
    # The generic builder (checked against real clients' batches) writes the same bytes.
    key, value = end_transaction_marker(control_type, coordinator_epoch)
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
    builder.append(timestamp, key, value)
    assert builder.build() == batch
    (record,) = decode_records(batch)
    assert control_record_type(record.key) == control_type


def test_kafka_python_reads_our_marker_as_a_control_batch() -> None:
    batch = build_end_txn_marker_batch(
        EndTransactionMarker(CONTROL_TYPE_ABORT, 2), producer_id=9, producer_epoch=1, timestamp=5
    )
    theirs = kafka_records.DefaultRecordBatch(batch)
    assert theirs.is_control_batch and theirs.is_transactional
    assert theirs.validate_crc()
    (record,) = list(theirs)
    assert (record.key, record.value) == (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x02")


def test_a_marker_in_a_compressed_control_batch_is_read() -> None:
    key, value = end_transaction_marker(CONTROL_TYPE_COMMIT, 11)
    builder = RecordBatchBuilder(
        1, producer_id=4, producer_epoch=0, is_transactional=True, is_control=True
    )
    builder.append(1, key, value)
    batch = builder.build()
    assert read_end_txn_marker(batch, read_header(batch)) == EndTransactionMarker(1, 11)


def test_other_control_types_are_not_markers() -> None:
    builder = RecordBatchBuilder(producer_id=4, producer_epoch=0, is_control=True)
    builder.append(1, control_record_key(2), b"\x00\x00")  # KRaft's LEADER_CHANGE
    batch = builder.build()
    assert read_end_txn_marker(batch, read_header(batch)) is None


def test_bad_input_gets_clear_errors() -> None:
    with pytest.raises(ValueError, match="ABORT \\(0\\) or COMMIT \\(1\\)"):
        end_transaction_marker(3, 0)
    with pytest.raises(ValueError, match="not an int32"):
        end_transaction_marker(CONTROL_TYPE_COMMIT, 2**31)
    with pytest.raises(ValueError, match="out of range"):
        build_end_txn_marker_batch(
            EndTransactionMarker(CONTROL_TYPE_COMMIT, 0),
            producer_id=1,
            producer_epoch=2**15,
            timestamp=0,
        )
    with pytest.raises(InvalidRecord, match="too short"):
        control_record_type(b"\x00")
    with pytest.raises(InvalidRecord, match="negative version"):
        control_record_type(b"\xff\xff\x00\x01")
    data = RecordBatchBuilder(producer_id=1, producer_epoch=0)
    data.append(1, b"k", b"v")
    plain = data.build()
    with pytest.raises(InvalidRecord, match="not a control batch"):
        read_end_txn_marker(plain, read_header(plain))
    short = RecordBatchBuilder(producer_id=1, producer_epoch=0, is_control=True)
    short.append(1, control_record_key(CONTROL_TYPE_ABORT), b"\x00")
    batch = short.build()
    with pytest.raises(InvalidRecord, match="too short"):
        read_end_txn_marker(batch, read_header(batch))
