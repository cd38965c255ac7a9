"""The asyncio network layer in-process, with stand-in handlers: ordering of responses that
finish out of order, acks=0 (no response), handler failures answered with an error, bad
frames closing only their connection, and backpressure."""

from __future__ import annotations

import asyncio
import datetime
import struct

from kio.index import load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from tests.integration.wire import decode, encode
from tierlog.protocol import api_versions_response
from tierlog.server.network import SocketServer


def _api_versions() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _metadata() -> MetadataRequest:
    return MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


class Handler:
    """ApiVersions answers at once; Metadata after ``delay`` seconds (then the next one
    faster), so later requests finish first; or, with a ``gate``, when the test releases it."""

    def __init__(self) -> None:
        self.delays = [0.3, 0.0]
        self.calls = 0
        self.seen: list[tuple[int, str, str | None]] = []  # (api key, principal, listener)
        self.fail = False
        self.gate: asyncio.Semaphore | None = None  # when set, Metadata waits for a release

    def __call__(self, ev, host, principal=None, listener=None):
        self.calls += 1
        self.seen.append((ev.api_key, str(principal), listener))
        if self.fail:
            raise RuntimeError("handler bug")
        if ev.api_key == 18:
            return api_versions_response(ev.api_version)
        delay = self.delays.pop(0) if self.delays else 0.0
        cls = load_response_schema(3, ev.api_version)

        async def later():
            if self.gate is not None:
                await self.gate.acquire()
            else:
                await asyncio.sleep(delay)
            return cls(
                throttle_time=datetime.timedelta(0),
                brokers=(),
                cluster_id="c",
                controller_id=0,
                topics=(),
            )

        return later()


async def _serve(handler, **kw):
    server = SocketServer(handler, max_frame_size=kw.pop("max_frame_size", 1 << 20), **kw)
    _, port = await server.listen("127.0.0.1", 0)
    return server, port


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


def test_responses_leave_in_request_order():
    async def main():
        server, port = await _serve(Handler())
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode(_metadata(), 1) + encode(_metadata(), 2) + encode(_api_versions(), 3))
        got = []
        for key, ver in ((3, 12), (3, 12), (18, 3)):
            cid, _ = decode(await _read_frame(reader), key, ver)
            got.append(cid)
        writer.close()
        await server.stop()
        return got

    assert asyncio.run(main()) == [1, 2, 3]


def test_handler_failure_is_answered_and_the_connection_survives():
    async def main():
        h = Handler()
        server, port = await _serve(h)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        h.fail = True
        writer.write(encode(_metadata(), 1))
        cid, resp = decode(await _read_frame(reader), 3, 12)
        assert cid == 1 and resp.topics == ()
        h.fail = False
        writer.write(encode(_api_versions(), 2))
        cid, resp = decode(await _read_frame(reader), 18, 3)
        writer.close()
        await server.stop()
        return cid, resp.error_code

    assert asyncio.run(main()) == (2, 0)


def test_oversized_and_garbage_frames_close_only_their_connection():
    async def main():
        server, port = await _serve(Handler(), max_frame_size=1000)
        good_r, good_w = await asyncio.open_connection("127.0.0.1", port)
        for bad in (struct.pack(">i", 5000) + b"x" * 10, struct.pack(">i", 10) + b"\xff" * 10):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(bad)
            assert await asyncio.wait_for(r.read(), 5) == b""  # closed by the broker
            w.close()
        good_w.write(encode(_api_versions(), 9))
        cid, _ = decode(await _read_frame(good_r), 18, 3)
        good_w.close()
        await server.stop()
        return cid

    assert asyncio.run(main()) == 9


