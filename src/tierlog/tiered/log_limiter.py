"""Logging a repeated failure once per key per interval (tierlog; Kafka logs every failed
remote read).

A consumer stuck on a missing remote object fetches it again every few hundred milliseconds,
and its read ahead fails too; logging each failure buries the broker's log. The broker logs
the first failure of an object at once, then at most one line per ``interval_s`` for it,
saying how many failures that line stands for. The failures are still all counted (the
``RemoteFetchErrorsPerSec`` metric).

Bounded: at most ``max_keys`` keys are remembered (the least recently logged dropped first,
which at worst logs one of them again early). Thread-safe (one lock).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

__all__ = ["LogLimiter"]


class LogLimiter:
    """Decides whether a failure of ``key`` is logged now (see the module docstring)."""

    def __init__(
        self,
        interval_s: float = 60.0,
        *,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0 or max_keys <= 0:
            raise ValueError("interval_s and max_keys must be positive")
        self.interval_s = interval_s
        self._max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        # key -> [time of the last line logged, failures since then (not logged)]
        self._keys: OrderedDict[Hashable, list[float]] = OrderedDict()

    def admit(self, key: Hashable) -> int | None:
        """None: do not log this failure. Otherwise log it now; the value is how many
        failures of ``key`` went unlogged since its previous line (0 for the first)."""
        now = self._clock()
        with self._lock:
            entry = self._keys.get(key)
            if entry is not None and now - entry[0] < self.interval_s:
                entry[1] += 1
                return None
            suppressed = 0 if entry is None else int(entry[1])
            self._keys[key] = [now, 0]
            self._keys.move_to_end(key)
            while len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)
            return suppressed
