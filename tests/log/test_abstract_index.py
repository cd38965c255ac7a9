"""The pure index search functions against a bisect oracle (Kafka checks against a TreeMap)."""

from __future__ import annotations

import bisect
import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.log.abstract_index import (
    largest_lower_bound_slot,
    round_down_to_exact_multiple,
    smallest_upper_bound_slot,
    warm_entries,
)

INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


def offset_index_bytes(keys: list[int]) -> bytes:
    """8-byte entries: key, then a dummy position (the key * 10)."""
    return b"".join(struct.pack(">ii", k, (k * 10) % 2**31) for k in keys)


def time_index_bytes(keys: list[int]) -> bytes:
    """12-byte entries: int64 key, then an int32 value."""
    return b"".join(struct.pack(">qi", k, i) for i, k in enumerate(keys))


def expected_lower(keys: list[int], target: int) -> int:
    return bisect.bisect_right(keys, target) - 1


def expected_upper(keys: list[int], target: int) -> int:
    i = bisect.bisect_left(keys, target)
    return i if i < len(keys) else -1


sorted_unique_int32 = st.lists(st.integers(-(2**31), 2**31 - 1), unique=True, max_size=60).map(
    sorted
)


@settings(max_examples=200, deadline=None)
@given(sorted_unique_int32, st.integers(-(2**31) - 5, 2**31 + 5))
def test_search_matches_bisect_small(keys: list[int], target: int) -> None:
    buf = offset_index_bytes(keys)
    assert largest_lower_bound_slot(buf, len(keys), target, 8, 0, INT32) == expected_lower(
        keys, target
    )
    assert smallest_upper_bound_slot(buf, len(keys), target, 8, 0, INT32) == expected_upper(
        keys, target
    )


@settings(max_examples=100, deadline=None)
@given(sorted_unique_int32, st.data())
def test_search_hits_every_present_key(keys: list[int], data: st.DataObject) -> None:
    if not keys:
        return
    buf = offset_index_bytes(keys)
    i = data.draw(st.integers(0, len(keys) - 1))
    assert largest_lower_bound_slot(buf, len(keys), keys[i], 8, 0, INT32) == i
    assert smallest_upper_bound_slot(buf, len(keys), keys[i], 8, 0, INT32) == i


def test_search_across_warm_and_cold_sections() -> None:
    rng = random.Random(7)
    n = 3 * warm_entries(8) + 17  # both sections and their boundary
    keys = sorted(rng.sample(range(0, 50 * n), n))
    buf = offset_index_bytes(keys)
    first_hot = n - 1 - warm_entries(8)
    targets = [keys[0] - 1, keys[-1] + 1, keys[first_hot], keys[first_hot] - 1]
    targets += [keys[first_hot] + 1, keys[first_hot - 1], keys[first_hot + 1]]
    targets += [rng.randrange(keys[0] - 10, keys[-1] + 10) for _ in range(2000)]
    targets += rng.sample(keys, 500)
    for t in targets:
        assert largest_lower_bound_slot(buf, n, t, 8, 0, INT32) == expected_lower(keys, t), t
        assert smallest_upper_bound_slot(buf, n, t, 8, 0, INT32) == expected_upper(keys, t), t


def test_search_by_value_at_key_offset() -> None:
    keys = list(range(0, 5000, 3))
    buf = offset_index_bytes(keys)  # value = key * 10, also sorted
    values = [k * 10 for k in keys]
    for t in (-1, 0, 1, 29, 30, 31, values[-1], values[-1] + 1, 25_000):
        assert largest_lower_bound_slot(buf, len(keys), t, 8, 4, INT32) == expected_lower(values, t)
        assert smallest_upper_bound_slot(buf, len(keys), t, 8, 4, INT32) == expected_upper(
            values, t
        )


def test_search_twelve_byte_entries_with_int64_keys() -> None:
    rng = random.Random(3)
    n = 2 * warm_entries(12) + 5
    keys = sorted(rng.sample(range(1_700_000_000_000, 1_700_000_000_000 + 100 * n), n))
    buf = time_index_bytes(keys)
    for t in [keys[0] - 1, keys[-1] + 1, *rng.sample(keys, 200)] + [
        rng.randrange(keys[0], keys[-1]) for _ in range(500)
    ]:
        assert largest_lower_bound_slot(buf, n, t, 12, 0, INT64) == expected_lower(keys, t)
        assert smallest_upper_bound_slot(buf, n, t, 12, 0, INT64) == expected_upper(keys, t)


def test_search_only_looks_at_the_first_entries() -> None:
    # A preallocated buffer: valid entries then zeros. Only `entries` slots count.
    keys = [10, 20, 30]
    buf = offset_index_bytes(keys) + bytes(8 * 100)
    assert largest_lower_bound_slot(buf, 3, 1000, 8, 0, INT32) == 2
    assert smallest_upper_bound_slot(buf, 3, 31, 8, 0, INT32) == -1
    assert largest_lower_bound_slot(buf, 2, 1000, 8, 0, INT32) == 1


def test_empty() -> None:
    assert largest_lower_bound_slot(b"", 0, 5, 8, 0, INT32) == -1
    assert smallest_upper_bound_slot(b"", 0, 5, 8, 0, INT32) == -1


def test_round_down_to_exact_multiple() -> None:
    assert round_down_to_exact_multiple(67, 8) == 64
    assert round_down_to_exact_multiple(64, 8) == 64
    assert round_down_to_exact_multiple(7, 8) == 0
    assert round_down_to_exact_multiple(-1, 8) == 0
    assert warm_entries(8) == 1024
    assert warm_entries(12) == 682
