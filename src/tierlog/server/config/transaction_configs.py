"""The transaction coordinator's keys: ``transaction.state.log.*`` (Kafka's
``TransactionLogConfigs``) and the coordinator's timeouts and cleanup intervals (Kafka's
``TransactionStateManagerConfigs``).
"""

from __future__ import annotations

from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import define as _d
from tierlog.server.config_def import ignored as _ignored

__all__ = ["TRANSACTION_CONFIGS"]

# fmt: off
TRANSACTION_CONFIGS: tuple[BrokerConfigDef, ...] = (
    _d("transaction.state.log.replication.factor", "short", 3, _min(1),
       "Replication factor of __transaction_state (capped by the live brokers when created)."),
    _d("transaction.state.log.min.isr", "int", 2, _min(1),
       "min.insync.replicas of __transaction_state."),
    _d("transaction.state.log.num.partitions", "int", 50, _min(1),
       "Partitions of __transaction_state (fixed once created)."),
    _d("transaction.state.log.segment.bytes", "int", 104_857_600, _min(1),
       "segment.bytes of __transaction_state."),
    _ignored("transaction.state.log.load.buffer.size", "int", 5_242_880, _min(1),
             "loads read the log in 1 MiB chunks"),
    _d("transaction.max.timeout.ms", "int", 900_000, _min(1),
       "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT)."),
    _d("transactional.id.expiration.ms", "int", 604_800_000, _min(1),
       "A transactional id idle this long (no transaction) is removed."),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10_000, _min(1),
       "How often transactions open past their timeout are looked for and aborted."),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3_600_000, _min(1),
       "How often expired transactional ids are removed."),
)
# fmt: on
