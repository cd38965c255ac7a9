"""The local log: append, sequential read, recovery scan and random lookups.

Prints ``name: value unit (ratio vs baseline)``; each baseline is measured in the same run on
the same files. The machines are shared and noisy, so the two throughput comparisons are
paired trials: the baseline and the log alternate in short rounds (which one goes first
alternates too), each round gives one ratio, and the figures printed are medians -- of the
per-round throughputs for each side and of the per-round ratios. A round disturbed by
another tenant or by a writeback stall shows up on one side only and is outvoted.

* append of 16 KiB batches through ``Log.append`` vs ``os.write`` of the same bytes to a
  file, in rounds of 16 MiB per side (4 MiB with ``BENCH_QUICK``), so both see the same
  page-cache and writeback conditions;
* sequential ``Log.read`` of the whole log (1 MiB fetches, following the offsets) vs
  ``os.pread`` of the segment file in 1 MiB chunks, one whole pass per side per round. The
  offsets to fetch are found in an untimed first pass (a consumer's batch walk over the
  fetched bytes is not the log's work);
* recovery of one segment (``LogSegment.recover``: CRC of every batch, index rebuild), in MB/s
  against the 500 MB/s goal, file in the page cache;
* random ``Log.read(offset)`` lookups per second vs ``os.pread`` of a batch at a random
  batch position.

Sizes: a 1 GiB log; ``BENCH_QUICK=1`` uses 128 MiB. Runs in well under a minute.

    .venv/bin/python bench/bench_log.py
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.records.default_records import build_batch

QUICK = bool(os.environ.get("BENCH_QUICK"))
LOG_BYTES = (128 if QUICK else 1024) << 20
BATCH_BYTES = 16 << 10
# Paired rounds: enough of them for a robust median, each long enough to mean something.
CHUNK_BATCHES = 256 if QUICK else 1024  # batches per side per append round (4 / 16 MiB)
FETCH_BYTES = 1 << 20
READ_ROUNDS = 31 if QUICK else 9  # whole passes per side of the sequential read benchmark
LOOKUPS = 20_000 if QUICK else 100_000

_LENGTH = struct.Struct(">qi")
_DELTA = struct.Struct(">i")


def report(name: str, value: float, unit: str, ratio: float | None = None, goal: str = "") -> None:
    tail = f" ({ratio:.2f} vs baseline{', goal ' + goal if goal else ''})" if ratio else ""
    print(f"{name}: {value:,.1f} {unit}{tail}", flush=True)


def make_batch(now_ms: int) -> bytes:
    """One ~16 KiB uncompressed batch of 100-byte records, not idempotent."""
    value = os.urandom(100)
    records = [(now_ms, None, value)] * 140
    batch = build_batch(records)
    while len(batch) < BATCH_BYTES - 120:
        records.append((now_ms, None, value))
        batch = build_batch(records)
    return batch


def paired(raw: list[float], logged: list[float]) -> tuple[float, float, float]:
    """Median seconds per round of each side and the median of the per-round ratios
    (baseline time / log time: 1.0 means as fast as the baseline)."""
    ratios = [r / w for r, w in zip(raw, logged, strict=True)]
    return statistics.median(raw), statistics.median(logged), statistics.median(ratios)


def bench_append(dir: Path, batch: bytes) -> Log:
    config = LogConfig().with_overrides({"segment.bytes": str(LOG_BYTES + (64 << 20))})
    log = Log.open(dir / "bench-0", config)
    raw_path = dir / "raw.log"
    fd = os.open(raw_path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
    rounds = LOG_BYTES // len(batch) // CHUNK_BATCHES
    raw_times: list[float] = []
    log_times: list[float] = []
    append = log.append
    write = os.write
    chunk = range(CHUNK_BATCHES)
    clock = time.perf_counter
    for i in range(rounds):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            if side == 0:
                t0 = clock()
                for _ in chunk:
                    write(fd, batch)
                raw_times.append(clock() - t0)
            else:
                t0 = clock()
                for _ in chunk:
                    append(batch)
                log_times.append(clock() - t0)
    os.close(fd)
    raw_path.unlink()
    raw_time, log_time, ratio = paired(raw_times, log_times)
    mb = CHUNK_BATCHES * len(batch) / 1e6
    report("append 16KiB batches (os.write)", mb / raw_time, "MB/s")
    report("append 16KiB batches (Log.append)", mb / log_time, "MB/s", ratio, "0.8")
    report("append 16KiB batches (Log.append)", CHUNK_BATCHES / log_time, "batches/s")
    log.update_high_watermark(log.log_end_offset)
    return log


def next_offset(data: bytes) -> int:
    """The offset after the last complete batch in a fetch (what a consumer computes): a walk
    over the 12-byte batch prefixes, then lastOffsetDelta of the last complete batch."""
    pos = 0
    last = -1
    end = len(data) - 61
    unpack = _LENGTH.unpack_from
    while pos <= end:
        size = unpack(data, pos)[1] + 12
        if pos + size > len(data):
            break
        last = pos
        pos += size
    base, _ = unpack(data, last)
    return int(base + _DELTA.unpack_from(data, last + 23)[0] + 1)


def bench_sequential_read(log: Log) -> None:
    segment = log.active_segment
    fd = segment.log.fd
    size = segment.size
    read = log.read
    offsets = []  # where a consumer's fetches start, found by the untimed first pass
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        offsets.append(offset)
        offset = next_offset(read(offset, FETCH_BYTES).records)
    positions = range(0, size, FETCH_BYTES)
    pread = os.pread
    clock = time.perf_counter
    raw_times: list[float] = []
    log_times: list[float] = []
    for i in range(READ_ROUNDS):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            if side == 0:
                t0 = clock()
                for p in positions:
                    pread(fd, FETCH_BYTES, p)
                raw_times.append(clock() - t0)
            else:
                t0 = clock()
                for o in offsets:
                    read(o, FETCH_BYTES)
                log_times.append(clock() - t0)
    raw_time, log_time, ratio = paired(raw_times, log_times)
    mb = size / 1e6
    report("sequential read 1MiB fetches (os.pread)", mb / raw_time, "MB/s")
    report("sequential read 1MiB fetches (Log.read)", mb / log_time, "MB/s", ratio, "0.8")


def bench_recovery(log: Log) -> None:
    segment = log.active_segment
    size = segment.size
    segment.log.read(0, 1)  # page cache: the file was just written and read
    t0 = time.perf_counter()
    truncated = segment.recover()
    elapsed = time.perf_counter() - t0
    assert truncated == 0
    report(
        f"recovery scan of a {size >> 20} MiB segment (LogSegment.recover)",
        size / 1e6 / elapsed,
        "MB/s",
        size / 1e6 / elapsed / 500,
        "1.0 = 500 MB/s",
    )
    segment.resize_indexes(log.config.max_index_size)


def bench_random_reads(log: Log) -> None:
    rng = random.Random(1)
    end = log.log_end_offset
    offsets = [rng.randrange(end) for _ in range(LOOKUPS)]
    segment = log.active_segment
    positions = [h.position for h in segment.log.batches_from(0, buffer_size=1 << 20)]
    picks = [rng.choice(positions) for _ in range(LOOKUPS)]
    fd = segment.log.fd
    t0 = time.perf_counter()
    for p in picks:
        os.pread(fd, BATCH_BYTES, p)
    t1 = time.perf_counter()
    read = log.read
    for o in offsets:
        read(o, 1)
    t2 = time.perf_counter()
    raw_rate = LOOKUPS / (t1 - t0)
    rate = LOOKUPS / (t2 - t1)
    report("random 16KiB reads at batch positions (os.pread)", raw_rate, "reads/s")
    report(
        f"random read(offset) on a {log.size_in_bytes >> 20} MiB log (Log.read)",
        rate,
        "lookups/s",
        rate / raw_rate,
    )


def main() -> int:
    base = Path(tempfile.mkdtemp(prefix="bench-log-"))
    try:
        batch = make_batch(int(time.time() * 1000))
        log = bench_append(base, batch)
        bench_sequential_read(log)
        bench_random_reads(log)
        bench_recovery(log)
        log.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
