from __future__ import annotations

import uuid
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

with warnings.catch_warnings():
    # kafka-python 3.0 uses importlib.resources.read_text at import time.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from tests.tiered.strategies import TP, segment, update
from tierlog.errors import (
    InvalidRemoteStateTransitionError,
    RemoteResourceNotFoundError,
    RemoteStorageNotReadyError,
)
from tierlog.tiered import metadata_serde
from tierlog.tiered.remote_log_metadata_manager import (
    InMemoryMetadataPublisher,
    InMemoryRemoteLogMetadataManager,
    MetadataPublisher,
    TopicBasedRemoteLogMetadataManager,
    metadata_partition_for,
    murmur2,
)
from tierlog.tiered.remote_log_segment_metadata import (
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState as S
from tierlog.tiered.remote_log_segment_state import RemotePartitionDeleteState as P

# ------------------------------------------------------------------ partitioner


@pytest.mark.parametrize(
    ("data", "expected"),
    [  # Kafka's UtilsTest.testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_kafka_vectors(data, expected):
    assert murmur2(data) == expected


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data):
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def _java_objects_hash(topic_id: uuid.UUID, partition: int) -> int:
    """Objects.hash(lsb, msb, partition) written out the Java way, as a signed int."""

    def to_int(x):
        x &= 0xFFFFFFFF
        return x - (1 << 32) if x >= 1 << 31 else x

    def long_hash(v):  # (int)(v ^ (v >>> 32))
        u = v & 0xFFFFFFFFFFFFFFFF
        return to_int(u ^ (u >> 32))

    msb = int.from_bytes(topic_id.bytes[:8], "big", signed=True)
    lsb = int.from_bytes(topic_id.bytes[8:], "big", signed=True)
    result = 1
    for h in (long_hash(lsb), long_hash(msb), partition):
        result = to_int(31 * result + h)
    return result


@given(st.uuids(), st.integers(0, 2**31 - 1), st.integers(1, 200))
def test_metadata_partition_for_is_kafkas_formula(topic_id, partition, n):
    tp = TopicIdPartition(topic_id, "t", partition)
    h = _java_objects_hash(topic_id, partition)
    expected = (murmur2(h.to_bytes(4, "big", signed=True)) & 0x7FFFFFFF) % n
    assert metadata_partition_for(tp, n) == expected
    assert 0 <= metadata_partition_for(tp, n) < n


def test_metadata_partition_for_golden():
    # Worked by hand for topic id 00000000-0000-0001-0000-000000000002, partition 3:
    # Objects.hash(2, 1, 3) = ((31 + 2) * 31 + 1) * 31 + 3 = 31747 -> bytes 00 00 7c 03.
    tp = TopicIdPartition(uuid.UUID("00000000-0000-0001-0000-000000000002"), "t", 3)
    assert _java_objects_hash(tp.topic_id, 3) == 31747
    assert metadata_partition_for(tp, 50) == (murmur2(b"\x00\x00\x7c\x03") & 0x7FFFFFFF) % 50
    assert metadata_partition_for(tp, 1) == 0
    with pytest.raises(ValueError):
        metadata_partition_for(tp, 0)


# ------------------------------------------------------------------ in-memory manager


def test_in_memory_manager_lifecycle():
    rlmm = InMemoryRemoteLogMetadataManager()
    md = segment(0, 99)
    rlmm.add_remote_log_segment_metadata(md)
    assert rlmm.remote_log_segment_metadata(TP, 0, 5) is None
    rlmm.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
    assert rlmm.remote_log_segment_metadata(TP, 0, 5).state == S.COPY_SEGMENT_FINISHED
    assert rlmm.highest_offset_for_epoch(TP, 0) == 99
    assert rlmm.remote_log_size(TP, 0) == 1000
    with pytest.raises(InvalidRemoteStateTransitionError):
        rlmm.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED))
    with pytest.raises(ValueError):
        rlmm.add_remote_log_segment_metadata(segment(0, 1, state=S.COPY_SEGMENT_FINISHED))
    with pytest.raises(RemoteResourceNotFoundError):
        rlmm.update_remote_log_segment_metadata(update(segment(5, 6), S.COPY_SEGMENT_FINISHED))


