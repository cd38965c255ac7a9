"""``tierlog dump-log``: print and check the files of a partition directory (Kafka's
``kafka-dump-log`` / ``DumpLogSegments``).

What each file type prints, with Kafka's field names so its users' scripts keep working:

* ``.log`` — one line per batch (``baseOffset: … lastOffset: … count: … position: …
  CreateTime: … size: … compresscodec: … crc: … isvalid: …``); with ``--deep-iteration`` or
  ``--print-data`` one ``| offset: …`` line per record, with key, payload and headers.
  A torn tail or trailing garbage is reported with its position and size.
* ``.index`` — ``offset: X position: Y`` per entry; an entry whose position is not the start of
  a batch in the segment's ``.log``, or whose offset is not inside that batch, is flagged.
* ``.timeindex`` — ``timestamp: T offset: O`` per entry; flagged when O is not the last offset
  of a batch, when T is not that batch's max timestamp, or when timestamps do not increase
  (the checks of Kafka's ``dumpTimeIndex``).
* ``.snapshot`` (producer state), ``.txnindex``, ``leader-epoch-checkpoint``,
  ``partition.metadata`` and the offset checkpoint files — their entries.

The files are read directly (mmap, read-only) rather than through LogSegment/OffsetIndex, so the
tool shows what is on disk even when those classes would refuse to open it. Findings go to
stderr as one ``FILE: problem`` line each; the exit code is 1 when any file was missing,
unreadable or inconsistent. Never a traceback.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tierlog.errors import TierlogError
from tierlog.log.log_file_utils import (
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    LOG_FILE_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT_FILENAME,
    PARTITION_METADATA_FILENAME,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    RECOVERY_POINT_CHECKPOINT_FILENAME,
    REPLICATION_OFFSET_CHECKPOINT_FILENAME,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
)
from tierlog.records.default_records import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    Record,
    control_record_type,
    read_records,
)
from tierlog.records.record_batch import (
    COMPRESSION_NAMES,
    DELETE_HORIZON_FLAG_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    compute_crc,
    iter_headers,
    read_header,
)
from tierlog.tiered.storage.segment_objects import INDEXES_SUFFIX
from tierlog.tools.progress import bar

__all__ = ["DumpOptions", "dump_files"]

Buffer = bytes | memoryview

_LENGTH_PREFIX = struct.Struct(">qi")
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
# Legacy (magic 0/1) minimum record sizes after the length field: crc, magic, attributes,
# [timestamp,] key length, value length.
_LEGACY_MIN_LENGTH = {0: 14, 1: 22}
_INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """Kafka's DumpLogSegments switches (``--print-data-log`` implies deep iteration)."""

    print_data: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_bytes: int = _INT_MAX


def dump_files(
    paths: Sequence[str | os.PathLike[str]], options: DumpOptions, out: TextIO, err: TextIO
) -> int:
    """Dump every file of ``paths`` to ``out``; problems to ``err``. Returns the exit code."""
    dumper = _Dumper(options, out, err)
    for p in paths:
        dumper.dump(Path(p))
    return 1 if dumper.problems else 0


