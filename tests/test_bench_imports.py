"""Every benchmark under bench/ still imports: they reuse test helpers (SeaweedFS, tiering,
wire clients), so moving a helper must not silently break them. Importing runs nothing:
each bench starts only under ``__main__``."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import pytest

BENCHES = sorted(p.stem for p in (Path(__file__).parents[1] / "bench").glob("*.py"))


@pytest.mark.parametrize("name", BENCHES)
def test_bench_imports(name: str) -> None:
    with warnings.catch_warnings():
        # kafka-python 3.0.12 uses importlib.resources.read_text, deprecated in 3.11
        warnings.simplefilter("ignore", DeprecationWarning)
        importlib.import_module(f"bench.{name}")
