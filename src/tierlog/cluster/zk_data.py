"""Kafka's ZooKeeper layout: the znode paths and the JSON of each znode (Kafka's ``ZkData``).

Sans-IO: bytes in, values out, and back. No ZooKeeper client here (that is
:mod:`tierlog.cluster.kafka_zk_client`), so every codec is testable without a server.

The layout, as a Kafka 3.7 broker in ZooKeeper mode writes it (``zkCli.sh`` shows the same)::

    /cluster/id                                  {"version":"1","id":"<22-char base64 uuid>"}
    /brokers/ids/<id>            ephemeral       v5 broker registration (BrokerInfo)
    /brokers/topics/<t>                          v3 replica assignment + topic id (TopicAssignment)
    /brokers/topics/<t>/partitions/<p>/state     leader, leader_epoch, isr, controller_epoch
                                                 (PartitionState; znode version = partition epoch)
    /controller                  ephemeral       {"version":2,"brokerid":1,"timestamp":"<ms>",
                                                  "kraftControllerEpoch":-1} (ControllerInfo)
    /controller_epoch                            plain decimal text; its znode version is the
                                                 controller's fencing token
    /config/topics/<t>                           {"version":1,"config":{"k":"v"}}
    /config/brokers/<default>, /config/brokers/<id>
                                                 dynamic broker configs, the same JSON
    /config/changes/config_change_<10 digits>    persistent sequential {"version":2,
                                                  "entity_path":"topics/<t>"} (or
                                                  "brokers/<default>", "brokers/<id>")
    /admin/delete_topics/<t>                     empty: topic marked for deletion
    /admin/preferred_replica_election            {"version":1,"partitions":[{"topic":t,
                                                  "partition":p}]}
    /admin/reassign_partitions                   {"version":1,"partitions":[{"topic":t,
                                                  "partition":p,"replicas":[..]}]}
    /isr_change_notification/isr_change_<seq>   {"version":1,"partitions":[...]}
    /admin/controlled_shutdown/<id>              tierlog's own: {"version":1,"broker_epoch":E}

``/admin/controlled_shutdown`` is not Kafka's: a ZooKeeper-mode Kafka broker sends the
ControlledShutdown request (API 7) to the controller, but that schema left with ZooKeeper
in Kafka 4, so tierlog's brokers ask through this znode instead.

Decoders raise :class:`ValueError` naming the znode and what is wrong with it: a znode that
does not parse is a bug or a foreign writer, never a state to guess around. Encoders write
compact JSON (Jackson's separators) with the keys in a fixed order; Kafka's own key order is
its hash-map order, which no reader depends on.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.log.partition_metadata_file import kafka_str_to_uuid, uuid_to_kafka_str

# --------------------------------------------------------------------------- paths

CLUSTER_ID_PATH = "/cluster/id"
BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_SEQUENCE_ID_PATH = "/brokers/seqid"
BROKER_TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
CONFIG_PATH = "/config"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_BROKERS_PATH = "/config/brokers"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
CONTROLLED_SHUTDOWN_PATH = "/admin/controlled_shutdown"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
CONSUMERS_PATH = "/consumers"
LATEST_PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"

#: Kafka's ``ConfigType.all``: one ``/config/<type>`` node each.
CONFIG_TYPES = ("topics", "clients", "users", "brokers", "ips")

#: Created at every broker's startup when absent (Kafka's ``ZkData.PersistentZkPaths``), plus
#: tierlog's controlled-shutdown node.
PERSISTENT_ZK_PATHS: tuple[str, ...] = (
    CONSUMERS_PATH,
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    BROKER_SEQUENCE_ID_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LATEST_PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    *(f"{CONFIG_PATH}/{t}" for t in CONFIG_TYPES),
    CONTROLLED_SHUTDOWN_PATH,
)

# Kafka's Topic.LEGAL_CHARS and MAX_NAME_LENGTH: a topic name is one path component.
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _topic(topic: str) -> str:
    if not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ValueError(f"{topic!r} is not a legal topic name (it would not be one znode)")
    return topic


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS_PATH}/{_topic(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def config_topic_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{_topic(topic)}"


def config_broker_path(entity: str) -> str:
    """``/config/brokers/<default>`` (the cluster-wide default) or ``/config/brokers/<id>``."""
    if entity != "<default>" and not entity.isdigit():
        raise ValueError(f"not a broker config entity: {entity!r}")
    return f"{CONFIG_BROKERS_PATH}/{entity}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{_topic(topic)}"


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN_PATH}/{broker_id}"


# --------------------------------------------------------------------------- JSON helpers


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(data: bytes | None, where: str) -> dict[str, Any]:
    """The JSON object in ``data``, or ValueError naming ``where``."""
    if data is None:
        raise ValueError(f"{where}: no data")
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{where}: not JSON ({e}): {data[:200]!r}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: a JSON {type(obj).__name__}, not an object: {data[:200]!r}")
    return obj


def _dump(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _get(obj: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise ValueError(f"{where}: no {key!r} field")
    return obj[key]


def _as_int(value: Any, what: str, where: str) -> int:
    # bool is an int in Python, not in JSON
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where}: {what} is {value!r}, not an integer")
    return value


def _int(obj: Mapping[str, Any], key: str, where: str) -> int:
    return _as_int(_get(obj, key, where), repr(key), where)


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = _get(obj, key, where)
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key!r} is {value!r}, not a string")
    return value


def _ints(value: Any, what: str, where: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: {what} is {value!r}, not a list")
    return tuple(_as_int(v, f"an element of {what}", where) for v in value)


def _object(value: Any, what: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {what} is {value!r}, not an object")
    return value


def _partition_key(key: str, what: str, where: str) -> int:
    if not re.fullmatch(r"-?[0-9]+", key):
        raise ValueError(f"{where}: {what} has key {key!r}, not a partition number")
    return int(key)


# --------------------------------------------------------------------------- /cluster/id


def encode_cluster_id(cluster_id: str) -> bytes:
    """``{"version":"1","id":...}`` (the version is a string here, as Kafka writes it)."""
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    """Raises:
    ValueError: not Kafka's cluster id JSON."""
    return _str(_parse(data, CLUSTER_ID_PATH), "id", CLUSTER_ID_PATH)


