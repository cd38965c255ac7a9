"""Dynamic broker configs against a real broker: the cluster-wide default (resource "") and
the broker's own (resource "0"), their sources in DescribeConfigs, changes applied without a
restart (topic defaults, message.max.bytes on the produce path, the log cleaner's threads),
kept across a restart; read-only, unknown and bad configs refused with Kafka's errors.

The broker's own configs go through confluent-kafka's AdminClient. The cluster-wide default
goes over the wire (tests/integration/wire.py): librdkafka and kafka-python both refuse a
BROKER resource named "" before sending it (Kafka's Java AdminClient, which
``kafka-configs.sh --entity-default`` uses, sends it as is)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from tests.integration import wire
from tests.integration.clients import cf_create_topic
from tests.integration.conftest import BrokerProcess, running_broker

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44


def _wire_default(b: BrokerProcess) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs v4 of the BROKER resource "": name -> (value, config_source)."""
    cls = wire.request_class(DESCRIBE_CONFIGS, 4)
    m = wire._module(cls)
    c = wire.WireClient(b.bootstrap)
    try:
        r = c.call(cls(
            resources=(m.DescribeConfigsResource(resource_type=4, resource_name="",
                                                 configuration_keys=None),),
            include_synonyms=True, include_documentation=False,
        ))  # fmt: skip
    finally:
        c.close()
    (res,) = r.results
    assert res.error_code == 0, res.error_message
    return {e.name: (e.value, e.config_source) for e in res.configs}


def _wire_alter_default(
    b: BrokerProcess, resource_name: str = "", **configs: str
) -> tuple[int, str | None]:
    """IncrementalAlterConfigs SET of a BROKER resource ("": the cluster-wide default);
    (error code, message)."""
    cls = wire.request_class(INCREMENTAL_ALTER_CONFIGS, 1)
    m = wire._module(cls)
    entries = tuple(
        m.AlterableConfig(name=k.replace("_", "."), config_operation=0, value=v)
        for k, v in configs.items()
    )
    c = wire.WireClient(b.bootstrap)
    try:
        r = c.call(cls(
            resources=(m.AlterConfigsResource(resource_type=4, resource_name=resource_name,
                                              configs=entries),),
            validate_only=False,
        ))  # fmt: skip
    finally:
        c.close()
    (res,) = r.responses
    return res.error_code, res.error_message


def _describe(a: AdminClient, rtype: Any, name: str) -> dict[str, Any]:
    res = ConfigResource(rtype, name)
    return a.describe_configs([res])[res].result(30)  # type: ignore[no-any-return]


def _broker(a: AdminClient, name: str = "0") -> dict[str, Any]:
    return _describe(a, ConfigResource.Type.BROKER, name)


def _incremental(a: AdminClient, name: str, **ops: tuple[Any, str | None]) -> None:
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=op) for k, (op, v) in ops.items()
    ]
    res = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=entries)
    a.incremental_alter_configs([res])[res].result(30)


def _refused(a: AdminClient, name: str, key: str, value: str) -> KafkaError:
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[entry])
    with pytest.raises(KafkaException) as e:
        a.incremental_alter_configs([res])[res].result(30)
    err: KafkaError = e.value.args[0]
    return err


SET = AlterConfigOpType.SET
DELETE = AlterConfigOpType.DELETE


def _produce_error(b: BrokerProcess, topic: str, size: int) -> int | None:
    """The delivery error code of one record of ``size`` bytes (None: delivered)."""
    codes: list[int | None] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "retries": 0, "message.max.bytes": 10_000_000,
                  "linger.ms": 0})  # fmt: skip

    def cb(err: Any, _msg: Any) -> None:
        codes.append(None if err is None else err.code())

    p.produce(topic, key=b"k", value=b"x" * size, partition=0, on_delivery=cb)
    assert p.flush(30) == 0
    return codes[0]


