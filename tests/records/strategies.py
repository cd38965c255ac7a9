"""Hypothesis strategies and helpers shared by the record codec tests."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tierlog.records import CURRENT_MAGIC, RECORD_BATCH_OVERHEAD, crc32c

# The machine is shared: no deadline, and few enough examples to keep the suite fast.
# Batches are large by design (many records, big values): data_too_large is expected, not a smell.
FAST = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

timestamps = st.integers(min_value=-1, max_value=2**45)
payloads = st.none() | st.binary(max_size=200)
header_values = st.none() | st.binary(max_size=16)
headers = st.lists(st.tuples(st.text(max_size=8), header_values), max_size=3).map(tuple)

#: (timestamp, key, value, headers) tuples, as RecordBatchBuilder.append takes them.
record_tuples = st.lists(
    st.tuples(timestamps, payloads, payloads, headers), min_size=1, max_size=25
)

#: Compressible values so that codecs that fall back to "none" (kafka-python, aiokafka)
#: really compress.
compressible_payloads = st.none() | st.builds(
    lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=8), st.integers(8, 40)
)
compressible_record_tuples = st.lists(
    st.tuples(timestamps, compressible_payloads, compressible_payloads, headers),
    min_size=1,
    max_size=25,
)

_HEADER = struct.Struct(">qiibIhiqqqhii")


def raw_batch(
    records_section: bytes,
    *,
    attributes: int = 0,
    records_count: int = 1,
    last_offset_delta: int = 0,
    base_offset: int = 0,
    base_timestamp: int = 0,
    max_timestamp: int = 0,
) -> bytes:
    """A batch around an arbitrary records section, with a correct CRC-32C.

    For feeding the decoder records that the builder would never write.
    """
    header = _HEADER.pack(
        base_offset,
        RECORD_BATCH_OVERHEAD - 12 + len(records_section),
        -1,
        CURRENT_MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        -1,
        -1,
        -1,
        records_count,
    )
    crc = crc32c(header[21:] + records_section)
    return header[:17] + crc.to_bytes(4, "big") + header[21:] + records_section
