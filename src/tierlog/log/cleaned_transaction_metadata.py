"""Kafka's ``CleanedTransactionMetadata``: the transactions a cleaning round walks through, so
the cleaner can drop the data of aborted transactions and the markers that no longer mark
anything (KIP-98).

The cleaner feeds it every batch of the segments it rewrites, in offset order, across all the
groups of a round:

* a transactional data batch inside an aborted transaction (from the transaction's first
  offset, as the ``.txnindex`` entries say, until its producer's ABORT marker) can be
  discarded; the transaction is marked as still having data in the log;
* an ABORT marker whose transaction had data in this round is kept, and its ``.txnindex``
  entry goes to the cleaned segment's index (:attr:`cleaned_index`); one whose transaction had
  none can be discarded, once its delete horizon has passed (the cleaner's part);
* a COMMIT marker whose producer had no transactional batch since its previous marker can be
  discarded the same way; an empty control batch (already cleaned) always can.

Not thread-safe (one per round).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from tierlog.log.transaction_index import AbortedTxn, TransactionIndex
from tierlog.records.control_records import read_end_txn_marker
from tierlog.records.record_batch import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatchHeader,
)

__all__ = ["CleanedTransactionMetadata"]


@dataclass(slots=True)
class _AbortedTransactionMetadata:
    """An aborted transaction the round is inside of (Kafka's ``AbortedTransactionMetadata``)."""

    aborted_txn: AbortedTxn
    #: The last offset of the last batch of the transaction seen this round (-1: none).
    last_observed_batch_offset: int = -1


class CleanedTransactionMetadata:
    """The transaction state of one cleaning round (see the module docstring)."""

    def __init__(self) -> None:
        self._ongoing_committed_txns: set[int] = set()
        self._ongoing_aborted_txns: dict[int, _AbortedTransactionMetadata] = {}
        #: (first offset, producer id, last offset, entry) not reached yet: a min-heap.
        self._aborted: list[tuple[int, int, int, AbortedTxn]] = []
        self._added: set[AbortedTxn] = set()
        #: Where the entries of the aborted transactions whose markers stay are written (the
        #: ``.txnindex`` of the segment being written); None: nowhere.
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted_transactions(self, aborted: list[AbortedTxn]) -> None:
        """Adds ``.txnindex`` entries of the range being cleaned; an entry added twice counts
        once."""
        for txn in aborted:
            if txn not in self._added:
                self._added.add(txn)
                item = (txn.first_offset, txn.producer_id, txn.last_offset, txn)
                heapq.heappush(self._aborted, item)

    def _consume_aborted_txns_up_to(self, offset: int) -> None:
        aborted = self._aborted
        ongoing = self._ongoing_aborted_txns
        while aborted and aborted[0][0] <= offset:
            txn = heapq.heappop(aborted)[3]
            if txn.producer_id not in ongoing:
                ongoing[txn.producer_id] = _AbortedTransactionMetadata(txn)

    def on_control_batch_read(self, chunk: bytes, header: RecordBatchHeader) -> bool:
        """The control batch ``header`` (in ``chunk``) was read; True when it can be
        discarded (its transaction has no data left in the log).

        Raises:
            InvalidRecord: the control record is malformed.
            CorruptRecordError: its bytes are truncated.
        """
        self._consume_aborted_txns_up_to(header.base_offset + header.last_offset_delta)
        if header.records_count == 0:
            return True  # an empty control batch was already cleaned
        marker = read_end_txn_marker(chunk, header)
        if marker is None:
            return False
        producer_id = header.producer_id
        if marker.is_abort:
            ongoing = self._ongoing_aborted_txns.pop(producer_id, None)
            if ongoing is not None and ongoing.last_observed_batch_offset >= 0:
                # Kept until every batch of the transaction is gone.
                if self.cleaned_index is not None:
                    self.cleaned_index.append(ongoing.aborted_txn)
                return False
            return True
        # COMMIT: discardable when none of the transaction's batches was read.
        if producer_id in self._ongoing_committed_txns:
            self._ongoing_committed_txns.discard(producer_id)
            return False
        return True

    def on_batch_read(self, header: RecordBatchHeader) -> bool:
        """The data batch ``header`` was read; True when it belongs to an aborted
        transaction (it can be discarded)."""
        last_offset = header.base_offset + header.last_offset_delta
        self._consume_aborted_txns_up_to(last_offset)
        if not header.attributes & TRANSACTIONAL_FLAG_MASK:
            return False
        ongoing = self._ongoing_aborted_txns.get(header.producer_id)
        if ongoing is not None:
            ongoing.last_observed_batch_offset = last_offset
            return True
        self._ongoing_committed_txns.add(header.producer_id)
        return False

    def should_discard_batch(self, chunk: bytes, header: RecordBatchHeader) -> bool:
        """Kafka's ``shouldDiscardBatch``: :meth:`on_control_batch_read` or
        :meth:`on_batch_read` as the batch is."""
        if header.attributes & CONTROL_FLAG_MASK:
            return self.on_control_batch_read(chunk, header)
        return self.on_batch_read(header)
