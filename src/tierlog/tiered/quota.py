"""Byte-rate quotas of the remote log manager (Kafka's ``RLMQuotaManager``), as a token bucket.

``remote.log.manager.copy.max.bytes.per.second`` and
``remote.log.manager.fetch.max.bytes.per.second`` bound the bytes copied to and read from
remote storage per second, over all partitions of the broker.

A :class:`TokenBucket` holds up to ``burst`` tokens (bytes) and gains ``rate`` tokens per
second. Work is recorded *after* it is done (:meth:`TokenBucket.record`), so the bucket may go
into debt: a 100 MB segment copied under a 10 MB/s quota leaves a 90 MB debt that the next copy
waits out (:meth:`TokenBucket.wait_until_available`). That is Kafka's behaviour too -- it
checks ``isQuotaExceeded()`` before a copy and records the segment size after it -- and it
keeps the average rate right without splitting uploads.

Copy waits while the quota is exceeded; fetch does not wait: a remote read whose quota is
exceeded is skipped for now and the consumer comes back (Kafka's throttled remote fetch).

A rate of :data:`UNLIMITED` (Kafka's default, ``Long.MAX_VALUE``) or more disables the quota.
Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Kafka's default for both quotas (``Long.MAX_VALUE``): no limit.
UNLIMITED = 2**63 - 1


class TokenBucket:
    """A byte-rate quota. See the module docstring. Thread-safe.

    Args:
        rate: bytes per second; :data:`UNLIMITED` (or more) disables the quota.
        burst: most tokens saved up while idle (default: one second of ``rate``).
        clock: seconds, monotonic (injectable for tests).

    Raises:
        ValueError: a rate or burst that is not positive.
    """

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"quota rate must be positive, got {rate}")
        if burst is not None and burst <= 0:
            raise ValueError(f"quota burst must be positive, got {burst}")
        self._unlimited = rate >= UNLIMITED
        self._rate = float(rate)
        self._burst_follows_rate = burst is None
        self._burst = float(burst if burst is not None else rate)
        self._clock = clock
        self._tokens = self._burst
        self._last = clock()
        self._cond = threading.Condition()

    @property
    def rate(self) -> float:
        return self._rate

    def update_rate(self, rate: float) -> None:
        """A new rate from now on (Kafka's ``RLMQuotaManager.updateQuota``: a dynamic broker
        config changed); a default burst follows it, saved-up tokens are capped by it.

        Raises:
            ValueError: a rate that is not positive.
        """
        if rate <= 0:
            raise ValueError(f"quota rate must be positive, got {rate}")
        with self._cond:
            self._refill()
            self._unlimited = rate >= UNLIMITED
            self._rate = float(rate)
            if self._burst_follows_rate:
                self._burst = float(rate)
            self._tokens = min(self._tokens, self._burst)
            self._cond.notify_all()

    @property
    def unlimited(self) -> bool:
        return self._unlimited

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(self._burst, self._tokens + elapsed * self._rate)
            self._last = now

    def available(self) -> float:
        """Tokens now (negative: in debt)."""
        if self._unlimited:
            return float("inf")
        with self._cond:
            self._refill()
            return self._tokens

    def is_quota_exceeded(self) -> bool:
        """True while the bucket is in debt (Kafka's ``isQuotaExceeded``)."""
        return not self._unlimited and self.available() < 0

    def record(self, n_bytes: int) -> None:
        """Take ``n_bytes`` tokens for work already done (the bucket may go into debt)."""
        if self._unlimited or n_bytes <= 0:
            return
        with self._cond:
            self._refill()
            self._tokens -= n_bytes

    def try_acquire(self, n_bytes: int) -> bool:
        """Take ``n_bytes`` tokens if they are all there now; never waits."""
        if self._unlimited or n_bytes <= 0:
            return True
        with self._cond:
            self._refill()
            if self._tokens >= n_bytes:
                self._tokens -= n_bytes
                return True
            return False

    def throttle_time_s(self) -> float:
        """Seconds until the debt is paid off (0 when not in debt)."""
        if self._unlimited:
            return 0.0
        with self._cond:
            self._refill()
            return max(0.0, -self._tokens / self._rate)

    def wait_until_available(
        self, timeout: float | None = None, cancelled: threading.Event | None = None
    ) -> bool:
        """Block while the quota is exceeded; False on timeout or when ``cancelled`` is set.

        Sleeps in slices of at most 100 ms so a cancellation is noticed promptly.
        """
        if self._unlimited:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = self.throttle_time_s()
            if wait <= 0:
                return True
            if cancelled is not None and cancelled.is_set():
                return False
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                wait = min(wait, left)
            if cancelled is not None:
                if cancelled.wait(min(wait, 0.1)):
                    return False
            else:
                time.sleep(min(wait, 0.1))


__all__ = ["UNLIMITED", "TokenBucket"]