def test_dynamic_broker_configs_apply_without_restart_and_persist(tmp_path: Path) -> None:
    with running_broker(tmp_path / "broker", "log.cleaner.backoff.ms=200") as b:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        topic = "dyn"
        cf_create_topic(b.bootstrap, topic)
        before = _broker(a)
        assert before["listeners"].is_read_only
        assert before["listeners"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert not before["log.cleaner.threads"].is_read_only
        assert before["log.cleaner.threads"].source == ConfigSource.DEFAULT_CONFIG.value
        assert before["log.cleaner.backoff.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert _wire_default(b) == {}  # no cluster-wide dynamic config yet

        # The cluster-wide default, then this broker's own on top of it.
        assert _wire_alter_default(b, log_retention_ms="3600000", message_max_bytes="4000") == (
            0,
            None,
        )
        _incremental(a, "0", log_retention_ms=(SET, "7200000"), log_cleaner_threads=(SET, "2"))
        default_source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        assert _wire_default(b) == {
            "log.retention.ms": ("3600000", default_source),
            "message.max.bytes": ("4000", default_source),
        }
        now = _broker(a)
        retention = now["log.retention.ms"]
        assert retention.value == "7200000"
        assert retention.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert now["message.max.bytes"].value == "4000"
        assert now["message.max.bytes"].source == (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert now["log.cleaner.threads"].value == "2"

        # Applied at once: a topic without overrides takes the new defaults...
        topic_configs = _describe(a, ConfigResource.Type.TOPIC, topic)
        assert topic_configs["retention.ms"].value == "7200000"
        assert topic_configs["max.message.bytes"].value == "4000"
        # ...the produce path refuses what the new message.max.bytes does not allow...
        assert _produce_error(b, topic, 8000) == KafkaError.MSG_SIZE_TOO_LARGE
        assert _produce_error(b, topic, 1000) is None
        # ...and the cleaner runs the new number of threads.
        assert "starting the log cleaner with 2 threads" in b.log_since_start()

        # Kafka's refusals.
        err = _refused(a, "0", "listeners", "PLAINTEXT://127.0.0.1:1")
        assert err.code() == KafkaError.INVALID_REQUEST
        assert "Cannot update these configs dynamically: Set(listeners)" in err.str()
        err = _refused(a, "0", "log.cleaner.threads", "5")
        assert err.code() == KafkaError.INVALID_REQUEST
        assert "more than double the current value 2" in err.str()
        err = _refused(a, "0", "log.retention.mss", "1")
        assert err.code() == KafkaError.INVALID_REQUEST and "log.retention.mss" in err.str()
        code, message = _wire_alter_default(b, log_retention_ms="soon")
        assert code == KafkaError.INVALID_REQUEST and "log.retention.ms" in (message or "")
        code, message = _wire_alter_default(b, broker_id="3")
        assert code == KafkaError.INVALID_REQUEST
        assert message == "Cannot update these configs dynamically: Set(broker.id)"
        # (librdkafka would send this one to broker 7, which does not exist)
        assert _wire_alter_default(b, "7", log_retention_ms="1000") == (
            KafkaError.INVALID_REQUEST,
            "Unexpected broker id, expected 0 or empty string, but received 7",
        )
        assert _broker(a)["log.retention.ms"].value == "7200000"  # nothing changed

        # DELETE falls back to the next source; the legacy AlterConfigs replaces the set.
        _incremental(a, "0", log_retention_ms=(DELETE, None))
        assert _broker(a)["log.retention.ms"].value == "3600000"
        res = ConfigResource(
            ConfigResource.Type.BROKER, "0", set_config={"log.cleaner.backoff.ms": "100"}
        )
        with pytest.warns(DeprecationWarning):  # the legacy API, on purpose
            futures = a.alter_configs([res])
        futures[res].result(30)
        now = _broker(a)
        assert now["log.cleaner.backoff.ms"].value == "100"
        assert now["log.cleaner.backoff.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert now["log.cleaner.threads"].value == "1"  # no longer in the broker's set
        assert "starting the log cleaner with 1 threads" in b.log_since_start()

        # Kept in the log dir, and in force after a restart.
        stored = json.loads((b.log_dir / "dynamic-broker-configs.json").read_text())
        assert stored == {
            "version": 1,
            "brokers": {
                "<default>": {"log.retention.ms": "3600000", "message.max.bytes": "4000"},
                "0": {"log.cleaner.backoff.ms": "100"},
            },
        }
        b.restart()
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        now = _broker(a)
        assert now["log.retention.ms"].value == "3600000"
        assert now["log.cleaner.backoff.ms"].value == "100"
        assert _describe(a, ConfigResource.Type.TOPIC, topic)["retention.ms"].value == "3600000"
        assert _produce_error(b, topic, 8000) == KafkaError.MSG_SIZE_TOO_LARGE


def test_a_damaged_dynamic_config_file_stops_the_broker_with_its_name(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker")
    b.log_dir.mkdir(parents=True)
    (b.log_dir / "dynamic-broker-configs.json").write_text('{"version": 1, "brokers": [1]}')
    with pytest.raises(RuntimeError, match="exited with 1 during startup"):
        b.start()
    assert "dynamic-broker-configs.json: not a dynamic broker config file" in b.log_text()
