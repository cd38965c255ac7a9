"""The SCRAM credential file: atomic, private, re-read when changed, never a password."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tierlog.errors import ConfigError
from tierlog.security.credential_store import CredentialStore
from tierlog.security.scram import ScramMechanism, credential_from_password

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


def test_upsert_delete_and_a_second_reader_sees_changes(tmp_path: Path) -> None:
    a = CredentialStore.in_log_dir(tmp_path / "logs")  # the directory does not exist yet
    b = CredentialStore.in_log_dir(tmp_path / "logs")
    assert a.get("alice", SHA256) is None and a.users() == {}
    c256 = credential_from_password(SHA256, "secret-one", 4096)
    c512 = credential_from_password(SHA512, "secret-two", 8192)
    a.upsert("alice", SHA256, c256)
    a.upsert("alice", SHA512, c512)
    assert b.get("alice", SHA256) == c256  # re-read: another process's change shows up
    assert b.users() == {"alice": {SHA256: 4096, SHA512: 8192}}
    text = a.path.read_text()
    assert "secret-one" not in text and "secret-two" not in text
    assert stat.S_IMODE(a.path.stat().st_mode) == 0o600
    assert not list(a.path.parent.glob("*.tmp"))
    a.delete("alice", SHA256)
    a.delete("alice", SHA512)
    assert b.users() == {}
    a.delete("nobody", SHA256)  # idempotent


def test_a_file_that_is_not_a_credential_file_stops_startup(tmp_path: Path) -> None:
    path = tmp_path / "scram-credentials"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not a SCRAM credential file"):
        CredentialStore(path)
