"""Topic-level log configuration: Kafka's topic config names, defaults and validation.

Each topic config has a broker-level default (``log.segment.bytes`` for ``segment.bytes`` ...);
a topic override wins over the broker default, which wins over the built-in default. The
table :data:`TOPIC_CONFIGS` is the single source for names, types, defaults, the broker
synonym and DescribeConfigs documentation.

Immutable: a config change builds a new :class:`LogConfig` (``with_overrides``), which the log
swaps in atomically. Thread-safe because immutable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.errors import ConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic config: its Kafka name, type, built-in default and broker-level synonym."""

    name: str
    type: str  # "long" | "int" | "boolean" | "string" | "list" | "double"
    default: Any
    synonym: str | None  # the broker config that sets the default for every topic
    doc: str
    validator: Callable[[Any], str | None] | None = None  # returns an error message or None


def _at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _cleanup_policy(v: Any) -> str | None:
    bad = [p for p in v if p not in ("delete", "compact")]
    return f"unknown policy {', '.join(bad)}; use delete and/or compact" if bad else None


_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef(
            "cleanup.policy",
            "list",
            ("delete",),
            "log.cleanup.policy",
            "delete or compact segments past retention.",
            _cleanup_policy,
        ),
        ConfigDef(
            "compression.type",
            "string",
            "producer",
            "compression.type",
            "Final compression type for the topic; 'producer' keeps the producer's codec.",
            _one_of(*_COMPRESSION),
        ),
        ConfigDef(
            "delete.retention.ms",
            "long",
            86_400_000,
            "log.cleaner.delete.retention.ms",
            "How long delete tombstones are kept for compacted topics.",
            _at_least(0),
        ),
        ConfigDef(
            "file.delete.delay.ms",
            "long",
            60_000,
            "log.segment.delete.delay.ms",
            "Time to wait before deleting a file from the filesystem.",
            _at_least(0),
        ),
        ConfigDef(
            "flush.messages",
            "long",
            LONG_MAX,
            "log.flush.interval.messages",
            "Force an fsync after this many messages.",
            _at_least(1),
        ),
        ConfigDef(
            "flush.ms",
            "long",
            LONG_MAX,
            "log.flush.interval.ms",
            "Force an fsync when data is older than this.",
            _at_least(0),
        ),
        ConfigDef(
            "index.interval.bytes",
            "int",
            4096,
            "log.index.interval.bytes",
            "How often an entry is added to the offset index.",
            _at_least(0),
        ),
        ConfigDef(
            "local.retention.bytes",
            "long",
            -2,
            "log.local.retention.bytes",
            "Max bytes of local segments before deletion once tiered (-2: retention.bytes).",
            _at_least(-2),
        ),
        ConfigDef(
            "local.retention.ms",
            "long",
            -2,
            "log.local.retention.ms",
            "Max age of local segments before deletion once tiered (-2: retention.ms).",
            _at_least(-2),
        ),
        ConfigDef(
            "max.compaction.lag.ms",
            "long",
            LONG_MAX,
            "log.cleaner.max.compaction.lag.ms",
            "Max time a message remains ineligible for compaction.",
            _at_least(1),
        ),
        ConfigDef(
            "max.message.bytes",
            "int",
            1_048_588,
            "message.max.bytes",
            "Largest record batch size allowed.",
            _at_least(0),
        ),
        ConfigDef(
            "message.timestamp.after.max.ms",
            "long",
            3_600_000,
            "log.message.timestamp.after.max.ms",
            "Max allowed difference of a CreateTime timestamp ahead of the broker's time.",
            _at_least(0),
        ),
        ConfigDef(
            "message.timestamp.before.max.ms",
            "long",
            LONG_MAX,
            "log.message.timestamp.before.max.ms",
            "Max allowed difference of a CreateTime timestamp behind the broker's time.",
            _at_least(0),
        ),
        ConfigDef(
            "message.timestamp.type",
            "string",
            "CreateTime",
            "log.message.timestamp.type",
            "CreateTime or LogAppendTime.",
            _one_of("CreateTime", "LogAppendTime"),
        ),
        ConfigDef(
            "min.cleanable.dirty.ratio",
            "double",
            0.5,
            "log.cleaner.min.cleanable.ratio",
            "Dirty ratio at which the log is compacted.",
            lambda v: None if 0 <= v <= 1 else "must be between 0 and 1",
        ),
        ConfigDef(
            "min.compaction.lag.ms",
            "long",
            0,
            "log.cleaner.min.compaction.lag.ms",
            "Min time a message remains uncompacted.",
            _at_least(0),
        ),
        ConfigDef(
            "min.insync.replicas",
            "int",
            1,
            "min.insync.replicas",
            "Min replicas that must acknowledge an acks=all write.",
            _at_least(1),
        ),
        ConfigDef(
            "preallocate", "boolean", False, "log.preallocate", "Preallocate segment files.", None
        ),
        ConfigDef(
            "remote.log.copy.disable",
            "boolean",
            False,
            None,
            "Stop copying segments to remote storage; remote reads still work.",
            None,
        ),
        ConfigDef(
            "remote.log.delete.on.disable",
            "boolean",
            False,
            None,
            "Delete remote data when remote storage is disabled for the topic.",
            None,
        ),
        ConfigDef(
            "remote.log.compaction.interval.ms",
            "long",
            300_000,
            "log.remote.compaction.interval.ms",
            "tierlog: how often the remote segments of a compacted topic are compacted again.",
            _at_least(0),
        ),
        ConfigDef(
            "remote.log.compaction.lag.ms",
            "long",
            -1,
            "log.remote.compaction.lag.ms",
            "tierlog: a cleaned segment of a compacted topic is copied to remote storage once "
            "its newest record is this old (-1: max.compaction.lag.ms when set, else 0).",
            _at_least(-1),
        ),
        ConfigDef(
            "remote.storage.enable",
            "boolean",
            False,
            None,
            "Tier this topic's rolled segments to remote storage.",
            None,
        ),
        ConfigDef(
            "retention.bytes",
            "long",
            -1,
            "log.retention.bytes",
            "Max total size of the log (local + remote) before old segments are deleted.",
            _at_least(-1),
        ),
        ConfigDef(
            "retention.ms",
            "long",
            604_800_000,
            "log.retention.ms",
            "Max age of a segment (by its largest timestamp) before it is deleted.",
            _at_least(-1),
        ),
        ConfigDef(
            "segment.bytes",
            "int",
            1_073_741_824,
            "log.segment.bytes",
            "Segment file size.",
            _at_least(14),
        ),
        ConfigDef(
            "segment.index.bytes",
            "int",
            10_485_760,
            "log.index.size.max.bytes",
            "Size of the offset index, preallocated and trimmed on roll.",
            _at_least(8),
        ),
        ConfigDef(
            "segment.jitter.ms",
            "long",
            0,
            "log.roll.jitter.ms",
            "Max random jitter subtracted from segment.ms.",
            _at_least(0),
        ),
        ConfigDef(
            "segment.ms",
            "long",
            604_800_000,
            "log.roll.ms",
            "Roll a new segment after this time even if not full.",
            _at_least(1),
        ),
        ConfigDef(
            "unclean.leader.election.enable",
            "boolean",
            False,
            "unclean.leader.election.enable",
            "Allow out-of-sync replicas to lead.",
            None,
        ),
    )
}

