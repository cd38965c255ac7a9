"""What a transaction coordinator asks a partition leader to write: one COMMIT or ABORT marker
for one producer on one partition (a WriteTxnMarkers entry, flattened per partition)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TxnMarker"]


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One end-transaction marker to append to ``topic``-``partition``. Immutable value.

    ``commit`` False is an ABORT. ``coordinator_epoch`` is the epoch of the coordinator's
    ``__transaction_state`` partition: a marker from an older coordinator is fenced.
    """

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    topic: str
    partition: int