# ------------------------------------------------------------------ topic-based manager


class CountingPublisher(InMemoryMetadataPublisher):
    def __init__(self):
        super().__init__()
        self.records_read = 0

    def read_from(self, metadata_partition, offset):
        out = super().read_from(metadata_partition, offset)
        self.records_read += len(out)
        return out


def _lifecycle(rlmm, n, start=0):
    mds = []
    for i in range(start, start + n):
        md = segment(i * 100, i * 100 + 99)
        rlmm.add_remote_log_segment_metadata(md)
        rlmm.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
        mds.append(md)
    return mds


def test_in_memory_publisher_is_a_metadata_publisher():
    assert isinstance(InMemoryMetadataPublisher(), MetadataPublisher)


def test_topic_based_publishes_kafka_records_and_serves_them():
    pub = InMemoryMetadataPublisher()
    rlmm = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=7)
    rlmm.on_partition_leadership_changes({TP}, set())
    assert rlmm.is_ready(TP)
    md = _lifecycle(rlmm, 1)[0]
    mp = metadata_partition_for(TP, 7)
    values = [v for _, v in pub.read_from(mp, 0)]
    assert [metadata_serde.read_header(v)[0] for v in values] == [0, 1]
    assert metadata_serde.deserialize(values[0]) == md
    got = rlmm.remote_log_segment_metadata(TP, 0, 50)
    assert got == md.create_with_updates(update(md, S.COPY_SEGMENT_FINISHED))
    assert rlmm.list_remote_log_segments(TP) == [got]


def test_topic_based_unknown_partition_and_illegal_update_publish_nothing():
    pub = InMemoryMetadataPublisher()
    rlmm = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=3)
    with pytest.raises(RemoteResourceNotFoundError):
        rlmm.list_remote_log_segments(TP)
    rlmm.on_partition_leadership_changes({TP}, set())
    md = _lifecycle(rlmm, 1)[0]
    mp = metadata_partition_for(TP, 3)
    before = pub.end_offset(mp)
    with pytest.raises(InvalidRemoteStateTransitionError):
        rlmm.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED))
    with pytest.raises(ValueError):
        rlmm.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_STARTED))
    with pytest.raises(RemoteResourceNotFoundError):
        rlmm.update_remote_log_segment_metadata(update(segment(1, 2), S.COPY_SEGMENT_FINISHED))
    assert pub.end_offset(mp) == before


def test_follower_sees_leader_records_after_poll_and_skips_bad_records(caplog):
    pub = InMemoryMetadataPublisher()
    leader = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=1)
    follower = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=1)
    other = TopicIdPartition(uuid.uuid4(), "other", 0)
    leader.on_partition_leadership_changes({TP, other}, set())
    follower.on_partition_leadership_changes(set(), {TP})
    _lifecycle(leader, 3)
    pub.publish(0, b"\x01\x09\x00garbage")  # a corrupt record must not wedge consumption
    leader.add_remote_log_segment_metadata(segment(0, 9, tp=other))
    assert len(follower.list_remote_log_segments(TP)) == 0
    follower.poll()
    assert [m.start_offset for m in follower.list_remote_log_segments(TP)] == [0, 100, 200]
    assert "skipping" in caplog.text
    with pytest.raises(RemoteResourceNotFoundError):
        follower.list_remote_log_segments(other)


