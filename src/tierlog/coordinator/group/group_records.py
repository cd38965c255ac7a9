"""The key and value formats of Kafka's ``__consumer_offsets`` topic, byte-compatible.

Every record key and value starts with an int16 *version*. For keys the version is really the
record type (Kafka's ``coordinator-key`` ``apiKey``): 0 and 1 are offset commits, 2 is group
metadata; higher types (KIP-848 consumer groups, share groups, ...) are not ours and
:func:`decode_key` returns ``None`` for them. The rest follows Kafka's JSON schemas in
``group-coordinator/src/main/resources/common/message/``::

    OffsetCommitKey      (type 0/1)  group string, topic string, partition int32
    GroupMetadataKey     (type 2)    group string

    OffsetCommitValue    v0  offset int64, metadata string, commitTimestamp int64
                         v1  offset int64, metadata string, commitTimestamp int64,
                             expireTimestamp int64
                         v2  as v0
                         v3  offset int64, leaderEpoch int32, metadata string, commitTimestamp int64
                         v4  as v3, flexible (compact string, tagged fields)   <- we write v3

    GroupMetadataValue   protocolType string, generation int32, protocol string?, leader string?,
                         currentStateTimestamp int64 (v2+), members [MemberMetadata]
       MemberMetadata    memberId string, groupInstanceId string? (v3+), clientId string,
                         clientHost string, rebalanceTimeout int32 (v1+), sessionTimeout int32,
                         subscription bytes, assignment bytes
                         v0-v3 classic encoding, v4 flexible                   <- we write v3

Classic encoding: string = int16 length + UTF-8 (-1 = null), bytes = int32 length, array = int32
count. Flexible encoding (v4): lengths and counts are unsigned varints of ``n + 1`` (0 = null),
and every struct ends with a tagged-field section (unsigned varint count, then tag, size, data).
Unknown tagged fields are skipped. Following KIP-915, a value version above the highest we know
is read as the highest known (flexible) version: newer Kafka only adds tagged fields.
Trailing bytes after a value are ignored, as Kafka's readers do.

Sans-IO and pure: safe to use from any thread. Decoders raise
:class:`~tierlog.errors.LocalProtocolError` on malformed input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tierlog.errors import CorruptRecordError, LocalProtocolError
from tierlog.records.varint import append_unsigned_varint, decode_unsigned_varint

__all__ = [
    "GROUP_METADATA_KEY_TYPE",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_TYPE",
    "OFFSET_COMMIT_VALUE_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "decode_key",
]

OFFSET_COMMIT_KEY_TYPE = 1
"""Key version Kafka writes for offset commits (0 is read too)."""
GROUP_METADATA_KEY_TYPE = 2
OFFSET_COMMIT_VALUE_VERSION = 3
"""Value version Kafka writes for offset commits without an expire timestamp."""
GROUP_METADATA_VALUE_VERSION = 3
"""Value version Kafka writes for group metadata (IBP >= 2.3)."""

_HIGHEST_OFFSET_COMMIT_VALUE = 4
_HIGHEST_GROUP_METADATA_VALUE = 4
_FIRST_FLEXIBLE = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# --------------------------------------------------------------------------- writer


class _Writer:
    __slots__ = ("buf", "flexible")

    def __init__(self, version: int) -> None:
        self.buf = bytearray(_I16.pack(version))
        self.flexible = version >= _FIRST_FLEXIBLE

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def string(self, s: str | None) -> None:
        if s is None:
            if self.flexible:
                self.buf.append(0)
            else:
                self.buf += _I16.pack(-1)
            return
        data = s.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        if self.flexible:
            append_unsigned_varint(self.buf, len(data) + 1)
        else:
            self.buf += _I16.pack(len(data))
        self.buf += data

    def bytes_(self, b: bytes) -> None:
        if self.flexible:
            append_unsigned_varint(self.buf, len(b) + 1)
        else:
            self.buf += _I32.pack(len(b))
        self.buf += b

    def array_len(self, n: int) -> None:
        if self.flexible:
            append_unsigned_varint(self.buf, n + 1)
        else:
            self.buf += _I32.pack(n)

    def tagged_fields(self) -> None:
        if self.flexible:
            self.buf.append(0)  # no tagged fields


# --------------------------------------------------------------------------- reader


class _Reader:
    __slots__ = ("data", "flexible", "pos", "what")

    def __init__(self, data: bytes | memoryview, pos: int, flexible: bool, what: str) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible
        self.what = what

    def _fail(self, msg: str) -> LocalProtocolError:
        return LocalProtocolError(f"{self.what}: {msg} at byte {self.pos}")

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise self._fail(f"truncated (need {n} bytes)")
        out = bytes(self.data[self.pos : end])
        self.pos = end
        return out

    def _uvarint(self) -> int:
        try:
            v, self.pos = decode_unsigned_varint(self.data, self.pos)
        except CorruptRecordError as e:
            raise self._fail(str(e)) from None
        return v

    def int16(self) -> int:
        v: int = _I16.unpack(self._take(2))[0]
        return v

    def int32(self) -> int:
        v: int = _I32.unpack(self._take(4))[0]
        return v

    def int64(self) -> int:
        v: int = _I64.unpack(self._take(8))[0]
        return v

    def nullable_string(self) -> str | None:
        n = self._uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._fail(f"invalid UTF-8 ({e})") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise self._fail("non-nullable string is null")
        return s

    def bytes_(self) -> bytes:
        n = self._uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise self._fail("non-nullable bytes are null")
        return self._take(n)

    def array_len(self) -> int:
        n = self._uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise self._fail("non-nullable array is null")
        return n

    def tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self._uvarint()):
            self._uvarint()  # tag: none are known, skip all
            self._take(self._uvarint())


def _version(data: bytes | memoryview, what: str) -> int:
    if len(data) < 2:
        raise LocalProtocolError(f"{what}: {len(data)} bytes, too short for a version")
    v: int = _I16.unpack_from(data, 0)[0]
    return v


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Key of a committed offset: record type 1 (Kafka also reads 0, same layout)."""

    group: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        w = _Writer(OFFSET_COMMIT_KEY_TYPE)
        w.string(self.group)
        w.string(self.topic)
        w.int32(self.partition)
        return bytes(w.buf)


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Key of a group's metadata: record type 2."""

    group: str

    def encode(self) -> bytes:
        w = _Writer(GROUP_METADATA_KEY_TYPE)
        w.string(self.group)
        return bytes(w.buf)


