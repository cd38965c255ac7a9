"""Record batches (magic 2) straight into Arrow columns, in the schema of Spark's Kafka source.

Two implementations, one contract (aiokafka's pattern: a readable reference next to a fast path,
one differential test suite for both):

* :func:`decode_to_arrow_py` — the reference: :func:`tierlog.records.iter_records` decodes each
  record into a :class:`~tierlog.records.Record`, rows are collected into Python lists and
  turned into Arrow arrays. Simple, about 1 µs per record.
* :class:`PartitionDecoder` — the fast path, columnar. Per batch (Python): header, CRC-32C,
  control/aborted/range checks, decompression. Per record, the only Python work is following
  the chain of ``length`` varints to find where each record starts (record i+1's position
  depends on record i's length: an inherently sequential step, ~0.1 µs per record). Every
  other field is decoded for all records at once with numpy (gather the bytes at the record
  positions, decode the varints lane-wise). ``key`` and ``value`` become Arrow ``binary_view``
  arrays that point into the batch bytes without copying, and one C++ cast turns them into
  the contiguous ``binary`` arrays Spark requires.

Row semantics, as a Kafka consumer sees them (and Spark's Kafka source returns them):

* only records with ``start_offset <= offset < end_offset``;
* control batches (transaction markers) never appear; with ``read_committed`` the records of
  aborted transactions do not either (Kafka's ``CompletedFetch`` algorithm over the aborted
  transaction list the broker — or a remote segment's transaction index — provides);
* ``timestamp`` is the record's CreateTime, or the batch's maxTimestamp in a LogAppendTime
  batch; ``timestampType`` 0 = CreateTime, 1 = LogAppendTime;
* ``headers`` (with ``include_headers``) is null for a record without headers, else the list of
  ``{key, value}`` in wire order.

Errors: :class:`~tierlog.errors.CorruptRecordError` for bytes that do not parse (CRC mismatch,
truncated record, varint too long), :class:`~tierlog.errors.InvalidRecord` for records that
contradict their batch.

Thread-safety: a decoder holds the aborted-transaction state of one partition read; one per
thread. Pure functions otherwise (no I/O).
"""

from __future__ import annotations

import heapq
import os
import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tierlog.errors import CorruptRecordError, InvalidRecord
from tierlog.records import (
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    compute_crc,
    control_record_type,
    decompress,
    iter_headers,
    iter_records,
    read_records,
)
from tierlog.records.varint import decode_varint

# The C twin of the per-record loop (steps 2-4 of PartitionDecoder._columns), chosen once
# here: TIERLOG_NO_EXTENSIONS=1 or a missing build means the numpy path below.
try:
    if os.environ.get("TIERLOG_NO_EXTENSIONS", "") == "1":
        raise ImportError("TIERLOG_NO_EXTENSIONS=1")
    from tierlog.records._speedups._decode import decode_records as _decode_records_c
except ImportError:
    _decode_records_c = None  # type: ignore[assignment]

HAS_SPEEDUPS: Final = _decode_records_c is not None
"""Whether :class:`PartitionDecoder` uses the compiled per-record loop."""

__all__ = [
    "DECODE_BYTES",
    "HAS_SPEEDUPS",
    "HEADERS_TYPE",
    "DecodeResult",
    "PartitionDecoder",
    "decode_to_arrow_py",
    "empty_batch",
    "kafka_schema",
]

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

HEADERS_TYPE: Final = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)
_TIMESTAMP_TYPE: Final = pa.timestamp("us", tz="UTC")
_BASE_FIELDS: Final = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", _TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]
_SCHEMAS: Final = {
    False: pa.schema(_BASE_FIELDS),
    True: pa.schema([*_BASE_FIELDS, pa.field("headers", HEADERS_TYPE)]),
}

