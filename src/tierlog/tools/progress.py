"""Progress bars of the slow commands (``remote verify`` of thousands of segments,
``dump-log`` of big files, a bulk ``produce``), with tqdm on stderr.

A bar shows only when stderr is a terminal (tqdm's ``disable=None``), so pipes, files and
tests get the same output as before, and never mixes into stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["bar", "progress"]

T = TypeVar("T")


def progress(items: Iterable[T], *, total: int | None, desc: str, unit: str) -> Iterator[T]:
    """``items``, with a bar of ``total`` ``unit``s on a terminal's stderr."""
    from tqdm import tqdm

    yield from tqdm(
        items, total=total, desc=desc, unit=unit, file=sys.stderr, disable=None, leave=False
    )


def bar(*, total: int, desc: str, unit: str = "B") -> Any:
    """A bar to ``update(n)`` by hand (bytes by default, scaled: kB, MB), as a context
    manager."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit == "B",
        file=sys.stderr,
        disable=None,
        leave=False,
    )
