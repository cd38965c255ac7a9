"""Group configs (KIP-848's resource type 32, GROUP): per-group overrides of the broker's
``group.consumer.*`` settings, with Kafka's names and bounds. Pure: strings in, checked values
out.

* ``consumer.session.timeout.ms``: default ``group.consumer.session.timeout.ms``, within
  ``group.consumer.min.session.timeout.ms`` .. ``group.consumer.max.session.timeout.ms``;
* ``consumer.heartbeat.interval.ms``: default ``group.consumer.heartbeat.interval.ms``, within
  ``group.consumer.min.heartbeat.interval.ms`` .. ``group.consumer.max.heartbeat.interval.ms``.

The heartbeat interval must stay below the session timeout (Kafka's rule), whichever of the
two comes from the broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tierlog.coordinator.group.consumer_group import ConsumerGroupConfig
from tierlog.errors import ConfigError

__all__ = [
    "CONSUMER_HEARTBEAT_INTERVAL_MS",
    "CONSUMER_SESSION_TIMEOUT_MS",
    "GROUP_CONFIG_DOCS",
    "GroupConfigBounds",
    "effective_config",
    "validate_group_config",
]

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"

GROUP_CONFIG_DOCS: Mapping[str, str] = {
    CONSUMER_SESSION_TIMEOUT_MS: "The timeout to detect client failures when using the "
    "consumer group protocol.",
    CONSUMER_HEARTBEAT_INTERVAL_MS: "The heartbeat interval given to the members.",
}


@dataclass(frozen=True, slots=True)
class GroupConfigBounds:
    """The broker's ``group.consumer.min/max.*`` limits (Kafka's defaults)."""

    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000


def validate_group_config(
    overrides: Mapping[str, str], defaults: ConsumerGroupConfig, bounds: GroupConfigBounds
) -> dict[str, int]:
    """The overrides as ints, checked against Kafka's bounds.

    Raises:
        ConfigError: an unknown name, a value that is not an int, out of bounds, or a
            heartbeat interval not below the session timeout.
    """
    out: dict[str, int] = {}
    limits = {
        CONSUMER_SESSION_TIMEOUT_MS: (
            bounds.min_session_timeout_ms,
            bounds.max_session_timeout_ms,
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        ),
        CONSUMER_HEARTBEAT_INTERVAL_MS: (
            bounds.min_heartbeat_interval_ms,
            bounds.max_heartbeat_interval_ms,
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        ),
    }
    for name, raw in overrides.items():
        if name not in limits:
            raise ConfigError(
                name, f"unknown group config; known: {', '.join(sorted(GROUP_CONFIG_DOCS))}"
            )
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(name, f"{raw!r} is not an integer") from None
        lo, hi, lo_name, hi_name = limits[name]
        if value < lo:
            raise ConfigError(name, f"{value} must be greater than or equal to {lo_name} {lo}")
        if value > hi:
            raise ConfigError(name, f"{value} must be less than or equal to {hi_name} {hi}")
        out[name] = value
    config = effective_config(defaults, out)
    if config.heartbeat_interval_ms >= config.session_timeout_ms:
        raise ConfigError(
            CONSUMER_HEARTBEAT_INTERVAL_MS,
            f"{config.heartbeat_interval_ms} must be less than {CONSUMER_SESSION_TIMEOUT_MS} "
            f"{config.session_timeout_ms}",
        )
    return out


def effective_config(
    defaults: ConsumerGroupConfig, overrides: Mapping[str, int]
) -> ConsumerGroupConfig:
    """The broker's settings with a group's overrides on top."""
    return replace(
        defaults,
        session_timeout_ms=overrides.get(CONSUMER_SESSION_TIMEOUT_MS, defaults.session_timeout_ms),
        heartbeat_interval_ms=overrides.get(
            CONSUMER_HEARTBEAT_INTERVAL_MS, defaults.heartbeat_interval_ms
        ),
    )
