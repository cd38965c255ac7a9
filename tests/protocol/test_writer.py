"""The generated response writer against kio's entity_writer (the reference), byte for byte."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from tierlog.protocol import ADVERTISED, request_class, response_class
from tierlog.protocol._writer import BIG, compile_writer, encode_entities, uvarint
from tierlog.server.handlers.metadata import _array_entity

st.register_type_strategy(Records, st.binary(max_size=3 * BIG).map(Records))

_CLASSES = sorted(
    {
        cls
        for k, (lo, hi) in ADVERTISED.items()
        for v in range(lo, hi + 1)
        for cls in (response_class(k, v), request_class(k, v))
    },
    key=lambda c: (c.__module__, c.__qualname__),
)


def write_both(cls: type[Any], obj: Any) -> tuple[Any, Any]:
    """(kio bytes or its exception type, ours)."""
    try:
        b = io.BytesIO()
        entity_writer(cls)(b, obj)
        ref: Any = b.getvalue()
    except Exception as e:
        ref = type(e)
    try:
        parts: list[Any] = []
        last = compile_writer(cls)(obj, bytearray(), parts)
        mine: Any = b"".join([*parts, last])
    except Exception as e:
        mine = type(e)
    return ref, mine


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda c: f"{c.__module__.split('schema.')[-1]}")
def test_same_bytes_as_kio(cls: type[Any]) -> None:
    @settings(
        max_examples=10,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.from_type(cls))
    def check(obj: Any) -> None:
        ref, mine = write_both(cls, obj)
        if isinstance(ref, bytes):
            assert mine == ref
        else:  # kio refuses the value (e.g. a lone surrogate): so must we
            assert not isinstance(mine, bytes)

    check()


def test_large_records_are_passed_by_reference() -> None:
    import datetime

    from kio.schema.errors import ErrorCode
    from kio.schema.fetch.v12 import response as f

    big, small = bytes(range(256)) * (BIG // 256), b"tiny"
    resp = f.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            f.FetchableTopicResponse(
                topic="t",
                partitions=tuple(
                    f.PartitionData(
                        partition_index=i,
                        error_code=ErrorCode.none,
                        high_watermark=1,
                        last_stable_offset=1,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=r,
                    )
                    for i, r in enumerate([big, small, big])
                ),
            ),
        ),
    )
    parts: list[Any] = []
    last = compile_writer(type(resp))(resp, bytearray(), parts)
    assert [p is big for p in parts] == [False, True, False, True]
    assert b"".join([*parts, last]) == write_both(type(resp), resp)[0]


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**31 - 1, b"\xff\xff\xff\xff\x07"),
    ],
)
def test_uvarint(value: int, encoded: bytes) -> None:
    assert uvarint(value) == encoded


_METADATA_CLASSES = [response_class(3, v) for v in range(ADVERTISED[3][0], ADVERTISED[3][1] + 1)]


@pytest.mark.parametrize("cls", _METADATA_CLASSES, ids=lambda c: c.__module__.split(".")[-2])
def test_encoded_entities_write_the_same_bytes(cls: type[Any]) -> None:
    """A topic's partitions as EncodedEntities (cached by the Metadata handler) are written
    as kio writes the entities themselves."""

    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.from_type(cls))
    def check(obj: Any) -> None:
        topics = []
        for t in obj.topics:
            part_cls = _array_entity(type(t), "partitions")
            encoded = encode_entities(part_cls, t.partitions)
            assert encoded == t.partitions
            topics.append(dataclasses.replace(t, partitions=encoded))
        ref, mine = write_both(cls, dataclasses.replace(obj, topics=tuple(topics)))
        if isinstance(ref, bytes):
            assert mine == ref
        else:
            assert not isinstance(mine, bytes)

    check()