# --------------------------------------------------------------------------- /brokers/ids/<id>

#: Kafka's default listener-name to security-protocol map, used by registrations without
#: ``listener_security_protocol_map`` (v2 and v3).
DEFAULT_SECURITY_PROTOCOL_MAP: Mapping[str, str] = {
    p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
}

# Kafka's EndPoint.uriParseExp: LISTENER://host:port, the host optionally in brackets (IPv6).
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class BrokerEndPoint:
    """One advertised listener of a broker (Kafka's ``EndPoint``)."""

    listener: str
    host: str
    port: int
    security_protocol: str

    def connection_string(self) -> str:
        """``LISTENER://host:port``, an IPv6 host in brackets (Kafka's ``connectionString``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"

    @classmethod
    def parse(
        cls, connection_string: str, security_protocols: Mapping[str, str], where: str = "endpoint"
    ) -> BrokerEndPoint:
        """The inverse of :meth:`connection_string`; the protocol comes from the map.

        Raises:
            ValueError: not ``LISTENER://host:port``, or a listener missing from the map.
        """
        m = _ENDPOINT.match(connection_string)
        if m is None:
            raise ValueError(f"{where}: endpoint {connection_string!r} is not LISTENER://host:port")
        listener, host, port = m.group(1), m.group(2), int(m.group(3))
        protocol = security_protocols.get(listener)
        if protocol is None:
            raise ValueError(
                f"{where}: endpoint {connection_string!r}: listener {listener!r} has no "
                f"security protocol in {dict(security_protocols)}"
            )
        return cls(listener, host, port, protocol)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker's registration at ``/brokers/ids/<id>`` (Kafka's ``BrokerInfo`` v5).

    ``epoch`` is the broker epoch: the czxid of the registration znode (KIP-380), -1 until
    registered. It is not in the JSON. ``features`` maps a feature name to its supported
    ``(min_version, max_version)``; a ZooKeeper-mode Kafka broker writes ``{}``.
    """

    id: int
    endpoints: tuple[BrokerEndPoint, ...]
    rack: str | None
    epoch: int = -1
    # not hashed (a dict), still compared: equal infos hash alike
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict, hash=False)

    VERSION = 5

    def endpoint(self, listener: str) -> BrokerEndPoint | None:
        """The endpoint of ``listener`` (a listener name, e.g. ``PLAINTEXT``), or None."""
        for ep in self.endpoints:
            if ep.listener == listener:
                return ep
        return None

    def encode(self, timestamp_ms: int | None = None, jmx_port: int = -1) -> bytes:
        """The v5 JSON. ``host``/``port`` are the first PLAINTEXT endpoint's (null/-1 without
        one) for clients older than 0.10; ``rack`` only when set; ``timestamp`` now unless
        given."""
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        plaintext = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        obj: dict[str, Any] = {
            "version": self.VERSION,
            "host": plaintext.host if plaintext else None,
            "port": plaintext.port if plaintext else -1,
            "jmx_port": jmx_port,
            "timestamp": str(timestamp_ms),
            "endpoints": [e.connection_string() for e in self.endpoints],
            "listener_security_protocol_map": {
                e.listener: e.security_protocol for e in self.endpoints
            },
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        obj["features"] = {
            name: {"min_version": lo, "max_version": hi} for name, (lo, hi) in self.features.items()
        }
        return _dump(obj)

    @classmethod
    def decode(cls, broker_id: int, data: bytes | None, czxid: int = -1) -> BrokerInfo:
        """The registration of ``broker_id``; ``czxid`` (the znode's) becomes the epoch.
        Reads every version Kafka wrote (v1: host/port only).

        Raises:
            ValueError: the JSON is not a broker registration.
        """
        where = broker_path(broker_id)
        obj = _parse(data, where)
        version = _int(obj, "version", where)
        if version < 1:
            raise ValueError(f"{where}: unsupported registration version {version}")
        if version == 1:
            host = _str(obj, "host", where)
            endpoints: tuple[BrokerEndPoint, ...] = (
                BrokerEndPoint("PLAINTEXT", host, _int(obj, "port", where), "PLAINTEXT"),
            )
        else:
            raw_map = obj.get("listener_security_protocol_map")
            if raw_map is None:
                protocols: Mapping[str, str] = DEFAULT_SECURITY_PROTOCOL_MAP
            else:
                protocols = _object(raw_map, "'listener_security_protocol_map'", where)
                for k, v in protocols.items():
                    if not isinstance(v, str):
                        raise ValueError(f"{where}: security protocol of {k!r} is {v!r}")
            raw_endpoints = _get(obj, "endpoints", where)
            if not isinstance(raw_endpoints, list) or not all(
                isinstance(e, str) for e in raw_endpoints
            ):
                raise ValueError(f"{where}: 'endpoints' is {raw_endpoints!r}, not a string list")
            endpoints = tuple(BrokerEndPoint.parse(e, protocols, where) for e in raw_endpoints)
        rack = obj.get("rack")
        if rack is not None and not isinstance(rack, str):
            raise ValueError(f"{where}: 'rack' is {rack!r}, not a string")
        features: dict[str, tuple[int, int]] = {}
        for name, rng in _object(obj.get("features", {}), "'features'", where).items():
            rng = _object(rng, f"feature {name!r}", where)
            features[name] = (
                _int(rng, "min_version", where),
                _int(rng, "max_version", where),
            )
        return cls(broker_id, endpoints, rack, czxid, features)


# --------------------------------------------------------------------------- /controller

#: Kafka's ``KafkaController.InitialControllerEpoch`` and its znode version.
INITIAL_CONTROLLER_EPOCH = 0
INITIAL_CONTROLLER_EPOCH_ZK_VERSION = 0


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    """``/controller``: who won the election (Kafka's ``ControllerZNode``, v2).
    ``kraft_controller_epoch`` is -1 unless a KRaft controller took over (ZK migration)."""

    broker_id: int
    timestamp: int
    kraft_controller_epoch: int = -1

    VERSION = 2

    def encode(self) -> bytes:
        return _dump(
            {
                "version": self.VERSION,
                "brokerid": self.broker_id,
                "timestamp": str(self.timestamp),
                "kraftControllerEpoch": self.kraft_controller_epoch,
            }
        )

    @classmethod
    def decode(cls, data: bytes | None) -> ControllerInfo:
        """Reads v1 (no ``kraftControllerEpoch``) and v2.

        Raises:
            ValueError: not the controller JSON.
        """
        where = CONTROLLER_PATH
        obj = _parse(data, where)
        ts = obj.get("timestamp", "-1")
        if not isinstance(ts, str) or not re.fullmatch(r"-?[0-9]+", ts):
            raise ValueError(f"{where}: 'timestamp' is {ts!r}, not a decimal string")
        kraft = obj.get("kraftControllerEpoch", -1)
        return cls(
            _int(obj, "brokerid", where),
            int(ts),
            _as_int(kraft, "'kraftControllerEpoch'", where),
        )


def encode_controller_epoch(epoch: int) -> bytes:
    """``/controller_epoch`` holds the epoch as plain decimal text, not JSON."""
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    """Raises:
    ValueError: not a decimal integer."""
    text = (data or b"").decode("utf-8", errors="replace")
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ValueError(f"{CONTROLLER_EPOCH_PATH}: {data!r} is not a decimal integer")
    return int(text)


# --------------------------------------------------------------------------- partition state

#: Kafka's ``LeaderAndIsr`` sentinels.
NO_LEADER = -1
LEADER_DURING_DELETE = -2
INITIAL_LEADER_EPOCH = 0
INITIAL_PARTITION_EPOCH = 0
#: KIP-704 ``LeaderRecoveryState``.
RECOVERED = 0
RECOVERING = 1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<p>/state`` (Kafka's ``LeaderIsrAndControllerEpoch``).

    ``zk_version`` is the znode's version, Kafka's *partition epoch*: the token of every
    compare-and-set on this znode. It is not in the JSON; -1 for a state not read from
    ZooKeeper. ``leader_recovery_state`` is written only when RECOVERING (1).
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = RECOVERED
    zk_version: int = -1

    VERSION = 1

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": self.VERSION,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "controller_epoch": self.controller_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state != RECOVERED:
            obj["leader_recovery_state"] = self.leader_recovery_state
        return _dump(obj)

    @classmethod
    def decode(cls, data: bytes | None, zk_version: int, path: str | None = None) -> PartitionState:
        """The state in ``data``, with the znode version ``zk_version``.

        Raises:
            ValueError: not a partition state (named by ``path`` when given).
        """
        where = path or "partition state znode"
        obj = _parse(data, where)
        recovery = _as_int(obj.get("leader_recovery_state", RECOVERED), "recovery", where)
        if recovery not in (RECOVERED, RECOVERING):
            raise ValueError(f"{where}: 'leader_recovery_state' is {recovery}, not 0 or 1")
        return cls(
            leader=_int(obj, "leader", where),
            leader_epoch=_int(obj, "leader_epoch", where),
            isr=_ints(_get(obj, "isr", where), "'isr'", where),
            controller_epoch=_int(obj, "controller_epoch", where),
            leader_recovery_state=recovery,
            zk_version=zk_version,
        )


# --------------------------------------------------------------------------- /brokers/topics/<t>


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/brokers/topics/<t>``: the replicas of each partition and the topic id (v3).

    ``adding``/``removing`` hold the replicas being added or removed by a reassignment in
    progress (KIP-455), only for partitions being reassigned. ``zk_version`` is the znode's
    version (-1 when not read from ZooKeeper), the token for a compare-and-set.
    """

    name: str
    topic_id: uuid.UUID | None
    # the maps are compared but not hashed (dicts): equal assignments hash alike
    partitions: Mapping[int, tuple[int, ...]] = field(hash=False)
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict, hash=False)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict, hash=False)
    zk_version: int = -1

    VERSION = 3

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": self.VERSION,
            "partitions": {str(p): list(r) for p, r in sorted(self.partitions.items())},
            "adding_replicas": {str(p): list(r) for p, r in sorted(self.adding.items()) if r},
            "removing_replicas": {str(p): list(r) for p, r in sorted(self.removing.items()) if r},
        }
        if self.topic_id is not None:
            obj["topic_id"] = uuid_to_kafka_str(self.topic_id)
        return _dump(obj)

    @classmethod
    def decode(cls, name: str, data: bytes | None, zk_version: int = -1) -> TopicAssignment:
        """Reads v1-v3 (v1 has only ``partitions``).

        Raises:
            ValueError: not a topic assignment (bad partition keys, replicas, topic id).
        """
        where = topic_path(name)
        obj = _parse(data, where)
        raw_id = obj.get("topic_id")
        topic_id = None
        if raw_id is not None:
            if not isinstance(raw_id, str):
                raise ValueError(f"{where}: 'topic_id' is {raw_id!r}, not a string")
            try:
                topic_id = kafka_str_to_uuid(raw_id)
            except ValueError as e:
                raise ValueError(f"{where}: 'topic_id': {e}") from None

        def replica_map(key: str) -> dict[int, tuple[int, ...]]:
            raw = _object(obj.get(key, {}), repr(key), where)
            return {
                _partition_key(p, repr(key), where): _ints(r, f"{key}[{p!r}]", where)
                for p, r in raw.items()
            }

        return cls(
            name,
            topic_id,
            replica_map("partitions"),
            {p: r for p, r in replica_map("adding_replicas").items() if r},
            {p: r for p, r in replica_map("removing_replicas").items() if r},
            zk_version,
        )


# --------------------------------------------------------------------------- /config


def encode_topic_config(config: Mapping[str, str]) -> bytes:
    """``{"version":1,"config":{...}}``; only overrides, all values strings."""
    return _dump({"version": 1, "config": dict(config)})


def decode_topic_config(data: bytes | None, path: str = CONFIG_TOPICS_PATH) -> dict[str, str]:
    """The overrides; empty data (a node created without any) gives ``{}``, as in Kafka.

    Raises:
        ValueError: not a config JSON, or a value that is not a string.
    """
    if not data:
        return {}
    obj = _parse(data, path)
    config = _object(obj.get("config") or {}, "'config'", path)
    for k, v in config.items():
        if not isinstance(v, str):
            raise ValueError(f"{path}: config {k!r} is {v!r}, not a string")
    return config


def encode_config_change_notification(entity_path: str) -> bytes:
    """The v2 ``/config/changes/config_change_<seq>`` notification, e.g. ``topics/t``."""
    return _dump({"version": 2, "entity_path": entity_path})


def decode_config_change_notification(data: bytes | None) -> str:
    """The changed entity's path (v2), or ``<entity_type>/<entity_name>`` (v1).

    Raises:
        ValueError: not a notification.
    """
    where = CONFIG_CHANGES_PATH
    obj = _parse(data, where)
    if _int(obj, "version", where) == 1:
        return f"{_str(obj, 'entity_type', where)}/{_str(obj, 'entity_name', where)}"
    return _str(obj, "entity_path", where)


# ------------------------------------------------------------------ /admin and notifications


def _encode_partitions(partitions: Iterable[tuple[str, int]]) -> bytes:
    return _dump(
        {
            "version": 1,
            "partitions": [{"topic": t, "partition": p} for t, p in sorted(set(partitions))],
        }
    )


def _decode_partitions(data: bytes | None, where: str) -> set[tuple[str, int]]:
    obj = _parse(data, where)
    raw = _get(obj, "partitions", where)
    if not isinstance(raw, list):
        raise ValueError(f"{where}: 'partitions' is {raw!r}, not a list")
    out: set[tuple[str, int]] = set()
    for entry in raw:
        entry = _object(entry, "a 'partitions' element", where)
        out.add((_str(entry, "topic", where), _int(entry, "partition", where)))
    return out


def encode_preferred_replica_election(partitions: Iterable[tuple[str, int]]) -> bytes:
    return _encode_partitions(partitions)


def decode_preferred_replica_election(data: bytes | None) -> set[tuple[str, int]]:
    """Raises:
    ValueError: not Kafka's preferred-replica-election JSON."""
    return _decode_partitions(data, PREFERRED_REPLICA_ELECTION_PATH)


def encode_isr_change_notification(partitions: Iterable[tuple[str, int]]) -> bytes:
    return _encode_partitions(partitions)


def decode_isr_change_notification(data: bytes | None) -> set[tuple[str, int]]:
    """Raises:
    ValueError: not Kafka's ISR-change notification JSON."""
    return _decode_partitions(data, ISR_CHANGE_NOTIFICATION_PATH)


def encode_reassign_partitions(reassignment: Mapping[tuple[str, int], Iterable[int]]) -> bytes:
    """The deprecated (pre-KIP-455) ``/admin/reassign_partitions`` request."""
    return _dump(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r)}
                for (t, p), r in sorted(reassignment.items())
            ],
        }
    )


