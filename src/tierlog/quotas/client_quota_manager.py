"""Byte-rate quotas and the throttle time of a request (Kafka's ``ClientQuotaManager`` with
its ``Rate`` over ``SampledStat`` samples). Sans-IO: the clock is a parameter.

Each client's rate is measured over ``quota.window.num`` samples of
``quota.window.size.seconds``; the window is at least ``num - 1`` whole samples long (a
young window is padded, so the first bytes of a new client do not read as a huge rate). A
request that takes the rate over the quota is throttled for the time the rate needs to come
back down to it::

    throttle_ms = (rate - quota) / quota * window_ms      (at most one whole window)

The broker sends the response with that ``throttle_time_ms`` and then reads nothing more from
the connection for that long (Kafka's channel muting, KIP-219), so a client that ignores the
field is held back by TCP. A throttled Fetch is answered empty and its bytes are taken back
off the rate (the client fetches them again after the throttle time); a fetch asks for at
most the quota's bytes over a whole window (Kafka's ``getMaxValueInQuotaWindow``).

Sensors are per quota *entity as matched*: a client-id default quota gives every client id
its own rate, a user quota is shared by all clients of the user (Kafka's metric tags).

Not thread-safe: the event loop only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tierlog.quotas.client_quota_entity import ClientQuotaEntity, quota_for

__all__ = ["ClientQuotaManager", "Rate"]

_MAX_RESOLVED = 100_000


@dataclass(slots=True)
class _Sample:
    start_ms: float
    value: float = 0.0


@dataclass(slots=True)
class Rate:
    """Kafka's ``Rate`` over ``num_samples`` samples of ``window_ms``: per second."""

    num_samples: int
    window_ms: float
    _samples: list[_Sample] = field(default_factory=list)

    def record(self, value: float, now_ms: float) -> None:
        self._purge(now_ms)
        if not self._samples or now_ms - self._samples[-1].start_ms >= self.window_ms:
            self._samples.append(_Sample(now_ms))
            if len(self._samples) > self.num_samples:
                del self._samples[0]
        self._samples[-1].value += value

    def _purge(self, now_ms: float) -> None:
        horizon = self.num_samples * self.window_ms
        samples = self._samples
        while samples and now_ms - samples[0].start_ms >= horizon:
            del samples[0]  # samples are in time order: the expired ones are first

    def window_size_ms(self, now_ms: float) -> float:
        """The time the rate is measured over (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        oldest = self._samples[0].start_ms if self._samples else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        min_full = self.num_samples - 1
        if full < min_full:
            elapsed += (min_full - full) * self.window_ms
        return max(elapsed, self.window_ms)

    def measure(self, now_ms: float) -> float:
        """Units per second."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000.0)


class ClientQuotaManager:
    """One quota type (``producer_byte_rate`` or ``consumer_byte_rate``) of every client."""

    def __init__(self, key: str, *, num_samples: int = 11, window_ms: float = 1000.0) -> None:
        if num_samples < 1 or window_ms <= 0:
            raise ValueError("quota.window.num and quota.window.size.seconds must be positive")
        self.key = key
        self.num_samples = num_samples
        self.window_ms = window_ms
        self._quotas: Mapping[ClientQuotaEntity, Mapping[str, float]] = {}
        self._rates: dict[tuple[str, str], Rate] = {}
        self._active = False
        #: (user, client id) -> its sensor and quota (None: no quota); cleared on a change.
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}

    def update_quotas(self, quotas: Mapping[ClientQuotaEntity, Mapping[str, float]]) -> None:
        """Every configured entity's quotas (after a load or an alter). Rates are kept."""
        self._quotas = quotas
        self._resolved.clear()
        self._active = any(self.key in v for v in quotas.values())
        if not self._active:
            self._rates.clear()

    @property
    def active(self) -> bool:
        """Whether any client has this quota (else recording is skipped: one attribute
        read per request on the produce and fetch paths)."""
        return self._active

    def quota(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """The sensor key (user tag, client-id tag) and the quota of a client; None: none.
        A part of the matched entity, named or default, tags with the client's real value."""
        key = (user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        found = quota_for(self._quotas, self.key, user, client_id)
        out: tuple[tuple[str, str], float] | None = None
        if found is not None:
            entity, bound = found
            user_tag = "" if entity.user is None else user
            client_tag = "" if entity.client_id is None else client_id
            out = (user_tag, client_tag), bound
        if len(self._resolved) >= _MAX_RESOLVED:
            self._resolved.clear()  # many short-lived client ids: start over
        self._resolved[key] = out
        return out

    def record_and_get_throttle_time_ms(
        self, user: str, client_id: str, value: float, now_ms: float, *, unrecord: bool = False
    ) -> int:
        """Record ``value`` bytes of ``(user, client_id)``; the throttle time (0: none).
        ``unrecord``: a throttled request's bytes are taken back (a throttled Fetch is
        answered empty, so its bytes never reach the client; Kafka's unrecordQuotaSensor)."""
        if not self.active:
            return 0
        found = self.quota(user, client_id)
        if found is None:
            return 0
        sensor, bound = found
        rate = self._rates.get(sensor)
        if rate is None:
            rate = self._rates[sensor] = Rate(self.num_samples, self.window_ms)
        rate.record(value, now_ms)
        measured = rate.measure(now_ms)
        if measured <= bound:
            return 0
        window = rate.window_size_ms(now_ms)
        if unrecord:
            rate.record(-value, now_ms)
        return int(min((measured - bound) / bound * window, window))

    def max_value_in_quota_window(self, user: str, client_id: str) -> float | None:
        """The most a client may get in one request: its quota over the whole window
        (Kafka caps a throttled consumer's fetch size so); None without a quota."""
        found = self.quota(user, client_id) if self.active else None
        if found is None:
            return None
        return found[1] * self.num_samples * self.window_ms / 1000.0
