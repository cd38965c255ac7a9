"""The C heap's thresholds for fetch buffers, in a child process (they are process-wide):
1 MiB blocks come from the heap, not from an mmap of their own, and freeing them gives no
memory back to the kernel; glibc's own environment tunables win."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

CHILD = r"""
import ctypes, sys
from tierlog.server.malloc_tuning import keep_fetch_buffers_on_heap

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tune":
    print(keep_fetch_buffers_on_heap())
before = libc.mallinfo2().hblks
blocks = [bytearray(1 << 20) for _ in range(6)]  # one fetch of six partitions
mapped = libc.mallinfo2().hblks - before
arena = libc.mallinfo2().arena
del blocks
print(mapped, arena - libc.mallinfo2().arena)
"""


def run_child(mode: str, env: dict[str, str] | None = None) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        env={**os.environ, "PYTHONPATH": SRC, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.splitlines()


def test_fetch_sized_blocks_stay_on_the_heap_and_are_not_trimmed() -> None:
    # glibc's defaults: each 1 MiB block is an mmap of its own.
    assert run_child("plain")[-1].split()[0] == "6"
    said, figures = run_child("tune")
    assert said.startswith("malloc thresholds: blocks up to 32 MiB on the heap")
    mapped, trimmed = (int(x) for x in figures.split())
    assert mapped == 0  # from the heap
    assert trimmed == 0  # freed, kept for the next response


def test_thresholds_set_in_the_environment_are_left_as_set() -> None:
    said, figures = run_child("tune", {"MALLOC_MMAP_THRESHOLD_": "131072"})
    assert said == "malloc thresholds: as set in the environment"
    assert figures.split()[0] == "6"  # the environment's threshold holds
