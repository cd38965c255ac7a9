"""Tiered storage under faults, with a real broker process and real clients, against a
local-dir remote store and a real S3 server (SeaweedFS, ``s3``):

* the remote store down during copies (no local segment deleted, no COPY_SEGMENT_FINISHED,
  recovery when it is back) and during reads and timestamp searches (a retriable error for
  that partition only, never wrong data);
* the broker SIGKILLed in the middle of an upload and of a delete: the restart converges
  (no dangling STARTED state, no orphan object, no data loss); SIGKILLed in the middle of a
  deleted topic's remote deletion: the restart resumes it (nothing of the topic left);
* a corrupt metadata cache file (falls back to re-reading the topic), corrupt remote index
  cache files (fetched again), a remote object deleted behind the broker's back
  (``tierlog remote verify`` reports it, reads of it fail clearly).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time

from confluent_kafka import Consumer, TopicPartition

from tests.integration.clients import cf_admin, cf_create_topic
from tests.integration.tiered_support import (
    Offsets,
    all_gone,
    assert_same,
    at_rest,
    consume,
    decode,
    fetch,
    finished,
    make_records,
    object_key,
    produce,
    remote_ls,
    segments,
    tiered_topic_configs,
    verify,
    wait_until,
)
from tests.integration.wire import WireClient, request_class
from tierlog.server.tiered_storage import PENDING_DELETIONS_FILENAME, PendingDeletions


def _tier(b, topic: str, n: int, partitions: int = 1, **configs: str) -> list:
    """Create a tiered topic, produce ``n`` records to each partition, wait until most of it
    is remote; the records of partition 0."""
    configs.setdefault("local_retention_bytes", "1")
    cf_create_topic(b.bootstrap, topic, partitions, **tiered_topic_configs(**configs))
    sent = make_records(n)
    for p in range(partitions):
        produce(b.bootstrap, topic, sent, partition=p)
    for p in range(partitions):
        wait_until(
            lambda p=p: Offsets(b.bootstrap, topic, p).local > 0.6 * n, what=f"{topic}-{p} tiered"
        )
    return sent


def _wait_at_rest(b, topic: str, partitions: int) -> None:
    """Until every rolled segment of each partition is copied (all COPY_SEGMENT_FINISHED)
    and local retention is done (tiered_support.at_rest; the topics of _tier keep 1 byte)."""
    for p in range(partitions):
        wait_until(
            lambda p=p: (
                at_rest(b, topic, p, local_retention_bytes=1)
                and {s["state"] for s in segments(b, topic, p)} == {"COPY_SEGMENT_FINISHED"}
            ),
            what=f"{topic}-{p} tiered and at rest",
        )


def _converged(b, topic: str, n: int) -> bool:
    """Everything but the active segment tiered and no STARTED state left."""
    states = {s["state"] for s in segments(b, topic)}
    return Offsets(b.bootstrap, topic).local > 0.6 * n and states == {"COPY_SEGMENT_FINISHED"}


def _list_offsets(bootstrap: str, wanted: list[tuple[str, int]]) -> list[tuple[int, int, int]]:
    """One ListOffsets v8 request for ``(topic, timestamp)`` (partition 0 of each); per entry
    (error code, offset, timestamp), in order."""
    cls = request_class(2, 8)
    m = importlib.import_module(cls.__module__)
    req = cls(
        replica_id=-1,
        isolation_level=0,
        topics=tuple(
            m.ListOffsetsTopic(
                name=topic, partitions=(m.ListOffsetsPartition(partition_index=0, timestamp=ts),)
            )
            for topic, ts in wanted
        ),
    )
    c = WireClient(bootstrap, timeout=60)
    try:
        resp = c.call(req)
    finally:
        c.close()
    out = []
    for t in resp.topics:
        (p,) = t.partitions
        out.append((p.error_code, p.offset, p.timestamp))
    return out


# --------------------------------------------------------------------------- store down


def test_remote_store_down_during_copy(tiered_env):
    env = tiered_env
    b = env.start()
    topic = "copydown"
    cf_create_topic(b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_bytes="1"))
    env.store.down()
    try:
        sent = make_records(1500)
        produce(b.bootstrap, topic, sent)
        wait_until(
            lambda: b.log_since_start().count("copying segments of") >= 3,
            what="copy attempts failing",
        )
        off = Offsets(b.bootstrap, topic)
        assert (off.earliest, off.local, off.tiered) == (0, 0, -1)  # nothing deleted locally
        assert not finished(b, topic)  # and no COPY_SEGMENT_FINISHED for a failed upload
    finally:
        env.store.up()
    wait_until(lambda: _converged(b, topic, len(sent)), what="copies recovered")
    rc, out = verify(b, topic)  # failed attempts left no orphan objects
    assert rc == 0, out
    assert_same(sent, consume(b.bootstrap, topic, len(sent)))


def test_remote_store_down_during_reads(tiered_env):
    env = tiered_env
    b = env.start()
    topic = "readdown"
    sent = _tier(b, topic, 1500)
    local = "readdown-local"
    cf_create_topic(b.bootstrap, local, 1)
    local_sent = make_records(10)
    produce(b.bootstrap, local, local_sent)
    # Record 100 is in remote storage only; every local record is later than it.
    assert Offsets(b.bootstrap, topic).local > 100 and local_sent[0][3] > sent[100][3]
    searches = [(topic, sent[100][3]), (local, sent[100][3])]
    local_answer = (0, 0, local_sent[0][3])
    consumer = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    got: list = []
    env.store.down()
    try:
        # One fetch, two partitions: the remote one gets a retriable error, the local one
        # its data.
        r = fetch(b.bootstrap, [(topic, 0, 0), (local, 0, 0)])
        code, records, hw, log_start = r[(topic, 0)]
        assert (code, records, hw, log_start) == (56, b"", 1500, 0)  # KAFKA_STORAGE_ERROR
        assert r[(local, 0)][0] == 0 and len(decode(r[(local, 0)][1])) == 10
        # One ListOffsets by timestamp, two partitions: the remote search gets a retriable
        # error (not the local log's answer), the local one its offset.
        assert _list_offsets(b.bootstrap, searches) == [(56, -1, -1), local_answer]
        # A consumer reading meanwhile gets nothing, and no error it would give up on.
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for m in consumer.consume(100, 0.2):
                assert m.error() is None or m.error().retriable(), m.error()
                if m.error() is None:
                    got.append(m)
        assert got == []
    finally:
        env.store.up()
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        got += [m for m in consumer.consume(1000, 0.5) if m.error() is None]
    consumer.close()
    assert_same(sent, got)
    r = fetch(b.bootstrap, [(topic, 0, 0)])
    assert r[(topic, 0)][0] == 0
    assert [x.key for x in decode(r[(topic, 0)][1])][:3] == [s[0] for s in sent[:3]]
    assert _list_offsets(b.bootstrap, searches) == [(0, 100, sent[100][3]), local_answer]


# --------------------------------------------------------------------------- kills


def test_sigkill_in_the_middle_of_an_upload_converges(tiered_env):
    env = tiered_env
    (env.faults / "hang-indexes-upload").touch()
    b = env.start(faults=True)
    topic = "killupload"
    cf_create_topic(b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_bytes="1"))
    sent = make_records(1500)
    produce(b.bootstrap, topic, sent)
    wait_until((env.faults / "hanging").exists, what="an upload stuck between its objects")
    assert Offsets(b.bootstrap, topic).local == 0  # no local segment deleted
    b.kill()
    started = segments(b, topic)
    assert [s["state"] for s in started] == ["COPY_SEGMENT_STARTED"]
    assert object_key(env.store, started[0]["log_object"])  # the .log made it, .indexes not
    (env.faults / "hang-indexes-upload").unlink()
    (env.faults / "hanging").unlink()
    b = env.start(faults=True)
    wait_until(lambda: _converged(b, topic, len(sent)), what="restart converged")
    everything = segments(b, topic, all_segments=True)
    dangling = [s for s in everything if s["segment_id"] == started[0]["segment_id"]]
    assert [s["state"] for s in dangling] == ["DELETE_SEGMENT_FINISHED"]
    rc, out = verify(b, topic)  # no orphan: the stuck upload's .log is gone
    assert rc == 0, out
    assert_same(sent, consume(b.bootstrap, topic, len(sent)))


def test_sigkill_in_the_middle_of_a_delete_converges(tiered_env):
    env = tiered_env
    b = env.start(faults=True)
    topic = "killdelete"
    sent = _tier(b, topic, 2000)
    (env.faults / "hang-delete").touch()
    cut = 700
    admin = cf_admin(b.bootstrap)
    for f in admin.delete_records([TopicPartition(topic, 0, cut)]).values():
        assert f.result(15).low_watermark == cut
    wait_until((env.faults / "hanging").exists, what="a delete stuck between its objects")
    b.kill()
    stuck = [s for s in segments(b, topic) if s["state"] == "DELETE_SEGMENT_STARTED"]
    assert len(stuck) == 1 and stuck[0]["end_offset"] < cut
    assert object_key(env.store, stuck[0]["log_object"])  # its .log is still there
    (env.faults / "hang-delete").unlink()
    (env.faults / "hanging").unlink()
    b = env.start(faults=True)
    # The copy of the segments that rolled before the kill goes on after the restart: wait for
    # it too (a segment seen COPY_SEGMENT_STARTED then is that copy, not a leftover).
    wait_until(
        lambda: (
            all_gone(b, topic, cut)
            and {s["state"] for s in segments(b, topic)} == {"COPY_SEGMENT_FINISHED"}
        ),
        what="the interrupted delete finished and every copy with it",
    )
    off = Offsets(b.bootstrap, topic)
    assert off.earliest == cut  # the DeleteRecords survived the kill
    rc, out = verify(b, topic)
    assert rc == 0, out
    tail = sent[cut:]
    assert_same(tail, consume(b.bootstrap, topic, len(tail), offset=0), cut)


def test_sigkill_in_the_middle_of_a_topic_deletion_resumes_it(tiered_env):
    env = tiered_env
    b = env.start(faults=True)
    topic = "killtopicdelete"
    _tier(b, topic, 1500, partitions=2)
    # Tiering at rest before anything is counted: a copy finishing between the two counts
    # below made them disagree (seen twice in full runs).
    _wait_at_rest(b, topic, 2)
    (topic_id,) = {p["topic_id"] for p in remote_ls(b, topic)}
    tiered_segments = {p: len(segments(b, topic, p)) for p in (0, 1)}
    assert all(tiered_segments.values())
    objects = env.store.topic_keys(topic, topic_id)
    assert len(objects) == 2 * sum(tiered_segments.values())
    pending_file = env.workdir / "logs" / PENDING_DELETIONS_FILENAME

    def pending() -> list[str]:
        return [d.topic for d in PendingDeletions(pending_file).entries()]

    def history() -> dict[int, tuple[str | None, list[str]]]:
        """Per partition of the deleted topic id: its delete state, every segment's state."""
        return {
            p["partition"]: (p["delete_state"], [s["state"] for s in p["segments"]])
            for p in remote_ls(b, topic, all_segments=True)
            if p["topic_id"] == topic_id
        }

    (env.faults / "hang-delete").touch()
    admin = cf_admin(b.bootstrap)  # referenced until its futures are done
    for f in admin.delete_topics([topic], operation_timeout=15).values():
        f.result(15)
    wait_until((env.faults / "hanging").exists, what="a remote deletion stuck between objects")
    b.kill()
    # What the dead broker left: the remote deletion pending, one segment's deletion begun.
    assert pending() == [topic]
    states = history()
    assert sum(s.count("DELETE_SEGMENT_STARTED") for _, s in states.values()) == 1
    assert "DELETE_PARTITION_FINISHED" not in {d for d, _ in states.values()}
    assert len(env.store.topic_keys(topic, topic_id)) == len(objects) - 1  # one .indexes gone
    (env.faults / "hang-delete").unlink()
    (env.faults / "hanging").unlink()

    b = env.start(faults=True)
    wait_until(lambda: pending() == [], timeout=60, what="the pending deletion resumed and done")
    assert f"resuming the remote deletion of {topic}" in b.log_since_start()
    assert env.store.topic_keys(topic, topic_id) == []  # nothing leaked
    assert history() == {
        p: ("DELETE_PARTITION_FINISHED", ["DELETE_SEGMENT_FINISHED"] * k)
        for p, k in tiered_segments.items()
    }


