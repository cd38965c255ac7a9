"""The generated response writer against kio's entity_writer (the reference), byte for byte."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from tierlog.protocol import ADVERTISED, request_class, response_class
from tierlog.protocol._writer import BIG, compile_writer, uvarint

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
