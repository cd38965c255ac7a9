"""Errors that speak (issue 15): a missing or corrupt remote object reaches a real consumer as
an error it reports, the broker logs it once per object per minute and counts it; a bad
remote store or a port in use stops the broker with a clear message before it writes
anything to its log dir.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.broker_process import ROOT
from tests.integration.clients import cf_create_topic
from tests.integration.metrics_support import scrape, value
from tests.integration.tiered_support import (
    TIERED_BROKER,
    Offsets,
    at_rest,
    finished,
    make_records,
    object_key,
    produce,
    segments,
    tiered_topic_configs,
    wait_until,
)

FETCH_ERRORS = "kafka_server_BrokerTopicMetrics_RemoteFetchErrorsPerSec_total"


def _tier_at_rest(b, topic: str, n: int) -> None:
    """A tiered topic of ``n`` records, every rolled segment copied and gone locally."""
    cf_create_topic(b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_bytes="1"))
    produce(b.bootstrap, topic, make_records(n))
    wait_until(
        lambda: (
            Offsets(b.bootstrap, topic).local > 0.6 * n
            and at_rest(b, topic, 0, local_retention_bytes=1)
            and {s["state"] for s in segments(b, topic, 0)} == {"COPY_SEGMENT_FINISHED"}
        ),
        what=f"{topic} tiered and at rest",
    )


def _consumer_errors(bootstrap: str, topic: str, offset: int, want: int) -> list[KafkaError]:
    """Consume from ``offset`` until ``want`` consumer errors came (or 60 s passed); the
    errors, in order. A record means the broker served data it must not have."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.error.backoff.ms": 100,
        }
    )
    errors: list[KafkaError] = []
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + 60
        while len(errors) < want and time.monotonic() < deadline:
            for m in consumer.consume(want - len(errors), 0.5):
                assert m.error() is not None, f"a record at {m.offset()}: data of another object?"
                errors.append(m.error())
    finally:
        consumer.close()
    return errors


def _fetch_errors(b, topic: str) -> float:
    return value(scrape(b), FETCH_ERRORS, topic=topic, partition="0")


def _failed_read_lines(log: str, segment_id: str) -> list[str]:
    return [ln for ln in log.splitlines() if "remote read of" in ln and segment_id in ln]


def test_a_missing_remote_object_is_a_consumer_error_logged_once(tiered_env):
    env = tiered_env
    b = env.start(metrics=True)
    topic = "gone-object"
    _tier_at_rest(b, topic, 1500)
    victim = finished(b, topic, 0)[1]
    if env.kind == "file":
        # `remote verify` pointed at a store that does not exist refuses, naming it, rather
        # than reporting every object missing.
        wrong = (b.workdir / "no-such-store").as_uri()
        run = subprocess.run(
            [sys.executable, "-m", "tierlog.cli", "remote", "verify", topic,
             *[x for o in b.overrides for x in ("--override", o)],
             "--override", f"rsm.config.uri={wrong}"],
            cwd=b.workdir, capture_output=True, text=True, timeout=60, env=_env(),
        )  # fmt: skip
        assert run.returncode == 2, run.stdout + run.stderr
        assert run.stdout == ""
        assert (
            f"tierlog remote: remote storage {wrong} does not exist; is rsm.config.uri right?\n"
        ) in run.stderr
    env.store.delete(object_key(env.store, victim["log_object"]))
    errors_before = _fetch_errors(b, topic)
    t0 = time.monotonic()
    errors = _consumer_errors(b.bootstrap, topic, victim["start_offset"] + 3, want=5)
    first_after = time.monotonic() - t0
    # librdkafka reports Kafka's answer to a failed remote read, UNKNOWN_SERVER_ERROR, as a
    # consumer error on every failed fetch: not a silent retry loop.
    assert len(errors) == 5, errors
    assert {e.code() for e in errors} == {KafkaError.UNKNOWN}, errors
    assert "Unknown broker error" in errors[0].str()
    print(f"first consumer error after {first_after:.2f}s (remote.fetch.max.wait.ms=3000)")
    # Every failure counted ...
    wait_until(lambda: _fetch_errors(b, topic) >= errors_before + 5, what="errors counted")
    # ... and logged once for the object (5 failures well within a minute), naming it, what
    # the client got and where to look.
    lines = _failed_read_lines(b.log_since_start(), victim["segment_id"])
    assert len(lines) == 1, lines
    assert " ERROR " in lines[0]
    assert "answering UNKNOWN_SERVER_ERROR" in lines[0]
    assert "is missing from remote storage (`tierlog remote verify` lists them)" in lines[0]
    # `tierlog consume` reports it too, and exits 1.
    run = subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "consume", topic, "-b", b.bootstrap,
         "--partition", "0", "--offset", str(victim["start_offset"]), "--timeout-ms", "30000"],
        capture_output=True, text=True, timeout=90, env=_env(),
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert (
        f"tierlog consume: Fetch from broker 0 failed at offset {victim['start_offset']}"
    ) in run.stderr
    assert "Unknown broker error" in run.stderr