#: Broker config name -> topic config name, for the broker-level defaults.
BROKER_SYNONYMS: dict[str, str] = {d.synonym: d.name for d in TOPIC_CONFIGS.values() if d.synonym}


def parse_value(name: str, raw: object) -> Any:
    """Parse a raw config value (usually a string) into the config's type.

    Raises:
        ConfigError: unknown name, or a value that does not parse or validate.
    """
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        raise ConfigError(name, "unknown topic config")
    try:
        value: Any
        if d.type in ("long", "int"):
            value = int(str(raw).strip())
            limit = LONG_MAX if d.type == "long" else INT_MAX
            if not -limit - 1 <= value <= limit:
                raise ValueError("out of range")
        elif d.type == "double":
            value = float(str(raw).strip())
        elif d.type == "boolean":
            s = str(raw).strip().lower()
            if s not in ("true", "false"):
                raise ValueError("expected true or false")
            value = s == "true"
        elif d.type == "list":
            if isinstance(raw, list | tuple):
                value = tuple(str(x).strip() for x in raw)
            else:
                value = tuple(p.strip() for p in str(raw).split(",") if p.strip())
        else:
            value = str(raw).strip()
    except ValueError as e:
        raise ConfigError(name, f"invalid {d.type} value {raw!r}: {e}") from None
    if d.validator is not None and (msg := d.validator(value)) is not None:
        raise ConfigError(name, f"invalid value {raw!r}: {msg}")
    return value


