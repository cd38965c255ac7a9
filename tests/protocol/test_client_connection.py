"""ClientConnection: request framing and headers against kio's own writer, responses from our
ServerConnection over a fake link, fed whole, byte by byte, split anywhere, with trailing
bytes; and every way a peer can break the protocol."""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch12
from kio.schema.fetch.v13.request import FetchRequest as FetchRequestV13
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v2.request import (
    OffsetForLeaderEpochRequest as OffsetForLeaderEpochRequestV2,
)
from kio.schema.offset_for_leader_epoch.v4 import request as ofle4
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer

from tierlog.errors import LocalProtocolError, RemoteProtocolError
from tierlog.protocol import (
    NEED_DATA,
    ConnectionClosed,
    RequestEvent,
    ServerConnection,
    api_versions_response,
    response_class,
)
from tierlog.protocol._writer import compile_writer
from tierlog.protocol.api_versions import api_versions_v0_error_response
from tierlog.protocol.client_connection import ClientConnection, convert_entity

# --------------------------------------------------------------------------- helpers


def metadata(version: int = 12, topics: tuple[str, ...] = ("t",)) -> Any:
    if version == 12:
        return MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    m = __import__(f"kio.schema.metadata.v{version}.request", fromlist=["x"])
    return m.MetadataRequest(
        topics=tuple(m.MetadataRequestTopic(name=t) for t in topics),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def api_versions() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="tierlog", client_software_version="0.1.0")


def metadata_response(version: int, topic: str = "t") -> Any:
    cls = response_class(3, version)
    m = __import__(cls.__module__, fromlist=["x"])
    fields: dict[str, Any] = {
        "brokers": (m.MetadataResponseBroker(node_id=1, host="h", port=9092, rack=None),),
        "cluster_id": "c",
        "controller_id": 1,
        "topics": (
            m.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=topic,
                is_internal=False,
                partitions=(),
                topic_authorized_operations=-2147483648,
                **({"topic_id": None} if version >= 10 else {}),
            ),
        ),
        "throttle_time": datetime.timedelta(0),
    }
    if version <= 10:
        fields["cluster_authorized_operations"] = -2147483648
    return cls(**fields)


class Link:
    """Our client codec and our server codec over a fake link."""

    def __init__(self, client_id: str | None = "tierlog-test") -> None:
        self.client = ClientConnection(client_id)
        self.server = ServerConnection()

    def request(self, req: Any, api_version: int | None = None) -> RequestEvent:
        self.server.receive_data(self.client.send(req, api_version))
        ev = self.server.next_event()
        assert isinstance(ev, RequestEvent)
        return ev

    def answer(self, ev: RequestEvent, response: Any) -> bytes:
        return self.server.send(ev, response)


def drain(conn: ClientConnection) -> list[Any]:
    out: list[Any] = []
    while (got := conn.next_response()) is not NEED_DATA:
        out.append(got)
        if isinstance(got, ConnectionClosed):
            break
    return out


def kio_request_bytes(req: Any, correlation_id: int, client_id: str | None) -> bytes:
    """The framed request as kio's own writer encodes it (independent of ours)."""
    flexible = type(req).__flexible__
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=type(req).__api_key__,
            request_api_version=type(req).__version__,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(type(req))(buf, req)
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


def two_responses() -> tuple[ClientConnection, bytes, list[tuple[int, Any]]]:
    """A client with two requests pending and the bytes of both responses."""
    link = Link()
    ev1 = link.request(metadata(12, ("a",)))
    ev2 = link.request(api_versions())
    r1, r2 = metadata_response(12, "a"), api_versions_response(3)
    data = link.answer(ev1, r1) + link.answer(ev2, r2)
    return link.client, data, [(0, r1), (1, r2)]


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize("client_id", ["tierlog-broker-1", "", None])
@pytest.mark.parametrize("req", [metadata(12), metadata(8), api_versions()], ids=str)
def test_request_bytes_are_kios(req: Any, client_id: str | None) -> None:
    conn = ClientConnection(client_id)
    for cid in range(3):
        assert conn.send(req) == kio_request_bytes(req, cid, client_id)
    assert conn.in_flight == 3
    assert conn.last_correlation_id == 2