@contextmanager
def _mapped(path: Path) -> Iterator[Buffer]:
    """The file's bytes, memory-mapped read-only (b"" for an empty file)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(m)
        try:
            yield view
        finally:
            view.release()
            try:
                m.close()
            except BufferError:  # a slice still alive: the GC unmaps it
                pass


def _text(data: bytes) -> str:
    """Data as text when it is printable UTF-8, else as 0x-prefixed hex."""
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()
    return s if s.isprintable() else "0x" + data.hex()


def _bool(b: bool) -> str:
    return "true" if b else "false"


class _Dumper:
    def __init__(self, options: DumpOptions, out: TextIO, err: TextIO) -> None:
        self.opts = options
        self.out = out
        self.err = err
        self.problems = 0

    def print(self, line: str) -> None:
        self.out.write(line + "\n")

    def problem(self, path: Path, message: str) -> None:
        self.err.write(f"{path}: {message}\n")
        self.problems += 1

    # ----------------------------------------------------------------- dispatch

    def dump(self, path: Path) -> None:
        if not path.exists():
            self.problem(path, "no such file")
            return
        if path.is_dir():
            self.problem(path, "is a directory, not a file")
            return
        name = path.name
        for transit in (DELETED_FILE_SUFFIX, SWAP_FILE_SUFFIX):
            if name.endswith(transit):
                name = name[: -len(transit)]
        suffix = Path(name).suffix
        handlers = {
            LOG_FILE_SUFFIX: self.dump_log,
            INDEX_FILE_SUFFIX: self.dump_offset_index,
            TIME_INDEX_FILE_SUFFIX: self.dump_time_index,
            PRODUCER_SNAPSHOT_FILE_SUFFIX: self.dump_producer_snapshot,
            TXN_INDEX_FILE_SUFFIX: self.dump_txn_index,
        }
        handler = handlers.get(suffix)
        if suffix == INDEXES_SUFFIX:
            handler = self.dump_remote_indexes
        if name == LEADER_EPOCH_CHECKPOINT_FILENAME:
            handler = self.dump_leader_epoch_checkpoint
        elif name == PARTITION_METADATA_FILENAME:
            handler = self.dump_text_file
        elif name in (
            RECOVERY_POINT_CHECKPOINT_FILENAME,
            LOG_START_OFFSET_CHECKPOINT_FILENAME,
            REPLICATION_OFFSET_CHECKPOINT_FILENAME,
        ):
            handler = self.dump_offset_checkpoint
        if handler is None:
            self.problem(
                path,
                "unknown file type; expected a .log, .index, .timeindex, .snapshot or "
                ".txnindex file, a remote segment's .indexes object, a "
                "leader-epoch-checkpoint, partition.metadata or an offset checkpoint",
            )
            return
        self.print(f"Dumping {path}")
        try:
            handler(path)
        except FileNotFoundError:
            self.problem(path, "no such file")
        except IsADirectoryError:
            self.problem(path, "is a directory, not a file")
        except PermissionError:
            self.problem(path, "permission denied")
        except OSError as e:
            self.problem(path, f"cannot read: {e.strerror or e}")
        except (TierlogError, ValueError, struct.error) as e:  # ValueError: e.g. mmap, names
            self.problem(path, f"cannot parse: {e}")
        except Exception as e:  # a debugging tool reports, it never dumps a traceback
            self.problem(path, f"unexpected error: {type(e).__name__}: {e}")

    # ----------------------------------------------------------------- remote .indexes

    def dump_remote_indexes(self, path: Path) -> None:
        """A remote segment's ``.indexes`` object (tiered/storage/segment_objects.py): its
        table of contents checked, then each section dumped as the local file it was."""
        import tempfile

        from tierlog.tiered.storage.remote_storage_manager import IndexType
        from tierlog.tiered.storage.segment_objects import IndexesObject

        base = _offset_from_name(Path(path.name.split("-", 1)[0] + ".indexes"))
        if base is None:
            raise ValueError(
                f"{path.name} is not named <20-digit start offset>-<segment id>.indexes"
            )
        obj = IndexesObject.decode(path.read_bytes())  # every CRC checked
        self.print(f"Remote indexes of the segment starting at offset {base}: "
                   f"{', '.join(t.name for t in sorted(obj.indexes))}"
                   + (f"; zstd-chunked data object, {len(obj.chunk_index.positions) - 1} "
                      f"chunks, {obj.chunk_index.original_size} bytes uncompressed"
                      if obj.chunk_index is not None else ""))  # fmt: skip
        names = {
            IndexType.OFFSET: (f"{base:020d}{INDEX_FILE_SUFFIX}", self.dump_offset_index),
            IndexType.TIMESTAMP: (f"{base:020d}{TIME_INDEX_FILE_SUFFIX}", self.dump_time_index),
            IndexType.PRODUCER_SNAPSHOT: (
                f"{base:020d}{PRODUCER_SNAPSHOT_FILE_SUFFIX}",
                self.dump_producer_snapshot,
            ),
            IndexType.TRANSACTION: (f"{base:020d}{TXN_INDEX_FILE_SUFFIX}", self.dump_txn_index),
            IndexType.LEADER_EPOCH: (
                LEADER_EPOCH_CHECKPOINT_FILENAME,
                self.dump_leader_epoch_checkpoint,
            ),
        }
        with tempfile.TemporaryDirectory(prefix="tierlog-dump-") as tmp:
            for kind in sorted(obj.indexes):
                name, dump = names[kind]
                section = Path(tmp) / name
                section.write_bytes(obj.indexes[kind])
                self.print(f"Section {kind.name} ({len(obj.indexes[kind])} bytes):")
                if not obj.indexes[kind]:
                    self.print("(empty)")
                    continue
                dump(section)

    # ----------------------------------------------------------------- .log

    def dump_log(self, path: Path) -> None:
        base = _offset_from_name(path)
        if base is not None:
            self.print(f"Log starting offset: {base}")
        deep = self.opts.deep_iteration or self.opts.print_data
        with _mapped(path) as buf, bar(total=min(len(buf), self.opts.max_bytes),
                                       desc=path.name) as progress:  # fmt: skip
            end = min(len(buf), self.opts.max_bytes)
            pos = 0
            last_offset = -1
            gaps: list[tuple[int, int]] = []
            while pos < end:
                progress.update(pos - progress.n)  # a no-op unless stderr is a terminal
                trouble = _check_batch_at(buf, pos, end)
                if trouble is not None:
                    if end == len(buf):  # not cut by --max-bytes
                        self.print(f"Found {end - pos} invalid bytes at the end of {path.name}")
                        self.problem(
                            path, f"{end - pos} invalid bytes at position {pos}: {trouble}"
                        )
                    break
                magic = buf[pos + MAGIC_OFFSET]
                if magic < 2:
                    offset, length = _LENGTH_PREFIX.unpack_from(buf, pos)
                    self.print(
                        f"offset: {offset} position: {pos} size: {length + LOG_OVERHEAD} "
                        f"magic: {magic} (legacy message format: not decoded)"
                    )
                    pos += length + LOG_OVERHEAD
                    continue
                header = read_header(buf, pos)
                valid = compute_crc(buf, header) == header.crc
                self.print(_batch_line(header, valid))
                if not valid:
                    self.problem(
                        path,
                        f"batch at position {pos} (offsets {header.base_offset}.."
                        f"{header.last_offset}) fails its CRC-32C check",
                    )
                if deep:
                    try:
                        records = read_records(buf, header)
                    except TierlogError as e:
                        self.problem(path, f"cannot decode the records at position {pos}: {e}")
                        records = []
                    for record in records:
                        if last_offset >= 0 and record.offset != last_offset + 1:
                            gaps.append((last_offset, record.offset))
                        last_offset = record.offset
                        self.print(self._record_line(header, record))
                pos += header.size_in_bytes
            if gaps:
                self.err.write(f"Non-consecutive offsets in {path} (normal for compacted topics)\n")
                for first, second in gaps:
                    self.err.write(f"  {first} is followed by {second}\n")

    def _record_line(self, header: RecordBatchHeader, record: Record) -> str:
        ts_type = "LogAppendTime" if header.timestamp_type else "CreateTime"
        if header.base_sequence < 0:
            sequence = -1
        else:
            sequence = (header.base_sequence + record.offset - header.base_offset) % 2**31
        parts = [
            f"| offset: {record.offset} {ts_type}: {record.timestamp}",
            f"keySize: {-1 if record.key is None else len(record.key)}",
            f"valueSize: {-1 if record.value is None else len(record.value)}",
            f"sequence: {sequence}",
            "headerKeys: [" + ",".join(k for k, _ in record.headers) + "]",
        ]
        if header.is_control_batch:
            parts.append(_control_text(record))
        elif self.opts.print_data:
            if record.key is not None:
                parts.append(f"key: {_text(record.key)}")
            if record.value is not None:
                parts.append(f"payload: {_text(record.value)}")
            if record.headers:
                hs = ", ".join(
                    f"{k}={'null' if v is None else _text(v)}" for k, v in record.headers
                )
                parts.append(f"headers: [{hs}]")
        return " ".join(parts)

    # ----------------------------------------------------------------- indexes

    def dump_offset_index(self, path: Path) -> None:
        base = _required_offset(path)
        with _mapped(path) as buf:
            entries = len(buf) // _OFFSET_ENTRY.size
            if len(buf) % _OFFSET_ENTRY.size:
                self.problem(
                    path,
                    f"size {len(buf)} is not a multiple of the entry size {_OFFSET_ENTRY.size}",
                )
            if entries == 0:
                self.print(f"{path} is empty.")
                return
            if self.opts.index_sanity_check:
                last_rel = _OFFSET_ENTRY.unpack_from(buf, (entries - 1) * _OFFSET_ENTRY.size)[0]
                if last_rel < 0:
                    self.problem(
                        path,
                        f"corrupt index: last offset {base + last_rel} is below the base "
                        f"offset {base}",
                    )
                elif not len(buf) % _OFFSET_ENTRY.size:
                    self.print(f"{path} passed sanity check.")
                return
            batches = self._segment_batches(path, base)
            prev: tuple[int, int] | None = None
            for i in range(entries):
                rel, position = _OFFSET_ENTRY.unpack_from(buf, i * _OFFSET_ENTRY.size)
                offset = base + rel
                # A preallocated, sparse index is zero-filled after its last entry (crash).
                if i > 0 and rel == 0:
                    break
                if not self.opts.verify_index_only:
                    self.print(f"offset: {offset} position: {position}")
                if prev is not None and (offset <= prev[0] or position <= prev[1]):
                    self.problem(
                        path,
                        f"entry {i} (offset {offset} position {position}) does not increase "
                        f"over entry {i - 1} (offset {prev[0]} position {prev[1]})",
                    )
                prev = (offset, position)
                if batches is None:
                    continue
                batch = batches.at_position.get(position)
                if batch is None:
                    self.problem(
                        path,
                        f"entry {i} (offset {offset} position {position}) does not point at "
                        "the start of a batch in the log",
                    )
                elif not batch.base_offset <= offset <= batch.last_offset:
                    self.problem(
                        path,
                        f"entry {i}: offset {offset} is not in the batch at position "
                        f"{position} (offsets {batch.base_offset}..{batch.last_offset})",
                    )

    def dump_time_index(self, path: Path) -> None:
        base = _required_offset(path)
        with _mapped(path) as buf:
            size = _TIME_ENTRY.size
            entries = len(buf) // size
            if len(buf) % size:
                self.problem(path, f"size {len(buf)} is not a multiple of the entry size {size}")
            if entries == 0:
                self.print(f"{path} is empty.")
                return
            if self.opts.index_sanity_check:
                first_ts = _TIME_ENTRY.unpack_from(buf, 0)[0]
                last_ts, last_rel = _TIME_ENTRY.unpack_from(buf, (entries - 1) * size)
                if last_rel < 0:
                    self.problem(
                        path,
                        f"corrupt time index: last offset {base + last_rel} is below the base "
                        f"offset {base}",
                    )
                elif last_ts < first_ts:
                    self.problem(
                        path,
                        f"corrupt time index: last timestamp {last_ts} is below the first "
                        f"timestamp {first_ts}",
                    )
                elif not len(buf) % size:
                    self.print(f"{path} passed sanity check.")
                return
            batches = self._segment_batches(path, base)
            prev_ts: int | None = None
            for i in range(entries):
                timestamp, rel = _TIME_ENTRY.unpack_from(buf, i * size)
                offset = base + rel
                if i > 0 and rel == 0:  # zero-filled tail of a preallocated index
                    break
                if not self.opts.verify_index_only:
                    self.print(f"timestamp: {timestamp} offset: {offset}")
                if prev_ts is not None and timestamp <= prev_ts:
                    self.problem(
                        path,
                        f"entry {i}: timestamp {timestamp} does not increase over the "
                        f"previously indexed timestamp {prev_ts}",
                    )
                prev_ts = timestamp
                if batches is None:
                    continue
                batch = batches.containing(offset)
                if batch is None:
                    self.problem(path, f"entry {i}: indexed offset {offset} is not in the log")
                elif batch.last_offset != offset:
                    self.problem(
                        path,
                        f"entry {i}: indexed offset {offset} is not the last offset of its "
                        f"batch (offsets {batch.base_offset}..{batch.last_offset})",
                    )
                elif batch.max_timestamp != timestamp:
                    self.problem(
                        path,
                        f"entry {i}: index timestamp {timestamp} differs from the max "
                        f"timestamp {batch.max_timestamp} of the batch ending at offset {offset}",
                    )

    def _segment_batches(self, index_path: Path, base: int) -> _Batches | None:
        """The batches of the ``.log`` next to an index, or None (noted) when it is missing."""
        log_path = index_path.with_name(index_path.name.split(".")[0] + LOG_FILE_SUFFIX)
        if not log_path.is_file():
            self.err.write(f"{index_path}: no {log_path.name} next to it; entries not verified\n")
            return None
        with _mapped(log_path) as buf:
            return _Batches(list(iter_headers(buf)))

    # ----------------------------------------------------------------- other files

    def dump_producer_snapshot(self, path: Path) -> None:
        # Kafka's ProducerStateManager snapshot: version int16 (1), crc uint32 (CRC-32C of the
        # rest), then an int32-counted array of entries of 46 bytes each.
        from tierlog.records.record_batch import crc32c

        data = path.read_bytes()
        if len(data) < 10:
            self.problem(path, f"producer snapshot of {len(data)} bytes is truncated")
            return
        version, crc = struct.unpack_from(">hI", data, 0)
        if version != 1:
            self.problem(path, f"unknown producer snapshot version {version}")
            return
        if crc32c(data[6:]) != crc:
            self.problem(path, "producer snapshot fails its CRC-32C check")
            return
        (count,) = struct.unpack_from(">i", data, 6)
        entry = struct.Struct(">qhiqiqiq")
        if count < 0 or 10 + count * entry.size != len(data):
            self.problem(path, f"producer snapshot has {count} entries but {len(data)} bytes")
            return
        for i in range(count):
            pid, epoch, last_seq, last_off, delta, ts, coord_epoch, txn_first = entry.unpack_from(
                data, 10 + i * entry.size
            )
            first_seq = last_seq - delta if last_seq - delta >= 0 else last_seq - delta + 2**31
            txn = "OptionalLong.empty" if txn_first < 0 else f"OptionalLong[{txn_first}]"
            self.print(
                f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coord_epoch} "
                f"currentTxnFirstOffset: {txn} lastTimestamp: {ts} firstSequence: {first_seq} "
                f"lastSequence: {last_seq} lastOffset: {last_off} offsetDelta: {delta} "
                f"timestamp: {ts}"
            )

    def dump_txn_index(self, path: Path) -> None:
        # Kafka's TransactionIndex: 34-byte entries: version int16, producerId, firstOffset,
        # lastOffset, lastStableOffset (int64 each).
        data = path.read_bytes()
        entry = struct.Struct(">hqqqq")
        if len(data) % entry.size:
            self.problem(path, f"size {len(data)} is not a multiple of the entry size 34")
        for i in range(len(data) // entry.size):
            version, pid, first, last, lso = entry.unpack_from(data, i * entry.size)
            self.print(
                f"version: {version} producerId: {pid} firstOffset: {first} "
                f"lastOffset: {last} lastStableOffset: {lso}"
            )

    def dump_leader_epoch_checkpoint(self, path: Path) -> None:
        for epoch, start in self._checkpoint_entries(path, 2):
            self.print(f"epoch: {epoch} startOffset: {start}")

    def dump_offset_checkpoint(self, path: Path) -> None:
        for topic, partition, offset in self._checkpoint_entries(path, 3):
            self.print(f"topic: {topic} partition: {partition} offset: {offset}")

    def dump_text_file(self, path: Path) -> None:
        for line in path.read_text("utf-8").splitlines():
            self.print(line)

    def _checkpoint_entries(self, path: Path, fields: int) -> list[list[str]]:
        """Kafka's CheckpointFile text format: version (0), count, then one entry per line."""
        lines = path.read_text("utf-8").splitlines()
        if len(lines) < 2 or lines[0].strip() != "0" or not lines[1].strip().isdigit():
            self.problem(path, "not a checkpoint file: expected version 0 and an entry count")
            return []
        count = int(lines[1])
        rows = [line.split() for line in lines[2:] if line.strip()]
        if len(rows) != count:
            self.problem(path, f"declares {count} entries but has {len(rows)}")
        good = []
        for row in rows:
            if len(row) != fields or not all(x.lstrip("-").isdigit() for x in row[-2:]):
                self.problem(path, f"malformed entry {' '.join(row)!r}")
            else:
                good.append(row)
        return good


