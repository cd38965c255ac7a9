"""The C heap's thresholds for fetch buffers (glibc ``mallopt``; tierlog, no Kafka analogue).

A fetch response holds each partition's records as one ``bytes`` of up to
``max.partition.fetch.bytes`` (1 MiB by default) read with ``pread``, all of them alive until
the socket took them. glibc gives such blocks their own ``mmap`` (past a threshold that only
grows after a free), and gives memory freed at the top of the heap back to the kernel past
``M_TRIM_THRESHOLD``: with six 1 MiB partitions a response, every response was new pages that
the kernel had to fault in and zero -- measured, six partitions cost 1.3-1.4x the broker CPU
per 100 MB of one, and 0.055 instead of 0.100 CPU-s per 100 MB with the thresholds below.

So the broker keeps blocks up to :data:`HEAP_BLOCK_BYTES` on the heap and up to twice that of
free heap before trimming: at most that much more resident memory after a burst of fetches,
in exchange for no page faults on the fetch path. A threshold given in the environment
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``: glibc's own tunables) is left as set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["HEAP_BLOCK_BYTES", "keep_fetch_buffers_on_heap"]

#: Blocks up to this size come from the heap (glibc's largest allowed mmap threshold on 64-bit).
HEAP_BLOCK_BYTES = 32 << 20

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_fetch_buffers_on_heap(block_bytes: int = HEAP_BLOCK_BYTES) -> str:
    """Set the thresholds (module docstring); what was done, for the startup log."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        return "malloc thresholds: as set in the environment"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "malloc thresholds: not glibc, left as they are"
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, block_bytes) != 1 or (
        mallopt(_M_TRIM_THRESHOLD, 2 * block_bytes) != 1
    ):
        return "malloc thresholds: refused by the C library, left as they are"
    return (
        f"malloc thresholds: blocks up to {block_bytes >> 20} MiB on the heap, "
        f"{2 * block_bytes >> 20} MiB of free heap kept (fetch buffers without page faults)"
    )
