"""Compacted topics on the remote tier (tierlog; Kafka refuses ``remote.storage.enable`` on
them), with a real broker process, real clients and a local-dir or SeaweedFS S3 remote store:

* every key's latest value is readable from offset 0 once the local copies are gone (only
  cleaned segments were copied; the rest of the log reads from remote storage);
* remote re-compaction shrinks what is remote once its keys are updated again;
* the broker SIGKILLed in the middle of a remote swap (the re-compacted segment finished, an
  old one being deleted): the restart converges (``tierlog remote verify`` clean, no STARTED
  state, no overlapping segment, every latest value readable).
"""

from __future__ import annotations

import itertools
import os
import time
import urllib.request
from typing import Any

from tests.integration.clients import cf_create_topic
from tests.integration.tiered_support import (
    SEGMENT_BYTES,
    Offsets,
    Sent,
    consume,
    finished,
    produce,
    segments,
    tiered_topic_configs,
    verify,
    wait_until,
)

KEYS = 100

#: The log cleaner looks for work every 200 ms instead of 15 s.
CLEANER = ("log.cleaner.backoff.ms=200",)


def _configs(**extra: str) -> dict[str, str]:
    return tiered_topic_configs(
        cleanup_policy="compact",
        local_retention_bytes="1",
        min_cleanable_dirty_ratio="0.01",
        remote_log_compaction_interval_ms="500",
        **extra,
    )


def _updates(rounds: range) -> list[Sent]:
    """One update of each of the KEYS keys per round; the value says which round."""
    ts0 = int(time.time() * 1000)
    out: list[Sent] = []
    for r in rounds:
        for k in range(KEYS):
            value = f"round-{r:04d}-key-{k:03d}-".encode() + os.urandom(30).hex().encode()
            out.append((f"key-{k:03d}".encode(), value, [], ts0 + len(out)))
    return out


def _latest(records: list[Sent]) -> dict[bytes, bytes]:
    return {k: v for k, v, _, _ in records}


def _read_all(b: Any, topic: str, end: int | None = None) -> list[Any]:
    """Every record from offset 0 to ``end`` (default: the end offset), with a consumer
    (remote then local)."""
    end = Offsets(b.bootstrap, topic).end if end is None else end
    got: list[Any] = []
    offset = 0
    while offset < end:
        batch = consume(b.bootstrap, topic, 1, offset=offset, timeout=60)
        assert batch, f"nothing readable at {offset} (end {end})"
        more = consume(b.bootstrap, topic, 100_000, offset=offset, timeout=5)
        got += [m for m in more or batch if m.offset() < end]
        offset = (more or batch)[-1].offset() + 1
    return got


def _remote_keys_unique(b: Any, topic: str) -> bool:
    """The tiered part holds at most one record per key (re-compacted against later data)."""
    tiered = Offsets(b.bootstrap, topic).tiered
    keys = [m.key() for m in _read_all(b, topic, tiered + 1)]
    return len(keys) == len(set(keys))


def _check_latest(got: list[Any], sent: list[Sent]) -> None:
    offsets = [m.offset() for m in got]
    assert offsets == sorted(set(offsets))  # offsets only increase, no record twice
    assert {m.key(): m.value() for m in got} == _latest(sent)


def _no_overlap(b: Any, topic: str) -> bool:
    segs = segments(b, topic)
    if {s["state"] for s in segs} != {"COPY_SEGMENT_FINISHED"}:
        return False
    spans = sorted((s["start_offset"], s["end_offset"]) for s in segs)
    return all(a[1] < c[0] for a, c in itertools.pairwise(spans))


