"""Remote log metadata records, byte-compatible with Kafka's ``RemoteLogMetadataSerde`` (sans-IO).

These are the values of the ``__remote_log_metadata`` topic (keys are null). One value is
Kafka's ``AbstractApiMessageSerde`` frame around a flexible-version message::

    frameVersion: uvarint   = 1  (0 was KRaft 2.8 preview, rejected)
    apiKey:       uvarint   0..3, the record type below
    version:      uvarint   the record's schema version (we write 0, read 0 and 1)
    body:                   the record, flexible encoding:
        int8/int32/int64     big-endian
        bool                 1 byte, non-zero = true
        uuid                 16 bytes (most significant long first) = uuid.UUID.bytes
        string               compact: uvarint(len + 1), UTF-8 bytes
        nullable bytes       compact: uvarint(len + 1), bytes; 0 = null
        array                compact: uvarint(n + 1), n elements
        struct               its fields, then its own tagged-field section
        tagged fields        uvarint count, then count x (uvarint tag, uvarint size, data)

The four records (storage/src/main/resources/message/*.json)::

    RemoteLogSegmentMetadataRecord (apiKey 0)
        RemoteLogSegmentId {TopicIdPartition {Name string, Id uuid, Partition int32, _tags},
                            Id uuid, _tags}
        StartOffset int64, EndOffset int64, BrokerId int32, MaxTimestampMs int64,
        EventTimestampMs int64,
        SegmentLeaderEpochs [{LeaderEpoch int32, Offset int64, _tags}],
        SegmentSizeInBytes int32, CustomMetadata nullable bytes, RemoteLogSegmentState int8,
        _tags {0: TxnIndexEmpty bool, 1 (v1+): BrokerLeaderEpoch int32}
    RemoteLogSegmentMetadataUpdateRecord (apiKey 1)
        RemoteLogSegmentId {...as above}, BrokerId int32, EventTimestampMs int64,
        CustomMetadata nullable bytes, RemoteLogSegmentState int8,
        _tags {0 (v1+): BrokerLeaderEpoch int32, 1 (v1+): EndOffset int64}
    RemotePartitionDeleteMetadataRecord (apiKey 2)
        TopicIdPartition {...}, BrokerId int32, EventTimestampMs int64,
        RemotePartitionDeleteState int8, _tags {0 (v1+): BrokerLeaderEpoch, 1 (v1+): EndOffset}
    RemoteLogSegmentMetadataSnapshotRecord (apiKey 3)
        SegmentId uuid, StartOffset int64, EndOffset int64, BrokerId int32, MaxTimestampMs int64,
        EventTimestampMs int64, SegmentLeaderEpochs [...], SegmentSizeInBytes int32,
        CustomMetadata nullable bytes, RemoteLogSegmentState int8,
        _tags {0: TxnIndexEmpty bool, 1 (v1+): BrokerLeaderEpoch int32}

Version 1 (Kafka 4.1+) only adds tagged fields; we write version 0, which every Kafka since 3.6
reads, and read both (the v1-only BrokerLeaderEpoch/EndOffset tags are skipped: our metadata
types do not carry them). Unknown tags are skipped, as Kafka does.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping

from tierlog.errors import CorruptMetadataError
from tierlog.records.varint import encode_unsigned_varint
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
)

FRAME_VERSION = 1

REMOTE_LOG_SEGMENT_METADATA_RECORD = 0
REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD = 1
REMOTE_PARTITION_DELETE_METADATA_RECORD = 2
REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD = 3

WRITE_VERSION = 0
HIGHEST_READ_VERSION = 1

_TAG_TXN_INDEX_EMPTY = 0

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_EPOCH_ENTRY = struct.Struct(">iq")
# StartOffset, EndOffset, BrokerId, MaxTimestampMs, EventTimestampMs
_SEGMENT_FIXED = struct.Struct(">qqiqq")
# BrokerId, EventTimestampMs
_EVENT_FIXED = struct.Struct(">iq")


# ------------------------------------------------------------------------------ encoding


def _compact_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return encode_unsigned_varint(len(raw) + 1) + raw


def _compact_nullable_bytes(b: bytes | None) -> bytes:
    if b is None:
        return b"\x00"
    return encode_unsigned_varint(len(b) + 1) + b


def _topic_id_partition(tp: TopicIdPartition) -> bytes:
    return _compact_string(tp.topic) + tp.topic_id.bytes + _I32.pack(tp.partition) + b"\x00"


def _segment_id_entry(sid: RemoteLogSegmentId) -> bytes:
    return _topic_id_partition(sid.topic_id_partition) + sid.id.bytes + b"\x00"


def _leader_epochs(epochs: Mapping[int, int]) -> bytes:
    parts = [encode_unsigned_varint(len(epochs) + 1)]
    for epoch, offset in epochs.items():
        parts.append(_EPOCH_ENTRY.pack(epoch, offset))
        parts.append(b"\x00")
    return b"".join(parts)


def _segment_tail(
    size: int, custom: bytes | None, state: RemoteLogSegmentState, txn_idx_empty: bool
) -> bytes:
    tags = b"\x01\x00\x01\x01" if txn_idx_empty else b"\x00"  # 1 field: tag 0, size 1, true
    return _I32.pack(size) + _compact_nullable_bytes(custom) + bytes((int(state),)) + tags


def _frame(api_key: int, body: bytes) -> bytes:
    return bytes((FRAME_VERSION, api_key, WRITE_VERSION)) + body


def serialize(metadata: RemoteLogMetadata) -> bytes:
    """The ``__remote_log_metadata`` value for one metadata event (Kafka's serde, version 0)."""
    if isinstance(metadata, RemoteLogSegmentMetadata):
        body = (
            _segment_id_entry(metadata.remote_log_segment_id)
            + _SEGMENT_FIXED.pack(
                metadata.start_offset,
                metadata.end_offset,
                metadata.broker_id,
                metadata.max_timestamp_ms,
                metadata.event_timestamp_ms,
            )
            + _leader_epochs(metadata.segment_leader_epochs)
            + _segment_tail(
                metadata.segment_size_in_bytes,
                metadata.custom_metadata,
                metadata.state,
                metadata.txn_idx_empty,
            )
        )
        return _frame(REMOTE_LOG_SEGMENT_METADATA_RECORD, body)
    if isinstance(metadata, RemoteLogSegmentMetadataUpdate):
        body = (
            _segment_id_entry(metadata.remote_log_segment_id)
            + _EVENT_FIXED.pack(metadata.broker_id, metadata.event_timestamp_ms)
            + _compact_nullable_bytes(metadata.custom_metadata)
            + bytes((int(metadata.state),))
            + b"\x00"
        )
        return _frame(REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD, body)
    if isinstance(metadata, RemotePartitionDeleteMetadata):
        body = (
            _topic_id_partition(metadata.topic_id_partition)
            + _EVENT_FIXED.pack(metadata.broker_id, metadata.event_timestamp_ms)
            + bytes((int(metadata.state),))
            + b"\x00"
        )
        return _frame(REMOTE_PARTITION_DELETE_METADATA_RECORD, body)
    if isinstance(metadata, RemoteLogSegmentMetadataSnapshot):
        body = (
            metadata.segment_id.bytes
            + _SEGMENT_FIXED.pack(
                metadata.start_offset,
                metadata.end_offset,
                metadata.broker_id,
                metadata.max_timestamp_ms,
                metadata.event_timestamp_ms,
            )
            + _leader_epochs(metadata.segment_leader_epochs)
            + _segment_tail(
                metadata.segment_size_in_bytes,
                metadata.custom_metadata,
                metadata.state,
                metadata.txn_idx_empty,
            )
        )
        return _frame(REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD, body)
    raise TypeError(f"not remote log metadata: {type(metadata).__name__}")


# ------------------------------------------------------------------------------ decoding


class _Reader:
    """Cursor over one value. Every read checks bounds and raises CorruptMetadataError."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def need(self, n: int, what: str) -> int:
        pos = self.pos
        if pos + n > len(self.buf):
            raise CorruptMetadataError(
                f"truncated remote log metadata: {what} needs {n} bytes at {pos}, "
                f"{len(self.buf) - pos} left"
            )
        self.pos = pos + n
        return pos

    def uvarint(self, what: str) -> int:
        buf = self.buf
        result = shift = 0
        pos = self.pos
        while True:
            if pos >= len(buf):
                raise CorruptMetadataError(f"truncated unsigned varint ({what}) at {self.pos}")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 28:
                raise CorruptMetadataError(f"unsigned varint ({what}) longer than 5 bytes")
        self.pos = pos
        return result

    def int8(self, what: str) -> int:
        pos = self.need(1, what)
        v = self.buf[pos]
        return v - 256 if v > 127 else v

    def int32(self, what: str) -> int:
        return int(_I32.unpack_from(self.buf, self.need(4, what))[0])

    def uuid(self, what: str) -> uuid.UUID:
        pos = self.need(16, what)
        return uuid.UUID(bytes=bytes(self.buf[pos : pos + 16]))

    def compact_string(self, what: str) -> str:
        n = self.uvarint(what) - 1
        if n < 0:
            raise CorruptMetadataError(f"non-nullable string {what} is null")
        pos = self.need(n, what)
        try:
            return self.buf[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptMetadataError(f"{what} is not UTF-8: {e}") from None

    def compact_nullable_bytes(self, what: str) -> bytes | None:
        n = self.uvarint(what) - 1
        if n < 0:
            return None
        pos = self.need(n, what)
        return bytes(self.buf[pos : pos + n])

    def tagged_fields(self, what: str) -> dict[int, bytes]:
        count = self.uvarint(what)
        if count == 0:
            return {}
        fields = {}
        for _ in range(count):
            tag = self.uvarint(what)
            size = self.uvarint(what)
            pos = self.need(size, what)
            fields[tag] = bytes(self.buf[pos : pos + size])
        return fields

    def topic_id_partition(self) -> TopicIdPartition:
        name = self.compact_string("TopicIdPartition.Name")
        topic_id = self.uuid("TopicIdPartition.Id")
        partition = self.int32("TopicIdPartition.Partition")
        self.tagged_fields("TopicIdPartition tags")
        return TopicIdPartition(topic_id, name, partition)

    def segment_id(self) -> RemoteLogSegmentId:
        tp = self.topic_id_partition()
        sid = self.uuid("RemoteLogSegmentId.Id")
        self.tagged_fields("RemoteLogSegmentId tags")
        return RemoteLogSegmentId(tp, sid)

    def leader_epochs(self) -> dict[int, int]:
        n = self.uvarint("SegmentLeaderEpochs") - 1
        if n < 0:
            raise CorruptMetadataError("non-nullable SegmentLeaderEpochs is null")
        epochs = {}
        for _ in range(n):
            epoch, offset = _EPOCH_ENTRY.unpack_from(self.buf, self.need(12, "SegmentLeaderEpoch"))
            self.tagged_fields("SegmentLeaderEpoch tags")
            epochs[epoch] = offset
        return epochs

    def segment_state(self) -> RemoteLogSegmentState:
        sid = self.int8("RemoteLogSegmentState")
        try:
            return RemoteLogSegmentState(sid)
        except ValueError:
            raise CorruptMetadataError(f"unknown RemoteLogSegmentState id {sid}") from None


def _txn_index_empty(tags: dict[int, bytes]) -> bool:
    raw = tags.get(_TAG_TXN_INDEX_EMPTY)
    if raw is None:
        return False
    if len(raw) != 1:
        raise CorruptMetadataError(f"TxnIndexEmpty tag has {len(raw)} bytes, expected 1")
    return raw[0] != 0


def read_header(data: bytes) -> tuple[int, int, int]:
    """``(api_key, version, body_position)`` of a value, after checking the frame version.

    Raises:
        CorruptMetadataError: bad frame version, unknown api key or unsupported version.
    """
    r = _Reader(data)
    frame = r.uvarint("frame version")
    if frame != FRAME_VERSION:
        raise CorruptMetadataError(
            f"unknown remote log metadata frame version {frame} (only {FRAME_VERSION} is supported)"
        )
    api_key = r.uvarint("apiKey")
    version = r.uvarint("version")
    if api_key > REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD:
        raise CorruptMetadataError(f"unknown remote log metadata apiKey {api_key}")
    if version > HIGHEST_READ_VERSION:
        raise CorruptMetadataError(f"unsupported version {version} of metadata apiKey {api_key}")
    return api_key, version, r.pos


def peek_topic_id_partition(data: bytes) -> TopicIdPartition | None:
    """The user partition a value is about, without decoding the rest (None for snapshots).

    Raises:
        CorruptMetadataError: malformed header or partition.
    """
    api_key, _, pos = read_header(data)
    if api_key == REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD:
        return None
    r = _Reader(data)
    r.pos = pos
    return r.topic_id_partition()


def deserialize(data: bytes) -> RemoteLogMetadata:
    """Decode one ``__remote_log_metadata`` value.

    Raises:
        CorruptMetadataError: malformed, truncated or trailing bytes, unknown api key, version
            or state id, or field values that no valid metadata can have.
    """
    api_key, _version, pos = read_header(data)
    r = _Reader(data)
    r.pos = pos
    try:
        result: RemoteLogMetadata
        if api_key == REMOTE_LOG_SEGMENT_METADATA_RECORD:
            sid = r.segment_id()
            start, end, broker, max_ts, event_ts = _SEGMENT_FIXED.unpack_from(
                data, r.need(36, "segment offsets and timestamps")
            )
            epochs = r.leader_epochs()
            size = r.int32("SegmentSizeInBytes")
            custom = r.compact_nullable_bytes("CustomMetadata")
            state = r.segment_state()
            tags = r.tagged_fields("record tags")
            result = RemoteLogSegmentMetadata(
                sid, start, end, max_ts, broker, event_ts, size, epochs, custom, state,
                _txn_index_empty(tags),
            )  # fmt: skip
        elif api_key == REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD:
            sid = r.segment_id()
            broker, event_ts = _EVENT_FIXED.unpack_from(data, r.need(12, "BrokerId/EventTime"))
            custom = r.compact_nullable_bytes("CustomMetadata")
            state = r.segment_state()
            r.tagged_fields("record tags")
            result = RemoteLogSegmentMetadataUpdate(sid, event_ts, custom, state, broker)
        elif api_key == REMOTE_PARTITION_DELETE_METADATA_RECORD:
            tp = r.topic_id_partition()
            broker, event_ts = _EVENT_FIXED.unpack_from(data, r.need(12, "BrokerId/EventTime"))
            state_id = r.int8("RemotePartitionDeleteState")
            try:
                pstate = RemotePartitionDeleteState(state_id)
            except ValueError:
                raise CorruptMetadataError(
                    f"unknown RemotePartitionDeleteState id {state_id}"
                ) from None
            r.tagged_fields("record tags")
            result = RemotePartitionDeleteMetadata(tp, pstate, event_ts, broker)
        else:
            seg = r.uuid("SegmentId")
            start, end, broker, max_ts, event_ts = _SEGMENT_FIXED.unpack_from(
                data, r.need(36, "segment offsets and timestamps")
            )
            epochs = r.leader_epochs()
            size = r.int32("SegmentSizeInBytes")
            custom = r.compact_nullable_bytes("CustomMetadata")
            state = r.segment_state()
            tags = r.tagged_fields("record tags")
            result = RemoteLogSegmentMetadataSnapshot(
                seg, start, end, max_ts, broker, event_ts, size, epochs, custom, state,
                _txn_index_empty(tags),
            )  # fmt: skip
    except ValueError as e:  # invariants of the metadata types (end < start, no epochs, ...)
        raise CorruptMetadataError(f"invalid remote log metadata (apiKey {api_key}): {e}") from e
    if r.pos != len(data):
        raise CorruptMetadataError(
            f"{len(data) - r.pos} byte(s) of garbage after remote log metadata apiKey {api_key}"
        )
    return result


__all__ = [
    "FRAME_VERSION",
    "REMOTE_LOG_SEGMENT_METADATA_RECORD",
    "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD",
    "REMOTE_PARTITION_DELETE_METADATA_RECORD",
    "REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD",
    "serialize",
    "deserialize",
    "read_header",
    "peek_topic_id_partition",
]