def decode_key(data: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey | None:
    """Parse a ``__consumer_offsets`` key; ``None`` for record types other than 0, 1, 2.

    Raises:
        LocalProtocolError: the key is truncated or not valid UTF-8.
    """
    version = _version(data, "group record key")
    r = _Reader(data, 2, False, f"group record key v{version}")
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == GROUP_METADATA_KEY_TYPE:
        return GroupMetadataKey(r.string())
    return None


# --------------------------------------------------------------------------- offset values


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset. ``leader_epoch`` exists from v3, ``expire_timestamp`` only in v1."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1

    def encode(self, version: int = OFFSET_COMMIT_VALUE_VERSION) -> bytes:
        """Encode at ``version`` (0-4); fields that version lacks are dropped.

        Raises:
            ValueError: unknown version, or metadata longer than 32767 UTF-8 bytes.
        """
        if not 0 <= version <= _HIGHEST_OFFSET_COMMIT_VALUE:
            raise ValueError(f"OffsetCommitValue version {version} is not 0-4")
        w = _Writer(version)
        w.int64(self.offset)
        if version >= 3:
            w.int32(self.leader_epoch)
        w.string(self.metadata)
        w.int64(self.commit_timestamp)
        if version == 1:
            w.int64(self.expire_timestamp)
        w.tagged_fields()
        return bytes(w.buf)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> OffsetCommitValue:
        """Parse any version; above 4 as 4 (KIP-915).

        Raises:
            LocalProtocolError: negative version, truncated or malformed value.
        """
        version = _version(data, "OffsetCommitValue")
        if version < 0:
            raise LocalProtocolError(f"OffsetCommitValue: negative version {version}")
        version = min(version, _HIGHEST_OFFSET_COMMIT_VALUE)
        r = _Reader(data, 2, version >= _FIRST_FLEXIBLE, f"OffsetCommitValue v{version}")
        offset = r.int64()
        leader_epoch = r.int32() if version >= 3 else -1
        metadata = r.string()
        commit_timestamp = r.int64()
        expire_timestamp = r.int64() if version == 1 else -1
        r.tagged_fields()
        return cls(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


# --------------------------------------------------------------------------- group values


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    """One member inside :class:`GroupMetadataValue` (Kafka's ``MemberMetadata`` struct)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A group's persisted generation: written on SyncGroup (Stable) and on becoming Empty."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadataValue, ...] = field(default=())

    def encode(self, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
        """Encode at ``version`` (0-4); fields that version lacks are dropped.

        Raises:
            ValueError: unknown version, or a string longer than 32767 UTF-8 bytes.
        """
        if not 0 <= version <= _HIGHEST_GROUP_METADATA_VALUE:
            raise ValueError(f"GroupMetadataValue version {version} is not 0-4")
        w = _Writer(version)
        w.string(self.protocol_type)
        w.int32(self.generation)
        w.string(self.protocol)
        w.string(self.leader)
        if version >= 2:
            w.int64(self.current_state_timestamp)
        w.array_len(len(self.members))
        for m in self.members:
            w.string(m.member_id)
            if version >= 3:
                w.string(m.group_instance_id)
            w.string(m.client_id)
            w.string(m.client_host)
            if version >= 1:
                w.int32(m.rebalance_timeout)
            w.int32(m.session_timeout)
            w.bytes_(m.subscription)
            w.bytes_(m.assignment)
            w.tagged_fields()
        w.tagged_fields()
        return bytes(w.buf)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> GroupMetadataValue:
        """Parse any version; above 4 as 4 (KIP-915). v0 members get
        ``rebalance_timeout = session_timeout``, as Kafka loads them.

        Raises:
            LocalProtocolError: negative version, truncated or malformed value.
        """
        version = _version(data, "GroupMetadataValue")
        if version < 0:
            raise LocalProtocolError(f"GroupMetadataValue: negative version {version}")
        version = min(version, _HIGHEST_GROUP_METADATA_VALUE)
        r = _Reader(data, 2, version >= _FIRST_FLEXIBLE, f"GroupMetadataValue v{version}")
        protocol_type = r.string()
        generation = r.int32()
        protocol = r.nullable_string()
        leader = r.nullable_string()
        current_state_timestamp = r.int64() if version >= 2 else -1
        members = []
        for _ in range(r.array_len()):
            member_id = r.string()
            instance_id = r.nullable_string() if version >= 3 else None
            client_id = r.string()
            client_host = r.string()
            rebalance_timeout = r.int32() if version >= 1 else None
            session_timeout = r.int32()
            subscription = r.bytes_()
            assignment = r.bytes_()
            r.tagged_fields()
            members.append(
                MemberMetadataValue(
                    member_id,
                    instance_id,
                    client_id,
                    client_host,
                    session_timeout if rebalance_timeout is None else rebalance_timeout,
                    session_timeout,
                    subscription,
                    assignment,
                )
            )
        r.tagged_fields()
        return cls(
            protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
        )