def test_compacted_topic_tiers_and_recompacts_remotely(tiered_env):
    env = tiered_env
    b = env.start(*CLEANER)
    topic = "compacted-tiered"
    cf_create_topic(b.bootstrap, topic, 1, **_configs())
    first = _updates(range(30))
    produce(b.bootstrap, topic, first)
    # Cleaned segments are copied, then deleted locally.
    off = wait_until(
        lambda: (o := Offsets(b.bootstrap, topic)).local > o.end // 2 and o,
        timeout=90,
        what="cleaned segments tiered and gone locally",
    )
    tiered_a = off.tiered
    _check_latest(_read_all(b, topic), first)
    # Every key updated again: what is remote up to tiered_a is dead, re-compaction drops it.
    second = _updates(range(30, 60))
    produce(b.bootstrap, topic, second)
    wait_until(
        lambda: Offsets(b.bootstrap, topic).tiered > tiered_a + KEYS,
        timeout=120,
        what="the second round tiered",
    )
    wait_until(
        lambda: _remote_keys_unique(b, topic) and _no_overlap(b, topic),
        timeout=120,
        what="one record per key in remote storage, no swap half done",
    )
    assert Offsets(b.bootstrap, topic).earliest == 0
    _check_latest(_read_all(b, topic), first + second)
    rc, out = verify(b, topic)
    assert rc == 0, out
    # What re-compaction replaced (a compact-only topic deletes remote segments only so) is
    # larger than what replaced it.
    everything = segments(b, topic, all_segments=True)
    deleted = [s for s in everything if s["state"] == "DELETE_SEGMENT_FINISHED"]

    def within(d: dict[str, Any], n: dict[str, Any]) -> bool:
        return n["start_offset"] <= d["start_offset"] and d["end_offset"] <= n["end_offset"]

    rewritten = [n for n in finished(b, topic) if any(within(d, n) for d in deleted)]
    replaced = [d for d in deleted if any(within(d, n) for n in rewritten)]
    assert rewritten
    assert sum(n["size"] for n in rewritten) < sum(d["size"] for d in replaced)
    assert all(s["size"] <= SEGMENT_BYTES for s in finished(b, topic))


def test_sigkill_during_a_remote_swap_converges(tiered_env):
    env = tiered_env
    b = env.start(*CLEANER, faults=True)
    topic = "compacted-swap-kill"
    cf_create_topic(b.bootstrap, topic, 1, **_configs())
    sent = _updates(range(30))
    produce(b.bootstrap, topic, sent)
    wait_until(
        lambda: (o := Offsets(b.bootstrap, topic)).local > o.end // 2,
        timeout=90,
        what="cleaned segments tiered",
    )
    # A compacted topic deletes remote segments only in a swap: the next delete is one.
    (env.faults / "hang-delete").touch()
    more = _updates(range(30, 60))
    produce(b.bootstrap, topic, more)
    wait_until((env.faults / "hanging").exists, timeout=120, what="a swap stuck in a delete")
    b.kill()
    stuck = segments(b, topic)
    deleting = [s for s in stuck if s["state"] == "DELETE_SEGMENT_STARTED"]
    assert len(deleting) == 1
    # A swap: the re-compacted segment covering it finished before it started going.
    d = deleting[0]
    assert any(
        s["state"] == "COPY_SEGMENT_FINISHED"
        and s["start_offset"] <= d["start_offset"]
        and d["end_offset"] <= s["end_offset"]
        and s["segment_id"] != d["segment_id"]
        for s in stuck
    )
    (env.faults / "hang-delete").unlink()
    (env.faults / "hanging").unlink()
    b = env.start(*CLEANER, faults=True)
    wait_until(lambda: _no_overlap(b, topic), timeout=60, what="the swap converged")
    rc, out = verify(b, topic)
    assert rc == 0, out
    _check_latest(_read_all(b, topic), sent + more)


def test_cleaner_metrics_on_the_metrics_endpoint(tiered_broker, unique):
    b = tiered_broker
    topic = f"compacted-metrics-{unique}"
    cf_create_topic(b.bootstrap, topic, 1, **_configs())
    produce(b.bootstrap, topic, _updates(range(30)))

    def scrape() -> dict[str, float]:
        url = f"http://127.0.0.1:{b.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        return {
            name: float(value)
            for name, value in (
                line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("kafka_log_")
            )
        }

    # A round over this topic keeps 100 of 3,000 records: the recopy share is then above 0
    # and at most a few percent (it only ever reflects the threads' last rounds).
    got = wait_until(
        lambda: (m := scrape()).get("kafka_log_LogCleaner_cleaner_recopy_percent", 0) > 0 and m,
        timeout=90,
        what="a cleaner round in the metrics",
    )
    for name in (
        "kafka_log_LogCleaner_max_buffer_utilization_percent",
        "kafka_log_LogCleaner_max_clean_time_secs",
        "kafka_log_LogCleanerManager_max_dirty_percent",
        "kafka_log_LogCleanerManager_time_since_last_run_ms",
    ):
        assert name in got, name
    assert got["kafka_log_LogCleaner_DeadThreadCount"] == 0
    counts = [v for k, v in got.items() if "uncleanable_partitions_count" in k]
    assert counts == [0]
