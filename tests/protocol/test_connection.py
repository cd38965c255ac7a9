"""ServerConnection: framing, headers, version negotiation, ordering, against kafka-python."""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsResponse as KpApiVersionsResponse
from kio.schema.errors import ErrorCode

from tierlog.errors import LocalProtocolError, NotCoordinator, RemoteProtocolError
from tierlog.protocol import (
    ADVERTISED,
    NEED_DATA,
    ApiKey,
    ConnectionClosed,
    RequestEvent,
    ServerConnection,
    _legacy,
    api_versions_response,
    error_response,
    implemented_min,
    response_class,
)

from .helpers import (
    KP_CLASSES,
    ConnectionPair,
    drain,
    frame,
    kio_bytes,
    kp_request,
    record_batch,
    tr,
)

# --------------------------------------------------------------------------- helpers


def metadata_request(version: int, topics: list[str] | None = None) -> Any:
    cls = KP_CLASSES[(3, "request")]
    ts = None if topics is None else [cls.MetadataRequestTopic(name=t) for t in topics]
    return cls[version](topics=ts, allow_auto_topic_creation=True)


def produce_request(version: int, records: bytes, acks: int = -1) -> Any:
    p = KP_CLASSES[(0, "request")][version]
    return p(
        transactional_id=None,
        acks=acks,
        timeout_ms=30000,
        topic_data=[
            p.TopicProduceData(
                name="t1",
                partition_data=[p.TopicProduceData.PartitionProduceData(index=0, records=records)],
            )
        ],
    )


def produce_response(version: int, base_offset: int = 0) -> Any:
    cls = response_class(0, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    part: dict[str, Any] = {"index": 0, "error_code": ErrorCode.none, "base_offset": base_offset}
    names = {f for f in mod.PartitionProduceResponse.__dataclass_fields__}
    if "log_start_offset" in names:
        part["log_start_offset"] = 0
    if "record_errors" in names:
        part["record_errors"] = ()
        part["error_message"] = None
    return cls(
        responses=(
            mod.TopicProduceResponse(
                name="t1", partition_responses=(mod.PartitionProduceResponse(**part),)
            ),
        ),
        throttle_time=datetime.timedelta(0),
    )


def next_request(conn: ServerConnection) -> RequestEvent:
    ev = conn.next_event()
    assert isinstance(ev, RequestEvent)
    return ev


# --------------------------------------------------------------------------- framing


def test_tr_whole_bytewise_trailing_one_frame() -> None:
    (ev,) = tr(frame(metadata_request(12, ["a", "b"]), correlation_id=7))
    assert (ev.api_key, ev.api_version, ev.correlation_id, ev.client_id) == (
        3,
        12,
        7,
        "tierlog-test",
    )
    assert [t.name for t in ev.request.topics] == ["a", "b"]
    assert ev.header.request_api_key == 3
    assert ev.expects_response
    assert ev.response is None


def test_tr_many_frames_of_mixed_apis() -> None:
    data = b"".join(
        [
            frame(kp_request(18, 4, client_software_name="x", client_software_version="1"), 1),
            frame(metadata_request(1, ["t"]), 2),
            frame(produce_request(9, record_batch()), 3, client_id=None),
            frame(metadata_request(13), 4),
        ]
    )
    events = tr(data)
    assert [(e.api_key, e.api_version, e.correlation_id, e.seq) for e in events] == [
        (18, 4, 1, 0),
        (3, 1, 2, 1),
        (0, 9, 3, 2),
        (3, 13, 4, 3),
    ]
    assert events[2].client_id is None


def test_every_split_point_of_two_frames() -> None:
    data = frame(metadata_request(4, ["x"]), 1) + frame(metadata_request(9, ["y"]), 2)
    for i in range(1, len(data)):
        conn = ServerConnection()
        conn.receive_data(data[:i])
        events = drain(conn)
        conn.receive_data(data[i:])
        events += drain(conn)
        assert [e.correlation_id for e in events if isinstance(e, RequestEvent)] == [1, 2]


def test_size_counts_header_and_body() -> None:
    data = frame(metadata_request(12, ["abc"]))
    conn = ServerConnection()
    conn.receive_data(data)
    assert next_request(conn).size == len(data) - 4


def test_receive_data_accepts_bytearray_and_memoryview() -> None:
    data = frame(metadata_request(12, ["abc"]))
    for chunk in (bytearray(data), memoryview(bytearray(data))):
        conn = ServerConnection()
        conn.receive_data(chunk)
        assert next_request(conn).request.topics[0].name == "abc"


def test_frame_larger_than_max_is_rejected_from_its_size_field() -> None:
    conn = ServerConnection(max_frame_size=1000)
    conn.receive_data(struct.pack(">i", 1001))
    with pytest.raises(RemoteProtocolError, match="1001"):
        conn.next_event()
    # the connection is dead from now on
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


def test_frame_of_exactly_max_is_accepted() -> None:
    data = frame(metadata_request(12, ["t"]))
    conn = ServerConnection(max_frame_size=len(data) - 4)
    conn.receive_data(data)
    assert next_request(conn).api_key == 3
    conn = ServerConnection(max_frame_size=len(data) - 5)
    conn.receive_data(data)
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


def test_negative_frame_size() -> None:
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", -1) + b"\x00" * 20)
    with pytest.raises(RemoteProtocolError, match="-1"):
        conn.next_event()


def test_default_max_frame_size_is_kafkas_socket_request_max_bytes() -> None:
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", 104857601))
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", 104857600))
    assert conn.next_event() is NEED_DATA


def test_frame_too_short_for_a_header() -> None:
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", 6) + b"\x00\x03\x00\x0c\x00\x00")
    with pytest.raises(RemoteProtocolError, match="too short"):
        conn.next_event()


def test_eof_after_events_then_closed() -> None:
    conn = ServerConnection()
    conn.receive_data(frame(metadata_request(12, ["t"])))
    conn.receive_data(b"")
    assert conn.eof_received
    assert isinstance(conn.next_event(), RequestEvent)
    assert isinstance(conn.next_event(), ConnectionClosed)
    assert isinstance(conn.next_event(), ConnectionClosed)
    with pytest.raises(ValueError):
        conn.receive_data(b"more")


def test_eof_inside_a_frame() -> None:
    data = frame(metadata_request(12, ["t"]))
    conn = ServerConnection()
    conn.receive_data(data[:-1])
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="inside a frame"):
        conn.next_event()


