"""One transactional id's state (Kafka's ``TransactionMetadata`` and ``TxnTransitMetadata``).

A change goes in two steps, as in Kafka: a ``prepare_*`` method computes the next state as a
frozen :class:`TxnTransitMetadata` and marks it pending (``pending_state``), the coordinator
writes that to ``__transaction_state``, and only once the write succeeded
:meth:`TransactionMetadata.complete_transition_to` applies it. While a transition is pending,
other requests for the id get CONCURRENT_TRANSACTIONS; a failed write calls
:meth:`TransactionMetadata.pending_transition_failed`.

Producer epochs (KIP-360): ``producer_epoch`` is the current epoch, ``last_producer_epoch`` the
one before the latest bump (so a producer that retries InitProducerId after losing the answer
gets the same epoch again), ``last_producer_id`` the id before a rotation. An epoch at
``Short.MAX_VALUE - 1`` is exhausted: the next InitProducerId rotates to a new producer id.

Not thread-safe: one event loop owns every instance.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.coordinator.transaction.transaction_state import (
    TransactionState,
    is_valid_transition,
)
from tierlog.errors import ProducerFenced

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TopicPartition",
    "TransactionMetadata",
    "TxnTransitMetadata",
    "is_epoch_exhausted",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 2**15 - 1

TopicPartition = tuple[str, int]

_S = TransactionState


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: no bump is left after this epoch
    (one is kept back so that fencing a producer can always bump once more)."""
    return epoch >= SHORT_MAX - 1


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The next state of a transactional id, as written to ``__transaction_state``."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


