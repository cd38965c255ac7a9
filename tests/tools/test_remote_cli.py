"""``tierlog remote ls|verify`` say which log dirs and which store they read, and stop with
a clear message when the log dirs are missing (not 100 false problems). A missing store with
segments to verify: tests/integration/test_remote_errors.py."""

from __future__ import annotations

import pytest

from tierlog.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["remote", *args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("command", ["ls", "verify"])
def test_default_paths_are_named_and_missing_log_dirs_refused(
    command, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    logs, remote = tmp_path / "data" / "logs", tmp_path / "data" / "remote"
    rc, out, err = run(capsys, command, "orders")
    assert rc == 2 and out == ""
    assert (
        f"tierlog remote: reading log dirs {logs} and remote storage {remote.as_uri()} "
        "(rsm.config.uri unset: the default ./data/remote of the current directory)"
    ) in err
    assert (
        f"tierlog remote: log dir {logs} does not exist; give the broker's --config or "
        "--override log.dirs=..., or run from its working directory"
    ) in err
    logs.mkdir(parents=True)
    other = tmp_path / "elsewhere"
    rc, out, err = run(capsys, command, "orders", "--override", f"rsm.config.uri={other.as_uri()}")
    assert f"and remote storage {other.as_uri()}\n" in err
    assert (rc, err.splitlines()[-1]) == (2, "tierlog remote: unknown topic orders")
