"""The ``__consumer_offsets`` records of KIP-848 consumer groups, byte-compatible with Kafka's.

Keys are ``int16 record type`` then non-flexible fields; values are ``int16 version`` (0) then
flexible fields (compact strings and arrays, tagged fields). From Kafka's schemas in
``group-coordinator/src/main/resources/common/message/``::

    type 3  ConsumerGroupMetadataKey                 GroupId
            ConsumerGroupMetadataValue               Epoch int32  (tagged: MetadataHash, ...)
    type 5  ConsumerGroupMemberMetadataKey           GroupId, MemberId
            ConsumerGroupMemberMetadataValue         InstanceId string?, RackId string?,
                                                     ClientId, ClientHost, SubscribedTopicNames
                                                     [string], SubscribedTopicRegex string?,
                                                     RebalanceTimeoutMs int32, ServerAssignor
                                                     string?
    type 6  ConsumerGroupTargetAssignmentMetadataKey GroupId
            ConsumerGroupTargetAssignmentMetadataValue  AssignmentEpoch int32
    type 7  ConsumerGroupTargetAssignmentMemberKey   GroupId, MemberId
            ConsumerGroupTargetAssignmentMemberValue TopicPartitions [TopicId uuid,
                                                     Partitions [int32]]
    type 8  ConsumerGroupCurrentMemberAssignmentKey  GroupId, MemberId
            ConsumerGroupCurrentMemberAssignmentValue  MemberEpoch int32, PreviousMemberEpoch
                                                     int32, State int8, AssignedPartitions
                                                     [TopicPartitions], PartitionsPendingRevocation
                                                     [TopicPartitions]

Type 4 (ConsumerGroupPartitionMetadata, deprecated by Kafka 4.1) is not written: the
subscription metadata is recomputed from the topics when the group is loaded. Tagged fields
we do not know are skipped on reading. A tombstone (value None) deletes its key.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from tierlog.coordinator.group.group_records import _Reader, _version, _Writer
from tierlog.errors import LocalProtocolError

__all__ = [
    "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_TYPE",
    "CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE",
    "CONSUMER_GROUP_METADATA_KEY_TYPE",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_TYPE",
    "Assignment",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupKey",
    "ConsumerGroupMemberMetadataValue",
    "decode_assignment_value",
    "decode_consumer_group_key",
    "decode_epoch_value",
    "encode_assignment_value",
    "encode_epoch_value",
]

CONSUMER_GROUP_METADATA_KEY_TYPE = 3
CONSUMER_GROUP_PARTITION_METADATA_KEY_TYPE = 4
CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_TYPE = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_TYPE = 8

_GROUP_ONLY = (CONSUMER_GROUP_METADATA_KEY_TYPE, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_TYPE)
_WITH_MEMBER = (
    CONSUMER_GROUP_MEMBER_METADATA_KEY_TYPE,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_TYPE,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_TYPE,
)

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Partitions by topic id (Kafka's ``Map<Uuid, Set<Integer>>``)."""

_I8 = struct.Struct(">b")


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A consumer-group record key: ``record_type`` 3-8, the group, and the member (types 5, 7,
    8; "" for 3 and 6)."""

    record_type: int
    group_id: str
    member_id: str = ""

    def encode(self) -> bytes:
        """Raises:
        ValueError: a record type not 3-8, or a member id missing or extra."""
        if self.record_type in _GROUP_ONLY:
            if self.member_id:
                raise ValueError(f"record type {self.record_type} has no member id")
        elif self.record_type not in _WITH_MEMBER:
            raise ValueError(f"record type {self.record_type} is not a consumer group key")
        w = _Writer(self.record_type)
        w.flexible = False
        w.string(self.group_id)
        if self.record_type in _WITH_MEMBER:
            w.string(self.member_id)
        return bytes(w.buf)


def decode_consumer_group_key(data: bytes | memoryview) -> ConsumerGroupKey | None:
    """Parse a key of record type 3-8 (4 too, so that its records can be skipped); None for
    other types.

    Raises:
        LocalProtocolError: truncated or not UTF-8.
    """
    record_type = _version(data, "consumer group record key")
    r = _Reader(data, 2, False, f"consumer group record key type {record_type}")
    if record_type in (*_GROUP_ONLY, CONSUMER_GROUP_PARTITION_METADATA_KEY_TYPE):
        return ConsumerGroupKey(record_type, r.string())
    if record_type in _WITH_MEMBER:
        return ConsumerGroupKey(record_type, r.string(), r.string())
    return None


# --------------------------------------------------------------------------- value helpers


def _value_reader(data: bytes | memoryview, what: str) -> _Reader:
    version = _version(data, what)
    if version < 0:
        raise LocalProtocolError(f"{what}: negative version {version}")
    return _Reader(data, 2, True, f"{what} v{version}")


def _write_uuid(w: _Writer, u: uuid.UUID) -> None:
    w.buf += u.bytes


def _read_uuid(r: _Reader) -> uuid.UUID:
    return uuid.UUID(bytes=r._take(16))


def _write_topic_partitions(w: _Writer, assignment: Assignment) -> None:
    items = sorted((t, sorted(ps)) for t, ps in assignment.items() if ps)
    w.array_len(len(items))
    for topic_id, partitions in items:
        _write_uuid(w, topic_id)
        w.array_len(len(partitions))
        for p in partitions:
            w.int32(p)
        w.tagged_fields()


def _read_topic_partitions(r: _Reader) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.array_len()):
        topic_id = _read_uuid(r)
        out[topic_id] = frozenset(r.int32() for _ in range(r.array_len()))
        r.tagged_fields()  # AssignmentEpochs (KIP-1251) is tag 0: skipped
    return out


# --------------------------------------------------------------------------- values


def encode_epoch_value(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue (group epoch) and ConsumerGroupTargetAssignmentMetadataValue
    (assignment epoch) share this layout: one int32 and tagged fields."""
    w = _Writer(0)
    w.flexible = True
    w.int32(epoch)
    w.tagged_fields()
    return bytes(w.buf)


