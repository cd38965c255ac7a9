"""The read path's sans-IO pieces (byte range, batch slicing and checks) and the bounded
reader pool."""

from __future__ import annotations

import threading
import uuid

import pytest

from tierlog.errors import RemoteStorageError
from tierlog.records.default_records import build_batch
from tierlog.records.record_batch import iter_headers, set_base_offset
from tierlog.tiered import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.tiered.remote_log_reader import RemoteLogReader, read_range, slice_batches

TP = TopicIdPartition(uuid.UUID(int=7), "t", 0)


def segment(n_batches: int = 5, records: int = 3, base: int = 100) -> tuple[bytes, list[int]]:
    """Batches of ``records`` records from offset ``base``; returns data and batch positions."""
    out = bytearray()
    positions = []
    for i in range(n_batches):
        batch = bytearray(build_batch([(1000 + j, b"k", b"v" * 30) for j in range(records)]))
        set_base_offset(batch, 0, base + i * records)
        positions.append(len(out))
        out += batch
    return bytes(out), positions


def md_for(data: bytes, base: int = 100, end: int = 114) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP, uuid.uuid4()), base, end, 0, 0, 0, len(data), {0: base}
    )


def test_read_range() -> None:
    # no index entry after the floor: the rest of the segment
    assert read_range(100, None, None, 5000, 10) == (100, 5000)
    # max_bytes past the next entry, and the batch in the next append always whole
    assert read_range(100, 400, 900, 5000, 10) == (100, 900)
    assert read_range(100, 400, 900, 5000, 2000) == (100, 2400)
    assert read_range(100, 400, None, 5000, 10) == (100, 5000)
    assert read_range(100, 400, 900, 600, 2000) == (100, 600)


def test_slice_batches_skips_to_the_batch_holding_the_offset() -> None:
    data, pos = segment()
    md = md_for(data)
    info = slice_batches(data, 0, 107, 10_000, True, md)
    assert info is not None
    assert info.records == data[pos[2] :]
    assert next(iter_headers(info.records)).base_offset == 106
    # max bytes cuts the tail; min_one_message keeps the first batch whole
    first_size = pos[1]
    info = slice_batches(data, 0, 100, 10, True, md)
    assert info is not None and info.records == data[:first_size]
    info = slice_batches(data, 0, 100, 10, False, md)
    assert info is not None and info.records == b""
    info = slice_batches(data, 0, 100, first_size + 5, False, md)
    assert info is not None and info.records == data[: first_size + 5]
    # past the end of the data
    assert slice_batches(data, 0, 115, 100, True, md) is None


def test_slice_batches_refuses_corrupt_data() -> None:
    data, pos = segment()
    md = md_for(data)
    bad = bytearray(data)
    bad[pos[1] + 70] ^= 1  # a record byte of the second batch
    with pytest.raises(RemoteStorageError, match="CRC"):
        slice_batches(bytes(bad), 0, 100, 10_000, True, md)
    # the corrupt batch is not returned when the read stops before it
    info = slice_batches(bytes(bad), 0, 100, pos[1], True, md)
    assert info is not None and info.records == data[: pos[1]]
    # wrong magic, offsets outside the segment, garbage position
    bad = bytearray(data)
    bad[16] = 1
    with pytest.raises(RemoteStorageError, match="magic"):
        slice_batches(bytes(bad), 0, 100, 10_000, True, md)
    with pytest.raises(RemoteStorageError, match="outside the segment"):
        slice_batches(data, 0, 100, 10_000, True, md_for(data, base=100, end=105))
    with pytest.raises(RemoteStorageError):
        slice_batches(data[7:], 7, 100, 10_000, True, md)
    # a first batch cut short by the range means the index was wrong
    with pytest.raises(RemoteStorageError, match="inconsistent index"):
        slice_batches(data[: pos[1] - 1], 0, 100, 10_000, True, md)


def test_reader_pool_bounds_pending_reads_and_does_not_leak_on_cancel() -> None:
    reader = RemoteLogReader(threads=1, max_pending_tasks=2)
    gate = threading.Event()
    try:
        first = reader.submit(gate.wait, 5)
        second = reader.submit(gate.wait, 5)
        with pytest.raises(RemoteStorageError, match="too many remote reads pending"):
            reader.submit(gate.wait, 5)
        assert second.cancel()  # queued, never started
        assert reader.pending == 1
        gate.set()
        assert first.result(5) is True
        assert reader.pending == 0
    finally:
        gate.set()
        reader.close()
    with pytest.raises(RemoteStorageError, match="closed"):
        reader.submit(gate.wait, 0)
