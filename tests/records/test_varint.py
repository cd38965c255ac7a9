"""Kafka's ZigZag varints: golden vectors (ByteUtilsTest), round trips, malformed input."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.errors import CorruptRecordError
from tierlog.records import (
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
)
from tierlog.records.varint import append_unsigned_varint, append_varint, append_varlong

from .strategies import FAST

with warnings.catch_warnings():
    # kafka-python 3.0 uses importlib.resources.read_text at import time.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import util as kafka_util

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT32 = st.integers(0, 2**32 - 1)

# Kafka's ByteUtilsTest and the protocol guide.
VARINT_GOLDEN = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (300, "d804"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
]
VARLONG_ONLY_GOLDEN = [
    (2**31, "8080808010"),
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
]
UNSIGNED_GOLDEN = [
    (0, "00"),
    (1, "01"),
    (127, "7f"),
    (128, "8001"),
    (300, "ac02"),
    (16383, "ff7f"),
    (16384, "808001"),
    (2**31 - 1, "ffffffff07"),
    (2**32 - 1, "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "hex_"), VARINT_GOLDEN)
def test_varint_golden(value: int, hex_: str) -> None:
    raw = bytes.fromhex(hex_)
    assert encode_varint(value) == raw
    assert encode_varlong(value) == raw  # same bytes for values that fit 32 bits
    assert decode_varint(raw, 0) == (value, len(raw))
    assert decode_varlong(raw, 0) == (value, len(raw))
    assert size_of_varint(value) == len(raw) == size_of_varlong(value)


@pytest.mark.parametrize(("value", "hex_"), VARLONG_ONLY_GOLDEN)
def test_varlong_golden(value: int, hex_: str) -> None:
    raw = bytes.fromhex(hex_)
    assert encode_varlong(value) == raw
    assert decode_varlong(raw, 0) == (value, len(raw))
    assert size_of_varlong(value) == len(raw)


@pytest.mark.parametrize(("value", "hex_"), UNSIGNED_GOLDEN)
def test_unsigned_varint_golden(value: int, hex_: str) -> None:
    raw = bytes.fromhex(hex_)
    assert encode_unsigned_varint(value) == raw
    assert decode_unsigned_varint(raw, 0) == (value, len(raw))
    assert size_of_unsigned_varint(value) == len(raw)


@FAST
@given(INT32, st.binary(max_size=3), st.binary(max_size=3))
def test_varint_round_trip(value: int, prefix: bytes, suffix: bytes) -> None:
    raw = encode_varint(value)
    assert len(raw) == size_of_varint(value)
    buf = prefix + raw + suffix
    for view in (buf, bytearray(buf), memoryview(buf)):
        assert decode_varint(view, len(prefix)) == (value, len(prefix) + len(raw))
    out = bytearray(prefix)
    append_varint(out, value)
    assert bytes(out) == prefix + raw


@FAST
@given(INT64, st.binary(max_size=3))
def test_varlong_round_trip(value: int, prefix: bytes) -> None:
    raw = encode_varlong(value)
    assert len(raw) == size_of_varlong(value)
    assert decode_varlong(prefix + raw + b"\x80", len(prefix)) == (value, len(prefix) + len(raw))
    out = bytearray()
    append_varlong(out, value)
    assert bytes(out) == raw


@FAST
@given(UINT32)
def test_unsigned_varint_round_trip(value: int) -> None:
    raw = encode_unsigned_varint(value)
    assert len(raw) == size_of_unsigned_varint(value)
    assert decode_unsigned_varint(memoryview(raw)) == (value, len(raw))
    out = bytearray()
    append_unsigned_varint(out, value)
    assert bytes(out) == raw


@FAST
@given(INT64)
def test_matches_kafka_python(value: int) -> None:
    """kafka-python's encoder is an independent implementation of the same varlong."""
    out = bytearray()
    kafka_util.encode_varint(value, out.append)
    assert bytes(out) == encode_varlong(value)
    assert kafka_util.decode_varint(bytes(out), 0) == decode_varlong(bytes(out), 0)


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1])
def test_encode_varint_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_varint(value)
    with pytest.raises(ValueError):
        append_varint(bytearray(), value)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1])
def test_encode_varlong_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(value)


@pytest.mark.parametrize("value", [-1, 2**32])
def test_encode_unsigned_out_of_range(value: int) -> None:
    with pytest.raises(ValueError):
        encode_unsigned_varint(value)


@pytest.mark.parametrize(
    ("decode", "value"),
    [
        (decode_varint, 2**31 - 1),
        (decode_varint, -300),
        (decode_varlong, 2**63 - 1),
        (decode_varlong, -(2**40)),
        (decode_unsigned_varint, 2**32 - 1),
    ],
)
def test_every_truncation_raises(decode, value) -> None:  # type: ignore[no-untyped-def]
    encode = {
        decode_varint: encode_varint,
        decode_varlong: encode_varlong,
        decode_unsigned_varint: encode_unsigned_varint,
    }[decode]
    raw = encode(value)
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError, match="truncated"):
            decode(raw[:cut], 0)
    with pytest.raises(CorruptRecordError):
        decode(raw, len(raw))  # position at the end


@pytest.mark.parametrize(
    "raw",
    [
        "ffffffff1f",  # 5th byte overflows 32 bits
        "ffffffff8f01",  # continuation bit on the 5th byte: Kafka's "Varint is too long"
        "8080808080808001",
    ],
)
def test_varint_too_long(raw: str) -> None:
    for decode in (decode_varint, decode_unsigned_varint):
        with pytest.raises(CorruptRecordError, match="too long"):
            decode(bytes.fromhex(raw), 0)


@pytest.mark.parametrize(
    "raw",
    [
        "ffffffffffffffffff02",  # 10th byte overflows 64 bits
        "ffffffffffffffffff8101",  # 11 bytes
        "80" * 10 + "00",
    ],
)
def test_varlong_too_long(raw: str) -> None:
    with pytest.raises(CorruptRecordError, match=r"64 bits|10 bytes"):
        decode_varlong(bytes.fromhex(raw), 0)


def test_non_minimal_encodings_are_accepted() -> None:
    """Java accepts padded encodings (0x80 0x00 == 0); so do we, within the length limit."""
    assert decode_varint(b"\x80\x00", 0) == (0, 2)
    assert decode_varlong(b"\x81\x80\x00", 0) == (-1, 3)
    assert decode_unsigned_varint(b"\xff\x80\x80\x80\x00", 0) == (127, 5)
