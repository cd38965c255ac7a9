"""Config APIs: DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Topic configs are described in full (every config with its value, source and, on request,
synonyms and documentation) and altered as topic overrides (in a cluster through ZooKeeper).
The broker resource lists the broker's configs with their sources; the dynamic ones
(:mod:`tierlog.server.dynamic_broker_config`) can be altered, for this broker (its id) or the
whole cluster (``""``), the others are read-only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    ApiError,
    ConfigError,
    InvalidConfig,
    InvalidRequest,
    UnknownServerError,
    UnknownTopicOrPartition,
    ZooKeeperClientError,
)
from tierlog.log.log_config import TOPIC_CONFIGS, LogConfig, format_value
from tierlog.log.topic_names import INTERNAL_TOPICS
from tierlog.security.acl_checks import require_config_resource
from tierlog.security.authorizer import AclOperation
from tierlog.server.dynamic_broker_config import DescribedConfig, DynamicBrokerConfig
from tierlog.server.handlers._build import build
from tierlog.server.handlers._results import answered_per_resource
from tierlog.server.handlers.group_configs import (
    RESOURCE_GROUP,
    alter_group_configs,
    describe_group_configs,
    incremental_group_overrides,
)
from tierlog.server.kafka_apis import response_class
from tierlog.server.kafka_config import BROKER_CONFIGS, KafkaConfig

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44

# ConfigResource.Type
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# DescribeConfigsResponse.ConfigSource
SOURCE_IDS = {
    "UNKNOWN": 0,
    "TOPIC_CONFIG": 1,
    "DYNAMIC_TOPIC_CONFIG": 1,
    "DYNAMIC_BROKER_CONFIG": 2,
    "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
    "STATIC_BROKER_CONFIG": 4,
    "DEFAULT_CONFIG": 5,
}

# DescribeConfigsResponse.ConfigType
TYPE_IDS = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
}

# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _topic_synonyms(config: LogConfig, name: str) -> list[dict[str, Any]]:
    """Kafka's synonym chain, most specific first: topic override, broker config, default."""
    d = TOPIC_CONFIGS[name]
    out = []
    if name in config.overrides:
        out.append(
            {
                "name": name,
                "value": format_value(name, config.values[name]),
                "source": SOURCE_IDS["DYNAMIC_TOPIC_CONFIG"],
            }
        )
    broker_default = config.defaults()
    if d.synonym and name in config.broker_defaults:
        out.append(
            {
                "name": d.synonym,
                "value": format_value(name, broker_default.values[name]),
                "source": SOURCE_IDS["STATIC_BROKER_CONFIG"],
            }
        )
    out.append(
        {
            "name": d.synonym or name,
            "value": format_value(name, d.default),
            "source": SOURCE_IDS["DEFAULT_CONFIG"],
        }
    )
    return out


def _describe_topic(
    config: LogConfig, keys: Any, synonyms: bool, documentation: bool, version: int
) -> list[dict[str, Any]]:
    names = sorted(config.values) if not keys else [k for k in keys if k in TOPIC_CONFIGS]
    rows = []
    for name in names:
        d = TOPIC_CONFIGS[name]
        source = config.source_of(name)
        rows.append(
            {
                "name": name,
                "value": format_value(name, config.values[name]),
                "read_only": False,
                "is_default": source == "DEFAULT_CONFIG",
                "config_source": SOURCE_IDS.get(source, 0),
                "is_sensitive": False,
                "synonyms": _topic_synonyms(config, name) if synonyms else [],
                "config_type": TYPE_IDS.get(d.type, 0),
                "documentation": d.doc if documentation else None,
            }
        )
    return rows


def _describe_broker(
    apis: KafkaApis, resource_name: str, keys: Any, synonyms: bool, documentation: bool
) -> list[dict[str, Any]]:
    """The broker's configs (``resource_name`` its id), or the cluster-wide dynamic defaults
    (``""``), each with its source and synonyms (dynamic broker, dynamic default, static,
    default), as Kafka's DescribeConfigs answers."""
    dynamic = apis.dynamic_config
    if dynamic is None:
        if not _is_this_broker(apis, resource_name):
            raise InvalidRequest(f"unknown broker {resource_name}")
        described = [
            DescribedConfig(e, ((e.name, e.value, e.source),)) for e in apis.config.describe()
        ]
    else:
        entity = DynamicBrokerConfig.entity_of(resource_name, apis.node_id)
        described = dynamic.describe(entity)
    rows = []
    wanted = set(keys) if keys else None
    for d in described:
        e = d.entry
        if wanted is not None and e.name not in wanted:
            continue
        rows.append(
            {
                "name": e.name,
                "value": e.value,
                "read_only": e.read_only,
                "is_default": e.source == "DEFAULT_CONFIG",
                "config_source": SOURCE_IDS.get(e.source, 0),
                "is_sensitive": e.sensitive,
                "synonyms": [
                    {"name": n, "value": v, "source": SOURCE_IDS.get(src, 0)}
                    for n, v, src in d.synonyms
                ]
                if synonyms
                else [],
                "config_type": TYPE_IDS.get(e.config_type.lower(), 0),
                "documentation": e.documentation if documentation else None,
            }
        )
    return rows


