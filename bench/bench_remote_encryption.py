"""The cost of encrypting remote objects at rest (AES-256-GCM, ``rsm.config.encryption.*``),
against the same store without encryption, same run, same bytes, on a ``file://`` store:

* copy: CPU seconds of this process per 100 MB copied, and wall MB/s (the unencrypted copy
  takes the kernel's copy path; an encrypted one must pass the bytes through AES-GCM);
* cold read of the whole segment by a fresh RemoteStorageManager (nothing cached): MB/s;
* ranged reads of 1 MiB at random positions: reads/s (each: one object range, a tag check per
  chunk touched).

The process takes the broker's malloc thresholds (``server/malloc_tuning.py``) first.
A 256 MiB segment of incompressible batches (64 MiB with ``BENCH_QUICK``), 1 MiB chunks.

    .venv/bin/python bench/bench_remote_encryption.py
"""

from __future__ import annotations

import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_tiered_copy import SIZE, TP, make_segment  # noqa: E402

from tierlog.server.malloc_tuning import keep_fetch_buffers_on_heap  # noqa: E402
from tierlog.tiered import RemoteLogSegmentId, RemoteLogSegmentMetadata  # noqa: E402
from tierlog.tiered.storage import PyArrowRemoteStorageManager  # noqa: E402
from tierlog.tiered.storage.object_encryption import MasterKey  # noqa: E402

RANGES = 200


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _metadata() -> RemoteLogSegmentMetadata:
    import uuid

    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP, uuid.uuid4()), 0, 99, 0, 0, 0, SIZE, {0: 0}
    )


def run(root: Path, seg: object, key: MasterKey | None) -> dict[str, float]:
    uri = f"file://{root}"
    rsm = PyArrowRemoteStorageManager(uri, master_key=key)
    md = _metadata()
    c0, t0 = _cpu(), time.perf_counter()
    rsm.copy_log_segment_data(md, seg)  # type: ignore[arg-type]
    copy_cpu, copy_wall = _cpu() - c0, time.perf_counter() - t0
    cold = PyArrowRemoteStorageManager(uri, master_key=key)
    t0 = time.perf_counter()
    data = cold.fetch_log_segment(md, 0)
    read_wall = time.perf_counter() - t0
    assert len(data) == SIZE
    rnd = random.Random(1)
    t0 = time.perf_counter()
    for _ in range(RANGES):
        a = rnd.randrange(SIZE - (1 << 20))
        assert len(cold.fetch_log_segment(md, a, a + (1 << 20) - 1)) == 1 << 20
    ranged = RANGES / (time.perf_counter() - t0)
    mb = SIZE / 1e6
    return {
        "copy_cpu_per_100mb": copy_cpu / mb * 100,
        "copy_mb_s": mb / copy_wall,
        "read_mb_s": mb / read_wall,
        "ranged_per_s": ranged,
    }


def main() -> int:
    # The broker's own C heap thresholds (it sets them at startup): 1 MiB chunk buffers then
    # come from the heap instead of fresh page-faulting mmaps, which would quadruple the cost
    # of a decrypted ranged read here but not in the broker.
    keep_fetch_buffers_on_heap()
    with tempfile.TemporaryDirectory(prefix="bench-encryption-") as d:
        work = Path(d)
        seg = make_segment(work / "segment")
        plain = run(work / "plain", seg, None)
        enc = run(work / "encrypted", seg, MasterKey(os.urandom(32)))
    print(f"segment: {SIZE >> 20} MiB, chunks of 1 MiB, file:// store", flush=True)
    rows = [
        ("copy CPU", "copy_cpu_per_100mb", "CPU-s per 100 MB", "{:.3f}"),
        ("copy", "copy_mb_s", "MB/s", "{:,.0f}"),
        ("cold read, whole segment", "read_mb_s", "MB/s", "{:,.0f}"),
        ("ranged reads of 1 MiB", "ranged_per_s", "reads/s", "{:,.0f}"),
    ]
    for name, k, unit, fmt in rows:
        print(
            f"{name} encrypted: {fmt.format(enc[k])} {unit} "
            f"({enc[k] / plain[k]:.2f} vs unencrypted {fmt.format(plain[k])})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
