"""Consumer group record formats (types 3-8): golden bytes from Kafka's schemas, round trips,
unknown tagged fields skipped, bad input."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.coordinator.group.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataValue,
    decode_assignment_value,
    decode_consumer_group_key,
    decode_epoch_value,
    encode_assignment_value,
    encode_epoch_value,
)
from tierlog.coordinator.group.group_records import decode_key
from tierlog.errors import LocalProtocolError

U = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


def test_keys_golden():
    #                                  type len  g    len  m
    assert ConsumerGroupKey(5, "g", "m").encode() == h("0005 0001 67 0001 6d")
    assert ConsumerGroupKey(3, "g").encode() == h("0003 0001 67")
    for key in (ConsumerGroupKey(3, "g"), ConsumerGroupKey(8, "g", "m")):
        assert decode_consumer_group_key(key.encode()) == key
        assert decode_key(key.encode()) is None  # not a classic record
    assert decode_consumer_group_key(h("0009 0001 67")) is None  # share groups etc.
    with pytest.raises(ValueError, match="no member id"):
        ConsumerGroupKey(6, "g", "m").encode()
    with pytest.raises(ValueError, match="not a consumer group key"):
        ConsumerGroupKey(2, "g").encode()
    with pytest.raises(LocalProtocolError, match="truncated"):
        decode_consumer_group_key(h("0005 0001 67 0005 6d"))


def test_epoch_value_golden_and_tagged_fields_skipped():
    #                               version epoch    no tags
    assert encode_epoch_value(7) == h("0000 00000007 00")
    # Kafka 4.1 writes MetadataHash as tag 0 (8 bytes): skipped
    assert decode_epoch_value(h("0000 00000007 01 00 08 0102030405060708")) == 7
    with pytest.raises(LocalProtocolError):
        decode_epoch_value(h("0000 0000"))


def test_assignment_value_golden():
    data = encode_assignment_value({U: frozenset({2, 0})})
    #   version  1 topic  uuid                              2 partitions  0         2      tags tags
    assert data == h("0000 02 00112233445566778899aabbccddeeff 03 00000000 00000002 00 00")
    assert decode_assignment_value(data) == {U: frozenset({0, 2})}


def test_member_metadata_value_golden():
    v = ConsumerGroupMemberMetadataValue(None, None, "c", "h", ("t",), None, 300, "uniform")
    data = v.encode()
    assert data == h(
        "0000"  # version
        "00 00"  # instance id, rack id: null
        "02 63 02 68"  # client id "c", client host "h"
        "02 02 74"  # [ "t" ]
        "00"  # regex: null
        "0000012c"  # rebalance timeout 300
        "08 756e69666f726d"  # "uniform"
        "00"  # tagged fields
    )
    assert ConsumerGroupMemberMetadataValue.decode(data) == v


partitions = st.dictionaries(
    st.uuids(), st.frozensets(st.integers(0, 1000), min_size=1, max_size=5), max_size=3
)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(-2, 2**31 - 1),
    st.integers(-2, 2**31 - 1),
    st.sampled_from([0, 1, 2, 127]),
    partitions,
    partitions,
)
def test_current_assignment_round_trips(epoch, prev, state, assigned, pending):
    v = ConsumerGroupCurrentMemberAssignmentValue(epoch, prev, state, assigned, pending)
    assert ConsumerGroupCurrentMemberAssignmentValue.decode(v.encode()) == v