#: Bytes of record batches decoded into one Arrow batch by :meth:`PartitionDecoder.decode_windows`.
#: Measured (bench/bench_decode.py): a 115 MB buffer decodes at about a third of the speed of
#: the same records in 2 MiB windows (page faults on freshly mapped output buffers; small
#: output buffers are recycled by the allocator), and 2 MiB beats 16 MiB windows too.
DECODE_BYTES: Final = 2 << 20
_BATCH_LENGTH: Final = struct.Struct(">i")
_COMPRESSION_MASK: Final = 0x07
_TIMESTAMP_TYPE_MASK: Final = 0x08
_TRANSACTIONAL_MASK: Final = 0x10
_CONTROL_MASK: Final = 0x20
_CONTROL_TYPE_ABORT: Final = 0
_NO_PRODUCER_ID: Final = -1
_MIN_RECORD_BODY: Final = 6  # attributes .. headerCount, one byte each
# Record-start speculation (PartitionDecoder._record_starts): records checked in the first
# round, the shortest run worth another round, and the most rounds before chasing.
_FIRST_LOOK: Final = 64
_MIN_RUN: Final = 32
_MAX_ROUNDS: Final = 8
_INLINE: Final = 12  # binary_view stores values up to 12 bytes inside the view itself


def kafka_schema(include_headers: bool) -> pa.Schema:
    """Arrow schema of Spark's Kafka source (as Spark converts it: timestamps in µs, UTC)."""
    return _SCHEMAS[include_headers]


def empty_batch(include_headers: bool) -> pa.RecordBatch:
    schema = kafka_schema(include_headers)
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """What one buffer of record batches decoded to."""

    batch: pa.RecordBatch | None
    """Rows in range (None when there were none)."""
    next_offset: int
    """Offset after the last complete batch in the buffer (-1 when there was none): where the
    next read continues, whether that batch was in range, a control batch or aborted."""
    bytes_consumed: int
    """Bytes of the buffer covered by complete batches (a trailing partial batch is not)."""


# ------------------------------------------------------------------------------ reference


def decode_to_arrow_py(
    buf: bytes | bytearray | memoryview,
    start_offset: int,
    end_offset: int,
    topic: str,
    partition: int,
    *,
    include_headers: bool = False,
    aborted_transactions: Iterable[tuple[int, int]] = (),
    read_committed: bool = True,
) -> pa.RecordBatch:
    """The pure-Python reference of :class:`PartitionDecoder` (same rows, same schema).

    Raises:
        CorruptRecordError, InvalidRecord: as the fast path.
    """
    aborted = sorted((first, pid) for pid, first in aborted_transactions)
    aborted_pids: set[int] = set()
    cols: dict[str, list[Any]] = {f.name: [] for f in kafka_schema(include_headers)}
    for header, records in iter_records(buf):
        if read_committed and header.producer_id != _NO_PRODUCER_ID:
            while aborted and aborted[0][0] <= header.last_offset:
                aborted_pids.add(heapq.heappop(aborted)[1])
            if header.is_control_batch:
                if records and control_record_type(records[0].key) == _CONTROL_TYPE_ABORT:
                    aborted_pids.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in aborted_pids:
                continue
        if header.is_control_batch:
            continue
        for r in records:
            if not start_offset <= r.offset < end_offset:
                continue
            cols["key"].append(r.key)
            cols["value"].append(r.value)
            cols["topic"].append(topic)
            cols["partition"].append(partition)
            cols["offset"].append(r.offset)
            cols["timestamp"].append(r.timestamp * 1000)
            cols["timestampType"].append(header.timestamp_type)
            if include_headers:
                cols["headers"].append(
                    [{"key": k, "value": v} for k, v in r.headers] if r.headers else None
                )
    schema = kafka_schema(include_headers)
    return pa.RecordBatch.from_arrays(
        [pa.array(cols[f.name], type=f.type) for f in schema], schema=schema
    )


# ------------------------------------------------------------------------------ fast path


