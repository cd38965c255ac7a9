"""The log cleaner: MB/s of log cleaned vs a raw sequential read + write of the same bytes.

Prints ``name: value unit (ratio vs baseline)``, the baseline measured in the same run on the
same files, in paired rounds as bench_log.py does (the two sides alternate, which goes first
alternates too, the figures are medians of the per-round throughputs and ratios):

* cleaner: one ``Cleaner.do_clean`` round over a fresh copy of a dirty log -- offset map of
  the whole log, every segment rewritten, the cleaned segments flushed and swapped in -- with
  the log's bytes divided by the round's time;
* cleaning per CPU second: the same rounds' process CPU time (load on a shared machine
  slows the wall clock of both sides, fsyncs most, but not this);
* baseline: ``os.pread`` of every segment file in 1 MiB chunks and ``os.write`` of the same
  bytes to a new file, then one ``fsync``: what a clean that kept everything would cost at
  the speed of the disk and page cache.

The log: uncompressed ~16 KiB batches of 140 records, random 100-byte values on 1,000 keys
(and a second log of such records in zstd batches: random values barely compress, so both
logs hold about as many records per MB), segments of 16 MiB; all in the page cache. Goal: a
ratio of 0.5 or more. Sizes: 64 MiB; ``BENCH_QUICK=1`` uses 16 MiB.

    .venv/bin/python bench/bench_cleaner.py
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from tierlog.log.cleaner import Cleaner
from tierlog.log.log import Log
from tierlog.log.log_cleaner_manager import LogCleanerManager
from tierlog.log.log_config import LogConfig
from tierlog.log.offset_map import SkimpyOffsetMap
from tierlog.records.default_records import build_batch

QUICK = bool(os.environ.get("BENCH_QUICK"))
LOG_BYTES = (16 if QUICK else 64) << 20
ROUNDS = 3 if QUICK else 5
KEYS = 1000
RECORDS_PER_BATCH = 140
CHUNK = 1 << 20


def report(name: str, value: float, unit: str, ratio: float | None = None, goal: str = "") -> None:
    tail = f" ({ratio:.2f} vs baseline{', goal ' + goal if goal else ''})" if ratio else ""
    print(f"{name}: {value:,.1f} {unit}{tail}", flush=True)


def config(compression: str) -> LogConfig:
    return LogConfig().with_overrides(
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(16 << 20),
            "min.cleanable.dirty.ratio": "0.01",
            "compression.type": compression,
        }
    )


def make_log(dir: Path, codec: int) -> int:
    """A dirty compacted log of about LOG_BYTES; returns its size in bytes."""
    lg = Log.open(dir, config("producer"))
    rng = random.Random(7)
    now = int(time.time() * 1000)
    while lg.size_in_bytes < LOG_BYTES:
        records = [
            (now, b"key-%06d" % rng.randrange(KEYS), rng.randbytes(100))
            for _ in range(RECORDS_PER_BATCH)
        ]
        lg.append(build_batch(records, codec))
    lg.roll()
    size = lg.size_in_bytes
    lg.close()
    return size


CPU_TIMES: list[float] = []


def clean_copy(src: Path, work: Path) -> float:
    """Seconds of one cleaning round over a copy of ``src`` (the copy is not timed); its CPU
    seconds go to CPU_TIMES."""
    dst = work / src.name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    lg = Log.open(dst, config("producer"), had_clean_shutdown=True)
    lg.update_high_watermark(lg.log_end_offset)
    manager = LogCleanerManager([work], lambda: {("bench", 0): lg})
    cleaner = Cleaner(SkimpyOffsetMap(128 << 20))
    t0, c0 = time.perf_counter(), time.process_time()
    cleanable = manager.grab_filthiest_compacted_log()
    assert cleanable is not None
    cleaner.clean(cleanable)
    elapsed = time.perf_counter() - t0
    CPU_TIMES.append(time.process_time() - c0)
    lg.close()
    shutil.rmtree(dst)
    return elapsed


def raw_copy(src: Path, work: Path) -> float:
    """Seconds to read every segment file of ``src`` and write the bytes to one file."""
    files = sorted(src.glob("*.log"))
    out = work / "raw.out"
    t0 = time.perf_counter()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for f in files:
            rfd = os.open(f, os.O_RDONLY)
            try:
                pos = 0
                while chunk := os.pread(rfd, CHUNK, pos):
                    os.write(fd, chunk)
                    pos += len(chunk)
            finally:
                os.close(rfd)
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - t0
    out.unlink()
    return elapsed


def bench(name: str, codec: int, tmp: Path) -> None:
    src = tmp / f"{name}-0"
    size = make_log(src, codec)
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    raw_times: list[float] = []
    clean_times: list[float] = []
    CPU_TIMES.clear()
    for r in range(ROUNDS):
        if r % 2:
            clean_times.append(clean_copy(src, work))
            raw_times.append(raw_copy(src, work))
        else:
            raw_times.append(raw_copy(src, work))
            clean_times.append(clean_copy(src, work))
    ratios = [raw / clean for raw, clean in zip(raw_times, clean_times, strict=True)]
    mb = size / 1e6
    report(f"{name} raw read+write", mb / statistics.median(raw_times), "MB/s")
    report(
        f"{name} cleaning",
        mb / statistics.median(clean_times),
        "MB/s",
        statistics.median(ratios),
        ">= 0.5",
    )
    # The CPU the round used (the process's, kernel included): what the shared machine's
    # load does not change, unlike the wall-clock figures above.
    report(f"{name} cleaning per CPU second", mb / statistics.median(CPU_TIMES), "MB/s")


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-cleaner-"))
    try:
        bench("uncompressed", 0, tmp)
        bench("zstd", 4, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