# --------------------------------------------------------------------------- helpers


class _Batches:
    """The batch headers of one segment, for index verification."""

    def __init__(self, headers: list[RecordBatchHeader]) -> None:
        self.at_position = {h.position: h for h in headers}
        self._headers = headers
        self._last_offsets = [h.last_offset for h in headers]

    def containing(self, offset: int) -> RecordBatchHeader | None:
        i = bisect.bisect_left(self._last_offsets, offset)
        if i == len(self._headers) or self._headers[i].base_offset > offset:
            return None
        return self._headers[i]


def _check_batch_at(buf: Buffer, pos: int, end: int) -> str | None:
    """Why the bytes at ``pos`` are not a complete batch, or None when they are."""
    remaining = end - pos
    if buf[pos] == 0 and _all_zero(buf, pos, end):
        return "all zero bytes (a preallocated or torn tail)"
    if remaining <= MAGIC_OFFSET:
        return f"too short for a batch header ({remaining} bytes)"
    _, length = _LENGTH_PREFIX.unpack_from(buf, pos)
    magic = buf[pos + MAGIC_OFFSET]
    if magic > 2:
        return f"garbage: magic byte {magic} is not 0, 1 or 2"
    minimum = _LEGACY_MIN_LENGTH.get(magic, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD)
    if length < minimum:
        return f"garbage: batch length {length} is below the minimum {minimum}"
    if magic == 2 and remaining < RECORD_BATCH_OVERHEAD:
        return f"a partial batch: {remaining} bytes, less than the 61-byte header"
    if length + LOG_OVERHEAD > remaining:
        return (
            f"a partial batch: declared size {length + LOG_OVERHEAD}, "
            f"only {remaining} bytes present"
        )
    return None


