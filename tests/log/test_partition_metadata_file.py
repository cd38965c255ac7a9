"""partition.metadata: Kafka's exact bytes and Uuid string form."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import CorruptCheckpointError
from tierlog.log.partition_metadata_file import (
    PartitionMetadataFile,
    kafka_str_to_uuid,
    uuid_to_kafka_str,
)

# Kafka's Uuid.METADATA_TOPIC_ID = new Uuid(0L, 1L) prints as this; ZERO_UUID as all A's.
METADATA_TOPIC_ID = uuid.UUID(int=1)


def test_known_kafka_uuid_strings() -> None:
    assert uuid_to_kafka_str(METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert uuid_to_kafka_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert kafka_str_to_uuid("AAAAAAAAAAAAAAAAAAAAAQ") == METADATA_TOPIC_ID
    # URL-safe alphabet: 0xfb... encodes with '-' and '_' rather than '+' and '/'.
    all_ones = uuid.UUID(int=2**128 - 1)
    assert uuid_to_kafka_str(all_ones) == "_____________________w"
    assert kafka_str_to_uuid("_____________________w") == all_ones
    assert kafka_str_to_uuid("AAAAAAAAAAAAAAAAAAAAAQ==") == METADATA_TOPIC_ID


@settings(max_examples=100)
@given(st.uuids())
def test_uuid_string_round_trip(u: uuid.UUID) -> None:
    s = uuid_to_kafka_str(u)
    assert len(s) == 22
    assert kafka_str_to_uuid(s) == u


@pytest.mark.parametrize("bad", ["", "AAAA", "AAAAAAAAAAAAAAAAAAAAA+", "A" * 25, "!" * 22])
def test_invalid_uuid_strings(bad: str) -> None:
    with pytest.raises(ValueError):
        kafka_str_to_uuid(bad)


def test_file_bytes_match_kafka(tmp_path: Path) -> None:
    path = PartitionMetadataFile.new_file(tmp_path)
    assert path.name == "partition.metadata"
    f = PartitionMetadataFile(path)
    assert f.read() is None
    assert not f.exists()
    f.write(METADATA_TOPIC_ID)
    assert path.read_bytes() == b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    assert f.read() == METADATA_TOPIC_ID
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partition.metadata"]
    f.write(METADATA_TOPIC_ID)  # idempotent
    assert f.read() == METADATA_TOPIC_ID
    f.delete()
    assert f.read() is None


@settings(max_examples=30, deadline=None)
@given(st.uuids().filter(lambda u: u.int != 0))
def test_file_round_trip(u: uuid.UUID) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = PartitionMetadataFile(Path(d) / "partition.metadata")
        f.write(u)
        assert f.read() == u


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"version: 0\n",
        b"version: -1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
        b"version 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
        b"version: x\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ",
        b"version: 0\ntopic: AAAAAAAAAAAAAAAAAAAAAQ",
        b"version: 0\ntopic_id: not-a-uuid",
        b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",  # the zero UUID
    ],
)
def test_malformed_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        PartitionMetadataFile(path).read()
    assert str(path) in str(info.value)


def test_newer_version_and_trailing_newline_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")
    assert PartitionMetadataFile(path).read() == METADATA_TOPIC_ID


def test_zero_uuid_is_not_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        PartitionMetadataFile(tmp_path / "partition.metadata").write(uuid.UUID(int=0))