def test_buffered_bytes_and_in_flight() -> None:
    data = frame(metadata_request(12, ["t"]), 1) + frame(metadata_request(12, ["u"]), 2)
    conn = ServerConnection()
    conn.receive_data(data[:10])
    assert conn.next_event() is NEED_DATA
    assert conn.buffered_bytes == 10
    conn.receive_data(data[10:])
    a, b = drain(conn)
    assert conn.buffered_bytes == 0
    assert conn.in_flight == 2
    assert isinstance(a, RequestEvent) and isinstance(b, RequestEvent)
    conn.send(a, error_response(a, NotCoordinator))
    assert conn.in_flight == 1


# --------------------------------------------------------------------------- malformed requests


def test_garbage_body_names_api_version_client_and_correlation_id() -> None:
    good = frame(metadata_request(12, ["t"]), correlation_id=99)
    header_len = 2 + 2 + 4 + 2 + len("tierlog-test") + 1
    body = b"\xff" * 7  # an array length of -1 (as compact: huge) ...
    bad = struct.pack(">i", header_len + len(body)) + good[4 : 4 + header_len] + body
    conn = ServerConnection()
    conn.receive_data(bad)
    with pytest.raises(RemoteProtocolError) as exc:
        conn.next_event()
    msg = str(exc.value)
    assert "Metadata v12" in msg
    assert "tierlog-test" in msg
    assert "correlation_id=99" in msg


def test_trailing_bytes_inside_a_frame_are_ignored() -> None:
    """Kafka ignores bytes after the request (librdkafka 2.16's Metadata v13 has 3)."""
    good = frame(metadata_request(12, ["t"]))
    padded = struct.pack(">i", len(good) - 4 + 3) + good[4:] + b"abc"
    conn = ServerConnection()
    conn.receive_data(padded + good)
    first = conn.next_event()
    second = conn.next_event()
    assert isinstance(first, RequestEvent) and isinstance(second, RequestEvent)
    assert first.request == second.request