def _is_this_broker(apis: KafkaApis, resource_name: str) -> bool:
    return resource_name in ("", str(apis.node_id))


def handle_describe_configs(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    synonyms = bool(getattr(req, "include_synonyms", False))
    documentation = bool(getattr(req, "include_documentation", False))
    results = []
    for r in req.resources:
        res: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [],
        }
        try:
            require_config_resource(
                apis, AclOperation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name
            )
            if r.resource_type == RESOURCE_TOPIC:
                config = apis.topic_config(r.resource_name)
                if config is None:
                    raise UnknownTopicOrPartition(f"unknown topic {r.resource_name}")
                res["configs"] = _describe_topic(
                    config, r.configuration_keys, synonyms, documentation, ev.api_version
                )
            elif r.resource_type == RESOURCE_BROKER:
                res["configs"] = _describe_broker(
                    apis, r.resource_name, r.configuration_keys, synonyms, documentation
                )
            elif r.resource_type == RESOURCE_BROKER_LOGGER:
                res["configs"] = []
            elif r.resource_type == RESOURCE_GROUP:
                res["configs"] = describe_group_configs(
                    apis, r.resource_name, r.configuration_keys, synonyms, documentation
                )
            else:
                raise InvalidRequest(f"unsupported resource type {r.resource_type}")
        except ApiError as e:
            res["error_code"], res["error_message"] = e.error_code, e.message
        results.append(res)
    return build(
        response_class(DESCRIBE_CONFIGS, ev.api_version), {"throttle_time": 0, "results": results}
    )


@dataclass(frozen=True, slots=True)
class _ZooKeeperWrite:
    """What an alter of a cluster leaves to do after its checks: a blocking ZooKeeper write,
    run in a thread so the event loop goes on (without ZooKeeper it waits for
    ``zookeeper.connection.timeout.ms``), then what applies it on this broker, if anything,
    back on the event loop."""

    write: Callable[[], None]
    done: str  # the log line once written
    then: Callable[[], None] | None = None


def _apply_topic_config(
    apis: KafkaApis,
    topic: str,
    overrides: Mapping[str, str | None],
    *,
    incremental: bool,
    validate_only: bool,
) -> _ZooKeeperWrite | None:
    lm = apis.log_manager
    current = apis.topic_config(topic)
    if current is None:
        raise UnknownTopicOrPartition(f"unknown topic {topic}")
    for name in overrides:
        if name not in TOPIC_CONFIGS:
            raise ConfigError(name, "unknown topic config")
    sets = {k: v for k, v in overrides.items() if v is not None}
    deletes = {k for k, v in overrides.items() if v is None}
    config: LogConfig = current
    if incremental:
        new = config.with_overrides(sets).without(deletes)
    else:
        new = config.with_overrides(sets, replace=True)
    new.validate()
    was_remote, now_remote = config.remote_storage_enable, new.remote_storage_enable
    if now_remote and topic in INTERNAL_TOPICS:
        raise ConfigError("remote.storage.enable", f"internal topic {topic} is never tiered")
    if was_remote and not now_remote and not new.get("remote.log.delete.on.disable"):
        # Kafka's validateTurningOffRemoteStorageWithDelete.
        raise ConfigError(
            "remote.storage.enable",
            "it is invalid to disable remote storage without deleting remote data. To keep the "
            "remote data and make the topic read only, set remote.storage.enable=true and "
            "remote.log.copy.disable=true. To disable remote storage and delete all remote "
            "data, set remote.storage.enable=false and remote.log.delete.on.disable=true",
        )
    if validate_only:
        return None
    if apis.cluster is not None:
        # Every replica's broker applies it from ZooKeeper (its config watch).
        return _ZooKeeperWrite(
            functools.partial(
                apis.cluster.zk.set_topic_config, topic, new.to_props(overrides_only=True)
            ),
            f"altered configs of topic {topic} in the cluster: {dict(overrides)}",
        )
    info = lm.topic(topic)
    assert info is not None  # topic_config found it
    tiered = apis.tiered
    pending = None
    if was_remote and not now_remote and tiered is not None:
        pending = tiered.before_remote_storage_disabled(info)
    try:
        lm.alter_topic_config(topic, overrides, incremental=incremental)
    except BaseException:
        if pending is not None and tiered is not None:
            tiered.pending.remove(pending)
        raise
    log.info("altered configs of topic %s: %s", topic, dict(overrides))
    if pending is not None and tiered is not None:
        tiered.after_remote_storage_disabled(pending)
    elif now_remote and not was_remote and tiered is not None:
        tiered.topic_changed(topic)
    return None