def _varints_any(data: U8, pos: I64, limit: int, *, strict: bool = True) -> tuple[I64, I64]:
    """ZigZag varints of any length (up to 10 bytes: varlongs), byte by byte for all
    positions at once: (values, next positions). See :func:`_varints`."""
    safe = np.minimum(pos, limit - 1)
    b = data[safe].astype(np.uint64)
    val = b & np.uint64(0x7F)
    more = np.flatnonzero(b & np.uint64(0x80))
    size = np.ones(pos.shape, dtype=np.int64)
    shift = 7
    while more.size:
        if shift > 63:
            if strict:
                raise CorruptRecordError("varint longer than 10 bytes")
            size[more] = -1 - pos[more]  # next position -1
            break
        at = np.minimum(pos[more] + size[more], limit - 1)
        bb = data[at].astype(np.uint64)
        val[more] |= (bb & np.uint64(0x7F)) << np.uint64(shift)
        size[more] += 1
        more = more[(bb & np.uint64(0x80)) != 0]
        shift += 7
    decoded = (val >> np.uint64(1)).view(np.int64) ^ -(val & np.uint64(1)).view(np.int64)
    return decoded, pos + size


def _varints(
    data: U8, u32: npt.NDArray[np.uint32], pos: I64, limit: int, *, strict: bool = True
) -> tuple[I64, I64]:
    """ZigZag varints at every position: (values, next positions).

    Fast path: one 4-byte gather per position (``u32``, see :func:`_u32_view`) decodes
    varints of up to 4 bytes with int32 lane arithmetic; the rare longer ones (timestamp
    deltas over 37 hours) and positions in the last 3 bytes go through
    :func:`_varints_any`. Positions past ``limit`` read byte 0 instead (the caller's bounds
    checks reject them). A varint longer than 10 bytes raises, or with ``strict=False``
    (speculative reads of positions that may be garbage) gets next position -1.
    """
    if len(u32) == 0:
        return _varints_any(data, pos, limit, strict=strict)
    w = u32[np.minimum(pos, limit - 4)].view(np.int32)
    c0 = (w >> 7) & 1  # continuation bits, each only if all earlier ones are set
    c1 = c0 & (w >> 15)
    c2 = c1 & (w >> 23)
    c3 = c2 & (w >> 31) & 1
    v = (
        (w & 0x7F)
        | ((w >> 1) & (0x7F << 7) & -c0)
        | ((w >> 2) & (0x7F << 14) & -c1)
        | ((w >> 3) & (0x7F << 21) & -c2)
    )
    values = ((v >> 1) ^ -(v & 1)).astype(np.int64)
    nxt = pos + (1 + c0 + c1 + c2)
    slow = np.flatnonzero(c3 | (pos > limit - 4))
    if slow.size:
        values[slow], nxt[slow] = _varints_any(data, pos[slow], limit, strict=strict)
    return values, nxt


def _u32_view(data: bytes) -> npt.NDArray[np.uint32]:
    """Element i = the 4 bytes ``data[i:i+4]`` as a little-endian uint32 (an overlapping,
    unaligned strided view: no copy)."""
    if len(data) < 4:
        return np.zeros(0, dtype=np.uint32)
    return np.ndarray((len(data) - 3,), dtype="<u4", buffer=data, offset=0, strides=(1,))


def _binary_column(
    data: bytes, u32: npt.NDArray[np.uint32], data_buf: pa.Buffer, pos: I64, lengths: I64
) -> pa.Array:
    """A ``binary`` array of ``data[pos[i] : pos[i] + lengths[i]]`` (null where length < 0).

    Built as a ``binary_view`` array over ``data`` without copying it — 16-byte views:
    int32 length, then either the value itself (up to 12 bytes, inline) or a 4-byte prefix,
    buffer index 0 and the int32 offset — then cast in C++ to ``binary`` (one gather, the only
    copy of the bytes). Inline views are not zero-padded past the value (the view array never
    leaves this function; the cast copies ``length`` bytes). Bounds must have been checked.
    """
    n = len(pos)
    limit = len(data)
    valid = lengths >= 0
    lens = np.maximum(lengths, 0)
    short = lens <= _INLINE
    views = np.empty((n, 4), dtype=np.uint32)
    views[:, 0] = lens
    views[:, 1] = u32[np.minimum(pos, limit - 4)]
    if short.any():
        views[:, 2] = np.where(short, u32[np.minimum(pos + 4, limit - 4)], 0)
        views[:, 3] = np.where(short, u32[np.minimum(pos + 8, limit - 4)], pos)
    else:
        views[:, 2] = 0
        views[:, 3] = pos
    # The last few values of the buffer cannot be read as whole words: do them by hand.
    for i in np.flatnonzero(pos > limit - _INLINE - 4).tolist():
        p = int(pos[i])
        words = np.frombuffer(data[p : p + _INLINE].ljust(_INLINE, b"\0"), dtype="<u4")
        views[i, 1] = words[0]
        if short[i]:
            views[i, 2:4] = words[1:3]
    null_count = n - int(np.count_nonzero(valid))
    validity = None if null_count == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    view_array = pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(views), data_buf], null_count=null_count
    )
    return view_array.cast(pa.binary())