def test_truncated_body() -> None:
    good = frame(metadata_request(12, ["topic"]))
    bad = struct.pack(">i", len(good) - 4 - 3) + good[4:-3]
    conn = ServerConnection()
    conn.receive_data(bad)
    with pytest.raises(RemoteProtocolError, match="malformed Metadata v12"):
        conn.next_event()


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (99, 0),  # unknown key
        (57, 1),  # UpdateFeatures: known to Kafka, not served here
        (3, 14),  # above the advertised max
        (1, 3),  # Fetch below the advertised min
        (0, -1),
    ],
)
def test_unsupported_key_or_version_is_a_protocol_error(api_key: int, version: int) -> None:
    raw = bytearray(frame(metadata_request(1, ["t"]), correlation_id=5))
    raw[4:8] = struct.pack(">hh", api_key, version)
    conn = ServerConnection()
    conn.receive_data(bytes(raw))
    with pytest.raises(RemoteProtocolError, match="unsupported request") as exc:
        conn.next_event()
    assert "correlation_id=5" in str(exc.value)
    assert "tierlog-test" in str(exc.value)


# --------------------------------------------------------------------------- ApiVersions


@pytest.mark.parametrize("version", range(5))
def test_api_versions_with_kafka_python(version: int) -> None:
    pair = ConnectionPair.new()
    ev = pair.request(
        kp_request(18, version, client_software_name="kafka-python", client_software_version="3")
    )
    assert (ev.api_key, ev.api_version) == (18, version)
    if version >= 3:
        assert ev.request.client_software_name == "kafka-python"
    ((cid, resp),) = pair.respond(ev, api_versions_response(version))
    assert cid == ev.correlation_id
    assert resp.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got == dict(ADVERTISED)


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_response_header_is_v0_even_when_flexible(version: int) -> None:
    conn = ServerConnection()
    conn.receive_data(
        frame(kp_request(18, version, client_software_name="x", client_software_version="1"), 42)
    )
    ev = next_request(conn)
    out = conn.send(ev, api_versions_response(version))
    size, cid, error = struct.unpack_from(">iih", out)
    assert (size, cid, error) == (len(out) - 4, 42, 0)
    assert out[10] == len(ADVERTISED) + 1  # the compact api_keys length right after error_code


def test_flexible_responses_use_header_v1() -> None:
    conn = ServerConnection()
    conn.receive_data(frame(metadata_request(12, ["t"]), 42))
    ev = next_request(conn)
    out = conn.send(ev, error_response(ev, NotCoordinator))
    assert struct.unpack_from(">iiB", out) == (len(out) - 4, 42, 0)


def unsupported_api_versions(version: int, body: bytes, correlation_id: int = 9) -> bytes:
    """An ApiVersions request as a newer client sends it: header v2 and a body we cannot know."""
    header = struct.pack(">hhih", 18, version, correlation_id, 10) + b"librdkafka" + b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


@pytest.mark.parametrize("version", [5, 127, 32767, -1])
def test_api_versions_of_an_unknown_version_gets_v0_error_35(version: int) -> None:
    body = b"\xde\xad\xbe\xef not a body we know"
    conn = ServerConnection()
    conn.receive_data(unsupported_api_versions(version, body))
    ev = next_request(conn)
    assert (ev.api_key, ev.api_version, ev.correlation_id) == (18, version, 9)
    assert ev.request is None  # the body was not parsed
    assert ev.client_id == "librdkafka"
    assert ev.response is not None
    assert ev.response.error_code == ErrorCode.unsupported_version
    out = conn.send(ev, ev.response)
    # header v0, then a v0 body: error_code, api_keys [key, min, max]
    size, cid, error, n = struct.unpack_from(">iihi", out)
    assert (size, cid, error, n) == (len(out) - 4, 9, 35, len(ADVERTISED))
    keys = [struct.unpack_from(">hhh", out, 14 + 6 * i) for i in range(n)]
    assert (18, 0, 4) in keys
    assert len(out) == 14 + 6 * n
    # kafka-python decodes it as its retry logic expects
    resp = KpApiVersionsResponse[4].decode(out[8:])
    assert resp.error_code == 35
    assert any(k.api_key == 18 and k.max_version == 4 for k in resp.api_keys)


