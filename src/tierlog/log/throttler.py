"""Kafka's ``Throttler``: keep a stream of I/O under a rate, by sleeping.

Used by the log cleaner (``log.cleaner.io.max.bytes.per.second``) on the bytes it reads and
writes. Pure bookkeeping plus an injectable ``sleep`` and clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["Throttler"]


class Throttler:
    """Kafka's ``Throttler``: sleeps when the observed rate exceeds ``rate`` per second,
    checking every ``check_interval_ms``. Thread-safe (one lock around the bookkeeping);
    ``sleep`` is injectable (the cleaner passes its stop event's ``wait``)."""

    def __init__(
        self,
        rate: float,
        *,
        check_interval_ms: int = 300,
        sleep: Callable[[float], object] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = rate
        self._check_interval_s = check_interval_ms / 1000
        self._sleep = sleep
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._period_start = monotonic()
        self._observed = 0.0

    def maybe_throttle(self, observed: float) -> None:
        if self._rate == float("inf"):
            return
        with self._lock:
            self._observed += observed
            now = self._monotonic()
            elapsed = now - self._period_start
            if elapsed < self._check_interval_s:
                return
            wanted = self._observed / self._rate
            self._observed = 0.0
            self._period_start = now
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
            with self._lock:
                self._period_start = self._monotonic()
