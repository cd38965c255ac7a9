"""Kafka's config providers in the broker config (KIP-297/421/887/993): file, environment and
directory references resolved in any value, by Kafka's class names; every missing file, key or
variable a ConfigError naming the config key and the reference, never the secret."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.errors import ConfigError
from tierlog.server.config_providers import resolve_config_providers
from tierlog.server.kafka_config import KafkaConfig

PKG = "org.apache.kafka.common.config.provider."
PROVIDERS = {
    "config.providers": "file,env,dir",
    "config.providers.file.class": PKG + "FileConfigProvider",
    "config.providers.env.class": PKG + "EnvVarConfigProvider",
    "config.providers.dir.class": PKG + "DirectoryConfigProvider",
}


@pytest.fixture
def secrets(tmp_path: Path) -> Path:
    (tmp_path / "secrets.properties").write_text(
        "# broker secrets\nkeystore.password=ks-secret\nsasl.password = p\\u00e4ss\n"
    )
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "s3-secret").write_text("AKIA-secret")
    return tmp_path


def test_every_provider_in_any_value(secrets: Path) -> None:
    f = secrets / "secrets.properties"
    got = resolve_config_providers(
        {
            **PROVIDERS,
            "ssl.keystore.password": f"${{file:{f}:keystore.password}}",
            "rsm.config.s3.secret.key": f"${{dir:{secrets / 'dir'}:s3-secret}}",
            "listener.name.x.plain.sasl.jaas.config": (
                f'PlainLoginModule required username="${{env:USER_NAME}}" '
                f'password="${{file:{f}:sasl.password}}";'
            ),
            "log.dirs": "/var/${not a reference",
        },
        env={"USER_NAME": "broker"},
    )
    assert got == {
        "ssl.keystore.password": "ks-secret",
        "rsm.config.s3.secret.key": "AKIA-secret",
        "listener.name.x.plain.sasl.jaas.config": (
            'PlainLoginModule required username="broker" password="päss";'
        ),
        "log.dirs": "/var/${not a reference",
    }


def test_a_broker_config_takes_them(secrets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERLOG_TEST_PORT_SECRET", "9")
    f = secrets / "secrets.properties"
    c = KafkaConfig.from_props(
        {
            **PROVIDERS,
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.password": f"${{file:{f}:keystore.password}}",
            "num.partitions": "${env:TIERLOG_TEST_PORT_SECRET}",
            "rsm.config.s3.secret.key": f"${{dir:{secrets / 'dir'}:s3-secret}}",
        }
    )
    assert c.listener_security.get("SSL", "ssl.keystore.password") == "ks-secret"
    assert c.num_partitions == 9
    assert c.rsm_config["s3.secret.key"] == "AKIA-secret"
    # the originals keep the references: no resolved secret in repr or DescribeConfigs
    assert "ks-secret" not in repr(c) and "AKIA-secret" not in repr(c)
    rows = {r.name: r for r in c.describe()}
    assert rows["rsm.config.s3.secret.key"].value is None
    assert "config.providers" not in rows


@pytest.mark.parametrize(
    ("props", "key", "message"),
    [
        ({"a.password": "${file:/nonexistent/s.properties:k}"}, "a.password",
         r"\$\{file:/nonexistent/s.properties:k\}: cannot read /nonexistent/s.properties"),
        ({"a.password": "${file:{secrets}/secrets.properties:nope}"}, "a.password",
         "has no key 'nope'"),
        ({"a.password": "${env:TIERLOG_SURELY_UNSET}"}, "a.password",
         "environment variable TIERLOG_SURELY_UNSET is not set"),
        ({"a.password": "${dir:{secrets}/dir:missing}"}, "a.password", "cannot read"),
        ({"a.password": "${dir:{secrets}/dir:../secrets.properties}"}, "a.password",
         "not a file directly"),
        ({"a.password": "${vault:/x:k}"}, "a.password",
         "refers to the config provider 'vault', which config.providers does not name"),
        ({"a.password": "${file:k}"}, "a.password", "needs a path"),
        ({"a.password": "${env:/x:HOME}"}, "a.password", "takes no path"),
        ({"config.providers": "file,vault"}, "config.providers.vault.class", "set its class"),
        ({"config.providers.vault.class": "com.Vault", "config.providers": "file,env,dir,vault"},
         "config.providers.vault.class", "not a provider tierlog has"),
        ({"config.providers.other.param.x": "1"}, "config.providers.other.param.x",
         "does not name the provider 'other'"),
        ({"config.providers.env.param.allowlist.pattern": "SAFE_.*",
          "a.password": "${env:HOME}"}, "a.password", "does not match"),
        ({"config.providers.env.param.allowlist.pattern": "(", "a": "x"},
         "config.providers.env.param.allowlist.pattern", "not a regular expression"),
        ({"config.providers.file.param.allowed.paths": "/nonexistent-root",
          "a.password": "${file:{secrets}/secrets.properties:keystore.password}"},
         "a.password", "is not under config.providers.file.param.allowed.paths"),
    ],
)  # fmt: skip
def test_errors_name_the_key_never_the_value(
    secrets: Path, props: dict[str, str], key: str, message: str
) -> None:
    props = {k: v.replace("{secrets}", str(secrets)) for k, v in props.items()}
    with pytest.raises(ConfigError, match=message) as e:
        resolve_config_providers({**PROVIDERS, **props}, env={"HOME": "/root"})
    assert e.value.key == key
    assert "ks-secret" not in str(e.value) and "/root" not in str(e.value)


def test_allowed_paths_admit_files_under_them(secrets: Path) -> None:
    got = resolve_config_providers(
        {
            **PROVIDERS,
            "config.providers.file.param.allowed.paths": f"/nonexistent,{secrets}",
            "a": f"${{file:{secrets}/secrets.properties:keystore.password}}",
        }
    )
    assert got == {"a": "ks-secret"}


def test_a_broker_config_error_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERLOG_NO_SUCH_VAR", raising=False)
    with pytest.raises(ConfigError, match=r"ssl\.key\.password: ") as e:
        KafkaConfig.from_props({**PROVIDERS, "ssl.key.password": "${env:TIERLOG_NO_SUCH_VAR}"})
    assert "TIERLOG_NO_SUCH_VAR is not set" in str(e.value)


@given(st.text(alphabet=st.characters(exclude_characters="$"), max_size=40))
def test_values_without_references_are_unchanged(value: str) -> None:
    assert resolve_config_providers({**PROVIDERS, "k": value}) == {"k": value}
