"""The options of the ``tierlog`` data source: Spark's Kafka source options, parsed and checked.

Spark's own names and meanings (``KafkaSourceProvider``), case-insensitive, so a pipeline moves
from ``format("kafka")`` to ``format("tierlog")`` by changing the format name only:

==========================================  ==================================================
source (read) option                        meaning
==========================================  ==================================================
``kafka.bootstrap.servers``                 required: ``host:port[,host:port...]``
``subscribe``                               topics, comma-separated       } exactly one
``subscribePattern``                        a regex the whole name matches } of these
``assign``                                  ``{"topicA":[0,1],"topicB":[2]}`` }
``startingOffsets``                         ``earliest`` (batch default), ``latest`` (stream
                                            default) or ``{"t":{"0":23,"1":-2}}`` (-2 earliest,
                                            -1 latest)
``endingOffsets``                           batch only: ``latest`` (default) or JSON
``startingTimestamp`` / ``endingTimestamp``  one timestamp (ms) for every partition
``startingOffsetsByTimestamp`` / ``ending…``  ``{"t":{"0":1700000000000}}``
``startingOffsetsByTimestampStrategy``      ``error`` (default) or ``latest``: what a starting
                                            timestamp past the last record means
``failOnDataLoss``                          ``true`` (default): fail when offsets to read were
                                            deleted; ``false``: skip to what remains
``minPartitions`` / ``maxRecordsPerPartition``  split offset ranges into more Spark partitions
``maxOffsetsPerTrigger``                    stream: records per micro-batch, over all partitions
``includeHeaders``                          add the ``headers`` column
``groupIdPrefix``, ``kafka.group.id``        accepted and unused (no consumer group is used)
``kafkaConsumer.pollTimeoutMs``             timeout of one fetch (default 120 s)
``fetchOffset.numRetries`` /                retries of the driver's offset and metadata
``fetchOffset.retryIntervalMs``             requests (default 3, 1000 ms)
``kafka.isolation.level``                   ``read_uncommitted`` (default, as Spark's Kafka
                                            consumer) or ``read_committed``: only committed
                                            transactions, up to the last stable offset;
                                            control batches are never rows
``kafka.<consumer config>``                 see :data:`READ_KAFKA_KEYS`
``tierlog.remote.<rsm key>``                direct remote reads, see :data:`REMOTE_KEYS`
``tierlog.maxPartitionBytes``               pack consecutive ranges of a partition into one
                                            Spark partition up to this many bytes (default
                                            512 MiB, 0: never), unless ``minPartitions`` or
                                            ``maxRecordsPerPartition`` is given
==========================================  ==================================================

Sink (write) options: ``kafka.bootstrap.servers``, ``topic`` and ``kafka.<producer config>``
(handed to librdkafka; ``enable.idempotence`` and ``acks`` are fixed to ``true`` / ``all``).

Unknown options, options of the other direction, contradictory combinations and bad values
raise :class:`~tierlog.errors.ConfigError` (a ``ValueError``) naming the option. Where Spark
picks one of two contradictory options silently (a timestamp over ``startingOffsets``), this
source refuses instead.

Pure functions, no Spark and no I/O: unit-testable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from tierlog.errors import ConfigError
from tierlog.security.client_security import (
    CLIENT_SECURITY_KEYS,
    ClientSecurity,
    client_security,
    librdkafka_config,
)
from tierlog.tiered.storage.pyarrow_remote_storage_manager import CONFIG_KEYS

__all__ = [
    "EARLIEST",
    "LATEST",
    "READ_KAFKA_KEYS",
    "REMOTE_KEYS",
    "OffsetSpec",
    "SinkOptions",
    "SourceOptions",
    "TopicPartition",
    "parse_sink_options",
    "parse_source_options",
    "partition_offsets_json",
]

TopicPartition = tuple[str, int]

#: Kafka's special offsets in Spark's JSON offsets.
LATEST: Final = -1
EARLIEST: Final = -2

#: ``kafka.*`` consumer configs the reader understands (everything else is refused).
READ_KAFKA_KEYS: Final = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "isolation.level",
        "request.timeout.ms",
        "default.api.timeout.ms",
        "max.partition.fetch.bytes",
        "fetch.max.bytes",
        "fetch.max.wait.ms",
        "receive.buffer.bytes",
        "check.crcs",
        *CLIENT_SECURITY_KEYS,
        "group.id",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.records",
        "client.dns.lookup",
        "metadata.max.age.ms",
    }
)
#: Consumer configs Spark refuses, with Spark's reason.
_REFUSED_KAFKA_KEYS: Final = {
    "auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported. Instead set the "
    "source option 'startingOffsets' to 'earliest' or 'latest' to specify where to start.",
    "key.deserializer": "Kafka option 'key.deserializer' is not supported as keys are "
    "deserialized as byte arrays with ByteArrayDeserializer. Use DataFrame operations to "
    "explicitly deserialize the keys.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported as values are "
    "deserialized as byte arrays with ByteArrayDeserializer. Use DataFrame operations to "
    "explicitly deserialize the values.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}
_REFUSED_PRODUCER_KEYS: Final = {
    "key.serializer": "Kafka option 'key.serializer' is not supported as keys are serialized "
    "with ByteArraySerializer.",
    "value.serializer": "Kafka option 'value.serializer' is not supported as value are "
    "serialized with ByteArraySerializer.",
}

#: ``tierlog.remote.*`` keys: the broker's ``rsm.config.*`` keys of the built-in remote storage.
REMOTE_KEYS: Final = CONFIG_KEYS
_REMOTE_PREFIX: Final = "tierlog.remote."

#: ``tierlog.maxPartitionBytes`` by default. Every Python data source task costs about 0.1 s of a
#: slot; a 512 MiB task reads for about 4 s per slot here, so packing to 512 MiB keeps that
#: cost near 2 %. Measured on 10 M records in 4 partitions of 64 MiB segments, local[2], full
#: aggregation: one task per segment 3.3 M rows/s, packed to 256 MiB 4.2 M, one task per
#: partition (what 512 MiB gives there) 4.5 M; ``bench/bench_spark.py`` prints the first and
#: the default.
DEFAULT_MAX_PARTITION_BYTES: Final = 512 << 20

_STRATEGIES: Final = ("subscribe", "subscribepattern", "assign")
_SOURCE_KEYS: Final = frozenset(
    {
        *_STRATEGIES,
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp",
        "startingoffsetsbytimestampstrategy",
        "failondataloss",
        "minpartitions",
        "maxrecordsperpartition",
        "maxoffsetspertrigger",
        "includeheaders",
        "groupidprefix",
        "kafkaconsumer.polltimeoutms",
        "fetchoffset.numretries",
        "fetchoffset.retryintervalms",
        "tierlog.maxpartitionbytes",
    }
)
_UNSUPPORTED_SOURCE_KEYS: Final = {
    "minoffsetspertrigger": "minOffsetsPerTrigger is not supported by the tierlog source "
    "(PySpark's read limits cannot combine a minimum with maxTriggerDelay)",
    "maxtriggerdelay": "maxTriggerDelay is not supported by the tierlog source "
    "(it only applies together with minOffsetsPerTrigger)",
}
_SINK_KEYS: Final = frozenset({"topic", "includeheaders"})
#: Options Spark itself passes to a streaming sink along with the user's.
_SPARK_SINK_KEYS: Final = frozenset({"checkpointlocation"})
#: Spark's display spelling of the option names (error messages).
_DISPLAY: Final = {
    "subscribepattern": "subscribePattern",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "failondataloss": "failOnDataLoss",
    "minpartitions": "minPartitions",
    "maxrecordsperpartition": "maxRecordsPerPartition",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "includeheaders": "includeHeaders",
    "groupidprefix": "groupIdPrefix",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
    "fetchoffset.numretries": "fetchOffset.numRetries",
    "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
    "tierlog.maxpartitionbytes": "tierlog.maxPartitionBytes",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
}


def _name(key: str) -> str:
    return _DISPLAY.get(key, key)


# ------------------------------------------------------------------------------ values


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a read starts or ends (Spark's ``KafkaOffsetRangeLimit``).

    * ``earliest`` / ``latest``;
    * ``offsets``: per partition, -2 earliest, -1 latest, else the offset itself;
    * ``timestamp``: one timestamp for every partition;
    * ``timestamps``: per partition.

    For timestamps, ``strategy`` says what a starting timestamp later than every record
    means: ``error`` (fail) or ``latest`` (start at the end). For an ending timestamp no match
    always means the latest offset.
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = -1
    strategy: Literal["error", "latest"] = "error"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Parsed read options (see the module docstring)."""

    bootstrap_servers: str
    strategy: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    read_committed: bool = False
    client_id: str = "tierlog-spark"
    request_timeout_ms: int = 120_000
    max_partition_fetch_bytes: int = 8 << 20
    fetch_max_wait_ms: int = 500
    receive_buffer_bytes: int = 1 << 20
    check_crcs: bool = True
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    remote: Mapping[str, str] | None = None
    """``rsm.config.*``-style settings (prefix stripped) for direct remote reads, or None."""
    security: Mapping[str, str] = field(default_factory=dict)
    """``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*`` (prefix stripped)."""

    def matches(self, topic: str, is_internal: bool) -> bool:
        """Whether a topic is subscribed (for subscribe / subscribePattern)."""
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "subscribePattern":
            return not is_internal and re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Parsed write options."""

    bootstrap_servers: str
    topic: str | None
    producer_config: Mapping[str, str]
    """Extra librdkafka configs from ``kafka.*`` (bootstrap.servers excluded)."""


# ------------------------------------------------------------------------------ helpers


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in options.items():
        key = str(k).lower()
        if key in out:
            raise ConfigError(str(k), "given twice (option names are case-insensitive)")
        out[key] = str(v)
    return out


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    v = opts[key].strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise ConfigError(_name(key), f"expected true or false, got {opts[key]!r}")


def _int(opts: Mapping[str, str], key: str, *, positive: bool = False) -> int | None:
    if key not in opts:
        return None
    try:
        v = int(opts[key].strip())
    except ValueError:
        raise ConfigError(_name(key), f"expected an integer, got {opts[key]!r}") from None
    if positive and v <= 0:
        raise ConfigError(_name(key), f"{_name(key)} must be positive, got {v}")
    return v


def _json(key: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(_name(key), f"expected JSON, got {text!r}: {e}") from None


def _partition_map(key: str, text: str) -> dict[TopicPartition, int]:
    """Spark's ``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}``."""
    data = _json(key, text)
    if not isinstance(data, dict) or not data:
        raise ConfigError(
            _name(key),
            f'expected e.g. {{"topicA":{{"0":23,"1":-1}}}}, got {text!r}',
        )
    out: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise ConfigError(
                _name(key), f"expected partition -> number for topic {topic!r}, got {parts!r}"
            )
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise ConfigError(_name(key), f"partition {p!r} is not a number") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(
                    _name(key), f"{topic}-{partition}: expected an integer, got {value!r}"
                )
            out[(str(topic), partition)] = value
    return out


