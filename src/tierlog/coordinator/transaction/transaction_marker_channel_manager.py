"""Sending a transaction's COMMIT or ABORT markers to its partitions' leaders (Kafka's
``TransactionMarkerChannelManager``).

Once PrepareCommit/PrepareAbort is in ``__transaction_state`` the outcome is decided; this
channel then writes one marker per partition of the transaction, through a
:class:`TxnMarkerWriter` (the broker's: ``ReplicaManager.append_txn_markers`` for the
partitions it leads, WriteTxnMarkers to the other leaders in a cluster), and retries what
failed (no leader, NOT_LEADER_OR_FOLLOWER, a broker unreachable) with a growing backoff until
every partition has its marker. A partition whose topic was deleted counts as done. An
INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED answer means a newer coordinator or
producer epoch took over: sending stops (the newer coordinator completes the transaction).
When every marker is written, ``on_complete`` writes CompleteCommit/CompleteAbort.

Sending also stops when ``still_owner`` says this coordinator no longer owns the transactional
id under the epoch the markers carry.

Thread-safety: none; one asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tierlog.coordinator.transaction.transaction_metadata import TopicPartition
from tierlog.errors import InvalidProducerEpoch, UnknownTopicOrPartition

__all__ = [
    "TRANSACTION_COORDINATOR_FENCED",
    "TransactionMarkerChannelManager",
    "TxnMarkerEntry",
    "TxnMarkerWriter",
]

log = logging.getLogger(__name__)

TRANSACTION_COORDINATOR_FENCED = 52
_FENCED = frozenset({InvalidProducerEpoch.error_code, TRANSACTION_COORDINATOR_FENCED})
_INITIAL_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 1.0

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


@dataclass(frozen=True, slots=True)
class TxnMarkerEntry:
    """One transaction's marker for some partitions (Kafka's ``TxnMarkerEntry``)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]


class TxnMarkerWriter(Protocol):
    """Writes markers to the partitions' leaders (implemented in ``server/``)."""

    def write_txn_markers(
        self, entries: Sequence[TxnMarkerEntry]
    ) -> Awaitable[Mapping[tuple[int, str, int], int]]:
        """An error code per (producer id, topic, partition) of every entry; retriable ones
        (no leader, leader moved, unreachable) are retried by the channel."""
        ...

    def partition_exists(self, topic: str, partition: int) -> bool:
        """False once the topic (or the partition) is gone: its marker is not needed."""
        ...


class TransactionMarkerChannelManager:
    """See the module docstring; single event loop, not thread-safe."""

    def __init__(self, writer: TxnMarkerWriter, *, spawn: Spawn) -> None:
        self._writer = writer
        self._spawn = spawn
        #: transactional id -> the task sending its markers.
        self._sending: dict[str, asyncio.Task[None]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._sending)

    async def wait_for_completion(self, transactional_id: str, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until the id's markers and its Complete record are
        written, if they are being sent; never cancels the sending."""
        task = self._sending.get(transactional_id)
        if task is not None:
            await asyncio.wait({task}, timeout=timeout_s)

    def add_txn_markers_to_send(
        self,
        transactional_id: str,
        entry: TxnMarkerEntry,
        still_owner: Callable[[], bool],
        on_complete: Callable[[], Awaitable[None]],
    ) -> None:
        """Send ``entry``'s markers until written, then await ``on_complete``."""
        if transactional_id in self._sending:
            log.warning("markers of %s are already being sent", transactional_id)
            return

        async def send() -> None:
            try:
                if await self._send_until_written(transactional_id, entry, still_owner):
                    await on_complete()
            finally:
                self._sending.pop(transactional_id, None)

        self._sending[transactional_id] = self._spawn(send())

    async def _send_until_written(
        self, transactional_id: str, entry: TxnMarkerEntry, still_owner: Callable[[], bool]
    ) -> bool:
        pending = set(entry.partitions)
        backoff = _INITIAL_BACKOFF_S
        while pending:
            if not still_owner():
                log.info("%s: no longer its coordinator; markers left to the new one",
                         transactional_id)  # fmt: skip
                return False
            for tp in list(pending):
                if not self._writer.partition_exists(*tp):
                    log.info("%s: %s-%d is gone; no marker needed", transactional_id, *tp)
                    pending.discard(tp)
            if not pending:
                break
            batch = TxnMarkerEntry(
                entry.producer_id,
                entry.producer_epoch,
                entry.coordinator_epoch,
                entry.commit,
                tuple(sorted(pending)),
            )
            try:
                results = await self._writer.write_txn_markers([batch])
            except Exception as e:
                log.warning("%s: writing markers failed, retrying: %r", transactional_id, e)
                results = {}
            retry = []
            for topic, partition in batch.partitions:
                code = results.get((entry.producer_id, topic, partition), -1)
                if code == 0:
                    pending.discard((topic, partition))
                elif code in _FENCED:
                    log.warning(
                        "%s: marker for %s-%d refused (error %d): a newer coordinator or "
                        "producer epoch exists; giving up",
                        transactional_id,
                        topic,
                        partition,
                        code,
                    )
                    return False
                elif code == UnknownTopicOrPartition.error_code and not (
                    self._writer.partition_exists(topic, partition)
                ):
                    pending.discard((topic, partition))
                else:
                    retry.append(f"{topic}-{partition}: {code}")
            if pending:
                log.debug("%s: markers to retry: %s", transactional_id, ", ".join(retry))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
        return True

    async def close(self) -> None:
        """Stop sending (shutdown): the next coordinator completes what is left."""
        tasks = list(self._sending.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._sending.clear()
