"""error_response: every API's error shape, every version."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from tierlog.errors import ApiError, KafkaStorageError, NotCoordinator, UnknownTopicOrPartition
from tierlog.protocol import (
    ADVERTISED,
    ApiKey,
    error_code_of,
    error_response,
    error_response_for,
    request_class,
    response_class,
)
from tierlog.protocol._writer import compile_writer

from .helpers import KP_CLASSES, record_batch
from .test_connection import fetch_request, next_request_of, produce_request

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

_ALL = [(k, v) for k, (lo, hi) in sorted(ADVERTISED.items()) for v in range(lo, hi + 1)]


def error_codes(obj: Any) -> list[int]:
    out: list[int] = []
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if f.name == "error_code":
                out.append(v)
            out += error_codes(v)
    elif isinstance(obj, tuple):
        for x in obj:
            out += error_codes(x)
    return out


@pytest.mark.parametrize(("api_key", "version"), _ALL)
def test_every_error_code_field_carries_the_error(api_key: int, version: int) -> None:
    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.from_type(request_class(api_key, version)))
    def check(request: Any) -> None:
        resp = error_response_for(api_key, version, request, KafkaStorageError("disk gone"))
        assert type(resp) is response_class(api_key, version)
        assert all(c == ErrorCode.kafka_storage_error for c in error_codes(resp))
        compile_writer(type(resp))(resp, bytearray(), [])  # encodable

    check()


def test_produce_mirrors_topics_and_partitions() -> None:
    ev = next_request_of(produce_request(9, record_batch()))
    resp = error_response(ev, UnknownTopicOrPartition)
    (t,) = resp.responses
    (p,) = t.partition_responses
    assert (t.name, p.index, p.error_code, p.base_offset) == ("t1", 0, 3, -1)
    assert p.error_message is None


def test_error_message_comes_from_the_instance() -> None:
    kp = KP_CLASSES[(19, "request")][7]
    req = kp(topics=[kp.CreatableTopic(name="x", num_partitions=1, replication_factor=1)])
    ev = next_request_of(req)
    resp = error_response(ev, NotCoordinator("try the other one"))
    assert resp.topics[0].name == "x"
    assert resp.topics[0].error_message == "try the other one"
    assert resp.topics[0].num_partitions == -1


def test_fetch_v16_mirrors_topic_ids() -> None:
    tid = uuid.uuid4()
    ev = next_request_of(fetch_request(16, tid))
    resp = error_response(ev, 5)
    assert resp.error_code == 5
    (t,) = resp.responses
    assert t.topic_id == tid
    (p,) = t.partitions
    assert (p.partition_index, p.high_watermark, p.records) == (0, -1, b"")


def test_metadata_all_topics_and_named_topics() -> None:
    cls = KP_CLASSES[(3, "request")]
    ev = next_request_of(cls[12](topics=None))
    assert error_response(ev, NotCoordinator).topics == ()
    ev = next_request_of(cls[13](topics=[cls.MetadataRequestTopic(name="a")]))
    resp = error_response(ev, NotCoordinator)
    assert resp.error_code == 16
    assert [(t.name, t.error_code) for t in resp.topics] == [("a", 16)]


def test_offset_fetch_v8_groups() -> None:
    cls = KP_CLASSES[(9, "request")][8]
    req = cls(
        groups=[
            cls.OffsetFetchRequestGroup(
                group_id="g",
                topics=[
                    cls.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                        name="t", partition_indexes=[0, 2]
                    )
                ],
            )
        ]
    )
    resp = error_response(next_request_of(req), NotCoordinator)
    (g,) = resp.groups
    assert (g.group_id, g.error_code) == ("g", 16)
    assert [(p.partition_index, p.committed_offset) for p in g.topics[0].partitions] == [
        (0, -1),
        (2, -1),
    ]


def test_delete_topics_by_name_list_and_find_coordinator_keys() -> None:
    ev = next_request_of(KP_CLASSES[(20, "request")][3](topic_names=["a", "b"]))
    assert [r.name for r in error_response(ev, 41).responses] == ["a", "b"]
    ev = next_request_of(KP_CLASSES[(10, "request")][4](key_type=0, coordinator_keys=["g1", "g2"]))
    resp = error_response(ev, NotCoordinator)
    assert [(c.key, c.error_code, c.node_id) for c in resp.coordinators] == [
        ("g1", 16, -1),
        ("g2", 16, -1),
    ]


def test_error_code_of() -> None:
    assert error_code_of(NotCoordinator) == ErrorCode.not_coordinator
    assert error_code_of(NotCoordinator("x")) == ErrorCode.not_coordinator
    assert error_code_of(3) == ErrorCode.unknown_topic_or_partition

    class Weird(ApiError):
        error_code = 30000

    assert error_code_of(Weird) == ErrorCode.unknown_server_error


def test_api_versions_error_response_lists_the_table() -> None:
    resp = error_response_for(ApiKey.API_VERSIONS, 3, None, 35)
    assert resp.error_code == 35
    assert {k.api_key for k in resp.api_keys} == set(ADVERTISED)


def test_unadvertised_version_raises_key_error() -> None:
    with pytest.raises(KeyError):
        error_response_for(3, 99, None, 1)