def partition_offsets_json(offsets: Mapping[TopicPartition, int]) -> str:
    """Spark's JSON of per-partition offsets (the inverse of the option parser)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(out, separators=(",", ":"))


def _offset_spec(
    opts: Mapping[str, str],
    *,
    timestamp_key: str,
    by_timestamp_key: str,
    offsets_key: str,
    default: Literal["earliest", "latest"],
    strategy: Literal["error", "latest"],
) -> OffsetSpec:
    given = [k for k in (timestamp_key, by_timestamp_key, offsets_key) if k in opts]
    if len(given) > 1:
        raise ConfigError(
            _name(given[0]),
            "only one of "
            + ", ".join(_name(k) for k in (timestamp_key, by_timestamp_key, offsets_key))
            + " can be specified; got "
            + " and ".join(_name(k) for k in given),
        )
    if timestamp_key in opts:
        raw = opts[timestamp_key].strip()
        try:
            ts = int(raw)
        except ValueError:
            raise ConfigError(
                _name(timestamp_key), f"Expected a single long value, got {raw}"
            ) from None
        if ts < 0:
            raise ConfigError(_name(timestamp_key), f"timestamps are >= 0, got {ts}")
        return OffsetSpec("timestamp", timestamp=ts, strategy=strategy)
    if by_timestamp_key in opts:
        timestamps = _partition_map(by_timestamp_key, opts[by_timestamp_key])
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ConfigError(
                    _name(by_timestamp_key), f"{tp[0]}-{tp[1]}: timestamps are >= 0, got {ts}"
                )
        return OffsetSpec("timestamps", offsets=timestamps, strategy=strategy)
    if offsets_key in opts:
        raw = opts[offsets_key].strip()
        if raw.lower() in ("earliest", "latest"):
            return OffsetSpec("earliest" if raw.lower() == "earliest" else "latest")
        offsets = _partition_map(offsets_key, raw)
        for tp, off in offsets.items():
            if off < EARLIEST:
                raise ConfigError(
                    _name(offsets_key),
                    f"{tp[0]}-{tp[1]}: offset {off} (use -1 for latest, -2 for earliest)",
                )
        return OffsetSpec("offsets", offsets=offsets)
    return OffsetSpec(default)


def _split_kafka(
    opts: Mapping[str, str], refused: Mapping[str, str], allowed: frozenset[str] | None
) -> dict[str, str]:
    kafka: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in refused:
            raise ConfigError(f"kafka.{name}", refused[name])
        if allowed is not None and name not in allowed:
            raise ConfigError(
                f"kafka.{name}",
                "not supported by the tierlog reader (supported: "
                + ", ".join(f"kafka.{k}" for k in sorted(allowed))
                + ")",
            )
        kafka[name] = value
    if "bootstrap.servers" not in kafka or not kafka["bootstrap.servers"].strip():
        raise ConfigError(
            "kafka.bootstrap.servers",
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer",
        )
    return kafka


def _remote(opts: Mapping[str, str]) -> dict[str, str] | None:
    remote: dict[str, str] = {}
    for key, value in opts.items():
        if key.startswith(_REMOTE_PREFIX):
            name = key[len(_REMOTE_PREFIX) :]
            if name not in REMOTE_KEYS:
                raise ConfigError(
                    key,
                    "unknown remote storage option (known: "
                    + ", ".join(_REMOTE_PREFIX + k for k in REMOTE_KEYS)
                    + ")",
                )
            remote[name] = value
    if not remote:
        return None
    if "uri" not in remote:
        raise ConfigError(
            "tierlog.remote.uri", "required when any tierlog.remote.* option is given"
        )
    return remote


# ------------------------------------------------------------------------------ source


def parse_source_options(options: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Check and parse the options of a batch (``streaming=False``) or streaming read.

    ``streaming=None`` (not known yet: ``DataSource.schema()``) skips the checks that depend
    on it and parses as a batch read would, leniently.

    Raises:
        ConfigError: an unknown, refused, contradictory or malformed option (names it).
    """
    opts = _lower(options)
    spelled = {str(k).lower(): str(k) for k in options}
    for key in opts:
        if key in _UNSUPPORTED_SOURCE_KEYS:
            raise ConfigError(_name(key), _UNSUPPORTED_SOURCE_KEYS[key])
        if key.startswith(("kafka.", _REMOTE_PREFIX)) or key in _SOURCE_KEYS:
            continue
        if key in _SINK_KEYS:
            raise ConfigError(key, "is a write option; it has no meaning when reading")
        if key == "path":
            raise ConfigError("path", "the tierlog source takes no path: use subscribe/assign")
        raise ConfigError(
            spelled[key],
            "unknown option of the tierlog source (Spark's Kafka source options are "
            "supported, see tierlog.spark.options)",
        )

    # Exactly one subscription strategy (Spark's messages).
    strategies = [k for k in _STRATEGIES if k in opts]
    names = ", ".join(_STRATEGIES)
    if not strategies:
        raise ConfigError(
            "subscribe",
            f"One of the following options must be specified for Kafka source: {names}. "
            "See the docs for more details.",
        )
    if len(strategies) > 1:
        raise ConfigError(
            _name(strategies[1]),
            f"Only one of the following options can be specified for Kafka source: {names}. "
            "See the docs for more details.",
        )
    key = strategies[0]
    value = opts[key]
    topics: tuple[str, ...] = ()
    pattern = ""
    assigned: tuple[TopicPartition, ...] = ()
    strategy: Literal["subscribe", "subscribePattern", "assign"]
    if key == "assign":
        strategy = "assign"
        if not value.strip().startswith("{"):
            raise ConfigError(
                "assign",
                f"No topicpartitions to assign as specified value for option 'assign' is '{value}'",
            )
        data = _json("assign", value)
        if not isinstance(data, dict):
            raise ConfigError("assign", f'expected {{"topicA":[0,1]}}, got {value!r}')
        tps = []
        for topic, parts in data.items():
            if not isinstance(parts, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
            ):
                raise ConfigError("assign", f"partitions of {topic!r} must be a list of ints")
            tps += [(str(topic), int(p)) for p in parts]
        if not tps:
            raise ConfigError(
                "assign",
                f"No topicpartitions to assign as specified value for option 'assign' is '{value}'",
            )
        assigned = tuple(sorted(set(tps)))
    elif key == "subscribe":
        strategy = "subscribe"
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise ConfigError(
                "subscribe",
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'",
            )
    else:
        strategy = "subscribePattern"
        pattern = value.strip()
        if not pattern:
            raise ConfigError(
                "subscribePattern",
                f"Pattern to subscribe is empty as specified value for option "
                f"'subscribePattern' is '{value}'",
            )
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError("subscribePattern", f"not a valid regex {pattern!r}: {e}") from None

    kafka = _split_kafka(opts, _REFUSED_KAFKA_KEYS, READ_KAFKA_KEYS)
    strategy_on_no_match = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy_on_no_match not in ("error", "latest"):
        raise ConfigError(
            "startingOffsetsByTimestampStrategy",
            f"expected error or latest, got {opts['startingoffsetsbytimestampstrategy']!r}",
        )
    on_no_match: Literal["error", "latest"] = (
        "latest" if strategy_on_no_match == "latest" else "error"
    )

    starting = _offset_spec(
        opts,
        timestamp_key="startingtimestamp",
        by_timestamp_key="startingoffsetsbytimestamp",
        offsets_key="startingoffsets",
        default="latest" if streaming else "earliest",
        strategy=on_no_match,
    )
    if streaming is None:
        ending = _offset_spec(
            opts,
            timestamp_key="endingtimestamp",
            by_timestamp_key="endingoffsetsbytimestamp",
            offsets_key="endingoffsets",
            default="latest",
            strategy="latest",
        )
    elif streaming:
        for k, what in (
            ("endingoffsets", "ending offset"),
            ("endingtimestamp", "ending timestamp"),
            ("endingoffsetsbytimestamp", "ending timestamp"),
        ):
            if k in opts:
                raise ConfigError(_name(k), f"{what} not valid in streaming queries")
        ending = OffsetSpec("latest")
    else:
        ending = _offset_spec(
            opts,
            timestamp_key="endingtimestamp",
            by_timestamp_key="endingoffsetsbytimestamp",
            offsets_key="endingoffsets",
            default="latest",
            strategy="latest",
        )
        if starting.kind == "latest":
            raise ConfigError(
                "startingOffsets", "starting offset can't be latest for batch queries on Kafka"
            )
        if starting.kind == "offsets":
            for (t, p), off in starting.offsets.items():
                if off == LATEST:
                    raise ConfigError(
                        "startingOffsets",
                        f"startingOffsets for {t}-{p} can't be latest for batch queries on Kafka",
                    )
        if ending.kind == "earliest":
            raise ConfigError(
                "endingOffsets", "ending offset can't be earliest for batch queries on Kafka"
            )
        if ending.kind == "offsets":
            for (t, p), off in ending.offsets.items():
                if off == EARLIEST:
                    raise ConfigError(
                        "endingOffsets",
                        f"ending offset for {t}-{p} can't be earliest for batch queries on Kafka",
                    )
        _check_limits(starting, ending)

    # Spark's Kafka source leaves isolation.level to the Kafka consumer, whose default is
    # read_uncommitted: so does this source (read_committed must be asked for).
    isolation = kafka.get("isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise ConfigError(
            "kafka.isolation.level", f"expected read_committed or read_uncommitted: {isolation!r}"
        )
    security = security_options(kafka)

    def kint(name: str, default: int) -> int:
        v = _int(opts, f"kafka.{name}", positive=True)
        return default if v is None else v

    poll_timeout = _int(opts, "kafkaconsumer.polltimeoutms", positive=True)
    retries = _int(opts, "fetchoffset.numretries")
    if retries is not None and retries < 0:
        raise ConfigError("fetchOffset.numRetries", f"must be >= 0, got {retries}")
    return SourceOptions(
        bootstrap_servers=kafka["bootstrap.servers"].strip(),
        strategy=strategy,
        topics=topics,
        pattern=pattern,
        assigned=assigned,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        min_partitions=_int(opts, "minpartitions", positive=True),
        max_records_per_partition=_int(opts, "maxrecordsperpartition", positive=True),
        max_partition_bytes=_max_partition_bytes(opts),
        max_offsets_per_trigger=_int(opts, "maxoffsetspertrigger", positive=True),
        include_headers=_bool(opts, "includeheaders", False),
        read_committed=isolation == "read_committed",
        client_id=kafka.get("client.id", "tierlog-spark").strip() or "tierlog-spark",
        request_timeout_ms=poll_timeout or kint("request.timeout.ms", 120_000),
        max_partition_fetch_bytes=kint("max.partition.fetch.bytes", 8 << 20),
        fetch_max_wait_ms=kint("fetch.max.wait.ms", 500),
        receive_buffer_bytes=kint("receive.buffer.bytes", 1 << 20),
        check_crcs=_bool(opts, "kafka.check.crcs", True),
        fetch_offset_num_retries=3 if retries is None else retries,
        fetch_offset_retry_interval_ms=_int(opts, "fetchoffset.retryintervalms", positive=True)
        or 1000,
        remote=_remote(opts),
        security=security,
    )


