"""Log: append/read round trips decoded by kafka-python, validation, rolling, reopening,
producer idempotence, leader epochs, timestamps, flushing and truncation."""

from __future__ import annotations

import struct
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.errors import (
    CorruptRecordError,
    InconsistentTopicId,
    InvalidRecord,
    InvalidTimestamp,
    MessageTooLarge,
    OffsetOutOfRange,
    OutOfOrderSequenceNumber,
    RecordListTooLarge,
    UnsupportedCompressionType,
)
from tierlog.log import file_records
from tierlog.log.log import Log, LogAppendInfo, parse_topic_partition
from tierlog.log.time_index import TimestampOffset
from tierlog.records.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    CRC_START,
    crc32c,
    iter_headers,
    read_header,
    set_base_offset,
)

from .conftest import T0, Clock, build_batch, make_config, read_all

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords

OpenLog = Callable[..., Log]


def kafka_decode(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every record, decoded by kafka-python (CRC checked)."""
    out = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        for record in batch:
            out.append((record.offset, record.timestamp, record.key, record.value))
    return out


def with_crc(buf: bytearray, position: int = 0) -> bytes:
    """Recompute the CRC of the batch at ``position`` (for crafted batches)."""
    length = struct.unpack_from(">i", buf, position + 8)[0]
    crc = crc32c(memoryview(buf)[position + CRC_START : position + length + 12])
    struct.pack_into(">I", buf, position + CRC_OFFSET, crc)
    return bytes(buf)


# ---------------------------------------------------------------------- round trips


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.tuples(st.integers(1, 8), st.integers(0, 200), st.sampled_from(["none", "gzip"])),
        min_size=1,
        max_size=30,
    ),
    segment_bytes=st.sampled_from([2000, 4000, 1 << 20]),
    interval=st.sampled_from([0, 100, 4096]),
)
def test_append_read_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[tuple[int, int, str]],
    segment_bytes: int,
    interval: int,
) -> None:
    dir = tmp_path_factory.mktemp("log") / "t-0"
    config = make_config(segment_bytes=segment_bytes, index_interval_bytes=interval)
    log = Log.open(dir, config, time_ms=Clock())
    expected_records = []
    layout = []  # (first, last)
    offset = 0
    for i, (count, size, codec) in enumerate(batches):
        values = [bytes([i % 256]) * size + bytes([j]) for j in range(count)]
        stamps = [T0 + i * 100 + j for j in range(count)]
        info = log.append(build_batch(values, timestamps=stamps, compression=codec))
        assert (info.first_offset, info.last_offset) == (offset, offset + count - 1)
        assert info.records_count == count and not info.duplicate
        assert info.max_timestamp == max(stamps)
        layout.append((offset, offset + count - 1))
        expected_records += [(offset + j, stamps[j], b"k", values[j]) for j in range(count)]
        offset += count
    assert log.log_end_offset == offset
    everything = read_all(log)
    assert kafka_decode(everything) == expected_records
    for first, last in layout:
        for o in range(first, last + 1):
            header = read_header(log.read(o, 1 << 20).records)
            assert (header.base_offset, header.last_offset) == (first, last)
            assert header.partition_leader_epoch == 0
    assert log.read(offset, 100).records == b""
    if segment_bytes == 2000 and len(everything) > 4000:
        assert log.number_of_segments > 1
    log.close()
    reopened = Log.open(dir, config, had_clean_shutdown=True, time_ms=Clock())
    assert reopened.log_end_offset == offset
    assert read_all(reopened) == everything
    reopened.close()


def test_read_semantics(open_log: OpenLog) -> None:
    log = open_log()
    sizes = []
    for i in range(5):
        sizes.append(log.append(build_batch(3, timestamp=T0 + i, value_size=50)).valid_bytes)
    # partial trailing batch when max_length cuts it
    info = log.read(0, sizes[0] + 5)
    assert len(info.records) == sizes[0] + 5
    assert [h.base_offset for h in iter_headers(info.records)] == [0]
    # first batch whole with min_one_message
    info = log.read(4, 10)
    assert len(info.records) == sizes[1] and read_header(info.records).base_offset == 3
    info = log.read(4, 10, min_one_message=False)
    assert len(info.records) == 10 and info.first_entry_incomplete
    # max_offset: exclusive, at a batch boundary
    info = log.read(0, 1 << 20, max_offset=9)
    assert [h.base_offset for h in iter_headers(info.records)] == [0, 3, 6]
    assert log.read(9, 1 << 20, max_offset=9).records == b""
    assert log.read(12, 1 << 20, max_offset=9).records == b""  # between HW and LEO
    assert log.read(15, 100).records == b""  # at the log end offset
    with pytest.raises(OffsetOutOfRange):
        log.read(16, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)


def test_read_uses_high_watermark_metadata(open_log: OpenLog) -> None:
    log = open_log()
    for i in range(4):
        log.append(build_batch(2, timestamp=T0 + i))
    log.update_high_watermark(4)
    info = log.read(0, 1 << 20, max_offset=log.high_watermark)
    assert [h.base_offset for h in iter_headers(info.records)] == [0, 2]
    assert log.update_high_watermark(100) == 8
    assert log.last_stable_offset == 8


def test_topic_partition_from_directory(tmp_path: Path) -> None:
    assert parse_topic_partition(tmp_path / "my-topic-with-dashes-12") == (
        "my-topic-with-dashes",
        12,
    )
    assert parse_topic_partition(Path("t-3.abcdef-delete")) == ("t", 3)
    with pytest.raises(ValueError):
        parse_topic_partition(Path("nopartition"))
    log = Log.open(tmp_path / "a-b-7", make_config())
    assert (log.topic, log.partition) == ("a-b", 7)
    log.close()


# ---------------------------------------------------------------------- validation


def test_validation_errors(open_log: OpenLog) -> None:
    log = open_log(make_config(max_message_bytes=2000, segment_bytes=5000))
    good = build_batch(2)
    with pytest.raises(InvalidRecord):
        log.append(b"")
    with pytest.raises(CorruptRecordError):
        log.append(good + b"\x00" * 10)  # trailing partial bytes
    with pytest.raises(CorruptRecordError):
        log.append(good[:-1])  # truncated
    corrupt = bytearray(good)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(bytes(corrupt))
    with pytest.raises(MessageTooLarge):
        log.append(build_batch(1, value_size=3000))
    with pytest.raises(RecordListTooLarge):
        log.append(b"".join(build_batch(1, value_size=1500) for _ in range(4)))
    bad_count = bytearray(good)
    struct.pack_into(">i", bad_count, 57, 5)
    with pytest.raises(InvalidRecord):
        log.append(with_crc(bad_count))
    bad_codec = bytearray(good)
    struct.pack_into(">h", bad_codec, ATTRIBUTES_OFFSET, 7)
    with pytest.raises(UnsupportedCompressionType):
        log.append(with_crc(bad_codec))
    control = bytearray(good)
    struct.pack_into(">h", control, ATTRIBUTES_OFFSET, 0x20)
    with pytest.raises(InvalidRecord):
        log.append(with_crc(control))
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError):
        log.append(bytes(bad_magic))
    assert log.log_end_offset == 0
    assert log.append(good).first_offset == 0


def test_timestamp_bounds(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(
        make_config(message_timestamp_after_max_ms=1000, message_timestamp_before_max_ms=5000)
    )
    log.append(build_batch(1, timestamp=clock.now + 1000))
    log.append(build_batch(1, timestamp=clock.now - 5000))
    with pytest.raises(InvalidTimestamp):
        log.append(build_batch(1, timestamp=clock.now + 1001))
    with pytest.raises(InvalidTimestamp):
        log.append(build_batch(1, timestamp=clock.now - 5001))
    log.append(build_batch(1, timestamps=[-1]))  # no timestamp: not checked
    lat = bytearray(build_batch(1))
    struct.pack_into(">h", lat, ATTRIBUTES_OFFSET, 0x08)
    with pytest.raises(InvalidTimestamp):
        log.append(with_crc(lat))


def test_log_append_time(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(make_config(message_timestamp_type="LogAppendTime"))
    clock.advance(12345)
    info = log.append(build_batch(3, timestamp=T0 - 10**9))
    assert info.log_append_time == clock.now
    assert info.max_timestamp == clock.now
    data = log.read(0, 1 << 20).records
    header = read_header(data)
    assert header.timestamp_type == 1 and header.max_timestamp == clock.now
    assert [r[1] for r in kafka_decode(data)] == [clock.now] * 3  # CRC recomputed and valid
    assert log.offset_for_timestamp(clock.now) == TimestampOffset(clock.now, 0)


# ---------------------------------------------------------------------- rolling


def test_roll_on_segment_bytes(open_log: OpenLog) -> None:
    log = open_log(make_config(segment_bytes=1000))
    size = len(build_batch(2, value_size=100))
    for i in range(20):
        log.append(build_batch(2, value_size=100, timestamp=T0 + i))
    per_segment = 1000 // size
    assert log.number_of_segments == -(-20 // per_segment)
    for segment in log.segments.values()[:-1]:
        assert segment.size <= 1000
        assert segment.log.file_length() == segment.size  # trimmed on roll
    assert [s.base_offset for s in log.segments.values()] == list(range(0, 40, 2 * per_segment))


def test_a_rolled_segment_shows_only_once_its_producer_snapshot_is_written(
    open_log: OpenLog,
) -> None:
    """The copy to remote storage reads the segments without the log's lock and uploads the
    snapshot at the next segment's base offset: a new segment must not show before it."""
    log = open_log(make_config())
    log.append(build_batch(2, producer_id=7, producer_epoch=0, base_sequence=0))
    seen: list[int | None] = []
    add = log.segments.add

    def add_and_look(segment):  # what a reader sees the moment the segment shows
        add(segment)
        found = log.producer_state_manager.snapshot_file_for(segment.base_offset)
        seen.append(None if found is None else segment.base_offset)

    log.segments.add = add_and_look  # type: ignore[method-assign]
    log.roll()
    assert seen == [2]


def test_roll_on_segment_ms(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(make_config(segment_ms=1000))
    log.append(build_batch(1, timestamp=clock.now))
    log.append(build_batch(1, timestamp=clock.now + 1000))
    assert log.number_of_segments == 1
    log.append(build_batch(1, timestamp=clock.now + 1001))  # by record timestamps
    assert log.number_of_segments == 2
    # batches without timestamps: by the segment's creation time on the clock
    log.append(build_batch(1, timestamps=[-1]))
    assert log.number_of_segments == 2
    clock.advance(1001)
    log.append(build_batch(1, timestamps=[-1]))
    assert log.number_of_segments == 2  # first batch of this segment has a timestamp
    log.roll()
    log.append(build_batch(1, timestamps=[-1]))
    clock.advance(1001)
    log.append(build_batch(1, timestamps=[-1]))
    assert log.number_of_segments == 4


def test_roll_on_full_index(open_log: OpenLog) -> None:
    log = open_log(make_config(segment_index_bytes=40, index_interval_bytes=1))
    for i in range(30):
        log.append(build_batch(1, timestamp=T0 + i))
    assert log.number_of_segments > 3
    assert kafka_decode(read_all(log))[-1][0] == 29


def test_roll_on_offset_overflow_with_assign_offsets_false(open_log: OpenLog) -> None:
    log = open_log()
    log.append(build_batch(2), assign_offsets=False)
    far = 2**31 + 5
    info = log.append(build_batch(2, base_offset=far), assign_offsets=False)
    assert (info.first_offset, info.last_offset) == (far, far + 1)
    assert log.segments.base_offsets() == [0, far]
    assert log.log_end_offset == far + 2
    assert read_header(log.read(far, 1000).records).base_offset == far
    assert read_header(log.read(1, 1000).records).base_offset == 0
    with pytest.raises(InvalidRecord):
        log.append(build_batch(1, base_offset=far), assign_offsets=False)  # backwards


def test_roll_on_empty_active_segment_is_a_no_op(open_log: OpenLog) -> None:
    log = open_log()
    first = log.active_segment
    assert log.roll() is first
    log.append(build_batch(1))
    assert log.roll().base_offset == 1
    assert log.segments.base_offsets() == [0, 1]


# ---------------------------------------------------------------------- reopen


def test_reopen_after_clean_close(open_log: OpenLog, log_dir: Path) -> None:
    config = make_config(segment_bytes=800, index_interval_bytes=100)
    log = open_log(config)
    for i in range(40):
        log.append(build_batch(2, timestamp=T0 + i * 10, value_size=30))
    data = read_all(log)
    base_offsets = log.segments.base_offsets()
    log.close()
    assert log.closed
    log = open_log(config, had_clean_shutdown=True, recovery_point=0)
    assert log.recovery_point == log.log_end_offset == 80
    assert log.segments.base_offsets() == base_offsets
    assert read_all(log) == data
    info = log.append(build_batch(1, timestamp=T0 + 1000))
    assert info.first_offset == 80
    assert log.offset_for_timestamp(T0 + 205) == TimestampOffset(T0 + 210, 42)


def test_topic_id_in_partition_metadata(open_log: OpenLog, log_dir: Path) -> None:
    topic_id = uuid.uuid4()
    log = open_log(topic_id=topic_id)
    assert log.topic_id == topic_id
    assert (log_dir / "partition.metadata").read_text().startswith("version: 0\ntopic_id: ")
    log.close()
    assert open_log().topic_id == topic_id
    with pytest.raises(InconsistentTopicId):
        open_log(topic_id=uuid.uuid4())


# ---------------------------------------------------------------------- producer state


def idempotent(seq: int, count: int = 2, pid: int = 1000, epoch: int = 0) -> bytes:
    return build_batch(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_duplicate_batch_returns_original_offsets(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log(make_config(segment_bytes=300))
    first = log.append(idempotent(0))
    log.append(build_batch(3))
    second = log.append(idempotent(2))
    assert log.number_of_segments > 1
    end = log.log_end_offset
    dup = log.append(idempotent(2))
    assert dup.duplicate
    assert (dup.first_offset, dup.last_offset) == (second.first_offset, second.last_offset)
    assert log.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceNumber):
        log.append(idempotent(7))
    log.close()
    # clean restart: from the snapshot written at close (it keeps the last batch, as Kafka's)
    log = open_log(make_config(segment_bytes=300), had_clean_shutdown=True)
    dup = log.append(idempotent(2))
    assert dup.duplicate and dup.first_offset == second.first_offset
    assert first.first_offset == 0
    assert log.append(idempotent(4)).first_offset == end
    log.close()
    # unclean restart without snapshots: rebuilt by replaying the log
    for p in log_dir.glob("*.snapshot"):
        p.unlink()
    log = open_log(make_config(segment_bytes=300), had_clean_shutdown=False)
    dup = log.append(idempotent(4))
    assert dup.duplicate and dup.first_offset == end


def test_roll_takes_producer_snapshot(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log(make_config(segment_bytes=300))
    for seq in range(0, 20, 2):
        log.append(idempotent(seq))
    snapshots = sorted(int(p.name.split(".")[0]) for p in log_dir.glob("*.snapshot"))
    assert snapshots == log.segments.base_offsets()[1:]


# ---------------------------------------------------------------------- leader epochs


def test_leader_epoch_assigned_on_append(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log()
    log.append(build_batch(2), leader_epoch=0)
    log.append(build_batch(2), leader_epoch=0)
    log.append(build_batch(3), leader_epoch=5)
    log.append(build_batch(1), leader_epoch=7)
    entries = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]
    assert entries == [(0, 0), (5, 4), (7, 7)]
    assert read_header(log.read(4, 100).records).partition_leader_epoch == 5
    assert (log_dir / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n5 4\n7 7\n"
    log.truncate_to(4)
    entries = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]
    assert entries == [(0, 0)]
    assert log.log_end_offset == 4
    assert log.append(build_batch(1), leader_epoch=6).first_offset == 4
    entries = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]
    assert entries == [(0, 0), (6, 4)]


def test_replicated_batches_keep_their_epochs(open_log: OpenLog) -> None:
    log = open_log()
    b1 = bytearray(build_batch(2))
    struct.pack_into(">i", b1, 12, 3)
    b2 = bytearray(build_batch(2, base_offset=2))
    struct.pack_into(">i", b2, 12, 4)
    log.append(bytes(b1 + b2), assign_offsets=False, origin_client=False)
    entries = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]
    assert entries == [(3, 0), (4, 2)]


# ---------------------------------------------------------------------- timestamps


def test_offset_for_timestamp(open_log: OpenLog) -> None:
    log = open_log(make_config(segment_bytes=500, index_interval_bytes=50))
    records = []
    for i in range(30):
        stamps = [T0 + i * 100 + j * 10 for j in range(3)]
        info = log.append(build_batch(3, timestamps=stamps))
        records += [(info.first_offset + j, ts) for j, ts in enumerate(stamps)]
    assert log.number_of_segments > 2
    for target in range(T0 - 50, T0 + 3100, 17):
        expected = next((TimestampOffset(ts, o) for o, ts in records if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    assert log.offset_for_timestamp(-2) == TimestampOffset(-1, 0)
    assert log.offset_for_timestamp(-1) == TimestampOffset(-1, 90)
    assert log.offset_for_timestamp(-4) == TimestampOffset(-1, 0)
    assert log.offset_for_timestamp(-3) == TimestampOffset(T0 + 2920, 89)
    with pytest.raises(ValueError):
        log.offset_for_timestamp(-7)


def test_offset_for_timestamp_does_not_inflate_a_compression_bomb(open_log: OpenLog) -> None:
    """A client's zstd batch of a few KiB that decompresses to 50 MiB: the timestamp lookup
    refuses to inflate it (bounded decompression) and answers from the batch header."""
    from tierlog.records import COMPRESSION_ZSTD
    from tierlog.records import build_batch as build

    log = open_log()
    log.append(build_batch(2, timestamps=[T0, T0 + 1]))
    bomb = build([(T0 + 10, None, bytes(25 << 20)), (T0 + 20, None, bytes(25 << 20))], 4)
    assert COMPRESSION_ZSTD == 4 and len(bomb) < 64 << 10
    log.append(bomb)
    log.append(build_batch(1, timestamps=[T0 + 30]))
    assert log.offset_for_timestamp(T0 + 1) == TimestampOffset(T0 + 1, 1)
    # Inside the bomb: not decoded; its max timestamp at its last offset (a logged warning).
    assert log.offset_for_timestamp(T0 + 15) == TimestampOffset(T0 + 20, 3)
    assert log.offset_for_timestamp(T0 + 25) == TimestampOffset(T0 + 30, 4)


def test_max_timestamp_is_first_record_holding_it(open_log: OpenLog) -> None:
    log = open_log()
    log.append(build_batch(3, timestamps=[T0, T0 + 50, T0 + 50]))
    log.append(build_batch(2, timestamps=[T0 + 1, T0 + 2]))
    assert log.offset_for_timestamp(-3) == TimestampOffset(T0 + 50, 1)


# ---------------------------------------------------------------------- flushing


def test_flush_messages(open_log: OpenLog) -> None:
    log = open_log(make_config(flush_messages=3))
    log.append(build_batch(2))
    assert log.recovery_point == 0 and log.unflushed_messages == 2
    log.append(build_batch(1))
    assert log.recovery_point == 3 and log.unflushed_messages == 0


def test_flush_ms(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(make_config(flush_ms=1000))
    log.append(build_batch(2))
    assert not log.flush_if_due(clock.now + 999)
    assert log.flush_if_due(clock.now + 1000)
    assert log.recovery_point == 2
    assert not log.flush_if_due(clock.now + 5000)  # nothing unflushed


def test_roll_flushes_in_background(open_log: OpenLog) -> None:
    log = open_log(make_config(segment_bytes=300))
    for _ in range(10):
        log.append(build_batch(2, value_size=30))
    log.await_background_flush(10)
    assert log.recovery_point == log.active_segment.base_offset
    log.flush(log.log_end_offset)
    assert log.recovery_point == log.log_end_offset


# ---------------------------------------------------------------------- truncation


def test_truncate_to_across_segments(open_log: OpenLog) -> None:
    log = open_log(make_config(segment_bytes=300))
    infos = [log.append(idempotent(seq, count=2)) for seq in range(0, 30, 2)]
    target = infos[4].first_offset
    assert log.truncate_to(target)
    assert log.log_end_offset == target
    assert kafka_decode(read_all(log))[-1][0] == target - 1
    assert log.segments.active_segment.base_offset <= target
    assert not log.truncate_to(target + 100)
    # producer state rolled back: sequence 8 is the next one
    assert log.append(idempotent(8, count=2)).first_offset == target
    assert log.append(idempotent(8, count=2)).duplicate


def test_truncate_to_the_log_end_drops_an_epoch_started_there(open_log: OpenLog) -> None:
    """A broker elected leader (epoch assigned at its log end) that lost leadership before
    appending: truncating to the log end removes that epoch (Kafka's truncateTo), or as a
    follower it would keep fetching with an epoch its new leader never had."""
    log = open_log(make_config())
    log.append(build_batch(2), leader_epoch=5)
    leo = log.log_end_offset
    log.assign_epoch_start_offset(9, leo)
    assert log.leader_epoch_cache.latest_epoch == 9
    assert not log.truncate_to(leo)
    assert log.leader_epoch_cache.latest_epoch == 5
    assert log.log_end_offset == leo
    # The next batch of a new epoch is stamped with it as usual.
    log.append(build_batch(1), leader_epoch=10)
    assert log.leader_epoch_cache.latest_epoch == 10


def test_truncate_fully_and_start_at(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log(make_config(segment_bytes=300))
    for _ in range(10):
        log.append(build_batch(2, value_size=30))
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (500, 500, 500)
    assert log.segments.base_offsets() == [500]
    assert log.append(build_batch(1)).first_offset == 500
    assert sorted(p.name for p in log_dir.glob("*.log")) == ["00000000000000000500.log"]
    with pytest.raises(OffsetOutOfRange):
        log.read(10, 100)


def test_a_remote_rebuild_decided_before_the_log_moved_on_leaves_it(open_log: OpenLog) -> None:
    """A follower's rebuild from remote storage (``restore_remote_log_aux_state``) applies only
    while the log still ends at the fetch offset the leader answered "tiered" to: one decided
    earlier (its remote reads still running for a fetcher the partition has left) must not
    wipe what was fetched since."""
    log = open_log(make_config(segment_bytes=300))
    assert log.restore_remote_log_aux_state(500, 0, [], None, expected_log_end_offset=0)
    fetched = build_batch(4, value_size=30, base_offset=500)  # the leader's offsets
    log.append(fetched, assign_offsets=False)
    before = (log.log_start_offset, log.log_end_offset, log.size_in_bytes)
    assert before[1:] == (504, len(fetched))
    # The second rebuild, decided at the same fetch offset 0, finishes late: nothing changes.
    assert not log.restore_remote_log_aux_state(500, 0, [], None, expected_log_end_offset=0)
    assert (log.log_start_offset, log.log_end_offset, log.size_in_bytes) == before
    assert [offset for offset, *_ in kafka_decode(read_all(log, 500))] == [500, 501, 502, 503]


def test_append_info_is_frozen(open_log: OpenLog) -> None:
    info = open_log().append(build_batch(1))
    assert isinstance(info, LogAppendInfo)
    with pytest.raises(AttributeError):
        info.first_offset = 5  # type: ignore[misc]


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview"])
def test_append_patches_the_file_not_the_input(open_log: OpenLog, kind: str) -> None:
    """One batch goes out as a patched 16-byte prefix plus the caller's buffer (writev),
    several as a patched copy: either way the input is unchanged and may be reused."""
    log = open_log()
    log.append(build_batch(3))
    one = build_batch(2)
    two = build_batch(1) + build_batch(4)
    for original in (one, two):
        data: bytes | bytearray | memoryview = {
            "bytes": original,
            "bytearray": bytearray(original),
            "memoryview": memoryview(bytearray(original)),
        }[kind]
        before = log.log_end_offset
        info = log.append(data, leader_epoch=7)
        assert bytes(data) == original
        if isinstance(data, bytearray):
            data += b"x"  # no buffer export left behind
        written = log.read(before, 1 << 20).records
        assert len(written) == len(original)
        headers = list(iter_headers(written))
        assert headers[0].base_offset == info.first_offset == before
        assert {h.partition_leader_epoch for h in headers} == {7}
        # only baseOffset and partitionLeaderEpoch differ; the CRC still holds
        patched = bytearray(original)
        pos = 0
        for h in headers:
            patched[pos : pos + 16] = written[pos : pos + 16]
            pos += h.size_in_bytes
        assert bytes(patched) == written
        for h in headers:
            assert crc32c(written[h.position + CRC_START : h.position + h.size_in_bytes]) == h.crc
    assert [r[0] for r in kafka_decode(read_all(log))] == list(range(log.log_end_offset))


def test_failed_write_releases_a_bytearray(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log()
    data = bytearray(build_batch(2))

    def fail(fd: int, buffers: object, offset: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(file_records.os, "pwritev", fail)
    with pytest.raises(OSError) as excinfo:
        log.append(data)
    data += b"x"  # resizable while the traceback is alive: no view of it was left behind
    assert excinfo.value.errno == 28
    assert log.log_end_offset == 0
    monkeypatch.undo()
    assert log.append(build_batch(1)).first_offset == 0
    assert log.active_segment.size == len(build_batch(1))


def test_delete_removes_directory(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log()
    log.append(build_batch(1))
    log.delete()
    assert not log_dir.exists()


def test_set_base_offset_helper_matches_kafka_python() -> None:
    batch = bytearray(build_batch(2))
    set_base_offset(batch, 0, 77)
    assert [r[0] for r in kafka_decode(bytes(batch))] == [77, 78]
