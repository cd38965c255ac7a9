"""Broker configuration: Kafka's ``server.properties`` names, types, defaults and validation.

Sources, later wins: the built-in defaults, a properties file (``--config``), then
``--override key=value`` pairs. The file uses ``java.util.Properties`` syntax (see
:func:`parse_properties`). Every key must be known: an unknown key or a value that does not
parse or validate raises :class:`~tierlog.errors.ConfigError` naming the key (Kafka only logs
unknown keys; a typo that silently keeps a default is worse than a refusal to start).

Known keys, in five groups:

* the broker keys in :data:`BROKER_CONFIGS` (``listeners``, ``log.dirs``, ``num.partitions`` ...)
  — each documented as used by tierlog or accepted for compatibility and ignored; the TLS and
  SASL keys among them come from :mod:`tierlog.security.security_config`;
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
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlog.console.console_server import parse_console_listener
from tierlog.errors import ConfigError
from tierlog.log.log_config import BROKER_SYNONYMS, LONG_MAX, TOPIC_CONFIGS, LogConfig
from tierlog.security.security_config import (
    LISTENER_PREFIX,
    SECURITY_CONFIGS,
    SECURITY_PROTOCOLS,
    ListenerConfigs,
    parse_listener_key,
    reject_unprefixed_jaas,
)
from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import between as _between
from tierlog.server.config_def import define as _d
from tierlog.server.config_def import format_config_value as _format
from tierlog.server.config_def import ignored as _ignored
from tierlog.server.config_def import one_of as _one_of
from tierlog.server.config_def import parse_config_value as _parse_value
from tierlog.server.config_providers import resolve_config_providers

if TYPE_CHECKING:
    from tierlog.log.log_cleaner import CleanerConfig
    from tierlog.log.log_manager import LogManager

__all__ = [
    "BROKER_CONFIGS",
    "BrokerConfigDef",
    "ConfigEntry",
    "Endpoint",
    "KafkaConfig",
    "parse_properties",
]

RSM_CONFIG_PREFIX = "rsm.config."
RLMM_CONFIG_PREFIX = "rlmm.config."

DEFAULT_SECURITY_PROTOCOL_MAP = (
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
)

# DescribeConfigs sources (Kafka's ConfigSource names).
DEFAULT_CONFIG = "DEFAULT_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"


# --------------------------------------------------------------------------- properties syntax


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """Parse ``java.util.Properties`` text into a dict; a later duplicate key wins.

    The rules of ``Properties.load``: a logical line is continued by an odd number of
    trailing backslashes (leading whitespace of the continuation is dropped); lines whose
    first non-blank character is ``#`` or ``!`` are comments; the key ends at the first
    unescaped ``=``, ``:`` or whitespace, then blanks and at most one ``=``/``:`` are skipped;
    escapes ``\\t \\n \\r \\f \\uXXXX`` are decoded and a backslash before any other character
    stands for that character (``\\=``, ``\\:``, ``\\ ``, ``\\\\``).

    Raises:
        ConfigError: a malformed ``\\uXXXX`` escape (keyed by ``source:line``).
    """
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(line):  # continuation at end of input
            line = line[:-1]
        key, value = _split_key_value(line)
        where = f"{source}:{lineno}"
        props[_unescape(key, where)] = _unescape(value, where)
    return props


def _continues(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    pos = 0
    n = len(line)
    while pos < n:
        c = line[pos]
        if c == "\\":
            pos += 2
            continue
        if c in "=: \t\f":
            break
        pos += 1
    key = line[: min(pos, n)]
    pos = min(pos, n)
    while pos < n and line[pos] in " \t\f":
        pos += 1
    if pos < n and line[pos] in "=:":
        pos += 1
        while pos < n and line[pos] in " \t\f":
            pos += 1
    return key, line[pos:]


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str, where: str) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 >= len(s):
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2 : i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(where, f"malformed \\uxxxx encoding in {s!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


# --------------------------------------------------------------------------- config table


def _roles(v: Any) -> str | None:
    bad = [r for r in v if r not in ("broker", "controller")]
    return f"unknown role {', '.join(bad)}; use broker and/or controller" if bad else None


def _console_listener(v: Any) -> str | None:
    if v is None:
        return None
    try:
        parse_console_listener(v)
    except ValueError as e:
        return str(e)
    return None


_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _assignors(v: Any) -> str | None:
    bad = [a for a in v if a not in ("uniform", "range") and a not in _ASSIGNOR_CLASSES]
    if not v:
        return "at least one assignor is needed (uniform, range)"
    return f"unknown assignor {', '.join(bad)}; use uniform and/or range" if bad else None


_SINGLE = "tierlog is a single node"
_NO_PLUGIN = "the built-in plugins are configured by rsm.config.* and rlmm.config.*"

# fmt: off
_BROKER_ONLY: tuple[BrokerConfigDef, ...] = (
    # --- identity and roles (single node: broker and controller at once)
    _d("node.id", "int", None, None, "This node's id (KRaft name of broker.id). Default 0."),
    _d("broker.id", "int", None, None, "Synonym of node.id; both must agree when both are set."),
    _ignored("process.roles", "list", (), _roles, "a tierlog node is broker and controller"),
    _ignored("controller.quorum.voters", "list", (), None, _SINGLE),
    _ignored("controller.quorum.bootstrap.servers", "list", (), None, _SINGLE),
    _d("controller.listener.names", "list", (), None,
       "Listeners of the KRaft controller; not served (tierlog has no separate controller)."),
    # --- network
    _d("listeners", "list", ("PLAINTEXT://127.0.0.1:9092",), None,
       "Listeners NAME://host:port (empty host: every interface, port 0: any free port)."),
    _d("advertised.listeners", "list", None, None,
       "Addresses given to clients in Metadata; defaults to listeners."),
    _d("inter.broker.listener.name", "string", None, None,
       "Must name one of the listeners when set (single node: not otherwise used)."),
    _d("listener.security.protocol.map", "list", tuple(DEFAULT_SECURITY_PROTOCOL_MAP.split(",")),
       None, "Listener name -> security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."),
    _d("socket.request.max.bytes", "int", 104_857_600, _min(1),
       "Largest request frame; a bigger one closes its connection."),
    _d("socket.send.buffer.bytes", "int", 102_400, None, "SO_SNDBUF; -1 keeps the OS default."),
    _d("socket.receive.buffer.bytes", "int", 102_400, None, "SO_RCVBUF; -1: the OS default."),
    _ignored("num.network.threads", "int", 3, _min(1), "one asyncio loop serves all sockets"),
    _d("num.io.threads", "int", 8, _min(1), "Threads of the pool that runs blocking log I/O."),
    # --- the cluster (ZooKeeper mode; without zookeeper.connect a single node)
    _d("zookeeper.connect", "string", None, None,
       "ZooKeeper ensemble host:port[,host:port...][/chroot]; unset: a single node."),
    _d("zookeeper.session.timeout.ms", "int", 18_000, _min(1), "ZooKeeper session timeout."),
    _d("zookeeper.connection.timeout.ms", "int", None, _min(1),
       "Longest wait for the first ZooKeeper connection (default: the session timeout)."),
    _ignored("zookeeper.max.in.flight.requests", "int", 10, _min(1), "kazoo pipelines freely"),
    _ignored("zookeeper.set.acl", "boolean", False, None, "no ZooKeeper ACLs yet"),
    _d("broker.rack", "string", None, None, "Rack of this broker (rack-aware assignment)."),
    _d("replica.lag.time.max.ms", "long", 30_000, _min(1),
       "A follower that has not caught up for this long leaves the ISR."),
    _d("replica.fetch.max.bytes", "int", 1_048_576, _min(0),
       "Bytes a follower fetches per partition per request."),
    _d("replica.fetch.response.max.bytes", "int", 10_485_760, _min(0),
       "Bytes a follower fetches per request."),
    _d("replica.fetch.wait.max.ms", "int", 500, _min(0), "Long-poll wait of follower fetches."),
    _d("replica.fetch.min.bytes", "int", 1, _min(1), "min_bytes of follower fetches."),
    _d("replica.fetch.backoff.ms", "int", 1000, _min(0),
       "Wait of a follower after a failed fetch before the next."),
    _d("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, _min(1),
       "Bytes per second a move between log dirs (AlterReplicaLogDirs) copies, at most."),
    _d("num.replica.fetchers", "int", 1, _min(1),
       "Fetcher tasks per source broker (partitions are hashed over them)."),
    _d("replica.high.watermark.checkpoint.interval.ms", "long", 5000, _min(1),
       "How often replication-offset-checkpoint is written."),
    _d("controlled.shutdown.enable", "boolean", True, None,
       "On SIGTERM, move leadership away before stopping."),
    _d("controlled.shutdown.max.retries", "int", 3, _min(0),
       "Attempts of a controlled shutdown before shutting down anyway."),
    _d("controlled.shutdown.retry.backoff.ms", "long", 5000, _min(0),
       "Wait between controlled shutdown attempts."),
    _d("auto.leader.rebalance.enable", "boolean", True, None,
       "The controller moves leadership back to preferred replicas."),
    _d("leader.imbalance.check.interval.seconds", "long", 300, _min(1),
       "How often the controller checks the leader imbalance."),
    _d("leader.imbalance.per.broker.percentage", "int", 10, _between(0, 100),
       "Imbalance (percent of a broker's preferred partitions led elsewhere) that triggers "
       "preferred-leader elections."),
    # --- topics and logs
    _d("log.dirs", "list", None, None, "Log directories (comma separated); wins over log.dir."),
    _d("log.dir", "string", "./data/logs", None, "The log directory when log.dirs is not set."),
    _d("num.partitions", "int", 1, _min(1), "Partitions of auto-created topics."),
    _d("default.replication.factor", "int", 1, _min(1),
       "Replication factor of topics created without one (CreateTopics -1, auto-creation)."),
    _d("auto.create.topics.enable", "boolean", True, None, "Create unknown topics on Metadata."),
    _d("delete.topic.enable", "boolean", True, None, "Allow DeleteTopics."),
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
    # --- log cleaner (compaction of cleanup.policy=compact topics)
    _d("log.cleaner.enable", "boolean", True, None,
       "Run the log cleaner; without it compacted topics are not compacted."),
    _d("log.cleaner.threads", "int", 1, _min(0), "Threads of the log cleaner."),
    _d("log.cleaner.dedupe.buffer.size", "long", 134_217_728, _min(1),
       "Offset map memory over all cleaner threads (24 bytes a key, as Kafka counts it)."),
    _d("log.cleaner.io.buffer.size", "int", 524_288, _min(0),
       "I/O buffer memory over all cleaner threads."),
    _d("log.cleaner.io.buffer.load.factor", "double", 0.9, None,
       "Fill factor of the offset map before a round stops mapping."),
    _d("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, None,
       "Throttle on the cleaner's read plus write bytes per second."),
    _d("log.cleaner.backoff.ms", "long", 15_000, _min(0),
       "How long an idle cleaner thread waits before looking for dirty logs again."),
    # --- consumer groups and the offsets topic
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
    # --- transactions (the transaction coordinator and __transaction_state)
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
    # --- share groups (out of scope)
    _ignored("share.coordinator.state.topic.replication.factor", "short", 3, _min(1), _SINGLE),
    _ignored("share.coordinator.state.topic.min.isr", "short", 2, _min(1), _SINGLE),
    # --- tiered storage (KIP-405)
    _d("remote.log.storage.system.enable", "boolean", False, None,
       "Enable tiered storage on this broker (topics opt in with remote.storage.enable)."),
    _d("remote.log.manager.task.interval.ms", "long", 30_000, _min(1),
       "Interval of the remote log manager's copy and expiration tasks."),
    _d("remote.log.reader.threads", "int", 10, _min(1), "Threads serving remote reads."),
    _d("remote.log.reader.max.pending.tasks", "int", 100, _min(1),
       "Remote reads queued before new ones are rejected."),
    _d("remote.log.reader.prefetch.max.bytes", "long", 64 << 20, _min(0),
       "tierlog: remote segment data read ahead of sequential consumers in parallel 1 MiB "
       "ranged reads, at most this much held (0: one ranged read per fetch, no read-ahead)."),
    _d("remote.log.manager.copier.thread.pool.size", "int", 10, _min(1),
       "Threads copying segments to remote storage."),
    _d("remote.log.manager.expiration.thread.pool.size", "int", 10, _min(1),
       "Threads expiring remote segments."),
    _d("remote.fetch.max.wait.ms", "int", 500, _min(1), "Longest wait of a fetch for remote data."),
    _d("remote.log.index.file.cache.total.size.bytes", "long", 1_073_741_824, _min(1),
       "Disk bound of <log.dir>/remote-log-index-cache."),
    _d("remote.log.manager.copy.max.bytes.per.second", "long", LONG_MAX, _min(1),
       "Quota on bytes copied to remote storage per second."),
    _d("remote.log.manager.fetch.max.bytes.per.second", "long", LONG_MAX, _min(1),
       "Quota on bytes read from remote storage per second."),
    _d("remote.log.metadata.topic.num.partitions", "int", 50, _min(1),
       "Partitions of __remote_log_metadata (also read as rlmm.config.<this key>, as Kafka)."),
    _d("remote.log.metadata.topic.replication.factor", "short", 3, _min(1),
       "Replicas of __remote_log_metadata in a cluster (created once that many brokers are "
       "alive; also read as rlmm.config.<this key>, as Kafka)."),
    _d("remote.log.manager.task.retry.backoff.ms", "long", 500, _min(1),
       "First backoff of a failed remote copy task; doubles on each further failure."),
    _d("remote.log.manager.task.retry.backoff.max.ms", "long", 30_000, _min(1),
       "Largest backoff of a failing remote copy task."),
    _d("remote.log.manager.task.retry.jitter", "double", 0.2, None,
       "Random jitter (+-fraction) applied to the remote copy task backoff."),
    # tierlog.*: Kafka has no such check; a key of ours under Kafka's remote.log.* could
    # collide with a future KIP's, and the prefix tells a reader no Kafka document covers it.
    _d("tierlog.remote.storage.startup.check", "string", "fail",
       _one_of("fail", "warn", "none"),
       "tierlog: at startup, write, read and delete a probe object in remote storage: fail "
       "(refuse to start when it fails), warn (log it and start anyway), none (no check)."),
    _d("remote.log.metadata.custom.metadata.max.bytes", "int", 128, _min(0),
       "Largest custom metadata a RemoteStorageManager may return per segment."),
    _ignored("remote.log.storage.manager.class.name", "string", None, None, _NO_PLUGIN),
    _ignored("remote.log.storage.manager.class.path", "string", None, None, _NO_PLUGIN),
    _ignored("remote.log.metadata.manager.class.name", "string", None, None, _NO_PLUGIN),
    _ignored("remote.log.metadata.manager.class.path", "string", None, None, _NO_PLUGIN),
    _ignored("remote.log.metadata.manager.listener.name", "string", None, None,
             "the metadata manager uses the broker's own log directly"),
    _d("remote.log.storage.manager.impl.prefix", "string", RSM_CONFIG_PREFIX, None,
       "Prefix of the RemoteStorageManager's keys."),
    _d("remote.log.metadata.manager.impl.prefix", "string", RLMM_CONFIG_PREFIX, None,
       "Prefix of the RemoteLogMetadataManager's keys."),
    # --- client quotas (KIP-13, KIP-55): the window byte rates are measured over
    _d("quota.window.num", "int", 11, _min(1),
       "Samples of a client's byte rate (producer_byte_rate, consumer_byte_rate quotas)."),
    _d("quota.window.size.seconds", "int", 1, _min(1), "Length of each quota rate sample."),
    # --- observability
    _d("metrics.port", "int", None, _between(0, 65535),
       "tierlog: port of the Prometheus /metrics endpoint (unset: no endpoint)."),
    _d("console.listener", "string", None, _console_listener,
       "tierlog: http://host:port of the read-only web console (unset: no console). It has "
       "no authentication: keep it on loopback or behind an authenticating proxy."),
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


#: Every known broker config key (prefixed plugin keys aside).
BROKER_CONFIGS: dict[str, BrokerConfigDef] = {
    d.name: d
    for d in sorted(_BROKER_ONLY + SECURITY_CONFIGS + _synonym_defs(), key=lambda d: d.name)
}

# Keys folded into a *.ms synonym: (ms key, [(key, factor)] lowest precedence first).
_TIME_UNITS: dict[str, tuple[tuple[str, int], ...]] = {
    "log.retention.ms": (("log.retention.hours", 3_600_000), ("log.retention.minutes", 60_000)),
    "log.roll.ms": (("log.roll.hours", 3_600_000),),
    "log.roll.jitter.ms": (("log.roll.jitter.hours", 3_600_000),),
}

_SENSITIVE_WORDS = ("password", "secret", "sasl.jaas.config", "ssl.keystore.key")

# --------------------------------------------------------------------------- listeners

_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://\[?([0-9A-Za-z\-%._:]*?)\]?:(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: ``listener_name://host:port`` and its security protocol.

    An empty host binds every interface (Kafka's ``PLAINTEXT://:9092``); port 0 binds an
    ephemeral port (the server reports the real one).
    """

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


