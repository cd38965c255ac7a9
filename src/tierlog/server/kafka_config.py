"""Broker configuration: Kafka's ``server.properties`` names, types, defaults and validation.

Sources, later wins: the built-in defaults, a properties file (``--config``), then
``--override key=value`` pairs. The file uses ``java.util.Properties`` syntax (see
:func:`~tierlog.server.config.properties.parse_properties`). Every key must be known: an
unknown key or a value that does not parse or validate raises
:class:`~tierlog.errors.ConfigError` naming the key (Kafka only logs unknown keys; a typo that
silently keeps a default is worse than a refusal to start).

Known keys, in five groups:

* the broker keys in :data:`BROKER_CONFIGS` (``listeners``, ``log.dirs``, ``num.partitions`` ...)
  — each documented as used by tierlog or accepted for compatibility and ignored. The table is
  assembled here from one module per area under :mod:`tierlog.server.config`, as Kafka splits
  its definitions (``ServerConfigs``, ``SocketServerConfigs``, ``ZkConfigs``,
  ``ReplicationConfigs``, ``ServerLogConfigs``, ``CleanerConfig``, ``GroupCoordinatorConfig``,
  ``TransactionLogConfigs``, ``RemoteLogManagerConfig``, ``QuotaConfigs``); the TLS and SASL
  keys come from :mod:`tierlog.security.security_config`;
* those ``ssl.*`` and ``sasl.*`` keys for one listener, ``listener.name.<listener>.<key>``, and
  ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (:attr:`KafkaConfig.listener_security`);
* every broker-level synonym of a topic config (``log.segment.bytes`` → ``segment.bytes``, the
  table :data:`~tierlog.log.log_config.BROKER_SYNONYMS`), which feed :meth:`KafkaConfig.log_config`;
* ``log.retention.hours/minutes``, ``log.roll.hours``, ``log.roll.jitter.hours``, folded into the
  ``*.ms`` synonyms with Kafka's precedence (ms > minutes > hours);
* the plugin prefixes ``rsm.config.`` and ``rlmm.config.``, kept as dicts with the prefix stripped.

Immutable once built; thread-safe.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlog.console.console_server import parse_console_listener
from tierlog.errors import ConfigError
from tierlog.log.log_config import TOPIC_CONFIGS, LogConfig
from tierlog.security.security_config import (
    LISTENER_PREFIX,
    SECURITY_CONFIGS,
    ListenerConfigs,
    parse_listener_key,
    reject_unprefixed_jaas,
)
from tierlog.server.config.cleaner_config import CLEANER_CONFIGS, build_cleaner_config
from tierlog.server.config.group_coordinator_config import (
    GROUP_COORDINATOR_CONFIGS,
    assignor_names,
    validate_group_configs,
)
from tierlog.server.config.properties import parse_properties
from tierlog.server.config.quota_configs import QUOTA_CONFIGS
from tierlog.server.config.remote_log_manager_config import (
    REMOTE_LOG_MANAGER_CONFIGS,
    RLMM_CONFIG_PREFIX,
    RSM_CONFIG_PREFIX,
)
from tierlog.server.config.replication_configs import REPLICATION_CONFIGS
from tierlog.server.config.server_configs import SERVER_CONFIGS
from tierlog.server.config.server_log_configs import (
    LOG_SYNONYM_CONFIGS,
    SERVER_LOG_CONFIGS,
    TIME_UNITS,
    fold_time_units,
)
from tierlog.server.config.socket_server_configs import (
    SOCKET_SERVER_CONFIGS,
    Endpoint,
    advertised_host,
    parse_endpoints,
    parse_protocol_map,
)
from tierlog.server.config.transaction_configs import TRANSACTION_CONFIGS
from tierlog.server.config.zk_configs import ZK_CONFIGS
from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import format_config_value as _format
from tierlog.server.config_def import parse_config_value as _parse_value
from tierlog.server.config_providers import resolve_config_providers

if TYPE_CHECKING:
    from tierlog.log.log_cleaner import CleanerConfig
    from tierlog.log.log_manager import LogManager

__all__ = [
    "BROKER_CONFIGS",
    "ConfigEntry",
    "KafkaConfig",
]

# DescribeConfigs sources (Kafka's ConfigSource names).
DEFAULT_CONFIG = "DEFAULT_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"

#: Every known broker config key (prefixed plugin keys aside), from the per-area tables.
BROKER_CONFIGS: dict[str, BrokerConfigDef] = {
    d.name: d
    for d in sorted(
        SERVER_CONFIGS
        + SOCKET_SERVER_CONFIGS
        + ZK_CONFIGS
        + REPLICATION_CONFIGS
        + SERVER_LOG_CONFIGS
        + LOG_SYNONYM_CONFIGS
        + CLEANER_CONFIGS
        + GROUP_COORDINATOR_CONFIGS
        + TRANSACTION_CONFIGS
        + REMOTE_LOG_MANAGER_CONFIGS
        + QUOTA_CONFIGS
        + SECURITY_CONFIGS,
        key=lambda d: d.name,
    )
}

_SENSITIVE_WORDS = ("password", "secret", "sasl.jaas.config", "ssl.keystore.key")

# --------------------------------------------------------------------------- the config


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of DescribeConfigs for a broker resource."""

    name: str
    value: str | None  # None for sensitive configs and unset configs
    source: str  # DEFAULT_CONFIG | STATIC_BROKER_CONFIG (dynamic sources: dynamic_broker_config)
    read_only: bool  # True here; dynamic_broker_config clears it for the dynamic configs
    sensitive: bool
    config_type: str  # Kafka's ConfigType name: INT, LONG, BOOLEAN, STRING, LIST, ...
    documentation: str