def test_unknown_api_versions_version_with_kafka_python_retry() -> None:
    """kafka-python sends v4, gets 35 with our table, retries at our max."""
    pair = ConnectionPair.new()
    raw = bytearray(
        frame(kp_request(18, 4, client_software_name="kp", client_software_version="3"))
    )
    raw[6:8] = struct.pack(">h", 5)
    pair.server.receive_data(bytes(raw))
    ev = next_request(pair.server)
    out = pair.server.send(ev, ev.response)
    resp = KpApiVersionsResponse[4].decode(out[8:])
    max_v = {k.api_key: k.max_version for k in resp.api_keys}[18]
    ev2 = pair.request(
        kp_request(18, max_v, client_software_name="kp", client_software_version="3")
    )
    ((_, ok),) = pair.respond(ev2, api_versions_response(max_v))
    assert ok.error_code == 0


def test_api_versions_with_an_unreadable_header_is_a_protocol_error() -> None:
    conn = ServerConnection()
    header = struct.pack(">hhih", 18, 99, 1, 50) + b"short"
    conn.receive_data(struct.pack(">i", len(header)) + header)
    with pytest.raises(RemoteProtocolError, match="malformed header"):
        conn.next_event()


# --------------------------------------------------------------------------- ConnectionPair


@pytest.mark.parametrize("version", range(14))
def test_metadata_roundtrip(version: int) -> None:
    pair = ConnectionPair.new()
    ev = pair.request(metadata_request(version, ["t1"]))
    assert ev.request.topics[0].name == "t1"
    cls = response_class(3, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    fields = cls.__dataclass_fields__
    topic_fields = mod.MetadataResponseTopic.__dataclass_fields__
    part_fields = mod.MetadataResponsePartition.__dataclass_fields__
    part: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "partition_index": 0,
        "leader_id": 1,
        "replica_nodes": (1,),
        "isr_nodes": (1,),
    }
    part = {k: v for k, v in part.items() if k in part_fields}
    if "leader_epoch" in part_fields:
        part["leader_epoch"] = 0
    if "offline_replicas" in part_fields:
        part["offline_replicas"] = ()
    topic: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "name": "t1",
        "partitions": (mod.MetadataResponsePartition(**part),),
    }
    tid = uuid.uuid4()
    for k, v in {
        "is_internal": False,
        "topic_id": tid,
        "topic_authorized_operations": -(2**31),
    }.items():
        if k in topic_fields:
            topic[k] = v
    broker: dict[str, Any] = {"node_id": 1, "host": "127.0.0.1", "port": 9092}
    if "rack" in mod.MetadataResponseBroker.__dataclass_fields__:
        broker["rack"] = None
    top: dict[str, Any] = {
        "brokers": (mod.MetadataResponseBroker(**broker),),
        "topics": (mod.MetadataResponseTopic(**topic),),
    }
    for k, v in {
        "throttle_time": datetime.timedelta(0),
        "cluster_id": "c1",
        "controller_id": 1,
        "cluster_authorized_operations": -(2**31),
        "error_code": ErrorCode.none,
    }.items():
        if k in fields:
            top[k] = v
    ((cid, resp),) = pair.respond(ev, cls(**top))
    assert cid == ev.correlation_id
    assert resp.brokers[0].host == "127.0.0.1"
    assert resp.topics[0].name == "t1"
    assert resp.topics[0].partitions[0].leader_id == 1
    if "topic_id" in topic_fields:
        assert resp.topics[0].topic_id == tid


@pytest.mark.parametrize("version", [3, 7, 8, 9, 10])
def test_produce_with_a_record_batch(version: int) -> None:
    batch = record_batch(5)
    pair = ConnectionPair.new()
    ev = pair.request(produce_request(version, batch))
    assert ev.expects_response
    records = ev.request.topic_data[0].partition_data[0].records
    assert type(records) is bytes
    assert records == batch
    assert ev.request.acks == -1
    ((_, resp),) = pair.respond(ev, produce_response(version, base_offset=1234))
    p = resp.responses[0].partition_responses[0]
    assert (p.index, p.error_code, p.base_offset) == (0, 0, 1234)