def _parse_endpoints(
    key: str, specs: Iterable[str], protocol_map: Mapping[str, str]
) -> tuple[Endpoint, ...]:
    out: list[Endpoint] = []
    for spec in specs:
        m = _LISTENER_RE.match(spec)
        if m is None:
            raise ConfigError(key, f"invalid listener {spec!r}: expected NAME://host:port")
        name, host, port_s = m.group(1).upper(), m.group(2), m.group(3)
        port = int(port_s)
        if not 0 <= port <= 65535:
            raise ConfigError(key, f"invalid listener {spec!r}: port must be 0..65535")
        protocol = protocol_map.get(name, name if name in SECURITY_PROTOCOLS else "")
        if not protocol:
            raise ConfigError(
                key,
                f"listener {spec!r}: no security protocol for listener name {name}; "
                "map it in listener.security.protocol.map",
            )
        if any(e.listener_name == name for e in out):
            raise ConfigError(key, f"listener name {name} is used more than once")
        out.append(Endpoint(name, host, port, protocol))
    return tuple(out)


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

        self._effective_ms = self._fold_time_units(values)

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
        protocol_map = self._protocol_map(get("listener.security.protocol.map"))
        self.controller_listener_names: tuple[str, ...] = tuple(
            n.upper() for n in get("controller.listener.names")
        )
        all_listeners = _parse_endpoints("listeners", get("listeners"), protocol_map)
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
                Endpoint(e.listener_name, _advertised_host(e.host), e.port, e.security_protocol)
                for e in self.listeners
            )
        else:
            self.advertised_listeners = _parse_endpoints("advertised.listeners", adv, protocol_map)
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
        self.group_min_session_timeout_ms: int = get("group.min.session.timeout.ms")
        self.group_max_session_timeout_ms: int = get("group.max.session.timeout.ms")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(
                "group.min.session.timeout.ms",
                f"{self.group_min_session_timeout_ms} is more than "
                f"group.max.session.timeout.ms {self.group_max_session_timeout_ms}",
            )
        self.group_consumer_session_timeout_ms: int = get("group.consumer.session.timeout.ms")
        self.group_consumer_heartbeat_interval_ms: int = get("group.consumer.heartbeat.interval.ms")
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ConfigError(
                "group.consumer.heartbeat.interval.ms",
                f"{self.group_consumer_heartbeat_interval_ms} must be less than "
                f"group.consumer.session.timeout.ms {self.group_consumer_session_timeout_ms}",
            )
        self.group_consumer_bounds: tuple[int, int, int, int] = (
            get("group.consumer.min.session.timeout.ms"),
            get("group.consumer.max.session.timeout.ms"),
            get("group.consumer.min.heartbeat.interval.ms"),
            get("group.consumer.max.heartbeat.interval.ms"),
        )
        for key, value, lo, hi in (
            ("group.consumer.session.timeout.ms", self.group_consumer_session_timeout_ms,
             *self.group_consumer_bounds[:2]),
            ("group.consumer.heartbeat.interval.ms", self.group_consumer_heartbeat_interval_ms,
             *self.group_consumer_bounds[2:]),
        ):  # fmt: skip
            if not lo <= value <= hi:
                low, high = (
                    key.replace("consumer.", "consumer.min."),
                    key.replace("consumer.", "consumer.max."),
                )
                raise ConfigError(key, f"{value} is not between {low} {lo} and {high} {hi}")
        self.group_consumer_max_size: int = get("group.consumer.max.size")
        self.group_consumer_assignors: tuple[str, ...] = tuple(
            _ASSIGNOR_CLASSES.get(a, a) for a in get("group.consumer.assignors")
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
        from tierlog.log.log_cleaner import CleanerConfig

        threads = int(self.get("log.cleaner.threads"))
        return CleanerConfig(
            num_threads=max(threads, 1),
            dedupe_buffer_size=int(self.get("log.cleaner.dedupe.buffer.size")),
            dedupe_buffer_load_factor=float(self.get("log.cleaner.io.buffer.load.factor")),
            io_buffer_size=int(self.get("log.cleaner.io.buffer.size")),
            max_message_size=int(self.get("message.max.bytes")),
            max_io_bytes_per_second=float(self.get("log.cleaner.io.max.bytes.per.second")),
            backoff_ms=int(self.get("log.cleaner.backoff.ms")),
            enable_cleaner=self.log_cleaner_enable and threads > 0,
        )

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
                is_set = any(k in self._values for k in (name, *(u for u, _ in _TIME_UNITS[name])))
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

    @staticmethod
    def _protocol_map(items: Iterable[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in items:
            name, sep, proto = item.partition(":")
            name, proto = name.strip().upper(), proto.strip().upper()
            if not sep or not name or proto not in SECURITY_PROTOCOLS:
                raise ConfigError(
                    "listener.security.protocol.map",
                    f"invalid entry {item!r}: expected NAME:PROTOCOL with PROTOCOL one of "
                    f"{', '.join(SECURITY_PROTOCOLS)}",
                )
            out[name] = proto
        return out

    @staticmethod
    def _fold_time_units(values: Mapping[str, Any]) -> dict[str, int]:
        """Effective ``log.retention.ms``, ``log.roll.ms``, ``log.roll.jitter.ms``.

        Kafka's precedence: the ms key if set, else minutes, else hours (its default).
        A negative retention means unlimited (-1), as in Kafka's logRetentionTimeMillis.
        """
        out: dict[str, int] = {}
        for ms_key, units in _TIME_UNITS.items():
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
                        default = BROKER_CONFIGS[unit_key].default
                        if default is not None:
                            ms = int(default) * factor
                            break
                if not -LONG_MAX - 1 <= ms <= LONG_MAX:
                    raise ConfigError(units[-1][0], "value out of range once converted to ms")
            if ms_key == "log.retention.ms" and ms < 0:
                ms = -1
            out[ms_key] = ms
        return out

    def _synonym_props(self) -> dict[str, str]:
        """The broker synonyms that were set, as raw strings for LogConfig.from_broker."""
        props: dict[str, str] = {}
        for name, d in BROKER_CONFIGS.items():
            if d.topic_config is None:
                continue
            if name in _TIME_UNITS:
                if any(k in self._values for k in (name, *(u for u, _ in _TIME_UNITS[name]))):
                    props[name] = str(self._effective_ms[name])
                    _parse_value(d, props[name])  # a value folded from hours must validate too
            elif name in self._values:
                props[name] = self._resolved[name]
        return props


def _advertised_host(host: str) -> str:
    """Kafka advertises the canonical host name for a listener bound to every interface."""
    if host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return host


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