async def _until(condition) -> None:
    """Poll ``condition`` on the loop until it holds (a generous deadline, not a duration)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def test_backpressure_stops_reading_while_too_much_is_in_flight():
    async def main():
        h = Handler()
        gate = asyncio.Semaphore(0)  # each Metadata answer waits for one release
        h.gate = gate
        server, port = await _serve(h, max_in_flight=4)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(encode(_metadata(), i) for i in range(1, 21)))
        await _until(lambda: len(server.connections) == 1)
        (conn,) = server.connections
        # nothing can be answered before the gate opens: the connection pauses at the limit
        await _until(lambda: conn._reading_paused)
        assert h.calls == 4  # max_in_flight, not fewer and not more
        gate.release()
        first = decode(await asyncio.wait_for(_read_frame(reader), 10), 3, 12)[0]
        # the answer left, then the slot it freed took exactly one more request
        assert h.calls == 5
        for _ in range(19):
            gate.release()
        got = [first]
        for _ in range(19):
            got.append(decode(await asyncio.wait_for(_read_frame(reader), 10), 3, 12)[0])
        writer.close()
        await server.stop()
        return got

    assert asyncio.run(main()) == list(range(1, 21))


def test_eof_after_requests_still_gets_the_answers():
    async def main():
        server, port = await _serve(Handler())
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode(_metadata(), 1) + encode(_api_versions(), 2))
        writer.write_eof()
        a = decode(await _read_frame(reader), 3, 12)[0]
        b = decode(await _read_frame(reader), 18, 3)[0]
        rest = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await writer.wait_closed()
        await server.stop()
        return a, b, rest

    assert asyncio.run(main()) == (1, 2, b"")


def _sasl_channel(**kw):
    from tierlog.security.channel_builder import ChannelBuilder

    return ChannelBuilder(
        listener="CLIENTS",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=("PLAIN",),
        plain_users={"alice": "pw"},
        failed_delay_ms=0,
        max_receive_size_before_auth=1024,
        **kw,
    )


def test_sasl_listener_passes_principal_and_listener_to_the_handler():
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    async def main():
        h = Handler()
        h.delays = [0.0, 0.0]
        server = SocketServer(h, max_frame_size=1 << 20)
        _, port = await server.listen("127.0.0.1", 0, _sasl_channel())
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            encode(_api_versions(), 1)
            + encode(SaslHandshakeRequest(mechanism="PLAIN"), 2)
            + encode(SaslAuthenticateRequest(auth_bytes=b"\0alice\0pw"), 3)
            + encode(_metadata(), 4)
        )
        for key, ver in ((18, 3), (17, 1), (36, 2), (3, 12)):
            cid, resp = decode(await _read_frame(reader), key, ver)
            assert getattr(resp, "error_code", 0) == 0
        # Frames above sasl.server.max.receive.size are fine once authenticated.
        big = _metadata()
        writer.write(encode(big, 5, client_id="x" * 2000))
        cid, _ = decode(await _read_frame(reader), 3, 12)
        assert cid == 5
        writer.close()
        await server.stop()
        return h.seen

    seen = asyncio.run(main())
    # The SASL requests never reached the handler; ApiVersions did, before authentication.
    assert seen == [
        (18, "User:ANONYMOUS", "CLIENTS"),
        (3, "User:alice", "CLIENTS"),
        (3, "User:alice", "CLIENTS"),
    ]


def test_sasl_listener_bounds_frames_and_refuses_requests_before_authentication():
    async def main():
        h = Handler()
        server = SocketServer(h, max_frame_size=1 << 20)
        _, port = await server.listen("127.0.0.1", 0, _sasl_channel())
        # a frame above sasl.server.max.receive.size (1024) before authentication
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", 4096))
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        # a Metadata request before authentication: closed, never handled
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode(_metadata(), 1))
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        await server.stop()
        return h.calls

    assert asyncio.run(main()) == 0


def _fuzz_frames():
    from hypothesis import strategies as st

    from tierlog.protocol.api_versions import ADVERTISED

    header = st.tuples(
        st.sampled_from(sorted(ADVERTISED)), st.integers(-1, 20), st.integers(0, 2**31 - 1)
    ).map(lambda t: struct.pack(">hhih", t[0], t[1], t[2], -1))
    frame = st.tuples(header, st.binary(max_size=200)).map(
        lambda hb: struct.pack(">i", len(hb[0]) + len(hb[1])) + hb[0] + hb[1]
    )
    return st.lists(st.one_of(frame, st.binary(min_size=1, max_size=64)), min_size=1, max_size=6)


def test_fuzz_before_authentication_reaches_no_handler_and_kills_nothing():
    """Random frames (real headers of advertised keys with random bodies, and raw bytes) on a
    SASL listener: the handler sees at most ApiVersions, and a fresh client is still served."""
    from hypothesis import given, settings
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    @settings(max_examples=40, deadline=None)
    @given(_fuzz_frames())
    def run(chunks):
        async def main():
            h = Handler()
            server = SocketServer(h, max_frame_size=1 << 20)
            _, port = await server.listen("127.0.0.1", 0, _sasl_channel())
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for c in chunks:
                writer.write(c)
            writer.write_eof()
            try:
                await asyncio.wait_for(reader.read(), 10)
            except ConnectionResetError:
                pass
            writer.close()
            # the listener still answers a well-behaved client
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(encode(SaslHandshakeRequest(mechanism="PLAIN"), 1))
            cid, resp = decode(await _read_frame(reader), 17, 1)
            assert cid == 1 and resp.error_code == 0
            writer.close()
            await server.stop()
            return h.seen

        seen = asyncio.run(main())
        assert all(key == 18 and p == "User:ANONYMOUS" for key, p, _ in seen), seen

    run()


class _RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: object) -> None:
        self.writes.append(bytes(data))  # type: ignore[call-overload]


def test_tls_writes_go_in_pieces_small_parts_coalesced():
    """TLS transports get pieces of at most 64 KiB (asyncio's TLS layer is 3.5x slower with
    1 MiB writes); small parts are joined, big ones sliced; the bytes are the same, in order."""
    import random

    from tierlog.server.network import _TLS_WRITE_CHUNK, _write_tls

    rnd = random.Random(3)
    for _ in range(50):
        parts = [
            rnd.randbytes(rnd.choice([0, 1, 17, 5000, _TLS_WRITE_CHUNK, 300_000]))
            for _ in range(rnd.randrange(1, 12))
        ]
        t = _RecordingTransport()
        _write_tls(t, [memoryview(p) if i % 2 else p for i, p in enumerate(parts)])  # type: ignore[arg-type]
        assert b"".join(t.writes) == b"".join(parts)
        assert all(0 < len(w) <= _TLS_WRITE_CHUNK for w in t.writes)
        # no more pieces than needed plus one per big part boundary
        total = sum(map(len, parts))
        assert len(t.writes) <= -(-total // _TLS_WRITE_CHUNK) + len(parts)


def test_responses_larger_than_the_socket_takes_leave_whole_in_order_and_before_the_close():
    """Answers of ~4.5 MB each to a client that does not read yet: what the socket does not
    take waits (uncopied) in the connection's queue, past WRITE_BUFFER_HIGH the connection
    stops reading, and the EOF's close waits until every byte has left."""
    import uuid

    from tierlog.server.handlers._build import build
    from tierlog.server.network import WRITE_BUFFER_HIGH

    cls = load_response_schema(3, 12)
    topics = [
        {"error_code": 0, "name": f"t{i:06d}" + "x" * 200, "topic_id": uuid.UUID(int=i),
         "is_internal": False, "partitions": [], "topic_authorized_operations": -2**31}
        for i in range(20_000)
    ]  # fmt: skip
    big = build(cls, {"throttle_time": 0, "brokers": [], "cluster_id": "c",
                      "controller_id": 0, "topics": topics})  # fmt: skip

    def handler(ev, host, principal=None, listener=None):
        return api_versions_response(ev.api_version) if ev.api_key == 18 else big

    async def main():
        server, port = await _serve(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(encode(_metadata(), i) for i in range(1, 7)))
        writer.write(encode(_api_versions(), 7))
        writer.write_eof()
        await _until(lambda: len(server.connections) == 1)
        (conn,) = server.connections
        await _until(lambda: conn._pending_bytes > WRITE_BUFFER_HIGH)
        assert conn._writing_paused  # no more requests taken while that much waits
        got = []
        for _ in range(6):
            cid, resp = decode(await asyncio.wait_for(_read_frame(reader), 30), 3, 12)
            got.append((cid, len(resp.topics), resp.topics[-1].name))
        last = decode(await asyncio.wait_for(_read_frame(reader), 30), 18, 3)[0]
        rest = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        await server.stop()
        return got, last, rest

    got, last, rest = asyncio.run(main())
    assert got == [(i, 20_000, "t019999" + "x" * 200) for i in range(1, 7)]
    assert (last, rest) == (7, b"")
