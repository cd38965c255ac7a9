"""The ``__transaction_state`` key and value codecs: golden bytes, every version, bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.coordinator.transaction.transaction_log import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from tierlog.coordinator.transaction.transaction_metadata import TxnTransitMetadata
from tierlog.coordinator.transaction.transaction_state import TransactionState
from tierlog.errors import LocalProtocolError

S = TransactionState


def transit(state=S.ONGOING, partitions=frozenset({("t", 1), ("t", 0)}), **kw):
    fields = {
        "producer_id": 1000,
        "last_producer_id": -1,
        "producer_epoch": 2,
        "last_producer_epoch": -1,
        "txn_timeout_ms": 60_000,
        "txn_state": state,
        "topic_partitions": partitions,
        "txn_start_timestamp": 1_699_999_999_000,
        "txn_last_update_timestamp": 1_700_000_000_000,
    }
    fields.update(kw)
    return TxnTransitMetadata(**fields)


# Kafka's TransactionLogKey v0 / TransactionLogValue v0, laid out field by field.
GOLDEN_KEY = bytes.fromhex("00000005") + b"txn-1"
GOLDEN_VALUE = (
    bytes.fromhex("0000")  # version 0
    + struct.pack(">qhib", 1000, 2, 60_000, 1)  # producer id, epoch, timeout, Ongoing
    + struct.pack(">i", 1)  # one topic
    + struct.pack(">h", 1)
    + b"t"
    + struct.pack(">iii", 2, 0, 1)  # partitions [0, 1]
    + struct.pack(">qq", 1_700_000_000_000, 1_699_999_999_000)  # last update, start
)


def test_golden_key():
    assert encode_key("txn-1") == GOLDEN_KEY
    assert decode_key(GOLDEN_KEY) == "txn-1"


def test_golden_value():
    assert encode_value(transit()) == GOLDEN_VALUE
    v = decode_value(GOLDEN_VALUE)
    assert v.transaction_status is S.ONGOING
    assert v.transaction_partitions == {("t", 0), ("t", 1)}
    assert v.to_transit() == transit()


def test_empty_has_null_partitions():
    data = encode_value(transit(S.EMPTY, frozenset(), txn_start_timestamp=-1))
    # version, pid, epoch, timeout, status, then a null array (-1)
    assert data[2 + 8 + 2 + 4 + 1 :][:4] == struct.pack(">i", -1)
    assert decode_value(data).transaction_partitions == frozenset()


def test_v1_flexible_round_trip_and_tags():
    t = transit(last_producer_id=999)
    data = encode_value(t, version=1)
    v = decode_value(data)
    assert v.previous_producer_id == 999
    assert v.to_transit() == t
    # A newer version with an unknown tagged field reads as v1 (KIP-915).
    newer = bytearray(data)
    newer[0:2] = struct.pack(">h", 3)
    assert newer[-1 - 1 - 1 - 8] == 1  # one tag
    assert decode_value(bytes(newer)).to_transit() == t


def test_never_written_states():
    with pytest.raises(ValueError, match="never written"):
        encode_value(transit(S.PREPARE_EPOCH_FENCE))
    with pytest.raises(ValueError, match="never written"):
        encode_value(transit(S.DEAD, frozenset()))
    with pytest.raises(ValueError, match="no partitions"):
        encode_value(transit(S.EMPTY))
    with pytest.raises(ValueError, match="version"):
        encode_value(transit(), version=2)


def test_bad_input_is_a_clear_error():
    with pytest.raises(LocalProtocolError, match="too short"):
        decode_key(b"\x00")
    assert decode_key(b"\x00\x01\x00\x00") is None  # not a transaction key
    with pytest.raises(LocalProtocolError, match="truncated"):
        decode_key(GOLDEN_KEY[:-1])
    for cut in range(2, len(GOLDEN_VALUE)):
        with pytest.raises(LocalProtocolError):
            decode_value(GOLDEN_VALUE[:cut])
    bad_status = bytearray(GOLDEN_VALUE)
    bad_status[16] = 9
    with pytest.raises(LocalProtocolError, match="unknown transaction status 9"):
        decode_value(bytes(bad_status))
    with pytest.raises(LocalProtocolError, match="negative version"):
        decode_value(b"\xff\xff" + GOLDEN_VALUE[2:])


written_states = st.sampled_from(
    [S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT]
)
partitions = st.frozensets(
    st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=10
)


@given(
    state=written_states,
    parts=partitions,
    pid=st.integers(0, 2**63 - 1),
    epoch=st.integers(-1, 2**15 - 1),
    timeout=st.integers(1, 2**31 - 1),
    ts=st.integers(-1, 2**62),
    version=st.sampled_from([0, 1]),
)
def test_round_trip(state, parts, pid, epoch, timeout, ts, version):
    if state.is_complete:
        parts = frozenset()
    t = transit(
        state,
        parts,
        producer_id=pid,
        producer_epoch=epoch,
        txn_timeout_ms=timeout,
        txn_start_timestamp=ts,
        txn_last_update_timestamp=ts,
    )
    assert decode_value(encode_value(t, version)).to_transit() == t


@given(st.text(max_size=200))
def test_key_round_trip(txn_id):
    assert decode_key(encode_key(txn_id)) == txn_id


@given(st.binary(max_size=80))
def test_garbage_never_crashes(data):
    try:
        decode_value(data)
    except LocalProtocolError:
        pass
