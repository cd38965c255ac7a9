"""__consumer_offsets key/value formats: golden bytes, every version, round trips, bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.coordinator.group.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
)
from tierlog.errors import LocalProtocolError

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


# --------------------------------------------------------------------------- golden bytes


def test_offset_commit_key_golden():
    key = OffsetCommitKey("g", "t", 7)
    #         type  len g   len t   partition
    golden = h("0001 0001 67 0001 74 00000007")
    assert key.encode() == golden
    assert decode_key(golden) == key


def test_offset_commit_key_type_0_is_read_too():
    assert decode_key(h("0000 0001 67 0001 74 00000001")) == OffsetCommitKey("g", "t", 1)


def test_group_metadata_key_golden():
    golden = h("0002 0003 677270")
    assert GroupMetadataKey("grp").encode() == golden
    assert decode_key(golden) == GroupMetadataKey("grp")


def test_unknown_record_types_are_not_ours():
    # KIP-848 consumer group records (type 3+) share the topic with us
    assert decode_key(h("0003 0001 67")) is None
    assert decode_key(h("0011 0001 67")) is None


def test_offset_commit_value_golden_v3():
    value = OffsetCommitValue(offset=5, leader_epoch=-1, metadata="", commit_timestamp=1000)
    #          ver  offset            epoch    metadata  commitTimestamp
    golden = h("0003 0000000000000005 ffffffff 0000      00000000000003e8")
    assert value.encode() == golden
    assert OffsetCommitValue.decode(golden) == value


def test_offset_commit_value_golden_all_versions():
    v = OffsetCommitValue(
        offset=-2, leader_epoch=3, metadata="m", commit_timestamp=16, expire_timestamp=32
    )
    off, ts, exp = "fffffffffffffffe", "0000000000000010", "0000000000000020"
    assert v.encode(0) == h(f"0000 {off} 0001 6d {ts}")
    assert v.encode(1) == h(f"0001 {off} 0001 6d {ts} {exp}")
    assert v.encode(2) == h(f"0002 {off} 0001 6d {ts}")
    assert v.encode(3) == h(f"0003 {off} 00000003 0001 6d {ts}")
    # v4 is flexible: compact string (length + 1 as unsigned varint) and an empty tag section
    assert v.encode(4) == h(f"0004 {off} 00000003 02 6d {ts} 00")
    assert OffsetCommitValue.decode(v.encode(0)) == OffsetCommitValue(-2, -1, "m", 16, -1)
    assert OffsetCommitValue.decode(v.encode(1)) == OffsetCommitValue(-2, -1, "m", 16, 32)
    assert OffsetCommitValue.decode(v.encode(3)) == OffsetCommitValue(-2, 3, "m", 16, -1)
    assert OffsetCommitValue.decode(v.encode(4)) == OffsetCommitValue(-2, 3, "m", 16, -1)


def _member() -> MemberMetadataValue:
    return MemberMetadataValue(
        member_id="m",
        group_instance_id=None,
        client_id="c",
        client_host="/h",
        rebalance_timeout=10,
        session_timeout=6,
        subscription=b"\x01",
        assignment=b"",
    )


def test_group_metadata_value_golden_v3():
    value = GroupMetadataValue("consumer", 1, "range", "m", 0, (_member(),))
    golden = h(
        "0003"  # version
        "0008 636f6e73756d6572"  # protocolType "consumer"
        "00000001"  # generation
        "0005 72616e6765"  # protocol "range"
        "0001 6d"  # leader "m"
        "0000000000000000"  # currentStateTimestamp
        "00000001"  # one member
        "0001 6d"  # memberId
        "ffff"  # groupInstanceId null
        "0001 63"  # clientId
        "0002 2f68"  # clientHost
        "0000000a"  # rebalanceTimeout
        "00000006"  # sessionTimeout
        "00000001 01"  # subscription
        "00000000"  # assignment
    )
    assert value.encode() == golden
    assert GroupMetadataValue.decode(golden) == value


def test_group_metadata_value_golden_v4_flexible():
    value = GroupMetadataValue("consumer", 1, "range", "m", 0, (_member(),))
    golden = h(
        "0004"
        "09 636f6e73756d6572"  # compact string
        "00000001"
        "06 72616e6765"
        "02 6d"
        "0000000000000000"
        "02"  # compact array: 1 member
        "02 6d"
        "00"  # compact nullable string: null
        "02 63"
        "03 2f68"
        "0000000a"
        "00000006"
        "02 01"  # compact bytes
        "01"  # compact bytes: empty
        "00"  # member tagged fields
        "00"  # top-level tagged fields
    )
    assert value.encode(4) == golden
    assert GroupMetadataValue.decode(golden) == value


def test_group_metadata_value_old_versions():
    member = MemberMetadataValue("m", "inst", "c", "/h", 10, 6, b"s", b"a")
    value = GroupMetadataValue("consumer", 2, None, None, 99, (member,))
    v0 = value.encode(0)
    # v0: no currentStateTimestamp, no groupInstanceId, no rebalanceTimeout
    assert v0 == h(
        "0000 0008 636f6e73756d6572 00000002 ffff ffff 00000001"
        "0001 6d 0001 63 0002 2f68 00000006 00000001 73 00000001 61"
    )
    # Kafka loads a v0 member with rebalanceTimeout = sessionTimeout
    assert GroupMetadataValue.decode(v0) == GroupMetadataValue(
        "consumer",
        2,
        None,
        None,
        -1,
        (MemberMetadataValue("m", None, "c", "/h", 6, 6, b"s", b"a"),),
    )
    assert GroupMetadataValue.decode(value.encode(1)).members[0].rebalance_timeout == 10
    assert GroupMetadataValue.decode(value.encode(2)).current_state_timestamp == 99
    assert GroupMetadataValue.decode(value.encode(3)) == value


def test_empty_group_value():
    value = GroupMetadataValue("", 3, None, None, 5, ())
    assert value.encode() == h("0003 0000 00000003 ffff ffff 0000000000000005 00000000")
    assert GroupMetadataValue.decode(value.encode()) == value


# --------------------------------------------------------------------------- compatibility


def test_higher_versions_read_as_v4_kip_915():
    data = bytearray(OffsetCommitValue(1, 2, "x", 3).encode(4))
    data[0:2] = struct.pack(">h", 9)
    assert OffsetCommitValue.decode(bytes(data)) == OffsetCommitValue(1, 2, "x", 3)
    gdata = bytearray(GroupMetadataValue("consumer", 1, "range", "m", 0, (_member(),)).encode(4))
    gdata[0:2] = struct.pack(">h", 7)
    assert GroupMetadataValue.decode(bytes(gdata)).members == (_member(),)


def test_unknown_tagged_fields_are_skipped():
    base = OffsetCommitValue(1, 2, "x", 3).encode(4)
    # replace the empty tag section by two tagged fields: tag 0 (2 bytes), tag 5 (0 bytes)
    data = base[:-1] + h("02 00 02 abcd 05 00")
    assert OffsetCommitValue.decode(data) == OffsetCommitValue(1, 2, "x", 3)


def test_non_ascii_strings():
    key = OffsetCommitKey("grüppe", "tópic-😀", 0)
    assert decode_key(key.encode()) == key
    assert key.encode()[2:4] == struct.pack(">h", len("grüppe".encode()))


# --------------------------------------------------------------------------- bad input


_GROUP = GroupMetadataValue("consumer", 1, "range", "m", 0, (_member(),))


@pytest.mark.parametrize(
    ("decoder", "data"),
    [
        (OffsetCommitValue.decode, OffsetCommitValue(1, 2, "meta", 3).encode(3)),
        (OffsetCommitValue.decode, OffsetCommitValue(1, 2, "meta", 3).encode(4)),
        (GroupMetadataValue.decode, _GROUP.encode(3)),
        (GroupMetadataValue.decode, _GROUP.encode(4)),
    ],
)
def test_every_truncation_is_rejected(decoder, data):
    decoder(data)
    for n in range(len(data)):
        with pytest.raises(LocalProtocolError):
            decoder(data[:n])


def test_truncated_keys_and_bad_utf8():
    key = OffsetCommitKey("group", "topic", 1).encode()
    for n in range(len(key)):
        with pytest.raises(LocalProtocolError):
            decode_key(key[:n])
    with pytest.raises(LocalProtocolError):
        decode_key(h("0002 0002 c328"))  # invalid UTF-8
    with pytest.raises(LocalProtocolError):
        decode_key(h("0001 ffff 0001 74 00000000"))  # null group


def test_negative_versions_and_lengths():
    with pytest.raises(LocalProtocolError):
        OffsetCommitValue.decode(h("ffff 00"))
    with pytest.raises(LocalProtocolError):
        GroupMetadataValue.decode(h("0003 0000 00000001 ffff ffff 0000000000000000 ffffffff"))


def test_encoding_unknown_versions_is_a_caller_bug():
    with pytest.raises(ValueError):
        OffsetCommitValue(1).encode(5)
    with pytest.raises(ValueError):
        GroupMetadataValue("", 0, None, None).encode(-1)


# --------------------------------------------------------------------------- round trips

texts = st.text(max_size=20)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)


@FAST
@given(texts, texts, int32s)
def test_key_round_trip(group, topic, partition):
    assert decode_key(OffsetCommitKey(group, topic, partition).encode()) == OffsetCommitKey(
        group, topic, partition
    )
    assert decode_key(GroupMetadataKey(group).encode()) == GroupMetadataKey(group)


@FAST
@given(int64s, int32s, texts, int64s, int64s, st.integers(0, 4))
def test_offset_commit_value_round_trip(offset, epoch, metadata, ts, expire, version):
    value = OffsetCommitValue(offset, epoch, metadata, ts, expire)
    expected = OffsetCommitValue(
        offset, epoch if version >= 3 else -1, metadata, ts, expire if version == 1 else -1
    )
    assert OffsetCommitValue.decode(value.encode(version)) == expected


members = st.builds(
    MemberMetadataValue,
    texts,
    st.none() | texts,
    texts,
    texts,
    int32s,
    int32s,
    st.binary(max_size=64),
    st.binary(max_size=64),
)


@FAST
@given(
    texts,
    int32s,
    st.none() | texts,
    st.none() | texts,
    int64s,
    st.lists(members, max_size=4).map(tuple),
    st.integers(0, 4),
)
def test_group_metadata_value_round_trip(ptype, generation, protocol, leader, ts, ms, version):
    value = GroupMetadataValue(ptype, generation, protocol, leader, ts, ms)
    expected_members = tuple(
        MemberMetadataValue(
            m.member_id,
            m.group_instance_id if version >= 3 else None,
            m.client_id,
            m.client_host,
            m.rebalance_timeout if version >= 1 else m.session_timeout,
            m.session_timeout,
            m.subscription,
            m.assignment,
        )
        for m in ms
    )
    expected = GroupMetadataValue(
        ptype, generation, protocol, leader, ts if version >= 2 else -1, expected_members
    )
    data = value.encode(version)
    assert GroupMetadataValue.decode(data) == expected
    # trailing bytes are ignored, as Kafka's readers do
    assert GroupMetadataValue.decode(data + b"\x00junk") == expected
