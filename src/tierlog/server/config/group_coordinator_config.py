"""The group coordinator's keys (Kafka's ``GroupCoordinatorConfig``): classic and
consumer-protocol (KIP-848) group timeouts and sizes, the server assignors, and the
``__consumer_offsets`` topic; plus the share-group keys (Kafka's ``ShareCoordinatorConfig``),
accepted and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tierlog.errors import ConfigError
from tierlog.server.config.server_configs import SINGLE_NODE as _SINGLE
from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import define as _d
from tierlog.server.config_def import ignored as _ignored

__all__ = ["GROUP_COORDINATOR_CONFIGS", "assignor_names", "validate_group_configs"]

# Kafka's assignor class names, accepted for the short names.
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _assignors(v: Any) -> str | None:
    bad = [a for a in v if a not in ("uniform", "range") and a not in _ASSIGNOR_CLASSES]
    if not v:
        return "at least one assignor is needed (uniform, range)"
    return f"unknown assignor {', '.join(bad)}; use uniform and/or range" if bad else None


# fmt: off
GROUP_COORDINATOR_CONFIGS: tuple[BrokerConfigDef, ...] = (
    _d("group.initial.rebalance.delay.ms", "int", 3000, _min(0),
       "How long the first rebalance of an empty group waits for more members."),
    _d("group.min.session.timeout.ms", "int", 6000, _min(0), "Smallest session timeout allowed."),
    _d("group.max.session.timeout.ms", "int", 1_800_000, _min(0), "Largest session timeout."),
    _d("group.consumer.session.timeout.ms", "int", 45_000, _min(1),
       "Session timeout of consumer-protocol (KIP-848) members."),
    _d("group.consumer.heartbeat.interval.ms", "int", 5_000, _min(1),
       "Heartbeat interval the coordinator gives consumer-protocol members."),
    _d("group.consumer.min.session.timeout.ms", "int", 45_000, _min(1),
       "Smallest consumer.session.timeout.ms a group config may set."),
    _d("group.consumer.max.session.timeout.ms", "int", 60_000, _min(1),
       "Largest consumer.session.timeout.ms a group config may set."),
    _d("group.consumer.min.heartbeat.interval.ms", "int", 5_000, _min(1),
       "Smallest consumer.heartbeat.interval.ms a group config may set."),
    _d("group.consumer.max.heartbeat.interval.ms", "int", 15_000, _min(1),
       "Largest consumer.heartbeat.interval.ms a group config may set."),
    _d("group.consumer.max.size", "int", 2**31 - 1, _min(1),
       "Most members of one consumer-protocol group (GROUP_MAX_SIZE_REACHED beyond)."),
    _d("group.consumer.assignors", "list", ("uniform", "range"), _assignors,
       "Server assignors of consumer-protocol groups; the first is the default."),
    _d("offsets.topic.num.partitions", "int", 50, _min(1),
       "Partitions of __consumer_offsets (fixed once created)."),
    _d("offsets.topic.replication.factor", "short", 3, _min(1),
       "Replication factor of __consumer_offsets (capped by the live brokers when created)."),
    _d("offsets.topic.segment.bytes", "int", 104_857_600, _min(1),
       "segment.bytes of __consumer_offsets."),
    _d("offsets.retention.minutes", "int", 10_080, _min(1),
       "Committed offsets of an empty group expire after this."),
    # --- share groups (out of scope)
    _ignored("share.coordinator.state.topic.replication.factor", "short", 3, _min(1), _SINGLE),
    _ignored("share.coordinator.state.topic.min.isr", "short", 2, _min(1), _SINGLE),
)
# fmt: on


def assignor_names(assignors: Iterable[str]) -> tuple[str, ...]:
    """``group.consumer.assignors`` as short names (Kafka's class names mapped)."""
    return tuple(_ASSIGNOR_CLASSES.get(a, a) for a in assignors)


def validate_group_configs(get: Callable[[str], Any]) -> None:
    """Check the group session timeouts and heartbeat intervals against each other; ``get``
    reads a broker key's typed value.

    Raises:
        ConfigError: a minimum above its maximum, a heartbeat interval not below the session
            timeout, or a consumer-protocol default outside its min/max bounds.
    """
    min_session = get("group.min.session.timeout.ms")
    max_session = get("group.max.session.timeout.ms")
    if min_session > max_session:
        raise ConfigError(
            "group.min.session.timeout.ms",
            f"{min_session} is more than group.max.session.timeout.ms {max_session}",
        )
    session = get("group.consumer.session.timeout.ms")
    heartbeat = get("group.consumer.heartbeat.interval.ms")
    if heartbeat >= session:
        raise ConfigError(
            "group.consumer.heartbeat.interval.ms",
            f"{heartbeat} must be less than group.consumer.session.timeout.ms {session}",
        )
    for key, value in (
        ("group.consumer.session.timeout.ms", session),
        ("group.consumer.heartbeat.interval.ms", heartbeat),
    ):
        low = key.replace("consumer.", "consumer.min.")
        high = key.replace("consumer.", "consumer.max.")
        lo, hi = get(low), get(high)
        if not lo <= value <= hi:
            raise ConfigError(key, f"{value} is not between {low} {lo} and {high} {hi}")
