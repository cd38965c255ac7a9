"""ProducerStateManager: duplicates, ordering, fencing, wraparound, snapshots."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tierlog.errors import CorruptSnapshotError, InvalidProducerEpoch, OutOfOrderSequenceNumber
from tierlog.log.producer_state_manager import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    decrement_sequence,
    encode_snapshot,
    increment_sequence,
    read_snapshot,
)
from tierlog.records.record_batch import CONTROL_FLAG_MASK, RecordBatchHeader, crc32c

INT32_MAX = 2**31 - 1
NOW = 1_700_000_000_000


def header(
    pid: int,
    epoch: int,
    base_seq: int,
    count: int = 1,
    base_offset: int = 0,
    timestamp: int = NOW,
    attributes: int = 0,
) -> RecordBatchHeader:
    return RecordBatchHeader(
        position=0,
        base_offset=base_offset,
        batch_length=100,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=attributes,
        last_offset_delta=count - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_seq,
        records_count=count,
    )


class Log:
    """A tiny stand-in for the Log: assigns offsets and drives the manager like it would."""

    def __init__(self, psm: ProducerStateManager, next_offset: int = 0) -> None:
        self.psm = psm
        self.next_offset = next_offset

    def append(self, h: RecordBatchHeader, timestamp: int = NOW) -> BatchMetadata | None:
        duplicate = self.psm.check(h)
        if duplicate is not None:
            return duplicate
        first = self.next_offset
        last = first + h.last_offset_delta
        self.psm.update(h, first, last, timestamp)
        self.next_offset = last + 1
        self.psm.update_map_end_offset(self.next_offset)
        return None


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path)


def test_sequence_helpers() -> None:
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert increment_sequence(5, 3) == 8
    assert decrement_sequence(0, 1) == INT32_MAX
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    assert decrement_sequence(8, 3) == 5


def test_batches_without_producer_id(psm: ProducerStateManager) -> None:
    h = header(-1, -1, -1, count=3)
    assert psm.check(h) is None
    psm.update(h, 0, 2, NOW)
    assert psm.active_producers == {}
    assert psm.map_end_offset == 0


def test_unknown_producer_accepts_any_sequence(psm: ProducerStateManager) -> None:
    assert psm.check(header(7, 3, 1234)) is None
    log = Log(psm)
    assert log.append(header(7, 3, 1234, count=2)) is None
    entry = psm.last_entry(7)
    assert entry is not None
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq) == (3, 1234, 1235)
    assert (entry.first_data_offset, entry.last_data_offset) == (0, 1)
    assert psm.map_end_offset == 2


def test_in_order_batches_and_gaps(psm: ProducerStateManager) -> None:
    log = Log(psm)
    log.append(header(1, 0, 0, count=5))
    log.append(header(1, 0, 5, count=5))
    with pytest.raises(OutOfOrderSequenceNumber):
        psm.check(header(1, 0, 11))  # gap
    with pytest.raises(OutOfOrderSequenceNumber):
        psm.check(header(1, 0, 7))  # overlaps, not a retained batch
    assert psm.check(header(1, 0, 10)) is None


def test_duplicates_return_original_offsets(psm: ProducerStateManager) -> None:
    log = Log(psm, next_offset=100)
    originals = []
    for i in range(7):
        log.append(header(1, 0, i * 2, count=2))
        originals.append(BatchMetadata(i * 2, i * 2 + 1, 100 + i * 2, 101 + i * 2, NOW))
    entry = psm.last_entry(1)
    assert entry is not None
    assert list(entry.batch_metadata) == originals[-5:]  # only the last 5 are retained
    for original in originals[-5:]:
        dup = psm.check(header(1, 0, original.first_seq, count=2))
        assert dup == original
    # Same first sequence but a different last sequence is not a duplicate.
    with pytest.raises(OutOfOrderSequenceNumber):
        psm.check(header(1, 0, originals[-1].first_seq, count=3))
    # Too old to be remembered: out of order.
    with pytest.raises(OutOfOrderSequenceNumber):
        psm.check(header(1, 0, originals[0].first_seq, count=2))
    assert log.append(header(1, 0, 8, count=2)) == originals[4]
    assert log.next_offset == 114  # nothing appended for the duplicate


def test_fencing_and_epoch_bumps(psm: ProducerStateManager) -> None:
    log = Log(psm)
    log.append(header(1, 5, 0, count=3))
    with pytest.raises(InvalidProducerEpoch):
        psm.check(header(1, 4, 3))
    with pytest.raises(OutOfOrderSequenceNumber):
        psm.check(header(1, 6, 3))  # a new epoch must restart at 0
    assert log.append(header(1, 6, 0, count=2)) is None
    entry = psm.last_entry(1)
    assert entry is not None
    assert entry.producer_epoch == 6
    assert len(entry.batch_metadata) == 1  # the old epoch's batches are forgotten
    # A retry of an old-epoch batch is fenced, not treated as a duplicate.
    with pytest.raises(InvalidProducerEpoch):
        psm.check(header(1, 5, 0, count=3))
    assert psm.check(header(1, 6, 2)) is None


def test_sequence_wraparound(psm: ProducerStateManager) -> None:
    log = Log(psm)
    log.append(header(1, 0, INT32_MAX - 2, count=3))  # seqs MAX-2 .. MAX
    entry = psm.last_entry(1)
    assert entry is not None
    assert entry.last_seq == INT32_MAX
    assert psm.check(header(1, 0, 0)) is None
    with pytest.raises(OutOfOrderSequenceNumber):
        psm.check(header(1, 0, 1))
    log.append(header(1, 0, 0, count=1))
    log.append(header(1, 0, 1, count=4))  # 1..4
    log.append(header(1, 0, 5, count=1))
    # A batch spanning the wrap: MAX-1, MAX, 0, 1.
    psm2 = ProducerStateManager(psm.log_dir / "other")
    log2 = Log(psm2)
    log2.append(header(2, 0, INT32_MAX - 1, count=4))
    e2 = psm2.last_entry(2)
    assert e2 is not None
    assert (e2.first_seq, e2.last_seq) == (INT32_MAX - 1, 1)
    assert psm2.check(header(2, 0, 2)) is None
    assert psm2.check(header(2, 0, INT32_MAX - 1, count=4)) == e2.batch_metadata[-1]


def test_control_batch_updates_epoch_only(psm: ProducerStateManager) -> None:
    log = Log(psm)
    log.append(header(1, 0, 0, count=2))
    marker = header(1, 1, -1, attributes=CONTROL_FLAG_MASK)
    assert psm.check(marker) is None
    log.append(marker)
    entry = psm.last_entry(1)
    assert entry is not None
    assert entry.producer_epoch == 1
    assert entry.is_empty
    with pytest.raises(InvalidProducerEpoch):
        psm.check(header(1, 0, 0, attributes=CONTROL_FLAG_MASK))


def test_take_snapshot_and_reload(tmp_path: Path, psm: ProducerStateManager) -> None:
    log = Log(psm)
    log.append(header(1, 0, 0, count=3))
    log.append(header(1, 0, 3, count=2, timestamp=NOW + 5), timestamp=NOW + 5)
    log.append(header(2, 7, 40, count=1))
    log.append(header(-1, -1, -1, count=10))
    assert psm.map_end_offset == 16
    path = psm.take_snapshot()
    assert path == tmp_path / "00000000000000000016.snapshot"
    assert psm.take_snapshot() is None  # nothing new
    assert psm.latest_snapshot_offset() == 16
    assert psm.snapshot_file_for(16) == path
    assert psm.snapshot_file_for(15) is None

    fresh = ProducerStateManager(tmp_path)
    fresh.truncate_and_reload(0, 16, NOW)
    assert fresh.map_end_offset == 16
    assert set(fresh.active_producers) == {1, 2}
    e1 = fresh.last_entry(1)
    assert e1 is not None
    # Only the last batch of a producer survives a snapshot (as in Kafka).
    assert list(e1.batch_metadata) == [BatchMetadata(3, 4, 3, 4, NOW + 5)]
    assert e1.last_timestamp == NOW + 5
    assert fresh.check(header(1, 0, 3, count=2)) == BatchMetadata(3, 4, 3, 4, NOW + 5)
    assert fresh.check(header(1, 0, 5)) is None
    with pytest.raises(OutOfOrderSequenceNumber):
        fresh.check(header(1, 0, 6))


def test_snapshot_bytes_follow_kafka_schema(tmp_path: Path) -> None:
    entry = ProducerStateEntry(0x0102030405060708, 3, coordinator_epoch=-1)
    entry.add_batch(3, BatchMetadata(10, 14, 100, 104, NOW))
    empty = ProducerStateEntry(5, 1)  # no retained batch
    data = encode_snapshot([entry, empty])
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 2)
    assert crc == crc32c(data[6:])
    assert len(data) == 10 + 2 * 46
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (5, 1, -1, -1, 0, -1, -1, -1)
    assert struct.unpack_from(">qhiqiqiq", data, 56) == (
        0x0102030405060708,
        3,
        14,
        104,
        4,
        NOW,
        -1,
        -1,
    )
    decoded = decode_snapshot(data)
    assert decoded[1].batch_metadata[0] == BatchMetadata(10, 14, 100, 104, NOW)
    assert decoded[0].is_empty
    assert decoded[0].producer_epoch == 1


def test_snapshot_first_seq_wraps_on_load() -> None:
    entry = ProducerStateEntry(1, 0)
    entry.add_batch(0, BatchMetadata(INT32_MAX - 1, 1, 10, 13, NOW))
    (loaded,) = decode_snapshot(encode_snapshot([entry]))
    assert loaded.batch_metadata[0] == BatchMetadata(INT32_MAX - 1, 1, 10, 13, NOW)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:5],  # truncated header
        lambda b: b"\x00\x02" + b[2:],  # unknown version
        lambda b: b[:-1] + bytes([b[-1] ^ 1]),  # flipped bit: CRC mismatch
        lambda b: b[:-3],  # truncated entries
    ],
)
def test_corrupt_snapshots_are_detected(mutate: object) -> None:
    entry = ProducerStateEntry(1, 0)
    entry.add_batch(0, BatchMetadata(0, 0, 0, 0, NOW))
    data = encode_snapshot([entry])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(mutate(data))  # type: ignore[operator]


def test_corrupt_snapshot_falls_back_to_older(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    log = Log(psm)
    log.append(header(1, 0, 0, count=2))
    older = psm.take_snapshot()
    log.append(header(1, 0, 2, count=2))
    newer = psm.take_snapshot()
    assert older is not None and newer is not None
    data = bytearray(newer.read_bytes())
    data[20] ^= 0x40  # inside the entry: the CRC no longer matches
    newer.write_bytes(bytes(data))

    fresh = ProducerStateManager(tmp_path)
    fresh.truncate_and_reload(0, 4, NOW)
    assert fresh.map_end_offset == 2
    assert not newer.exists()  # the corrupt snapshot is deleted
    assert fresh.latest_snapshot_offset() == 2
    e = fresh.last_entry(1)
    assert e is not None and e.last_seq == 1
    # The caller replays [2, 4) and ends up with the full state.
    fresh.update(header(1, 0, 2, count=2), 2, 3, NOW)
    assert fresh.map_end_offset == 4
    assert fresh.check(header(1, 0, 4)) is None

    # All snapshots corrupt: start empty at the log start offset.
    older.write_bytes(b"junk")
    again = ProducerStateManager(tmp_path)
    again.truncate_and_reload(1, 4, NOW)
    assert again.map_end_offset == 1
    assert again.active_producers == {}
    assert again.latest_snapshot_offset() is None


def test_truncate_and_reload_removes_out_of_range_snapshots(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    log = Log(psm)
    for _ in range(4):
        log.append(header(1, 0, log.next_offset))
        psm.take_snapshot()
    assert psm.snapshot_offsets() == [1, 2, 3, 4]
    psm.truncate_and_reload(1, 3, NOW)
    assert psm.oldest_snapshot_offset() == 2
    assert psm.latest_snapshot_offset() == 3
    assert psm.map_end_offset == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000002.snapshot",
        "00000000000000000003.snapshot",
    ]
    entry = psm.last_entry(1)
    assert entry is not None and entry.last_seq == 2


def test_truncate_and_reload_at_map_end_keeps_state(psm: ProducerStateManager) -> None:
    log = Log(psm)
    log.append(header(1, 0, 0, count=3))
    psm.truncate_and_reload(0, 3, NOW)
    assert psm.last_entry(1) is not None
    psm.truncate_and_reload(5, 3, NOW)  # log start moved past the end: map end follows
    assert psm.map_end_offset == 5


def test_take_snapshot_at_roll_offset(tmp_path: Path, psm: ProducerStateManager) -> None:
    log = Log(psm)
    log.append(header(1, 0, 0, count=3))
    path = psm.take_snapshot(10)
    assert path == tmp_path / "00000000000000000010.snapshot"
    assert psm.map_end_offset == 10


def test_expiration(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    log = Log(psm)
    log.append(header(1, 0, 0), timestamp=NOW)
    log.append(header(2, 0, 0), timestamp=NOW + 500)
    psm.take_snapshot()
    psm.remove_expired_producers(NOW + 999)
    assert set(psm.active_producers) == {1, 2}
    psm.remove_expired_producers(NOW + 1000)
    assert set(psm.active_producers) == {2}
    fresh = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    fresh.truncate_and_reload(0, 2, NOW + 1200)
    assert set(fresh.active_producers) == {2}  # expired producers are not loaded


def test_snapshot_housekeeping(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    log = Log(psm)
    for _ in range(5):
        log.append(header(1, 0, log.next_offset))
        psm.take_snapshot()
    psm.delete_snapshots_before(3)
    assert psm.snapshot_offsets() == [3, 4, 5]
    marked = psm.remove_and_mark_snapshot_for_deletion(3)
    assert marked == tmp_path / "00000000000000000003.snapshot.deleted"
    assert marked.exists()
    assert psm.snapshot_offsets() == [4, 5]
    assert psm.remove_and_mark_snapshot_for_deletion(3) is None

    # Snapshots at 4 and 5; segments at 0 and 4: 5 is the newest stray above every segment
    # (a clean-shutdown snapshot) and stays; a stray below the last segment would go.
    (tmp_path / "00000000000000000002.snapshot").write_bytes(encode_snapshot([]))
    psm.remove_stray_snapshots([0, 4])
    assert psm.snapshot_offsets() == [4, 5]
    psm.remove_stray_snapshots([0, 4, 6])
    assert psm.snapshot_offsets() == [4]

    psm.truncate_fully_and_start_at(42)
    assert psm.snapshot_offsets() == []
    assert psm.active_producers == {}
    assert psm.map_end_offset == 42
    assert not any(p.name.endswith(".snapshot") for p in tmp_path.iterdir())


def test_existing_snapshots_are_found_on_construction(tmp_path: Path) -> None:
    entry = ProducerStateEntry(9, 2)
    entry.add_batch(2, BatchMetadata(0, 4, 10, 14, NOW))
    (tmp_path / "00000000000000000015.snapshot").write_bytes(encode_snapshot([entry]))
    (tmp_path / "00000000000000000015.log").write_bytes(b"")
    (tmp_path / "notes.snapshot").write_bytes(b"")
    psm = ProducerStateManager(tmp_path)
    assert psm.snapshot_offsets() == [15]
    assert read_snapshot(tmp_path / "00000000000000000015.snapshot")[0].last_seq == 4
    psm.truncate_and_reload(0, 20, NOW)
    assert psm.map_end_offset == 15
    assert psm.check(header(9, 2, 0, count=5)) == BatchMetadata(0, 4, 10, 14, NOW)


def test_missing_log_dir_has_no_snapshots(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path / "missing")
    assert psm.latest_snapshot_offset() is None
    assert psm.oldest_snapshot_offset() is None
