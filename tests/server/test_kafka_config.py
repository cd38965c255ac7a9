from pathlib import Path

import pytest

from tierlog.errors import ConfigError
from tierlog.server.config.properties import parse_properties
from tierlog.server.config.socket_server_configs import Endpoint
from tierlog.server.kafka_config import BROKER_CONFIGS, KafkaConfig

# --------------------------------------------------------------------------- properties syntax


def test_properties_separators_and_comments():
    text = "\n".join(
        [
            "# a comment",
            "! another comment",
            "   ",
            "a=1",
            "b: 2",
            "c 3",
            "d\t=\t4",
            "  e = five  ",
            "f",
            "g=",
            "h=x=y",
            "i::j",
        ]
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "five  ",  # trailing blanks belong to the value (typed parsing trims them)
        "f": "",
        "g": "",
        "h": "x=y",
        "i": ":j",
    }


def test_properties_line_continuations():
    text = "listeners=PLAINTEXT://127.0.0.1:9092,\\\n    PLAINTEXT2://127.0.0.1:9093\nx=1\n"
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://127.0.0.1:9092,PLAINTEXT2://127.0.0.1:9093",
        "x": "1",
    }
    # an even number of backslashes is an escaped backslash, not a continuation
    assert parse_properties("a=b\\\\\nc=d") == {"a": "b\\", "c": "d"}
    # a comment line never continues
    assert parse_properties("# x \\\na=1") == {"a": "1"}
    # continuation at end of input
    assert parse_properties("a=1\\") == {"a": "1"}


def test_properties_escapes():
    text = "my\\ key=a\\tb\\u0041\\=\\:\\\\\nk\\=1=v\n"
    assert parse_properties(text) == {"my key": "a\tbA=:\\", "k=1": "v"}


def test_properties_crlf_and_duplicates():
    assert parse_properties("a=1\r\nb=2\r\na=3\r\n") == {"a": "3", "b": "2"}


def test_properties_malformed_unicode_escape_names_the_line():
    with pytest.raises(ConfigError) as e:
        parse_properties("ok=1\nbad=\\u12G4\n", source="server.properties")
    assert "server.properties:2" in str(e.value)


# --------------------------------------------------------------------------- defaults


