"""The client quota keys (Kafka's ``QuotaConfigs``, KIP-13, KIP-55): the samples over which
the ``producer_byte_rate`` and ``consumer_byte_rate`` quotas are measured.
"""

from __future__ import annotations

from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import define as _d

__all__ = ["QUOTA_CONFIGS"]

# fmt: off
QUOTA_CONFIGS: tuple[BrokerConfigDef, ...] = (
    _d("quota.window.num", "int", 11, _min(1),
       "Samples of a client's byte rate (producer_byte_rate, consumer_byte_rate quotas)."),
    _d("quota.window.size.seconds", "int", 1, _min(1), "Length of each quota rate sample."),
)
# fmt: on