def fetch_request(version: int, topic_id: uuid.UUID | None = None) -> Any:
    f = KP_CLASSES[(1, "request")][version]
    return f(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            f.FetchTopic(
                topic="t1",
                topic_id=topic_id or uuid.UUID(int=0),
                partitions=[
                    f.FetchTopic.FetchPartition(
                        partition=0, fetch_offset=7, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 15, 16])
def test_fetch_with_records(version: int) -> None:
    tid = uuid.uuid4()
    pair = ConnectionPair.new()
    ev = pair.request(fetch_request(version, tid))
    t = ev.request.topics[0]
    if version >= 13:
        assert t.topic_id == tid
    else:
        assert t.topic == "t1"
    assert t.partitions[0].fetch_offset == 7
    records = record_batch(50, value_size=400)  # > 8 KiB: passed by reference
    cls = response_class(1, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    pfields = mod.PartitionData.__dataclass_fields__
    part: dict[str, Any] = {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "high_watermark": 100,
        "last_stable_offset": 100,
        "aborted_transactions": None,
        "records": records,
    }
    if "log_start_offset" in pfields:
        part["log_start_offset"] = 0
    if "preferred_read_replica" in pfields:
        part["preferred_read_replica"] = -1
    topic = {"partitions": (mod.PartitionData(**part),)}
    topic["topic_id" if version >= 13 else "topic"] = tid if version >= 13 else "t1"
    top: dict[str, Any] = {
        "throttle_time": datetime.timedelta(0),
        "responses": (mod.FetchableTopicResponse(**topic),),
    }
    if "error_code" in cls.__dataclass_fields__:
        top["error_code"] = ErrorCode.none
        top["session_id"] = 0
    response = cls(**top)
    parts = ServerConnection()  # send_buffers passes the records through by reference
    parts.receive_data(frame(fetch_request(version, tid)))
    bufs = parts.send_buffers(next_request(parts), response)
    assert any(b is records for b in bufs)
    ((_, resp),) = pair.respond(ev, response)
    p = resp.responses[0].partitions[0]
    assert p.high_watermark == 100
    got = p.records
    assert (
        bytes(got if isinstance(got, bytes | bytearray | memoryview) else got.buffer()) == records
    )


def test_send_and_send_buffers_give_the_same_bytes() -> None:
    records = record_batch(40, value_size=500)
    version = 12
    resp_cls = response_class(1, version)
    mod = __import__(resp_cls.__module__, fromlist=["x"])
    response = resp_cls(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            mod.FetchableTopicResponse(
                topic="t1",
                partitions=(
                    mod.PartitionData(
                        partition_index=0,
                        error_code=ErrorCode.none,
                        high_watermark=1,
                        last_stable_offset=1,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=records,
                    ),
                ),
            ),
        ),
    )
    outs = []
    for method in ("send", "send_buffers"):
        conn = ServerConnection()
        conn.receive_data(frame(fetch_request(version)))
        out = getattr(conn, method)(next_request(conn), response)
        outs.append(out if isinstance(out, bytes) else b"".join(out))
    assert outs[0] == outs[1]
    assert struct.unpack_from(">i", outs[0])[0] == len(outs[0]) - 4


# ----------------------------------------------------- versions below the implemented minimum


@pytest.mark.parametrize("version", [0, 1, 2])
def test_old_produce_gets_unsupported_version_per_partition(version: int) -> None:
    assert version < implemented_min(ApiKey.PRODUCE)
    pair = ConnectionPair.new()
    ev = pair.request(produce_request(version, record_batch()))
    assert type(ev.request) is _legacy.ProduceRequestV0
    assert ev.response is not None
    ((_, resp),) = pair.respond(ev, ev.response)
    (topic,) = resp.responses
    assert topic.name == "t1"
    assert [(p.index, p.error_code) for p in topic.partition_responses] == [(0, 35)]


def test_old_produce_with_acks_0_closes_the_connection() -> None:
    conn = ServerConnection()
    conn.receive_data(frame(produce_request(2, record_batch(), acks=0)))
    with pytest.raises(RemoteProtocolError, match="acks=0"):
        conn.next_event()


def test_list_offsets_v0_gets_unsupported_version() -> None:
    req = _legacy.ListOffsetsRequestV0(
        replica_id=-1,
        topics=(
            _legacy.ListOffsetsTopicV0(
                name="t",
                partitions=(
                    _legacy.ListOffsetsPartitionV0(
                        partition_index=3, timestamp=-1, max_num_offsets=1
                    ),
                ),
            ),
        ),
    )
    body = kio_bytes(req)
    header = struct.pack(">hhih", 2, 0, 11, 1) + b"c"
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(header) + len(body)) + header + body)
    ev = next_request(conn)
    assert ev.response.topics[0].partitions[0].partition_index == 3
    assert ev.response.topics[0].partitions[0].error_code == 35
    out = conn.send(ev, ev.response)
    # topics[1] name "t" partitions[1] index 3 error 35 old_style_offsets[]
    assert out[8:] == struct.pack(">ih1siihi", 1, 1, b"t", 1, 3, 35, 0)


