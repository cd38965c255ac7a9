"""The listeners' security keys in the broker config: Kafka's names, per-listener overrides,
validation."""

from __future__ import annotations

import pytest

from tierlog.errors import ConfigError
from tierlog.server.kafka_config import KafkaConfig

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


def _config(**props: str) -> KafkaConfig:
    base = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0"}
    base.update(props)
    base.setdefault("sasl.enabled.mechanisms", "PLAIN")
    return KafkaConfig.from_props({k.replace("__", "."): v for k, v in base.items()})


def test_listener_prefix_wins_over_the_broker_wide_key():
    c = KafkaConfig.from_props(
        {
            "listeners": "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "ssl.client.auth": "required",
            "listener.name.sasl_ssl.ssl.client.auth": "none",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        }
    )
    sec = c.listener_security
    assert sec.get("SSL", "ssl.client.auth") == "required"
    assert sec.get("SASL_SSL", "ssl.client.auth") == "none"
    assert sec.get("SASL_SSL", "sasl.enabled.mechanisms") == ("PLAIN", "SCRAM-SHA-512")
    assert sec.jaas_config("SASL_SSL", "PLAIN") == JAAS
    assert sec.jaas_config("SASL_SSL", "SCRAM-SHA-512") is None
    assert sec.source("SASL_SSL", "ssl.client.auth") == "listener.name.sasl_ssl.ssl.client.auth"
    assert sec.source("SSL", "ssl.client.auth") == "ssl.client.auth"
    assert sec.get("SSL", "ssl.enabled.protocols") == ("TLSv1.2", "TLSv1.3")
    assert sec.get("SSL", "connection.failed.authentication.delay.ms") == 100


def test_prefixed_values_are_validated_and_named():
    with pytest.raises(ConfigError) as e:
        _config(**{"listener.name.ssl.ssl.client.auth": "maybe"})
    assert e.value.key == "listener.name.ssl.ssl.client.auth"
    assert "none, requested, required" in str(e.value)


@pytest.mark.parametrize(
    ("key", "needle"),
    [
        ("listener.name.SSL.ssl.client.auth", "lowercase"),
        ("listener.name.ssl.log.dirs", "not an ssl.* or sasl.* key"),
        ("listener.name.ssl.ssl.keystore.locaton", "not an ssl.* or sasl.* key"),
        ("listener.name.ssl.sasl.jaas.config", "plain.sasl.jaas.config"),
        ("sasl.jaas.config", "listener.name.<listener>.<mechanism>.sasl.jaas.config"),
        ("plain.sasl.jaas.config", "listener.name.<listener>.<mechanism>.sasl.jaas.config"),
        ("listener.name.other.ssl.client.auth", "no listener is named OTHER"),
    ],
)
def test_bad_prefixed_keys_are_refused(key, needle):
    with pytest.raises(ConfigError) as e:
        _config(**{key: "none"})
    assert needle in str(e.value)


def test_unknown_security_key_keeps_the_clear_error():
    with pytest.raises(ConfigError) as e:
        _config(**{"ssl.keystore.locaton": "/x"})
    assert "did you mean 'ssl.keystore.location'" in str(e.value)


def test_unsupported_mechanism_on_one_listener():
    with pytest.raises(ConfigError) as e:
        _config(**{"listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"})
    assert e.value.key == "listener.name.sasl_ssl.sasl.enabled.mechanisms"
    assert "OAUTHBEARER" in str(e.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ssl.enabled.protocols", "TLSv1.1"),
        ("ssl.keystore.type", "BKS"),
        ("connections.max.reauth.ms", "-1"),
        ("connection.failed.authentication.delay.ms", "soon"),
        ("ssl.principal.mapping.rules", "RULE:^CN=(.*/$1/,nonsense"),
        ("listener.security.protocol.map", "X:TLS"),
    ],
)
def test_bad_values(key, value):
    with pytest.raises(ConfigError) as e:
        _config(**{key: value})
    assert e.value.key == key


def test_secrets_are_hidden_in_describe_configs():
    c = _config(
        **{
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "ssl.keystore.password": "hunter2",
        }
    )
    rows = {r.name: r for r in c.describe()}
    assert rows["ssl.keystore.password"].value is None
    assert rows["ssl.keystore.password"].sensitive
    jaas = rows["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert jaas.value is None and jaas.sensitive
    assert "alice-secret" not in repr(c) and "hunter2" not in repr(c)