def test_server_reads_what_the_client_sends() -> None:
    link = Link("tierlog-broker-7")
    for req in (metadata(12), metadata(8), api_versions()):
        ev = link.request(req)
        assert ev.request == req
        assert ev.client_id == "tierlog-broker-7"
        assert ev.api_version == type(req).__version__


def test_correlation_ids_wrap_like_kafkas() -> None:
    conn = ClientConnection()
    conn._next_correlation_id = 2**31 - 1
    conn.send(api_versions())
    assert conn.last_correlation_id == 2**31 - 1
    assert struct.unpack_from(">i", conn.send(api_versions()), 8)[0] == 0


def test_acks_0_produce_has_no_response_pending() -> None:
    from kio.schema.produce.v9 import request as p

    req = p.ProduceRequest(
        transactional_id=None,
        acks=0,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(
            p.TopicProduceData(
                name="t", partition_data=(p.PartitionProduceData(index=0, records=None),)
            ),
        ),
    )
    conn = ClientConnection()
    conn.send(req)
    assert conn.in_flight == 0
    conn.send(dataclass_replace(req, acks=1))
    assert conn.in_flight == 1


def dataclass_replace(obj: Any, **kw: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **kw)


def test_unknown_version_is_local_error_and_nothing_pending() -> None:
    conn = ClientConnection()
    with pytest.raises(LocalProtocolError, match="api_version=99"):
        conn.send(metadata(12), 99)
    with pytest.raises(LocalProtocolError):
        conn.send(object())
    assert conn.in_flight == 0
    assert conn.last_correlation_id == -1


# --------------------------------------------------------------------------- versions


def ofle_v4() -> Any:
    return ofle4.OffsetForLeaderEpochRequest(
        replica_id=3,
        topics=(
            ofle4.OffsetForLeaderTopic(
                topic="t",
                partitions=(
                    ofle4.OffsetForLeaderPartition(
                        partition=1, current_leader_epoch=5, leader_epoch=4
                    ),
                ),
            ),
        ),
    )


def test_convert_entity_down_drops_fields_and_up_takes_defaults() -> None:
    v2 = convert_entity(ofle_v4(), OffsetForLeaderEpochRequestV2)
    assert type(v2) is OffsetForLeaderEpochRequestV2
    p = v2.topics[0].partitions[0]
    assert (v2.topics[0].topic, p.partition, p.current_leader_epoch, p.leader_epoch) == (
        "t",
        1,
        5,
        4,
    )
    back = convert_entity(v2, ofle4.OffsetForLeaderEpochRequest)
    assert back.replica_id == -2  # v3's default: DEBUGGING_REPLICA_ID
    assert back.topics == ofle_v4().topics


def test_fields_of_older_versions_take_kafkas_implicit_defaults() -> None:
    from kio.schema.metadata.v9.request import MetadataRequest as MetadataRequestV9

    v9 = convert_entity(metadata(12), MetadataRequestV9)
    assert v9.include_cluster_authorized_operations is False
    assert [t.name for t in v9.topics] == ["t"]


def test_send_converts_to_the_version_asked() -> None:
    conn = ClientConnection("c")
    data = conn.send(ofle_v4(), 2)
    expected = convert_entity(ofle_v4(), OffsetForLeaderEpochRequestV2)
    assert data == kio_request_bytes(expected, 0, "c")


def test_a_field_that_cannot_be_made_up_is_refused() -> None:
    v12 = fetch12.FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=1),
        min_bytes=1,
        max_bytes=1,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(fetch12.FetchTopic(topic="t", partitions=()),),
        forgotten_topics_data=(),
        rack_id="",
    )
    with pytest.raises(LocalProtocolError, match="topic_id"):
        convert_entity(v12, FetchRequestV13)
    conn = ClientConnection()
    with pytest.raises(LocalProtocolError):
        conn.send(v12, 13)
    assert conn.in_flight == 0


# --------------------------------------------------------------------------- responses


def test_round_trip_through_our_server_codec() -> None:
    link = Link()
    for version in (8, 12):
        ev = link.request(metadata(version))
        resp = metadata_response(version)
        link.client.receive_data(link.answer(ev, resp))
        assert link.client.next_response() == (ev.correlation_id, resp)
        assert link.client.next_response() is NEED_DATA
    assert link.client.in_flight == 0


