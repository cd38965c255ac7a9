"""Group configs in DescribeConfigs / AlterConfigs / IncrementalAlterConfigs (resource type
32, GROUP): ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``.

The checked overrides live in the consumer group coordinator (which applies them at the
group's next heartbeat) and in ``<first log dir>/group-configs.json``
(:mod:`tierlog.server.group_config_store`). A group need not exist to get configs, as in
Kafka. In a ZooKeeper cluster they are refused (INVALID_REQUEST, with the reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlog.coordinator.group.group_config import (
    GROUP_CONFIG_DOCS,
    GroupConfigBounds,
    effective_config,
    validate_group_config,
)
from tierlog.errors import ConfigError, CoordinatorNotAvailable, InvalidConfig, InvalidRequest
from tierlog.server.group_config_store import GROUP_CONFIGS_FILE, save_group_configs

if TYPE_CHECKING:
    from tierlog.coordinator.group.consumer_group_coordinator import ConsumerGroupCoordinator
    from tierlog.server.kafka_apis import KafkaApis

__all__ = [
    "RESOURCE_GROUP",
    "alter_group_configs",
    "describe_group_configs",
    "group_config_bounds",
    "group_configs_path",
    "incremental_group_overrides",
]

RESOURCE_GROUP = 32
_SOURCE_GROUP_CONFIG = 8  # DescribeConfigsResponse.ConfigSource.GROUP_CONFIG
_SOURCE_DEFAULT_CONFIG = 5
_TYPE_INT = 3
_OP_SET, _OP_DELETE = 0, 1
CLUSTER_UNSUPPORTED = (
    "group configs are not supported in a ZooKeeper cluster (Kafka keeps them in KRaft "
    "metadata); set the broker's group.consumer.* instead"
)


def group_configs_path(apis: KafkaApis) -> Path:
    return Path(apis.config.log_dirs[0]) / GROUP_CONFIGS_FILE


def group_config_bounds(bounds: tuple[int, int, int, int]) -> GroupConfigBounds:
    return GroupConfigBounds(*bounds)


def _coordinator(apis: KafkaApis, group: str) -> ConsumerGroupCoordinator:
    if not group:
        raise InvalidRequest("Group name must not be empty.")
    if apis.cluster is not None:
        raise InvalidRequest(CLUSTER_UNSUPPORTED)
    gc = apis.group_coordinator
    if gc is None:
        raise CoordinatorNotAvailable("the group coordinator is not running")
    return gc.consumer_groups


def describe_group_configs(
    apis: KafkaApis, group: str, keys: Any, synonyms: bool, documentation: bool
) -> list[dict[str, Any]]:
    """DescribeConfigs rows of a group: each config's value, from the group or the broker.

    Raises:
        InvalidRequest: empty group name, or a cluster.
    """
    coordinator = _coordinator(apis, group)
    overrides = coordinator.group_configs.get(group, {})
    config = effective_config(coordinator.config, overrides)
    values = {
        "consumer.session.timeout.ms": config.session_timeout_ms,
        "consumer.heartbeat.interval.ms": config.heartbeat_interval_ms,
    }
    rows = []
    for name in sorted(values) if not keys else [k for k in keys if k in values]:
        source = _SOURCE_GROUP_CONFIG if name in overrides else _SOURCE_DEFAULT_CONFIG
        value = str(values[name])
        rows.append(
            {
                "name": name,
                "value": value,
                "read_only": False,
                "is_default": name not in overrides,
                "config_source": source,
                "is_sensitive": False,
                "synonyms": [{"name": name, "value": value, "source": source}] if synonyms else [],
                "config_type": _TYPE_INT,
                "documentation": GROUP_CONFIG_DOCS[name] if documentation else None,
            }
        )
    return rows


def incremental_group_overrides(ops: Any) -> dict[str, str | None]:
    """IncrementalAlterConfigs entries of a group as overrides (None deletes).

    Raises:
        InvalidRequest: a name twice, or an unknown operation.
        InvalidConfig: APPEND/SUBTRACT (no group config is a list), or SET without a value.
    """
    out: dict[str, str | None] = {}
    for c in ops:
        if c.name in out:
            raise InvalidRequest(f"config {c.name} appears more than once")
        if c.config_operation == _OP_SET:
            if c.value is None:
                raise InvalidConfig(f"null value for config {c.name}")
            out[c.name] = c.value
        elif c.config_operation == _OP_DELETE:
            out[c.name] = None
        elif c.config_operation in (2, 3):
            raise InvalidConfig(f"{c.name} is not a list config; APPEND/SUBTRACT need one")
        else:
            raise InvalidRequest(f"unknown config operation {c.config_operation}")
    return out


def alter_group_configs(
    apis: KafkaApis,
    group: str,
    overrides: Mapping[str, str | None],
    *,
    incremental: bool,
    validate_only: bool,
) -> None:
    """Check and apply a group's new configs (AlterConfigs replaces them all); stored before
    this returns.

    Raises:
        InvalidRequest: empty group name, or a cluster.
        ConfigError: an unknown name or a value out of bounds.
        OSError: the file could not be written (nothing changed).
    """
    coordinator = _coordinator(apis, group)
    current = {k: str(v) for k, v in coordinator.group_configs.get(group, {}).items()}
    new = dict(current) if incremental else {}
    for name, value in overrides.items():
        if value is None:
            if name not in GROUP_CONFIG_DOCS:
                raise ConfigError(name, "unknown group config")
            new.pop(name, None)
        else:
            new[name] = value
    bounds = group_config_bounds(apis.config.group_consumer_bounds)
    checked = validate_group_config(new, coordinator.config, bounds)
    if validate_only:
        return
    everything = {
        g: {k: str(v) for k, v in c.items()} for g, c in coordinator.group_configs.items()
    }
    everything[group] = {k: str(v) for k, v in checked.items()}
    save_group_configs(group_configs_path(apis), everything)
    if checked:
        coordinator.group_configs[group] = checked
    else:
        coordinator.group_configs.pop(group, None)
