"""The key and value formats of Kafka's ``__transaction_state`` topic, byte-compatible.

Kafka's ``TransactionLogKey`` and ``TransactionLogValue``
(``transaction-coordinator/src/main/resources/common/message/``); both start with an int16
version::

    TransactionLogKey    v0  TransactionalId string

    TransactionLogValue  v0  ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32,
                             TransactionStatus int8,
                             TransactionPartitions [Topic string, PartitionIds [int32]]?
                                                    (null for Empty),
                             TransactionLastUpdateTimestampMs int64,
                             TransactionStartTimestampMs int64                <- we write v0
                         v1  the same, flexible (compact strings and arrays, tagged fields),
                             with tagged PreviousProducerId (0), NextProducerId (1),
                             ClientTransactionVersion (2)

A removed transactional id is a tombstone (a null value). Following KIP-915, a value version
above 1 is read as 1 (newer Kafka only adds tagged fields); unknown tags are skipped. Kafka 3.x
writes v0 (transaction version 1, which is what tierlog speaks).

Sans-IO and pure: safe to use from any thread. Decoders raise
:class:`~tierlog.errors.LocalProtocolError` on malformed input.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass

from tierlog.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_ID,
    TopicPartition,
    TxnTransitMetadata,
)
from tierlog.coordinator.transaction.transaction_state import TransactionState
from tierlog.errors import CorruptRecordError, LocalProtocolError
from tierlog.records.varint import append_unsigned_varint, decode_unsigned_varint

__all__ = [
    "KEY_VERSION",
    "VALUE_VERSION",
    "TransactionLogValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

KEY_VERSION = 0
VALUE_VERSION = 0
"""The value version we write (Kafka 3.x, transaction version 1)."""
_HIGHEST_VALUE_VERSION = 1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """A decoded value; ``previous_producer_id`` and ``next_producer_id`` exist from v1."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: TransactionState
    transaction_partitions: frozenset[TopicPartition]
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    def to_transit(self) -> TxnTransitMetadata:
        """The metadata this value describes (Kafka's readTxnRecordValue): the previous
        epoch is not stored, so it is unknown (-1) after a load."""
        return TxnTransitMetadata(
            self.producer_id,
            self.previous_producer_id,
            self.producer_epoch,
            -1,
            self.transaction_timeout_ms,
            self.transaction_status,
            self.transaction_partitions,
            self.transaction_start_timestamp_ms,
            self.transaction_last_update_timestamp_ms,
        )


# --------------------------------------------------------------------------- writing


def _string(buf: bytearray, s: str, flexible: bool) -> None:
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    if flexible:
        append_unsigned_varint(buf, len(data) + 1)
    else:
        buf += _I16.pack(len(data))
    buf += data


def encode_key(transactional_id: str) -> bytes:
    """``TransactionLogKey`` v0.

    Raises:
        ValueError: an id longer than 32767 UTF-8 bytes.
    """
    buf = bytearray(_I16.pack(KEY_VERSION))
    _string(buf, transactional_id, False)
    return bytes(buf)


def encode_value(t: TxnTransitMetadata, version: int = VALUE_VERSION) -> bytes:
    """``TransactionLogValue`` of a transit state (Kafka's TransactionLog.valueToBytes):
    partitions grouped by topic, sorted; null for Empty.

    Raises:
        ValueError: unknown version; an Empty state with partitions; PrepareEpochFence or
            Dead (never written: the fence is written as PrepareAbort, Dead as a tombstone).
    """
    if version not in (0, 1):
        raise ValueError(f"TransactionLogValue version {version} is not 0-1")
    if t.txn_state in (TransactionState.PREPARE_EPOCH_FENCE, TransactionState.DEAD):
        raise ValueError(f"{t.txn_state.state_name} is never written to the transaction log")
    if t.txn_state is TransactionState.EMPTY and t.topic_partitions:
        raise ValueError("an Empty transaction has no partitions")
    flexible = version >= 1
    buf = bytearray(_I16.pack(version))
    buf += _I64.pack(t.producer_id)
    buf += _I16.pack(t.producer_epoch)
    buf += _I32.pack(t.txn_timeout_ms)
    buf += _I8.pack(int(t.txn_state))
    if t.txn_state is TransactionState.EMPTY:
        if flexible:
            buf.append(0)
        else:
            buf += _I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in t.topic_partitions:
            by_topic[topic].append(partition)
        _array_len(buf, len(by_topic), flexible)
        for topic in sorted(by_topic):
            _string(buf, topic, flexible)
            ids = sorted(by_topic[topic])
            _array_len(buf, len(ids), flexible)
            for p in ids:
                buf += _I32.pack(p)
            if flexible:
                buf.append(0)  # the struct's tagged fields
    buf += _I64.pack(t.txn_last_update_timestamp)
    buf += _I64.pack(t.txn_start_timestamp)
    if flexible:
        tags: list[tuple[int, bytes]] = []
        if t.last_producer_id != NO_PRODUCER_ID:
            tags.append((_TAG_PREVIOUS_PRODUCER_ID, _I64.pack(t.last_producer_id)))
        append_unsigned_varint(buf, len(tags))
        for tag, data in tags:
            append_unsigned_varint(buf, tag)
            append_unsigned_varint(buf, len(data))
            buf += data
    return bytes(buf)


