import errno
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tierlog.errors import (
    InconsistentLogDirError,
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    KafkaStorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from tierlog.log.checkpoint_file import OffsetCheckpointFile
from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.log.partition_metadata_file import PartitionMetadataFile, uuid_to_kafka_str
from tierlog.log.topic_registry import TOPIC_REGISTRY_FILENAME, NewTopic, TopicInfo, TopicRegistry
from tierlog.records.default_records import build_batch

T0 = 1_704_067_200_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(n: int = 1, ts: int = T0, size: int = 10) -> bytes:
    return build_batch([(ts + i, b"k", bytes([65 + i % 26]) * size) for i in range(n)])


def wait_until(predicate: Callable[[], object], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


@pytest.fixture
def dirs(tmp_path):
    return [tmp_path / "d1", tmp_path / "d2"]


@pytest.fixture
def managers():
    started: list[LogManager] = []
    yield started
    for m in started:
        m.shutdown()


@pytest.fixture
def make(dirs, managers):
    def make(**kwargs: Any) -> LogManager:
        kwargs.setdefault("time_ms", Clock())
        m = LogManager(kwargs.pop("log_dirs", dirs), kwargs.pop("config", LogConfig()), **kwargs)
        m.startup()
        managers.append(m)
        return m

    return make


def read_props(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


# --------------------------------------------------------------------------- meta.properties


def test_startup_creates_dirs_and_meta_properties(make, dirs):
    m = make(node_id=3)
    ids = set()
    for d in dirs:
        assert d.is_dir()
        props = read_props(d / "meta.properties")
        assert props["version"] == "1"
        assert props["node.id"] == "3"
        assert props["cluster.id"] == m.cluster_id
        assert len(m.cluster_id) == 22
        assert uuid_to_kafka_str(m.directory_id(d)) == props["directory.id"]
        ids.add(props["directory.id"])
    assert len(ids) == 2  # one directory id per log dir


def test_cluster_and_directory_ids_survive_restart(make, dirs, managers):
    m = make()
    cluster, dir_id = m.cluster_id, m.directory_id(dirs[0])
    m.shutdown()
    m2 = make()
    assert m2.cluster_id == cluster
    assert m2.directory_id(dirs[0]) == dir_id


def test_log_dir_of_another_node_is_rejected(make, dirs, managers):
    make(node_id=1).shutdown()
    m = LogManager(dirs, LogConfig(), node_id=2)
    with pytest.raises(InconsistentLogDirError, match="node id"):
        m.startup()


def test_log_dir_that_is_a_file_is_a_storage_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(KafkaStorageError, match="file"):
        LogManager([f], LogConfig()).startup()


# --------------------------------------------------------------------------- topics


def test_create_list_get(make, dirs):
    m = make()
    info = m.create_topic("orders", 3, {"retention.ms": "1000"})
    assert info.name == "orders" and info.num_partitions == 3
    assert info.config.retention_ms == 1000
    assert info.config.source_of("retention.ms") == "TOPIC_CONFIG"
    assert m.topic("orders") == info
    assert m.topics() == {"orders": info}
    assert m.topic_by_id(info.topic_id) == info
    assert m.topic("nope") is None
    assert m.topic_by_id(uuid.uuid4()) is None
    logs = [m.get_log("orders", p) for p in range(3)]
    assert all(isinstance(lg, Log) for lg in logs)
    assert m.get_log("orders", 3) is None
    assert sorted(lg.partition for lg in m.all_logs()) == [0, 1, 2]
    for lg in logs:
        assert lg.config.retention_ms == 1000
        assert lg.topic_id == info.topic_id
        assert PartitionMetadataFile(lg.dir / "partition.metadata").read() == info.topic_id
    # spread over the log dirs by fewest partitions: 2 + 1
    counts = sorted(sum(1 for lg in logs if lg.dir.parent == d) for d in dirs)
    assert counts == [1, 2]


def test_create_with_given_topic_id(make):
    m = make()
    tid = uuid.uuid4()
    assert m.create_topic("t", 1, {}, topic_id=tid).topic_id == tid
    with pytest.raises(TopicAlreadyExists):
        m.create_topic("u", 1, {}, topic_id=tid)


def test_create_topics_writes_the_registry_once_and_answers_each_topic(make, monkeypatch):
    m = make()
    m.create_topic("old", 1, {})
    saves: list[int] = []
    save = TopicRegistry.save

    def counting_save(self: TopicRegistry, *args: Any, **kwargs: Any) -> None:
        saves.append(1)
        save(self, *args, **kwargs)

    monkeypatch.setattr(TopicRegistry, "save", counting_save)
    a, old, dotted, underscored, bad, b = m.create_topics(
        [
            NewTopic("a", 2, {}),
            NewTopic("old", 1, {}),
            NewTopic("x.y", 1, {}),
            NewTopic("x_y", 1, {}),
            NewTopic("c", 1, {"retention.ms": "soon"}),
            NewTopic("b", 3, {"retention.ms": "1000"}),
        ]
    )
    assert len(saves) == 1
    assert isinstance(old, TopicAlreadyExists)
    assert isinstance(underscored, InvalidTopic)  # collides with x.y of the same request
    assert isinstance(bad, InvalidConfig)
    assert isinstance(a, TopicInfo) and isinstance(dotted, TopicInfo) and isinstance(b, TopicInfo)
    assert sorted(m.topics()) == ["a", "b", "old", "x.y"]
    assert m.topic("b").overrides == {"retention.ms": "1000"}
    assert m.get_log("b", 2) is not None


def test_create_validate_only_creates_nothing(make, dirs):
    m = make()
    info = m.create_topic("t", 2, {"segment.bytes": "1000"}, validate_only=True)
    assert info.num_partitions == 2 and info.config.segment_size == 1000
    assert m.topic("t") is None
    assert not any((d / "t-0").exists() or (d / "t-1").exists() for d in dirs)


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "../x", "a/b", "..\\x", "x" * 250, "a b", "caf\u00e9", "a\x00", "/abs"],
)
def test_illegal_topic_names(make, dirs, name):
    m = make()
    with pytest.raises(InvalidTopic):
        m.create_topic(name, 1, {})
    assert m.topics() == {}
    # nothing was created anywhere near the log dirs
    for d in dirs:
        assert sorted(p.name for p in d.parent.iterdir()) == ["d1", "d2"]


def test_topic_errors(make):
    m = make()
    m.create_topic("a.b", 1, {})
    with pytest.raises(TopicAlreadyExists):
        m.create_topic("a.b", 1, {})
    with pytest.raises(InvalidTopic, match="collides"):
        m.create_topic("a_b", 1, {})
    with pytest.raises(InvalidPartitions):
        m.create_topic("z", 0, {})
    with pytest.raises(InvalidConfig, match=r"segmnt\.bytes"):
        m.create_topic("z", 1, {"segmnt.bytes": "1"})
    with pytest.raises(InvalidConfig, match=r"retention\.ms"):
        m.create_topic("z", 1, {"retention.ms": "soon"})
    with pytest.raises(InvalidConfig, match=r"remote\.storage\.enable"):
        m.create_topic("z", 1, {"remote.storage.enable": "true"})
    assert set(m.topics()) == {"a.b"}


def test_remote_storage_topic_needs_broker_flag(make):
    m = make(remote_log_storage_system_enable=True)
    info = m.create_topic("z", 1, {"remote.storage.enable": "true"})
    assert info.config.remote_storage_enable


def test_create_partitions(make):
    m = make()
    m.create_topic("t", 1, {})
    info = m.create_partitions("t", 3)
    assert info.num_partitions == 3 and m.topic("t").num_partitions == 3
    assert m.get_log("t", 2) is not None
    with pytest.raises(InvalidPartitions, match="already has 3"):
        m.create_partitions("t", 3)
    with pytest.raises(InvalidPartitions, match="higher"):
        m.create_partitions("t", 2)
    with pytest.raises(UnknownTopicOrPartition):
        m.create_partitions("nope", 2)


def test_delete_topic_renames_then_removes_in_background(make, dirs):
    m = make()
    info = m.create_topic("t", 2, {})
    m.get_log("t", 0).append(batch())
    m.delete_topic("t")
    assert m.topic("t") is None and m.get_log("t", 0) is None and m.all_logs() == []
    for d in dirs:
        assert not (d / "t-0").exists() and not (d / "t-1").exists()
    assert wait_until(
        lambda: not any(p.name.endswith("-delete") for d in dirs for p in d.iterdir())
    )
    with pytest.raises(UnknownTopicOrPartition):
        m.delete_topic("t")
    # the name can be used again, with a new id and empty logs
    again = m.create_topic("t", 1, {})
    assert again.topic_id != info.topic_id
    assert m.get_log("t", 0).log_end_offset == 0


def test_interrupted_delete_is_finished_at_startup(make, dirs, managers):
    m = make()
    info = m.create_topic("t", 1, {})
    lg = m.get_log("t", 0)
    d = lg.dir
    m.shutdown()
    # A crash after the registry write, before the rename: the dir is still there, and its
    # topic id is a tombstone in the registry.
    for reg in (x / TOPIC_REGISTRY_FILENAME for x in dirs):
        doc = json.loads(reg.read_text())
        del doc["topics"]["t"]
        doc["deleted_topic_ids"] = [uuid_to_kafka_str(info.topic_id)]
        reg.write_text(json.dumps(doc))
    # and a -delete dir left behind by an earlier delete
    leftover = d.parent / "old-0.0123456789abcdef0123456789abcdef-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"")
    m2 = make()
    assert m2.topic("t") is None
    assert not d.exists()
    assert wait_until(lambda: not leftover.exists())
    doc = json.loads((dirs[0] / TOPIC_REGISTRY_FILENAME).read_text())
    assert doc["deleted_topic_ids"] == []  # tombstone dropped once the dir is gone


# --------------------------------------------------------------------------- configs


def test_alter_topic_config_incremental_and_replace(make):
    m = make()
    m.create_topic("t", 2, {"retention.ms": "1000", "segment.bytes": "100000"})
    info = m.alter_topic_config(
        "t", {"retention.ms": None, "cleanup.policy": "compact"}, incremental=True
    )
    assert info.overrides == {"cleanup.policy": "compact", "segment.bytes": "100000"}
    assert info.config.retention_ms == 604_800_000
    for p in range(2):
        assert m.get_log("t", p).config.compact
    info = m.alter_topic_config("t", {"flush.messages": "1"}, incremental=False)
    assert info.overrides == {"flush.messages": "1"}
    assert m.get_log("t", 0).config.flush_interval == 1
    assert m.get_log("t", 0).config.segment_size == 1_073_741_824
    with pytest.raises(InvalidConfig, match=r"max\.message\.bytes"):
        m.alter_topic_config("t", {"max.message.bytes": "-5"}, incremental=True)
    with pytest.raises(InvalidConfig, match="bogus"):
        m.alter_topic_config("t", {"bogus": "1"}, incremental=True)
    with pytest.raises(UnknownTopicOrPartition):
        m.alter_topic_config("nope", {}, incremental=True)
    assert m.topic("t").overrides == {"flush.messages": "1"}


def test_broker_defaults_apply_to_topics(make):
    defaults = LogConfig.from_broker({"log.segment.bytes": "50000", "log.retention.ms": "10"})
    m = make(config=defaults)
    assert m.default_config is defaults
    info = m.create_topic("t", 1, {"retention.ms": "20"})
    assert info.config.segment_size == 50000
    assert info.config.source_of("segment.bytes") == "STATIC_BROKER_CONFIG"
    assert info.config.retention_ms == 20


# --------------------------------------------------------------------------- restart


def test_restart_reloads_topics_configs_ids_data_and_checkpoints(make, dirs, managers):
    m = make()
    a = m.create_topic("a", 2, {"retention.ms": "123456"})
    b = m.create_topic("b-with-dashes", 1, {})
    m.alter_topic_config("b-with-dashes", {"flush.messages": "5"}, incremental=True)
    for _ in range(3):
        m.get_log("a", 1).append(batch(2))
    lg = m.get_log("b-with-dashes", 0)
    lg.append(batch(4))
    lg.append(batch(4))
    lg.update_high_watermark(lg.log_end_offset)
    lg.delete_records_before(2)
    a1_dir = m.get_log("a", 1).dir
    m.shutdown()

    assert not any(p.name.endswith(".tmp") for d in dirs for p in d.iterdir())
    rp = OffsetCheckpointFile(a1_dir.parent / "recovery-point-offset-checkpoint").read()
    assert rp[("a", 1)] == 6
    starts = {}
    for d in dirs:
        assert (d / ".kafka_cleanshutdown").exists()
        starts.update(OffsetCheckpointFile(d / "log-start-offset-checkpoint").read())
    assert starts[("b-with-dashes", 0)] == 2

    m2 = make()
    assert set(m2.topics()) == {"a", "b-with-dashes"}
    assert m2.topic("a").topic_id == a.topic_id
    assert m2.topic("b-with-dashes").topic_id == b.topic_id
    assert m2.topic("a").overrides == {"retention.ms": "123456"}
    assert m2.topic("b-with-dashes").overrides == {"flush.messages": "5"}
    assert m2.get_log("a", 1).log_end_offset == 6
    assert m2.get_log("a", 1).config.retention_ms == 123456
    assert m2.get_log("a", 1).dir == a1_dir
    assert m2.get_log("b-with-dashes", 0).log_start_offset == 2
    assert m2.get_log("b-with-dashes", 0).log_end_offset == 8
    for d in dirs:  # the marker is for one startup only
        assert not (d / ".kafka_cleanshutdown").exists()


def test_clean_shutdown_marker_drives_recovery(make, managers, monkeypatch):
    calls = []
    real_open = Log.open

    def spy(path, config, **kwargs):
        calls.append(kwargs["had_clean_shutdown"])
        return real_open(path, config, **kwargs)

    m = make()
    m.create_topic("t", 2, {})
    m.shutdown()
    monkeypatch.setattr(Log, "open", staticmethod(spy))
    m2 = make()
    assert calls == []  # the marker vouches for the logs: opened on first use
    assert m2.get_log("t", 0) is not None and m2.get_log("t", 1) is not None
    assert calls == [True, True]
    m2.shutdown()
    calls.clear()
    for d in m.log_dirs:
        (d / ".kafka_cleanshutdown").unlink()
    make()
    assert calls == [False, False]


def test_recovery_after_unclean_shutdown_truncates_garbage(make, managers):
    m = make()
    m.create_topic("t", 1, {})
    lg = m.get_log("t", 0)
    for _ in range(5):
        lg.append(batch(3))
    segment_file = lg.dir / "00000000000000000000.log"
    m.shutdown()
    valid_size = segment_file.stat().st_size
    for d in m.log_dirs:  # an unclean shutdown: no marker ...
        (d / ".kafka_cleanshutdown").unlink()
    with open(segment_file, "ab") as f:  # ... and a torn write at the end
        f.write(batch(3)[:40] + b"\xde\xad\xbe\xef" * 10)
    m2 = make()
    lg2 = m2.get_log("t", 0)
    assert lg2.log_end_offset == 15
    assert segment_file.stat().st_size == valid_size
    assert lg2.append(batch(1)).first_offset == 15


def test_missing_checkpoints_and_corrupt_checkpoint_are_tolerated(make, managers):
    m = make()
    m.create_topic("t", 1, {})
    m.get_log("t", 0).append(batch(2))
    d = m.get_log("t", 0).dir.parent
    m.shutdown()
    (d / "recovery-point-offset-checkpoint").write_text("garbage\n")
    (d / "log-start-offset-checkpoint").unlink()
    m2 = make()
    assert m2.get_log("t", 0).log_end_offset == 2


def test_registry_copy_with_highest_epoch_wins(make, dirs, managers):
    m = make()
    m.create_topic("t", 1, {})
    m.shutdown()
    (dirs[0] / TOPIC_REGISTRY_FILENAME).unlink()  # e.g. a replaced disk
    m2 = make()
    assert set(m2.topics()) == {"t"}
    assert (dirs[0] / TOPIC_REGISTRY_FILENAME).exists()  # rewritten everywhere


def test_kafka_partition_dirs_without_registry_are_adopted(make, dirs, managers):
    dirs[0].mkdir(parents=True)
    tid = uuid.uuid4()
    lg = Log.open(dirs[0] / "legacy-1", LogConfig(), topic_id=tid)
    lg.append(batch(2))
    lg.close()
    (dirs[0] / "remote-log-index-cache").mkdir()
    (dirs[0] / "not a partition").mkdir()
    (dirs[0] / "stray-file.txt").write_text("x")
    m = make()
    info = m.topic("legacy")
    assert info is not None and info.topic_id == tid
    assert info.num_partitions == 2  # partition 0 is created empty
    assert m.get_log("legacy", 1).log_end_offset == 2
    assert m.get_log("legacy", 0).log_end_offset == 0
    assert (dirs[0] / "remote-log-index-cache").is_dir()
    assert (dirs[0] / "stray-file.txt").exists()
    m.shutdown()
    assert m.topic("legacy").topic_id == tid
    doc = json.loads((dirs[1] / TOPIC_REGISTRY_FILENAME).read_text())
    assert doc["topics"]["legacy"]["topic_id"] == uuid_to_kafka_str(tid)


def test_registered_partition_without_dir_is_recreated(make, dirs, managers):
    m = make()
    m.create_topic("t", 2, {})
    lg_dir = m.get_log("t", 1).dir
    m.shutdown()
    import shutil

    shutil.rmtree(lg_dir)
    m2 = make()
    assert m2.get_log("t", 1) is not None
    assert m2.get_log("t", 1).log_end_offset == 0


def test_partition_metadata_lost_by_a_machine_crash_is_restored_from_the_registry(
    make, dirs, managers
):
    """``partition.metadata`` is written without fsync: a machine crash may leave it missing,
    empty or torn. The registry (fsynced before the logs are created) has the topic id."""
    m = make()
    info = m.create_topic("t", 3, {})
    for p in range(3):
        m.get_log("t", p).append(batch())
    paths = [m.get_log("t", p).dir / "partition.metadata" for p in range(3)]
    m.shutdown()
    paths[0].unlink()
    paths[1].write_bytes(b"")
    paths[2].write_bytes(b"version: 0\ntopic_id: AAAA")
    for d in dirs:  # and no clean shutdown
        (d / ".kafka_cleanshutdown").unlink(missing_ok=True)
    m2 = make()
    assert m2.topic("t").topic_id == info.topic_id
    for p, path in enumerate(paths):
        assert m2.get_log("t", p).log_end_offset == 1
        assert PartitionMetadataFile(path).read() == info.topic_id


def test_delete_flushes_partition_metadata_before_the_tombstone(make, monkeypatch):
    """Once the registry forgets a topic, only ``partition.metadata`` tells a dir that
    survived a machine crash before its rename (tombstoned id: removed) from one to adopt."""
    m = make()
    m.create_topic("t", 2, {})
    events: list[str] = []
    flush = PartitionMetadataFile.flush
    save = TopicRegistry.save

    def recording_flush(self: PartitionMetadataFile) -> None:
        events.append(f"flush {self.path.parent.name}")
        flush(self)

    def recording_save(self: TopicRegistry, *args: Any, **kwargs: Any) -> None:
        events.append("registry")
        save(self, *args, **kwargs)

    monkeypatch.setattr(PartitionMetadataFile, "flush", recording_flush)
    monkeypatch.setattr(TopicRegistry, "save", recording_save)
    m.delete_topic("t")
    assert events == ["flush t-0", "flush t-1", "registry"]


# --------------------------------------------------------------------------- opened on first use


def test_a_new_partition_is_a_dir_and_its_partition_metadata_until_used(make, dirs):
    m = make()
    info = m.create_topic("t", 2, {})
    d = next(x / "t-0" for x in dirs if (x / "t-0").exists())
    assert sorted(f.name for f in d.iterdir()) == ["partition.metadata"]
    assert PartitionMetadataFile(d / "partition.metadata").read() == info.topic_id
    assert m.all_logs() == []
    lg = m.get_log("t", 0)
    assert lg is not None and lg.topic_id == info.topic_id and lg.log_end_offset == 0
    assert m.get_log("t", 0) is lg
    assert m.all_logs() == [lg]
    assert (d / "00000000000000000000.log").exists()
    assert m.get_log("t", 2) is None


def test_unopened_logs_keep_their_offsets_across_clean_restarts(make, managers):
    m = make()
    m.create_topic("t", 2, {"segment.bytes": "200"})
    lg = m.get_log("t", 0)
    for _ in range(6):
        lg.append(batch())
    lg.update_high_watermark(lg.log_end_offset)
    lg.delete_records_before(3)
    m.shutdown()
    for _ in range(2):  # restarted twice without a use: the checkpoints carry the offsets
        m = make()
        assert m.all_logs() == []
        m.shutdown()
    m = make()
    lg = m.get_log("t", 0)
    assert (lg.log_start_offset, lg.log_end_offset, lg.recovery_point) == (3, 6, 6)
    assert m.get_log("t", 1).log_end_offset == 0


def test_retention_opens_unopened_logs_that_hold_data(make, managers):
    clock = Clock()
    m = make(time_ms=clock)
    m.create_topic("t", 2, {"retention.ms": "60000", "segment.bytes": "200"})
    lg = m.get_log("t", 0)
    for _ in range(6):
        lg.append(batch(ts=T0))
    m.shutdown()
    clock.now += 3_600_000
    m = make(time_ms=clock)
    assert m.all_logs() == []
    assert m.cleanup_logs() > 0
    assert [x.partition for x in m.all_logs()] == [0]  # the empty one stays unopened


def test_a_log_that_cannot_be_opened_fails_its_use_only(make, monkeypatch):
    m = make()
    m.create_topic("t", 2, {})

    def emfile(*args: Any, **kwargs: Any) -> Log:
        raise OSError(24, "Too many open files")

    real_open = Log.open
    monkeypatch.setattr(Log, "open", staticmethod(emfile))
    with pytest.raises(KafkaStorageError, match="Too many open files"):
        m.get_log("t", 0)
    assert m.offline_log_dirs == set()
    monkeypatch.setattr(Log, "open", real_open)
    assert m.get_log("t", 0) is not None


# --------------------------------------------------------------------------- background work


def test_background_retention_deletes_old_segments(make):
    clock = Clock()
    m = make(time_ms=clock, retention_check_interval_ms=10)
    m.create_topic("t", 1, {"retention.ms": "60000", "segment.bytes": "200"})
    lg = m.get_log("t", 0)
    for _ in range(6):
        lg.append(batch(1, ts=T0, size=100))  # every batch fills a segment
    lg.update_high_watermark(lg.log_end_offset)
    segments_before = lg.number_of_segments
    assert segments_before >= 5
    time.sleep(0.05)
    assert lg.number_of_segments == segments_before  # not expired yet
    clock.now += 120_000
    # The log start offset moves before the segments leave (log_retention._delete_segments):
    # both are waited for.
    assert wait_until(lambda: lg.log_start_offset == 6 and lg.number_of_segments == 1)


def test_background_checkpoints(make):
    clock = Clock()
    m = make(
        time_ms=clock,
        flush_recovery_offset_checkpoint_interval_ms=10,
        flush_start_offset_checkpoint_interval_ms=10,
    )
    m.create_topic("t", 1, {})
    lg = m.get_log("t", 0)
    lg.append(batch(3))
    lg.flush()
    lg.update_high_watermark(3)
    lg.delete_records_before(1)
    d = lg.dir.parent
    clock.now += 100

    def written():
        rp = OffsetCheckpointFile(d / "recovery-point-offset-checkpoint").read()
        ls = OffsetCheckpointFile(d / "log-start-offset-checkpoint").read()
        return rp.get(("t", 0)) == 3 and ls.get(("t", 0)) == 1

    assert wait_until(written)


def test_background_flush_when_flush_ms_due(make):
    clock = Clock()
    m = make(time_ms=clock, flush_check_interval_ms=10)
    m.create_topic("t", 1, {"flush.ms": "1000"})
    lg = m.get_log("t", 0)
    lg.append(batch(2))
    assert lg.recovery_point == 0
    clock.now += 2000
    assert wait_until(lambda: lg.recovery_point == 2)


def test_shutdown_is_idempotent_and_operations_need_startup(dirs):
    m = LogManager(dirs, LogConfig())
    with pytest.raises(RuntimeError):
        m.create_topic("t", 1, {})
    m.startup()
    m.shutdown()
    m.shutdown()


def test_malformed_registry_entries_fall_back_to_adoption(make, dirs, managers):
    m = make()
    info = m.create_topic("t", 1, {"retention.ms": "1000"})
    m.create_topic("u", 1, {})
    m.shutdown()
    for reg in (d / TOPIC_REGISTRY_FILENAME for d in dirs):
        doc = json.loads(reg.read_text())
        doc["topics"]["t"]["topic_id"] = "not-an-id"
        doc["topics"]["u"]["configs"] = {"retention.ms": "not-a-number"}
        doc["topics"]["../evil"] = {"topic_id": "x", "partitions": 1, "configs": {}}
        reg.write_text(json.dumps(doc))
    m2 = make()
    assert set(m2.topics()) == {"t", "u"}
    assert m2.topic("t").topic_id == info.topic_id  # adopted from partition.metadata
    assert m2.topic("u").overrides == {}  # the bad override is dropped, the topic kept


def test_a_log_whose_files_fail_at_startup_fails_its_use_only(make, monkeypatch):
    """A failing file (EIO) while logs load after an unclean stop: the manager starts with
    the other logs, the dir stays online, uses of that log fail until it opens, and then it
    is recovered (never vouched for by a clean shutdown marker in between)."""
    m = make()
    m.create_topic("t", 2, {})
    for p in (0, 1):
        m.get_log("t", p).append(batch())
    # No shutdown: the next manager loads (recovers) every log.
    real_open = Log.open
    opened: list[tuple[str, bool]] = []
    disk = {"failing": True}

    def failing(path: Path, *args: Any, **kwargs: Any) -> Log:
        opened.append((path.name, kwargs["had_clean_shutdown"]))
        if path.name == "t-0" and disk["failing"]:
            raise OSError(errno.EIO, "Input/output error")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Log, "open", staticmethod(failing))
    m2 = make()
    assert m2.get_log("t", 1).log_end_offset == 1
    with pytest.raises(KafkaStorageError, match="Input/output error"):
        m2.get_log("t", 0)
    assert m2.offline_log_dirs == set()
    m2.shutdown()  # not clean for t-0's dir: it was never recovered
    opened.clear()
    disk["failing"] = False  # healed
    m3 = make()
    assert ("t-0", False) in opened  # recovered at the load, not vouched for by a marker
    assert m3.get_log("t", 0).log_end_offset == 1
