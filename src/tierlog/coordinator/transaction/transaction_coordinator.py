"""Kafka's transaction coordinator, on asyncio (``TransactionCoordinator``, transaction
version 1 as Kafka 3.x speaks it).

The APIs take and return plain values (the handlers translate kio messages):

* **InitProducerId** with a transactional id: a new id gets a producer id and epoch 0; a known
  one gets its epoch bumped (fencing the previous producer instance), or a new producer id when
  the epoch is exhausted. KIP-360: a producer naming its current (producer id, epoch) gets the
  next epoch, one naming the previous epoch (a retry) the current one, any other PRODUCER_FENCED.
  An Ongoing transaction is first aborted with a bumped epoch (the caller gets
  CONCURRENT_TRANSACTIONS and retries).
* **AddPartitionsToTxn / AddOffsetsToTxn**: the partitions join the transaction (Ongoing).
* **EndTxn**: PrepareCommit/PrepareAbort is written, the client is answered, then the markers
  are sent (:mod:`~tierlog.coordinator.transaction.transaction_marker_channel_manager`) and
  CompleteCommit/CompleteAbort written; requests meanwhile get CONCURRENT_TRANSACTIONS.
* **Timeouts**: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` the
  Ongoing transactions older than their ``transaction.timeout.ms`` are fenced (epoch bump) and
  aborted; every ``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle for
  ``transactional.id.expiration.ms`` are removed (tombstones).
* **Failover**: loading a partition (:meth:`TransactionCoordinator.on_election`) completes the
  transactions found in PrepareCommit/PrepareAbort by sending their markers again.

Persistence and ownership are the
:class:`~tierlog.coordinator.transaction.transaction_state_manager.TransactionStateManager`'s.

Thread-safety: none; one asyncio event loop. State checks and the preparation of a
transition happen without an await in between, so requests of one id are atomic with
respect to each other; the pending state makes concurrent ones wait (CONCURRENT_TRANSACTIONS).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from tierlog.coordinator.offset_store import OffsetStore
from tierlog.coordinator.transaction.transaction_marker_channel_manager import (
    TransactionMarkerChannelManager,
    TxnMarkerEntry,
    TxnMarkerWriter,
)
from tierlog.coordinator.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TxnTransitMetadata,
)
from tierlog.coordinator.transaction.transaction_state import TransactionState
from tierlog.coordinator.transaction.transaction_state_manager import (
    TransactionStateManager,
)
from tierlog.errors import (
    ApiError,
    ConcurrentTransactions,
    CoordinatorLoadInProgress,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    NotCoordinator,
    NotEnoughReplicas,
    ProducerFenced,
)

__all__ = ["TransactionCoordinator", "TransactionDescription"]

log = logging.getLogger(__name__)

_S = TransactionState
_RETRY_COMPLETE_S = 0.1
#: How long a request of an id whose previous transaction is completing (markers in flight)
#: waits for it before answering CONCURRENT_TRANSACTIONS. Kafka answers at once and the
#: client retries after its backoff (librdkafka: retry.backoff.ms, 100 ms), which costs a
#: producer that commits often far more than the millisecond the completion takes here.
_WAIT_FOR_COMPLETION_S = 1.0


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions for one id."""

    error_code: int
    transactional_id: str
    state: str = ""
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinator:
    """See the module docstring; single event loop, not thread-safe."""

    def __init__(
        self,
        store: OffsetStore,
        marker_writer: TxnMarkerWriter,
        generate_producer_id: Callable[[], int],
        *,
        transaction_topic_partition_count: int = 50,
        transaction_max_timeout_ms: int = 900_000,
        transactional_id_expiration_ms: int = 604_800_000,
        abort_timed_out_interval_ms: int = 10_000,
        remove_expired_interval_ms: int = 3_600_000,
        time_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.txn_manager = TransactionStateManager(
            store,
            spawn=self._spawn,
            transaction_topic_partition_count=transaction_topic_partition_count,
            transactional_id_expiration_ms=transactional_id_expiration_ms,
            transaction_max_timeout_ms=transaction_max_timeout_ms,
            time_ms=time_ms,
        )
        self.marker_channel = TransactionMarkerChannelManager(marker_writer, spawn=self._spawn)
        self._generate_producer_id = generate_producer_id
        self._abort_interval_s = abort_timed_out_interval_ms / 1000
        self._expire_interval_s = remove_expired_interval_ms / 1000
        self._time_ms = time_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timers: list[asyncio.Task[None]] = []

    # ================================================================== lifecycle

    def start(self) -> None:
        """Start the timeout and expiration timers (call from the event loop)."""
        self._loop = asyncio.get_running_loop()
        self._timers = [
            self._loop.create_task(
                self._every(self._abort_interval_s, self.abort_timed_out_transactions),
                name="txn-abort-timed-out",
            ),
            self._loop.create_task(
                self._every(self._expire_interval_s, self.remove_expired_transactional_ids),
                name="txn-remove-expired",
            ),
        ]

    async def stop(self) -> None:
        self.txn_manager.shutdown()
        for t in self._timers:
            t.cancel()
        await self.marker_channel.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _every(self, interval_s: float, fn: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                fn()
            except Exception:
                log.exception("transaction coordinator timer failed")

    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        """This broker leads ``__transaction_state-<partition>``: load it, then complete the
        transactions left prepared."""
        self.txn_manager.load_transactions_for_partition(
            partition, coordinator_epoch, self._on_partition_loaded
        )

    def on_resignation(self, partition: int, coordinator_epoch: int = -1) -> None:
        self.txn_manager.remove_transactions_for_partition(partition, coordinator_epoch)

    def _on_partition_loaded(
        self, partition: int, coordinator_epoch: int, loaded: list[TransactionMetadata]
    ) -> None:
        for md in loaded:
            if md.state.is_prepare and md.pending_state is None:
                commit = md.state is _S.PREPARE_COMMIT
                log.info("%s: completing the transaction left in %s", md.transactional_id,
                         md.state.state_name)  # fmt: skip
                self._send_markers(
                    coordinator_epoch, commit, md, md.prepare_complete(self._time_ms())
                )

    # ================================================================== InitProducerId

    async def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> tuple[int, int, int]:
        """(error code, producer id, epoch). ``expected``: the (producer id, epoch) the
        producer has (KIP-360), or None."""
        if transactional_id is None:
            try:
                return 0, self._generate_producer_id(), 0
            except ApiError as e:
                return e.error_code, -1, -1
        if not transactional_id:
            return InvalidRequest.error_code, -1, -1
        if not self.txn_manager.validate_transaction_timeout_ms(transaction_timeout_ms):
            return InvalidTransactionTimeout.error_code, -1, -1
        await self.marker_channel.wait_for_completion(transactional_id, _WAIT_FOR_COMPLETION_S)
        err, existing = self.txn_manager.get_transaction_state(transactional_id)
        if err:
            return err, -1, -1
        if existing is None:
            try:
                pid = self._generate_producer_id()
            except ApiError as e:
                return e.error_code, -1, -1
            created = TransactionMetadata(
                transactional_id,
                pid,
                NO_PRODUCER_ID,
                NO_PRODUCER_EPOCH,
                NO_PRODUCER_EPOCH,
                transaction_timeout_ms,
                _S.EMPTY,
                set(),
                -1,
                self._time_ms(),
            )
            err, existing = self.txn_manager.put_transaction_state_if_not_exists(created)
            if err or existing is None:
                return err or NotCoordinator.error_code, -1, -1
        coordinator_epoch = existing.coordinator_epoch
        md = existing.transaction_metadata
        try:
            transit = self._prepare_init_producer_id_transit(md, transaction_timeout_ms, expected)
        except ApiError as e:
            return e.error_code, -1, -1
        if transit.txn_state is _S.PREPARE_EPOCH_FENCE:
            # Abort the ongoing transaction with the bumped epoch; the producer retries.
            err = await self._end_transaction(
                transactional_id, transit.producer_id, transit.producer_epoch, False,
                from_client=False,
            )  # fmt: skip
            return err or ConcurrentTransactions.error_code, -1, -1
        err = await self.txn_manager.append_transaction_to_log(
            transactional_id, coordinator_epoch, transit
        )
        if err:
            return err, -1, -1
        return 0, transit.producer_id, transit.producer_epoch

    def _prepare_init_producer_id_transit(
        self,
        md: TransactionMetadata,
        timeout_ms: int,
        expected: tuple[int, int] | None,
    ) -> TxnTransitMetadata:
        if md.pending_transition_in_progress:
            raise ConcurrentTransactions(md.transactional_id)
        if expected is not None:
            pid, epoch = expected
            valid = (
                md.producer_epoch == NO_PRODUCER_EPOCH
                or pid == md.producer_id
                or (pid == md.last_producer_id and epoch >= 2**15 - 2)
            )
            if not valid:
                raise ProducerFenced(f"{md.transactional_id}: producer id {pid} is not current")
        state = md.state
        if state.is_prepare:
            raise ConcurrentTransactions(md.transactional_id)
        if state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            if md.is_producer_epoch_exhausted and (
                expected is None or expected[1] == md.producer_epoch
            ):
                return md.prepare_producer_id_rotation(
                    self._generate_producer_id(), timeout_ms, self._time_ms(), expected is not None
                )
            return md.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], self._time_ms()
            )
        if state is _S.ONGOING:
            return md.prepare_fence_producer_epoch()
        raise RuntimeError(f"{md.transactional_id} is in state {state.state_name}")

    # ================================================================== AddPartitionsToTxn

    async def add_partitions_to_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
    ) -> int:
        """AddPartitionsToTxn / AddOffsetsToTxn: 0 or the error of every partition. While
        the previous transaction completes, the request waits for it (a moment) first."""
        if not transactional_id:
            return InvalidRequest.error_code
        await self.marker_channel.wait_for_completion(transactional_id, _WAIT_FOR_COMPLETION_S)
        err, current = self.txn_manager.get_transaction_state(transactional_id)
        if err:
            return err
        if current is None:
            return InvalidProducerIdMapping.error_code
        md = current.transaction_metadata
        if md.producer_id != producer_id:
            return InvalidProducerIdMapping.error_code
        if md.producer_epoch != producer_epoch:
            return ProducerFenced.error_code
        if md.pending_transition_in_progress or md.state.is_prepare:
            return ConcurrentTransactions.error_code
        if md.state is _S.ONGOING and partitions <= md.topic_partitions:
            return 0
        transit = md.prepare_add_partitions(partitions, self._time_ms())
        return await self.txn_manager.append_transaction_to_log(
            transactional_id, current.coordinator_epoch, transit
        )

    def verify_partitions_in_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ with verify_only (KIP-890): whether each partition is in
        the producer's ongoing transaction (INVALID_TXN_STATE when not)."""
        err, current = self.txn_manager.get_transaction_state(transactional_id)
        if not err:
            if current is None:
                err = InvalidProducerIdMapping.error_code
            else:
                md = current.transaction_metadata
                if md.producer_id != producer_id:
                    err = InvalidProducerIdMapping.error_code
                elif md.producer_epoch != producer_epoch:
                    err = ProducerFenced.error_code
                elif md.state is not _S.ONGOING:
                    err = InvalidTxnState.error_code
                else:
                    return {
                        tp: 0 if tp in md.topic_partitions else InvalidTxnState.error_code
                        for tp in partitions
                    }
        return dict.fromkeys(partitions, err)

    async def verify_transactional_produce(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
    ) -> int:
        """KIP-890's server-side defence, for a transactional produce on this broker: 0 when
        the partition is in the producer's ongoing transaction, INVALID_TXN_STATE when it is
        not, INVALID_PRODUCER_EPOCH for another producer or epoch. Ids another broker
        coordinates are not checked here (0); NOT_ENOUGH_REPLICAS (retriable) while the id's
        partition loads."""
        err, current = self.txn_manager.get_transaction_state(transactional_id)
        if err == CoordinatorLoadInProgress.error_code:
            return NotEnoughReplicas.error_code
        if err:
            return 0
        if current is None:
            return InvalidProducerEpoch.error_code
        md = current.transaction_metadata
        if md.producer_id != producer_id or md.producer_epoch != producer_epoch:
            return InvalidProducerEpoch.error_code
        if md.state is not _S.ONGOING or (topic, partition) not in md.topic_partitions:
            return InvalidTxnState.error_code
        return 0

    # ================================================================== EndTxn

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        """EndTxn: 0 once the outcome is decided (PrepareCommit/PrepareAbort written)."""
        return await self._end_transaction(
            transactional_id, producer_id, producer_epoch, commit, from_client=True
        )

    async def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        from_client: bool,
    ) -> int:
        if not transactional_id:
            return InvalidRequest.error_code
        err, current = self.txn_manager.get_transaction_state(transactional_id)
        if err:
            return err
        if current is None:
            return InvalidProducerIdMapping.error_code
        coordinator_epoch = current.coordinator_epoch
        md = current.transaction_metadata
        is_epoch_fence = False
        if md.producer_id != producer_id:
            return InvalidProducerIdMapping.error_code
        if (from_client and producer_epoch != md.producer_epoch) or (
            producer_epoch < md.producer_epoch
        ):
            return ProducerFenced.error_code
        if md.pending_transition_in_progress and md.pending_state is not _S.PREPARE_EPOCH_FENCE:
            return ConcurrentTransactions.error_code
        state = md.state
        if state is _S.ONGOING:
            next_state = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
            if next_state is _S.PREPARE_ABORT and md.pending_state is _S.PREPARE_EPOCH_FENCE:
                # The fence: the abort record carries the bumped epoch.
                is_epoch_fence = True
                md.pending_state = None
                md.producer_epoch = producer_epoch
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = md.prepare_abort_or_commit(next_state, self._time_ms())
        elif state is _S.COMPLETE_COMMIT:
            return 0 if commit else InvalidTxnState.error_code
        elif state is _S.COMPLETE_ABORT:
            return InvalidTxnState.error_code if commit else 0
        elif state is _S.PREPARE_COMMIT:
            return ConcurrentTransactions.error_code if commit else InvalidTxnState.error_code
        elif state is _S.PREPARE_ABORT:
            return InvalidTxnState.error_code if commit else ConcurrentTransactions.error_code
        else:  # Empty (Dead and PrepareEpochFence are never current states here)
            return InvalidTxnState.error_code
        err = await self.txn_manager.append_transaction_to_log(
            transactional_id, coordinator_epoch, transit
        )
        if err:
            if is_epoch_fence:
                md.has_failed_epoch_fence = True
            return err
        # The outcome is decided: answer now, send the markers in the background.
        err, current = self.txn_manager.get_transaction_state(transactional_id)
        if err:
            return err
        if current is None or current.coordinator_epoch != coordinator_epoch:
            return NotCoordinator.error_code
        md = current.transaction_metadata
        if md.producer_id != producer_id:
            return InvalidProducerIdMapping.error_code
        if md.producer_epoch != producer_epoch:
            return ProducerFenced.error_code
        if md.pending_transition_in_progress:
            return ConcurrentTransactions.error_code
        if md.state is not (_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT):
            return InvalidTxnState.error_code
        self._send_markers(coordinator_epoch, commit, md, md.prepare_complete(self._time_ms()))
        return 0

    def _send_markers(
        self,
        coordinator_epoch: int,
        commit: bool,
        md: TransactionMetadata,
        complete: TxnTransitMetadata,
    ) -> None:
        """Write the markers of ``md``'s prepared transaction, then ``complete``."""
        txn_id = md.transactional_id
        entry = TxnMarkerEntry(
            md.producer_id,
            md.producer_epoch,
            coordinator_epoch,
            commit,
            tuple(sorted(md.topic_partitions)),
        )

        def still_owner() -> bool:
            err, current = self.txn_manager.get_transaction_state(txn_id)
            return (
                not err
                and current is not None
                and current.coordinator_epoch == coordinator_epoch
                and current.transaction_metadata is md
            )

        async def on_complete() -> None:
            # Until written, or until this coordinator no longer owns the id (its successor
            # completes the transaction when it loads it).
            while still_owner():
                err = await self.txn_manager.append_transaction_to_log(
                    txn_id, coordinator_epoch, complete
                )
                if err == 0:
                    log.debug("%s: %s", txn_id, complete.txn_state.state_name)
                    return
                log.warning("%s: writing %s failed (error %d), retrying", txn_id,
                            complete.txn_state.state_name, err)  # fmt: skip
                await asyncio.sleep(_RETRY_COMPLETE_S)
                if md.pending_state is None and md.state.is_prepare:
                    md.pending_state = complete.txn_state  # failed writes dropped it

        self.marker_channel.add_txn_markers_to_send(txn_id, entry, still_owner, on_complete)

    # ================================================================== timers

    def abort_timed_out_transactions(self) -> None:
        """Fence and abort every Ongoing transaction past its timeout (Kafka's
        abortTimedOutTransactions)."""
        for txn_id, producer_id, _epoch in self.txn_manager.timed_out_transactions(self._time_ms()):
            err, current = self.txn_manager.get_transaction_state(txn_id)
            if err or current is None:
                continue
            md = current.transaction_metadata
            if md.producer_id != producer_id or md.pending_transition_in_progress:
                continue
            fence = md.prepare_fence_producer_epoch()
            log.info(
                "%s: transaction of producer %d timed out after %d ms; aborting it with epoch %d",
                txn_id,
                producer_id,
                md.txn_timeout_ms,
                fence.producer_epoch,
            )

            async def abort(txn_id: str = txn_id, fence: TxnTransitMetadata = fence) -> None:
                err = await self._end_transaction(
                    txn_id, fence.producer_id, fence.producer_epoch, False, from_client=False
                )
                if err:
                    log.warning("%s: aborting the timed-out transaction failed: error %d",
                                txn_id, err)  # fmt: skip

            self._spawn(abort())

    def remove_expired_transactional_ids(self) -> None:
        """Tombstone the ids idle for ``transactional.id.expiration.ms``."""
        for txn_id, coordinator_epoch, dead in self.txn_manager.remove_expired_transactional_ids():

            async def remove(
                txn_id: str = txn_id,
                epoch: int = coordinator_epoch,
                dead: TxnTransitMetadata = dead,
            ) -> None:
                err = await self.txn_manager.append_transaction_to_log(txn_id, epoch, dead)
                if not err:
                    log.info("%s: transactional id expired and removed", txn_id)

            self._spawn(remove())

    # ================================================================== admin

    def describe_transactions(self, transactional_ids: list[str]) -> list[TransactionDescription]:
        out = []
        for txn_id in transactional_ids:
            err, current = self.txn_manager.get_transaction_state(txn_id)
            if err:
                out.append(TransactionDescription(err, txn_id))
                continue
            if current is None:
                out.append(TransactionDescription(105, txn_id))  # TRANSACTIONAL_ID_NOT_FOUND
                continue
            md = current.transaction_metadata
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(md.topic_partitions):
                by_topic.setdefault(topic, []).append(p)
            out.append(
                TransactionDescription(
                    0,
                    txn_id,
                    md.state.state_name,
                    md.txn_timeout_ms,
                    md.txn_start_timestamp,
                    md.producer_id,
                    md.producer_epoch,
                    tuple((t, tuple(ps)) for t, ps in by_topic.items()),
                )
            )
        return out

    # ================================================================== helpers

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        loop = self._loop or asyncio.get_running_loop()
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("transaction coordinator task failed", exc_info=task.exception())