@pytest.mark.parametrize("version", [0, 1])
def test_offset_commit_below_v2_gets_unsupported_version(version: int) -> None:
    req_cls = _legacy.REQUESTS[(8, version)]
    if version == 0:
        part = _legacy.OffsetCommitPartitionV0(
            partition_index=1, committed_offset=5, committed_metadata=None
        )
        req = req_cls(
            group_id="g", topics=(_legacy.OffsetCommitTopicV0(name="t", partitions=(part,)),)
        )
    else:
        part1 = _legacy.OffsetCommitPartitionV1(
            partition_index=1, committed_offset=5, commit_timestamp=-1, committed_metadata=""
        )
        req = req_cls(
            group_id="g",
            generation_id_or_member_epoch=1,
            member_id="m",
            topics=(_legacy.OffsetCommitTopicV1(name="t", partitions=(part1,)),),
        )
    body = kio_bytes(req)
    header = struct.pack(">hhih", 8, version, 11, 1) + b"c"
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(header) + len(body)) + header + body)
    ev = next_request(conn)
    assert ev.request == req
    assert ev.response.topics[0].partitions[0].error_code == 35
    out = conn.send(ev, ev.response)
    assert out[8:] == struct.pack(">ih1siih", 1, 1, b"t", 1, 1, 35)


@pytest.mark.parametrize(("api_key", "version"), sorted(_legacy.REQUESTS))
def test_every_legacy_version_decodes_in_kafka_python(api_key: int, version: int) -> None:
    """Default (empty) requests: kafka-python's encoding matches the old formats there."""
    pair = ConnectionPair.new()
    ev = pair.request(kp_request(api_key, version, **_DEFAULTS.get(api_key, {})))
    assert ev.response is not None
    ((_, resp),) = pair.respond(ev, ev.response)
    assert resp is not None


# ------------------------------------------------------------- every API, every version


_DEFAULTS: dict[int, dict[str, Any]] = {ApiKey.PRODUCE: {"acks": 1}}
# kafka-python has no KIP-848 messages (68, 69): librdkafka and kio drive them in
# tests/integration/test_consumer_groups.py, and the fuzz corpus has them.
_ALL = [
    (k, v)
    for k, (lo, hi) in sorted(ADVERTISED.items())
    for v in range(lo, hi + 1)
    if (k, "request") in KP_CLASSES
]


@pytest.mark.parametrize(("api_key", "version"), _ALL)
def test_every_advertised_version_roundtrips_with_kafka_python(api_key: int, version: int) -> None:
    """kafka-python encodes a default request, we parse it and answer an error response,
    kafka-python decodes that (header v0/v1 and body of the right version)."""
    pair = ConnectionPair.new()
    ev = pair.request(kp_request(api_key, version, **_DEFAULTS.get(api_key, {})))
    assert (ev.api_key, ev.api_version) == (api_key, version)
    if ev.response is not None:
        response = ev.response
    elif api_key == ApiKey.API_VERSIONS:
        # kafka-python reads any ApiVersions error as a v0 body (KIP-511's UNSUPPORTED_VERSION
        # case), so only a success is decodable at v1+
        response = api_versions_response(version)
    else:
        response = error_response(ev, NotCoordinator("x"))
    ((cid, resp),) = pair.respond(ev, response)
    assert cid == ev.correlation_id
    if ev.response is None and "error_code" in type(response).__dataclass_fields__:
        expected = 0 if api_key == ApiKey.API_VERSIONS else NotCoordinator.error_code
        assert resp.error_code == expected


