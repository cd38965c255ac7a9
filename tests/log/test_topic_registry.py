import json
import uuid
from pathlib import Path

import pytest

from tierlog.errors import KafkaStorageError
from tierlog.log.log_config import LogConfig
from tierlog.log.partition_metadata_file import uuid_to_kafka_str
from tierlog.log.topic_registry import TOPIC_REGISTRY_FILENAME, TopicInfo, TopicRegistry


class Failures:
    """A stand-in for the LogManager's ``_storage_error``: records, marks dirs offline."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self.offline: set[Path] = set()
        self.errors: list[tuple[Path, str]] = []

    def __call__(self, e: OSError, path: Path, action: str) -> KafkaStorageError:
        self.errors.append((path, action))
        self.offline.update(d for d in self.dirs if d in path.parents)
        return KafkaStorageError(f"cannot {action} {path}: {e}")


@pytest.fixture
def dirs(tmp_path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    for d in dirs:
        d.mkdir()
    return dirs


@pytest.fixture
def failures(dirs):
    return Failures(dirs)


@pytest.fixture
def new_registry(dirs, failures):
    def new_registry(config: LogConfig | None = None) -> TopicRegistry:
        registry = TopicRegistry(
            dirs,
            config or LogConfig(),
            offline_dirs=failures.offline,
            storage_error=failures,
        )
        registry.load()
        return registry

    return new_registry


def topic(name: str, partitions: int = 1, replicas: frozenset[int] | None = None, **overrides):
    config = LogConfig().with_overrides(overrides)
    return TopicInfo(name, uuid.uuid4(), partitions, config, replicas)


def read(d: Path) -> dict:
    return json.loads((d / TOPIC_REGISTRY_FILENAME).read_bytes())


def test_topic_info_hosts_its_replicas_only():
    every = topic("t", 3)
    assert [every.hosts(p) for p in (-1, 0, 2, 3)] == [False, True, True, False]
    some = topic("t", 3, frozenset({1}))
    assert [some.hosts(p) for p in range(3)] == [False, True, False]
    assert topic("t", 1, **{"retention.ms": "1000"}).overrides == {"retention.ms": "1000"}


def test_an_empty_registry(new_registry, dirs):
    registry = new_registry()
    assert registry.topics == {} and registry.deleted_ids == frozenset()
    assert not registry.dirty
    assert registry.paths() == [d / TOPIC_REGISTRY_FILENAME for d in dirs]


def test_saved_in_every_dir_and_loaded(new_registry, dirs):
    registry = new_registry()
    a = topic("a", 3, **{"retention.ms": "1000"})
    b = topic("b", 8, frozenset({2, 5}))
    gone = uuid.uuid4()
    registry.save({"a": a, "b": b}, frozenset({gone}))
    assert registry.topics == {"a": a, "b": b} and registry.deleted_ids == {gone}
    assert (
        read(dirs[0])
        == read(dirs[1])
        == {
            "version": 1,
            "epoch": 1,
            "topics": {
                "a": {
                    "topic_id": uuid_to_kafka_str(a.topic_id),
                    "partitions": 3,
                    "configs": {"retention.ms": "1000"},
                },
                "b": {
                    "topic_id": uuid_to_kafka_str(b.topic_id),
                    "partitions": 8,
                    "configs": {},
                    "replicas": [2, 5],
                },
            },
            "deleted_topic_ids": [uuid_to_kafka_str(gone)],
        }
    )
    registry.save({"a": a})  # the tombstones stay unless given
    assert read(dirs[0])["epoch"] == 2 and registry.deleted_ids == {gone}
    loaded = new_registry()
    assert loaded.topics == {"a": a} and loaded.deleted_ids == {gone} and not loaded.dirty


def test_unchanged_topics_are_encoded_once(new_registry, monkeypatch):
    registry = new_registry()
    a, b = topic("a"), topic("b")
    registry.save({"a": a})
    encoded: list[str] = []
    dumps = json.dumps

    def counting_dumps(obj, *args, **kwargs):
        if isinstance(obj, dict) and "topic_id" in obj:
            encoded.append(obj["topic_id"])
        return dumps(obj, *args, **kwargs)

    monkeypatch.setattr(json, "dumps", counting_dumps)
    registry.save({"a": a, "b": b})
    assert encoded == [uuid_to_kafka_str(b.topic_id)]
    a2 = TopicInfo("a", a.topic_id, 2, a.config)
    registry.save({"a": a2, "b": b})
    assert encoded[1:] == [uuid_to_kafka_str(a.topic_id)]


def test_the_copy_with_the_highest_epoch_wins(new_registry, dirs):
    registry = new_registry()
    registry.save({"t": topic("t")})
    old = (dirs[1] / TOPIC_REGISTRY_FILENAME).read_bytes()
    registry.save({"u": topic("u")})
    (dirs[1] / TOPIC_REGISTRY_FILENAME).write_bytes(old)  # a crash between the copies
    loaded = new_registry()
    assert set(loaded.topics) == {"u"}
    assert loaded.dirty  # d2 lags
    loaded.persist_if_dirty()
    assert read(dirs[1]) == read(dirs[0]) and read(dirs[0])["epoch"] == 3
    assert not loaded.dirty


def test_a_missing_or_unreadable_copy_makes_it_dirty(new_registry, dirs):
    new_registry().save({"t": topic("t")})
    (dirs[0] / TOPIC_REGISTRY_FILENAME).write_text("{not json")
    loaded = new_registry()
    assert set(loaded.topics) == {"t"} and loaded.dirty
    (dirs[0] / TOPIC_REGISTRY_FILENAME).write_text('{"version": 2}')
    assert new_registry().dirty
    (dirs[0] / TOPIC_REGISTRY_FILENAME).unlink()
    assert new_registry().dirty


def test_malformed_entries_are_skipped_and_bad_overrides_dropped(new_registry, dirs):
    new_registry().save({"t": topic("t"), "u": topic("u", **{"segment.bytes": "100000"})})
    for d in dirs:
        doc = read(d)
        doc["topics"]["t"]["topic_id"] = "not-an-id"
        doc["topics"]["u"]["configs"]["retention.ms"] = "not-a-number"
        doc["topics"]["../evil"] = {"topic_id": "x", "partitions": 1, "configs": {}}
        doc["topics"]["list"] = []
        doc["deleted_topic_ids"] = ["not-an-id"]
        (d / TOPIC_REGISTRY_FILENAME).write_text(json.dumps(doc))
    loaded = new_registry()
    assert set(loaded.topics) == {"u"}
    assert loaded.topics["u"].overrides == {"segment.bytes": "100000"}
    assert loaded.deleted_ids == frozenset()


def test_broker_defaults_apply_to_loaded_topics(new_registry):
    new_registry().save({"t": topic("t", **{"retention.ms": "20"})})
    defaults = LogConfig.from_broker({"log.segment.bytes": "50000"})
    config = new_registry(defaults).topics["t"].config
    assert (config.segment_size, config.retention_ms) == (50000, 20)


def test_offline_and_failing_dirs_are_skipped(new_registry, dirs, failures):
    registry = new_registry()
    failures.offline.add(dirs[0])
    registry.save({"t": topic("t")})
    assert not (dirs[0] / TOPIC_REGISTRY_FILENAME).exists()
    assert read(dirs[1])["epoch"] == 1
    failures.offline.clear()
    (dirs[0] / TOPIC_REGISTRY_FILENAME).mkdir()  # the write fails there
    registry.save({"u": topic("u")})
    assert failures.errors == [(dirs[0] / TOPIC_REGISTRY_FILENAME, "write")]
    assert failures.offline == {dirs[0]}
    assert set(registry.topics) == {"u"} and read(dirs[1])["epoch"] == 2


def test_no_dir_written_is_an_error_and_changes_nothing(new_registry, dirs, failures):
    registry = new_registry()
    t = topic("t")
    registry.save({"t": t})
    failures.offline.update(dirs)
    with pytest.raises(KafkaStorageError, match="every log dir is offline"):
        registry.save({})
    assert registry.topics == {"t": t}
    failures.offline.clear()
    for d in dirs:
        (d / TOPIC_REGISTRY_FILENAME).unlink()
        (d / TOPIC_REGISTRY_FILENAME).mkdir()
    with pytest.raises(KafkaStorageError, match="in any log dir"):
        registry.save({})
    assert registry.topics == {"t": t}


def test_unsaved_changes_are_persisted_when_dirty(new_registry, dirs):
    registry = new_registry()
    registry.persist_if_dirty()
    assert not (dirs[0] / TOPIC_REGISTRY_FILENAME).exists()  # nothing to write
    t = topic("t")
    registry.set_unsaved({"t": t})
    assert registry.topics == {"t": t} and registry.dirty
    assert not (dirs[0] / TOPIC_REGISTRY_FILENAME).exists()
    registry.persist_if_dirty()
    assert not registry.dirty and set(read(dirs[0])["topics"]) == {"t"}
