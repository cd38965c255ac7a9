"""The AWS credential chain for ``s3://`` remote storage: the chain's order, profiles in the
shared credentials and config files, every bad setup a ConfigError saying where to look; then
against SeaweedFS (which checks signatures): a store whose keys come only from a profile file
copies and reads a segment, a profile with the wrong keys is refused."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.tiered.strategies import segment
from tests.tiered.test_pyarrow_remote_storage_manager import TP, fake_batches, make_segment_files
from tierlog.errors import ConfigError, RemoteStorageError
from tierlog.tiered.storage import PyArrowRemoteStorageManager
from tierlog.tiered.storage.aws_credentials import resolve_aws_credentials
from tierlog.tiered.storage.s3_ranged_get import S3Credentials

CREDENTIALS = """\
[default]
aws_access_key_id = DEFAULTKEY
aws_secret_access_key = default-secret

[tier]
aws_access_key_id = TIERKEY
aws_secret_access_key = tier-secret
aws_session_token = tier-token

[half]
aws_access_key_id = ONLYKEY

[proc]
credential_process = /usr/bin/get-creds
"""
CONFIG = """\
[default]
region = eu-west-1

[profile other]
region = ap-south-1
aws_access_key_id = OTHERKEY
aws_secret_access_key = other-secret
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(CREDENTIALS)
    (tmp_path / ".aws" / "config").write_text(CONFIG)
    return tmp_path


def test_the_chain_in_order(home: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": "ENVKEY", "AWS_SECRET_ACCESS_KEY": "env-secret"}
    got = resolve_aws_credentials(access_key="CFG", secret_key="cfg", env=env, home=home)
    assert got is not None and got.credentials == S3Credentials("CFG", "cfg")
    got = resolve_aws_credentials(env={**env, "AWS_SESSION_TOKEN": "t"}, home=home)
    assert got is not None and got.credentials == S3Credentials("ENVKEY", "env-secret", "t")
    assert got.source == "environment (AWS_ACCESS_KEY_ID)"
    got = resolve_aws_credentials(env={}, home=home)
    assert got is not None and got.credentials == S3Credentials("DEFAULTKEY", "default-secret")
    assert got.source.endswith(".aws/credentials [default]")
    got = resolve_aws_credentials(env={"AWS_PROFILE": "tier"}, home=home)
    assert got is not None
    assert got.credentials == S3Credentials("TIERKEY", "tier-secret", "tier-token")
    got = resolve_aws_credentials(profile="other", env={"AWS_PROFILE": "tier"}, home=home)
    assert got is not None and got.credentials == S3Credentials("OTHERKEY", "other-secret")
    assert got.region == "ap-south-1" and got.source.endswith(".aws/config [profile other]")
    assert "secret" not in got.source


def test_other_files_by_variable(home: Path, tmp_path: Path) -> None:
    creds = tmp_path / "elsewhere"
    creds.write_text("[default]\naws_access_key_id=E\naws_secret_access_key=e\n")
    got = resolve_aws_credentials(env={"AWS_SHARED_CREDENTIALS_FILE": str(creds)}, home=home)
    assert got is not None and got.credentials == S3Credentials("E", "e")


def test_nothing_found_is_none(tmp_path: Path) -> None:
    assert resolve_aws_credentials(env={}, home=tmp_path) is None


@pytest.mark.parametrize(
    ("kwargs", "env", "key", "message"),
    [
        ({"access_key": "K"}, {}, "s3.access.key", "go together"),
        ({"profile": "nope"}, {}, "rsm.config.s3.profile", "profile 'nope' has no credentials"),
        ({}, {"AWS_PROFILE": "nope"}, "AWS_PROFILE", "profile 'nope' has no credentials"),
        ({"profile": "half"}, {}, "rsm.config.s3.profile", "only half a key pair"),
        ({"profile": "proc"}, {}, "rsm.config.s3.profile", "credential_process or SSO"),
        ({}, {"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/creds"},
         "AWS_SHARED_CREDENTIALS_FILE", "cannot read /nonexistent/creds"),
    ],
)  # fmt: skip
def test_errors_say_where_to_look(
    home: Path, kwargs: dict[str, str], env: dict[str, str], key: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        resolve_aws_credentials(env=env, home=home, **kwargs)
    assert e.value.key == key
    assert "default-secret" not in str(e.value) and "tier-secret" not in str(e.value)


def test_a_file_that_is_not_ini(tmp_path: Path) -> None:
    bad = tmp_path / "creds"
    bad.write_text("aws_access_key_id = X\n")  # no section
    with pytest.raises(ConfigError, match="is not an AWS config file"):
        resolve_aws_credentials(env={"AWS_SHARED_CREDENTIALS_FILE": str(bad)}, home=tmp_path)


def _store(sw, profile: str, monkeypatch: pytest.MonkeyPatch, creds: Path):  # type: ignore[no-untyped-def]
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    return PyArrowRemoteStorageManager.from_config(
        {
            "uri": f"s3://{sw.bucket}/creds-{uuid.uuid4().hex[:8]}",
            "s3.endpoint": sw.endpoint,
            "s3.region": "us-east-1",
            "s3.profile": profile,
            "retry.max.attempts": "1",
        }
    )


def test_seaweedfs_with_keys_from_a_profile_only(
    seaweedfs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    creds = tmp_path / "credentials"
    creds.write_text(
        f"[tier]\naws_access_key_id = {seaweedfs.access_key}\n"
        f"aws_secret_access_key = {seaweedfs.secret_key}\n"
        "[wrong]\naws_access_key_id = {0}\naws_secret_access_key = not-the-key\n".format(
            seaweedfs.access_key
        )
    )
    rsm = _store(seaweedfs, "tier", monkeypatch, creds)
    assert rsm.credentials_source == f"{creds} [tier]"
    assert rsm.s3_reader is not None  # one signed GET per read, with the profile's keys
    data = fake_batches(20)
    md = segment(100, 199, tp=TP, size=len(data))
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, data))
    assert rsm.fetch_log_segment(md, 0) == data
    assert rsm.fetch_log_segment(md, 10, 99) == data[10:100]

    wrong = _store(seaweedfs, "wrong", monkeypatch, creds)
    with pytest.raises(RemoteStorageError):
        wrong.copy_log_segment_data(md, make_segment_files(tmp_path, data))
    wrong.__dict__["_root"] = rsm.__dict__["_root"]  # the objects the good store wrote
    with pytest.raises(RemoteStorageError):
        wrong.fetch_log_segment(md, 0)