class KafkaConfig:
    """A validated broker configuration with typed attributes for what the broker uses.

    Build with :meth:`from_file` or :meth:`from_props`. ``originals`` holds the raw key/value
    strings as given; :meth:`log_config` the topic defaults derived from the broker synonyms;
    :meth:`describe` the DescribeConfigs rows. Immutable; thread-safe.
    """

    def __init__(self, props: Mapping[str, str]) -> None:
        """Validate ``props`` (raw strings) against the known keys.

        Raises:
            ConfigError: an unknown key, or a value that does not parse or validate.
        """
        self.originals: dict[str, str] = dict(props)
        # ${provider:path:key} references resolved (config.providers, KIP-297); originals
        # keep them as written, so no resolved secret shows in repr or DescribeConfigs.
        self._resolved = resolve_config_providers(self.originals)
        rsm_prefix = self._resolved.get(
            "remote.log.storage.manager.impl.prefix", RSM_CONFIG_PREFIX
        ).strip()
        rlmm_prefix = self._resolved.get(
            "remote.log.metadata.manager.impl.prefix", RLMM_CONFIG_PREFIX
        ).strip()
        self.rsm_config: dict[str, str] = {}
        self.rlmm_config: dict[str, str] = {}
        values: dict[str, Any] = {}
        per_listener: dict[str, dict[str, Any]] = {}
        for key, raw in self._resolved.items():
            if rsm_prefix and key.startswith(rsm_prefix) and len(key) > len(rsm_prefix):
                self.rsm_config[key[len(rsm_prefix) :]] = raw.strip()
                continue
            if rlmm_prefix and key.startswith(rlmm_prefix) and len(key) > len(rlmm_prefix):
                self.rlmm_config[key[len(rlmm_prefix) :]] = raw.strip()
                continue
            d = BROKER_CONFIGS.get(key)
            if d is None and key.lower().startswith(LISTENER_PREFIX):
                listener, base, value = parse_listener_key(key, raw)
                per_listener.setdefault(listener, {})[base] = value
                continue
            if d is None and key.endswith("sasl.jaas.config"):
                reject_unprefixed_jaas(key)
            if d is None:
                raise ConfigError(key, _unknown_key_message(key))
            values[key] = _parse_value(d, raw)
        self._values = values

        def get(name: str) -> Any:
            return values[name] if name in values else BROKER_CONFIGS[name].default

        self._effective_ms = fold_time_units(values)

        # identity
        node_id, broker_id = values.get("node.id"), values.get("broker.id")
        if node_id is not None and broker_id is not None and node_id != broker_id:
            raise ConfigError(
                "node.id", f"node.id {node_id} and broker.id {broker_id} must be equal"
            )
        ident = node_id if node_id is not None else broker_id
        if ident is not None and ident < 0:
            raise ConfigError("node.id" if node_id is not None else "broker.id", "must be >= 0")
        self.node_id: int = 0 if ident is None else int(ident)
        self.process_roles: tuple[str, ...] = get("process.roles")

        # network
        protocol_map = parse_protocol_map(get("listener.security.protocol.map"))
        self.controller_listener_names: tuple[str, ...] = tuple(
            n.upper() for n in get("controller.listener.names")
        )
        all_listeners = parse_endpoints("listeners", get("listeners"), protocol_map)
        self.listeners: tuple[Endpoint, ...] = tuple(
            e for e in all_listeners if e.listener_name not in self.controller_listener_names
        )
        if not self.listeners:
            raise ConfigError("listeners", "no listener left to serve clients")
        #: TLS and SASL settings per listener (listener.name.<l>.* over the broker-wide keys).
        self.listener_security = ListenerConfigs(per_listener, get, lambda k: k in values)
        self.listener_security.validate(
            {e.listener_name: e.security_protocol for e in all_listeners}
        )
        seen: set[tuple[str, int]] = set()
        for e in self.listeners:
            if e.port and e.address in seen:
                raise ConfigError("listeners", f"{e.host}:{e.port} is used by two listeners")
            seen.add(e.address)
        adv = get("advertised.listeners")
        if adv is None:
            self.advertised_listeners: tuple[Endpoint, ...] = tuple(
                Endpoint(e.listener_name, advertised_host(e.host), e.port, e.security_protocol)
                for e in self.listeners
            )
        else:
            self.advertised_listeners = parse_endpoints("advertised.listeners", adv, protocol_map)
            for e in self.advertised_listeners:
                if e.host in ("0.0.0.0", "::"):
                    raise ConfigError(
                        "advertised.listeners",
                        f"{e} uses the non-routable meta-address {e.host}",
                    )
        ibl = get("inter.broker.listener.name")
        if ibl is not None and "security.inter.broker.protocol" in values:
            # Kafka: "Only one of inter.broker.listener.name and security.inter.broker.protocol
            # should be set."
            raise ConfigError(
                "security.inter.broker.protocol",
                "set inter.broker.listener.name or security.inter.broker.protocol, not both",
            )
        if ibl is None and "security.inter.broker.protocol" in values:
            # Kafka's way: the listener named after the protocol
            ibl = str(get("security.inter.broker.protocol")).upper()
            if ibl not in {e.listener_name for e in self.listeners}:
                raise ConfigError(
                    "security.inter.broker.protocol",
                    f"no listener is named {ibl} (the inter-broker listener is the one named "
                    "after the protocol; or set inter.broker.listener.name)",
                )
        if ibl is not None and ibl.upper() not in {e.listener_name for e in self.listeners}:
            raise ConfigError("inter.broker.listener.name", f"{ibl!r} is not one of the listeners")
        self.socket_request_max_bytes: int = get("socket.request.max.bytes")
        self.socket_send_buffer_bytes: int = get("socket.send.buffer.bytes")
        self.socket_receive_buffer_bytes: int = get("socket.receive.buffer.bytes")
        self.num_network_threads: int = get("num.network.threads")
        self.num_io_threads: int = get("num.io.threads")

        # logs and topics
        dirs = get("log.dirs")
        if dirs is None:
            dirs = (get("log.dir"),)
        if not dirs or any(not p for p in dirs):
            raise ConfigError("log.dirs" if "log.dirs" in values else "log.dir", "is empty")
        if len(set(dirs)) != len(dirs):
            raise ConfigError("log.dirs", f"duplicate directory in {','.join(dirs)}")
        self.log_dirs: list[Path] = [Path(p) for p in dirs]
        self.num_partitions: int = get("num.partitions")
        self.default_replication_factor: int = get("default.replication.factor")
        self.auto_create_topics_enable: bool = get("auto.create.topics.enable")
        self.delete_topic_enable: bool = get("delete.topic.enable")
        self.message_max_bytes: int = get("message.max.bytes")
        self.num_recovery_threads_per_data_dir: int = get("num.recovery.threads.per.data.dir")
        self.log_max_open_files: int = get("log.max.open.files")
        self.log_retention_check_interval_ms: int = get("log.retention.check.interval.ms")
        self.log_flush_scheduler_interval_ms: int = get("log.flush.scheduler.interval.ms")
        self.log_flush_offset_checkpoint_interval_ms: int = get(
            "log.flush.offset.checkpoint.interval.ms"
        )
        self.log_flush_start_offset_checkpoint_interval_ms: int = get(
            "log.flush.start.offset.checkpoint.interval.ms"
        )
        self.log_cleaner_enable: bool = get("log.cleaner.enable")

        # groups
        self.group_initial_rebalance_delay_ms: int = get("group.initial.rebalance.delay.ms")
        validate_group_configs(get)
        self.group_min_session_timeout_ms: int = get("group.min.session.timeout.ms")
        self.group_max_session_timeout_ms: int = get("group.max.session.timeout.ms")
        self.group_consumer_session_timeout_ms: int = get("group.consumer.session.timeout.ms")
        self.group_consumer_heartbeat_interval_ms: int = get("group.consumer.heartbeat.interval.ms")
        self.group_consumer_bounds: tuple[int, int, int, int] = (
            get("group.consumer.min.session.timeout.ms"),
            get("group.consumer.max.session.timeout.ms"),
            get("group.consumer.min.heartbeat.interval.ms"),
            get("group.consumer.max.heartbeat.interval.ms"),
        )
        self.group_consumer_max_size: int = get("group.consumer.max.size")
        self.group_consumer_assignors: tuple[str, ...] = assignor_names(
            get("group.consumer.assignors")
        )
        self.offsets_topic_num_partitions: int = get("offsets.topic.num.partitions")
        self.offsets_topic_segment_bytes: int = get("offsets.topic.segment.bytes")
        self.offsets_retention_ms: int = int(get("offsets.retention.minutes")) * 60_000
        # transactions
        self.transaction_state_log_num_partitions: int = get("transaction.state.log.num.partitions")
        self.transaction_state_log_replication_factor: int = get(
            "transaction.state.log.replication.factor"
        )
        self.transaction_state_log_min_isr: int = get("transaction.state.log.min.isr")
        self.transaction_state_log_segment_bytes: int = get("transaction.state.log.segment.bytes")
        self.transaction_max_timeout_ms: int = get("transaction.max.timeout.ms")
        self.transactional_id_expiration_ms: int = get("transactional.id.expiration.ms")
        self.transaction_abort_timed_out_transaction_cleanup_interval_ms: int = get(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        )
        self.transaction_remove_expired_transaction_cleanup_interval_ms: int = get(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        )

        # tiered storage
        self.remote_log_storage_system_enable: bool = get("remote.log.storage.system.enable")
        self.remote_log_manager_task_interval_ms: int = get("remote.log.manager.task.interval.ms")
        self.remote_log_reader_threads: int = get("remote.log.reader.threads")
        self.remote_log_reader_max_pending_tasks: int = get("remote.log.reader.max.pending.tasks")
        self.remote_log_reader_prefetch_max_bytes: int = get("remote.log.reader.prefetch.max.bytes")
        self.remote_log_manager_copier_thread_pool_size: int = get(
            "remote.log.manager.copier.thread.pool.size"
        )
        self.remote_log_manager_expiration_thread_pool_size: int = get(
            "remote.log.manager.expiration.thread.pool.size"
        )
        self.remote_fetch_max_wait_ms: int = get("remote.fetch.max.wait.ms")
        self.remote_log_index_file_cache_total_size_bytes: int = get(
            "remote.log.index.file.cache.total.size.bytes"
        )
        self.remote_log_manager_copy_max_bytes_per_second: int = get(
            "remote.log.manager.copy.max.bytes.per.second"
        )
        self.remote_log_manager_fetch_max_bytes_per_second: int = get(
            "remote.log.manager.fetch.max.bytes.per.second"
        )
        rlmm_partitions = self.rlmm_config.get("remote.log.metadata.topic.num.partitions")
        if "remote.log.metadata.topic.num.partitions" in values or rlmm_partitions is None:
            self.remote_log_metadata_topic_num_partitions: int = get(
                "remote.log.metadata.topic.num.partitions"
            )
        else:
            d = BROKER_CONFIGS["remote.log.metadata.topic.num.partitions"]
            self.remote_log_metadata_topic_num_partitions = _parse_value(d, rlmm_partitions)
        rlmm_rf = self.rlmm_config.get("remote.log.metadata.topic.replication.factor")
        if "remote.log.metadata.topic.replication.factor" in values or rlmm_rf is None:
            self.remote_log_metadata_topic_replication_factor: int = get(
                "remote.log.metadata.topic.replication.factor"
            )
        else:
            d = BROKER_CONFIGS["remote.log.metadata.topic.replication.factor"]
            self.remote_log_metadata_topic_replication_factor = _parse_value(d, rlmm_rf)
        self.remote_log_metadata_custom_metadata_max_bytes: int = get(
            "remote.log.metadata.custom.metadata.max.bytes"
        )
        self.remote_log_manager_task_retry_backoff_ms: int = get(
            "remote.log.manager.task.retry.backoff.ms"
        )
        self.remote_log_manager_task_retry_backoff_max_ms: int = get(
            "remote.log.manager.task.retry.backoff.max.ms"
        )
        self.remote_log_manager_task_retry_jitter: float = get(
            "remote.log.manager.task.retry.jitter"
        )
        self.remote_storage_startup_check: str = str(
            get("tierlog.remote.storage.startup.check")
        ).lower()
        self.metrics_port: int | None = get("metrics.port")
        listener = get("console.listener")
        #: (host, port) of the web console; None: no console.
        self.console_listener: tuple[str, int] | None = (
            None if listener is None else parse_console_listener(listener)
        )
        self.quota_window_num: int = get("quota.window.num")
        self.quota_window_size_seconds: int = get("quota.window.size.seconds")

        # the cluster
        self.zookeeper_connect: str | None = get("zookeeper.connect")
        self.zookeeper_session_timeout_ms: int = get("zookeeper.session.timeout.ms")
        timeout = get("zookeeper.connection.timeout.ms")
        self.zookeeper_connection_timeout_ms: int = (
            self.zookeeper_session_timeout_ms if timeout is None else timeout
        )
        self.broker_rack: str | None = get("broker.rack")
        self.inter_broker_listener_name: str = (
            ibl.upper() if ibl is not None else self.listeners[0].listener_name
        )
        self.offsets_topic_replication_factor: int = get("offsets.topic.replication.factor")
        self.replica_lag_time_max_ms: int = get("replica.lag.time.max.ms")
        self.replica_fetch_max_bytes: int = get("replica.fetch.max.bytes")
        self.replica_fetch_response_max_bytes: int = get("replica.fetch.response.max.bytes")
        self.replica_fetch_wait_max_ms: int = get("replica.fetch.wait.max.ms")
        self.replica_fetch_min_bytes: int = get("replica.fetch.min.bytes")
        self.replica_fetch_backoff_ms: int = get("replica.fetch.backoff.ms")
        self.num_replica_fetchers: int = get("num.replica.fetchers")
        self.replica_alter_log_dirs_io_max_bytes_per_second: int = get(
            "replica.alter.log.dirs.io.max.bytes.per.second"
        )
        self.replica_high_watermark_checkpoint_interval_ms: int = get(
            "replica.high.watermark.checkpoint.interval.ms"
        )
        self.controlled_shutdown_enable: bool = get("controlled.shutdown.enable")
        self.controlled_shutdown_max_retries: int = get("controlled.shutdown.max.retries")
        self.controlled_shutdown_retry_backoff_ms: int = get("controlled.shutdown.retry.backoff.ms")
        self.auto_leader_rebalance_enable: bool = get("auto.leader.rebalance.enable")
        self.leader_imbalance_check_interval_seconds: int = get(
            "leader.imbalance.check.interval.seconds"
        )
        self.leader_imbalance_per_broker_percentage: int = get(
            "leader.imbalance.per.broker.percentage"
        )

        try:
            self._log_config = LogConfig.from_broker(self._synonym_props())
            self._log_config.validate()
        except ConfigError as e:  # name the broker key, not the topic config
            syn = TOPIC_CONFIGS[e.key].synonym if e.key in TOPIC_CONFIGS else None
            if syn is None:
                raise
            raise ConfigError(syn, str(e).split(": ", 1)[-1]) from None

    # ----------------------------------------------------------------- constructors

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> KafkaConfig:
        """A config from a mapping; non-string values are formatted (True → "true").

        Raises:
            ConfigError: unknown key or bad value.
        """
        return cls({str(k): _to_str(v) for k, v in props.items()})

    @classmethod
    def from_file(cls, path: Path | None, overrides: Iterable[str] = ()) -> KafkaConfig:
        """Read ``path`` (when given) in ``server.properties`` syntax, then apply the
        ``key=value`` strings of ``overrides`` (``--override``), which win.

        The file is read as UTF-8, falling back to ISO-8859-1 (java.util.Properties' own
        encoding) when it is not valid UTF-8.

        Raises:
            ConfigError: unreadable file, malformed override, unknown key or bad value.
        """
        props: dict[str, str] = {}
        if path is not None:
            try:
                data = Path(path).read_bytes()
            except OSError as e:
                raise ConfigError(str(path), f"cannot read config file: {e.strerror}") from None
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = data.decode("latin-1")
            props.update(parse_properties(text, source=str(path)))
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(item, "an override must look like key=value")
            props[key.strip()] = value
        return cls(props)

    # ----------------------------------------------------------------- derived views

    def log_config(self) -> LogConfig:
        """Defaults for every topic from the broker synonyms (``log.segment.bytes`` ...)."""
        return self._log_config

    def cleaner_config(self) -> CleanerConfig:
        """The ``log.cleaner.*`` settings (Kafka's ``LogCleaner.cleanerConfig``)."""
        return build_cleaner_config(self.get)

    def create_log_manager(self) -> LogManager:
        """A (not yet started) LogManager wired with this config's log settings."""
        from tierlog.log.log_manager import LogManager

        return LogManager(
            self.log_dirs,
            self._log_config,
            node_id=self.node_id,
            retention_check_interval_ms=self.log_retention_check_interval_ms,
            flush_check_interval_ms=self.log_flush_scheduler_interval_ms,
            flush_recovery_offset_checkpoint_interval_ms=self.log_flush_offset_checkpoint_interval_ms,
            flush_start_offset_checkpoint_interval_ms=self.log_flush_start_offset_checkpoint_interval_ms,
            recovery_threads_per_data_dir=self.num_recovery_threads_per_data_dir,
            remote_log_storage_system_enable=self.remote_log_storage_system_enable,
            cleaner_config=self.cleaner_config(),
        )

    def get(self, name: str) -> Any:
        """The typed value of a known broker key (its default when not set).

        Raises:
            KeyError: ``name`` is not a known key.
        """
        d = BROKER_CONFIGS[name]
        if name in self._effective_ms:
            return self._effective_ms[name]
        return self._values.get(name, d.default)

    def is_set(self, name: str) -> bool:
        """Whether ``name`` was given in the file or an override."""
        return name in self._values

    def describe(self) -> list[ConfigEntry]:
        """DescribeConfigs rows for this broker: every known key, then the plugin keys."""
        rows: list[ConfigEntry] = []
        for name, d in BROKER_CONFIGS.items():
            value: Any
            if name == "node.id" or name == "broker.id":
                value, is_set = (
                    self.node_id,
                    "node.id" in self._values or "broker.id" in self._values,
                )
            elif name in self._effective_ms:
                value = self._effective_ms[name]
                is_set = any(k in self._values for k in (name, *(u for u, _ in TIME_UNITS[name])))
            else:
                value, is_set = self._values.get(name, d.default), name in self._values
            sensitive = d.sensitive or d.type == "password"
            rows.append(
                ConfigEntry(
                    name,
                    None if sensitive else _format(d, value),
                    STATIC_BROKER_CONFIG if is_set else DEFAULT_CONFIG,
                    True,
                    sensitive,
                    d.type.upper(),
                    d.doc,
                )
            )
        for key, d, value in self.listener_security.prefixed():
            hidden = d.sensitive or d.type == "password"
            rows.append(
                ConfigEntry(
                    key,
                    None if hidden else _format(d, value),
                    STATIC_BROKER_CONFIG,
                    True,
                    hidden,
                    d.type.upper(),
                    d.doc,
                )
            )
        for prefix, cfg in (
            (self._prefix("remote.log.storage.manager.impl.prefix"), self.rsm_config),
            (self._prefix("remote.log.metadata.manager.impl.prefix"), self.rlmm_config),
        ):
            for k, v in sorted(cfg.items()):
                sensitive = any(w in k.lower() for w in _SENSITIVE_WORDS)
                rows.append(
                    ConfigEntry(
                        prefix + k,
                        None if sensitive else v,
                        STATIC_BROKER_CONFIG,
                        True,
                        sensitive,
                        "PASSWORD" if sensitive else "STRING",
                        "Passed to the plugin with the prefix stripped.",
                    )
                )
        return rows

    def __repr__(self) -> str:
        shown = {
            k: ("[hidden]" if any(w in k.lower() for w in _SENSITIVE_WORDS) else v)
            for k, v in sorted(self.originals.items())
        }
        return f"KafkaConfig({shown})"

    # ----------------------------------------------------------------- helpers

    def _prefix(self, key: str) -> str:
        return str(self._values.get(key, BROKER_CONFIGS[key].default))

    def _synonym_props(self) -> dict[str, str]:
        """The broker synonyms that were set, as raw strings for LogConfig.from_broker."""
        props: dict[str, str] = {}
        for name, d in BROKER_CONFIGS.items():
            if d.topic_config is None:
                continue
            if name in TIME_UNITS:
                if any(k in self._values for k in (name, *(u for u, _ in TIME_UNITS[name]))):
                    props[name] = str(self._effective_ms[name])
                    _parse_value(d, props[name])  # a value folded from hours must validate too
            elif name in self._values:
                props[name] = self._resolved[name]
        return props


def _to_str(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list | tuple):
        return ",".join(str(x) for x in v)
    return str(v)


def _unknown_key_message(key: str) -> str:
    known = list(BROKER_CONFIGS)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if key in TOPIC_CONFIGS and key not in BROKER_CONFIGS:
        syn = TOPIC_CONFIGS[key].synonym
        hint = f"; {key} is a topic config" + (
            f", its broker-level default is {syn!r}" if syn else ""
        )
    return f"unknown broker config{hint}"
