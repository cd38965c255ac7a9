"""subscribed_topics: the topics of a consumer's JoinGroup metadata."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from tierlog.coordinator.group.consumer_protocol import subscribed_topics


def subscription(version: int, topics: list[str], tail: bytes = b"") -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    return out + tail


@given(
    st.integers(0, 3),
    st.lists(st.text(min_size=1, max_size=20), max_size=8),
    st.binary(max_size=16),
)
def test_round_trip(version, topics, tail):
    assert subscribed_topics(subscription(version, topics, tail)) == frozenset(topics)


def test_a_version_3_subscription():
    # Kafka's ConsumerProtocolSubscription v3 to "orders": null user data, no owned
    # partitions, generation -1, null rack; the topic list is all we read.
    raw = (
        bytes.fromhex("0003000000010006")
        + b"orders"
        + bytes.fromhex("ffffffff00000000ffffffffffff")
    )
    assert subscribed_topics(raw) == frozenset({"orders"})


def test_garbage_is_none_not_an_exception():
    assert subscribed_topics(b"") is None
    assert subscribed_topics(b"\x00\x01\x00\x00\x00\x05\x00\x03ab") is None  # truncated
    assert subscribed_topics(b"\x00\x01\x7f\xff\xff\xff") is None  # absurd count
    assert subscribed_topics(b"\x00\x01\x00\x00\x00\x01\x00\x02\xff\xfe") is None  # not UTF-8
