"""The network layer at the socket: ApiVersions edge cases, ordering of pipelined requests,
connections not blocking each other, many connections, bad frames closing only their own
connection, backpressure."""

from __future__ import annotations

import datetime
import fcntl
import select
import socket
import struct
import termios
import threading
import time

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12 import request as fetch12
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from tests.integration.clients import cf_produce
from tests.integration.wire import WireClient, decode, encode, read_frame, recv_exact


def _api_versions() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="wire", client_software_version="1")


def _metadata(*topics: str) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics) or None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def _fetch(topic: str, offset: int, max_wait_ms: int) -> fetch12.FetchRequest:
    return fetch12.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            fetch12.FetchTopic(
                topic=topic,
                partitions=(
                    fetch12.FetchPartition(
                        partition=0,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def test_api_versions_of_an_unknown_version_gets_v0_error_35(broker):
    c = WireClient(broker.bootstrap)
    try:
        body = encode(_api_versions(), 7)
        # rewrite the version to 99 (the body is not parsed for unknown versions)
        raw = bytearray(body)
        struct.pack_into(">h", raw, 6, 99)
        c.sock.sendall(raw)
        cid, resp = decode(read_frame(c.sock), 18, 0)
        assert cid == 7
        assert resp.error_code == 35
        assert 18 in {k.api_key for k in resp.api_keys}
        # the connection stays usable: ApiVersions v3 now
        resp = c.call(_api_versions())
        assert resp.error_code == 0
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert ranges[0][0] == 0 and ranges[0][1] >= 9  # Produce from 0 (librdkafka's trap)
        assert ranges[1][0] == 4 and ranges[1][1] >= 13  # Fetch with topic ids
    finally:
        c.close()


def test_pipelined_requests_are_answered_in_order(broker, unique):
    """A long-polling Fetch first, then ApiVersions and Metadata: the later answers wait."""
    topic = f"order-{unique}"
    cf_produce(broker.bootstrap, topic, [(None, b"x")])
    c = WireClient(broker.bootstrap)
    try:
        t0 = time.monotonic()  # the broker reads the fetch after this
        cids = [c.send(_fetch(topic, 1, 700))]  # at the end: waits 700 ms
        cids += [c.send(_api_versions()) for _ in range(5)]
        cids.append(c.send(_metadata(topic)))
        got = []
        for key, ver in [(1, 12)] + [(18, 3)] * 5 + [(3, 12)]:
            got.append(c.recv(key, ver)[0])
        assert got == cids
        assert time.monotonic() - t0 >= 0.7  # the fetch really waited its max wait
    finally:
        c.close()


def test_a_long_poll_does_not_block_other_connections(broker, unique):
    topic = f"noblock-{unique}"
    cf_produce(broker.bootstrap, topic, [(None, b"x")])
    max_wait_s = 20
    slow = WireClient(broker.bootstrap, timeout=max_wait_s + 30)
    fast = WireClient(broker.bootstrap)
    try:
        t0 = time.monotonic()  # the broker reads the fetch after this
        # ApiVersions and the long-polling Fetch in one write: with ApiVersions answered, the
        # broker has read the Fetch behind it and parked it (the fast round trips below
        # would make sure of it anyway: each one is a later pass of the broker's event loop)
        slow.sock.sendall(
            encode(_api_versions(), 1) + encode(_fetch(topic, 1, max_wait_s * 1000), 2)
        )
        assert slow.recv(18, 3)[0] == 1
        for _ in range(20):
            fast.call(_metadata(topic))
        # all served while the fetch is still parked: its answer has not come
        assert not select.select([slow.sock], [], [], 0)[0]
        # an append wakes the parked fetch early
        cf_produce(broker.bootstrap, topic, [(None, b"y")], linger_ms=0)
        cid, resp = slow.recv(1, 12)
        elapsed = time.monotonic() - t0
        assert cid == 2
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0 and part.high_watermark == 2 and part.records
        # not woken, the fetch would have been answered at its max wait, 20 s after t0
        assert elapsed < max_wait_s
    finally:
        slow.close()
        fast.close()


def test_many_connections(broker):
    clients = [WireClient(broker.bootstrap) for _ in range(200)]
    try:
        for c in clients:
            c.send(_api_versions())
        for c in clients:
            _, resp = c.recv(18, 3)
            assert resp.error_code == 0
    finally:
        for c in clients:
            c.close()


def _assert_serves(broker) -> None:
    c = WireClient(broker.bootstrap)
    try:
        assert c.call(_api_versions()).error_code == 0
    finally:
        c.close()


def test_oversized_frame_closes_only_that_connection(broker):
    bystander = WireClient(broker.bootstrap)
    c = WireClient(broker.bootstrap)
    try:
        c.sock.sendall(struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 100)
        assert c.closed_by_peer()
        assert bystander.call(_api_versions()).error_code == 0
        _assert_serves(broker)
        assert "socket.request.max.bytes" in broker.log_text()
    finally:
        c.close()
        bystander.close()


def test_malformed_frames_close_only_that_connection(broker):
    bad_frames = [
        struct.pack(">i", -5),
        struct.pack(">i", 3) + b"abc",  # too short for a header
        struct.pack(">i", 12) + struct.pack(">hhi", 99, 0, 1) + b"\x00\x00",  # unknown key
        struct.pack(">i", 14) + struct.pack(">hhi", 3, 12, 1) + b"\xff\xff\x01\x02\x03\x04",
        encode(_metadata("t"), 5)[:-3],  # truncated, then EOF
    ]
    for raw in bad_frames:
        c = WireClient(broker.bootstrap)
        try:
            c.sock.sendall(raw)
            c.sock.shutdown(socket.SHUT_WR)
            assert c.closed_by_peer(), raw
        finally:
            c.close()
    _assert_serves(broker)


def test_backpressure_a_client_that_does_not_read(broker, unique):
    """Thousands of pipelined requests from a client that reads nothing: the broker stops
    reading that socket, serves everybody else, and answers everything once it reads."""
    topic = f"bp-{unique}"
    cf_produce(broker.bootstrap, topic, [(None, b"z" * 50_000)] * 20)
    c = WireClient(broker.bootstrap, timeout=60)
    n = 600
    payload = b"".join(encode(_fetch(topic, 0, 0), i + 1) for i in range(n))
    sender = threading.Thread(target=c.sock.sendall, args=(payload,), daemon=True)
    sender.start()
    # Others are served while this client, which reads nothing, gets answers it cannot take
    # (600 answers of ~1 MB do not fit in the socket buffers and the broker's 8 MiB write
    # buffer): check it until the answers have come and stopped coming, i.e. none arrived
    # during a whole round trip of somebody else (this connection is stuck).
    deadline = time.monotonic() + 60
    unread = -1
    while True:
        _assert_serves(broker)
        before, unread = unread, _unread_bytes(c.sock)
        if unread > 0 and unread == before:
            break
        assert time.monotonic() < deadline, f"the answers never stopped coming ({unread} B)"
    try:
        for i in range(n):
            (size,) = struct.unpack(">i", recv_exact(c.sock, 4))
            data = recv_exact(c.sock, size)
            assert struct.unpack_from(">i", data)[0] == i + 1
        sender.join(30)
        assert not sender.is_alive()
    finally:
        c.close()


def _unread_bytes(sock: socket.socket) -> int:
    """Bytes received on ``sock`` and not read yet (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
