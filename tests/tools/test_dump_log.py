import re
import struct
import uuid
from pathlib import Path

import pytest

from tierlog.cli import main
from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.log.offset_index import OffsetIndex
from tierlog.records.default_records import (
    CONTROL_TYPE_COMMIT,
    build_batch,
    end_transaction_marker,
)
from tierlog.records.record_batch import COMPRESSION_GZIP, COMPRESSION_ZSTD

T0 = 1_704_067_200_000
SEGMENT = "00000000000000000000"


def dump(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    rc = main(["dump-log", *map(str, args)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def make_log(path: Path, n_batches: int = 6, **overrides: str) -> Log:
    config = LogConfig().with_overrides({"index.interval.bytes": "1", **overrides})
    lg = Log.open(path, config, time_ms=lambda: T0 + 10_000)
    for i in range(n_batches):
        codec = (0, COMPRESSION_GZIP, COMPRESSION_ZSTD)[i % 3]
        lg.append(
            build_batch(
                [
                    (T0 + 10 * i, f"key-{i}".encode(), f"value {i}".encode()),
                    (T0 + 10 * i + 1, None, b"\x00\xff", [("trace", b"abc"), ("nil", None)]),
                ],
                codec,
            )
        )
    return lg


@pytest.fixture
def segment_dir(tmp_path):
    d = tmp_path / "orders-0"
    make_log(d).close()
    return d


def batch_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("baseOffset:")]


def test_log_batches(capsys, segment_dir):
    rc, out, err = dump(capsys, segment_dir / f"{SEGMENT}.log")
    assert rc == 0, err
    assert out.splitlines()[0] == f"Dumping {segment_dir / SEGMENT}.log"
    assert "Log starting offset: 0" in out
    lines = batch_lines(out)
    assert len(lines) == 6
    first = lines[0]
    for field in (
        "baseOffset: 0",
        "lastOffset: 1",
        "count: 2",
        "position: 0",
        f"CreateTime: {T0 + 1}",
        "compresscodec: none",
        "producerId: -1",
        "producerEpoch: -1",
        "baseSequence: -1",
        "partitionLeaderEpoch: 0",
        "isTransactional: false",
        "isControl: false",
        "isvalid: true",
        "magic: 2",
    ):
        assert field in first
    assert "compresscodec: gzip" in lines[1] and "compresscodec: zstd" in lines[2]
    assert re.search(r"crc: \d+ ", first)
    # positions add up to the file size
    sizes = [int(re.findall(r"size: (\d+)", line)[0]) for line in lines]
    positions = [int(re.findall(r"position: (\d+)", line)[0]) for line in lines]
    assert positions == [sum(sizes[:i]) for i in range(6)]
    assert sum(sizes) == (segment_dir / f"{SEGMENT}.log").stat().st_size
    assert "| offset" not in out  # no records without --print-data / --deep-iteration


def test_print_data_decodes_records(capsys, segment_dir):
    rc, out, _ = dump(capsys, "--print-data", segment_dir / f"{SEGMENT}.log")
    assert rc == 0
    records = [line for line in out.splitlines() if line.startswith("| offset")]
    assert len(records) == 12
    assert records[0] == (
        f"| offset: 0 CreateTime: {T0} keySize: 5 valueSize: 7 sequence: -1 headerKeys: [] "
        "key: key-0 payload: value 0"
    )
    assert records[1] == (
        f"| offset: 1 CreateTime: {T0 + 1} keySize: -1 valueSize: 2 sequence: -1 "
        "headerKeys: [trace,nil] payload: 0x00ff headers: [trace=abc, nil=null]"
    )
    assert "key: key-4 payload: value 4" in records[8]  # a zstd batch decoded


def test_deep_iteration_without_data(capsys, segment_dir):
    rc, out, _ = dump(capsys, "--deep-iteration", segment_dir / f"{SEGMENT}.log")
    assert rc == 0
    records = [line for line in out.splitlines() if line.startswith("| offset")]
    assert len(records) == 12 and "payload" not in out


def test_offset_and_time_index(capsys, segment_dir):
    index = segment_dir / f"{SEGMENT}.index"
    rc, out, err = dump(capsys, index, segment_dir / f"{SEGMENT}.timeindex")
    assert rc == 0, err
    idx = OffsetIndex(index, 0, writable=False)
    expected = [f"offset: {e.offset} position: {e.position}" for e in idx.entries_list()]
    idx.close()
    assert expected  # index.interval.bytes=1: an entry per batch after the first
    lines = out.splitlines()
    for line in expected:
        assert line in lines
    assert re.search(r"timestamp: \d+ offset: \d+", out)


def test_index_of_an_open_log_stops_at_the_zero_filled_tail(capsys, tmp_path):
    lg = make_log(tmp_path / "t-0")  # the active segment's index is preallocated
    try:
        rc, out, err = dump(capsys, lg.dir / f"{SEGMENT}.index", lg.dir / f"{SEGMENT}.timeindex")
    finally:
        lg.close()
    assert rc == 0, err
    assert out.count("offset: ") == 2 * 5


def test_verify_index_only_and_sanity_check(capsys, segment_dir):
    rc, out, _ = dump(capsys, "--verify-index-only", segment_dir / f"{SEGMENT}.index")
    assert rc == 0 and "position:" not in out
    rc, out, _ = dump(capsys, "--index-sanity-check", segment_dir / f"{SEGMENT}.timeindex")
    assert rc == 0 and "passed sanity check" in out


def test_checkpoint_and_metadata_files(capsys, tmp_path):
    d = tmp_path / "t-0"
    lg = Log.open(d, LogConfig(), time_ms=lambda: T0, topic_id=uuid.uuid4())
    lg.append(build_batch([(T0, b"k", b"v")], producer_id=42, producer_epoch=3, base_sequence=0))
    lg.roll()  # takes a producer snapshot
    lg.close()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 1\n")
    snapshots = sorted(d.glob("*.snapshot"))
    rc, out, err = dump(
        capsys,
        d / "leader-epoch-checkpoint",
        d / "partition.metadata",
        tmp_path / "recovery-point-offset-checkpoint",
        *snapshots,
    )
    assert rc == 0, err
    assert "epoch: 0 startOffset: 0" in out
    assert "topic: t partition: 0 offset: 1" in out
    assert "producerId: 42 producerEpoch: 3" in out
    assert "lastSequence: 0 lastOffset: 0" in out
    assert "topic_id: " in out


def test_control_batch(capsys, tmp_path):
    key, value = end_transaction_marker(CONTROL_TYPE_COMMIT, 5)
    data = build_batch(
        [(T0, key, value)], producer_id=7, producer_epoch=1, is_transactional=True, is_control=True
    )
    f = tmp_path / f"{SEGMENT}.log"
    f.write_bytes(data)
    rc, out, _ = dump(capsys, "--print-data", f)
    assert rc == 0
    assert "isTransactional: true isControl: true" in out
    assert "endTxnMarker: COMMIT coordinatorEpoch: 5" in out


def test_empty_log_file(capsys, tmp_path):
    f = tmp_path / f"{SEGMENT}.log"
    f.write_bytes(b"")
    rc, out, _ = dump(capsys, f)
    assert rc == 0 and "Log starting offset: 0" in out and not batch_lines(out)


# --------------------------------------------------------------------------- bad files


def test_corrupt_crc_is_reported(capsys, segment_dir):
    f = segment_dir / f"{SEGMENT}.log"
    data = bytearray(f.read_bytes())
    second = int(struct.unpack_from(">i", data, 8)[0]) + 12
    data[second + 70] ^= 0xFF  # inside the second batch's records
    f.write_bytes(bytes(data))
    rc, out, err = dump(capsys, f)
    assert rc == 1
    lines = batch_lines(out)
    assert "isvalid: true" in lines[0] and "isvalid: false" in lines[1]
    assert f"{f}: batch at position {second} (offsets 2..3) fails its CRC-32C check" in err


def test_truncated_tail_is_reported(capsys, segment_dir):
    f = segment_dir / f"{SEGMENT}.log"
    size = f.stat().st_size
    with open(f, "r+b") as fh:
        fh.truncate(size - 10)
    rc, out, err = dump(capsys, f)
    assert rc == 1
    assert len(batch_lines(out)) == 5
    assert "invalid bytes at the end" in out
    assert re.search(
        rf"{re.escape(str(f))}: \d+ invalid bytes at position \d+: a partial batch", err
    )
    assert len(err.strip().splitlines()) == 1


def test_garbage_tail_is_reported(capsys, segment_dir):
    f = segment_dir / f"{SEGMENT}.log"
    size = f.stat().st_size
    with open(f, "ab") as fh:
        fh.write(b"\x07" * 100)
    rc, out, err = dump(capsys, f)
    assert rc == 1
    assert len(batch_lines(out)) == 6
    assert f"{f}: 100 invalid bytes at position {size}: garbage" in err


def test_index_entry_not_at_a_batch_boundary(capsys, segment_dir):
    index = segment_dir / f"{SEGMENT}.index"
    data = bytearray(index.read_bytes())
    rel, pos = struct.unpack_from(">ii", data, 0)
    struct.pack_into(">ii", data, 0, rel, pos + 3)
    index.write_bytes(bytes(data))
    rc, out, err = dump(capsys, index)
    assert rc == 1
    assert f"offset: {rel} position: {pos + 3}" in out
    assert "does not point at the start of a batch" in err
    assert str(index) in err


def test_index_entry_offset_outside_its_batch(capsys, segment_dir):
    index = segment_dir / f"{SEGMENT}.index"
    data = bytearray(index.read_bytes())
    rel, pos = struct.unpack_from(">ii", data, 0)
    struct.pack_into(">ii", data, 0, rel - 2, pos)
    index.write_bytes(bytes(data))
    rc, _, err = dump(capsys, "--verify-index-only", index)
    assert rc == 1
    assert f"offset {rel - 2} is not in the batch at position {pos}" in err


def test_time_index_mismatch(capsys, segment_dir):
    tindex = segment_dir / f"{SEGMENT}.timeindex"
    data = bytearray(tindex.read_bytes())
    ts, rel = struct.unpack_from(">qi", data, 0)
    struct.pack_into(">qi", data, 0, ts - 5, rel)
    tindex.write_bytes(bytes(data))
    rc, _, err = dump(capsys, tindex)
    assert rc == 1
    assert f"index timestamp {ts - 5} differs from the max timestamp {ts}" in err


def test_index_with_partial_entry(capsys, segment_dir):
    index = segment_dir / f"{SEGMENT}.index"
    with open(index, "ab") as fh:
        fh.write(b"\x01\x02\x03")
    rc, _, err = dump(capsys, "--index-sanity-check", index)
    assert rc == 1 and "not a multiple of the entry size 8" in err


def test_index_without_its_log_is_printed_unverified(capsys, segment_dir):
    (segment_dir / f"{SEGMENT}.log").unlink()
    rc, out, err = dump(capsys, segment_dir / f"{SEGMENT}.index")
    assert rc == 0
    assert "position:" in out and "not verified" in err


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing.log", "no such file"),
        ("notes.txt", "no such file"),
    ],
)
def test_missing_files(capsys, tmp_path, name, message):
    rc, _, err = dump(capsys, tmp_path / name)
    assert rc == 1
    assert err == f"{tmp_path / name}: {message}\n"


