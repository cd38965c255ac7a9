"""Run every benchmark in bench/ and print its figures.

Each ``bench_*.py`` script prints lines ``name: value unit (ratio vs baseline)``, where the
baseline is measured in the same run (raw file write, raw socket, a peer), because the
machines are shared and noisy. ``python bench/run.py [NAME ...]`` runs a subset;
``BENCH_QUICK=1`` scales every benchmark down for a smoke run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    scripts = sorted(here.glob("bench_*.py"))
    if argv:
        scripts = [s for s in scripts if any(name in s.stem for name in argv)]
    failed = 0
    for script in scripts:
        print(f"== {script.stem}", flush=True)
        rc = subprocess.call([sys.executable, str(script)])
        if rc != 0:
            print(f"!! {script.stem} exited with {rc}", flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
