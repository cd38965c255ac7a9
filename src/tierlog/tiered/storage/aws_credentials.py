"""The standard AWS credential chain for ``s3://`` remote storage, so the secret key need not
be in ``server.properties`` (the order of the AWS SDKs' default chain)::

    1. rsm.config.s3.access.key / rsm.config.s3.secret.key   (the config; a config provider
                                                             reference keeps them out of it)
    2. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN      (the environment)
    3. the shared credentials file: AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials,
       section [<profile>]
    4. the shared config file: AWS_CONFIG_FILE, else ~/.aws/config, section [profile <name>]
       ([default] for the default profile)

The profile is ``rsm.config.s3.profile``, else ``AWS_PROFILE``, else ``default``. Keys are
the SDKs' ``aws_access_key_id``, ``aws_secret_access_key`` and ``aws_session_token``; the
profile's ``region`` is used when neither ``rsm.config.s3.region`` nor ``AWS_REGION`` /
``AWS_DEFAULT_REGION`` is set.

Nothing found: None, and pyarrow's own chain (instance roles, web identity) is left to try; the
ranged-GET client needs static keys, so reads then go through pyarrow (HEAD + GET). A profile
named explicitly (config or ``AWS_PROFILE``) that no file has, a file named by a variable that
cannot be read, or a profile with half a key pair is an error naming where to look.
``credential_process`` and SSO profiles are not run (an error says so).

Reads files and the environment given; thread-safe.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tierlog.errors import ConfigError
from tierlog.tiered.storage.s3_ranged_get import S3Credentials

__all__ = ["ResolvedCredentials", "resolve_aws_credentials"]


@dataclass(frozen=True, slots=True)
class ResolvedCredentials:
    credentials: S3Credentials
    #: Where they came from (for the log: never the keys).
    source: str
    #: The profile's region, when the credentials came from a profile that has one.
    region: str | None = None


def _read_ini(path: Path, key: str, *, required: bool) -> configparser.ConfigParser | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise ConfigError(key, f"cannot read {path}: no such file") from None
        return None
    except OSError as e:
        raise ConfigError(key, f"cannot read {path}: {e.strerror}") from None
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as e:
        raise ConfigError(key, f"{path} is not an AWS config file: {e.message}") from None
    return parser


def _from_section(section: configparser.SectionProxy, where: str, key: str) -> S3Credentials | None:
    access = section.get("aws_access_key_id")
    secret = section.get("aws_secret_access_key")
    if access is None and secret is None:
        if (
            "credential_process" in section
            or "sso_session" in section
            or ("sso_start_url" in section)
        ):
            raise ConfigError(
                key, f"{where} uses credential_process or SSO, which tierlog does not run"
            )
        return None
    if not access or not secret:
        raise ConfigError(
            key, f"{where} has only half a key pair (aws_access_key_id, aws_secret_access_key)"
        )
    return S3Credentials(access.strip(), secret.strip(), section.get("aws_session_token"))


def resolve_aws_credentials(
    *,
    access_key: str | None = None,
    secret_key: str | None = None,
    profile: str | None = None,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> ResolvedCredentials | None:
    """The first credentials of the chain (module docstring); None when there are none.

    Raises:
        ConfigError: half a key pair in the config or a profile; a profile named explicitly
            that no file has; a file named by ``AWS_SHARED_CREDENTIALS_FILE`` or
            ``AWS_CONFIG_FILE`` that cannot be read; a profile that needs a process or SSO.
    """
    e = os.environ if env is None else env
    if access_key is not None or secret_key is not None:
        if not (access_key and secret_key):
            raise ConfigError("s3.access.key", "s3.access.key and s3.secret.key go together")
        return ResolvedCredentials(S3Credentials(access_key, secret_key), "rsm.config.s3.*")
    access, secret = e.get("AWS_ACCESS_KEY_ID"), e.get("AWS_SECRET_ACCESS_KEY")
    if access and secret:
        creds = S3Credentials(access, secret, e.get("AWS_SESSION_TOKEN") or None)
        return ResolvedCredentials(creds, "environment (AWS_ACCESS_KEY_ID)")
    explicit = profile or e.get("AWS_PROFILE")
    name = explicit or "default"
    profile_key = "rsm.config.s3.profile" if profile else "AWS_PROFILE"
    base = (home if home is not None else Path.home()) / ".aws"
    files = (
        ("AWS_SHARED_CREDENTIALS_FILE", base / "credentials", name),
        ("AWS_CONFIG_FILE", base / "config", name if name == "default" else f"profile {name}"),
    )
    region = None
    looked: list[str] = []
    for var, default_path, section_name in files:
        path = Path(e[var]) if e.get(var) else default_path
        looked.append(str(path))
        parser = _read_ini(path, var, required=bool(e.get(var)))
        if parser is None or not parser.has_section(section_name):
            continue
        section = parser[section_name]
        region = region or section.get("region")
        found = _from_section(section, f"{path} [{section_name}]", profile_key)
        if found is not None:
            return ResolvedCredentials(found, f"{path} [{section_name}]", region)
    if explicit:
        raise ConfigError(
            profile_key,
            f"profile {name!r} has no credentials in {' or '.join(looked)} "
            "(AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE name other files)",
        )
    return None