def _string_constant(value: str, n: int) -> pa.Array:
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]
    )


def _decode_headers(data: bytes, pos: int, end: int) -> list[dict[str, Any]]:
    """headerCount and headers of one record (the rare path), as Spark's header structs."""
    count, pos = decode_varint(data, pos)
    if count < 0 or count * 2 > end - pos:
        raise InvalidRecord(f"found invalid number of record headers {count}")
    out = []
    for _ in range(count):
        size, pos = decode_varint(data, pos)
        if size < 0 or pos + size > end:
            raise InvalidRecord(f"invalid header key size {size}")
        key = data[pos : pos + size].decode("utf-8", "replace")
        pos += size
        size, pos = decode_varint(data, pos)
        value: bytes | None = None
        if size >= 0:
            if pos + size > end:
                raise CorruptRecordError(f"header value of {size} bytes runs past its record")
            value = data[pos : pos + size]
            pos += size
        out.append({"key": key, "value": value})
    if pos != end:
        raise InvalidRecord(f"record has {end - pos} bytes after its headers")
    return out


class PartitionDecoder:
    """Decodes the record batches of one partition read, buffer after buffer, into Arrow.

    Keeps the read_committed state across buffers (aborted transactions not reached yet,
    producers inside an aborted transaction), so feed the buffers in offset order.
    Not thread-safe.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        end_offset: int,
        *,
        include_headers: bool = False,
        read_committed: bool = True,
        check_crc: bool = True,
        use_speedups: bool | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.include_headers = include_headers
        self.read_committed = read_committed
        self.check_crc = check_crc
        if use_speedups and not HAS_SPEEDUPS:
            raise ValueError("the compiled decoder is not available")
        self.use_speedups = HAS_SPEEDUPS if use_speedups is None else use_speedups
        self.schema = kafka_schema(include_headers)
        self._aborted: list[tuple[int, int]] = []  # heap of (first_offset, producer_id)
        self._seen_aborted: set[tuple[int, int]] = set()
        self._aborted_pids: set[int] = set()

    def add_aborted_transactions(self, transactions: Iterable[tuple[int, int]]) -> None:
        """``(producer_id, first_offset)`` pairs (a Fetch response's, or from a transaction
        index). Duplicates across responses are ignored."""
        for pid, first in transactions:
            if (pid, first) not in self._seen_aborted:
                self._seen_aborted.add((pid, first))
                heapq.heappush(self._aborted, (first, pid))

    # -------------------------------------------------------------- per batch

    def _skip_batch(self, buf: Any, h: RecordBatchHeader) -> bool:
        """Kafka's read_committed filter and control-batch skipping, for one batch."""
        if self.read_committed and h.producer_id != _NO_PRODUCER_ID:
            while self._aborted and self._aborted[0][0] <= h.last_offset:
                self._aborted_pids.add(heapq.heappop(self._aborted)[1])
            if h.attributes & _CONTROL_MASK:
                if self._is_abort_marker(buf, h):
                    self._aborted_pids.discard(h.producer_id)
                return True
            if h.attributes & _TRANSACTIONAL_MASK and h.producer_id in self._aborted_pids:
                return True
        return bool(h.attributes & _CONTROL_MASK)

    @staticmethod
    def _is_abort_marker(buf: Any, h: RecordBatchHeader) -> bool:
        records = read_records(buf, h)
        return bool(records) and control_record_type(records[0].key) == _CONTROL_TYPE_ABORT

    # -------------------------------------------------------------- decode

    def decode_windows(
        self, buf: bytes | bytearray | memoryview, window: int = DECODE_BYTES
    ) -> Iterator[DecodeResult]:
        """:meth:`decode` of ``buf`` about ``window`` bytes at a time (a batch larger than a
        window alone): one result per window, ``bytes_consumed`` counted from the start of
        ``buf``. Small windows keep each Arrow batch in small buffers the allocator reuses
        (see :data:`DECODE_BYTES`).

        Raises:
            CorruptRecordError, InvalidRecord: see the module docstring.
        """
        if not isinstance(buf, bytes):
            buf = bytes(buf)
        pos, size = 0, len(buf)
        while size - pos >= RECORD_BATCH_OVERHEAD:
            first_batch = LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(buf, pos + 8)[0]
            end = min(pos + max(window, first_batch), size)
            result = self.decode(buf, pos, end)
            if result.bytes_consumed == 0:
                return  # a partial batch at the end
            pos += result.bytes_consumed
            yield DecodeResult(result.batch, result.next_offset, pos)

    def decode(
        self, buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None
    ) -> DecodeResult:
        """Rows of the complete batches in ``buf[start:end]`` that fall in range;
        ``bytes_consumed`` counts from ``start``.

        Raises:
            CorruptRecordError, InvalidRecord: see the module docstring.
        """
        if not isinstance(buf, bytes):
            buf = bytes(buf)
        selected: list[RecordBatchHeader] = []
        compressed = False
        next_offset = -1
        consumed = 0
        for h in iter_headers(buf, start, end):
            next_offset = h.next_offset
            consumed = h.position + h.size_in_bytes - start
            if h.last_offset < self.start_offset:
                continue
            if h.base_offset >= self.end_offset:
                break
            if h.magic != CURRENT_MAGIC:
                raise CorruptRecordError(
                    f"record batch at offset {h.base_offset} has magic {h.magic}, expected 2"
                )
            if self.check_crc and compute_crc(buf, h) != h.crc:
                raise CorruptRecordError(
                    f"record batch at offset {h.base_offset} of {self.topic}-{self.partition} "
                    "is corrupt (CRC-32C mismatch)"
                )
            if self._skip_batch(buf, h) or h.records_count <= 0:
                continue
            if h.size_in_bytes == RECORD_BATCH_OVERHEAD:
                raise InvalidRecord(
                    f"record batch at offset {h.base_offset} declares {h.records_count} "
                    "records but has none"
                )
            selected.append(h)
            compressed = compressed or bool(h.attributes & _COMPRESSION_MASK)
        if not selected:
            return DecodeResult(None, next_offset, consumed)
        return DecodeResult(self._columns(buf, selected, compressed), next_offset, consumed)

    def _columns(
        self, buf: bytes, headers: list[RecordBatchHeader], compressed: bool
    ) -> pa.RecordBatch | None:
        # 1. One data buffer holding every selected batch's records section.
        sections: list[tuple[int, int]] = []  # (start, end) in `data`
        if compressed:
            parts: list[bytes | memoryview] = []
            size = 0
            view = memoryview(buf)
            for h in headers:
                raw = view[h.position + RECORD_BATCH_OVERHEAD : h.position + h.size_in_bytes]
                codec = h.attributes & _COMPRESSION_MASK
                part = decompress(codec, raw) if codec else raw
                parts.append(part)
                sections.append((size, size + len(part)))
                size += len(part)
            data_bytes = b"".join(parts)
        else:
            data_bytes = buf
            for h in headers:
                sections.append((h.position + RECORD_BATCH_OVERHEAD, h.position + h.size_in_bytes))

        if self.use_speedups:
            return self._columns_c(data_bytes, headers, sections)

        # 2. The sequential step: where each record's body starts and ends.
        data = np.frombuffer(data_bytes, dtype=np.uint8)
        u32 = _u32_view(data_bytes)
        limit = len(data)
        starts = self._record_starts(data_bytes, data, u32, headers, sections)
        n = len(starts)
        lengths, s = _varints(data, u32, starts, limit)
        if (lengths < _MIN_RECORD_BODY).any():
            raise CorruptRecordError(
                f"a record of {self.topic}-{self.partition} has length "
                f"{int(lengths.min())} (at least {_MIN_RECORD_BODY} expected)"
            )
        e = s + lengths

        # 3. Every field, for all records at once.
        counts = np.fromiter((h.records_count for h in headers), dtype=np.int64, count=len(headers))
        ts_delta, p = _varints(data, u32, s + 1, limit)  # + attributes (int8, unused)
        off_delta, p = _varints(data, u32, p, limit)
        klen, p = _varints(data, u32, p, limit)
        kpos = p
        p = p + np.maximum(klen, 0)
        vlen, p = _varints(data, u32, p, limit)
        vpos = p
        p = p + np.maximum(vlen, 0)
        hpos = p  # headerCount's own position
        hcount, p = _varints(data, u32, p, limit)

        if (
            (klen < -1).any()
            or (vlen < -1).any()
            or (hcount < 0).any()
            or (p > e).any()
            or ((hcount == 0) & (p != e)).any()
        ):
            self._raise_first_bad(headers, counts, klen, vlen, hcount, p, e)

        base_offset = np.repeat(
            np.fromiter((h.base_offset for h in headers), np.int64, len(headers)), counts
        )
        offsets = base_offset + off_delta
        log_append = np.fromiter(
            (bool(h.attributes & _TIMESTAMP_TYPE_MASK) for h in headers), np.bool_, len(headers)
        )
        base_ts = np.fromiter((h.base_timestamp for h in headers), np.int64, len(headers))
        max_ts = np.fromiter((h.max_timestamp for h in headers), np.int64, len(headers))
        ts_type = np.repeat(log_append.astype(np.int32), counts)
        if log_append.any():
            timestamps = np.where(
                np.repeat(log_append, counts),
                np.repeat(max_ts, counts),
                np.repeat(base_ts, counts) + ts_delta,
            )
        else:
            timestamps = np.repeat(base_ts, counts) + ts_delta

        # 4. Range filter (usually only the first and last batches straddle it; min/max
        # rather than the ends, as malformed offset deltas need not increase).
        if offsets.min() < self.start_offset or offsets.max() >= self.end_offset:
            keep = np.flatnonzero((offsets >= self.start_offset) & (offsets < self.end_offset))
            if keep.size == 0:
                return None
            offsets, timestamps, ts_type = offsets[keep], timestamps[keep], ts_type[keep]
            kpos, klen, vpos, vlen = kpos[keep], klen[keep], vpos[keep], vlen[keep]
            hcount, hpos, e = hcount[keep], hpos[keep], e[keep]
            n = int(keep.size)

        data_buf = pa.py_buffer(data_bytes)
        arrays = [
            _binary_column(data_bytes, u32, data_buf, kpos, klen),
            _binary_column(data_bytes, u32, data_buf, vpos, vlen),
            _string_constant(self.topic, n),
            pa.array(np.full(n, self.partition, dtype=np.int32)),
            pa.array(offsets),
            pa.array(timestamps * 1000).view(_TIMESTAMP_TYPE),
            pa.array(ts_type),
        ]
        if self.include_headers:
            arrays.append(self._headers_column(data_bytes, hcount, hpos, e))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _columns_c(
        self, data_bytes: bytes, headers: list[RecordBatchHeader], sections: list[tuple[int, int]]
    ) -> pa.RecordBatch | None:
        """Steps 2-4 of :meth:`_columns` in C (``_speedups/_decode.c``): same rows, same
        errors. The C code returns Arrow buffers; they are wrapped here without copying."""
        assert _decode_records_c is not None
        info = np.empty((len(headers), 7), dtype=np.int64)
        for b, h in enumerate(headers):
            info[b] = (
                sections[b][0],
                sections[b][1],
                h.records_count,
                h.base_offset,
                h.base_timestamp,
                h.max_timestamp,
                1 if h.attributes & _TIMESTAMP_TYPE_MASK else 0,
            )
        (n, offsets, timestamps, ts_type, koffs, kdata, kvalid, knulls, voffs, vdata, vvalid,
         vnulls, hdrs) = _decode_records_c(
            data_bytes, info.tobytes(), self.start_offset, self.end_offset, self.include_headers
        )  # fmt: skip
        if n == 0:
            return None

        def buf(b: bytes | None) -> pa.Buffer | None:
            return None if b is None else pa.py_buffer(b)

        arrays = [
            pa.Array.from_buffers(
                pa.binary(), n, [buf(kvalid), buf(koffs), buf(kdata)], null_count=knulls
            ),
            pa.Array.from_buffers(
                pa.binary(), n, [buf(vvalid), buf(voffs), buf(vdata)], null_count=vnulls
            ),
            _string_constant(self.topic, n),
            pa.array(np.full(n, self.partition, dtype=np.int32)),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
            pa.Array.from_buffers(_TIMESTAMP_TYPE, n, [None, pa.py_buffer(timestamps)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(ts_type)]),
        ]
        if self.include_headers:
            values: list[list[dict[str, Any]] | None] = [None] * n
            triples = np.frombuffer(hdrs, dtype=np.int64).reshape(-1, 3).tolist()
            for row, hpos, end in triples:
                values[row] = _decode_headers(data_bytes, hpos, end)
            arrays.append(pa.array(values, type=HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _record_starts(
        self,
        data: bytes,
        array_: U8,
        u32: npt.NDArray[np.uint32],
        headers: list[RecordBatchHeader],
        sections: list[tuple[int, int]],
    ) -> I64:
        """The position of every record (its ``length`` varint), in order.

        Where a record starts depends on the length of the one before: a chain. Within a
        batch most records usually have the same size (fixed-size values; the deltas only
        grow by a byte now and then), so the chain is guessed a run at a time, for all
        batches at once: from a known record of size S, the batch's next records are guessed
        at S, 2S, ... and the length varint at every guess is checked in one vectorized pass.
        A guess is exact up to the first record whose size differs, where the batch's next
        run starts (next round). A batch whose runs are short (sizes keep changing) is
        followed record by record in Python instead (:meth:`_chase`). Lengths are validated
        later, vectorized; here only that each batch's records end exactly where its records
        section does.

        Raises:
            CorruptRecordError: a truncated batch or a record length below the minimum.
            InvalidRecord: records that do not fill their batch exactly.
        """
        nb = len(headers)
        counts = np.fromiter((h.records_count for h in headers), dtype=np.int64, count=nb)
        base = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(counts, out=base[1:])
        out = np.empty(int(base[-1]), dtype=np.int64)
        pos = [start for start, _ in sections]
        done = [0] * nb
        active = [b for b in range(nb) if counts[b] > 0]
        limit = len(data)
        rounds = 0
        while active:
            rounds += 1
            sizes = []
            for b in active:
                try:
                    length, body = decode_varint(data, pos[b])
                except IndexError:
                    self._truncated(headers[b])
                if length < _MIN_RECORD_BODY:
                    raise CorruptRecordError(
                        f"record of batch at offset {headers[b].base_offset} of "
                        f"{self.topic}-{self.partition} has length {length}"
                    )
                sizes.append(body - pos[b] + length)
            ids = np.asarray(active, dtype=np.int64)
            remaining = counts[ids] - np.asarray([done[b] for b in active], dtype=np.int64)
            if rounds == 1:
                # A short first look, so batches of ever-changing sizes waste little.
                remaining = np.minimum(remaining, _FIRST_LOOK)
            size_arr = np.asarray(sizes, dtype=np.int64)
            seg = np.zeros(len(ids) + 1, dtype=np.int64)
            np.cumsum(remaining, out=seg[1:])
            j = np.arange(int(seg[-1]), dtype=np.int64) - np.repeat(seg[:-1], remaining)
            per_size = np.repeat(size_arr, remaining)
            guess = np.repeat(np.asarray([pos[b] for b in active], dtype=np.int64), remaining)
            guess += per_size * j
            lengths, bodies = _varints(array_, u32, guess, limit, strict=False)
            # Guess j of a batch is real when its guesses 0 .. j-1 have size S (guess 0 does
            # by construction): the run is everything before the first other size.
            # (A guess past the buffer reads clamped bytes: never real, the batch is truncated.)
            real = ((bodies - guess + lengths) == per_size) & (guess < limit)
            marks = np.where(real, np.iinfo(np.int64).max, j)
            runs = np.minimum.reduceat(marks, seg[:-1])
            runs = np.minimum(runs, remaining)
            keep = j < np.repeat(runs, remaining)
            dest = np.repeat(base[ids] + np.asarray([done[b] for b in active]), remaining) + j
            out[dest[keep]] = guess[keep]
            still = []
            for k, b in enumerate(active):
                run = int(runs[k])
                pos[b] += int(size_arr[k]) * run
                done[b] += run
                left = int(counts[b]) - done[b]
                if left == 0:
                    continue
                if run < min(_MIN_RUN, left) or rounds >= _MAX_ROUNDS:
                    # Sizes keep changing in this batch: guessing does not pay, chase it.
                    try:
                        chased, pos[b] = self._chase(data, pos[b], left)
                    except IndexError:
                        self._truncated(headers[b])
                    start = int(base[b]) + done[b]
                    out[start : start + left] = np.frombuffer(chased, dtype=np.int64)
                    done[b] += left
                    continue
                still.append(b)
            active = still
        for b, h in enumerate(headers):
            end = sections[b][1]
            if pos[b] != end:
                raise InvalidRecord(
                    f"record batch at offset {h.base_offset} of {self.topic}-{self.partition}: "
                    f"its {h.records_count} records end at byte {pos[b] - end:+d} of its end"
                )
        return out

    def _truncated(self, h: RecordBatchHeader) -> NoReturn:
        raise CorruptRecordError(
            f"batch at offset {h.base_offset} of {self.topic}-{self.partition} is truncated"
        )

    @staticmethod
    def _chase(data: bytes, pos: int, count: int) -> tuple[array[int], int]:
        """Follow ``count`` records' length varints from ``pos`` in Python (1- and 2-byte
        varints inline): their positions, and the position after the last one."""
        starts: array[int] = array("q")
        add = starts.append
        for _ in range(count):
            add(pos)
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                body = pos + 1
            elif (b1 := data[pos + 1]) < 0x80:
                v = (b & 0x7F) | (b1 << 7)
                length = (v >> 1) ^ -(v & 1)
                body = pos + 2
            else:
                length, body = decode_varint(data, pos)
            if length < _MIN_RECORD_BODY:  # also keeps the chain moving forward
                raise CorruptRecordError(f"record at byte {pos} has length {length}")
            pos = body + length
        return starts, pos

    def _raise_first_bad(
        self,
        headers: list[RecordBatchHeader],
        counts: I64,
        klen: I64,
        vlen: I64,
        hcount: I64,
        p: I64,
        e: I64,
    ) -> None:
        bad = (klen < -1) | (vlen < -1) | (hcount < 0) | (p > e) | ((hcount == 0) & (p != e))
        i = int(np.flatnonzero(bad)[0])
        batch = int(np.searchsorted(np.cumsum(counts), i, side="right"))
        where = f"batch at offset {headers[batch].base_offset} of {self.topic}-{self.partition}"
        if klen[i] < -1 or vlen[i] < -1:
            raise InvalidRecord(f"{where}: record with a negative key/value length")
        if hcount[i] < 0:
            raise InvalidRecord(f"{where}: found invalid number of record headers {hcount[i]}")
        if p[i] > e[i]:
            raise CorruptRecordError(f"{where}: a record's fields run past its length")
        raise InvalidRecord(f"{where}: invalid record size: {int(e[i] - p[i])} bytes left over")

    def _headers_column(self, data: bytes, hcount: I64, hpos: I64, e: I64) -> pa.Array:
        with_headers = np.flatnonzero(hcount > 0)
        values: list[list[dict[str, Any]] | None] = [None] * len(hcount)
        for i in with_headers.tolist():
            values[i] = _decode_headers(data, int(hpos[i]), int(e[i]))
        return pa.array(values, type=HEADERS_TYPE)
