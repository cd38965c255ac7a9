"""The transactional ids this broker coordinates and their persistence in
``__transaction_state`` (Kafka's ``TransactionStateManager``).

The coordinator of a transactional id is the leader of partition
``abs(String.hashCode(id)) % transaction.state.log.num.partitions`` of ``__transaction_state``.
When this broker becomes that leader
(:meth:`~TransactionStateManager.load_transactions_for_partition`) it replays the partition
(last value per transactional id wins, a tombstone removes it) into a
cache entry stamped with the *coordinator epoch* (the partition's leader epoch, which fences
the markers of an older coordinator); ids of a partition that is loading answer
COORDINATOR_LOAD_IN_PROGRESS, ids of a partition this broker does not own NOT_COORDINATOR.
Losing the leadership drops the entry
(:meth:`~TransactionStateManager.remove_transactions_for_partition`).

Writes (:meth:`TransactionStateManager.append_transaction_to_log`) are serialized per partition
by a lock; a transition is applied to the cached metadata only once its record is in the log
(acks=all) and only if the partition is still owned with the same coordinator epoch.

Thread-safety: none; one asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tierlog.coordinator.group.group_metadata_manager import java_string_hash
from tierlog.coordinator.offset_store import OffsetStore
from tierlog.coordinator.transaction.transaction_log import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from tierlog.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TxnTransitMetadata,
)
from tierlog.coordinator.transaction.transaction_state import TransactionState
from tierlog.errors import (
    ApiError,
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    KafkaStorageError,
    LocalProtocolError,
    MessageTooLarge,
    NotCoordinator,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    RecordListTooLarge,
    RequestTimedOut,
    UnknownServerError,
    UnknownTopicOrPartition,
)

__all__ = [
    "TRANSACTION_STATE_TOPIC_NAME",
    "CoordinatorEpochAndTxnMetadata",
    "TransactionStateManager",
    "TxnMetadataCacheEntry",
]

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


@dataclass(slots=True)
class TxnMetadataCacheEntry:
    """The transactional ids of one owned partition and the coordinator epoch they were
    loaded under."""

    coordinator_epoch: int
    metadata_per_transactional_id: dict[str, TransactionMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CoordinatorEpochAndTxnMetadata:
    coordinator_epoch: int
    transaction_metadata: TransactionMetadata


class TransactionStateManager:
    """See the module docstring; single event loop, not thread-safe."""

    def __init__(
        self,
        store: OffsetStore,
        *,
        spawn: Spawn,
        transaction_topic_partition_count: int,
        transactional_id_expiration_ms: int,
        transaction_max_timeout_ms: int,
        time_ms: Callable[[], int],
    ) -> None:
        if transaction_topic_partition_count < 1:
            raise ValueError("transaction_topic_partition_count must be at least 1")
        self._store = store
        self._spawn = spawn
        self._num_partitions = transaction_topic_partition_count
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self._time_ms = time_ms
        self._cache: dict[int, TxnMetadataCacheEntry] = {}
        #: Partitions being loaded -> the coordinator epoch of the load.
        self._loading: dict[int, int] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._shutting_down = False

    # ================================================================== queries

    @property
    def transaction_topic_partition_count(self) -> int:
        return self._num_partitions

    def partition_for(self, transactional_id: str) -> int:
        """Kafka's ``partitionFor``: ``Utils.abs(hashCode) % partitions``."""
        h = java_string_hash(transactional_id)
        return (0 if h == -(1 << 31) else abs(h)) % self._num_partitions

    def validate_transaction_timeout_ms(self, txn_timeout_ms: int) -> bool:
        return 0 < txn_timeout_ms <= self.transaction_max_timeout_ms

    def owned_partitions(self) -> list[int]:
        return sorted(self._cache)

    def loading_partitions(self) -> list[int]:
        return sorted(self._loading)

    def get_transaction_state(
        self, transactional_id: str
    ) -> tuple[int, CoordinatorEpochAndTxnMetadata | None]:
        """(error code, the id's metadata or None when unknown); Kafka's order:
        COORDINATOR_NOT_AVAILABLE when stopping, COORDINATOR_LOAD_IN_PROGRESS while its
        partition loads, NOT_COORDINATOR when another broker owns it."""
        if self._shutting_down:
            return CoordinatorNotAvailable.error_code, None
        partition = self.partition_for(transactional_id)
        if partition in self._loading:
            return CoordinatorLoadInProgress.error_code, None
        entry = self._cache.get(partition)
        if entry is None:
            return NotCoordinator.error_code, None
        md = entry.metadata_per_transactional_id.get(transactional_id)
        if md is None:
            return 0, None
        return 0, CoordinatorEpochAndTxnMetadata(entry.coordinator_epoch, md)

    def put_transaction_state_if_not_exists(
        self, metadata: TransactionMetadata
    ) -> tuple[int, CoordinatorEpochAndTxnMetadata | None]:
        """Add a new id's metadata unless one exists; (error, the metadata now cached)."""
        err, existing = self.get_transaction_state(metadata.transactional_id)
        if err or existing is not None:
            return err, existing
        entry = self._cache[self.partition_for(metadata.transactional_id)]
        entry.metadata_per_transactional_id[metadata.transactional_id] = metadata
        return 0, CoordinatorEpochAndTxnMetadata(entry.coordinator_epoch, metadata)

    def all_transactions(self) -> Iterator[TransactionMetadata]:
        for entry in self._cache.values():
            yield from entry.metadata_per_transactional_id.values()

    def timed_out_transactions(self, now_ms: int) -> list[tuple[str, int, int]]:
        """(transactional id, producer id, epoch) of Ongoing transactions past their timeout
        (Kafka's timedOutTransactions)."""
        return [
            (md.transactional_id, md.producer_id, md.producer_epoch)
            for md in self.all_transactions()
            if md.state is TransactionState.ONGOING
            and md.pending_state is None
            and md.txn_start_timestamp + md.txn_timeout_ms < now_ms
        ]

    # ================================================================== lifecycle

    def shutdown(self) -> None:
        self._shutting_down = True
        self._cache.clear()
        self._loading.clear()

    def load_transactions_for_partition(
        self,
        partition: int,
        coordinator_epoch: int,
        on_loaded: Callable[[int, int, list[TransactionMetadata]], None],
    ) -> None:
        """This broker leads ``__transaction_state-<partition>`` with leader epoch
        ``coordinator_epoch`` (Kafka's onElection): replay it in the background;
        ``on_loaded(partition, epoch, metadata)`` gets every loaded id (the coordinator
        completes those left in PrepareCommit/PrepareAbort)."""
        if self._shutting_down:
            return
        current = self._cache.get(partition)
        if current is not None and current.coordinator_epoch >= coordinator_epoch:
            return
        if self._loading.get(partition, -1) >= coordinator_epoch:
            return
        self._cache.pop(partition, None)
        self._loading[partition] = coordinator_epoch

        async def load() -> None:
            await asyncio.sleep(0)
            if self._loading.get(partition) != coordinator_epoch:
                return  # unloaded or superseded meanwhile
            try:
                # On the loop, as the group coordinator's loads: the log is the loop's.
                loaded = self._read_partition(partition)
            except Exception as e:
                log.error("loading __transaction_state-%d failed: %s", partition, e)
                if self._loading.get(partition) == coordinator_epoch:
                    del self._loading[partition]
                return
            if self._loading.get(partition) != coordinator_epoch:
                return
            del self._loading[partition]
            entry = TxnMetadataCacheEntry(coordinator_epoch, loaded)
            self._cache[partition] = entry
            log.info(
                "transaction coordinator: loaded %d transactional ids of "
                "__transaction_state-%d (coordinator epoch %d)",
                len(loaded),
                partition,
                coordinator_epoch,
            )
            on_loaded(partition, coordinator_epoch, list(loaded.values()))

        self._spawn(load())

    def remove_transactions_for_partition(self, partition: int, coordinator_epoch: int) -> None:
        """This broker no longer leads the partition (Kafka's onResignation)."""
        if self._loading.get(partition, -1) <= coordinator_epoch or coordinator_epoch < 0:
            self._loading.pop(partition, None)
        entry = self._cache.get(partition)
        if entry is not None and (
            coordinator_epoch < 0 or entry.coordinator_epoch <= coordinator_epoch
        ):
            del self._cache[partition]
            log.info("transaction coordinator: unloaded __transaction_state-%d", partition)

    def _read_partition(self, partition: int) -> dict[str, TransactionMetadata]:
        """Replay a partition (page-cache reads of a small compacted log)."""
        values: dict[str, TxnTransitMetadata | None] = {}
        for key_bytes, value_bytes in self._store.replay(partition):
            try:
                txn_id = decode_key(key_bytes)
                if txn_id is None:
                    continue
                values[txn_id] = (
                    None if value_bytes is None else decode_value(value_bytes).to_transit()
                )
            except LocalProtocolError as e:
                log.warning("__transaction_state-%d: skipping bad record: %s", partition, e)
        return {
            txn_id: TransactionMetadata.from_transit(txn_id, t)
            for txn_id, t in values.items()
            if t is not None
        }

    # ================================================================== writes

    async def append_transaction_to_log(
        self, transactional_id: str, coordinator_epoch: int, transit: TxnTransitMetadata
    ) -> int:
        """Write ``transit`` and, once it is in the log, apply it to the cached metadata
        (Kafka's appendTransactionToLog). Returns 0 or the error code for the client;
        on an error the pending transition is dropped."""
        partition = self.partition_for(transactional_id)
        value = None if transit.txn_state is TransactionState.DEAD else encode_value(transit)
        lock = self._locks.setdefault(partition, asyncio.Lock())
        error = 0
        async with lock:
            try:
                await self._store.append(partition, [(encode_key(transactional_id), value)])
            except Exception as e:
                error = _append_error(e)
                log.warning(
                    "appending %s of %s to __transaction_state-%d failed: %r",
                    transit.txn_state.state_name,
                    transactional_id,
                    partition,
                    e,
                )
            err, current = self.get_transaction_state(transactional_id)
            if current is None or current.coordinator_epoch != coordinator_epoch:
                # The partition moved (or was reloaded) meanwhile: not ours to apply.
                return err or NotCoordinator.error_code
            md = current.transaction_metadata
            if error:
                md.pending_transition_failed()
                return error
            if md.pending_state is transit.txn_state:
                md.complete_transition_to(transit)
                if transit.txn_state is TransactionState.DEAD:
                    entry = self._cache.get(partition)
                    if entry is not None:
                        entry.metadata_per_transactional_id.pop(transactional_id, None)
            return 0

    def remove_expired_transactional_ids(self) -> list[tuple[str, int, TxnTransitMetadata]]:
        """Completed or empty ids idle for ``transactional.id.expiration.ms``: their Dead
        transitions, prepared (the caller writes the tombstones)."""
        now = self._time_ms()
        out = []
        for entry in list(self._cache.values()):
            for md in list(entry.metadata_per_transactional_id.values()):
                if (
                    md.pending_state is None
                    and md.state
                    in (
                        TransactionState.EMPTY,
                        TransactionState.COMPLETE_COMMIT,
                        TransactionState.COMPLETE_ABORT,
                    )
                    and md.txn_last_update_timestamp + self.transactional_id_expiration_ms <= now
                ):
                    out.append((md.transactional_id, entry.coordinator_epoch, md.prepare_dead()))
        return out

    def list_transactions(
        self,
        state_filters: Iterable[str],
        producer_id_filters: Iterable[int],
        duration_filter_ms: int = -1,
    ) -> tuple[int, set[str], list[TransactionMetadata]]:
        """ListTransactions: (error, unknown state names, matching metadata)."""
        if self._shutting_down or self._loading:
            return CoordinatorLoadInProgress.error_code, set(), []
        states: set[TransactionState] = set()
        unknown: set[str] = set()
        for name in state_filters:
            st = TransactionState.from_name(name)
            if st is None:
                unknown.add(name)
            else:
                states.add(st)
        if unknown and not states:
            return 0, unknown, []
        pids = set(producer_id_filters)
        now = self._time_ms()
        out = [
            md
            for md in self.all_transactions()
            if (not states or md.state in states)
            and (not pids or md.producer_id in pids)
            and (
                duration_filter_ms < 0
                or (
                    md.txn_start_timestamp >= 0
                    and now - md.txn_start_timestamp >= duration_filter_ms
                )
            )
            and md.state is not TransactionState.DEAD
        ]
        return 0, unknown, out


def _append_error(e: BaseException) -> int:
    """Kafka's mapping of a failed append to what the client is told."""
    if isinstance(e, UnknownTopicOrPartition | NotEnoughReplicas | NotEnoughReplicasAfterAppend):
        return CoordinatorNotAvailable.error_code
    if isinstance(e, RequestTimedOut | CoordinatorNotAvailable):
        return CoordinatorNotAvailable.error_code
    if isinstance(e, NotLeaderOrFollower | KafkaStorageError):
        return NotCoordinator.error_code
    if isinstance(e, MessageTooLarge | RecordListTooLarge):
        return UnknownServerError.error_code
    if isinstance(e, ApiError):
        return CoordinatorNotAvailable.error_code
    return UnknownServerError.error_code
