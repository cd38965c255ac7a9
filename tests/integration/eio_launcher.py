"""``tierlog`` whose file I/O under chosen paths fails with EIO, as a failing disk's does, for
the resource-exhaustion tests (run as ``python -m tests.integration.eio_launcher serve ...``;
otherwise the real broker).

The file ``eio`` in the directory ``$TIERLOG_TEST_FAULTS`` lists paths, one per line; while it
does, every positional read or write, ``write``, ``fsync`` and ``fdatasync`` of a file
descriptor whose file lies under one of them raises ``OSError(EIO)`` before doing anything (the
kernel's answer when a disk fails a request). Removing the file or emptying it heals the disk.
Device-mapper's ``error`` target would fail the block device itself, but a container has no
``/dev/mapper``: the failure is injected at the system-call wrappers the log uses instead
(``os.pread``, ``os.preadv``, ``os.pwrite``, ``os.pwritev``; ``tierlog.log.file_records``).
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

FAULTS = Path(os.environ.get("TIERLOG_TEST_FAULTS", "/nonexistent"))


def _failing(fd: int) -> bool:
    try:
        prefixes = [p for p in (FAULTS / "eio").read_text().splitlines() if p.strip()]
    except OSError:
        return False
    if not prefixes:
        return False
    try:
        path = str(Path(f"/proc/self/fd/{fd}").readlink())
    except OSError:
        return False
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _hook(name: str) -> None:
    real = getattr(os, name)

    def hooked(fd: int, *args: Any) -> Any:
        if _failing(fd):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, *args)

    hooked.__name__ = name
    setattr(os, name, hooked)


for _name in ("pread", "preadv", "pwrite", "pwritev", "write", "fsync", "fdatasync"):
    _hook(_name)

if __name__ == "__main__":
    from tierlog.cli import main

    sys.exit(main(sys.argv[1:]))
