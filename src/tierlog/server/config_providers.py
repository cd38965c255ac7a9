"""Kafka's config providers (KIP-297, KIP-421, KIP-887, KIP-993): a config value may name a
secret kept elsewhere instead of holding it, so ``server.properties`` holds no secret::

    config.providers=file,env,dir
    config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider
    config.providers.dir.class=org.apache.kafka.common.config.provider.DirectoryConfigProvider

    ssl.keystore.password=${file:/etc/tierlog/secrets.properties:keystore.password}
    rsm.config.s3.secret.key=${env:TIERLOG_S3_SECRET_KEY}
    rsm.config.encryption.key=${dir:/run/secrets:remote-key}

A reference is Kafka's ``ConfigTransformer`` pattern ``${provider:[path:]key}``; a value may
hold several, and text around them is kept. The providers, by Kafka's class names:

* ``FileConfigProvider``: ``path`` is a properties file (java.util.Properties syntax),
  ``key`` one of its keys.
* ``EnvVarConfigProvider``: ``key`` is an environment variable (no path);
  ``config.providers.env.param.allowlist.pattern`` (a regular expression, default ``.*``)
  limits which variables may be read.
* ``DirectoryConfigProvider``: ``path`` is a directory, ``key`` a file in it; the value is the
  file's content.

``config.providers.<name>.param.allowed.paths`` (KIP-993; comma-separated directories) limits
the files the file and directory providers may read.

Stricter than Kafka where Kafka is silent: a reference to a provider that ``config.providers``
does not name, a missing file, key or variable is an error naming the config key and the
reference (never a value), where Kafka leaves the reference in place or substitutes nothing —
a broker that starts with ``${env:MISSING}`` as its password would fail later and less
clearly.

Pure functions over the environment and files given; thread-safe.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from tierlog.errors import ConfigError
from tierlog.server.config.properties import parse_properties

__all__ = [
    "CONFIG_PROVIDERS",
    "PROVIDER_CLASSES",
    "is_provider_key",
    "resolve_config_providers",
]

CONFIG_PROVIDERS = "config.providers"
_PREFIX = "config.providers."
_PKG = "org.apache.kafka.common.config.provider."
#: Kafka's class name → tierlog's provider.
PROVIDER_CLASSES = {
    f"{_PKG}FileConfigProvider": "file",
    f"{_PKG}EnvVarConfigProvider": "env",
    f"{_PKG}DirectoryConfigProvider": "dir",
}
# Kafka's ConfigTransformer.DEFAULT_PATTERN
_REFERENCE = re.compile(r"\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}")


def is_provider_key(key: str) -> bool:
    """``config.providers`` or one of its ``config.providers.<name>.*`` keys."""
    return key == CONFIG_PROVIDERS or key.startswith(_PREFIX)


Lookup = Callable[[str | None, str], str]


def _allowed(params: Mapping[str, str], key: str) -> Callable[[Path], bool]:
    raw = params.get("allowed.paths", "").strip()
    if not raw:
        return lambda _p: True
    roots = [Path(p.strip()).resolve() for p in raw.split(",") if p.strip()]
    for r in roots:
        if not r.is_absolute():
            raise ConfigError(key, f"{r} is not an absolute path")

    def check(p: Path) -> bool:
        real = p.resolve()
        return any(real == r or r in real.parents for r in roots)

    return check


def _file_provider(name: str, params: Mapping[str, str]) -> Lookup:
    allowed = _allowed(params, f"{_PREFIX}{name}.param.allowed.paths")
    cache: dict[str, dict[str, str]] = {}

    def lookup(path: str | None, key: str) -> str:
        if not path:
            raise LookupError("the file provider needs a path: ${file:/path/to/file:key}")
        if not allowed(Path(path)):
            raise LookupError(f"{path} is not under {_PREFIX}{name}.param.allowed.paths")
        if path not in cache:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as e:
                raise LookupError(f"cannot read {path}: {e.strerror}") from None
            except UnicodeDecodeError:
                text = Path(path).read_bytes().decode("latin-1")
            cache[path] = parse_properties(text, source=path)
        values = cache[path]
        if key not in values:
            raise LookupError(f"{path} has no key {key!r}")
        return values[key]

    return lookup


def _env_provider(name: str, params: Mapping[str, str], env: Mapping[str, str]) -> Lookup:
    pattern_key = f"{_PREFIX}{name}.param.allowlist.pattern"
    try:
        allow = re.compile(params.get("allowlist.pattern", ".*"))
    except re.error as e:
        raise ConfigError(pattern_key, f"not a regular expression: {e}") from None

    def lookup(path: str | None, key: str) -> str:
        if path:
            raise LookupError("the env provider takes no path: ${env:NAME}")
        if not allow.fullmatch(key):
            raise LookupError(f"environment variable {key} does not match {pattern_key}")
        if key not in env:
            raise LookupError(f"environment variable {key} is not set")
        return env[key]

    return lookup


def _dir_provider(name: str, params: Mapping[str, str]) -> Lookup:
    allowed = _allowed(params, f"{_PREFIX}{name}.param.allowed.paths")

    def lookup(path: str | None, key: str) -> str:
        if not path:
            raise LookupError("the directory provider needs a path: ${dir:/path/to/dir:file}")
        f = Path(path) / key
        if "/" in key or key in (".", "..") or not allowed(f):
            raise LookupError(f"{key!r} is not a file directly in an allowed directory")
        try:
            return f.read_text(encoding="utf-8")
        except OSError as e:
            raise LookupError(f"cannot read {f}: {e.strerror}") from None

    return lookup


def _providers(props: Mapping[str, str], env: Mapping[str, str]) -> dict[str, Lookup]:
    names = [n.strip() for n in props.get(CONFIG_PROVIDERS, "").split(",") if n.strip()]
    out: dict[str, Lookup] = {}
    for name in names:
        class_key = f"{_PREFIX}{name}.class"
        cls = props.get(class_key, "").strip()
        if not cls:
            raise ConfigError(class_key, f"config.providers names {name}: set its class")
        kind = PROVIDER_CLASSES.get(cls)
        if kind is None:
            raise ConfigError(
                class_key, f"{cls} is not a provider tierlog has: {', '.join(PROVIDER_CLASSES)}"
            )
        param_prefix = f"{_PREFIX}{name}.param."
        params = {k[len(param_prefix) :]: v for k, v in props.items() if k.startswith(param_prefix)}
        if kind == "file":
            out[name] = _file_provider(name, params)
        elif kind == "env":
            out[name] = _env_provider(name, params, env)
        else:
            out[name] = _dir_provider(name, params)
    for key in props:
        if key.startswith(_PREFIX):
            name = key[len(_PREFIX) :].split(".", 1)[0]
            if name not in out:
                raise ConfigError(key, f"config.providers does not name the provider {name!r}")
    return out


def resolve_config_providers(
    props: Mapping[str, str], env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``props`` with every ``${provider:[path:]key}`` reference replaced by its value; the
    ``config.providers*`` keys are left out.

    Raises:
        ConfigError: a provider without a class or with one tierlog does not have; a reference
            to a provider not in ``config.providers``; a missing file, key or variable, or one
            outside what the provider may read (the message names the config key and the
            reference, never a value).
    """
    providers = _providers(props, os.environ if env is None else env)
    out: dict[str, str] = {}
    for key, raw in props.items():
        if is_provider_key(key):
            continue
        if "${" not in raw:
            out[key] = raw
            continue

        def substitute(m: re.Match[str], key: str = key) -> str:
            name, path, ref_key = m.group(1), m.group(3), m.group(4)
            lookup = providers.get(name)
            if lookup is None:
                raise ConfigError(
                    key,
                    f"{m.group(0)} refers to the config provider {name!r}, which "
                    f"config.providers does not name",
                )
            try:
                return lookup(path, ref_key)
            except LookupError as e:
                raise ConfigError(key, f"{m.group(0)}: {e.args[0]}") from None

        out[key] = _REFERENCE.sub(substitute, raw)
    return out
