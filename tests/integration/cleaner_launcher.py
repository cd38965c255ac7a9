"""``tierlog`` that SIGKILLs itself at a chosen step of the log cleaner's swap, for crash tests
(run as ``python -m tests.integration.cleaner_launcher serve ...``; otherwise the real broker).

The steps of the swap (:meth:`tierlog.log.local_log.LocalLog.replace_segments`), by kind:

* ``cleaned-to-swap``: a new segment's file renamed from ``.cleaned`` to ``.swap``;
* ``to-deleted``: a replaced segment's file renamed to ``.deleted``;
* ``unlink-deleted``: a ``.deleted`` file removed;
* ``swap-to-final``: a new segment's file renamed from ``.swap`` to its final name;
* ``other``: any other rename or unlink of such a file (an aborted clean's ``.cleaned``).

The hook acts while the file ``kill-at-step`` in the directory ``$TIERLOG_TEST_FAULTS`` holds
``<token> <kind> <n>``: the n-th step of that kind counted since that content appeared kills
the process before the step is done, after writing ``killed`` (``<token> <kind> <n> <file>``),
so the test knows where it died. The process dies with SIGKILL, as a crash: no cleanup runs.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys
import threading
from pathlib import Path
from typing import Any

FAULTS = Path(os.environ.get("TIERLOG_TEST_FAULTS", "/nonexistent"))
_SUFFIXES = (".cleaned", ".swap", ".deleted")
_lock = threading.Lock()
_armed: dict[str, Any] = {"content": None, "count": 0}

_replace = pathlib.Path.replace
_unlink = pathlib.Path.unlink


def _is_step(*paths: Any) -> bool:
    return any(str(p).endswith(_SUFFIXES) for p in paths)


def _kind(source: Path, target: Any) -> str:
    src, dst = str(source), str(target) if target is not None else None
    if dst is None:
        return "unlink-deleted" if src.endswith(".deleted") else "other"
    if src.endswith(".cleaned") and dst.endswith(".swap"):
        return "cleaned-to-swap"
    if dst.endswith(".deleted"):
        return "to-deleted"
    if src.endswith(".swap") and not dst.endswith(_SUFFIXES):
        return "swap-to-final"
    return "other"


def _step(kind: str, path: Path) -> None:
    try:
        content = (FAULTS / "kill-at-step").read_text().strip()
    except OSError:
        return
    with _lock:
        if content != _armed["content"]:
            _armed["content"] = content
            _armed["count"] = 0
        token, wanted, n = content.split()
        if kind != wanted:
            return
        _armed["count"] += 1
        if _armed["count"] == int(n):
            (FAULTS / "killed").write_text(f"{token} {kind} {n} {path.name}")
            os.kill(os.getpid(), signal.SIGKILL)


def _hooked_replace(self: Path, target: Any) -> Any:
    if _is_step(self, target):
        _step(_kind(self, target), self)
    return _replace(self, target)


def _hooked_unlink(self: Path, missing_ok: bool = False) -> None:
    if _is_step(self):
        _step(_kind(self, None), self)
    _unlink(self, missing_ok=missing_ok)


pathlib.Path.replace = _hooked_replace  # type: ignore[method-assign,assignment]
pathlib.Path.unlink = _hooked_unlink  # type: ignore[method-assign]

if __name__ == "__main__":
    from tierlog.cli import main

    sys.exit(main(sys.argv[1:]))