def decode_epoch_value(data: bytes | memoryview) -> int:
    """Raises:
    LocalProtocolError: truncated or malformed."""
    r = _value_reader(data, "consumer group epoch value")
    epoch = r.int32()
    r.tagged_fields()
    return epoch


def encode_assignment_value(assignment: Assignment) -> bytes:
    """ConsumerGroupTargetAssignmentMemberValue."""
    w = _Writer(0)
    w.flexible = True
    _write_topic_partitions(w, assignment)
    w.tagged_fields()
    return bytes(w.buf)


def decode_assignment_value(data: bytes | memoryview) -> dict[uuid.UUID, frozenset[int]]:
    """Raises:
    LocalProtocolError: truncated or malformed."""
    r = _value_reader(data, "ConsumerGroupTargetAssignmentMemberValue")
    out = _read_topic_partitions(r)
    r.tagged_fields()
    return out


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    """A member's subscription and identity (record type 5)."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None

    def encode(self) -> bytes:
        w = _Writer(0)
        w.flexible = True
        w.string(self.instance_id)
        w.string(self.rack_id)
        w.string(self.client_id)
        w.string(self.client_host)
        w.array_len(len(self.subscribed_topic_names))
        for name in self.subscribed_topic_names:
            w.string(name)
        w.string(self.subscribed_topic_regex)
        w.int32(self.rebalance_timeout_ms)
        w.string(self.server_assignor)
        w.tagged_fields()
        return bytes(w.buf)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> ConsumerGroupMemberMetadataValue:
        """Raises:
        LocalProtocolError: truncated or malformed."""
        r = _value_reader(data, "ConsumerGroupMemberMetadataValue")
        instance_id = r.nullable_string()
        rack_id = r.nullable_string()
        client_id = r.string()
        client_host = r.string()
        names = tuple(r.string() for _ in range(r.array_len()))
        regex = r.nullable_string()
        rebalance_timeout_ms = r.int32()
        server_assignor = r.nullable_string()
        r.tagged_fields()
        return cls(
            instance_id,
            rack_id,
            client_id,
            client_host,
            names,
            regex,
            rebalance_timeout_ms,
            server_assignor,
        )


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """A member's epoch, reconciliation state and owned partitions (record type 8)."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: Assignment
    partitions_pending_revocation: Assignment

    def encode(self) -> bytes:
        w = _Writer(0)
        w.flexible = True
        w.int32(self.member_epoch)
        w.int32(self.previous_member_epoch)
        w.buf += _I8.pack(self.state)
        _write_topic_partitions(w, self.assigned_partitions)
        _write_topic_partitions(w, self.partitions_pending_revocation)
        w.tagged_fields()
        return bytes(w.buf)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> ConsumerGroupCurrentMemberAssignmentValue:
        """Raises:
        LocalProtocolError: truncated or malformed."""
        r = _value_reader(data, "ConsumerGroupCurrentMemberAssignmentValue")
        member_epoch = r.int32()
        previous = r.int32()
        state: int = _I8.unpack(r._take(1))[0]
        assigned = _read_topic_partitions(r)
        pending = _read_topic_partitions(r)
        r.tagged_fields()
        return cls(member_epoch, previous, state, assigned, pending)
