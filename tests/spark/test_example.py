"""The README's example pipeline (``make example``) runs end to end: its own broker with tiered
storage, a day of events, Spark reading yesterday (remote segments straight from remote
storage), hourly results written to a topic and read back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import require_spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spark
@pytest.mark.slow
def test_daily_pipeline_runs_from_the_readme() -> None:
    require_spark()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "daily_pipeline.py"), "--tier-wait", "60"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{proc.stderr[-3000:]}"
    tiered = re.search(r"^3\. (\d+) segments are in remote storage", out, re.MULTILINE)
    assert tiered and int(tiered.group(1)) > 0, out
    assert "aggregated 200,000 views into hourly results" in out, out
    # 8 pages x 24 hours, every one visited with 200,000 random views.
    assert re.search(r"^5\. 192 hourly rows in page-views-hourly", out, re.MULTILINE), out
