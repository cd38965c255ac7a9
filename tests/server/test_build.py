"""The kio response builder and the request null checks."""

from __future__ import annotations

import datetime
import io
import uuid

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from tierlog.errors import InvalidRequest
from tierlog.server.handlers._build import build, error_code, field_names
from tierlog.server.kafka_apis import check_nulls


def _encode(obj) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


PRODUCE = {
    "responses": [
        {
            "name": "t",
            "topic_id": uuid.uuid4(),
            "partition_responses": [
                {
                    "index": 0,
                    "error_code": 0,
                    "base_offset": 7,
                    "log_append_time": -1,
                    "log_start_offset": 2,
                    "error_message": None,
                }
            ],
        }
    ]
}


@pytest.mark.parametrize("version", range(3, 14))
def test_produce_response_every_version(version):
    cls = load_response_schema(0, version)
    r = build(cls, PRODUCE)
    t = r.responses[0]
    p = t.partition_responses[0]
    assert p.base_offset == 7 and p.error_code is ErrorCode.none
    if "log_start_offset" in field_names(type(p)):
        assert p.log_start_offset == 2
    assert _encode(r)  # encodable


def test_conversions():
    cls = load_response_schema(0, 9)
    r = build(
        cls,
        {
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {
                            "index": 0,
                            "error_code": 10,
                            "base_offset": 0,
                            "log_append_time": 1_700_000_000_123,
                        }
                    ],
                }
            ],
            "throttle_time": 5,
        },
    )
    p = r.responses[0].partition_responses[0]
    assert p.error_code is ErrorCode.message_too_large
    assert p.log_append_time == datetime.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC
    )
    assert r.throttle_time == datetime.timedelta(milliseconds=5)
    assert error_code(12345) is ErrorCode.unknown_server_error


def test_missing_required_fields_get_zero_values():
    cls = load_response_schema(3, 12)
    r = build(cls, {"brokers": [], "topics": [{"error_code": 3, "name": "x"}]})
    t = r.topics[0]
    assert t.partitions == () and t.topic_id is None and t.is_internal is False
    assert _encode(r)


def test_check_nulls_rejects_null_non_nullable_arrays():
    cls = load_request_schema(2, 7)
    mod = __import__(cls.__module__, fromlist=["x"])
    ok = cls(
        replica_id=-1,
        isolation_level=0,
        topics=(
            mod.ListOffsetsTopic(
                name="t", partitions=(mod.ListOffsetsPartition(partition_index=0, timestamp=-1),)
            ),
        ),
    )
    check_nulls(ok)
    bad = cls(
        replica_id=-1, isolation_level=0, topics=(mod.ListOffsetsTopic(name="t", partitions=None),)
    )
    with pytest.raises(InvalidRequest, match="partitions"):
        check_nulls(bad)
    # nullable arrays may be null (Metadata topics: all topics)
    meta = load_request_schema(3, 12)(
        topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
    )
    check_nulls(meta)