def test_restart_resumes_from_file_cache_offset(tmp_path):
    pub = CountingPublisher()
    rlmm = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=2, cache_dir=tmp_path)
    rlmm.on_partition_leadership_changes({TP}, set())
    first = _lifecycle(rlmm, 50)
    rlmm.close()
    assert rlmm.cache_file(TP).exists()
    # records published after the snapshot, e.g. by the next leader
    other_writer = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=2)
    other_writer.on_partition_leadership_changes({TP}, set())
    _lifecycle(other_writer, 5, start=50)

    pub.records_read = 0
    restarted = TopicBasedRemoteLogMetadataManager(
        pub, num_metadata_partitions=2, cache_dir=tmp_path
    )
    restarted.on_partition_leadership_changes({TP}, set())
    assert pub.records_read == 10  # only the 10 records after the file's offset
    segs = restarted.list_remote_log_segments(TP)
    assert [m.start_offset for m in segs] == [i * 100 for i in range(55)]
    assert segs[0].remote_log_segment_id == first[0].remote_log_segment_id
    assert restarted.highest_offset_for_epoch(TP, 0) == 5499


def test_corrupt_file_cache_falls_back_to_reading_the_topic(tmp_path, caplog):
    pub = CountingPublisher()
    rlmm = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=2, cache_dir=tmp_path)
    rlmm.on_partition_leadership_changes({TP}, set())
    _lifecycle(rlmm, 20)
    rlmm.close()
    path = rlmm.cache_file(TP)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    pub.records_read = 0
    restarted = TopicBasedRemoteLogMetadataManager(
        pub, num_metadata_partitions=2, cache_dir=tmp_path
    )
    restarted.on_partition_leadership_changes({TP}, set())
    assert pub.records_read == 40
    assert len(restarted.list_remote_log_segments(TP)) == 20
    assert "re-reading" in caplog.text


def test_cache_file_of_other_metadata_partition_count_is_ignored(tmp_path):
    pub = InMemoryMetadataPublisher()
    rlmm = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=1, cache_dir=tmp_path)
    rlmm.on_partition_leadership_changes({TP}, set())
    _lifecycle(rlmm, 2)
    rlmm.close()
    n = 50
    # The partition is a pure function of the topic id and partition: with TP it is not 0,
    # so the file cache (written for 1 partition) holds TP under another metadata partition.
    assert metadata_partition_for(TP, n) != 0
    other = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=n, cache_dir=tmp_path)
    other.on_partition_leadership_changes({TP}, set())
    assert other.list_remote_log_segments(TP) == []  # nothing in its metadata partition


def test_stop_partition_saves_cache_and_reassign_loads_it(tmp_path):
    pub = CountingPublisher()
    rlmm = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=4, cache_dir=tmp_path)
    rlmm.on_partition_leadership_changes({TP}, set())
    _lifecycle(rlmm, 3)
    rlmm.on_stop_partitions({TP})
    assert not rlmm.is_ready(TP)
    pub.records_read = 0
    rlmm.on_partition_leadership_changes(set(), {TP})
    assert pub.records_read == 0
    assert len(rlmm.list_remote_log_segments(TP)) == 3


def test_partition_delete_lifecycle(tmp_path):
    pub = InMemoryMetadataPublisher()
    rlmm = TopicBasedRemoteLogMetadataManager(pub, num_metadata_partitions=4, cache_dir=tmp_path)
    rlmm.on_partition_leadership_changes({TP}, set())
    _lifecycle(rlmm, 1)
    rlmm.flush()

    def put(state):
        rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(TP, state, 1, 0))

    with pytest.raises(InvalidRemoteStateTransitionError):
        put(P.DELETE_PARTITION_STARTED)
    put(P.DELETE_PARTITION_MARKED)
    put(P.DELETE_PARTITION_MARKED)  # self transition
    put(P.DELETE_PARTITION_STARTED)
    put(P.DELETE_PARTITION_FINISHED)
    with pytest.raises(RemoteResourceNotFoundError):
        rlmm.list_remote_log_segments(TP)
    assert not rlmm.cache_file(TP).exists()


def test_not_ready_while_loading():
    class Slow(InMemoryMetadataPublisher):
        def read_from(self, mp, offset):
            with pytest.raises(RemoteStorageNotReadyError):
                rlmm.list_remote_log_segments(TP)
            return super().read_from(mp, offset)

    rlmm = TopicBasedRemoteLogMetadataManager(Slow(), num_metadata_partitions=1)
    rlmm.on_partition_leadership_changes({TP}, set())
    assert rlmm.list_remote_log_segments(TP) == []
