"""Checkpoint files: Kafka's text format, round trips, clear errors, atomic writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import CorruptCheckpointError
from tierlog.log import log_file_utils
from tierlog.log.checkpoint_file import (
    EpochEntry,
    InMemoryLeaderEpochCheckpoint,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    decode_leader_epoch_checkpoint,
    encode_leader_epoch_checkpoint,
)


def test_offset_checkpoint_round_trip_and_format(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    cp.write({("orders", 1): 77, ("orders", 0): 1234, ("__consumer_offsets", 12): 0})
    assert cp.path.read_text() == ("0\n3\n__consumer_offsets 12 0\norders 0 1234\norders 1 77\n")
    assert cp.read() == {("orders", 1): 77, ("orders", 0): 1234, ("__consumer_offsets", 12): 0}
    cp.write({})
    assert cp.path.read_text() == "0\n0\n"
    assert cp.read() == {}


topic = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=20,
)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.tuples(topic, st.integers(0, 10_000)), st.integers(-1, 2**63 - 1)))
def test_offset_checkpoint_round_trip_property(offsets: dict[tuple[str, int], int]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cp = OffsetCheckpointFile(Path(d) / "cp")
        cp.write(offsets)
        assert cp.read() == offsets


def test_missing_and_empty_files(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nope").read() == {}
    assert LeaderEpochCheckpointFile(tmp_path / "nope").read() == []
    (tmp_path / "empty").write_bytes(b"")
    assert OffsetCheckpointFile(tmp_path / "empty").read() == {}
    (tmp_path / "version-only").write_bytes(b"0\n")
    assert OffsetCheckpointFile(tmp_path / "version-only").read() == {}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1\n0\n", "unrecognised version 1"),
        ("zero\n0\n", "malformed line 1"),
        ("0\nx\n", "malformed line 2"),
        ("0\n2\nt 0 5\n", r"expected \[2\] entries .* found \[1\]"),
        ("0\n1\nt 0 5\nt 1 6\n", r"expected \[1\] entries .* found \[2\]"),
        ("0\n1\nt 0\n", "malformed line 3"),
        ("0\n1\nt 0 five\n", "malformed line 3"),
        ("0\n2\nt 0 5\n\n", "malformed line 4"),
        ("0\n1\nt 0 1_000\n", "malformed line 3"),
        ("0\n1\nt 0 5 9\n", "malformed line 3"),
    ],
)
def test_malformed_offset_checkpoint(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError, match=message) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)


def test_topic_names_with_whitespace_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({("bad topic", 0): 1})
    assert not (tmp_path / "cp").exists()


def test_atomic_write_leaves_no_tmp_and_replaces_stale_tmp(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    (tmp_path / "log-start-offset-checkpoint.tmp").write_text("garbage from a crash")
    cp = OffsetCheckpointFile(path)
    cp.write({("t", 0): 5})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log-start-offset-checkpoint"]
    assert cp.read() == {("t", 0): 5}


def test_failed_write_keeps_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write({("t", 0): 5})

    def broken_fsync(fd: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk on fire"):
        cp.write({("t", 0): 6})
    monkeypatch.undo()
    assert cp.read() == {("t", 0): 5}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp"]


def test_write_atomically_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    log_file_utils.write_atomically(path, b"one")
    log_file_utils.write_atomically(path, b"")
    assert path.read_bytes() == b""
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_leader_epoch_checkpoint_round_trip(tmp_path: Path) -> None:
    path = LeaderEpochCheckpointFile.new_file(tmp_path)
    assert path.name == "leader-epoch-checkpoint"
    cp = LeaderEpochCheckpointFile(path)
    entries = [EpochEntry(0, 0), EpochEntry(3, 150), EpochEntry(7, 2**40)]
    cp.write(entries)
    assert path.read_text() == "0\n3\n0 0\n3 150\n7 1099511627776\n"
    assert cp.read() == entries
    assert encode_leader_epoch_checkpoint(entries) == path.read_bytes()
    assert decode_leader_epoch_checkpoint(path.read_bytes()) == entries


def test_reads_kafka_written_leader_epoch_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\r\n2\r\n0 0\r\n1 42\r\n")  # Windows line ends, as BufferedWriter there
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(0, 0), EpochEntry(1, 42)]
    path.write_text("0\n1\n0\n")
    with pytest.raises(CorruptCheckpointError, match="malformed line 3"):
        LeaderEpochCheckpointFile(path).read()


def test_write_if_dir_exists(tmp_path: Path) -> None:
    d = tmp_path / "topic-0"
    d.mkdir()
    cp = LeaderEpochCheckpointFile(LeaderEpochCheckpointFile.new_file(d))
    assert cp.write_if_dir_exists([EpochEntry(1, 1)])
    (d / "leader-epoch-checkpoint").unlink()
    d.rmdir()
    assert not cp.write_if_dir_exists([EpochEntry(1, 1)])
    assert not d.exists()


def test_in_memory_checkpoint() -> None:
    cp = InMemoryLeaderEpochCheckpoint()
    assert cp.read() == []
    cp.write([EpochEntry(1, 5)])
    assert cp.read() == [EpochEntry(1, 5)]
    assert cp.to_bytes() == b"0\n1\n1 5\n"


def test_replication_offset_checkpoint_as_kafka_writes_it(tmp_path: Path) -> None:
    # The high watermarks of a log dir (ReplicaManager.checkpointHighWatermarks): Kafka's name
    # and format, entries in whatever order Kafka's map gave them.
    assert log_file_utils.REPLICATION_OFFSET_CHECKPOINT_FILENAME == "replication-offset-checkpoint"
    path = tmp_path / log_file_utils.REPLICATION_OFFSET_CHECKPOINT_FILENAME
    path.write_bytes(b"0\n3\norders 1 77\n__consumer_offsets 49 0\norders 0 1234\n")
    cp = OffsetCheckpointFile(path)
    hws = cp.read()
    assert hws == {("orders", 1): 77, ("__consumer_offsets", 49): 0, ("orders", 0): 1234}
    cp.write(hws)
    assert OffsetCheckpointFile(path).read() == hws
    assert path.read_text().splitlines()[:2] == ["0", "3"]
