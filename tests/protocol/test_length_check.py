"""The length check that runs before kio's native parser (protocol/length_check.py).

Every advertised request class and the responses the Spark source reads: kio's own encoding
of a random value passes the check and ends exactly where kio's parser ends; every truncation
fails it. A count or length larger than the frame is refused (kio's parser would allocate for
it and abort the process).
"""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.schema.metadata.v12.response import MetadataResponse
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from tierlog.errors import RemoteProtocolError
from tierlog.protocol import ADVERTISED, ServerConnection, request_class
from tierlog.protocol._writer import BIG
from tierlog.protocol.length_check import check_lengths

st.register_type_strategy(Records, st.binary(max_size=3 * BIG).map(Records))  # as test_writer

_CLASSES = sorted(
    {request_class(k, v) for k, (lo, hi) in ADVERTISED.items() for v in range(lo, hi + 1)}
    # the responses the Spark source's Fetch client reads (spark/fetch_client.py)
    | {FetchResponse, ListOffsetsResponse, MetadataResponse},
    key=lambda c: (c.__module__, c.__qualname__),
)


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda c: c.__module__.split("schema.")[-1])
def test_valid_bodies_pass_and_end_where_kio_ends(cls: type[Any]) -> None:
    @settings(
        max_examples=10,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.from_type(cls), st.data())
    def check(obj: Any, data: st.DataObject) -> None:
        out = io.BytesIO()
        try:
            entity_writer(cls)(out, obj)
        except Exception:
            return  # kio cannot encode this value (e.g. a lone surrogate)
        buf = out.getvalue()
        assert check_lengths(cls, buf, 0, len(buf)) == len(buf)
        try:
            _, kio_end = entity_reader(cls)(buf, 0)
        except ValueError as e:  # a value kio writes but cannot read back
            assert "overflow" in str(e), e  # (a timedelta beyond datetime's range)
        else:
            assert kio_end == len(buf)
        if buf:
            cut = data.draw(st.integers(0, len(buf) - 1))
            with pytest.raises(ValueError):
                check_lengths(cls, buf[:cut], 0, cut)

    check()


def test_a_huge_array_count_is_refused_before_kio_parses_it() -> None:
    # The frame the fuzz test found: Metadata v12 whose topics count (a compact array) says
    # 24,154,976,851 topics. kio's parser alone (pinned 0.6.5) allocates 8 bytes per element
    # up front, "memory allocation of 193239814808 bytes failed", and aborts the process.
    header = struct.pack(">hhih", 3, 12, 7, 4) + b"test" + b"\x00"
    body = bytes.fromhex("d4e4fefd59") + b"\x01\x00\x00"  # uvarint 24,154,976,852 = count + 1
    frame = struct.pack(">i", len(header) + len(body)) + header + body
    conn = ServerConnection()
    conn.receive_data(frame)
    with pytest.raises(RemoteProtocolError, match="an array of 24154976851 elements, but only 3"):
        conn.next_event()


def test_a_string_longer_than_the_frame_is_refused() -> None:
    cls = request_class(3, 4)  # Metadata v4 (legacy encodings): topics array of strings
    body = struct.pack(">i", 1) + struct.pack(">h", 30000) + b"x" * 10 + b"\x01"
    with pytest.raises(ValueError, match="length of 30000 bytes"):
        check_lengths(cls, body, 0, len(body))
