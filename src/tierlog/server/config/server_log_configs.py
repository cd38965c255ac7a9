"""The broker's log keys (Kafka's ``ServerLogConfigs``): log directories, partition counts,
recovery, retention and flush intervals, the broker-level synonyms of every topic config
(``log.segment.bytes`` -> ``segment.bytes``), and the folding of ``log.retention.hours`` /
``minutes`` and ``log.roll.*hours`` into their ``*.ms`` synonyms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.errors import ConfigError
from tierlog.log.log_config import BROKER_SYNONYMS, LONG_MAX, TOPIC_CONFIGS
from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import between as _between
from tierlog.server.config_def import define as _d

__all__ = ["LOG_SYNONYM_CONFIGS", "SERVER_LOG_CONFIGS", "TIME_UNITS", "fold_time_units"]

# fmt: off
SERVER_LOG_CONFIGS: tuple[BrokerConfigDef, ...] = (
    _d("log.dirs", "list", None, None, "Log directories (comma separated); wins over log.dir."),
    _d("log.dir", "string", "./data/logs", None, "The log directory when log.dirs is not set."),
    _d("num.partitions", "int", 1, _min(1), "Partitions of auto-created topics."),
    _d("auto.create.topics.enable", "boolean", True, None, "Create unknown topics on Metadata."),
    _d("log.max.open.files", "int", -1, _between(-1, 2**31 - 1),
       "tierlog: most descriptors segment files (.log, index mappings) hold at once; idle "
       "ones are closed and reopened on use. -1: half the open-files limit, which the broker "
       "raises to the hard limit at startup."),
    _d("num.recovery.threads.per.data.dir", "int", 2, _min(1),
       "Threads per log dir loading logs at startup (Kafka's default is 1)."),
    _d("log.retention.hours", "int", 168, None,
       "Retention in hours; log.retention.minutes and log.retention.ms win over it."),
    _d("log.retention.minutes", "int", None, None, "Retention in minutes; log.retention.ms wins."),
    _d("log.roll.hours", "int", 168, _min(1), "segment.ms default in hours; log.roll.ms wins."),
    _d("log.roll.jitter.hours", "int", 0, _min(0),
       "segment.jitter.ms default in hours; log.roll.jitter.ms wins."),
    _d("log.retention.check.interval.ms", "long", 300_000, _min(1),
       "How often the log manager applies retention."),
    _d("log.flush.scheduler.interval.ms", "long", LONG_MAX, _min(1),
       "How often the log manager checks whether flush.ms is due."),
    _d("log.flush.offset.checkpoint.interval.ms", "int", 60_000, _min(0),
       "How often recovery-point-offset-checkpoint is written."),
    _d("log.flush.start.offset.checkpoint.interval.ms", "int", 60_000, _min(0),
       "How often log-start-offset-checkpoint is written."),
)
# fmt: on


def _synonym_defs() -> tuple[BrokerConfigDef, ...]:
    out = []
    for broker_name, topic_name in BROKER_SYNONYMS.items():
        t = TOPIC_CONFIGS[topic_name]
        out.append(
            BrokerConfigDef(
                broker_name,
                t.type,
                t.default,
                f"Default of the topic config {topic_name}: {t.doc}",
                None,  # validated by log_config.parse_value
                True,
                False,
                topic_name,
            )
        )
    return tuple(out)


#: The broker-level default of every topic config (``log.segment.bytes`` ...).
LOG_SYNONYM_CONFIGS: tuple[BrokerConfigDef, ...] = _synonym_defs()

#: Keys folded into a *.ms synonym: (ms key, [(key, factor)] lowest precedence first).
TIME_UNITS: dict[str, tuple[tuple[str, int], ...]] = {
    "log.retention.ms": (("log.retention.hours", 3_600_000), ("log.retention.minutes", 60_000)),
    "log.roll.ms": (("log.roll.hours", 3_600_000),),
    "log.roll.jitter.ms": (("log.roll.jitter.hours", 3_600_000),),
}

_DEFAULTS = {d.name: d.default for d in SERVER_LOG_CONFIGS}


def fold_time_units(values: Mapping[str, Any]) -> dict[str, int]:
    """Effective ``log.retention.ms``, ``log.roll.ms``, ``log.roll.jitter.ms``.

    Kafka's precedence: the ms key if set, else minutes, else hours (its default).
    A negative retention means unlimited (-1), as in Kafka's logRetentionTimeMillis.

    Raises:
        ConfigError: a value out of range once converted to ms.
    """
    out: dict[str, int] = {}
    for ms_key, units in TIME_UNITS.items():
        if ms_key in values:
            ms = int(values[ms_key])
        else:
            ms = 0
            found = False
            for unit_key, factor in reversed(units):  # highest precedence first
                if unit_key in values and values[unit_key] is not None:
                    ms, found = int(values[unit_key]) * factor, True
                    break
            if not found:
                for unit_key, factor in units:
                    default = _DEFAULTS[unit_key]
                    if default is not None:
                        ms = int(default) * factor
                        break
            if not -LONG_MAX - 1 <= ms <= LONG_MAX:
                raise ConfigError(units[-1][0], "value out of range once converted to ms")
        if ms_key == "log.retention.ms" and ms < 0:
            ms = -1
        out[ms_key] = ms
    return out