def _alter_broker_config(
    apis: KafkaApis,
    resource_name: str,
    configs_of: Callable[[Mapping[str, str], KafkaConfig], dict[str, str]],
    *,
    validate_only: bool,
) -> _ZooKeeperWrite | None:
    """Dynamic broker configs of this broker (``resource_name`` its id) or of the cluster
    (``""``): ``configs_of(current dynamic configs, current config)`` gives the new set."""
    dynamic = apis.dynamic_config
    if dynamic is None:
        raise InvalidRequest("this broker has no dynamic configs")
    entity = DynamicBrokerConfig.entity_of(resource_name, apis.node_id)
    new = configs_of(dynamic.dynamic[entity], dynamic.current)
    done = f"altered dynamic configs of broker entity {entity}: {new}"
    if apis.cluster is not None:  # the store is ZooKeeper's /config/brokers
        dynamic.validate(entity, new)
        if validate_only:
            return None
        return _ZooKeeperWrite(
            functools.partial(dynamic.store.save, entity, new),
            done,
            functools.partial(dynamic.update, entity, new),
        )
    dynamic.alter(entity, new, validate_only=validate_only)
    if not validate_only:
        log.info("%s", done)
    return None


def _alter_config_results(
    apis: KafkaApis,
    resources: Any,
    overrides_of: Callable[[Any], dict[str, str | None]],
    broker_configs_of: Callable[[Any], Callable[[Mapping[str, str], KafkaConfig], dict[str, str]]],
    *,
    incremental: bool,
    validate_only: bool,
) -> list[dict[str, Any]] | Awaitable[list[dict[str, Any]]]:
    """One result per resource of an (Incremental)AlterConfigs request: topic configs are
    applied (``overrides_of`` turns a resource's entries into overrides), broker configs are
    dynamic broker configs (``broker_configs_of``); errors are answered per resource. A
    cluster's alter returns an awaitable of the results, done once its ZooKeeper writes
    are."""
    results = []
    later: list[tuple[dict[str, Any], _ZooKeeperWrite]] = []
    for r in resources:
        res: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
        }
        with answered_per_resource(res, f"altering the configs of {r.resource_name}"):
            require_config_resource(
                apis, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name
            )
            write = None
            if r.resource_type == RESOURCE_TOPIC:
                write = _apply_topic_config(
                    apis,
                    r.resource_name,
                    overrides_of(r),
                    incremental=incremental,
                    validate_only=validate_only,
                )
            elif r.resource_type == RESOURCE_BROKER:
                write = _alter_broker_config(
                    apis, r.resource_name, broker_configs_of(r), validate_only=validate_only
                )
            elif r.resource_type == RESOURCE_GROUP:
                alter_group_configs(
                    apis,
                    r.resource_name,
                    overrides_of(r),
                    incremental=incremental,
                    validate_only=validate_only,
                )
            else:
                raise InvalidRequest(f"unsupported resource type {r.resource_type}")
            if write is not None:
                later.append((res, write))
        results.append(res)
    if not later:
        return results
    return _write_to_zookeeper(later, results)