# --------------------------------------------------------------------------- ordering


def test_responses_sent_out_of_order_leave_in_order() -> None:
    pair = ConnectionPair.new()
    reqs = [metadata_request(12, [f"t{i}"]) for i in range(4)]
    for r in reqs:
        pair.client.send_request(r)
    pair.server.receive_data(bytes(pair.client.send_bytes()))
    events = drain(pair.server)
    assert [e.seq for e in events if isinstance(e, RequestEvent)] == [0, 1, 2, 3]
    e0, e1, e2, e3 = (e for e in events if isinstance(e, RequestEvent))
    assert pair.server.send(e2, error_response(e2, NotCoordinator)) == b""
    assert pair.server.send(e3, error_response(e3, NotCoordinator)) == b""
    first = pair.server.send(e0, error_response(e0, NotCoordinator))
    assert [cid for cid, _ in pair.deliver(first)] == [e0.correlation_id]
    rest = pair.server.send(e1, error_response(e1, NotCoordinator))
    # kafka-python checks correlation ids against its in-flight queue: order must be 1, 2, 3
    assert [cid for cid, _ in pair.deliver(rest)] == [
        e1.correlation_id,
        e2.correlation_id,
        e3.correlation_id,
    ]
    assert pair.server.in_flight == 0


def test_acks_0_produce_does_not_block_later_responses() -> None:
    pair = ConnectionPair.new()
    pair.client.send_request(produce_request(9, record_batch(), acks=0))
    pair.client.send_request(metadata_request(12, ["t"]))
    pair.server.receive_data(bytes(pair.client.send_bytes()))
    produce, meta = (e for e in drain(pair.server) if isinstance(e, RequestEvent))
    assert not produce.expects_response
    assert meta.expects_response
    assert pair.server.in_flight == 1
    ((cid, _),) = pair.deliver(pair.server.send(meta, error_response(meta, NotCoordinator)))
    assert cid == meta.correlation_id
    with pytest.raises(LocalProtocolError, match="no response pending"):
        pair.server.send(produce, produce_response(9))


def test_sending_twice_is_a_local_error() -> None:
    conn = ServerConnection()
    conn.receive_data(frame(metadata_request(12, ["t"])))
    ev = next_request(conn)
    conn.send(ev, error_response(ev, NotCoordinator))
    with pytest.raises(LocalProtocolError):
        conn.send(ev, error_response(ev, NotCoordinator))


def test_an_event_of_another_connection_is_rejected() -> None:
    a, b = ServerConnection(), ServerConnection()
    a.receive_data(frame(metadata_request(12, ["t"]), correlation_id=1))
    b.receive_data(frame(metadata_request(12, ["t"]), correlation_id=2))
    ea, eb = next_request(a), next_request(b)
    with pytest.raises(LocalProtocolError):
        a.send(eb, error_response(eb, NotCoordinator))
    assert a.send(ea, error_response(ea, NotCoordinator))


def test_wrong_response_class_then_a_right_one() -> None:
    conn = ServerConnection()
    conn.receive_data(frame(metadata_request(12, ["t"])))
    ev = next_request(conn)
    wrong = error_response(next_request_of(metadata_request(11, ["t"])), NotCoordinator)
    with pytest.raises(LocalProtocolError, match="Metadata v12 needs"):
        conn.send(ev, wrong)
    assert conn.send(ev, error_response(ev, NotCoordinator))


def next_request_of(req: Any) -> RequestEvent:
    conn = ServerConnection()
    conn.receive_data(frame(req))
    return next_request(conn)


def test_unencodable_value_is_a_local_error_and_the_connection_survives() -> None:
    conn = ServerConnection()
    conn.receive_data(frame(produce_request(9, record_batch())))
    ev = next_request(conn)
    bad = produce_response(9, base_offset=2**70)
    with pytest.raises(LocalProtocolError, match="cannot encode Produce v9"):
        conn.send(ev, bad)
    out = conn.send(ev, produce_response(9, base_offset=1))
    assert struct.unpack_from(">i", out)[0] == len(out) - 4


