"""Tiered storage (KIP-405) through a real broker process and real clients (confluent-kafka /
librdkafka and kafka-python), each scenario against a local-dir remote store and against a
real S3 server (SeaweedFS, marked ``s3``): Kafka's tiered storage integration scenarios
(kafka-reference.md) -- offload and consume, roll and offload the active segment, enable on
an existing topic, copy disable, deletion by retention time / size / DeleteRecords, topic
deletion, ListOffsets, restart with everything tiered -- plus the topic configs as Metadata
and DescribeConfigs show them."""

from __future__ import annotations

import itertools
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from tests.integration.clients import cf_admin, cf_create_topic, kp_admin
from tests.integration.tiered_support import (
    SEGMENT_BYTES,
    Offsets,
    all_gone,
    assert_same,
    assert_same_kp,
    at_rest,
    consume,
    decode,
    fetch,
    finished,
    kp_consume,
    list_offsets,
    local_segments,
    make_records,
    produce,
    remote_ls,
    segments,
    tiered_topic_configs,
    wait_until,
)


def _alter(bootstrap: str, topic: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET (keys with '_' for '.')."""
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()
    ]
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    admin = cf_admin(bootstrap)  # kept alive until the futures are done
    for f in admin.incremental_alter_configs([res]).values():
        f.result(15)


def _topic_id(broker, topic: str) -> str:
    return str(remote_ls(broker, topic)[0]["topic_id"])


# --------------------------------------------------------------------------- offload


def test_offload_and_consume_from_a_topic_90_percent_remote(tiered_broker, unique):
    b = tiered_broker
    topic = f"offload-{unique}"
    cf_create_topic(
        b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_bytes=str(SEGMENT_BYTES))
    )
    sent = make_records(4000)
    produce(b.bootstrap, topic, sent)
    off = wait_until(
        lambda: (o := Offsets(b.bootstrap, topic)).local >= 0.88 * len(sent) and o,
        what="90 % of the topic in remote storage",
    )
    assert off.earliest == 0 and off.end == len(sent)
    assert off.tiered >= off.local - 1
    segs = finished(b, topic)
    assert segs[0]["start_offset"] == 0
    assert all(x["end_offset"] + 1 == y["start_offset"] for x, y in itertools.pairwise(segs))
    # Every record byte-identical (key, value, headers, timestamp), through two clients.
    assert_same(sent, consume(b.bootstrap, topic, len(sent)))
    assert_same_kp(sent, kp_consume(b.bootstrap, topic, len(sent)))
    # Kafka's metric names on the Prometheus endpoint (metrics.port). The copy counter grows
    # just after a segment is published FINISHED: wait for it (it only ever grows).
    labels = f'{{partition="0",topic="{topic}"}}'

    def counter(name: str) -> float:
        url = f"http://127.0.0.1:{b.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        return float(text.split(f"{name}_total{labels} ", 1)[1].split()[0])

    wait_until(
        lambda: counter("RemoteCopyBytesPerSec") >= sum(s["size"] for s in segs),
        what="the copied-bytes counter covering every finished segment",
    )
    assert counter("RemoteFetchBytesPerSec") > 0

    # issue 15: clean reads count no remote fetch error -- not even the read ahead past the
    # last remote segment. Read once every remote read (read aheads included) has finished.
    def reads_pending() -> float:
        url = f"http://127.0.0.1:{b.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        name = "\nkafka_log_remote_RemoteLogManager_RemoteLogReaderTaskQueueSize "
        return float(text.split(name, 1)[1].split()[0])

    wait_until(lambda: reads_pending() == 0, what="no remote read pending")
    assert counter("RemoteFetchErrorsPerSec") == 0


def test_roll_and_offload_the_active_segment_on_local_retention_breach(tiered_broker, unique):
    b = tiered_broker
    topic = f"roll-{unique}"
    # Segments never fill up: only the local retention breach rolls the active segment.
    cf_create_topic(
        b.bootstrap,
        topic,
        1,
        **tiered_topic_configs(segment_bytes=str(1 << 20), local_retention_ms="1000"),
    )
    sent = make_records(300)
    produce(b.bootstrap, topic, sent)
    off = wait_until(
        lambda: (o := Offsets(b.bootstrap, topic)).local == 300 and o, what="active segment tiered"
    )
    assert (off.earliest, off.tiered, off.end) == (0, 299, 300)
    segs = finished(b, topic)
    assert [(s["start_offset"], s["end_offset"]) for s in segs] == [(0, 299)]
    assert_same(sent, consume(b.bootstrap, topic, 300))


def test_enable_remote_storage_on_an_existing_topic(tiered_broker, unique):
    b = tiered_broker
    topic = f"enable-{unique}"
    cf_create_topic(b.bootstrap, topic, 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    sent = make_records(1500)
    produce(b.bootstrap, topic, sent)
    assert Offsets(b.bootstrap, topic).tiered == -1
    _alter(b.bootstrap, topic, remote_storage_enable="true", local_retention_bytes="1")
    off = wait_until(
        lambda: (o := Offsets(b.bootstrap, topic)).local > 1000 and o, what="old data tiered"
    )
    assert off.earliest == 0 and off.tiered >= off.local - 1
    assert_same(sent, consume(b.bootstrap, topic, len(sent)))


def test_copy_disable_stops_copying_and_reads_still_work(tiered_broker, unique):
    b = tiered_broker
    topic = f"copydis-{unique}"
    control = f"copyon-{unique}"  # the same configs, copying on
    for t in (topic, control):
        cf_create_topic(b.bootstrap, t, 1, **tiered_topic_configs(local_retention_bytes="1"))
    first = make_records(1000)
    produce(b.bootstrap, topic, first)
    # Disable once every rolled segment is copied: no copy run is left with work in flight.
    before = wait_until(
        lambda: at_rest(b, topic, local_retention_bytes=1), what="the first batch tiered"
    )
    copied = finished(b, topic)
    assert copied and copied[-1]["end_offset"] == before.tiered
    _alter(b.bootstrap, topic, remote_log_copy_disable="true")
    second = make_records(1000, start=1000)
    produce(b.bootstrap, topic, second)
    assert len(local_segments(b, topic)) > 1  # rolled segments copying would take
    # The copy tasks keep running meanwhile: three times over, records produced to the
    # control topic after the second batch are copied in full (each round needs a copy run
    # that starts after its records, so at least two task intervals pass).
    for r in range(3):
        produce(b.bootstrap, control, make_records(300, start=300 * r))
        wait_until(
            lambda: at_rest(b, control, local_retention_bytes=1), what="the control topic tiered"
        )
    # Nothing new tiered, nothing new deleted locally.
    assert finished(b, topic) == copied
    off = Offsets(b.bootstrap, topic)
    assert off.as_tuple() == (0, before.local, before.tiered, 2000)
    assert_same(first + second, consume(b.bootstrap, topic, 2000))
    # Copying again once re-enabled.
    _alter(b.bootstrap, topic, remote_log_copy_disable="false")
    off = wait_until(lambda: at_rest(b, topic, local_retention_bytes=1), what="copying resumed")
    assert off.tiered > 1500 and off.earliest == 0


# --------------------------------------------------------------------------- deletion


def test_delete_by_retention_time(tiered_broker, unique):
    b = tiered_broker
    topic = f"rettime-{unique}"
    now = int(time.time() * 1000)
    cf_create_topic(
        b.bootstrap,
        topic,
        1,
        **tiered_topic_configs(local_retention_bytes="1", retention_ms=str(3_600_000)),
    )
    old = make_records(1000, ts0=now - 3 * 3_600_000)
    new = make_records(500, start=1000, ts0=now)
    produce(b.bootstrap, topic, old + new)
    # Copying and expiration run on their own pools, so the log start moves segment by
    # segment. Once every rolled segment is copied, the end state is known: every segment
    # holding only old records goes; the one holding offset 1000 stays.
    wait_until(lambda: at_rest(b, topic, local_retention_bytes=1), what="everything tiered")
    boundary = max(
        base
        for base in [s["start_offset"] for s in segments(b, topic, all_segments=True)]
        + [local_segments(b, topic)[-1][0]]
        if base <= 1000
    )
    assert 1000 - 400 < boundary <= 1000

    def expired() -> Offsets | bool:
        off = Offsets(b.bootstrap, topic)
        kept = [s["start_offset"] for s in finished(b, topic)]
        return (
            off.earliest == boundary
            and min(kept, default=boundary) == boundary
            and all_gone(b, topic, boundary)
            and off
        )

    off = wait_until(expired, what="the old segments expired, their remote objects deleted")
    sent = (old + new)[off.earliest :]
    assert_same(sent, consume(b.bootstrap, topic, len(sent), offset=off.earliest), off.earliest)
    assert expired()  # and the segment holding offset 1000 stayed
    # Remote deletions are logged at INFO, naming the segment, its partition and its size.
    deleted = [
        ln
        for ln in b.log_since_start().splitlines()
        if "deleted remote segment" in ln and f":{topic}-0 (" in ln
    ]
    assert any("deleted remote segment 0-" in ln for ln in deleted), deleted
    assert all(" INFO " in ln and " bytes) from remote storage" in ln for ln in deleted)


def test_delete_by_retention_size(tiered_broker, unique):
    b = tiered_broker
    topic = f"retsize-{unique}"
    retention = 5 * SEGMENT_BYTES
    cf_create_topic(
        b.bootstrap,
        topic,
        1,
        **tiered_topic_configs(local_retention_bytes="1", retention_bytes=str(retention)),
    )
    sent = make_records(3000)
    produce(b.bootstrap, topic, sent)
    # Copying and expiration run on their own pools, so the log start moves segment by
    # segment: wait for the end state, every rolled segment copied and nothing left to trim.
    wait_until(lambda: at_rest(b, topic, local_retention_bytes=1), what="everything tiered")

    def trimmed() -> tuple[Offsets, int, int] | None:
        """(offsets, bytes retention.bytes counts, oldest segment's bytes) once the oldest
        remote segment may no longer go and everything below it is deleted."""
        off = Offsets(b.bootstrap, topic)
        kept = finished(b, topic)
        if not kept or kept[0]["start_offset"] != off.earliest:
            return None
        # Kafka's count: the remote segments and the local bytes not copied yet (the active
        # segment); the oldest segment goes while the rest still holds retention.bytes.
        active = sum(size for base, size in local_segments(b, topic) if base > off.tiered)
        total = sum(s["size"] for s in kept) + active
        oldest = kept[0]["size"]
        if total - oldest >= retention or not all_gone(b, topic, off.earliest):
            return None
        return off, total, oldest

    off, total, oldest = wait_until(trimmed, what="remote segments trimmed to retention.bytes")
    assert off.earliest > 1500  # most of the topic went
    assert total - oldest < retention
    # Not trimmed further: at least retention.bytes stays, less one segment at most (a run of
    # the expiration task may count a segment whose copy finishes meanwhile twice).
    assert total > retention - SEGMENT_BYTES
    tail = sent[off.earliest :]
    assert_same(tail, consume(b.bootstrap, topic, len(tail), offset=off.earliest), off.earliest)
    assert Offsets(b.bootstrap, topic).earliest == off.earliest  # nothing more went meanwhile


def test_delete_records_deletes_remote_segments_below_the_new_log_start(tiered_broker, unique):
    b = tiered_broker
    topic = f"delrec-{unique}"
    cf_create_topic(b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_bytes="1"))
    sent = make_records(2000)
    produce(b.bootstrap, topic, sent)
    wait_until(lambda: Offsets(b.bootstrap, topic).local > 1500, what="tiered")
    cut = 700  # inside a remote segment
    admin = cf_admin(b.bootstrap)
    for f in admin.delete_records([TopicPartition(topic, 0, cut)]).values():
        assert f.result(15).low_watermark == cut
    wait_until(lambda: all_gone(b, topic, cut), what="remote segments below the cut deleted")
    off = Offsets(b.bootstrap, topic)
    assert off.earliest == cut
    # A consumer starting at 0 is reset to the new log start and reads on from remote.
    got = consume(b.bootstrap, topic, len(sent) - cut, offset=0)
    assert_same(sent[cut:], got, cut)


def test_delete_topic_deletes_its_remote_data(tiered_broker, unique):
    from tierlog.tiered import metadata_serde
    from tierlog.tiered.remote_log_segment_metadata import (
        RemotePartitionDeleteMetadata,
        kafka_uuid_str,
    )

    b = tiered_broker
    topic = f"deltopic-{unique}"
    cf_create_topic(b.bootstrap, topic, 2, **tiered_topic_configs(local_retention_bytes="1"))
    for p in (0, 1):
        produce(b.bootstrap, topic, make_records(600), partition=p)
    for p in (0, 1):
        wait_until(lambda p=p: Offsets(b.bootstrap, topic, p).local > 300, what="tiered")
    topic_id = _topic_id(b, topic)
    assert b.store.topic_keys(topic, topic_id)
    admin = cf_admin(b.bootstrap)
    for f in admin.delete_topics([topic], operation_timeout=15).values():
        f.result(15)
    wait_until(lambda: not b.store.topic_keys(topic, topic_id), what="remote objects deleted")
    # The metadata topic says so, read by a real consumer: MARKED -> STARTED -> FINISHED.
    states: dict[int, list[str]] = {0: [], 1: []}

    def read_states() -> bool:
        for p in states:
            states[p].clear()
        c = Consumer(
            {"bootstrap.servers": b.bootstrap, "group.id": "x", "enable.auto.commit": False}
        )
        try:
            parts = [TopicPartition("__remote_log_metadata", i, 0) for i in range(3)]
            ends = {
                i: c.get_watermark_offsets(TopicPartition("__remote_log_metadata", i))[1]
                for i in range(3)
            }
            c.assign(parts)
            seen = dict.fromkeys(ends, 0)
            deadline = time.monotonic() + 10
            while any(seen[i] < ends[i] for i in ends) and time.monotonic() < deadline:
                for m in c.consume(1000, 0.5):
                    if m.error():
                        raise KafkaException(m.error())
                    seen[m.partition()] = m.offset() + 1
                    event = metadata_serde.deserialize(m.value())
                    if (
                        isinstance(event, RemotePartitionDeleteMetadata)
                        and kafka_uuid_str(event.topic_id_partition.topic_id) == topic_id
                    ):
                        states[event.topic_id_partition.partition].append(event.state.name)
        finally:
            c.close()
        return all(s and s[-1] == "DELETE_PARTITION_FINISHED" for s in states.values())

    wait_until(read_states, what="DELETE_PARTITION_FINISHED")
    for s in states.values():
        assert s == [
            "DELETE_PARTITION_MARKED",
            "DELETE_PARTITION_STARTED",
            "DELETE_PARTITION_FINISHED",
        ]
    ls = {p["partition"]: p for p in remote_ls(b, topic)}
    assert {p: x["delete_state"] for p, x in ls.items()} == {
        0: "DELETE_PARTITION_FINISHED",
        1: "DELETE_PARTITION_FINISHED",
    }
    assert not any(
        s["state"] == "COPY_SEGMENT_FINISHED" for x in ls.values() for s in x["segments"]
    )


def test_one_fetch_reads_every_remote_partition_and_followers_get_109(tiered_broker, unique):
    b = tiered_broker
    topic = f"parallel-{unique}"
    cf_create_topic(b.bootstrap, topic, 3, **tiered_topic_configs(local_retention_bytes="1"))
    sent = make_records(800)
    for p in range(3):
        produce(b.bootstrap, topic, sent, partition=p)
    for p in range(3):
        wait_until(lambda p=p: Offsets(b.bootstrap, topic, p).local > 500, what="tiered")
    # Kafka <= 4.1 serves only the first remote partition of a fetch; every one is served.
    r = fetch(b.bootstrap, [(topic, p, 10) for p in range(3)], partition_max_bytes=4096)
    for p in range(3):
        code, records, _, _ = r[(topic, p)]
        assert code == 0
        got = [x for x in decode(records) if x.offset >= 10]
        assert got and [x.key for x in got] == [k for k, *_ in sent[10 : 10 + len(got)]]
    # Followers are told to go to remote storage themselves (consumers never are).
    r = fetch(b.bootstrap, [(topic, p, 10) for p in range(3)], replica_id=1)
    assert {r[(topic, p)][:2] for p in range(3)} == {(109, b"")}


# --------------------------------------------------------------------------- list offsets


def test_list_offsets_with_remote_timestamp_search(tiered_broker, unique):
    b = tiered_broker
    topic = f"listoff-{unique}"
    cf_create_topic(
        b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_bytes=str(2 * SEGMENT_BYTES))
    )
    ts0 = int(time.time() * 1000) - 100_000
    sent = make_records(3000, ts0=ts0, ts_step=10)
    produce(b.bootstrap, topic, sent)
    # Copying and local deletion run until every rolled segment is in remote storage and two
    # segments' worth stays local: the offsets compared below (and the local log start the
    # probes straddle) are read once they no longer move.
    off = wait_until(
        lambda: at_rest(b, topic, local_retention_bytes=2 * SEGMENT_BYTES),
        what="every rolled segment tiered, local retention done",
    )
    assert off.earliest == 0 and off.end == 3000
    assert off.local >= 2000  # most of the topic is remote only
    assert off.local - 1 <= off.tiered < off.end
    assert off.tiered == max(s["end_offset"] for s in finished(b, topic))
    local = off.local
    for i in (0, 1, 5, 333, local - 2, local - 1, local, local + 7, 2999):
        assert list_offsets(b.bootstrap, topic, ts0 + 10 * i) == i, i
        assert list_offsets(b.bootstrap, topic, ts0 + 10 * i - 5) == i, i  # first ts >= target
    assert list_offsets(b.bootstrap, topic, ts0 - 1000) == 0
    assert list_offsets(b.bootstrap, topic, ts0 + 10 * 3000) == -1  # later than every record
    # The probes straddled the local log start as it stands: nothing moved meanwhile.
    assert Offsets(b.bootstrap, topic).as_tuple() == off.as_tuple()
    # librdkafka's offsets_for_times (ListOffsets v7) agrees.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "x"})
    try:
        r = c.offsets_for_times([TopicPartition(topic, 0, ts0 + 10 * 444)], timeout=10)
        assert r[0].offset == 444
    finally:
        c.close()


# --------------------------------------------------------------------------- configs


def test_metadata_and_describe_configs_show_the_remote_configs(tiered_broker, unique):
    b = tiered_broker
    topic = f"configs-{unique}"
    cf_create_topic(
        b.bootstrap,
        topic,
        1,
        **tiered_topic_configs(local_retention_ms="60000", local_retention_bytes="123456"),
    )
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    cf = cf_admin(b.bootstrap)
    configs = next(iter(cf.describe_configs([res]).values())).result(15)
    got = {k: (v.value, v.source) for k, v in configs.items()}
    assert got["remote.storage.enable"][0] == "true"
    assert got["local.retention.ms"][0] == "60000"
    assert got["local.retention.bytes"][0] == "123456"
    assert got["segment.bytes"][0] == str(SEGMENT_BYTES)
    assert got["remote.log.copy.disable"][0] == "false"
    assert got["remote.log.delete.on.disable"][0] == "false"
    overridden = {k for k, v in configs.items() if not v.is_default}
    assert {"remote.storage.enable", "local.retention.ms", "local.retention.bytes"} <= overridden
    # Metadata: the topic, and the internal metadata topic (internal, 3 partitions).
    admin = kp_admin(b.bootstrap)
    try:
        described = {
            t.get("name", t.get("topic")): t
            for t in admin.describe_topics([topic, "__remote_log_metadata"])
        }
    finally:
        admin.close()
    assert described[topic]["error_code"] == 0 and not described[topic]["is_internal"]
    internal = described["__remote_log_metadata"]
    assert internal["is_internal"] and len(internal["partitions"]) == 3
    # Kafka refuses remote storage on a compacted topic, tierlog tiers it (see
    # test_tiered_compaction.py); Kafka's rule: no disabling that keeps the data.
    cf_create_topic(b.bootstrap, f"{topic}-c", 1, **tiered_topic_configs(cleanup_policy="compact"))
    with pytest.raises(KafkaException, match=r"delete\.on\.disable"):
        _alter(b.bootstrap, topic, remote_storage_enable="false")
    with pytest.raises(KafkaException, match=r"local\.retention\.bytes"):
        _alter(b.bootstrap, topic, retention_bytes="1000")


def test_disable_remote_storage_with_delete_on_disable(tiered_broker, unique):
    b = tiered_broker
    topic = f"disable-{unique}"
    cf_create_topic(b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_bytes="1"))
    sent = make_records(1500)
    produce(b.bootstrap, topic, sent)
    # Disable once tiering is at rest: the local log start no longer moves, so the log start
    # must land exactly on it.
    off = wait_until(
        lambda: at_rest(b, topic, local_retention_bytes=1), what="every rolled segment tiered"
    )
    assert off.earliest == 0 and off.local > 1000
    topic_id = _topic_id(b, topic)
    _alter(b.bootstrap, topic, remote_storage_enable="false", remote_log_delete_on_disable="true")
    wait_until(lambda: not b.store.topic_keys(topic, topic_id), what="remote data deleted")
    after = wait_until(
        lambda: (o := Offsets(b.bootstrap, topic)).earliest == off.local and o,
        what="log start moved to the local log start",
    )
    assert (after.local, after.tiered, after.end) == (off.local, -1, len(sent))
    tail = sent[after.earliest :]
    assert_same(tail, consume(b.bootstrap, topic, len(tail), offset=0), after.earliest)


# --------------------------------------------------------------------------- restart


def test_restart_with_everything_tiered_loads_the_metadata_cache_files(tiered_env):
    env = tiered_env
    b = env.start()
    topic = "alltiered"
    cf_create_topic(b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_ms="500"))
    sent = make_records(2000)
    produce(b.bootstrap, topic, sent)
    wait_until(lambda: Offsets(b.bootstrap, topic).local == 2000, timeout=30, what="all tiered")
    b = env.start()  # SIGTERM, then start again on the same data
    log = b.log_text().rsplit("===== start #2 =====", 1)[1]
    assert "alltiered-0 ready: loaded from its cache file" in log
    assert "after reading 0 records of __remote_log_metadata" in log  # nothing re-read
    off = Offsets(b.bootstrap, topic)
    assert (off.earliest, off.local, off.end) == (0, 2000, 2000)
    assert_same(sent, consume(b.bootstrap, topic, len(sent)))