def decode_reassign_partitions(data: bytes | None) -> dict[tuple[str, int], tuple[int, ...]]:
    """Raises:
    ValueError: not Kafka's reassignment JSON."""
    where = REASSIGN_PARTITIONS_PATH
    raw = _get(_parse(data, where), "partitions", where)
    if not isinstance(raw, list):
        raise ValueError(f"{where}: 'partitions' is {raw!r}, not a list")
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    for entry in raw:
        entry = _object(entry, "a 'partitions' element", where)
        tp = (_str(entry, "topic", where), _int(entry, "partition", where))
        out[tp] = _ints(_get(entry, "replicas", where), "'replicas'", where)
    return out


def encode_controlled_shutdown(broker_epoch: int) -> bytes:
    """tierlog's ``/admin/controlled_shutdown/<id>``: the asking broker's epoch, so the
    controller ignores a request left by an earlier incarnation (KIP-380's check)."""
    return _dump({"version": 1, "broker_epoch": broker_epoch})


def decode_controlled_shutdown(data: bytes | None, path: str = CONTROLLED_SHUTDOWN_PATH) -> int:
    """The broker epoch in a controlled-shutdown request.

    Raises:
        ValueError: not the request JSON.
    """
    return _int(_parse(data, path), "broker_epoch", path)


