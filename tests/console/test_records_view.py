"""The message browser's decoding: the records at or after an offset, bytes as text or hex."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierlog.console.records_view import MAX_SHOWN_BYTES, decode_messages, show_bytes
from tierlog.records import COMPRESSION_GZIP, build_batch, end_transaction_marker


def _batch(base: int, n: int, compression: int = 0, epoch: int = 3) -> bytes:
    return build_batch(
        [(1000 + base + i, f"k{base + i}".encode(), f"v{base + i}".encode(), [("h", b"\x00")])
         for i in range(n)],
        compression,
        base_offset=base,
        partition_leader_epoch=epoch,
    )  # fmt: skip


def test_records_from_an_offset_inside_a_batch_up_to_the_limit():
    data = _batch(0, 5) + _batch(5, 5, COMPRESSION_GZIP) + _batch(10, 5)
    rows = decode_messages(data, 3, 4)
    assert [r.offset for r in rows] == [3, 4, 5, 6]
    assert [r.key.text for r in rows] == ["k3", "k4", "k5", "k6"]
    assert rows[2].compression == "gzip" and rows[0].compression == "none"
    assert rows[0].timestamp == 1003 and rows[0].timestamp_type == "CreateTime"
    assert rows[0].leader_epoch == 3
    assert [(k, v.text, v.encoding) for k, v in rows[0].headers] == [("h", "00", "hex")]


def test_a_trailing_partial_batch_is_ignored_and_control_batches_skipped():
    key, value = end_transaction_marker(1, 0)
    control = build_batch([(5, key, value)], base_offset=2, is_control=True, is_transactional=True)
    data = _batch(0, 2) + control + _batch(3, 2)
    assert [r.offset for r in decode_messages(data, 0, 10)] == [0, 1, 3, 4]
    cut = data + _batch(5, 3)[:-7]
    assert [r.offset for r in decode_messages(cut, 0, 10)] == [0, 1, 3, 4]


def test_null_and_text_and_binary():
    assert show_bytes(None).encoding == "null"
    assert (show_bytes(b"h\xc3\xa9llo\n").text, show_bytes(b"h\xc3\xa9llo\n").encoding) == (
        "héllo\n",
        "utf-8",
    )
    assert show_bytes(b"\x00\x01").encoding == "hex"  # control characters: not text
    big = show_bytes(b"x" * (MAX_SHOWN_BYTES + 10))
    assert big.truncated and big.length == MAX_SHOWN_BYTES + 10
    assert len(big.text) == MAX_SHOWN_BYTES


@given(st.binary(max_size=MAX_SHOWN_BYTES + 50))
def test_shown_bytes_say_exactly_what_was_there(data):
    s = show_bytes(data)
    assert s.length == len(data)
    assert s.truncated == (len(data) > MAX_SHOWN_BYTES)
    shown = s.text.encode() if s.encoding == "utf-8" else bytes.fromhex(s.text)
    if s.truncated:
        assert data.startswith(shown) and len(shown) >= MAX_SHOWN_BYTES - 3
    else:
        assert shown == data
