"""quixstreams' own virtual environment, ``.cache/quixstreams-venv`` (ignored by git), from the
pinned tests/integration/quix/requirements.txt: every quixstreams 3.x needs confluent-kafka
< 2.13, the suite's venv pins confluent-kafka 2.16.1, so the quix app runs as a child process
of the other venv's Python.

``make test`` runs ``python -m tests.integration.quix_venv`` before the suite; the quix test
calls :func:`ensure` too, so a test run on its own makes the venv when it is missing. The venv
holds a copy of the requirements it was made from (``.requirements``): a change to the file
makes it anew. A venv that cannot be made (no network) fails the test through
``tests.real_parts.missing``."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

from tests.broker_process import ROOT

REQUIREMENTS = ROOT / "tests" / "integration" / "quix" / "requirements.txt"
VENV = ROOT / ".cache" / "quixstreams-venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".requirements"


class VenvError(Exception):
    """The venv could not be made: the failing command and the tail of its output."""


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-3000:]
        raise VenvError(f"{' '.join(argv)} exited with {done.returncode}:\n{tail}")


def up_to_date() -> bool:
    return PYTHON.exists() and STAMP.exists() and STAMP.read_text() == REQUIREMENTS.read_text()


def ensure() -> Path:
    """The venv's Python, after making the venv when it is missing or its requirements
    changed (one process at a time: a lock file beside the venv)."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / "quixstreams-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if up_to_date():
            return PYTHON
        shutil.rmtree(VENV, ignore_errors=True)
        _run(sys.executable, "-m", "venv", str(VENV))
        _run(str(PYTHON), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS))
        STAMP.write_text(REQUIREMENTS.read_text())
        return PYTHON


def version() -> str:
    done = subprocess.run(
        [str(PYTHON), "-c", "import importlib.metadata as m; print(m.version('quixstreams'), "
         "m.version('confluent-kafka'))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    quix, confluent = done.stdout.split()
    return f"quixstreams {quix} with confluent-kafka {confluent}"


if __name__ == "__main__":
    try:
        print(f"{ensure()}: {version()}")
    except VenvError as e:
        sys.exit(f"cannot make {VENV}: {e}")