async def _write_to_zookeeper(
    later: list[tuple[dict[str, Any], _ZooKeeperWrite]], results: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Run the ZooKeeper writes of a cluster's alter in a thread, one resource at a time;
    a failure (ZooKeeper away: "no connection to ZooKeeper at ... for N ms") is answered in
    that resource's result."""
    for res, w in later:
        with answered_per_resource(res, f"altering the configs of {res['resource_name']}"):
            try:
                await asyncio.to_thread(w.write)
            except ZooKeeperClientError as e:
                raise UnknownServerError(str(e)) from e
            log.info("%s", w.done)
            if w.then is not None:
                w.then()
    return results


def handle_alter_configs(apis: KafkaApis, ev: Request) -> Any:
    def overrides_of(r: Any) -> dict[str, str | None]:
        overrides: dict[str, str | None] = {}
        for c in r.configs:
            if c.value is None:
                raise InvalidConfig(f"null value for config {c.name}")
            overrides[c.name] = c.value
        return overrides

    def broker_configs_of(r: Any) -> Callable[[Mapping[str, str], KafkaConfig], dict[str, str]]:
        # AlterConfigs: the given configs become the entity's whole set.
        return lambda _current, _config: {k: v for k, v in overrides_of(r).items() if v}

    results = _alter_config_results(
        apis,
        ev.request.resources,
        overrides_of,
        broker_configs_of,
        incremental=False,
        validate_only=bool(getattr(ev.request, "validate_only", False)),
    )
    cls = response_class(ALTER_CONFIGS, ev.api_version)
    return _respond(results, lambda rs: build(cls, {"throttle_time": 0, "responses": rs}))


def handle_incremental_alter_configs(apis: KafkaApis, ev: Request) -> Any:
    def overrides_of(r: Any) -> dict[str, str | None]:
        if r.resource_type == RESOURCE_GROUP:
            return incremental_group_overrides(r.configs)
        info = apis.log_manager.topic(r.resource_name)
        if info is None:
            raise UnknownTopicOrPartition(f"unknown topic {r.resource_name}")
        return _incremental_overrides(info.config, r.configs)

    def broker_configs_of(r: Any) -> Callable[[Mapping[str, str], KafkaConfig], dict[str, str]]:
        return lambda current, config: _incremental_broker_configs(current, config, r.configs)

    results = _alter_config_results(
        apis,
        ev.request.resources,
        overrides_of,
        broker_configs_of,
        incremental=True,
        validate_only=bool(getattr(ev.request, "validate_only", False)),
    )
    cls = response_class(INCREMENTAL_ALTER_CONFIGS, ev.api_version)
    return _respond(results, lambda rs: build(cls, {"throttle_time": 0, "responses": rs}))


def _respond(
    results: list[dict[str, Any]] | Awaitable[list[dict[str, Any]]],
    respond: Callable[[list[dict[str, Any]]], Any],
) -> Any:
    """The response now, or an awaitable of it when ZooKeeper writes are left to do."""
    if isinstance(results, list):
        return respond(results)

    async def later() -> Any:
        return respond(await results)

    return later()


def _incremental_overrides(config: LogConfig, ops: Any) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    seen: set[str] = set()
    for c in ops:
        if c.name in seen:
            raise InvalidRequest(f"config {c.name} appears more than once")
        seen.add(c.name)
        d = TOPIC_CONFIGS.get(c.name)
        if d is None:
            raise ConfigError(c.name, "unknown topic config")
        op = c.config_operation
        if op == OP_SET:
            if c.value is None:
                raise InvalidConfig(f"null value for config {c.name}")
            out[c.name] = c.value
        elif op == OP_DELETE:
            out[c.name] = None
        elif op in (OP_APPEND, OP_SUBTRACT):
            if d.type != "list":
                raise InvalidConfig(f"{c.name} is not a list config; APPEND/SUBTRACT need one")
            current = list(config.values[c.name])
            items = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if op == OP_APPEND:
                current += [x for x in items if x not in current]
            else:
                current = [x for x in current if x not in items]
            out[c.name] = ",".join(current)
        else:
            raise InvalidRequest(f"unknown config operation {op}")
    return out


def _incremental_broker_configs(
    current: Mapping[str, str], config: KafkaConfig, ops: Any
) -> dict[str, str]:
    """An entity's dynamic configs after IncrementalAlterConfigs' operations: SET, DELETE
    (back to the next source), APPEND/SUBTRACT on list configs (from the current value)."""
    out = dict(current)
    seen: set[str] = set()
    for c in ops:
        if c.name in seen:
            raise InvalidRequest(f"config {c.name} appears more than once")
        seen.add(c.name)
        op = c.config_operation
        if op == OP_SET:
            if c.value is None:
                raise InvalidRequest(f"null value for config {c.name}")
            out[c.name] = c.value
        elif op == OP_DELETE:
            out.pop(c.name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            d = BROKER_CONFIGS.get(c.name)
            if d is None or d.type != "list":
                raise InvalidRequest(f"{c.name} is not a list config; APPEND/SUBTRACT need one")
            items = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            values = list(config.get(c.name) or ())
            if op == OP_APPEND:
                values += [x for x in items if x not in values]
            else:
                values = [x for x in values if x not in items]
            out[c.name] = ",".join(values)
        else:
            raise InvalidRequest(f"unknown config operation {op}")
    return out