def test_event_is_a_frozen_slotted_dataclass() -> None:
    ev = next_request_of(metadata_request(12, ["t"]))
    with pytest.raises(AttributeError):
        ev.seq = 5  # type: ignore[misc]
    assert not hasattr(ev, "__dict__")
    same = RequestEvent(
        api_key=ev.api_key,
        api_version=ev.api_version,
        correlation_id=ev.correlation_id,
        client_id=ev.client_id,
        request=ev.request,
        header=ev.header,
        seq=ev.seq,
        expects_response=ev.expects_response,
        size=ev.size,
    )
    assert same == ev
    assert repr(NEED_DATA) == "NEED_DATA" and type(NEED_DATA) is NEED_DATA


def test_unknown_tagged_fields_in_header_v2_are_skipped() -> None:
    f = frame(metadata_request(12, ["t"]), 3)
    i = 4 + 8 + 2 + len("tierlog-test")  # the header's tagged-field count
    assert f[i] == 0
    g = f[4:i] + bytes([2, 0, 3]) + b"abc" + bytes([7, 1]) + b"z" + f[i + 1 :]
    (ev,) = tr(struct.pack(">i", len(g)) + g)
    assert (ev.correlation_id, ev.client_id) == (3, "tierlog-test")
    assert ev.request.topics[0].name == "t"


def test_header_v2_tagged_fields_past_the_frame() -> None:
    f = frame(metadata_request(12, ["t"]), 3)
    i = 4 + 8 + 2 + len("tierlog-test")
    g = f[4:i] + bytes([1, 0, 100])  # a 100-byte tagged field in a short frame
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(g)) + g)
    with pytest.raises(RemoteProtocolError, match="request header"):
        conn.next_event()


def test_unknown_tagged_fields_in_a_body_are_a_protocol_error() -> None:
    """kio's reader rejects unknown tags (KIP-482 says skip them): documented limitation."""
    f = frame(metadata_request(12, ["t"]), 3)
    g = f[4:-1] + bytes([1, 5, 1]) + b"q"
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(g)) + g)
    with pytest.raises(RemoteProtocolError, match="Unknown tagged field"):
        conn.next_event()


# First frames captured from the real clients (a socket that records the first request).
GOLDEN_API_VERSIONS = {
    # confluent-kafka 2.16.1 (librdkafka 2.16.0): ApiVersions v3, header v2
    "librdkafka": b"\x00\x00\x00G\x00\x12\x00\x03\x00\x00\x00\x01\x00\x0erdkafka-golden\x00"
    b"\x17confluent-kafka-python\x162.16.1-rdkafka-2.16.0\x00",
    # aiokafka 0.14.0: ApiVersions v0
    "aiokafka": b"\x00\x00\x00\x19\x00\x12\x00\x00\x00\x00\x00\x01\x00\x0faiokafka-golden",
    # kafka-python 3.0.12 KafkaProducer: ApiVersions v4
    "kafka-python": b"\x00\x00\x00)\x00\x12\x00\x04\x00\x00\x00\x01\x00\tkp-golden\x00"
    b"\rkafka-python\x073.0.12\x00",
}


@pytest.mark.parametrize("client", sorted(GOLDEN_API_VERSIONS))
def test_golden_api_versions_of_real_clients(client: str) -> None:
    data = GOLDEN_API_VERSIONS[client]
    (ev,) = tr(data)
    assert ev.api_key == ApiKey.API_VERSIONS
    assert ev.client_id is not None and ev.client_id.endswith("-golden")
    if ev.api_version >= 3:
        assert ev.request.client_software_name in ("confluent-kafka-python", "kafka-python")
    conn = ServerConnection()
    conn.receive_data(data)
    ev = next_request(conn)
    out = conn.send(ev, api_versions_response(ev.api_version))
    # header v0 for every version: correlation id, then error_code 0
    assert struct.unpack_from(">iih", out) == (len(out) - 4, 1, 0)