__all__ = [
    # paths
    "CLUSTER_ID_PATH", "BROKERS_PATH", "BROKER_IDS_PATH", "BROKER_SEQUENCE_ID_PATH",
    "BROKER_TOPICS_PATH", "CONTROLLER_PATH", "CONTROLLER_EPOCH_PATH", "CONFIG_PATH",
    "CONFIG_TOPICS_PATH", "CONFIG_CHANGES_PATH", "CONFIG_CHANGE_PREFIX", "ADMIN_PATH",
    "DELETE_TOPICS_PATH", "CONTROLLED_SHUTDOWN_PATH", "PREFERRED_REPLICA_ELECTION_PATH",
    "REASSIGN_PARTITIONS_PATH", "ISR_CHANGE_NOTIFICATION_PATH", "ISR_CHANGE_PREFIX",
    "LOG_DIR_EVENT_NOTIFICATION_PATH", "CONSUMERS_PATH", "LATEST_PRODUCER_ID_BLOCK_PATH",
    "CONFIG_TYPES", "PERSISTENT_ZK_PATHS",
    "broker_path", "topic_path", "partitions_path", "partition_path", "partition_state_path",
    "config_topic_path", "delete_topic_path", "controlled_shutdown_path",
    # values
    "BrokerEndPoint", "BrokerInfo", "DEFAULT_SECURITY_PROTOCOL_MAP",
    "ControllerInfo", "INITIAL_CONTROLLER_EPOCH", "INITIAL_CONTROLLER_EPOCH_ZK_VERSION",
    "PartitionState", "NO_LEADER", "LEADER_DURING_DELETE", "INITIAL_LEADER_EPOCH",
    "INITIAL_PARTITION_EPOCH", "RECOVERED", "RECOVERING",
    "TopicAssignment",
    # codecs
    "encode_cluster_id", "decode_cluster_id",
    "encode_controller_epoch", "decode_controller_epoch",
    "encode_topic_config", "decode_topic_config",
    "encode_config_change_notification", "decode_config_change_notification",
    "encode_preferred_replica_election", "decode_preferred_replica_election",
    "encode_isr_change_notification", "decode_isr_change_notification",
    "encode_reassign_partitions", "decode_reassign_partitions",
    "encode_controlled_shutdown", "decode_controlled_shutdown",
]  # fmt: skip
