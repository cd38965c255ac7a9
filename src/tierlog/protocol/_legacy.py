"""Schemas of the versions we advertise but do not implement, which kio does not have.

librdkafka needs ``min_version = 0`` advertised for Produce, ListOffsets, OffsetCommit and
OffsetFetch (see :mod:`tierlog.protocol.api_versions`); kio, generated from Kafka 4's
schemas, starts at Produce v3, ListOffsets v1, OffsetCommit v2 and OffsetFetch v1. Requests of
these old versions are parsed with the classes below, and answered by the codec with
UNSUPPORTED_VERSION in the API's own error fields (no handler sees them). The classes follow
kio's conventions (frozen slotted dataclasses with ``kafka_type`` field metadata), so kio's
reader and our writer handle them like generated ones. Where an old version has the same wire
format as kio's lowest one, kio's class is reused.

Wire formats, from Kafka 3.9's ``clients/src/main/resources/common/message/*.json``:

* ProduceRequest v0-2: acks int16, timeout_ms int32,
  topic_data [name string, partition_data [index int32, records nullable bytes]]
  (v3 only adds a leading transactional_id).
* ProduceResponse v0: responses [name, partition_responses [index, error_code, base_offset]];
  v1 adds throttle_time_ms (int32, last); v2 adds log_append_time_ms (int64) per partition,
  which is v3's format.
* ListOffsetsRequest v0: replica_id int32,
  topics [name, partitions [partition_index int32, timestamp int64, max_num_offsets int32]].
* ListOffsetsResponse v0: topics [name, partitions [partition_index, error_code,
  old_style_offsets int64[]]].
* OffsetCommitRequest v0: group_id, topics [name, partitions [partition_index,
  committed_offset int64, committed_metadata nullable string]]; v1 adds generation_id int32 and
  member_id string after group_id, and commit_timestamp int64 after committed_offset.
* OffsetCommitResponse v0-1: v2's format. OffsetFetch v0 request and response: v1's format.
"""

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v2.response import OffsetCommitResponse as OffsetCommitResponseV2
from kio.schema.offset_fetch.v1.request import OffsetFetchRequest as OffsetFetchRequestV1
from kio.schema.offset_fetch.v1.response import OffsetFetchResponse as OffsetFetchResponseV1
from kio.schema.produce.v3.response import ProduceResponse as ProduceResponseV3
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

__all__ = ["REQUESTS", "RESPONSES"]

_STR: Final = {"kafka_type": "string"}
_I16: Final = {"kafka_type": "int16"}
_I32: Final = {"kafka_type": "int32"}
_I64: Final = {"kafka_type": "int64"}
_ERR: Final = {"kafka_type": "error_code"}
_MS32: Final = {"kafka_type": "timedelta_i32"}


# --------------------------------------------------------------------------- Produce v0-2


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProduceDataV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    index: i32 = field(metadata=_I32)
    records: bytes | None = field(metadata={"kafka_type": "records"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceDataV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_STR)
    partition_data: tuple[PartitionProduceDataV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceRequestV0:
    """ProduceRequest v0, v1 and v2 (one wire format)."""

    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    acks: i16 = field(metadata=_I16)
    timeout: i32Timedelta = field(metadata=_MS32)
    topic_data: tuple[TopicProduceDataV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProduceResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    index: i32 = field(metadata=_I32)
    error_code: ErrorCode = field(metadata=_ERR)
    base_offset: i64 = field(metadata=_I64, default=i64(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata=_STR)
    partition_responses: tuple[PartitionProduceResponseV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResponseV0:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    responses: tuple[TopicProduceResponseV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(0)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    responses: tuple[TopicProduceResponseV0, ...]
    throttle_time: i32 = field(metadata=_I32, default=i32(0))


# --------------------------------------------------------------------------- ListOffsets v0


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata=_I32)
    timestamp: i64 = field(metadata=_I64)
    max_num_offsets: i32 = field(metadata=_I32)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_STR)
    partitions: tuple[ListOffsetsPartitionV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsRequestV0:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    replica_id: i32 = field(metadata=_I32)
    topics: tuple[ListOffsetsTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata=_I32)
    error_code: ErrorCode = field(metadata=_ERR)
    old_style_offsets: tuple[i64, ...] = field(metadata=_I64, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata=_STR)
    partitions: tuple[ListOffsetsPartitionResponseV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponseV0:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(2)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topics: tuple[ListOffsetsTopicResponseV0, ...]


# --------------------------------------------------------------------------- OffsetCommit v0-1


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitPartitionV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(8)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata=_I32)
    committed_offset: i64 = field(metadata=_I64)
    committed_metadata: str | None = field(metadata=_STR)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitTopicV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(8)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_STR)
    partitions: tuple[OffsetCommitPartitionV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestV0:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(8)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: str = field(metadata=_STR)
    topics: tuple[OffsetCommitTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitPartitionV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(8)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata=_I32)
    committed_offset: i64 = field(metadata=_I64)
    commit_timestamp: i64 = field(metadata=_I64)
    committed_metadata: str | None = field(metadata=_STR)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitTopicV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(8)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_STR)
    partitions: tuple[OffsetCommitPartitionV1, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestV1:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(8)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: str = field(metadata=_STR)
    generation_id_or_member_epoch: i32 = field(metadata=_I32)
    member_id: str = field(metadata=_STR)
    topics: tuple[OffsetCommitTopicV1, ...]


REQUESTS: Final[dict[tuple[int, int], type[Any]]] = {
    (0, 0): ProduceRequestV0,
    (0, 1): ProduceRequestV0,
    (0, 2): ProduceRequestV0,
    (2, 0): ListOffsetsRequestV0,
    (8, 0): OffsetCommitRequestV0,
    (8, 1): OffsetCommitRequestV1,
    (9, 0): OffsetFetchRequestV1,
}
"""(api key, version) → request class, for the versions below the implemented minimum."""

RESPONSES: Final[dict[tuple[int, int], type[Any]]] = {
    (0, 0): ProduceResponseV0,
    (0, 1): ProduceResponseV1,
    (0, 2): ProduceResponseV3,
    (2, 0): ListOffsetsResponseV0,
    (8, 0): OffsetCommitResponseV2,
    (8, 1): OffsetCommitResponseV2,
    (9, 0): OffsetFetchResponseV1,
}
"""(api key, version) → response class, for the versions below the implemented minimum."""
