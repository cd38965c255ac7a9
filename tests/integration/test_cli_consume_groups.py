"""``tierlog consume`` options and ``tierlog groups delete|reset-offsets`` against a real
broker, as people run them (issue 15): each bad input with its exact message and exit code."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

from confluent_kafka import Consumer, Producer

from tests.integration.clients import cf_create_topic

T0 = 1_700_000_000_000  # record i has timestamp T0 + 1000 * i


def tierlog(broker, *args: str, bootstrap: str | None = None) -> subprocess.CompletedProcess[str]:
    server = bootstrap or broker.bootstrap
    return subprocess.run(
        [sys.executable, "-m", "tierlog.cli", *args, "--bootstrap-server", server],
        capture_output=True,
        text=True,
        timeout=90,
    )


def _produce(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            partition=partition,
            timestamp=T0 + 1000 * i,
            headers=[("h", f"x{i}".encode())] if i % 2 == 0 else None,
        )
    assert p.flush(30) == 0


def test_consume_offsets_timestamps_headers_and_json(broker, unique):
    topic = f"cons-{unique}"
    cf_create_topic(broker.bootstrap, topic, 2)
    _produce(broker.bootstrap, topic, 5, partition=0)
    _produce(broker.bootstrap, topic, 1, partition=1)

    r = tierlog(broker, "consume", topic, "--partition", "0", "--offset", "2",
                "--max-messages", "2", "--print-offset", "--print-timestamp",
                "--print-headers", "--print-key")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"0:2\tCreateTime:{T0 + 2000}\th:x2\tk2\tv2",
        f"0:3\tCreateTime:{T0 + 3000}\tNO_HEADERS\tk3\tv3",
    ]
    # -N: N records before the end; the command exits by itself when nothing more comes.
    r = tierlog(broker, "consume", topic, "-p", "0", "--offset", "-1", "--timeout-ms", "1500")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["v4"]
    r = tierlog(broker, "consume", topic, "--offset", "earliest", "--max-messages", "6",
                "--format", "json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    docs = sorted(
        (json.loads(line) for line in r.stdout.splitlines()),
        key=lambda d: (d["partition"], d["offset"]),
    )
    assert len(docs) == 6
    assert docs[0] == {
        "topic": topic,
        "partition": 0,
        "offset": 0,
        "timestamp": T0,
        "timestamp_type": "CreateTime",
        "key": "k0",
        "value": "v0",
        "headers": [["h", "x0"]],
    }
    assert [(d["partition"], d["offset"]) for d in docs] == [(0, i) for i in range(5)] + [(1, 0)]
    # At the end with --timeout-ms: no record, exit 0 once idle.
    r = tierlog(broker, "consume", topic, "--timeout-ms", "1000")
    assert (r.returncode, r.stdout) == (0, "")


def test_consume_bad_inputs(broker, unique):
    topic = f"consbad-{unique}"
    cf_create_topic(broker.bootstrap, topic, 1)
    cases = [
        (("--offset", "abc"), 2, "tierlog consume: --offset must be earliest, latest, an "
         "offset N or -N (N before the end), got 'abc'"),
        (("--offset", "1", "--group", "g"), 2,
         "tierlog consume: --offset and --partition read without a group; drop --group"),
        (("--offset", "1", "--from-beginning"), 2,
         "tierlog consume: give --offset or --from-beginning, not both"),
        (("--max-messages", "0"), 2, "tierlog consume: --max-messages must be at least 1, got 0"),
        (("--partition", "7", "--timeout-ms", "100"), 1,
         f"tierlog consume: {topic} has no partition 7 (it has 1)"),
    ]  # fmt: skip
    for extra, code, message in cases:
        r = tierlog(broker, "consume", topic, *extra)
        assert (r.returncode, r.stderr.strip()) == (code, message), extra
    r = tierlog(broker, "consume", f"nope-{unique}", "--timeout-ms", "100")
    assert (r.returncode, r.stderr.strip()) == (1, f"tierlog consume: unknown topic nope-{unique}")


def _commit(bootstrap: str, group: str, topic: str, n: int) -> None:
    """A member of ``group`` reads ``n`` records of partition 0, commits, and leaves."""
    r = subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "consume", topic, "--from-beginning", "--group",
         group, "--max-messages", str(n), "--bootstrap-server", bootstrap],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


def _committed(broker, group: str) -> str:
    r = tierlog(broker, "groups", "describe", group)
    assert r.returncode == 0, r.stderr
    return next(ln for ln in r.stdout.splitlines() if "Committed:" in ln).split("\t")[3]


def test_groups_reset_offsets_and_delete(broker, unique):
    topic = f"reset-{unique}"
    group = f"reset-g-{unique}"
    cf_create_topic(broker.bootstrap, topic, 1)
    _produce(broker.bootstrap, topic, 10)
    _commit(broker.bootstrap, group, topic, 10)
    assert _committed(broker, group) == "Committed: 10"

    r = tierlog(broker, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest",
                "--dry-run")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].split() == [group, topic, "0", "10", "0"]
    assert "(dry run: nothing committed" in r.stdout
    assert _committed(broker, group) == "Committed: 10"  # a dry run commits nothing

    def reset(*how: str) -> str:
        r = tierlog(broker, "groups", "reset-offsets", group, "--topic", f"{topic}:0", *how,
                    "--execute")  # fmt: skip
        assert r.returncode == 0, r.stderr
        return _committed(broker, group)

    assert reset("--to-earliest") == "Committed: 0"
    assert reset("--shift-by", "3") == "Committed: 3"
    assert reset("--shift-by", "-100") == "Committed: 0"  # kept within the log
    assert reset("--to-latest") == "Committed: 10"
    at = datetime.fromtimestamp((T0 + 4000) / 1000, UTC).isoformat().replace("+00:00", "Z")
    assert reset("--to-datetime", at) == "Committed: 4"
    assert reset("--to-offset", "7") == "Committed: 7"
    r = tierlog(broker, "groups", "reset-offsets", group, "--all-topics", "--to-earliest",
                "--execute")  # fmt: skip
    assert r.returncode == 0 and _committed(broker, group) == "Committed: 0"

    bad = [
        (("--topic", topic, "--to-earliest"), 2,
         "one of the arguments --dry-run --execute is required"),
        (("--topic", topic, "--to-datetime", "yesterday", "--dry-run"), 2,
         "tierlog groups reset-offsets: --to-datetime expects ISO 8601, e.g. "
         "2026-11-23T12:00:00Z, got 'yesterday'"),
        (("--topic", f"{topic}:x", "--to-earliest", "--dry-run"), 2,
         f"tierlog groups reset-offsets: --topic expects TOPIC or TOPIC:P,P, got '{topic}:x'"),
        (("--topic", f"{topic}:5", "--to-earliest", "--dry-run"), 1,
         f"tierlog groups reset-offsets: {topic} has no partition 5 (it has 1)"),
        (("--topic", f"nope-{unique}", "--to-earliest", "--dry-run"), 1,
         f"tierlog groups reset-offsets: unknown topic nope-{unique}"),
    ]  # fmt: skip
    for args, code, message in bad:
        r = tierlog(broker, "groups", "reset-offsets", group, *args)
        assert r.returncode == code, (args, r.stderr)
        assert message in r.stderr, (args, r.stderr)

    # A group with a member: no reset, no delete.
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                       "enable.auto.commit": False})  # fmt: skip
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + 60
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment()
        r = tierlog(broker, "groups", "reset-offsets", group, "--topic", topic, "--to-latest",
                    "--execute")  # fmt: skip
        assert r.returncode == 1
        assert (f"tierlog groups reset-offsets: group {group} is STABLE with 1 members; stop "
                "its consumers first") in r.stderr  # fmt: skip
        r = tierlog(broker, "groups", "delete", group)
        assert r.returncode == 1
        assert f"tierlog groups delete: {group}: " in r.stderr and "not empty" in r.stderr
    finally:
        member.close()
    r = tierlog(broker, "groups", "delete", group)
    assert (r.returncode, r.stdout.strip()) == (0, f"group {group} deleted"), r.stderr
    r = tierlog(broker, "groups", "describe", group)
    assert (r.returncode, r.stderr.strip()) == (1, f"Consumer group '{group}' does not exist.")


def test_a_dead_broker_exits_3_without_flooding_the_terminal():
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
        for args in (("topics", "list"), ("consume", "t", "--timeout-ms", "100"),
                     ("groups", "describe", "g")):  # fmt: skip
            t0 = time.monotonic()
            r = subprocess.run(
                [sys.executable, "-m", "tierlog.cli", *args, "-b", dead,
                 "--request-timeout-ms", "3000"],
                capture_output=True, text=True, timeout=90, env=dict(os.environ),
            )  # fmt: skip
            took = time.monotonic() - t0
            assert r.returncode == 3, (args, r.stderr)
            name = "tierlog consume" if args[0] == "consume" else f"tierlog {args[0]} {args[1]}"
            assert f"{name}: no broker answered at {dead}: " in r.stderr, r.stderr
            # One line per distinct librdkafka message at most, not one per reconnect.
            lines = [ln for ln in r.stderr.splitlines() if "librdkafka" in ln]
            assert len(lines) == len(set(lines)) and len(lines) <= 3, r.stderr
            assert took < 60, took