class TransactionMetadata:
    """The state of one transactional id. See the module docstring; not thread-safe."""

    __slots__ = (
        "has_failed_epoch_fence",
        "last_producer_epoch",
        "last_producer_id",
        "pending_state",
        "producer_epoch",
        "producer_id",
        "state",
        "topic_partitions",
        "transactional_id",
        "txn_last_update_timestamp",
        "txn_start_timestamp",
        "txn_timeout_ms",
    )

    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        last_producer_id: int,
        producer_epoch: int,
        last_producer_epoch: int,
        txn_timeout_ms: int,
        state: TransactionState,
        topic_partitions: set[TopicPartition] | None = None,
        txn_start_timestamp: int = -1,
        txn_last_update_timestamp: int = -1,
    ) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = last_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        self.topic_partitions: set[TopicPartition] = set(topic_partitions or ())
        self.txn_start_timestamp = txn_start_timestamp
        self.txn_last_update_timestamp = txn_last_update_timestamp
        #: The state being written to the log, if any.
        self.pending_state: TransactionState | None = None
        #: A fence (timeout abort) whose write failed: the next fence does not bump again.
        self.has_failed_epoch_fence = False

    def __repr__(self) -> str:
        return (
            f"TransactionMetadata({self.transactional_id!r}, producer_id={self.producer_id}, "
            f"epoch={self.producer_epoch}, last_epoch={self.last_producer_epoch}, "
            f"state={self.state.state_name}, pending={self.pending_state}, "
            f"partitions={sorted(self.topic_partitions)})"
        )

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransitMetadata) -> TransactionMetadata:
        """The metadata a loaded record describes."""
        return cls(
            transactional_id,
            t.producer_id,
            t.last_producer_id,
            t.producer_epoch,
            t.last_producer_epoch,
            t.txn_timeout_ms,
            t.txn_state,
            set(t.topic_partitions),
            t.txn_start_timestamp,
            t.txn_last_update_timestamp,
        )

    # ------------------------------------------------------------------ queries

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def current_transit(self) -> TxnTransitMetadata:
        """The current state as a transit value (no change)."""
        return TxnTransitMetadata(
            self.producer_id,
            self.last_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            self.state,
            frozenset(self.topic_partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    # ------------------------------------------------------------------ prepare

    def _prepare_transition_to(
        self,
        state: TransactionState,
        producer_id: int,
        producer_epoch: int,
        last_producer_epoch: int,
        txn_timeout_ms: int,
        topic_partitions: frozenset[TopicPartition],
        txn_start_timestamp: int,
        update_timestamp: int,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise RuntimeError(
                f"{self.transactional_id}: cannot prepare {state.state_name} while "
                f"{self.pending_state.state_name} is pending"
            )
        if not is_valid_transition(self.state, state):
            raise RuntimeError(
                f"{self.transactional_id}: invalid transition "
                f"{self.state.state_name} -> {state.state_name}"
            )
        self.pending_state = state
        return TxnTransitMetadata(
            producer_id,
            self.last_producer_id if producer_id == self.producer_id else self.producer_id,
            producer_epoch,
            last_producer_epoch,
            txn_timeout_ms,
            state,
            topic_partitions,
            txn_start_timestamp,
            update_timestamp,
        )

    def prepare_no_transit(self) -> TxnTransitMetadata:
        """Kafka's prepareNoTransit: the current state, marked pending (a rewrite)."""
        self.pending_state = self.state
        return self.current_transit()

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Bump the epoch to fence the current producer before aborting its transaction
        (a transaction timeout, or InitProducerId while Ongoing). Pending PrepareEpochFence.

        Raises:
            RuntimeError: the epoch is at Short.MAX_VALUE.
        """
        if self.producer_epoch >= SHORT_MAX:
            raise RuntimeError(f"{self.transactional_id}: cannot fence epoch {SHORT_MAX}")
        # A fence whose write failed already bumped: do not bump twice.
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare_transition_to(
            _S.PREPARE_EPOCH_FENCE,
            self.producer_id,
            bumped,
            NO_PRODUCER_EPOCH,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def prepare_increment_producer_epoch(
        self, txn_timeout_ms: int, expected_producer_epoch: int | None, update_timestamp: int
    ) -> TxnTransitMetadata:
        """InitProducerId on a completed or empty transaction: the next epoch (KIP-360: a
        producer that names its current epoch bumps it; one that names the previous epoch is
        retrying and gets the current one again).

        Raises:
            ProducerFenced: the expected epoch is neither the current nor the previous one.
            RuntimeError: the epoch is exhausted (the caller rotates the producer id instead).
        """
        if self.is_producer_epoch_exhausted:
            raise RuntimeError(f"{self.transactional_id}: producer epoch exhausted")
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif (
            self.producer_epoch == NO_PRODUCER_EPOCH
            or expected_producer_epoch == self.producer_epoch
        ):
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise ProducerFenced(
                f"{self.transactional_id}: epoch {expected_producer_epoch} is neither the current "
                f"{self.producer_epoch} nor the previous {self.last_producer_epoch}"
            )
        return self._prepare_transition_to(
            _S.EMPTY,
            self.producer_id,
            epoch,
            last_epoch,
            txn_timeout_ms,
            frozenset(),
            -1,
            update_timestamp,
        )

    def prepare_producer_id_rotation(
        self,
        new_producer_id: int,
        txn_timeout_ms: int,
        update_timestamp: int,
        record_last_epoch: bool,
    ) -> TxnTransitMetadata:
        """A new producer id with epoch 0 (the old one's epochs are exhausted)."""
        return self._prepare_transition_to(
            _S.EMPTY,
            new_producer_id,
            0,
            self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms,
            frozenset(),
            -1,
            update_timestamp,
        )

    def prepare_add_partitions(
        self, added: set[TopicPartition], update_timestamp: int
    ) -> TxnTransitMetadata:
        """Ongoing with ``added`` among its partitions; a new transaction starts now."""
        start = (
            update_timestamp
            if self.state in (_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT)
            else self.txn_start_timestamp
        )
        return self._prepare_transition_to(
            _S.ONGOING,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions | added),
            start,
            update_timestamp,
        )

    def prepare_abort_or_commit(
        self, state: TransactionState, update_timestamp: int
    ) -> TxnTransitMetadata:
        """PrepareCommit or PrepareAbort (EndTxn, or a fence's abort)."""
        return self._prepare_transition_to(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions),
            self.txn_start_timestamp,
            update_timestamp,
        )

    def prepare_complete(self, update_timestamp: int) -> TxnTransitMetadata:
        """CompleteCommit / CompleteAbort once every marker is written."""
        state = _S.COMPLETE_COMMIT if self.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        # The prepare record was written, so a failed fence before it no longer matters.
        self.has_failed_epoch_fence = False
        return self._prepare_transition_to(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            update_timestamp,
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        """Dead: the transactional id expired and is removed (a tombstone is written)."""
        return self._prepare_transition_to(
            _S.DEAD,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    # ------------------------------------------------------------------ complete

    def complete_transition_to(self, t: TxnTransitMetadata) -> None:
        """Apply a transition whose record is in the log (Kafka's completeTransitionTo).

        Raises:
            RuntimeError: ``t`` is not the pending transition, or breaks an invariant.
        """
        if self.pending_state is None or self.pending_state is not t.txn_state:
            raise RuntimeError(
                f"{self.transactional_id}: completing {t.txn_state.state_name} but "
                f"{self.pending_state} is pending"
            )
        s = t.txn_state
        if s is _S.ONGOING:
            if t.producer_id != self.producer_id or t.producer_epoch != self.producer_epoch:
                raise RuntimeError(f"{self.transactional_id}: producer changed during Ongoing")
            if not t.topic_partitions >= self.topic_partitions:
                raise RuntimeError(f"{self.transactional_id}: partitions removed while Ongoing")
        elif (s.is_prepare or s.is_complete) and t.producer_id != self.producer_id:
            raise RuntimeError(f"{self.transactional_id}: producer changed during {s}")
        self.state = s
        self.producer_id = t.producer_id
        self.last_producer_id = t.last_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.txn_timeout_ms = t.txn_timeout_ms
        self.topic_partitions = set(t.topic_partitions)
        self.txn_start_timestamp = t.txn_start_timestamp
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.pending_state = None

    def pending_transition_failed(self) -> None:
        """The log write of the pending transition failed: forget it."""
        self.pending_state = None