def test_a_corrupt_remote_object_is_a_consumer_error(tiered_env):
    env = tiered_env
    b = env.start(metrics=True)
    topic = "corrupt-object"
    _tier_at_rest(b, topic, 1500)
    victim = finished(b, topic, 0)[1]
    key = object_key(env.store, victim["log_object"])
    data = env.store.read(key)
    env.store.write(key, bytes(len(data)))  # same size, every byte zero: no valid batch
    errors = _consumer_errors(b.bootstrap, topic, victim["start_offset"], want=3)
    assert len(errors) == 3 and {e.code() for e in errors} == {KafkaError.UNKNOWN}, errors
    wait_until(lambda: _fetch_errors(b, topic) >= 3, what="errors counted")
    lines = _failed_read_lines(b.log_since_start(), victim["segment_id"])
    assert len(lines) == 1, lines
    assert "answering UNKNOWN_SERVER_ERROR: remote segment" in lines[0]
    assert "is corrupt: corrupt data in remote segment" in lines[0]


# ----------------------------------------------------------------------- startup checks


def _serve(workdir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``tierlog serve`` expected to fail at startup."""
    args = [sys.executable, "-m", "tierlog.cli", "serve"]
    for o in (f"log.dirs={workdir / 'logs'}", *overrides):
        args += ["--override", o]
    return subprocess.run(
        args, cwd=workdir, capture_output=True, text=True, timeout=120, env=_env()
    )


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _nothing_written(workdir: Path) -> None:
    logs = workdir / "logs"
    assert not logs.exists() or not any(logs.iterdir()), sorted(logs.iterdir())


def test_a_relative_file_uri_is_refused(tmp_path):
    run = _serve(
        tmp_path,
        "listeners=PLAINTEXT://127.0.0.1:0",
        *TIERED_BROKER,
        "rsm.config.uri=file://relative/remote",
    )
    assert run.returncode != 0
    assert (
        "rsm.config.uri: 'file://relative/remote' is not an absolute file URI: 'relative' "
        "would be read as a host and the objects written to '/remote' at the filesystem "
        "root; write file:///absolute/dir (three slashes; relative paths are refused)"
    ) in run.stderr
    _nothing_written(tmp_path)
    run = _serve(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0", *TIERED_BROKER,
                 "rsm.config.uri=file:remote")  # fmt: skip
    assert "rsm.config.uri: 'file:remote' is not an absolute file URI" in run.stderr
    _nothing_written(tmp_path)


def _dead_endpoint() -> str:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


S3_DEAD = (
    "rsm.config.uri=s3://bucket/prefix",
    "rsm.config.s3.access.key=k",
    "rsm.config.s3.secret.key=s",
    "rsm.config.connect.timeout.ms=500",
    "rsm.config.retry.max.attempts=1",
)


def test_an_unreachable_remote_store_stops_startup_unless_told_to_start_anyway(tmp_path):
    endpoint = f"rsm.config.s3.endpoint={_dead_endpoint()}"
    run = _serve(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0", *TIERED_BROKER, *S3_DEAD,
                 endpoint)  # fmt: skip
    assert run.returncode != 0
    assert "remote storage s3://bucket/prefix is not reachable and writable: write a probe " \
        "object to s3://bucket/prefix/.tierlog-startup-check/" in run.stderr  # fmt: skip
    assert (
        "check rsm.config.uri and rsm.config.s3.* (endpoint, region, credentials), or set "
        "tierlog.remote.storage.startup.check=warn to start anyway"
    ) in run.stderr
    _nothing_written(tmp_path)
    # Told to start anyway, it starts and says why it may not copy.
    from tests.integration.conftest import running_broker

    with running_broker(
        tmp_path / "anyway",
        *TIERED_BROKER,
        *S3_DEAD,
        endpoint,
        "tierlog.remote.storage.startup.check=warn",
    ) as b:
        log = b.log_since_start()
        assert "WARNING" in log
        assert (
            "remote storage s3://bucket/prefix is not reachable and writable, starting anyway "
            "(tierlog.remote.storage.startup.check=warn)"
        ) in log


def test_a_bad_startup_check_value_is_refused(tmp_path):
    run = _serve(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0",
                 "tierlog.remote.storage.startup.check=maybe")  # fmt: skip
    assert run.returncode == 2
    assert "tierlog.remote.storage.startup.check" in run.stderr
    assert "maybe is not one of fail, warn, none" in run.stderr


def test_a_port_in_use_writes_nothing_to_the_log_dir(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = _serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{port}")
    assert run.returncode != 0
    assert (
        f"listener PLAINTEXT://127.0.0.1:{port} cannot bind: error while attempting to bind "
        f"on address ('127.0.0.1', {port}): address already in use"
    ) in run.stderr
    _nothing_written(tmp_path)  # no __consumer_offsets, no meta.properties
