"""The LogManager's future replicas (tierlog.log.future_logs): a partition moving between log
dirs, the swap, and what a crash at each step leaves to the loader."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tierlog.errors import (
    KafkaStorageError,
    LogDirNotFound,
    ReplicaNotAvailable,
    UnknownTopicOrPartition,
)
from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.records.default_records import build_batch

T0 = 1_704_067_200_000


def batch(n: int, first: int = 0) -> bytes:
    return build_batch([(T0 + i, b"k", f"v{first + i}".encode()) for i in range(n)])


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "d1", tmp_path / "d2"]


@pytest.fixture
def managers() -> Any:
    started: list[LogManager] = []
    yield started
    for m in started:
        m.shutdown()


@pytest.fixture
def make(dirs: list[Path], managers: list[LogManager]) -> Any:
    def make(**kw: Any) -> LogManager:
        m = LogManager(dirs, LogConfig().with_overrides({"segment.bytes": "2048"}), **kw)
        m.startup()
        managers.append(m)
        return m

    return make


def all_records(lg: Log) -> bytes:
    """Every local batch of a log, as stored (offsets included)."""
    out = bytearray()
    offset = lg.local_log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 20)
        out += data.records
        offset = lg.log_end_offset  # one read of 1 MB covers these small logs
    return bytes(out)


def copy_all(current: Log, future: Log) -> None:
    """What the server's mover does, round after round (a follower's append)."""
    while future.log_end_offset < current.log_end_offset:
        data = current.read(future.log_end_offset, 4096)
        future.append(data.records, assign_offsets=False, origin_client=False)


def unclean(m: LogManager) -> None:
    """Make the last shutdown look like a crash: no clean shutdown marker."""
    for d in m.log_dirs:
        (d / ".kafka_cleanshutdown").unlink(missing_ok=True)


def other(m: LogManager, lg: Log) -> Path:
    (d,) = [d for d in m.log_dirs if d != lg.dir.parent]
    return d


def names(d: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith(prefix))


def filled(m: LogManager, n: int = 60) -> Log:
    m.create_topic("t", 1, {})
    lg = m.get_log("t", 0)
    assert lg is not None
    for i in range(n):
        lg.append(batch(3, 3 * i))
    return lg


def test_a_future_replica_is_filled_and_swapped_in_offsets_unchanged(make):
    m = make()
    lg = filled(m)
    before = all_records(lg)
    target = other(m, lg)
    future = m.future_logs.get_or_create("t", 0, target)
    assert future is not None
    assert future.dir.parent == target and future.dir.name.endswith("-future")
    assert future.dir.name.startswith("t-0.")
    copy_all(lg, future)
    lg.append(batch(2, 999))  # the current replica keeps taking appends meanwhile
    copy_all(lg, future)
    new = m.future_logs.replace_current_with_future_log("t", 0)
    assert m.get_log("t", 0) is new
    assert new.dir == target / "t-0"
    assert new.log_end_offset == 182
    assert all_records(new)[: len(before)] == before
    assert lg.closed
    assert m.future_logs.get("t", 0) is None
    assert new.append(batch(1)).first_offset == 182
    # The old dir is renamed -delete and removed by the background thread.
    deadline = time.monotonic() + 5
    while names(lg.dir.parent, "t-0") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert names(lg.dir.parent, "t-0") == []


def test_a_log_start_offset_moved_during_the_move_is_the_new_logs(make):
    m = make()
    lg = filled(m)
    future = m.future_logs.get_or_create("t", 0, other(m, lg))
    assert future is not None
    copy_all(lg, future)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.delete_records_before(100) >= 0  # DeleteRecords while it moves
    new = m.future_logs.replace_current_with_future_log("t", 0)
    assert new.log_start_offset == 100
    assert new.read(100, 1 << 20).records[:8] != b""


def test_the_tiered_part_is_not_copied_the_log_start_offset_is_kept(make):
    m = make()
    lg = filled(m)
    lg.update_highest_offset_in_remote_storage(lg.log_end_offset - 1)  # as if all tiered
    lg.roll()
    lg.append(batch(3, 500))
    lg._local_log_start_offset = 150
    future = m.future_logs.get_or_create("t", 0, other(m, lg))
    assert future is not None
    assert future.local_log_start_offset == 150 == future.log_end_offset
    assert future.log_start_offset == 0
    assert future.leader_epoch_cache.epoch_entries() == lg.leader_epoch_cache.epoch_entries()


def test_a_crash_between_the_two_renames_promotes_the_complete_future(make, managers):
    m = make()
    lg = filled(m)
    future = m.future_logs.get_or_create("t", 0, other(m, lg))
    assert future is not None
    copy_all(lg, future)
    before = all_records(lg)
    source, target, future_name = lg.dir, future.dir.parent, future.dir.name
    m.shutdown()
    managers.remove(m)
    # Step 2 happened (the current renamed -delete), step 3 did not.
    source.rename(source.with_name("t-0.0123456789abcdef0123456789abcdef-delete"))
    unclean(m)
    assert names(target, "t-0") == [future_name]
    m2 = make()
    lg2 = m2.get_log("t", 0)
    assert lg2 is not None and lg2.dir == target / "t-0"
    assert all_records(lg2) == before
    assert m2.future_logs.get("t", 0) is None
    assert names(target, "t-0") == ["t-0"]


def test_a_crash_before_the_swap_resumes_the_move(make, managers):
    m = make()
    lg = filled(m)
    future = m.future_logs.get_or_create("t", 0, other(m, lg))
    assert future is not None
    data = lg.read(0, 1 << 20, max_offset=30)  # whole batches below offset 30
    future.append(data.records, assign_offsets=False, origin_client=False)  # partly filled
    partial = future.log_end_offset
    assert 0 < partial < lg.log_end_offset
    before = all_records(lg)
    source_dir = lg.dir.parent
    m.shutdown()
    managers.remove(m)
    unclean(m)
    m2 = make()
    lg2 = m2.get_log("t", 0)
    assert lg2 is not None and lg2.dir.parent == source_dir  # the current one still serves
    future2 = m2.future_logs.get("t", 0)
    assert future2 is not None and future2.log_end_offset == partial
    assert future2.log_start_offset == 0
    copy_all(lg2, future2)
    new = m2.future_logs.replace_current_with_future_log("t", 0)
    assert all_records(new) == before


def test_a_second_future_of_one_partition_is_deleted_at_load(make, managers):
    m = make()
    lg = filled(m, 5)
    future = m.future_logs.get_or_create("t", 0, other(m, lg))
    assert future is not None
    m.shutdown()
    managers.remove(m)
    stray = lg.dir.parent / "t-0.ffffffffffffffffffffffffffffffff-future"
    stray.mkdir()
    m2 = make()
    loaded = m2.future_logs.get("t", 0)
    assert loaded is not None
    assert not stray.exists() or loaded.dir != stray
    assert len([p for d in m2.log_dirs for p in d.glob("t-0.*-future")]) == 1


def test_moving_back_to_the_current_dir_drops_the_future(make):
    m = make()
    lg = filled(m, 5)
    future = m.future_logs.get_or_create("t", 0, other(m, lg))
    assert future is not None
    assert m.future_logs.get_or_create("t", 0, lg.dir.parent) is None
    assert m.future_logs.get("t", 0) is None
    assert future.closed


def test_deleting_the_topic_drops_its_future_replica(make):
    m = make()
    lg = filled(m, 5)
    target = other(m, lg)
    future = m.future_logs.get_or_create("t", 0, target)
    assert future is not None
    m.delete_topic("t")
    assert m.future_logs.get("t", 0) is None
    assert not future.dir.exists()  # renamed -delete


def test_errors(make, tmp_path):
    m = make()
    filled(m, 1)
    with pytest.raises(LogDirNotFound):
        m.future_logs.check_dir(str(tmp_path / "elsewhere"))
    with pytest.raises(UnknownTopicOrPartition):
        m.future_logs.get_or_create("nope", 0, m.log_dirs[0])
    with pytest.raises(ReplicaNotAvailable):
        m.future_logs.get_or_create("t", 5, m.log_dirs[0])
    assert m.future_logs.check_dir(str(m.log_dirs[1])) == m.log_dirs[1]
    m._offline_dirs.add(m.log_dirs[1])
    with pytest.raises(KafkaStorageError):
        m.future_logs.check_dir(str(m.log_dirs[1]))
    with pytest.raises(KafkaStorageError):
        m.future_logs.get_or_create("t", 0, m.log_dirs[0])


def test_a_preferred_log_dir_places_a_partition_created_later(make):
    m = make()
    d1, d2 = m.log_dirs
    # By default partition 0 goes to d1 (the emptier dir, the first on ties), 1 to d2.
    m.future_logs.update_preferred_log_dir("later", 0, d2)
    m.create_topic("later", 2, {})
    assert m.get_log("later", 0).dir.parent == d2
    assert m.get_log("later", 1).dir.parent == d1  # the emptier one then
    # Used once: a re-created partition goes where the broker chooses.
    m.delete_topic("later")
    m.create_topic("later", 2, {})
    assert m.get_log("later", 0).dir.parent == d1
