"""Record batches -> Arrow columns: the C per-record loop vs the numpy one vs reading Parquet.

Prints ``name: value unit (ratio vs baseline)``; the baseline is pyarrow's own C++ Parquet
reader returning the same columns (key, value, offset, timestamp, timestampType) from an
in-memory, uncompressed Parquet file written from the decoded rows. Also the pure-Python
reference (``decode_to_arrow_py``) on a slice, for scale. The data (not timed): N records,
8-byte keys and 100-byte values, uncompressed batches of 1000 records. Best of
``BENCH_DECODE_REPEAT`` runs (default 5): the machines are shared and noisy.

Also the C decoder over the same records fed in 16 MiB windows vs ``DECODE_BYTES`` windows
(what the readers do).

N = 1,000,000 (``BENCH_DECODE_RECORDS`` overrides; ``BENCH_QUICK=1``: 200,000).

    .venv/bin/python bench/bench_decode.py
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from tierlog.records import build_batch  # noqa: E402
from tierlog.spark.arrow_decode import (  # noqa: E402
    DECODE_BYTES,
    HAS_SPEEDUPS,
    PartitionDecoder,
    decode_to_arrow_py,
)

QUICK = bool(os.environ.get("BENCH_QUICK"))
RECORDS = int(os.environ.get("BENCH_DECODE_RECORDS", 200_000 if QUICK else 1_000_000))
REPEAT = int(os.environ.get("BENCH_DECODE_REPEAT", 5))
BATCH_RECORDS = 1000
TS = 1_700_000_000_000
COLUMNS = ["key", "value", "offset", "timestamp", "timestampType"]


def report(name: str, value: float, unit: str, ratio: float | None = None) -> None:
    suffix = "" if ratio is None else f" ({ratio:.2f}x vs pyarrow parquet read)"
    print(f"{name}: {value:,.0f} {unit}{suffix}", flush=True)


def best(fn: Callable[[], Any], repeat: int = REPEAT) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def build(n: int) -> bytes:
    out = []
    for base in range(0, n, BATCH_RECORDS):
        count = min(BATCH_RECORDS, n - base)
        records = [(TS + i, b"k%07d" % (base + i), bytes([i & 0xFF]) * 100) for i in range(count)]
        out.append(build_batch(records, base_offset=base))
    return b"".join(out)


def main() -> None:
    buf = build(RECORDS)

    def decode(c: bool) -> pa.RecordBatch:
        result = PartitionDecoder("t", 0, 0, 2**62, use_speedups=c).decode(buf)
        assert result.batch is not None and result.batch.num_rows == RECORDS
        return result.batch

    def decode_windows(window: int) -> int:
        decoder = PartitionDecoder("t", 0, 0, 2**62, use_speedups=True)
        rows = sum(
            r.batch.num_rows for r in decoder.decode_windows(buf, window) if r.batch is not None
        )
        assert rows == RECORDS
        return rows

    batch = decode(False)
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_batches([batch]).select(COLUMNS), sink, compression="none")
    parquet = sink.getvalue()
    parquet_s = best(lambda: pq.read_table(io.BytesIO(parquet), columns=COLUMNS))
    report("parquet_read", RECORDS / parquet_s, "records/s", 1.0)

    if HAS_SPEEDUPS:
        assert decode(True).equals(batch)
        c_s = best(lambda: decode(True))
        report("decode_c", RECORDS / c_s, "records/s", parquet_s / c_s)
        # The remote reader decodes a 16 MiB fetch in DECODE_BYTES windows: why.
        for window in (16 << 20, DECODE_BYTES):
            w_s = best(lambda w=window: decode_windows(w))
            report(
                f"decode_c_{window >> 20}MiB_windows", RECORDS / w_s, "records/s", parquet_s / w_s
            )
    else:
        print("decode_c: skipped (extension not built or TIERLOG_NO_EXTENSIONS=1)")
    numpy_s = best(lambda: decode(False))
    report("decode_numpy", RECORDS / numpy_s, "records/s", parquet_s / numpy_s)

    small = buf[: len(buf) // max(1, RECORDS // 50_000)]  # about 50,000 records
    rows = decode_to_arrow_py(small, 0, 2**62, "t", 0).num_rows
    py_s = best(lambda: decode_to_arrow_py(small, 0, 2**62, "t", 0), repeat=2) * RECORDS / rows
    report("decode_reference_py", RECORDS / py_s, "records/s", parquet_s / py_s)
    if HAS_SPEEDUPS:
        print(f"c_vs_numpy: {numpy_s / c_s:.2f}x; c_vs_reference_py: {py_s / c_s:.2f}x")


if __name__ == "__main__":
    main()