def _all_zero(buf: Buffer, start: int, end: int) -> bool:
    chunk = 1 << 20
    for i in range(start, end, chunk):
        part = bytes(buf[i : min(i + chunk, end)])
        if part.count(0) != len(part):
            return False
    return True


def _batch_line(h: RecordBatchHeader, valid: bool) -> str:
    ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
    horizon = (
        f"OptionalLong[{h.base_timestamp}]"
        if h.attributes & DELETE_HORIZON_FLAG_MASK
        else "OptionalLong.empty"
    )
    codec = h.compression_type
    codec_name = COMPRESSION_NAMES[codec] if codec < len(COMPRESSION_NAMES) else f"unknown({codec})"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control_batch)} "
        f"deleteHorizonMs: {horizon} position: {h.position} {ts_type}: {h.max_timestamp} "
        f"size: {h.size_in_bytes} magic: {h.magic} compresscodec: {codec_name} "
        f"crc: {h.crc} isvalid: {_bool(valid)}"
    )


def _control_text(record: Record) -> str:
    try:
        ctype = control_record_type(record.key)
    except TierlogError:
        return "controlType: invalid key"
    value = record.value
    if ctype in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT) and value is not None and len(value) >= 6:
        (coordinator_epoch,) = struct.unpack_from(">i", value, 2)
        marker = "ABORT" if ctype == CONTROL_TYPE_ABORT else "COMMIT"
        return f"endTxnMarker: {marker} coordinatorEpoch: {coordinator_epoch}"
    return f"controlType: UNKNOWN({ctype})"


def _offset_from_name(path: Path) -> int | None:
    prefix = path.name.split(".")[0]
    return int(prefix) if prefix.isdigit() else None


def _required_offset(path: Path) -> int:
    base = _offset_from_name(path)
    if base is None:
        raise ValueError(f"{path.name} is not named <20-digit base offset>.<suffix>")
    return base
