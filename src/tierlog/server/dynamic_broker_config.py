"""Dynamic broker configs (Kafka's ``DynamicBrokerConfig``): broker configs changed with
AlterConfigs / IncrementalAlterConfigs on the BROKER resource, kept, and applied without a
restart.

Two entities, as in Kafka: the cluster-wide default (resource name ``""``, stored under the
entity name ``<default>``) and one broker (resource name ``"<id>"``). A broker's config is,
later wins: its static config (``server.properties`` and ``--override``), the cluster default,
its own dynamic configs. Only the configs Kafka lists as dynamic and tierlog applies can be
changed (:data:`DYNAMIC_CONFIGS`):

* every broker-level default of a topic config (``log.retention.ms``, ``log.segment.bytes``,
  ``log.cleanup.policy``, ``message.max.bytes`` ... and ``log.retention.hours/minutes``,
  ``log.roll.hours``; Kafka's ``DynamicLogConfig``): every topic without an override of its
  own takes the new value at once;
* the log cleaner's (Kafka's ``LogCleaner.ReconfigurableConfigs``): the cleaner threads are
  restarted with the new settings, ``log.cleaner.threads`` within half and double of the
  current count, as Kafka allows;
* tiered storage's copy and fetch quotas (Kafka's ``DynamicRemoteLogConfig``).

Any other known key is refused with Kafka's INVALID_REQUEST "Cannot update these configs
dynamically: Set(...)" (KAFKA-13609: Kafka answers INVALID_REQUEST, not INVALID_CONFIG, for a
broker config it cannot apply); an unknown key or a bad value is refused too (tierlog refuses
unknown keys at startup as well).

Where they are kept (:class:`DynamicConfigStore`): a single node in
``<first log dir>/dynamic-broker-configs.json`` (``{"version":1,"brokers":{"<default>":{..},
"0":{..}}}``, written atomically); a cluster in ZooKeeper as Kafka's ZooKeeper mode keeps them,
``/config/brokers/<default>`` and ``/config/brokers/<id>`` (``{"version":1,"config":{..}}``)
with a ``/config/changes`` notification; every broker watches both znodes and applies what
changes. A stored value that no longer validates (a static config changed meanwhile) is logged
and ignored, as Kafka does.

Not thread-safe: the event loop owns it (loading at startup runs before anything else).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from tierlog.errors import ConfigError, InvalidRequest
from tierlog.log import log_file_utils as lfu
from tierlog.server.kafka_config import (
    BROKER_CONFIGS,
    DEFAULT_CONFIG,
    STATIC_BROKER_CONFIG,
    ConfigEntry,
    KafkaConfig,
)

__all__ = [
    "DEFAULT_ENTITY",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_CONFIGS",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "DescribedConfig",
    "DynamicBrokerConfig",
    "DynamicConfigStore",
    "LocalDynamicConfigStore",
    "ZkDynamicConfigStore",
]

log = logging.getLogger(__name__)

#: The entity name of the cluster-wide default (Kafka's ``ZooKeeperInternals.DEFAULT_STRING``).
DEFAULT_ENTITY = "<default>"
FILE_NAME = "dynamic-broker-configs.json"

DYNAMIC_BROKER_CONFIG = "DYNAMIC_BROKER_CONFIG"
DYNAMIC_DEFAULT_BROKER_CONFIG = "DYNAMIC_DEFAULT_BROKER_CONFIG"

#: Kafka's ``LogCleaner.ReconfigurableConfigs``.
LOG_CLEANER_CONFIGS = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "message.max.bytes",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
    }
)
#: The part of Kafka's ``DynamicRemoteLogConfig`` tierlog applies (its thread pools are sized
#: once, at startup).
REMOTE_LOG_CONFIGS = frozenset(
    {
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.fetch.max.bytes.per.second",
    }
)
#: Kafka's ``DynamicLogConfig.ReconfigurableConfigs``: every broker synonym of a topic config.
LOG_CONFIGS = frozenset(
    {name for name, d in BROKER_CONFIGS.items() if d.topic_config is not None}
    | {"log.retention.hours", "log.retention.minutes", "log.roll.hours", "log.roll.jitter.hours"}
)
DYNAMIC_CONFIGS: frozenset[str] = LOG_CONFIGS | LOG_CLEANER_CONFIGS | REMOTE_LOG_CONFIGS


class DynamicConfigStore(Protocol):
    """Where dynamic broker configs are kept, by entity (``<default>`` or a broker id)."""

    def load(self, entities: list[str]) -> dict[str, dict[str, str]]:
        """The stored configs of each entity (``{}`` for none).

        Raises:
            OSError, ConfigError, ValueError: the store cannot be read.
        """
        ...

    def save(self, entity: str, config: Mapping[str, str]) -> None:
        """Replace an entity's configs (all of them), durably.

        Raises:
            OSError: not written.
        """
        ...


class LocalDynamicConfigStore:
    """A single node's dynamic configs: one JSON file in its first log dir, replaced
    atomically (temp file, fsync, rename) on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def in_log_dir(cls, log_dir: Path) -> LocalDynamicConfigStore:
        return cls(log_dir / FILE_NAME)

    def _read(self) -> dict[str, dict[str, str]]:
        """Raises: ConfigError (a damaged file: the broker does not start on a guess),
        OSError."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise ConfigError(str(self.path), f"not a dynamic broker config file: {e}") from None
        brokers = obj.get("brokers") if isinstance(obj, dict) else None
        if not isinstance(brokers, dict) or obj.get("version") != 1:
            raise ConfigError(str(self.path), "not a dynamic broker config file")
        out: dict[str, dict[str, str]] = {}
        for entity, config in brokers.items():
            if not isinstance(config, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in config.items()
            ):
                raise ConfigError(str(self.path), f"the configs of {entity!r} are not strings")
            out[str(entity)] = dict(config)
        return out

    def load(self, entities: list[str]) -> dict[str, dict[str, str]]:
        stored = self._read()
        return {e: stored.get(e, {}) for e in entities}

    def save(self, entity: str, config: Mapping[str, str]) -> None:
        stored = self._read()
        if config:
            stored[entity] = dict(config)
        else:
            stored.pop(entity, None)
        data = json.dumps({"version": 1, "brokers": stored}, indent=1, sort_keys=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lfu.write_atomically(self.path, data.encode())


class _BrokerConfigZnodes(Protocol):
    def get_broker_configs(self, entities: list[str]) -> dict[str, dict[str, str]]: ...

    def set_broker_config(self, entity: str, config: Mapping[str, str]) -> None: ...


class ZkDynamicConfigStore:
    """A cluster's dynamic configs in ZooKeeper, ``/config/brokers/<entity>``, through
    :class:`~tierlog.cluster.kafka_zk_client.KafkaZkClient` (blocking calls)."""

    def __init__(self, zk: _BrokerConfigZnodes) -> None:
        self.zk = zk

    def load(self, entities: list[str]) -> dict[str, dict[str, str]]:
        return self.zk.get_broker_configs(entities)

    def save(self, entity: str, config: Mapping[str, str]) -> None:
        self.zk.set_broker_config(entity, config)


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    """A DescribeConfigs row of a broker config and its synonyms, most specific first:
    ``(name, value, source)`` for each source that sets it."""

    entry: ConfigEntry
    synonyms: tuple[tuple[str, str | None, str], ...]


#: ``(old, new)``: apply a new config (raise to report that it could not be applied).
Reconfigurable = Callable[[KafkaConfig, KafkaConfig], None]


class DynamicBrokerConfig:
    """The broker's config as static plus dynamic configs, and their changes."""

    def __init__(self, static: KafkaConfig, store: DynamicConfigStore) -> None:
        self.static = static
        self.store = store
        self.broker_entity = str(static.node_id)
        #: entity -> its dynamic configs (as stored, all valid)
        self.dynamic: dict[str, dict[str, str]] = {DEFAULT_ENTITY: {}, self.broker_entity: {}}
        self.current = static
        self._reconfigurables: list[tuple[str, Reconfigurable]] = []

    # ----------------------------------------------------------------- startup

    def initialize(self) -> KafkaConfig:
        """Read the stored configs (blocking: call before the broker starts its parts); the
        effective config. Invalid stored values are logged and ignored, as Kafka does.

        Raises:
            OSError, ValueError: the store cannot be read.
        """
        stored = self.store.load([DEFAULT_ENTITY, self.broker_entity])
        for entity, config in stored.items():
            self.dynamic[entity] = self._valid_stored(entity, config)
        self.current = self._build(self.dynamic)
        if any(self.dynamic.values()):
            log.info("dynamic broker configs: %s", {e: c for e, c in self.dynamic.items() if c})
        return self.current

    def _valid_stored(self, entity: str, config: Mapping[str, str]) -> dict[str, str]:
        kept: dict[str, str] = {}
        for name, value in config.items():
            try:
                self._check_names(entity, [name])
                self._build({entity: {name: value}})
                self._build({**self.dynamic, entity: {**kept, name: value}})
            except (ConfigError, InvalidRequest) as e:
                log.warning("ignoring the dynamic config %s=%s of %s: %s", name, value, entity, e)
                continue
            kept[name] = value
        return kept

    def add_reconfigurable(self, name: str, apply: Reconfigurable) -> None:
        """Call ``apply(old, new)`` on every change (in registration order)."""
        self._reconfigurables.append((name, apply))

    # ----------------------------------------------------------------- changes

    @staticmethod
    def entity_of(resource_name: str, node_id: int) -> str:
        """The entity a BROKER resource name stands for.

        Raises:
            InvalidRequest: another broker's id (Kafka's "Unexpected broker id").
        """
        if resource_name == "":
            return DEFAULT_ENTITY
        if resource_name != str(node_id):
            raise InvalidRequest(
                f"Unexpected broker id, expected {node_id} or empty string, "
                f"but received {resource_name}"
            )
        return str(node_id)

    def validate(self, entity: str, config: Mapping[str, str]) -> KafkaConfig:
        """The broker's config if ``entity``'s dynamic configs became ``config``.

        Raises:
            InvalidRequest: a config that is not dynamic, unknown, or a bad value (Kafka
                answers INVALID_REQUEST for each, KAFKA-13609).
        """
        self._check_names(entity, list(config))
        # Each value on its own (a broker's own value may hide the default's) ...
        self._build({entity: dict(config)})
        # ... and the broker's config as it would be.
        new = self._build({**self.dynamic, entity: dict(config)})
        self._validate_reconfiguration(self.current, new)
        return new

    def alter(self, entity: str, config: Mapping[str, str], *, validate_only: bool) -> None:
        """Replace ``entity``'s dynamic configs: validate, store, apply.

        Raises:
            InvalidRequest: see :meth:`validate`.
            OSError: the store could not be written (nothing changed).
        """
        self.validate(entity, config)
        if validate_only:
            return
        self.store.save(entity, config)
        self.update(entity, config)

    def update(self, entity: str, config: Mapping[str, str]) -> None:
        """Apply ``entity``'s configs as stored (after :meth:`alter`, or when another broker
        changed them in ZooKeeper); invalid ones are logged and ignored."""
        if entity not in self.dynamic:
            return
        valid = self._valid_stored(entity, config)
        if valid == self.dynamic[entity]:
            return
        new = self._build({**self.dynamic, entity: valid})
        old = self.current
        self.dynamic[entity] = valid
        self.current = new
        log.info("dynamic configs of %s now %s", entity, valid)
        for name, apply in self._reconfigurables:
            try:
                apply(old, new)
            except Exception:
                log.exception("applying the new dynamic configs to %s failed", name)

    # ----------------------------------------------------------------- describe

    def describe(self, entity: str) -> list[DescribedConfig]:
        """DescribeConfigs rows: for the broker every config with its effective value and
        its source, the most specific that sets it; for the default entity only its dynamic
        configs (as Kafka)."""
        default = self.dynamic[DEFAULT_ENTITY]
        mine = self.dynamic[self.broker_entity] if entity != DEFAULT_ENTITY else {}
        current_rows = {e.name: e for e in self.current.describe()}
        out: list[DescribedConfig] = []
        for static_row in self.static.describe():
            name = static_row.name
            if entity == DEFAULT_ENTITY and name not in default:
                continue
            synonyms: list[tuple[str, str | None, str]] = []
            if name in mine:
                synonyms.append((name, mine[name], DYNAMIC_BROKER_CONFIG))
            if name in default:
                synonyms.append((name, default[name], DYNAMIC_DEFAULT_BROKER_CONFIG))
            if static_row.source == STATIC_BROKER_CONFIG:
                synonyms.append((name, static_row.value, STATIC_BROKER_CONFIG))
            if name in BROKER_CONFIGS:
                synonyms.append((name, _default_value(name), DEFAULT_CONFIG))
            row = current_rows.get(name, static_row)
            if entity == DEFAULT_ENTITY:
                value: str | None = default[name]
            else:
                value = row.value
            sensitive = row.sensitive
            out.append(
                DescribedConfig(
                    replace(
                        row,
                        value=None if sensitive else value,
                        source=synonyms[0][2] if synonyms else row.source,
                        read_only=name not in DYNAMIC_CONFIGS,
                    ),
                    tuple((n, None if sensitive else v, s) for n, v, s in synonyms),
                )
            )
        return out

    # ----------------------------------------------------------------- helpers

    def _check_names(self, entity: str, names: list[str]) -> None:
        unknown = sorted(n for n in names if n not in BROKER_CONFIGS)
        if unknown:
            raise InvalidRequest(f"Unknown broker configs: Set({', '.join(unknown)})")
        static = sorted(n for n in names if n not in DYNAMIC_CONFIGS)
        if static:
            raise InvalidRequest(
                f"Cannot update these configs dynamically: Set({', '.join(static)})"
            )

    def _build(self, dynamic: Mapping[str, Mapping[str, str]]) -> KafkaConfig:
        props = {
            **self.static.originals,
            **dynamic.get(DEFAULT_ENTITY, {}),
            **dynamic.get(self.broker_entity, {}),
        }
        try:
            return KafkaConfig(props)
        except ConfigError as e:
            raise InvalidRequest(str(e)) from None

    @staticmethod
    def _validate_reconfiguration(old: KafkaConfig, new: KafkaConfig) -> None:
        """Kafka's ``LogCleaner.validateReconfiguration``: cleaner threads at least 1, no
        fewer than half and no more than double the current count."""
        threads = int(new.get("log.cleaner.threads"))
        current = int(old.get("log.cleaner.threads"))
        if threads == current:
            return
        if threads < 1:
            raise InvalidRequest("Log cleaner threads should be at least 1")
        if threads < current // 2:
            raise InvalidRequest(
                f"Log cleaner threads cannot be reduced to less than half the current value "
                f"{current}"
            )
        if threads > current * 2:
            raise InvalidRequest(
                f"Log cleaner threads cannot be increased to more than double the current value "
                f"{current}"
            )


def _default_value(name: str) -> str | None:
    from tierlog.server.config_def import format_config_value

    d = BROKER_CONFIGS[name]
    return None if d.default is None else format_config_value(d, d.default)
