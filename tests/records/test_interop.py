"""Interop with real client codecs: kafka-python 3.0 (pure Python) and aiokafka 0.14 (C).

Batches each client builds must decode identically with ours, and ours must decode (CRC
included) in theirs. kafka-python imports python-snappy, lz4 and zstandard for those codecs,
none of which is installed here, so it covers none and gzip only; aiokafka goes through cramjam
and covers all five, writing snappy in the xerial framing as the Java client does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests import real_parts
from tierlog.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    Record,
    RecordBatchBuilder,
    decode_records,
    validate_batch,
)
from tierlog.records.compression import XERIAL_MAGIC

from .strategies import FAST, compressible_record_tuples, record_tuples

with warnings.catch_warnings():
    # kafka-python 3.0 uses importlib.resources.read_text at import time.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import codec as kafka_codec
    from kafka.record import default_records as kafka_records

from aiokafka.record import default_records as aiokafka_records

ALL_CODECS = [
    COMPRESSION_NONE,
    COMPRESSION_GZIP,
    COMPRESSION_SNAPPY,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
]
_KAFKA_PYTHON_HAS = {
    COMPRESSION_NONE: True,
    COMPRESSION_GZIP: kafka_codec.has_gzip(),
    COMPRESSION_SNAPPY: kafka_codec.has_snappy(),
    COMPRESSION_LZ4: kafka_codec.has_lz4(),
    COMPRESSION_ZSTD: kafka_codec.has_zstd(),
}
_KAFKA_PYTHON_NEEDS = {
    COMPRESSION_SNAPPY: "python-snappy",
    COMPRESSION_LZ4: "lz4",
    COMPRESSION_ZSTD: "zstandard",
}

CLIENTS: dict[str, tuple[Any, Any]] = {
    "kafka-python": (kafka_records.DefaultRecordBatchBuilder, kafka_records.DefaultRecordBatch),
    "aiokafka": (aiokafka_records.DefaultRecordBatchBuilder, aiokafka_records.DefaultRecordBatch),
}
Items = list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]]


def require_codec(client: str, codec: int) -> None:
    if client == "kafka-python" and not _KAFKA_PYTHON_HAS[codec]:
        real_parts.missing(
            f"kafka-python's {_KAFKA_PYTHON_NEEDS[codec]} codec",
            "kafka-python needs it for this codec (the test extra installs it)",
        )


def their_batch(client: str, codec: int, items: Items, **producer: int) -> bytes:
    builder_cls, _ = CLIENTS[client]
    builder = builder_cls(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=2**30,
    )
    for offset, (ts, key, value, hdrs) in enumerate(items):
        assert builder.append(offset, ts, key, value, list(hdrs)) is not None
    return bytes(builder.build())


def their_decode(client: str, batch: bytes) -> list[Record]:
    _, batch_cls = CLIENTS[client]
    parsed = batch_cls(batch)
    assert parsed.validate_crc()
    return [
        Record(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
        for r in parsed
    ]


def ours(codec: int, items: Items, **kw: Any) -> bytes:
    builder = RecordBatchBuilder(codec, **kw)
    for item in items:
        builder.append(*item)
    return builder.build()


def expected(items: Items) -> list[Record]:
    return [Record(i, ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(items)]


client_param = pytest.mark.parametrize("client", list(CLIENTS))
codec_param = pytest.mark.parametrize("codec", ALL_CODECS)


@client_param
@codec_param
@FAST
@given(items=st.one_of(record_tuples, compressible_record_tuples))
def test_their_batches_decode_with_ours(client: str, codec: int, items: Items) -> None:
    require_codec(client, codec)
    batch = their_batch(client, codec, items)
    header = validate_batch(batch)
    # Clients send uncompressed when compressing does not pay.
    assert header.compression_type in (codec, COMPRESSION_NONE)
    decoded = decode_records(batch)
    assert decoded == their_decode(client, batch)
    if client == "aiokafka" and any(ts == -1 for ts, *_ in items):
        # aiokafka's C builder takes timestamp -1 for "no first timestamp yet" and writes
        # wrong deltas (its own decoder reads them back wrong too); its Python twin does not.
        return
    assert decoded == expected(items)


@client_param
@codec_param
@FAST
@given(items=st.one_of(record_tuples, compressible_record_tuples))
def test_our_batches_decode_with_theirs(client: str, codec: int, items: Items) -> None:
    require_codec(client, codec)
    batch = ours(codec, items, producer_id=9, producer_epoch=1, base_sequence=0)
    assert their_decode(client, batch) == expected(items)


@client_param
@FAST
@given(items=record_tuples)
def test_uncompressed_bytes_are_identical(client: str, items: Items) -> None:
    """Apart from partitionLeaderEpoch (kafka-python writes 0, aiokafka -1) the layout is fixed."""
    # aiokafka's C builder mishandles timestamp -1, see test_their_batches_decode_with_ours.
    assume(client != "aiokafka" or all(ts != -1 for ts, *_ in items))
    producer = {"producer_id": 123, "producer_epoch": 4, "base_sequence": 17}
    epoch = 0 if client == "kafka-python" else -1
    assert their_batch(client, COMPRESSION_NONE, items, **producer) == ours(
        COMPRESSION_NONE, items, partition_leader_epoch=epoch, **producer
    )


@client_param
@codec_param
def test_compressed_batches_really_compressed(client: str, codec: int) -> None:
    """A fixed compressible batch, so every codec path is taken at least once."""
    require_codec(client, codec)
    items: Items = [
        (1_000 + i, b"key-%d" % (i % 7), b"value " * 50, (("h", b"x"),)) for i in range(50)
    ]
    batch = their_batch(client, codec, items)
    assert validate_batch(batch).compression_type == codec
    if client == "aiokafka" and codec == COMPRESSION_SNAPPY:
        assert batch[61:].startswith(XERIAL_MAGIC)  # the Java client's framing
    assert decode_records(batch) == expected(items)
    assert their_decode(client, ours(codec, items)) == expected(items)


@pytest.mark.parametrize(
    ("name", "decode"),
    [
        ("kafka-python", lambda b: list(kafka_records.DefaultRecordBatch(b))),
        ("aiokafka", lambda b: list(aiokafka_records.DefaultRecordBatch(b))),
    ],
)
def test_control_batches_decode_in_theirs(name: str, decode: Callable[[bytes], list[Any]]) -> None:
    from tierlog.records import CONTROL_TYPE_COMMIT, end_transaction_marker

    key, value = end_transaction_marker(CONTROL_TYPE_COMMIT, 3)
    builder = RecordBatchBuilder(
        producer_id=1, producer_epoch=0, is_transactional=True, is_control=True
    )
    builder.append(5, key, value)
    (record,) = decode(builder.build())
    assert (record.key, record.value) == (key, value)
