"""Compact integer columns for the remote log metadata cache (pure Python, no numpy).

:class:`IntColumn` stores a sequence of int64 values as ``base + delta`` with ``delta`` in the
narrowest unsigned ``array`` type that holds ``max - min`` of the column ("frame of
reference"). Values of one chunk of neighbouring segments (offsets, timestamps, sizes, broker
ids) sit close together, so most columns need 1, 2 or 4 bytes per value instead of 8. A value
that does not fit widens (or re-bases) the column: an O(n) rebuild that happens a handful of
times per chunk at most.

Not thread-safe.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

# Unsigned typecodes by width, with the exclusive upper bound of the deltas they hold.
_TYPECODES: tuple[tuple[str, int], ...] = (
    ("B", 1 << 8),
    ("H", 1 << 16),
    ("I", 1 << 32),
    ("Q", 1 << 64),
)
_LIMIT = dict(_TYPECODES)
assert array("I").itemsize == 4 and array("Q").itemsize == 8


def typecode_for_span(span: int) -> str:
    """The narrowest unsigned typecode that holds deltas ``0..span``."""
    for tc, limit in _TYPECODES:
        if span < limit:
            return tc
    raise OverflowError(f"span {span} does not fit 64 bits")


class IntColumn:
    """A list of ints stored as ``base + array[i]`` in the narrowest unsigned array type."""

    __slots__ = ("arr", "base")

    def __init__(self, values: Sequence[int] = ()) -> None:
        if values:
            base = min(values)
            tc = typecode_for_span(max(values) - base)
            self.base = base
            self.arr = array(tc, [v - base for v in values])
        else:
            self.base = 0
            self.arr = array("B")

    @classmethod
    def from_raw(cls, base: int, arr: array[int]) -> IntColumn:
        col = cls.__new__(cls)
        col.base = base
        col.arr = arr
        return col

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, i: int) -> int:
        return self.base + self.arr[i]

    def values(self) -> list[int]:
        base = self.base
        if base == 0:
            return list(self.arr)
        return [base + d for d in self.arr]

    def _fits(self, v: int) -> bool:
        d = v - self.base
        return 0 <= d < _LIMIT[self.arr.typecode]

    def _rebuild(self, values: list[int]) -> None:
        base = min(values)
        self.base = base
        self.arr = array(typecode_for_span(max(values) - base), [v - base for v in values])

    def __setitem__(self, i: int, v: int) -> None:
        if self._fits(v):
            self.arr[i] = v - self.base
        else:
            vals = self.values()
            vals[i] = v
            self._rebuild(vals)

    def insert(self, i: int, v: int) -> None:
        if self._fits(v):
            self.arr.insert(i, v - self.base)
        elif not self.arr:
            self._rebuild([v])
        else:
            vals = self.values()
            vals.insert(i, v)
            self._rebuild(vals)

    def append(self, v: int) -> None:
        self.insert(len(self.arr), v)

    def extend(self, values: Iterable[int]) -> None:
        for v in values:
            self.append(v)

    def __delitem__(self, i: int) -> None:
        del self.arr[i]

    def compact(self) -> None:
        """Drop the array's over-allocation (appends keep ~6% spare room)."""
        self.arr = array(self.arr.typecode, self.arr)

    # Sorted columns only ---------------------------------------------------------------

    def bisect_left(self, v: int, lo: int = 0, hi: int | None = None) -> int:
        d = v - self.base
        n = len(self.arr) if hi is None else hi
        if d <= 0:
            return lo
        if d >= _LIMIT[self.arr.typecode]:
            return n
        return bisect_left(self.arr, d, lo, n)

    def bisect_right(self, v: int, lo: int = 0, hi: int | None = None) -> int:
        d = v - self.base
        n = len(self.arr) if hi is None else hi
        if d < 0:
            return lo
        if d >= _LIMIT[self.arr.typecode]:
            return n
        return bisect_right(self.arr, d, lo, n)

    def nbytes(self) -> int:
        return len(self.arr) * self.arr.itemsize
