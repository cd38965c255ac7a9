"""Golden vectors built by hand from Kafka's JSON schemas, round trips, malformed input."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given

from tests.tiered.strategies import any_metadata
from tierlog.errors import CorruptMetadataError
from tierlog.tiered.metadata_serde import (
    deserialize,
    peek_topic_id_partition,
    read_header,
    serialize,
)
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState as S
from tierlog.tiered.remote_log_segment_state import RemotePartitionDeleteState as P

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
SEG_ID = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")
TP = TopicIdPartition(TOPIC_ID, "foo", 1)
SID = RemoteLogSegmentId(TP, SEG_ID)

H = bytes.fromhex
# TopicIdPartitionEntry: Name compact string "foo" (len+1 = 4), Id uuid, Partition int32, tags
TP_ENTRY = H("04") + b"foo" + TOPIC_ID.bytes + H("00000001") + H("00")
# RemoteLogSegmentIdEntry: TopicIdPartition, Id uuid, tags
SID_ENTRY = TP_ENTRY + SEG_ID.bytes + H("00")

SEGMENT = RemoteLogSegmentMetadata(
    SID,
    start_offset=100,
    end_offset=199,
    max_timestamp_ms=1_700_000_000_000,
    broker_id=2,
    event_timestamp_ms=1_700_000_000_123,
    segment_size_in_bytes=4096,
    segment_leader_epochs={5: 100, 6: 150},
    custom_metadata=b"\xca\xfe",
    state=S.COPY_SEGMENT_FINISHED,
    txn_idx_empty=True,
)
SEGMENT_BYTES = (
    H("01 00 00")  # frame version 1, apiKey 0, version 0
    + SID_ENTRY
    + H("0000000000000064")  # StartOffset 100
    + H("00000000000000c7")  # EndOffset 199
    + H("00000002")  # BrokerId 2
    + H("0000018bcfe56800")  # MaxTimestampMs 1700000000000
    + H("0000018bcfe5687b")  # EventTimestampMs 1700000000123
    + H("03")  # SegmentLeaderEpochs: 2 entries + 1
    + H("00000005 0000000000000064 00")  # LeaderEpoch 5, Offset 100, tags
    + H("00000006 0000000000000096 00")  # LeaderEpoch 6, Offset 150, tags
    + H("00001000")  # SegmentSizeInBytes 4096
    + H("03 cafe")  # CustomMetadata: 2 bytes + 1
    + H("01")  # RemoteLogSegmentState COPY_SEGMENT_FINISHED
    + H("01 00 01 01")  # tagged fields: 1 field, tag 0 (TxnIndexEmpty), size 1, true
)

UPDATE = RemoteLogSegmentMetadataUpdate(SID, 1_700_000_000_123, None, S.DELETE_SEGMENT_STARTED, 2)
UPDATE_BYTES = (
    H("01 01 00")
    + SID_ENTRY
    + H("00000002")  # BrokerId
    + H("0000018bcfe5687b")  # EventTimestampMs
    + H("00")  # CustomMetadata null
    + H("02")  # DELETE_SEGMENT_STARTED
    + H("00")  # no tagged fields
)

DELETE = RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_STARTED, 1_700_000_000_123, 3)
DELETE_BYTES = H("01 02 00") + TP_ENTRY + H("00000003") + H("0000018bcfe5687b") + H("01") + H("00")

SNAPSHOT = RemoteLogSegmentMetadataSnapshot(
    SEG_ID, 0, 9, -1, 0, 0, 512, {0: 0}, None, S.COPY_SEGMENT_STARTED, False
)
SNAPSHOT_BYTES = (
    H("01 03 00")
    + SEG_ID.bytes
    + H("0000000000000000 0000000000000009 00000000 ffffffffffffffff 0000000000000000")
    + H("02 00000000 0000000000000000 00")  # one epoch entry
    + H("00000200")  # size 512
    + H("00")  # custom metadata null
    + H("00")  # COPY_SEGMENT_STARTED
    + H("00")  # no tags (TxnIndexEmpty false is the default)
)

GOLDEN = [
    (SEGMENT, SEGMENT_BYTES),
    (UPDATE, UPDATE_BYTES),
    (DELETE, DELETE_BYTES),
    (SNAPSHOT, SNAPSHOT_BYTES),
]


@pytest.mark.parametrize(("metadata", "data"), GOLDEN)
def test_golden_bytes(metadata, data):
    assert serialize(metadata) == data
    assert deserialize(data) == metadata


def test_reads_version_1_with_its_tagged_fields():
    # v1 of apiKey 0 adds BrokerLeaderEpoch (tag 1, int32) after TxnIndexEmpty (tag 0).
    v1 = bytearray(SEGMENT_BYTES)
    v1[2] = 1
    v1[-4:] = H("02 00 01 01 01 04 00000007")
    assert deserialize(bytes(v1)) == SEGMENT
    # v1 of apiKey 1: BrokerLeaderEpoch (tag 0) and EndOffset (tag 1)
    u1 = bytearray(UPDATE_BYTES)
    u1[2] = 1
    u1[-1:] = H("02 00 04 00000007 01 08 00000000000000c7")
    assert deserialize(bytes(u1)) == UPDATE


@given(any_metadata)
def test_round_trip(metadata):
    assert deserialize(serialize(metadata)) == metadata


def test_peek_topic_id_partition():
    assert peek_topic_id_partition(SEGMENT_BYTES) == TP
    assert peek_topic_id_partition(UPDATE_BYTES) == TP
    assert peek_topic_id_partition(DELETE_BYTES) == TP
    assert peek_topic_id_partition(SNAPSHOT_BYTES) is None
    assert read_header(UPDATE_BYTES) == (1, 0, 3)


@pytest.mark.parametrize(("_", "data"), GOLDEN)
def test_every_truncation_is_corrupt(_, data):
    for n in range(len(data)):
        with pytest.raises(CorruptMetadataError):
            deserialize(data[:n])


@pytest.mark.parametrize(
    "data",
    [
        SEGMENT_BYTES + b"\x00",  # trailing garbage
        H("00") + SEGMENT_BYTES[1:],  # frame version 0 (KRaft 2.8 preview)
        H("02") + SEGMENT_BYTES[1:],  # unknown frame version
        H("01 04 00") + SEGMENT_BYTES[3:],  # unknown apiKey
        H("01 00 02") + SEGMENT_BYTES[3:],  # unsupported version
        UPDATE_BYTES[:-2] + H("07 00"),  # unknown segment state
        DELETE_BYTES[:-2] + H("05 00"),  # unknown partition delete state
        UPDATE_BYTES[:3] + H("00") + UPDATE_BYTES[4:],  # null topic name
        UPDATE_BYTES[:3] + H("04 ff fe fd") + UPDATE_BYTES[7:],  # not UTF-8
        H("01 00 ff ff ff ff ff 01"),  # over-long varint
        SEGMENT_BYTES.replace(
            H("0000000000000064 00000000000000c7"), H("0000000000000064 0000000000000001")
        ),  # end < start
    ],
)
def test_malformed_values_raise_corrupt_metadata(data):
    with pytest.raises(CorruptMetadataError):
        deserialize(data)


def test_serialize_rejects_non_metadata():
    with pytest.raises(TypeError):
        serialize(object())  # type: ignore[arg-type]