# --------------------------------------------------------------------------- corruption


def test_corrupt_metadata_cache_file_falls_back_to_the_topic(tiered_env):
    env = tiered_env
    b = env.start()
    topic = "corruptcache"
    cf_create_topic(b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_ms="300"))
    sent = make_records(1000)
    produce(b.bootstrap, topic, sent)
    wait_until(lambda: Offsets(b.bootstrap, topic).local == 1000, what="all tiered")
    b.stop()
    (cache_file,) = (env.workdir / "logs" / "remote-log-metadata-cache").glob(f"{topic}-0-*")
    data = bytearray(cache_file.read_bytes())
    for i in range(len(data) // 2, min(len(data), len(data) // 2 + 16)):
        data[i] ^= 0xFF
    cache_file.write_bytes(bytes(data))
    b = env.start()
    log = b.log_since_start()
    assert f"{topic}-0 ready: corrupt cache file, re-read" in log
    assert "after reading 0 records" not in log
    assert_same(sent, consume(b.bootstrap, topic, len(sent)))
    b = env.start()  # the file was rewritten at shutdown: loaded again
    assert f"{topic}-0 ready: loaded from its cache file" in b.log_since_start()


def test_corrupt_remote_index_cache_files_are_fetched_again(tiered_env):
    env = tiered_env
    b = env.start()
    topic = "corruptindex"
    cf_create_topic(b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_ms="300"))
    sent = make_records(1500)
    produce(b.bootstrap, topic, sent)
    wait_until(lambda: Offsets(b.bootstrap, topic).local == 1500, what="all tiered")
    assert_same(sent, consume(b.bootstrap, topic, len(sent)))  # fills the index cache
    b.stop()
    cache = env.workdir / "logs" / "remote-log-index-cache"
    files = sorted(cache.glob("*.index")) + sorted(cache.glob("*.timeindex"))
    assert len(files) >= 10
    for n, path in enumerate(files):
        data = bytearray(path.read_bytes())
        if n % 2:
            data = data[: len(data) - 5]  # torn: not a whole number of entries
        else:
            data[8 : 8 + 16] = os.urandom(16)  # garbage entries in the middle
        path.write_bytes(bytes(data))
    b = env.start()
    assert_same(sent, consume(b.bootstrap, topic, len(sent)))
    assert "corrupt" in b.log_since_start()


