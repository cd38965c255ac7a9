"""The transaction coordinator (Kafka's ``kafka.coordinator.transaction``).

* :mod:`~tierlog.coordinator.transaction.transaction_coordinator` --
  :class:`TransactionCoordinator`: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
  EndTxn, DescribeTransactions, timeouts and failover.
* :mod:`~tierlog.coordinator.transaction.transaction_state_manager` --
  :class:`TransactionStateManager`: the ids this broker coordinates, loading and writing
  ``__transaction_state``.
* :mod:`~tierlog.coordinator.transaction.transaction_metadata` -- one id's state and its
  transitions; :mod:`~tierlog.coordinator.transaction.transaction_state` -- the states.
* :mod:`~tierlog.coordinator.transaction.transaction_marker_channel_manager` -- writing the
  COMMIT/ABORT markers to the partitions' leaders.
* :mod:`~tierlog.coordinator.transaction.transaction_log` -- the record key and value
  schemas of ``__transaction_state`` (sans-IO).
"""

from tierlog.coordinator.transaction.transaction_coordinator import (
    TransactionCoordinator,
    TransactionDescription,
)
from tierlog.coordinator.transaction.transaction_marker_channel_manager import (
    TxnMarkerEntry,
    TxnMarkerWriter,
)
from tierlog.coordinator.transaction.transaction_state import TransactionState
from tierlog.coordinator.transaction.transaction_state_manager import (
    TRANSACTION_STATE_TOPIC_NAME,
)

__all__ = [
    "TRANSACTION_STATE_TOPIC_NAME",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionState",
    "TxnMarkerEntry",
    "TxnMarkerWriter",
]
