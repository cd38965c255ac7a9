"""Fuzz: random and mutated frames never raise anything but RemoteProtocolError, never hang,
and every request that does parse can be answered."""

from __future__ import annotations

import datetime
import itertools
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.static.primitive import i32, i32Timedelta

from tests.integration.wire import encode as wire_encode
from tierlog.errors import NotCoordinator, RemoteProtocolError
from tierlog.protocol import (
    ADVERTISED,
    NEED_DATA,
    ApiKey,
    ConnectionClosed,
    RequestEvent,
    ServerConnection,
    api_versions_response,
    error_response,
)

from .helpers import KP_CLASSES, frame, kp_request, record_batch
from .test_connection import fetch_request, metadata_request, produce_request


def _kip848_request(api_key: int, version: int) -> Any:
    cls = load_request_schema(api_key, version)
    if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
        return cls(group_ids=("g",), include_authorized_operations=False)
    return cls(
        group_id="g",
        member_id="m",
        member_epoch=i32(0),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        subscribed_topic_names=("t",),
        topic_partitions=(),
    )


def _corpus() -> list[bytes]:
    out = [
        frame(kp_request(k, v, **({"acks": 1} if k == ApiKey.PRODUCE else {})), correlation_id=v)
        for k, (lo, hi) in sorted(ADVERTISED.items())
        for v in range(lo, hi + 1)
        if (k, "request") in KP_CLASSES
    ]
    # kafka-python has no KIP-848 messages: kio's own writer builds them.
    out += [
        wire_encode(_kip848_request(k, v), correlation_id=v)
        for k in (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE)
        for v in range(ADVERTISED[k][0], ADVERTISED[k][1] + 1)
    ]
    out += [
        frame(metadata_request(12, ["a", "bb"])),
        frame(metadata_request(1, ["a"])),
        frame(produce_request(9, record_batch(2))),
        frame(produce_request(3, record_batch(1))),
        frame(produce_request(9, record_batch(1), acks=0)),
        frame(fetch_request(12)),
        frame(fetch_request(16)),
    ]
    return out


CORPUS = _corpus()

MAX_FRAME = 1 << 16


def run(chunks: list[bytes]) -> int:
    """Feed the chunks, answer every request; the number of events. Only
    RemoteProtocolError may escape, and only from next_event."""
    conn = ServerConnection(max_frame_size=MAX_FRAME)
    total = sum(len(c) for c in chunks)
    n = 0
    for chunk in [*chunks, b""]:
        conn.receive_data(chunk)
        while True:
            try:
                ev = conn.next_event()
            except RemoteProtocolError:
                with_error = True
                break
            if ev is NEED_DATA or isinstance(ev, ConnectionClosed):
                with_error = False
                break
            assert isinstance(ev, RequestEvent)
            n += 1
            assert n <= total // 14 + 1  # every request consumes at least 14 bytes
            if ev.expects_response:
                conn.send(ev, answer(ev))
        if with_error:
            return n
    return n


def answer(ev: RequestEvent) -> Any:
    if ev.response is not None:
        return ev.response
    if ev.api_key == ApiKey.API_VERSIONS:
        return api_versions_response(ev.api_version)
    return error_response(ev, NotCoordinator("fuzz"))


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


_settings = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(st.binary(max_size=4096), st.lists(st.integers(0, 4096), max_size=8))
def test_random_bytes(data: bytes, cuts: list[int]) -> None:
    run(split(data, cuts))


@_settings
@given(st.binary(max_size=2048), st.lists(st.integers(0, 4096), max_size=4))
def test_random_body_behind_a_plausible_size(body: bytes, cuts: list[int]) -> None:
    run(split(struct.pack(">i", len(body)) + body, cuts))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "resize", "delete"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[i] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del data[i:]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        else:  # the size field follows the edit, so the frame stays framed
            data[0:4] = struct.pack(">i", max(len(data) - 4, 0))
    return bytes(data)


@_settings
@given(st.lists(mutated(), min_size=1, max_size=4), st.lists(st.integers(0, 8192), max_size=6))
def test_mutated_valid_frames(frames: list[bytes], cuts: list[int]) -> None:
    run(split(b"".join(frames), cuts))


@_settings
@given(mutated())
def test_mutated_frame_followed_by_a_valid_one(bad: bytes) -> None:
    good = frame(metadata_request(12, ["t"]), correlation_id=1234)
    run([bad + good])


def test_valid_corpus_parses_whole() -> None:
    assert run([b"".join(CORPUS)]) == len(CORPUS)
