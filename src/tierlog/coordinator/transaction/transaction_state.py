"""The states of a transactional id (Kafka's ``TransactionState``) and their valid transitions.

::

                 InitProducerId                AddPartitionsToTxn / AddOffsetsToTxn
      (new) ──────────────────► Empty ─────────────────────────────────────► Ongoing ◄─┐
                                  ▲ │                                         │  │  │  │ more
                 InitProducerId   │ │ expired (transactional.id.expiration)   │  │  └──┘ partitions
                 ┌────────────────┤ ▼                                         │  │
                 │                │ Dead ◄───── CompleteCommit/CompleteAbort  │  │ timeout, or
                 │                │                                           │  │ InitProducerId
                 │                │   EndTxn(commit)                          │  ▼ while Ongoing
                 │                │  ┌────────────────────────────────────────┘ PrepareEpochFence
                 │                │  ▼                                            │ (in memory only)
                 │     PrepareCommit ──markers written──► CompleteCommit          │
                 │                                                                ▼
                 │     PrepareAbort ◄──EndTxn(abort) from Ongoing ◄───────────────┘
                 │          │
                 │          └──markers written──► CompleteAbort
                 │
                 └── CompleteCommit / CompleteAbort go back to Empty (InitProducerId) or Ongoing
                     (the next transaction's first AddPartitionsToTxn).

Each state has the numeric id Kafka writes in ``TransactionLogValue.TransactionStatus``;
PrepareEpochFence is never written (the fence is persisted as PrepareAbort with the bumped
epoch).

Pure values; thread-safe.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["TransactionState", "is_valid_transition"]


class TransactionState(enum.IntEnum):
    """Kafka's TransactionState, with its wire ids (the ``TransactionStatus`` byte)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """Kafka's name (``PrepareCommit``), as DescribeTransactions and ListTransactions show
        it."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state of a Kafka name (``Ongoing``), case-sensitive as Kafka's; None if unknown."""
        return _BY_NAME.get(name)

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


_NAMES: Final[Mapping[TransactionState, str]] = MappingProxyType(
    {
        TransactionState.EMPTY: "Empty",
        TransactionState.ONGOING: "Ongoing",
        TransactionState.PREPARE_COMMIT: "PrepareCommit",
        TransactionState.PREPARE_ABORT: "PrepareAbort",
        TransactionState.COMPLETE_COMMIT: "CompleteCommit",
        TransactionState.COMPLETE_ABORT: "CompleteAbort",
        TransactionState.DEAD: "Dead",
        TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
    }
)
_BY_NAME: Final[Mapping[str, TransactionState]] = MappingProxyType(
    {v: k for k, v in _NAMES.items()}
)

_S = TransactionState

#: Kafka's ``validPreviousStates`` of each state (Kafka 3.x, transaction version 1).
VALID_PREVIOUS_STATES: Final[Mapping[TransactionState, frozenset[TransactionState]]] = (
    MappingProxyType(
        {
            _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
            _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
            _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
            _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
            _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
            _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
            _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
            _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
        }
    )
)


def is_valid_transition(source: TransactionState, target: TransactionState) -> bool:
    """Whether a transactional id may go from ``source`` to ``target``."""
    return source in VALID_PREVIOUS_STATES[target]
