"""The token bucket behind the copy and fetch quotas."""

from __future__ import annotations

import threading

import pytest

from tierlog.tiered.quota import UNLIMITED, TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_unlimited_never_throttles() -> None:
    bucket = TokenBucket(UNLIMITED)
    bucket.record(10**15)
    assert not bucket.is_quota_exceeded()
    assert bucket.try_acquire(10**15)
    assert bucket.wait_until_available(timeout=0)


def test_debt_is_paid_back_at_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000, clock=clock)
    assert not bucket.is_quota_exceeded()
    bucket.record(3000)  # a big copy: 2000 bytes of debt
    assert bucket.is_quota_exceeded()
    assert bucket.throttle_time_s() == pytest.approx(2.0)
    clock.now += 1.5
    assert bucket.is_quota_exceeded()
    clock.now += 0.5
    assert not bucket.is_quota_exceeded()
    clock.now += 100  # idle time saves up at most one burst
    assert bucket.available() == pytest.approx(1000)


def test_try_acquire_takes_only_what_is_there() -> None:
    clock = FakeClock()
    bucket = TokenBucket(100, burst=100, clock=clock)
    assert bucket.try_acquire(60)
    assert not bucket.try_acquire(60)
    clock.now += 0.2
    assert bucket.try_acquire(60)


def test_wait_until_available_sleeps_and_can_be_cancelled() -> None:
    bucket = TokenBucket(10_000)
    bucket.record(10_000 + 500)  # 50 ms of debt
    assert bucket.wait_until_available(timeout=2)
    bucket.record(10**6)  # 100 s of debt
    cancelled = threading.Event()
    threading.Timer(0.05, cancelled.set).start()
    assert not bucket.wait_until_available(cancelled=cancelled)
    assert not bucket.wait_until_available(timeout=0.01)


def test_rejects_non_positive_rates() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0)
    with pytest.raises(ValueError):
        TokenBucket(10, burst=0)