def test_embedded_defaults():
    c = KafkaConfig.from_props({})
    assert c.listeners == (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert c.listeners[0].address == ("127.0.0.1", 9092)
    assert c.advertised_listeners == c.listeners
    assert c.node_id == 0
    assert c.log_dirs == [Path("./data/logs")]
    assert c.num_partitions == 1
    assert c.default_replication_factor == 1
    assert c.auto_create_topics_enable is True
    assert c.delete_topic_enable is True
    assert c.message_max_bytes == 1_048_588
    assert c.socket_request_max_bytes == 104_857_600
    assert c.group_initial_rebalance_delay_ms == 3000
    assert c.group_min_session_timeout_ms == 6000
    assert c.group_max_session_timeout_ms == 1_800_000
    assert c.offsets_topic_num_partitions == 50
    assert c.log_retention_check_interval_ms == 300_000
    assert c.log_flush_scheduler_interval_ms == 2**63 - 1
    assert c.log_flush_offset_checkpoint_interval_ms == 60_000
    assert c.log_flush_start_offset_checkpoint_interval_ms == 60_000
    assert c.remote_log_storage_system_enable is False
    assert c.remote_log_manager_task_interval_ms == 30_000
    assert c.remote_log_reader_threads == 10
    assert c.remote_fetch_max_wait_ms == 500
    assert c.remote_log_metadata_topic_num_partitions == 50
    assert c.metrics_port is None
    assert c.rsm_config == {} and c.rlmm_config == {}
    lc = c.log_config()
    assert lc.retention_ms == 604_800_000
    assert lc.segment_ms == 604_800_000
    assert lc.broker_defaults == frozenset()


# --------------------------------------------------------------------------- files and overrides


def test_from_file_with_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text(
        "# Kafka-style file\n"
        "node.id=3\n"
        "listeners=PLAINTEXT://:19092\n"
        "advertised.listeners=PLAINTEXT://broker.example:19092\n"
        "log.dirs=/a, /b\n"
        "num.partitions=4\n"
        "log.segment.bytes=1048576\n"
    )
    c = KafkaConfig.from_file(f, ["num.partitions=6", "auto.create.topics.enable=false"])
    assert c.node_id == 3
    assert c.listeners == (Endpoint("PLAINTEXT", "", 19092),)
    assert c.advertised_listeners == (Endpoint("PLAINTEXT", "broker.example", 19092),)
    assert c.log_dirs == [Path("/a"), Path("/b")]
    assert c.num_partitions == 6  # override wins over the file
    assert c.auto_create_topics_enable is False
    assert c.log_config().segment_size == 1_048_576
    assert c.originals["num.partitions"] == "6"


def test_from_file_none_uses_only_overrides():
    c = KafkaConfig.from_file(None, ["log.dirs=/x"])
    assert c.log_dirs == [Path("/x")]


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_file(tmp_path / "nope.properties", [])
    assert "nope.properties" in str(e.value)


@pytest.mark.parametrize("bad", ["no-equals", "=value"])
def test_malformed_override(bad):
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_file(None, [bad])
    assert "key=value" in str(e.value)


def test_latin1_file_falls_back(tmp_path):
    f = tmp_path / "s.properties"
    f.write_bytes(b"rsm.config.note=caf\xe9\n")
    assert KafkaConfig.from_file(f, []).rsm_config == {"note": "café"}


def test_log_dir_used_when_log_dirs_missing():
    assert KafkaConfig.from_props({"log.dir": "/d"}).log_dirs == [Path("/d")]
    c = KafkaConfig.from_props({"log.dir": "/d", "log.dirs": "/e,/f"})
    assert c.log_dirs == [Path("/e"), Path("/f")]


def test_values_are_trimmed_and_typed():
    c = KafkaConfig.from_props({"num.partitions": " 3 ", "delete.topic.enable": "FALSE"})
    assert c.num_partitions == 3
    assert c.delete_topic_enable is False


def test_from_props_formats_python_values():
    c = KafkaConfig.from_props({"num.partitions": 2, "auto.create.topics.enable": False})
    assert c.num_partitions == 2 and c.auto_create_topics_enable is False


# --------------------------------------------------------------------------- errors


def test_unknown_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({"log.segmnt.bytes": "100"})
    assert e.value.key == "log.segmnt.bytes"
    assert "log.segment.bytes" in str(e.value)  # did you mean


def test_topic_config_at_broker_level_points_at_the_synonym():
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({"retention.ms": "100"})
    assert e.value.key == "retention.ms"
    assert "log.retention.ms" in str(e.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num.partitions", "many"),
        ("num.partitions", "0"),
        ("auto.create.topics.enable", "yes"),
        ("socket.request.max.bytes", "99999999999"),
        ("log.segment.bytes", "10"),  # synonym validated by the topic config's rule
        ("log.cleanup.policy", "shred"),
        ("metrics.port", "70000"),
        ("log.retention.check.interval.ms", "0"),
        ("remote.log.storage.system.enable", "maybe"),
        ("process.roles", "broker,voter"),
        ("replica.alter.log.dirs.io.max.bytes.per.second", "0"),
        ("replica.alter.log.dirs.io.max.bytes.per.second", "fast"),
    ],
)
def test_bad_value_names_key_and_value(key, value):
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({key: value})
    assert e.value.key == key
    assert value in str(e.value)