def _array_len(buf: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        append_unsigned_varint(buf, n + 1)
    else:
        buf += _I32.pack(n)


# --------------------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("data", "flexible", "pos", "what")

    def __init__(self, data: bytes | memoryview, flexible: bool, what: str) -> None:
        self.data = data
        self.pos = 2
        self.flexible = flexible
        self.what = what

    def fail(self, msg: str) -> LocalProtocolError:
        return LocalProtocolError(f"{self.what}: {msg} at byte {self.pos}")

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise self.fail(f"truncated (need {n} bytes)")
        out = bytes(self.data[self.pos : end])
        self.pos = end
        return out

    def uvarint(self) -> int:
        try:
            v, self.pos = decode_unsigned_varint(self.data, self.pos)
        except CorruptRecordError as e:
            raise self.fail(str(e)) from None
        return v

    def int8(self) -> int:
        return int(_I8.unpack(self.take(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self.take(8))[0])

    def string(self) -> str:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            raise self.fail("non-nullable string is null")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"invalid UTF-8 ({e})") from None

    def array_len(self, nullable: bool) -> int:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0 and not nullable:
            raise self.fail("non-nullable array is null")
        if n > len(self.data):
            raise self.fail(f"array of {n} items is longer than the data")
        return n

    def tagged_fields(self) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        if self.flexible:
            for _ in range(self.uvarint()):
                tag = self.uvarint()
                out[tag] = self.take(self.uvarint())
        return out


def _version(data: bytes | memoryview, what: str) -> int:
    if len(data) < 2:
        raise LocalProtocolError(f"{what}: {len(data)} bytes, too short for a version")
    return int(_I16.unpack_from(data, 0)[0])


def decode_key(data: bytes | memoryview) -> str | None:
    """The transactional id of a ``__transaction_state`` key; None for a key version other
    than 0 (not a transaction record).

    Raises:
        LocalProtocolError: the key is truncated or not valid UTF-8.
    """
    version = _version(data, "TransactionLogKey")
    if version != KEY_VERSION:
        return None
    return _Reader(data, False, "TransactionLogKey v0").string()


def decode_value(data: bytes | memoryview) -> TransactionLogValue:
    """Parse a ``TransactionLogValue`` of any version (above 1 as 1, KIP-915).

    Raises:
        LocalProtocolError: negative version, unknown status, truncated or malformed value.
    """
    version = _version(data, "TransactionLogValue")
    if version < 0:
        raise LocalProtocolError(f"TransactionLogValue: negative version {version}")
    version = min(version, _HIGHEST_VALUE_VERSION)
    r = _Reader(data, version >= 1, f"TransactionLogValue v{version}")
    producer_id = r.int64()
    producer_epoch = r.int16()
    timeout_ms = r.int32()
    status_id = r.int8()
    try:
        status = TransactionState(status_id)
    except ValueError:
        raise r.fail(f"unknown transaction status {status_id}") from None
    partitions: set[TopicPartition] = set()
    n_topics = r.array_len(nullable=True)
    for _ in range(max(n_topics, 0)):
        topic = r.string()
        for _ in range(r.array_len(nullable=False)):
            partitions.add((topic, r.int32()))
        r.tagged_fields()
    last_update = r.int64()
    start = r.int64()
    tags = r.tagged_fields()

    def tag64(tag: int) -> int:
        raw = tags.get(tag)
        return NO_PRODUCER_ID if raw is None or len(raw) != 8 else int(_I64.unpack(raw)[0])

    ctv = tags.get(_TAG_CLIENT_TRANSACTION_VERSION)
    return TransactionLogValue(
        producer_id,
        producer_epoch,
        timeout_ms,
        status,
        frozenset(partitions),
        last_update,
        start,
        tag64(_TAG_PREVIOUS_PRODUCER_ID),
        tag64(_TAG_NEXT_PRODUCER_ID),
        int(_I16.unpack(ctv)[0]) if ctv is not None and len(ctv) == 2 else 0,
    )
