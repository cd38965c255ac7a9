"""The broker's client quotas: DescribeClientQuotas (48) and AlterClientQuotas (49) over a store
(the quota file of a single node, ``/config/users`` and ``/config/clients`` in a cluster),
and the throttle time of each Produce and Fetch (:mod:`tierlog.quotas.client_quota_manager`).

A request's user is its principal's name (``ANONYMOUS`` without authentication) and its
client id the request header's (``""`` when null), as Kafka's quota callback sees them.
Produce is charged the request's size, after the append; Fetch the size of the records it
would return, and a throttled Fetch is answered without them and not charged; a fetch asks
for at most the quota's bytes of a whole window (see the manager's docstring).

Event loop only, except the store's blocking reads and writes (run in a thread).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from tierlog.errors import InvalidRequest
from tierlog.quotas.client_quota_entity import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    ClientQuotaEntity,
    InvalidQuotaError,
    matches_filter,
    validate_filter,
    validate_ops,
)
from tierlog.quotas.client_quota_manager import ClientQuotaManager

__all__ = ["ClientQuotaStore", "ClientQuotas", "MemoryQuotaStore"]

log = logging.getLogger(__name__)

QuotaMap = dict[ClientQuotaEntity, dict[str, float]]


class ClientQuotaStore(Protocol):
    """Where quotas persist (blocking calls)."""

    def load(self) -> QuotaMap: ...

    def alter(
        self, changes: Mapping[ClientQuotaEntity, Mapping[str, float | None]]
    ) -> QuotaMap: ...


class MemoryQuotaStore:
    """Quotas kept in memory only (a KafkaApis built without a broker, in tests)."""

    def __init__(self) -> None:
        self._quotas: QuotaMap = {}

    def load(self) -> QuotaMap:
        return {e: dict(v) for e, v in self._quotas.items()}

    def alter(self, changes: Mapping[ClientQuotaEntity, Mapping[str, float | None]]) -> QuotaMap:
        for entity, ops in changes.items():
            current = self._quotas.setdefault(entity, {})
            for key, value in ops.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            if not current:
                del self._quotas[entity]
        return self.load()


class ClientQuotas:
    """Quota configs and the produce and fetch quota managers of one broker."""

    def __init__(
        self,
        store: ClientQuotaStore,
        *,
        num_samples: int = 11,
        window_ms: float = 1000.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.produce = ClientQuotaManager(
            PRODUCER_BYTE_RATE, num_samples=num_samples, window_ms=window_ms
        )
        self.fetch = ClientQuotaManager(
            CONSUMER_BYTE_RATE, num_samples=num_samples, window_ms=window_ms
        )
        self.quotas: QuotaMap = {}
        self._clock = clock

    def load(self) -> None:
        """Read the store (blocking; at startup, and when another broker changed quotas)."""
        self.apply(self.store.load())

    def apply(self, quotas: QuotaMap) -> None:
        """Take a new set of quotas (the event loop's, or at startup before serving)."""
        self.quotas = quotas
        self.produce.update_quotas(quotas)
        self.fetch.update_quotas(quotas)

    # ------------------------------------------------------------------ throttling

    def _now_ms(self) -> float:
        return self._clock() * 1000.0

    def throttle_produce(self, user: str, client_id: str | None, size: int) -> int:
        """Record a Produce of ``size`` bytes; its throttle time in ms."""
        if not self.produce.active:
            return 0
        return self.produce.record_and_get_throttle_time_ms(
            user, client_id or "", size, self._now_ms()
        )

    def throttle_fetch(self, user: str, client_id: str | None, size: int) -> int:
        """Record a Fetch response of ``size`` bytes; its throttle time in ms."""
        if not self.fetch.active:
            return 0
        return self.fetch.record_and_get_throttle_time_ms(
            user, client_id or "", size, self._now_ms(), unrecord=True
        )

    def fetch_max_bytes(self, user: str, client_id: str | None, max_bytes: int) -> int:
        """A Fetch's ``max_bytes``, capped at the client's quota over a whole window."""
        if not self.fetch.active:
            return max_bytes
        cap = self.fetch.max_value_in_quota_window(user, client_id or "")
        return max_bytes if cap is None else max(1, min(max_bytes, int(cap)))

    # ------------------------------------------------------------------ the APIs

    def describe(
        self, components: Iterable[tuple[str, int, str | None]], strict: bool
    ) -> tuple[int, str | None, list[dict[str, Any]]]:
        """DescribeClientQuotas: (error code, error message, entries)."""
        try:
            checked = validate_filter(components)
        except InvalidQuotaError as e:
            return InvalidRequest.error_code, str(e), []
        entries = [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.to_wire()],
                "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
            }
            for entity, values in sorted(self.quotas.items(), key=lambda kv: kv[0].path)
            if matches_filter(entity, checked, strict)
        ]
        return 0, None, entries

    async def alter(
        self,
        entries: Iterable[tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]]],
        validate_only: bool,
    ) -> list[tuple[int, str | None]]:
        """AlterClientQuotas: per entry (error code, error message). Valid entries are
        written together (then applied here); an invalid one fails alone, as in Kafka."""
        results: list[tuple[int, str | None]] = []
        changes: dict[ClientQuotaEntity, dict[str, float | None]] = {}
        for components, ops in entries:
            try:
                entity = ClientQuotaEntity.from_wire(components)
                if entity in changes:
                    raise InvalidQuotaError(f"the entity {entity.path} appears twice")
                changes[entity] = validate_ops(ops)
                results.append((0, None))
            except InvalidQuotaError as e:
                results.append((InvalidRequest.error_code, str(e)))
        if changes and not validate_only:
            quotas = await asyncio.to_thread(self.store.alter, changes)
            self.apply(quotas)
            for entity, change in changes.items():
                log.info("client quotas of %s: %s", entity.path,
                         ", ".join(f"{k}={'removed' if v is None else int(v)}"
                                   for k, v in change.items()))  # fmt: skip
        return results
