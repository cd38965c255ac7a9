"""``tierlog remote ls|verify`` say which log dirs and which store they read, and stop with
a clear message when either is missing (not 100 false problems)."""

from __future__ import annotations

import pytest

from tierlog.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["remote", *args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("command", ["ls", "verify"])
def test_default_paths_are_named_and_missing_ones_refused(command, capsys, tmp_path, monkeypatch):
    # ls reads only the metadata (a missing store is a note), verify reads the store too.
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
    rc, out, err = run(capsys, command, "orders")
    assert rc == 2 and out == ""
    note = "" if command == "verify" else " (listing the metadata only)"
    assert (
        f"tierlog remote: remote storage {remote.as_uri()} does not exist; set rsm.config.uri "
        f"(--config or --override rsm.config.uri=file:///...){note}\n"
    ) in err
    other = tmp_path / "elsewhere"
    rc, out, err = run(capsys, command, "orders", "--override", f"rsm.config.uri={other.as_uri()}")
    assert rc == 2
    assert f"and remote storage {other.as_uri()}\n" in err
    assert (
        f"tierlog remote: remote storage {other.as_uri()} does not exist; is rsm.config.uri "
        f"right?{note}\n"
    ) in err
    other.mkdir()
    rc, out, err = run(capsys, command, "orders", "--override", f"rsm.config.uri={other.as_uri()}")
    assert (rc, err.splitlines()[-1]) == (2, "tierlog remote: unknown topic orders")