def format_value(name: str, value: Any) -> str:
    """The wire/properties form of a typed value (inverse of :func:`parse_value`)."""
    d = TOPIC_CONFIGS[name]
    if d.type == "boolean":
        return "true" if value else "false"
    if d.type == "list":
        return ",".join(value)
    return str(value)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The effective configuration of one partition's log.

    ``values`` maps every topic config name to its typed value; ``overrides`` holds the names
    set at topic level (DescribeConfigs reports them as TOPIC_CONFIG), ``broker_defaults`` the
    names whose default came from a broker config (STATIC_BROKER_CONFIG).
    """

    values: Mapping[str, Any] = field(
        default_factory=lambda: {n: d.default for n, d in TOPIC_CONFIGS.items()}
    )
    overrides: frozenset[str] = frozenset()
    broker_defaults: frozenset[str] = frozenset()
    #: The typed broker-level values of ``broker_defaults`` (what an override falls back to).
    broker_values: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_broker(cls, broker_props: Mapping[str, str]) -> LogConfig:
        """Defaults for every topic from broker-level configs (``log.segment.bytes``...)."""
        values = {n: d.default for n, d in TOPIC_CONFIGS.items()}
        from_broker = set()
        for key, raw in broker_props.items():
            topic_name = BROKER_SYNONYMS.get(key)
            if topic_name is not None:
                values[topic_name] = parse_value(topic_name, raw)
                from_broker.add(topic_name)
        return cls(values, frozenset(), frozenset(from_broker), {n: values[n] for n in from_broker})

    def with_overrides(
        self, overrides: Mapping[str, object], *, replace: bool = False
    ) -> LogConfig:
        """A new config with topic-level ``overrides`` applied, validated as a whole.

        With ``replace=True`` the existing topic overrides are dropped first (AlterConfigs);
        otherwise they are merged (IncrementalAlterConfigs SET). Raises ConfigError.
        """
        base = self.defaults() if replace else self
        values = dict(base.values)
        names = set(base.overrides)
        for name, raw in overrides.items():
            values[name] = parse_value(name, raw)
            names.add(name)
        new = LogConfig(values, frozenset(names), self.broker_defaults, self.broker_values)
        new.validate()
        return new

    def without(self, names: set[str] | frozenset[str]) -> LogConfig:
        """A new config with topic-level overrides of ``names`` removed (back to defaults)."""
        values = dict(self.values)
        for name in names:
            if name not in TOPIC_CONFIGS:
                raise ConfigError(name, "unknown topic config")
            values[name] = self._default_value(name)
        return LogConfig(values, self.overrides - names, self.broker_defaults, self.broker_values)

    def _default_value(self, name: str) -> Any:
        """The broker-level value of ``name`` when set, else the built-in default."""
        if name in self.broker_values:
            return self.broker_values[name]
        if name not in self.overrides:
            return self.values[name]
        return TOPIC_CONFIGS[name].default

    def defaults(self) -> LogConfig:
        """This config with every topic-level override removed."""
        return self.without(set(self.overrides)) if self.overrides else self

    def validate(self) -> None:
        """Cross-field rules, as Kafka's LogConfig.validate. Raises ConfigError."""
        v = self.values
        retention_ms, local_ms = v["retention.ms"], v["local.retention.ms"]
        if (
            local_ms not in (-2,)
            and retention_ms != -1
            and (local_ms == -1 or local_ms > retention_ms)
        ):
            raise ConfigError(
                "local.retention.ms",
                f"value {local_ms} must not be more than retention.ms {retention_ms}",
            )
        retention_bytes, local_bytes = v["retention.bytes"], v["local.retention.bytes"]
        if (
            local_bytes not in (-2,)
            and retention_bytes != -1
            and (local_bytes == -1 or local_bytes > retention_bytes)
        ):
            raise ConfigError(
                "local.retention.bytes",
                f"value {local_bytes} must not be more than retention.bytes {retention_bytes}",
            )

    def get(self, name: str) -> Any:
        return self.values[name]

    # Typed accessors for the hot paths (Kafka's LogConfig getters).
    @property
    def segment_size(self) -> int:
        return int(self.values["segment.bytes"])

    @property
    def segment_ms(self) -> int:
        return int(self.values["segment.ms"])

    @property
    def segment_jitter_ms(self) -> int:
        return int(self.values["segment.jitter.ms"])

    @property
    def max_index_size(self) -> int:
        return int(self.values["segment.index.bytes"])

    @property
    def index_interval(self) -> int:
        return int(self.values["index.interval.bytes"])

    @property
    def flush_interval(self) -> int:
        return int(self.values["flush.messages"])

    @property
    def min_in_sync_replicas(self) -> int:
        return int(self.values["min.insync.replicas"])

    @property
    def unclean_leader_election_enable(self) -> bool:
        return bool(self.values["unclean.leader.election.enable"])

    @property
    def flush_ms(self) -> int:
        return int(self.values["flush.ms"])

    @property
    def retention_ms(self) -> int:
        return int(self.values["retention.ms"])

    @property
    def retention_size(self) -> int:
        return int(self.values["retention.bytes"])

    @property
    def local_retention_ms(self) -> int:
        """Effective local retention: -2 means the same as retention.ms."""
        v = int(self.values["local.retention.ms"])
        return self.retention_ms if v == -2 else v

    @property
    def local_retention_bytes(self) -> int:
        """Effective local retention: -2 means the same as retention.bytes."""
        v = int(self.values["local.retention.bytes"])
        return self.retention_size if v == -2 else v

    @property
    def max_message_size(self) -> int:
        return int(self.values["max.message.bytes"])

    @property
    def file_delete_delay_ms(self) -> int:
        return int(self.values["file.delete.delay.ms"])

    @property
    def log_append_time(self) -> bool:
        """True when ``message.timestamp.type=LogAppendTime``."""
        return bool(self.values["message.timestamp.type"] == "LogAppendTime")

    @property
    def remote_storage_enable(self) -> bool:
        return bool(self.values["remote.storage.enable"])

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.values["cleanup.policy"]

    @property
    def compact(self) -> bool:
        return "compact" in self.values["cleanup.policy"]

    def source_of(self, name: str) -> str:
        """DescribeConfigs source: TOPIC_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG."""
        if name in self.overrides:
            return "TOPIC_CONFIG"
        if name in self.broker_defaults:
            return "STATIC_BROKER_CONFIG"
        return "DEFAULT_CONFIG"

    def to_props(self, *, overrides_only: bool = False) -> dict[str, str]:
        names = sorted(self.overrides) if overrides_only else sorted(self.values)
        return {n: format_value(n, self.values[n]) for n in names}
