"""The real parts the suite drives (SeaweedFS, pyspark with Java, the C decoder, ...): what a
test does when one is missing, and the record of which ones a run used.

``scripts/check`` (so ``make test`` and CI) sets ``TIERLOG_REQUIRE_REAL_PARTS=1``: a missing
part then *fails* the tests that need it, and any skip at all fails unless its reason starts
with :data:`BY_DESIGN` (a skip that a comment next to it justifies). Without the variable (a
developer without the spark extra, say) a missing part skips with a reason that names it.

Fixtures that start or load a part call :func:`used`; the end of the run prints the list
(tests/conftest.py, ``pytest_terminal_summary``), so a log shows what was really exercised.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

REQUIRED = os.environ.get("TIERLOG_REQUIRE_REAL_PARTS") == "1"
BY_DESIGN = "by design: "

# part -> what was used (version, path); filled while the session runs.
USED: dict[str, str] = {}


def missing(part: str, why: str) -> NoReturn:
    """A real part a test needs is not here: fail under ``TIERLOG_REQUIRE_REAL_PARTS=1``,
    skip otherwise."""
    message = f"real part missing: {part}: {why}"
    if REQUIRED:
        pytest.fail(f"{message} (TIERLOG_REQUIRE_REAL_PARTS=1: .ci/run and make test install it)")
    pytest.skip(message)


def import_module(name: str, part: str) -> ModuleType:
    """Import a real part's module at a test module's top; when it is missing, fail the
    collection under ``TIERLOG_REQUIRE_REAL_PARTS=1``, skip the module otherwise."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        message = f"real part missing: {part}: cannot import {name} ({e})"
        if REQUIRED:
            raise ImportError(f"{message} (TIERLOG_REQUIRE_REAL_PARTS=1)") from e
        pytest.skip(message, allow_module_level=True)


def used(part: str, detail: str) -> None:
    USED.setdefault(part, detail)


def skip_is_justified(reason: str) -> bool:
    return reason.startswith(BY_DESIGN)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (created) for the block: a disk that fills up
    for real. Needs root (``make test`` runs as root here and in CI)."""
    path.mkdir(parents=True)
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        missing("a tmpfs mount", f"mount -t tmpfs failed: {mount.stderr.strip()}")
    used("tmpfs", f"mount -t tmpfs -o size={size}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
