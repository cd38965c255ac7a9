"""Every option and argument of every ``tierlog`` command has help text; --version works."""

from __future__ import annotations

import argparse

import pytest

from tierlog import __version__
from tierlog.cli import build_parser, main


def _parsers(p: argparse.ArgumentParser, path: str = "tierlog"):
    yield path, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_has_help():
    missing = [
        f"{path} {'/'.join(a.option_strings) or a.dest}"
        for path, p in _parsers(build_parser())
        for a in p._actions
        if not isinstance(a, (argparse._SubParsersAction, argparse._HelpAction))
        and not (a.help or "").strip()
    ]
    assert missing == []


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"tierlog {__version__}\n"


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for line in ("0    success", "2    bad arguments or configuration",
                 "3    no broker answered", "130  interrupted (Ctrl-C)"):  # fmt: skip
        assert line in out