def test_unknown_type_and_directory(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    rc, _, err = dump(capsys, tmp_path / "notes.txt", tmp_path)
    assert rc == 1
    lines = err.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'notes.txt'}: unknown file type")
    assert lines[1] == f"{tmp_path}: is a directory, not a file"


def test_bad_snapshot_and_checkpoint(capsys, tmp_path):
    snap = tmp_path / f"{SEGMENT}.snapshot"
    snap.write_bytes(b"\x00\x01garbage-garbage")
    ckpt = tmp_path / "leader-epoch-checkpoint"
    ckpt.write_text("0\n2\n0 0\n")
    rc, _, err = dump(capsys, snap, ckpt)
    assert rc == 1
    assert f"{snap}: producer snapshot fails its CRC-32C check" in err
    assert f"{ckpt}: declares 2 entries but has 1" in err


def test_good_and_bad_files_together(capsys, segment_dir):
    rc, out, err = dump(capsys, segment_dir / "nope.log", segment_dir / f"{SEGMENT}.log")
    assert rc == 1
    assert len(batch_lines(out)) == 6
    assert err.strip() == f"{segment_dir / 'nope.log'}: no such file"


def test_remote_indexes_object(capsys, segment_dir, tmp_path):
    from tierlog.tiered.storage.remote_storage_manager import IndexType
    from tierlog.tiered.storage.segment_objects import IndexesObject

    index = (segment_dir / f"{SEGMENT}.index").read_bytes()
    timeindex = (segment_dir / f"{SEGMENT}.timeindex").read_bytes()
    obj = IndexesObject(
        {
            IndexType.OFFSET: index,
            IndexType.TIMESTAMP: timeindex,
            IndexType.TRANSACTION: b"",
            IndexType.LEADER_EPOCH: b"0\n1\n0 0\n",
        },
        None,
    )
    remote = tmp_path / "00000000000000000000-Qbfat8qYS72TUwkflNmNzA.indexes"
    remote.write_bytes(obj.encode())
    rc, out, err = dump(capsys, remote)
    assert rc == 0, err
    assert (
        "Remote indexes of the segment starting at offset 0: OFFSET, TIMESTAMP, TRANSACTION, "
        "LEADER_EPOCH"
    ) in out
    idx = OffsetIndex(segment_dir / f"{SEGMENT}.index", 0, writable=False)
    expected = [f"offset: {e.offset} position: {e.position}" for e in idx.entries_list()]
    idx.close()
    assert expected and all(line in out.splitlines() for line in expected)
    assert "epoch: 0 startOffset: 0" in out
    assert re.search(r"timestamp: \d+ offset: \d+", out)
    # A damaged object: its CRC fails, exit 1 naming it.
    data = bytearray(remote.read_bytes())
    data[-3] ^= 0xFF
    remote.write_bytes(bytes(data))
    rc, out, err = dump(capsys, remote)
    assert rc == 1
    assert f"{remote}: cannot parse: corrupt remote indexes object" in err
    bad_name = tmp_path / "segment.indexes"
    bad_name.write_bytes(obj.encode())
    rc, out, err = dump(capsys, bad_name)
    assert rc == 1
    assert "segment.indexes is not named <20-digit start offset>-<segment id>.indexes" in err