def test_replica_alter_log_dirs_rate_defaults_to_no_limit():
    c = KafkaConfig.from_props({})
    assert c.replica_alter_log_dirs_io_max_bytes_per_second == 2**63 - 1
    c = KafkaConfig.from_props({"replica.alter.log.dirs.io.max.bytes.per.second": "1048576"})
    assert c.replica_alter_log_dirs_io_max_bytes_per_second == 1 << 20


def test_node_id_and_broker_id_synonyms():
    assert KafkaConfig.from_props({"broker.id": "5"}).node_id == 5
    assert KafkaConfig.from_props({"node.id": "5", "broker.id": "5"}).node_id == 5
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({"node.id": "1", "broker.id": "2"})
    assert e.value.key == "node.id"
    with pytest.raises(ConfigError):
        KafkaConfig.from_props({"node.id": "-1"})


def test_cross_field_topic_rule_names_the_broker_key():
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({"log.retention.ms": "1000", "log.local.retention.ms": "5000"})
    assert e.value.key == "log.local.retention.ms"


def test_group_session_timeouts_must_be_ordered():
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props(
            {"group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"}
        )
    assert e.value.key == "group.min.session.timeout.ms"


# --------------------------------------------------------------------------- listeners


def test_listener_forms():
    c = KafkaConfig.from_props(
        {
            "listeners": "PLAINTEXT://[::1]:9092,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        }
    )
    assert c.listeners == (
        Endpoint("PLAINTEXT", "::1", 9092),
        Endpoint("INTERNAL", "127.0.0.1", 0),
    )
    assert str(c.listeners[0]) == "PLAINTEXT://[::1]:9092"


@pytest.mark.parametrize("listeners", ["PLAINTEXT//x:1", "PLAINTEXT://x:99999", "FOO://:1"])
def test_malformed_listeners(listeners):
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({"listeners": listeners})
    assert e.value.key == "listeners"


def test_named_listener_mapped_to_ssl():
    c = KafkaConfig.from_props(
        {"listeners": "EXTERNAL://:9094", "listener.security.protocol.map": "EXTERNAL:SSL"}
    )
    assert c.listeners == (Endpoint("EXTERNAL", "", 9094, "SSL"),)


def test_sasl_listener_without_a_supported_mechanism_is_refused():
    # Kafka's default sasl.enabled.mechanisms is GSSAPI, which tierlog does not have.
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({"listeners": "SASL_PLAINTEXT://:9093"})
    assert e.value.key == "sasl.enabled.mechanisms"
    assert "GSSAPI" in str(e.value)


def test_kafka_kraft_sample_config_loads(tmp_path):
    # The shape of Kafka's config/kraft/server.properties.
    f = tmp_path / "server.properties"
    f.write_text(
        """
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""
    )
    c = KafkaConfig.from_file(f, [])
    # the controller listener is not served: tierlog has no separate controller
    assert c.listeners == (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert c.advertised_listeners == (Endpoint("PLAINTEXT", "localhost", 9092),)
    assert c.node_id == 1


def test_inter_broker_listener_must_exist():
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({"inter.broker.listener.name": "REPLICATION"})
    assert e.value.key == "inter.broker.listener.name"


def test_advertised_meta_address_rejected():
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"})
    assert e.value.key == "advertised.listeners"


# --------------------------------------------------------------------------- log_config()


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, 604_800_000),
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.minutes": "2", "log.retention.hours": "1"}, 120_000),
        ({"log.retention.ms": "5", "log.retention.minutes": "2", "log.retention.hours": "1"}, 5),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-1"}, -1),  # negative means unlimited, as in Kafka
    ],
)
def test_retention_precedence_ms_minutes_hours(props, expected):
    c = KafkaConfig.from_props(props)
    assert c.log_config().retention_ms == expected
    assert c.get("log.retention.ms") == expected
    if props:
        assert c.log_config().source_of("retention.ms") == "STATIC_BROKER_CONFIG"
    else:
        assert c.log_config().source_of("retention.ms") == "DEFAULT_CONFIG"


def test_roll_hours_and_jitter():
    c = KafkaConfig.from_props({"log.roll.hours": "2", "log.roll.jitter.hours": "1"})
    assert c.log_config().segment_ms == 7_200_000
    assert c.log_config().segment_jitter_ms == 3_600_000
    c = KafkaConfig.from_props({"log.roll.hours": "2", "log.roll.ms": "10"})
    assert c.log_config().segment_ms == 10


def test_broker_synonyms_flow_into_log_config():
    c = KafkaConfig.from_props(
        {
            "log.segment.bytes": "1048576",
            "log.retention.bytes": "5000000",
            "log.flush.interval.messages": "1",
            "log.cleanup.policy": "compact,delete",
            "message.max.bytes": "2000000",
            "log.index.interval.bytes": "100",
            "log.message.timestamp.type": "LogAppendTime",
            "log.local.retention.ms": "1000",
        }
    )
    lc = c.log_config()
    assert lc.segment_size == 1_048_576
    assert lc.retention_size == 5_000_000
    assert lc.flush_interval == 1
    assert lc.get("cleanup.policy") == ("compact", "delete")
    assert lc.max_message_size == 2_000_000
    assert lc.index_interval == 100
    assert lc.log_append_time
    assert lc.local_retention_ms == 1000
    assert c.message_max_bytes == 2_000_000
    assert lc.source_of("segment.bytes") == "STATIC_BROKER_CONFIG"
    assert lc.source_of("segment.ms") == "DEFAULT_CONFIG"


def test_every_broker_synonym_is_a_known_key():
    from tierlog.log.log_config import BROKER_SYNONYMS

    for broker_name in BROKER_SYNONYMS:
        assert broker_name in BROKER_CONFIGS


# --------------------------------------------------------------------------- remote storage


def test_remote_storage_keys_and_prefixes():
    c = KafkaConfig.from_props(
        {
            "remote.log.storage.system.enable": "true",
            "remote.log.manager.task.interval.ms": "1000",
            "remote.log.reader.threads": "4",
            "remote.log.manager.copier.thread.pool.size": "2",
            "remote.log.manager.expiration.thread.pool.size": "3",
            "remote.fetch.max.wait.ms": "250",
            "remote.log.index.file.cache.total.size.bytes": "1000000",
            "remote.log.manager.copy.max.bytes.per.second": "100",
            "remote.log.manager.fetch.max.bytes.per.second": "200",
            "log.local.retention.bytes": "10",
            "remote.log.metadata.topic.num.partitions": "5",
            "rsm.config.uri": "s3://bucket/prefix",
            "rsm.config.s3.endpoint": "http://127.0.0.1:8333",
            "rsm.config.s3.secret.key": "S",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "metrics.port": "9404",
        }
    )
    assert c.remote_log_storage_system_enable
    assert c.remote_log_manager_task_interval_ms == 1000
    assert c.remote_log_reader_threads == 4
    assert c.remote_log_manager_copier_thread_pool_size == 2
    assert c.remote_log_manager_expiration_thread_pool_size == 3
    assert c.remote_fetch_max_wait_ms == 250
    assert c.remote_log_index_file_cache_total_size_bytes == 1_000_000
    assert c.remote_log_manager_copy_max_bytes_per_second == 100
    assert c.remote_log_manager_fetch_max_bytes_per_second == 200
    assert c.log_config().local_retention_bytes == 10
    assert c.remote_log_metadata_topic_num_partitions == 5
    assert c.rsm_config == {
        "uri": "s3://bucket/prefix",
        "s3.endpoint": "http://127.0.0.1:8333",
        "s3.secret.key": "S",
    }
    assert c.rlmm_config == {"remote.log.metadata.topic.replication.factor": "1"}
    assert c.metrics_port == 9404
    assert "'S'" not in repr(c)  # secrets never printed


def test_rlmm_prefixed_metadata_partitions_are_honoured():
    c = KafkaConfig.from_props({"rlmm.config.remote.log.metadata.topic.num.partitions": "7"})
    assert c.remote_log_metadata_topic_num_partitions == 7
    with pytest.raises(ConfigError) as e:
        KafkaConfig.from_props({"rlmm.config.remote.log.metadata.topic.num.partitions": "x"})
    assert "x" in str(e.value)


def test_custom_plugin_prefix():
    c = KafkaConfig.from_props(
        {"remote.log.storage.manager.impl.prefix": "my.rsm.", "my.rsm.uri": "file:///r"}
    )
    assert c.rsm_config == {"uri": "file:///r"}


# --------------------------------------------------------------------------- describe()


def test_describe_sources_and_sensitivity():
    c = KafkaConfig.from_props(
        {"num.partitions": "3", "log.retention.hours": "1", "rsm.config.s3.secret.key": "S"}
    )
    rows = {r.name: r for r in c.describe()}
    assert rows["num.partitions"].value == "3"
    assert rows["num.partitions"].source == "STATIC_BROKER_CONFIG"
    assert rows["num.partitions"].config_type == "INT"
    assert rows["delete.topic.enable"].value == "true"
    assert rows["delete.topic.enable"].source == "DEFAULT_CONFIG"
    assert rows["log.retention.ms"].value == "3600000"
    assert rows["log.retention.ms"].source == "STATIC_BROKER_CONFIG"
    assert rows["log.segment.bytes"].value == "1073741824"
    secret = rows["rsm.config.s3.secret.key"]
    assert secret.sensitive and secret.value is None
    assert all(r.read_only for r in rows.values())
    assert set(BROKER_CONFIGS) <= set(rows)


# --------------------------------------------------------------------------- tierlog serve


def test_serve_rejects_bad_config_with_a_clear_error(capsys, tmp_path):
    from tierlog.cli import main

    assert main(["serve", "--override", "log.segmnt.bytes=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tierlog serve: config error: log.segmnt.bytes: unknown broker config")
    assert "Traceback" not in err
    assert main(["serve", "--config", str(tmp_path / "missing.properties")]) == 2
    assert "missing.properties" in capsys.readouterr().err


def test_create_log_manager_is_wired_from_the_config(tmp_path):
    c = KafkaConfig.from_props(
        {"log.dirs": f"{tmp_path}/a,{tmp_path}/b", "node.id": "4", "log.segment.bytes": "5000"}
    )
    lm = c.create_log_manager()
    lm.startup()
    try:
        assert lm.log_dirs == [tmp_path / "a", tmp_path / "b"]
        assert lm.node_id == 4
        assert lm.default_config.segment_size == 5000
        assert lm.create_topic("t", 1, {}).config.segment_size == 5000
    finally:
        lm.shutdown()


def test_consumer_group_settings_and_their_bounds():
    c = KafkaConfig.from_file(None, ["log.dirs=/x", "group.consumer.assignors=range,uniform"])
    assert c.group_consumer_assignors == ("range", "uniform")
    assert (c.group_consumer_session_timeout_ms, c.group_consumer_heartbeat_interval_ms) == (
        45_000,
        5_000,
    )
    classes = "org.apache.kafka.coordinator.group.assignor.UniformAssignor"
    c = KafkaConfig.from_file(None, ["log.dirs=/x", f"group.consumer.assignors={classes}"])
    assert c.group_consumer_assignors == ("uniform",)
    for bad, message in (
        ("group.consumer.assignors=sticky", "unknown assignor sticky"),
        ("group.consumer.session.timeout.ms=40000", "is not between"),
        ("group.consumer.heartbeat.interval.ms=50000", "must be less than"),
    ):
        with pytest.raises(ConfigError) as e:
            KafkaConfig.from_file(None, ["log.dirs=/x", bad])
        assert message in str(e.value), str(e.value)