def security_options(kafka: Mapping[str, str]) -> dict[str, str]:
    """The security keys among ``kafka.*`` options (prefix stripped), checked now on the
    driver (a bad one fails the query naming its option); executors build the TLS context and
    the SASL login from them (:func:`client_security_of`).

    Raises:
        ConfigError: as :func:`~tierlog.security.client_security.client_security`.
    """
    security = {k: v for k, v in kafka.items() if k in CLIENT_SECURITY_KEYS}
    client_security(security, prefix="kafka.")
    return security


_SECURITY_CACHE: dict[tuple[tuple[str, str], ...], ClientSecurity] = {}


def client_security_of(security: Mapping[str, str]) -> ClientSecurity:
    """The :class:`ClientSecurity` of validated security options, built once per process
    (a Python worker runs many tasks; the TLS context is shared by their connections)."""
    key = tuple(sorted(security.items()))
    got = _SECURITY_CACHE.get(key)
    if got is None:
        got = _SECURITY_CACHE[key] = client_security(security, prefix="kafka.")
    return got


def _max_partition_bytes(opts: Mapping[str, str]) -> int:
    v = _int(opts, "tierlog.maxpartitionbytes")
    if v is None:
        return DEFAULT_MAX_PARTITION_BYTES
    if v < 0:
        raise ConfigError("tierlog.maxPartitionBytes", f"must be >= 0, got {v}")
    return v


