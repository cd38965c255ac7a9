"""``tierlog topics|produce|consume|groups`` as people run them, against a real broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import hypothesis


def tierlog(broker, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tierlog.cli", *args, "--bootstrap-server", broker.bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_topics_produce_consume_groups(broker, unique):
    topic = f"cli-{unique}"
    r = tierlog(
        broker, "topics", "create", topic, "--partitions", "2", "--config", "retention.ms=3600000"
    )
    assert r.returncode == 0, r.stderr
    r = tierlog(broker, "topics", "create", topic)
    assert r.returncode == 1 and "already exists" in r.stderr
    assert tierlog(broker, "topics", "create", topic, "--if-not-exists").returncode == 0
    assert topic in tierlog(broker, "topics", "list").stdout.split()

    r = tierlog(broker, "topics", "describe", topic)
    assert r.returncode == 0, r.stderr
    assert "PartitionCount: 2" in r.stdout and "retention.ms=3600000" in r.stdout

    r = tierlog(
        broker,
        "topics",
        "alter",
        topic,
        "--config",
        "segment.bytes=1048576",
        "--delete-config",
        "retention.ms",
        "--partitions",
        "3",
    )
    assert r.returncode == 0, r.stderr
    r = tierlog(broker, "topics", "describe", topic)
    assert "PartitionCount: 3" in r.stdout and "segment.bytes=1048576" in r.stdout
    assert "retention.ms" not in r.stdout

    r = tierlog(
        broker,
        "produce",
        topic,
        "--key-separator",
        ":",
        "--partition",
        "1",
        stdin="k1:hello\nworld\n",
    )
    assert r.returncode == 0, r.stderr
    r = tierlog(
        broker,
        "consume",
        topic,
        "--from-beginning",
        "--max-messages",
        "2",
        "--print-key",
        "--print-offset",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["1:0\tk1\thello", "1:1\tnull\tworld"]

    group = f"cli-g-{unique}"
    r = tierlog(
        broker, "consume", topic, "--from-beginning", "--group", group, "--max-messages", "2"
    )
    assert r.stdout.splitlines() == ["hello", "world"]
    r = tierlog(broker, "groups", "list")
    assert any(line.split("\t")[0] == group for line in r.stdout.splitlines())
    r = tierlog(broker, "groups", "describe", group)
    assert r.returncode == 0, r.stderr
    assert "Committed: 2" in r.stdout and "Lag: 0" in r.stdout

    assert tierlog(broker, "topics", "delete", topic).returncode == 0
    r = tierlog(broker, "topics", "describe", topic)
    assert r.returncode == 1 and "unknown topic" in r.stderr


def test_bad_arguments_and_no_broker():
    r = subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "topics", "create", "x", "--config", "novalue"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and "KEY=VALUE" in r.stderr


def test_serve_refuses_unknown_keys_and_bad_values(tmp_path):
    for override, key in (
        ("log.segmnt.bytes=5", "log.segmnt.bytes"),
        ("num.partitions=x", "num.partitions"),
    ):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "tierlog.cli",
                "serve",
                "--override",
                override,
                "--override",
                f"log.dirs={tmp_path}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode != 0
        assert key in r.stderr


def test_a_broker_process_keeps_hypothesis_out(broker):
    """kio registers a hypothesis strategy for its types whenever hypothesis imports, and
    one of them builds a table of characters cached under ``.hypothesis/`` in the working
    directory: 2.5 s of CPU and 200 MB at every start of a broker in a new directory. The
    broker keeps hypothesis out (``tierlog.cli._without_kio_test_strategies``), so nothing
    appears there although hypothesis is installed here."""
    assert hypothesis.__version__  # installed: the broker could import it
    assert broker.proc is not None
    cwd = Path(f"/proc/{broker.proc.pid}/cwd").readlink()
    assert cwd == broker.workdir.resolve()
    assert (cwd / "broker.log").exists()
    assert not (cwd / ".hypothesis").exists(), sorted(p.name for p in cwd.iterdir())


def test_bulk_produce_shows_progress_on_a_terminal_only(broker, unique):
    """A bulk produce (stdin piped in) shows tqdm's bar on stderr when stderr is a terminal
    (a pty here), and nothing of it when stderr is a pipe, so scripts see only the summary."""
    import os
    import pty

    topic = f"bulk-{unique}"
    lines = "".join(f"line {i}\n" for i in range(20_000))
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tierlog.cli", "produce", topic,
             "--bootstrap-server", broker.bootstrap],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=terminal,
        )  # fmt: skip
        os.close(terminal)
        assert proc.stdin is not None
        proc.stdin.write(lines.encode())
        proc.stdin.close()
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the pty closed with the process
                break
            if not chunk:
                break
            shown += chunk
        assert proc.wait(60) == 0
    finally:
        os.close(controller)
    text = shown.decode(errors="replace")
    assert f"producing to {topic}" in text and "records" in text, text[-2000:]
    assert "20000 records produced" in text
    piped = tierlog(broker, "produce", topic, stdin="one more\n")
    assert piped.returncode == 0
    assert piped.stderr.strip() == f"1 records produced to {topic}", piped.stderr
