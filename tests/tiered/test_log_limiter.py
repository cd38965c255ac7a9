"""LogLimiter: a repeated failure logged once per key per interval."""

from __future__ import annotations

import pytest

from tierlog.tiered.log_limiter import LogLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_first_failure_is_logged_then_once_per_interval_with_the_count():
    clock = Clock()
    lim = LogLimiter(60.0, clock=clock)
    assert lim.admit("a") == 0
    for _ in range(119):  # twice a second for a minute
        clock.now += 0.5
        assert lim.admit("a") is None
    clock.now = 1060.0
    assert lim.admit("a") == 119  # the failures the line stands for, since the last one
    assert lim.admit("a") is None


def test_keys_are_independent():
    clock = Clock()
    lim = LogLimiter(60.0, clock=clock)
    assert lim.admit(("tp", "seg-1")) == 0
    assert lim.admit(("tp", "seg-2")) == 0
    assert lim.admit(("tp", "seg-1")) is None


def test_bounded_keys_forget_the_oldest():
    clock = Clock()
    lim = LogLimiter(60.0, max_keys=2, clock=clock)
    assert lim.admit(1) == 0
    assert lim.admit(2) == 0
    assert lim.admit(3) == 0  # 1 forgotten
    assert lim.admit(1) == 0
    assert lim.admit(3) is None


@pytest.mark.parametrize(("interval", "keys"), [(0, 1), (1, 0), (-1, 5)])
def test_bad_bounds_are_refused(interval, keys):
    with pytest.raises(ValueError, match="interval_s and max_keys must be positive"):
        LogLimiter(interval, max_keys=keys)
