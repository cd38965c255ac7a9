"""JBOD: moving a partition between two log dirs of one broker (AlterReplicaLogDirs).

Prints ``name: value unit (ratio vs baseline)``; the baseline is measured in the same run on
the same bytes:

* move: ``FutureLogs.get_or_create`` + ``copy_step`` rounds of 1 MiB (what the broker's
  mover runs in its thread) + the flush + ``replace_current_with_future_log``, in MB/s, vs a
  file-level copy of the partition directory (``shutil.copytree`` and an fsync of every file),
  which is what a move costs at least;
* swap pause: how long appends wait at the end of a move (the copy of the last chunk, the
  renames and the reopen), in ms, with 1 MiB left to copy; no baseline.

Rounds alternate the two sides (the machines are shared and noisy); the medians are printed.
Sizes: a 128 MiB log (``BENCH_QUICK=1``: 32 MiB).

    .venv/bin/python bench/bench_jbod.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.records.default_records import build_batch
from tierlog.server.replica_alter_log_dirs import CHUNK_BYTES, copy_step

QUICK = bool(os.environ.get("BENCH_QUICK"))
LOG_BYTES = (32 if QUICK else 128) << 20
ROUNDS = 3


def report(name: str, value: float, unit: str, ratio: float | None = None) -> None:
    tail = f" ({ratio:.2f} vs baseline)" if ratio else ""
    print(f"{name}: {value:,.1f} {unit}{tail}", flush=True)


def batch() -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(now, None, os.urandom(100))] * 140)


def copy_tree_fsync(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst)
    for p in dst.iterdir():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="bench-jbod-"))
    try:
        a, b = root / "a", root / "b"
        lm = LogManager([a, b], LogConfig().with_overrides({"segment.bytes": str(64 << 20)}))
        lm.startup()
        lm.create_topic("t", 1, {})
        lg = lm.get_log("t", 0)
        assert lg is not None
        data = batch()
        while lg.size_in_bytes < LOG_BYTES:
            lg.append(data)
        lg.flush()
        size_mb = lg.size_in_bytes / 1e6
        moves: list[float] = []
        copies: list[float] = []
        pauses: list[float] = []
        for r in range(ROUNDS):
            current = lm.get_log("t", 0)
            assert current is not None
            target = b if current.dir.parent == a else a
            # baseline: a file copy of the partition dir to the target dir
            t0 = time.perf_counter()
            copy_tree_fsync(current.dir, target / f"copy-{r}")
            copies.append(time.perf_counter() - t0)
            shutil.rmtree(target / f"copy-{r}")
            # the move
            t0 = time.perf_counter()
            future = lm.future_logs.get_or_create("t", 0, target)
            assert future is not None
            while current.log_end_offset - future.log_end_offset > CHUNK_BYTES // len(data) * 140:
                copy_step(current, future)
            current.flush()
            future.flush()
            p0 = time.perf_counter()  # appends would wait from here
            while copy_step(current, future) > 0:
                pass
            lm.future_logs.replace_current_with_future_log("t", 0)
            pauses.append(time.perf_counter() - p0)
            moves.append(time.perf_counter() - t0)
        lm.shutdown()
        move_s, copy_s = statistics.median(moves), statistics.median(copies)
        report("move of a partition between log dirs", size_mb / move_s, "MB/s", copy_s / move_s)
        report("file copy + fsync of the partition dir", size_mb / copy_s, "MB/s")
        report("swap pause (appends held), 1 MiB left", statistics.median(pauses) * 1000, "ms")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
