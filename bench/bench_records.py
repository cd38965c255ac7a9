"""Throughput of the record codec: ``python bench/bench_records.py``.

Records have a 10-byte key and a 100-byte value, 1000 to a batch. Each line reads
``name: value unit (ratio vs baseline)``; every baseline is measured in the same run over the
same bytes, so ratios are comparable across machines:

* ``copy`` - ``bytes(batch)`` of the uncompressed batch, expressed in records per second;
* ``crc32c`` - CRC-32C over the same bytes (validate_batch's cost);
* kafka-python (pure Python) and aiokafka (C extension) decode / build the same batches.

Takes about 10 s. Use ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from tierlog.records import (
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    RecordBatchBuilder,
    crc32c,
    decode_records,
)

RECORDS_PER_BATCH = 1000
KEY_SIZE, VALUE_SIZE = 10, 100


def best_time(fn: Callable[[], object], budget: float) -> float:
    """Best seconds per call: repeats of ~budget/5 s each, the minimum of five."""
    fn()  # warm up
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(budget / 5 / once))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def make_items() -> list[tuple[int, bytes, bytes]]:
    """Values half random, half repeated text, so lz4 has something to do, as in real data."""
    text = b"tierlog " * (VALUE_SIZE // 16)
    random_part = VALUE_SIZE - len(text)
    noise = os.urandom(random_part * RECORDS_PER_BATCH)
    return [
        (
            1_700_000_000_000 + i,
            b"key-%06d" % i,
            noise[i * random_part : (i + 1) * random_part] + text,
        )
        for i in range(RECORDS_PER_BATCH)
    ]


def build(codec: int, items: list[tuple[int, bytes, bytes]]) -> bytes:
    builder = RecordBatchBuilder(codec)
    for ts, key, value in items:
        builder.append(ts, key, value)
    return builder.build()


def client_codecs() -> dict[str, tuple[Any, Any]]:
    """kafka-python and aiokafka record codecs, when importable."""
    found: dict[str, tuple[Any, Any]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            from kafka.record import default_records as kp

            found["kafka-python"] = (kp.DefaultRecordBatchBuilder, kp.DefaultRecordBatch)
        except ImportError:
            pass
        try:
            from aiokafka.record import default_records as ak

            found["aiokafka"] = (ak.DefaultRecordBatchBuilder, ak.DefaultRecordBatch)
        except ImportError:
            pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny budget, for CI smoke runs")
    args = parser.parse_args()
    budget = 0.05 if args.quick else 0.6

    items = make_items()
    n = len(items)
    plain = build(COMPRESSION_NONE, items)
    lz4 = build(COMPRESSION_LZ4, items)
    assert len(decode_records(plain)) == len(decode_records(lz4)) == n
    clients = client_codecs()

    def line(name: str, seconds: float, base_name: str, base_seconds: float) -> None:
        rate = n / seconds
        print(
            f"{name}: {rate:,.0f} records/s ({base_seconds / seconds:.4g}x vs {base_name})",
            flush=True,
        )

    print(
        f"# {n} records/batch, {KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values; "
        f"batch {len(plain):,} B uncompressed, {len(lz4):,} B lz4; python {sys.version.split()[0]}"
    )
    t_copy = best_time(lambda: bytes(bytearray(plain)), budget)
    t_crc = best_time(lambda: crc32c(plain), budget)
    line("baseline copy", t_copy, "copy", t_copy)
    line("baseline crc32c", t_crc, "copy", t_copy)

    t_dec = best_time(lambda: decode_records(plain), budget)
    t_dec_nocrc = best_time(lambda: decode_records(plain, check_crc=False), budget)
    t_dec_lz4 = best_time(lambda: decode_records(lz4), budget)
    line("decode none", t_dec, "crc32c", t_crc)
    line("decode none, no crc", t_dec_nocrc, "crc32c", t_crc)
    line("decode lz4", t_dec_lz4, "crc32c", t_crc)
    for client, (_, batch_cls) in clients.items():
        for codec_name, batch, ours in (("none", plain, t_dec), ("lz4", lz4, t_dec_lz4)):
            name = f"decode {codec_name} {client}"

            def their_decode(cls: Any = batch_cls, b: bytes = batch) -> object:
                return list(cls(b))

            try:
                t = best_time(their_decode, budget)
            except Exception as exc:  # a client without this codec's library
                print(f"{name}: skipped ({type(exc).__name__}: {exc})")
                continue
            line(name, t, f"tierlog decode {codec_name}", ours)

    t_build = best_time(lambda: build(COMPRESSION_NONE, items), budget)
    t_build_lz4 = best_time(lambda: build(COMPRESSION_LZ4, items), budget)
    line("build none", t_build, "crc32c", t_crc)
    line("build lz4", t_build_lz4, "crc32c", t_crc)
    for client, (builder_cls, _) in clients.items():

        def their_build(cls: Any = builder_cls, codec: int = COMPRESSION_NONE) -> object:
            builder = cls(2, codec, 0, -1, -1, -1, 2**30)
            for offset, (ts, key, value) in enumerate(items):
                builder.append(offset, ts, key, value, [])
            return builder.build()

        line(f"build none {client}", best_time(their_build, budget), "tierlog build none", t_build)


if __name__ == "__main__":
    main()