def _check_limits(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Spark's ``checkOffsetLimitValidity`` for specific offsets / timestamps."""
    if starting.kind != ending.kind or starting.kind not in ("offsets", "timestamps"):
        return
    if set(starting.offsets) != set(ending.offsets):
        raise ConfigError(
            "endingOffsets" if starting.kind == "offsets" else "endingOffsetsByTimestamp",
            "the starting and ending options name different partitions: "
            f"{sorted(starting.offsets)} vs {sorted(ending.offsets)}",
        )
    for tp, start in starting.offsets.items():
        end = ending.offsets[tp]
        if start >= 0 and end >= 0 and start > end:
            what = "offset" if starting.kind == "offsets" else "timestamp"
            raise ConfigError(
                "startingOffsets" if starting.kind == "offsets" else "startingOffsetsByTimestamp",
                f"the starting {what} ({start}) of {tp[0]}-{tp[1]} is greater than the ending "
                f"{what} ({end})",
            )


# ------------------------------------------------------------------------------ sink


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check and parse the options of a (batch or streaming) write.

    Raises:
        ConfigError: an unknown, refused or malformed option (names it).
    """
    opts = _lower(options)
    spelled = {str(k).lower(): str(k) for k in options}
    for key in opts:
        if key.startswith("kafka.") or key in _SINK_KEYS or key in _SPARK_SINK_KEYS:
            continue
        if key in _SOURCE_KEYS or key.startswith(_REMOTE_PREFIX):
            raise ConfigError(_name(key), "is a read option; it has no meaning when writing")
        if key == "path":
            raise ConfigError("path", "the tierlog sink takes no path: use the topic option")
        raise ConfigError(spelled[key], "unknown option of the tierlog sink")
    kafka = _split_kafka(opts, _REFUSED_PRODUCER_KEYS, None)
    for name, required in (("enable.idempotence", "true"), ("acks", "all")):
        if name in kafka and kafka[name].strip().lower() not in (required, "-1"):
            raise ConfigError(
                f"kafka.{name}",
                f"the tierlog sink always produces with {name}={required} (so a retried "
                "Spark task cannot leave gaps or reorder records)",
            )
    topic = opts.get("topic")
    if topic is not None:
        topic = topic.strip()
        if not topic:
            raise ConfigError("topic", "is empty")
    bootstrap = kafka.pop("bootstrap.servers").strip()
    # Spark's Kafka sink takes the Java client's names (sasl.jaas.config, ssl.truststore.*);
    # the sink's producer is librdkafka's
    producer_config = librdkafka_config(kafka, prefix="kafka.")
    return SinkOptions(bootstrap_servers=bootstrap, topic=topic, producer_config=producer_config)
