"""``tierlog scram add|list|delete`` in-process: the credential file it writes, the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.cli import main
from tierlog.security.credential_store import CredentialStore
from tierlog.security.scram import ScramMechanism


def _run(tmp_path: Path, *args: str) -> int:
    return main(["scram", *args, "--override", f"log.dirs={tmp_path / 'logs'}"])


def test_add_list_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\nignored second line\n")
    assert _run(tmp_path, "add", "--user", "alice", "--password-file", str(pw)) == 0
    assert _run(
        tmp_path, "add", "--user", "alice", "--mechanism", "SCRAM-SHA-512",
        "--iterations", "4096", "--password-file", str(pw),
    ) == 0  # fmt: skip
    store = CredentialStore.in_log_dir(tmp_path / "logs")
    assert store.users() == {
        "alice": {ScramMechanism.SCRAM_SHA_256: 8192, ScramMechanism.SCRAM_SHA_512: 4096}
    }
    assert "s3cret" not in store.path.read_text()
    capsys.readouterr()
    assert _run(tmp_path, "list") == 0
    assert capsys.readouterr().out.splitlines() == [
        "alice\tSCRAM-SHA-256\titerations=8192",
        "alice\tSCRAM-SHA-512\titerations=4096",
    ]
    assert _run(tmp_path, "delete", "--user", "alice") == 0
    assert _run(tmp_path, "delete", "--user", "alice") == 1  # nothing left to delete
    assert list(store.users()["alice"]) == [ScramMechanism.SCRAM_SHA_512]


def test_too_few_iterations_and_an_empty_password_are_refused(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("x\n")
    assert _run(
        tmp_path, "add", "--user", "a", "--iterations", "100", "--password-file", str(pw)
    ) == 2  # fmt: skip
    pw.write_text("")
    assert _run(tmp_path, "add", "--user", "a", "--password-file", str(pw)) == 2
    assert not (tmp_path / "logs" / "scram-credentials").exists()
