"""Dynamic broker configs without a broker: which configs are dynamic, the validation and
Kafka's messages, the source chain of DescribeConfigs, the local store (atomic, survives a
reopen, refuses a damaged file), stored values that no longer validate, and what a change
applies to (the log manager's defaults, the cleaner's threads, a quota's rate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tierlog.cluster.zk_data import config_broker_path
from tierlog.errors import ConfigError, InvalidRequest
from tierlog.log.log_cleaner import CleanerConfig
from tierlog.log.log_manager import LogManager
from tierlog.server.dynamic_broker_config import (
    DEFAULT_ENTITY,
    DYNAMIC_CONFIGS,
    DynamicBrokerConfig,
    LocalDynamicConfigStore,
)
from tierlog.server.kafka_config import KafkaConfig
from tierlog.tiered.quota import UNLIMITED, TokenBucket


class MemoryStore:
    def __init__(self, stored: dict[str, dict[str, str]] | None = None) -> None:
        self.stored = stored or {}
        self.saves: list[tuple[str, dict[str, str]]] = []

    def load(self, entities: list[str]) -> dict[str, dict[str, str]]:
        return {e: dict(self.stored.get(e, {})) for e in entities}

    def save(self, entity: str, config: Any) -> None:
        self.saves.append((entity, dict(config)))
        self.stored[entity] = dict(config)


def dynamic(static: dict[str, str] | None = None, store: Any = None) -> DynamicBrokerConfig:
    d = DynamicBrokerConfig(KafkaConfig.from_props(static or {}), store or MemoryStore())
    d.initialize()
    return d


def test_kafkas_dynamic_configs_and_not_the_static_ones() -> None:
    for name in ("log.retention.ms", "log.retention.hours", "log.segment.bytes",
                 "log.cleanup.policy", "message.max.bytes", "log.cleaner.threads",
                 "log.cleaner.io.max.bytes.per.second",
                 "remote.log.manager.copy.max.bytes.per.second"):  # fmt: skip
        assert name in DYNAMIC_CONFIGS, name
    for name in ("listeners", "log.dirs", "node.id", "zookeeper.connect", "num.partitions"):
        assert name not in DYNAMIC_CONFIGS, name


def test_validation_answers_kafkas_errors_and_changes_nothing() -> None:
    d = dynamic()
    with pytest.raises(InvalidRequest, match=r"^Cannot update these configs dynamically: "
                       r"Set\(listeners, log\.dirs\)$"):  # fmt: skip
        d.alter("0", {"log.dirs": "/x", "listeners": "PLAINTEXT://:1"}, validate_only=False)
    with pytest.raises(InvalidRequest, match=r"Unknown broker configs: Set\(no\.such\)"):
        d.alter(DEFAULT_ENTITY, {"no.such": "1"}, validate_only=False)
    with pytest.raises(InvalidRequest, match=r"log\.segment\.bytes"):
        d.alter("0", {"log.segment.bytes": "-5"}, validate_only=False)
    with pytest.raises(InvalidRequest, match="at least 1"):
        d.alter("0", {"log.cleaner.threads": "0"}, validate_only=False)
    with pytest.raises(InvalidRequest, match="more than double the current value 1"):
        d.alter("0", {"log.cleaner.threads": "3"}, validate_only=False)
    # a default hidden by the broker's own value is still checked on its own
    d.alter("0", {"log.retention.ms": "1000"}, validate_only=False)
    with pytest.raises(InvalidRequest, match=r"log\.retention\.ms"):
        d.alter(DEFAULT_ENTITY, {"log.retention.ms": "soon"}, validate_only=False)
    with pytest.raises(InvalidRequest, match="Unexpected broker id, expected 0 or empty"):
        DynamicBrokerConfig.entity_of("3", 0)
    assert DynamicBrokerConfig.entity_of("", 0) == DEFAULT_ENTITY
    assert d.dynamic == {DEFAULT_ENTITY: {}, "0": {"log.retention.ms": "1000"}}
    # validate_only stores and applies nothing
    store = MemoryStore()
    d = dynamic(store=store)
    d.alter("0", {"log.cleaner.threads": "2"}, validate_only=True)
    assert store.saves == [] and d.current.get("log.cleaner.threads") == 1


def test_sources_most_specific_first() -> None:
    d = dynamic({"log.retention.ms": "1000", "log.cleaner.backoff.ms": "500"})
    d.alter(DEFAULT_ENTITY, {"log.retention.ms": "2000", "log.segment.bytes": "1048576"},
            validate_only=False)  # fmt: skip
    d.alter("0", {"log.retention.ms": "3000"}, validate_only=False)
    rows = {r.entry.name: r for r in d.describe("0")}
    r = rows["log.retention.ms"]
    assert (r.entry.value, r.entry.source, r.entry.read_only) == (
        "3000", "DYNAMIC_BROKER_CONFIG", False
    )  # fmt: skip
    assert r.synonyms == (
        ("log.retention.ms", "3000", "DYNAMIC_BROKER_CONFIG"),
        ("log.retention.ms", "2000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("log.retention.ms", "1000", "STATIC_BROKER_CONFIG"),
        ("log.retention.ms", "604800000", "DEFAULT_CONFIG"),  # Kafka's 168 hours
    )
    seg = rows["log.segment.bytes"].entry
    assert (seg.value, seg.source) == ("1048576", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    backoff = rows["log.cleaner.backoff.ms"].entry
    assert (backoff.source, backoff.read_only) == ("STATIC_BROKER_CONFIG", False)
    listeners = rows["listeners"].entry
    assert (listeners.source, listeners.read_only) == ("DEFAULT_CONFIG", True)
    # The default entity describes only its own configs.
    default = {r.entry.name: r.entry for r in d.describe(DEFAULT_ENTITY)}
    assert {n: (e.value, e.source) for n, e in default.items()} == {
        "log.retention.ms": ("2000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        "log.segment.bytes": ("1048576", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
    }
    # The broker's own value gone: the default shows through.
    d.alter("0", {}, validate_only=False)
    r = {r.entry.name: r for r in d.describe("0")}["log.retention.ms"]
    assert (r.entry.value, r.entry.source) == ("2000", "DYNAMIC_DEFAULT_BROKER_CONFIG")


def test_local_store_survives_a_reopen_and_refuses_a_damaged_file(tmp_path: Path) -> None:
    store = LocalDynamicConfigStore.in_log_dir(tmp_path)
    assert store.load([DEFAULT_ENTITY, "0"]) == {DEFAULT_ENTITY: {}, "0": {}}
    d = dynamic(store=store)
    d.alter(DEFAULT_ENTITY, {"log.retention.ms": "2000"}, validate_only=False)
    d.alter("0", {"log.cleaner.backoff.ms": "100"}, validate_only=False)
    assert json.loads((tmp_path / "dynamic-broker-configs.json").read_text()) == {
        "version": 1,
        "brokers": {
            "<default>": {"log.retention.ms": "2000"},
            "0": {"log.cleaner.backoff.ms": "100"},
        },
    }
    assert not list(tmp_path.glob("*.tmp"))
    again = dynamic(store=LocalDynamicConfigStore.in_log_dir(tmp_path))
    assert again.current.get("log.retention.ms") == 2000
    assert again.current.get("log.cleaner.backoff.ms") == 100
    d.alter("0", {}, validate_only=False)  # an empty set removes the entity
    assert "0" not in json.loads((tmp_path / "dynamic-broker-configs.json").read_text())["brokers"]
    (tmp_path / "dynamic-broker-configs.json").write_text('{"version": 1, "brokers": {"0": 5}}')
    with pytest.raises(ConfigError, match="not strings"):
        dynamic(store=LocalDynamicConfigStore.in_log_dir(tmp_path))
    for damaged in ("[]", "{", '{"version": 2, "brokers": {}}'):
        (tmp_path / "dynamic-broker-configs.json").write_text(damaged)
        with pytest.raises(ConfigError, match="not a dynamic broker config file"):
            dynamic(store=LocalDynamicConfigStore.in_log_dir(tmp_path))


def test_stored_values_that_no_longer_validate_are_ignored(caplog) -> None:
    store = MemoryStore({"0": {"log.retention.ms": "soon", "log.cleaner.backoff.ms": "100",
                               "listeners": "PLAINTEXT://:1"}})  # fmt: skip
    d = dynamic(store=store)
    assert d.dynamic["0"] == {"log.cleaner.backoff.ms": "100"}
    assert d.current.get("log.cleaner.backoff.ms") == 100
    assert "ignoring the dynamic config log.retention.ms=soon" in caplog.text
    # A change seen in the store (ZooKeeper) applies the valid part too.
    d.update(DEFAULT_ENTITY, {"log.retention.ms": "7", "log.dirs": "/elsewhere"})
    assert d.dynamic[DEFAULT_ENTITY] == {"log.retention.ms": "7"}


def test_a_change_reaches_every_reconfigurable_once() -> None:
    d = dynamic()
    seen: list[tuple[str, Any, Any]] = []
    d.add_reconfigurable("a", lambda old, new: seen.append(("a", old, new)))

    def failing(old: KafkaConfig, new: KafkaConfig) -> None:
        raise RuntimeError("boom")

    d.add_reconfigurable("b", failing)  # logged; the change stands
    d.add_reconfigurable("c", lambda old, new: seen.append(("c", old, new)))
    d.alter("0", {"log.retention.ms": "1000"}, validate_only=False)
    assert [s[0] for s in seen] == ["a", "c"]
    assert seen[0][1].get("log.retention.ms") != 1000 and seen[0][2].get("log.retention.ms") == 1000
    d.update("0", {"log.retention.ms": "1000"})  # the same again (a ZooKeeper echo): no call
    assert len(seen) == 2


def test_log_manager_takes_new_defaults_and_keeps_overrides(tmp_path: Path) -> None:
    c = KafkaConfig.from_props({"log.dirs": str(tmp_path), "log.cleaner.threads": "1"})
    lm = c.create_log_manager()
    lm.startup()
    try:
        lm.create_topic("plain", 1, {})
        lm.create_topic("own", 1, {"retention.ms": "5000"})
        lg_plain, lg_own = lm.get_log("plain", 0), lm.get_log("own", 0)
        assert lg_plain is not None and lg_own is not None
        new = KafkaConfig.from_props({"log.dirs": str(tmp_path), "log.retention.ms": "9000",
                                      "log.segment.bytes": "2000000"})  # fmt: skip
        lm.reconfigure_default_log_config(new.log_config())
        assert lg_plain.config.values["retention.ms"] == 9000
        assert lg_own.config.values["retention.ms"] == 5000
        assert lg_own.config.values["segment.bytes"] == 2000000
        assert lm.topic("plain").config.values["retention.ms"] == 9000  # type: ignore[union-attr]
        lm.create_topic("later", 1, {})
        assert lm.topic("later").config.values["retention.ms"] == 9000  # type: ignore[union-attr]
        # The cleaner restarts with the new number of threads.
        assert lm.cleaner is not None
        lm.reconfigure_cleaner(CleanerConfig(num_threads=2, backoff_ms=50))
        assert lm.cleaner.config.num_threads == 2
        assert len(lm.cleaner._threads) == 2 and all(t.is_alive() for t in lm.cleaner._threads)
    finally:
        lm.shutdown()
    # The registry file keeps only the overrides: a reopen with the old defaults reads them.
    lm = LogManager([tmp_path], KafkaConfig.from_props({"log.dirs": str(tmp_path)}).log_config())
    lm.startup()
    try:
        assert lm.topic("own").config.overrides == frozenset({"retention.ms"})  # type: ignore[union-attr]
    finally:
        lm.shutdown()


def test_token_bucket_takes_a_new_rate() -> None:
    now = [0.0]
    q = TokenBucket(UNLIMITED, clock=lambda: now[0])
    assert q.unlimited
    q.update_rate(1000)
    assert not q.unlimited and q.rate == 1000
    q.record(1500)
    assert q.is_quota_exceeded()
    now[0] += 1.0
    assert not q.is_quota_exceeded()
    q.update_rate(UNLIMITED)
    assert q.unlimited
    with pytest.raises(ValueError):
        q.update_rate(0)


def test_broker_config_znodes() -> None:
    assert config_broker_path("<default>") == "/config/brokers/<default>"
    assert config_broker_path("3") == "/config/brokers/3"
    with pytest.raises(ValueError):
        config_broker_path("../topics/x")