def test_remote_object_deleted_behind_our_back(tiered_env):
    env = tiered_env
    b = env.start()
    topic = "vanished"
    _tier(b, topic, 1500, partitions=2)
    # At rest first: `remote verify` below must find exactly the one missing object, not
    # also an upload still in flight.
    _wait_at_rest(b, topic, 2)
    victim = finished(b, topic, 0)[1]
    env.store.delete(object_key(env.store, victim["log_object"]))
    cli = [sys.executable, "-m", "tierlog.cli", "remote"]
    overrides = [x for o in b.overrides for x in ("--override", o)]
    run = subprocess.run(
        [*cli, "verify", topic, *overrides],
        cwd=b.workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "MISSING" in run.stdout and victim["log_object"] in run.stdout
    assert run.stdout.count("MISSING") == 1
    ls = subprocess.run(
        [*cli, "ls", f"{topic}-0", *overrides],
        cwd=b.workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ls.returncode == 0 and victim["log_object"] in ls.stdout
    # Reads of it fail clearly (UNKNOWN_SERVER_ERROR, as Kafka answers a failed remote read;
    # never other data); the other partition of the same fetch is served.
    r = fetch(b.bootstrap, [(topic, 0, victim["start_offset"] + 3), (topic, 1, 0)])
    assert r[(topic, 0)][:2] == (-1, b"")
    assert r[(topic, 1)][0] == 0 and decode(r[(topic, 1)][1])
    assert victim["segment_id"] in b.log_since_start()  # the broker names the object
    assert "`tierlog remote verify`" in b.log_since_start()
    # The segments around it still read fine.
    before = finished(b, topic, 0)[0]
    r = fetch(b.bootstrap, [(topic, 0, before["start_offset"])])
    assert r[(topic, 0)][0] == 0 and decode(r[(topic, 0)][1])
    assert remote_ls(b, topic)  # ls still lists it