def test_whole_bytewise_and_with_trailing_bytes() -> None:
    conn, data, expected = two_responses()
    conn.receive_data(data)
    assert drain(conn) == expected
    assert conn.buffered_bytes == 0

    conn, data, expected = two_responses()
    got: list[Any] = []
    for i in range(len(data)):
        conn.receive_data(data[i : i + 1])
        got += drain(conn)
    assert got == expected

    conn, data, expected = two_responses()
    conn.receive_data(data + data[:7])  # the start of a frame nobody asked for yet
    assert drain(conn)[:2] == expected
    assert conn.buffered_bytes == 7
    assert conn.bytes_needed == struct.unpack_from(">i", data)[0] + 4 - 7


@given(st.lists(st.integers(0, 10_000), max_size=8))
def test_any_split_gives_the_same_responses(cuts: list[int]) -> None:
    conn, data, expected = two_responses()
    points = sorted({c % (len(data) + 1) for c in cuts})
    got: list[Any] = []
    for a, b in zip([0, *points], [*points, len(data)], strict=True):
        if a < b:
            conn.receive_data(memoryview(data)[a:b])
        got += drain(conn)
    assert got == expected


def feed_in_place(conn: ClientConnection, data: bytes, cuts: list[int] = []) -> list[Any]:  # noqa: B006
    """Write ``data`` into ``conn.get_buffer()`` as a socket's ``recv_into`` would: as much as
    each buffer takes, never past the next cut; the responses complete after each write."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {len(data)})
    got: list[Any] = []
    pos = 0
    while pos < len(data):
        stop = next(c for c in points if c > pos)
        buf = conn.get_buffer()
        assert len(buf) > 0
        n = min(len(buf), stop - pos)
        buf[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        pos += n
        got += drain(conn)
    return got


@given(st.lists(st.integers(0, 10_000), max_size=8))
def test_received_in_place_any_split_gives_the_same_responses(cuts: list[int]) -> None:
    conn, data, expected = two_responses()
    assert feed_in_place(conn, data, cuts) == expected
    assert conn.next_response() is NEED_DATA


def big_responses(topics: int) -> tuple[ClientConnection, list[bytes], list[tuple[int, Any]]]:
    """A client with three Metadata requests pending and their responses' bytes: ``topics``
    topics in the first and the third, one in the second."""
    link = Link()
    frames, expected = [], []
    for n in (topics, 1, topics):
        names = tuple(f"topic-{i:06d}" for i in range(n))
        ev = link.request(metadata(12, names))
        resp = metadata_response(12, "x")
        resp = dataclasses.replace(resp, topics=resp.topics * n)
        frames.append(link.answer(ev, resp))
        expected.append((ev.correlation_id, resp))
    return link.client, frames, expected


def test_received_in_place_a_frame_larger_than_the_buffer_grows_it_once() -> None:
    conn, frames, expected = big_responses(20_000)
    assert len(frames[0]) > 4 * len(conn.get_buffer())  # larger than the first buffer
    got = feed_in_place(conn, frames[0], cuts=list(range(0, len(frames[0]), 10_000)))
    assert got == expected[:1]
    grown = conn.get_buffer().obj
    assert len(grown) >= len(frames[0])
    # the next frames, small and large, land in the same buffer (no new one per frame)
    assert feed_in_place(conn, frames[1] + frames[2], cuts=[100, 70_000]) == expected[1:]
    assert conn.get_buffer().obj is grown


def test_received_in_place_eof() -> None:
    conn, data, expected = two_responses()
    feed_in_place(conn, data[:-3])
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="inside a response frame"):
        drain(conn)

    conn, data, expected = two_responses()
    assert feed_in_place(conn, data) == expected
    conn.receive_data(b"")
    assert isinstance(conn.next_response(), ConnectionClosed)


def test_received_in_place_bad_frame_size_is_refused() -> None:
    conn, _, _ = two_responses()
    buf = conn.get_buffer()
    buf[:4] = struct.pack(">i", 2**31 - 1)
    conn.buffer_updated(4)
    assert len(conn.get_buffer()) > 0  # no buffer the size of the bad frame
    with pytest.raises(RemoteProtocolError, match="outside"):
        conn.next_response()


def test_one_way_of_receiving_per_connection() -> None:
    conn, data, _ = two_responses()
    conn.get_buffer()
    with pytest.raises(ValueError, match="get_buffer"):
        conn.receive_data(data)
    conn, data, _ = two_responses()
    conn.receive_data(data[:3])
    with pytest.raises(ValueError, match="receive_data"):
        conn.get_buffer()


def test_bytes_needed_counts_down_to_the_end_of_the_frame() -> None:
    conn, data, _ = two_responses()
    assert conn.bytes_needed == 4
    conn.receive_data(data[:2])
    assert conn.bytes_needed == 2
    size = struct.unpack_from(">i", data)[0]
    conn.receive_data(data[2:10])
    assert conn.bytes_needed == size + 4 - 10
    conn.receive_data(data[10 : size + 4])
    assert conn.bytes_needed == 0


def test_eof_after_the_responses_then_closed() -> None:
    conn, data, expected = two_responses()
    conn.receive_data(data)
    conn.receive_data(b"")
    assert drain(conn) == [*expected, ConnectionClosed()]
    with pytest.raises(ValueError, match="after EOF"):
        conn.receive_data(b"x")


def test_eof_with_requests_pending_is_closed_with_in_flight() -> None:
    conn = ClientConnection()
    conn.send(api_versions())
    conn.receive_data(b"")
    assert conn.next_response() == ConnectionClosed()
    assert conn.in_flight == 1


def test_eof_inside_a_frame() -> None:
    conn, data, _ = two_responses()
    conn.receive_data(data[:9])
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="inside a response frame"):
        conn.next_response()


def test_wrong_correlation_id_kills_the_connection() -> None:
    conn, data, _ = two_responses()
    bad = bytearray(data)
    struct.pack_into(">i", bad, 4, 42)
    conn.receive_data(bytes(bad))
    with pytest.raises(RemoteProtocolError, match="correlation id 42, expected 0"):
        conn.next_response()
    with pytest.raises(RemoteProtocolError, match="already failed"):
        conn.next_response()


def test_response_nobody_asked_for() -> None:
    _, data, _ = two_responses()
    conn = ClientConnection()
    conn.receive_data(data)
    with pytest.raises(RemoteProtocolError, match="no request is pending"):
        conn.next_response()


@pytest.mark.parametrize("size", [-1, 3, 1001])
def test_bad_frame_size_is_refused_from_its_size_field(size: int) -> None:
    conn = ClientConnection(max_frame_size=1000)
    conn.send(api_versions())
    conn.receive_data(struct.pack(">i", size))
    with pytest.raises(RemoteProtocolError, match="frame size"):
        conn.next_response()


def test_garbage_body_and_trailing_bytes() -> None:
    conn = ClientConnection()
    conn.send(metadata(12))
    body = struct.pack(">i", 0) + b"\x00" + b"\xff" * 20
    conn.receive_data(struct.pack(">i", len(body)) + body)
    with pytest.raises(RemoteProtocolError, match="malformed Metadata v12 response"):
        conn.next_response()

    link = Link()
    ev = link.request(metadata(12))
    data = link.answer(ev, metadata_response(12))
    padded = struct.pack(">i", len(data) - 4 + 3) + data[4:] + b"abc"
    link.client.receive_data(padded)
    with pytest.raises(RemoteProtocolError, match="3 bytes after its body"):
        link.client.next_response()


def test_api_versions_unsupported_version_answer_is_read_as_v0() -> None:
    # What a broker sends to an ApiVersions version it does not know (KIP-511): header v0,
    # a v0 body with UNSUPPORTED_VERSION and its table.
    conn = ClientConnection()
    conn.send(api_versions())
    body = compile_writer(type(r := api_versions_v0_error_response()))(r, bytearray(), [])
    frame = struct.pack(">i", 0) + bytes(body)
    conn.receive_data(struct.pack(">i", len(frame)) + frame)
    cid, resp = conn.next_response()  # type: ignore[misc]
    assert cid == 0
    assert resp == r
    assert resp.error_code == ErrorCode.unsupported_version


def test_a_body_cut_short_never_reads_into_the_next_frame() -> None:
    conn, data, _ = two_responses()
    size = struct.unpack_from(">i", data)[0]
    first, second = data[4 : 4 + size], data[4 + size :]
    cut = struct.pack(">i", size - 3) + first[:-3] + second
    conn.receive_data(cut)
    with pytest.raises(RemoteProtocolError, match="malformed Metadata v12 response"):
        conn.next_response()
