"""On-disk names of a partition directory, and the atomic write every checkpoint uses.

Kafka's ``LogFileUtils``: every file of a segment is named after the segment's base offset,
zero-padded to 20 digits (the width of ``Long.MAX_VALUE``), plus a suffix::

    00000000000000368769.log          record batches
    00000000000000368769.index        offset index      (8-byte entries)
    00000000000000368769.timeindex    time index        (12-byte entries)
    00000000000000368769.txnindex     aborted-transaction index
    00000000000000368769.snapshot     producer-state snapshot taken at offset 368769

A second suffix marks a file in transit: ``.deleted`` (scheduled for asynchronous deletion),
``.cleaned`` and ``.swap`` (log compaction), ``.tmp`` (a checkpoint being written).

Pure functions over names, plus :func:`write_atomically`. Thread-safe (no shared state).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
#: Suffix of the temporary file :func:`write_atomically` writes before the rename.
TMP_FILE_SUFFIX = ".tmp"
CHECKPOINT_TMP_SUFFIX = TMP_FILE_SUFFIX

# Per-partition and per-log-dir files (Kafka's names).
LEADER_EPOCH_CHECKPOINT_FILENAME = "leader-epoch-checkpoint"
PARTITION_METADATA_FILENAME = "partition.metadata"
RECOVERY_POINT_CHECKPOINT_FILENAME = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILENAME = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILENAME = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILENAME = ".kafka_cleanshutdown"

#: Partition directories renamed for asynchronous deletion end with this (Kafka's DeleteDirSuffix).
DELETE_DIR_SUFFIX = "-delete"
#: Partition directories being moved between log dirs end with this (Kafka's FutureDirSuffix).
FUTURE_DIR_SUFFIX = "-future"

_OFFSET_WIDTH = 20


def filename_prefix_from_offset(offset: int) -> str:
    """The 20-digit, zero-padded name prefix of the files of a segment at ``offset``.

    Raises:
        ValueError: a negative offset.
    """
    if offset < 0:
        raise ValueError(f"negative offset {offset} cannot name a file")
    return f"{offset:0{_OFFSET_WIDTH}d}"


def _file(dir: Path, offset: int, suffix: str) -> Path:
    return Path(dir) / (filename_prefix_from_offset(offset) + suffix)


def log_file(dir: Path, offset: int, suffix: str = "") -> Path:
    """``<dir>/<20-digit offset>.log<suffix>``."""
    return _file(dir, offset, LOG_FILE_SUFFIX + suffix)


def offset_index_file(dir: Path, offset: int, suffix: str = "") -> Path:
    """``<dir>/<20-digit offset>.index<suffix>``."""
    return _file(dir, offset, INDEX_FILE_SUFFIX + suffix)


def time_index_file(dir: Path, offset: int, suffix: str = "") -> Path:
    """``<dir>/<20-digit offset>.timeindex<suffix>``."""
    return _file(dir, offset, TIME_INDEX_FILE_SUFFIX + suffix)


def transaction_index_file(dir: Path, offset: int, suffix: str = "") -> Path:
    """``<dir>/<20-digit offset>.txnindex<suffix>``."""
    return _file(dir, offset, TXN_INDEX_FILE_SUFFIX + suffix)


def producer_snapshot_file(dir: Path, offset: int) -> Path:
    """``<dir>/<20-digit offset>.snapshot``: producer state as of (before) ``offset``."""
    return _file(dir, offset, PRODUCER_SNAPSHOT_FILE_SUFFIX)


def offset_from_file_name(name: str | os.PathLike[str]) -> int:
    """The offset a segment file is named after: the digits before the first dot.

    Accepts a bare name or a path (only the last component is used).

    Raises:
        ValueError: the name does not start with a decimal offset followed by a dot.
    """
    base = Path(name).name
    prefix, dot, _ = base.partition(".")
    if not dot or not prefix.isdigit() or not prefix.isascii():
        raise ValueError(f"{base!r} is not named <offset>.<suffix>")
    return int(prefix)


def offset_from_file(path: Path) -> int:
    """Alias of :func:`offset_from_file_name` for a path (Kafka's ``offsetFromFile``)."""
    return offset_from_file_name(path)


def is_index_file(path: str | os.PathLike[str]) -> bool:
    """True for ``.index``, ``.timeindex`` and ``.txnindex`` files (no second suffix)."""
    name = Path(path).name
    return name.endswith((INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX))


def is_log_file(path: str | os.PathLike[str]) -> bool:
    """True for ``.log`` segment files (no second suffix)."""
    return Path(path).name.endswith(LOG_FILE_SUFFIX)


def is_snapshot_file(path: str | os.PathLike[str]) -> bool:
    """True for ``<offset>.snapshot`` producer-state snapshots."""
    name = Path(path).name
    if not name.endswith(PRODUCER_SNAPSHOT_FILE_SUFFIX):
        return False
    try:
        offset_from_file_name(name)
    except ValueError:
        return False
    return True


def log_dir_name(topic: str, partition: int) -> str:
    """The directory of a partition: ``<topic>-<partition>``."""
    return f"{topic}-{partition}"


def fsync_dir(dir: Path) -> None:
    """Make a rename or a file creation in ``dir`` durable (a no-op where unsupported)."""
    try:
        fd = os.open(dir, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content.

    Writes ``<path>.tmp``, fsyncs it, renames it over ``path`` (atomic on POSIX) and fsyncs the
    directory so the rename itself survives a crash. A stale ``.tmp`` from an earlier crash is
    overwritten. Kafka's ``CheckpointFile.write`` + ``Utils.atomicMoveWithFallback``.

    ``durable=False`` skips both fsyncs: a crash of the process still leaves the old or the
    new content (the page cache survives it), a crash of the machine may leave the old one, or
    for a new file none or an empty one -- for files another durable record can restore.

    Raises:
        OSError: the write, fsync or rename failed (the original file is left untouched).
    """
    path = Path(path)
    tmp = path.with_name(path.name + TMP_FILE_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


#: errnos that say a resource ran out (descriptors, space, quota, memory), not that the disk is
#: failing: the request that met one fails, the log dir stays online.
RESOURCE_EXHAUSTION_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.ENOMEM}
)


def is_resource_exhaustion(e: OSError) -> bool:
    """True for EMFILE, ENFILE, ENOSPC, EDQUOT and ENOMEM."""
    return e.errno in RESOURCE_EXHAUSTION_ERRNOS
