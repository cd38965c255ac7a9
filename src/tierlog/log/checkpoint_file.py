"""Kafka's text checkpoint files, written atomically.

Format (UTF-8, one item per line, ``\\n`` line ends)::

    0                    version
    3                    number of entries
    my-topic 0 1234      one entry per line, fields separated by single spaces
    my-topic 1 99
    other 0 0

Per log directory: ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint`` hold ``<topic> <partition> <offset>`` entries
(:class:`OffsetCheckpointFile`). Per partition: ``leader-epoch-checkpoint`` holds
``<epoch> <startOffset>`` entries (:class:`LeaderEpochCheckpointFile`).

A write goes to ``<name>.tmp``, is fsynced and renamed over the file, so a crash leaves the old
or the new checkpoint, never a torn one. Reading a missing file gives no entries; a malformed
one raises :class:`~tierlog.errors.CorruptCheckpointError` naming the file and the line.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from tierlog.errors import CorruptCheckpointError
from tierlog.log.log_file_utils import LEADER_EPOCH_CHECKPOINT_FILENAME, write_atomically

CURRENT_VERSION = 0

T = TypeVar("T")

_WHITESPACE = re.compile(r"\s+")
_INT = re.compile(r"[+-]?[0-9]+")


def _parse_int(text: str) -> int | None:
    """A decimal integer as Java's parseInt/parseLong accept it (no spaces, no underscores)."""
    return int(text) if _INT.fullmatch(text) else None


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


class EntryFormatter(Protocol[T]):
    """Converts one entry to its line and back (Kafka's ``EntryFormatter``)."""

    def to_line(self, entry: T) -> str: ...

    def from_line(self, line: str) -> T | None:
        """The entry, or None when the line is malformed."""
        ...


def encode_checkpoint(version: int, lines: Sequence[str]) -> bytes:
    """The bytes of a checkpoint holding ``lines`` (already formatted entries)."""
    out = [str(version), str(len(lines)), *lines]
    return ("\n".join(out) + "\n").encode("utf-8")


def decode_checkpoint(
    data: bytes, version: int, parse: Callable[[str], T | None], location: str
) -> list[T]:
    """Parse checkpoint bytes; ``parse`` returns None for a malformed entry line.

    Like Kafka: empty content, or a version line without a count line, means no entries.

    Raises:
        CorruptCheckpointError: bad version, malformed line, or a count that does not match.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(f"checkpoint file [{location}] is not UTF-8: {e}") from None
    lines = text.splitlines()
    if not lines:
        return []

    def malformed(lineno: int, line: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"malformed line {lineno} in checkpoint file [{location}]: {line!r}"
        )

    def to_int(lineno: int, line: str) -> int:
        value = _parse_int(line)
        if value is None:
            raise malformed(lineno, line)
        return value

    read_version = to_int(1, lines[0])
    if read_version != version:
        raise CorruptCheckpointError(
            f"unrecognised version {read_version}, expected version {version} "
            f"in checkpoint file at [{location}]"
        )
    if len(lines) < 2:
        return []
    expected = to_int(2, lines[1])
    entries: list[T] = []
    for lineno, line in enumerate(lines[2:], start=3):
        entry = parse(line)
        if entry is None:
            raise malformed(lineno, line)
        entries.append(entry)
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"expected [{expected}] entries in checkpoint file [{location}], "
            f"but found [{len(entries)}]"
        )
    return entries


class CheckpointFile(Generic[T]):
    """A checkpoint file of entries of type ``T`` (Kafka's ``CheckpointFile``).

    Thread-safe: reads and writes are serialised by an internal lock. Writes are idempotent
    (the file is replaced as a whole).
    """

    def __init__(self, path: Path, version: int, formatter: EntryFormatter[T]) -> None:
        self._path = Path(path)
        self._version = version
        self._formatter = formatter
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    def write_entries(self, entries: Iterable[T], *, durable: bool = True) -> None:
        """Replace the file with ``entries``, atomically (and durably unless ``durable`` is
        False: then without fsync, in the page cache, which a process crash does not lose).

        Raises:
            OSError: the write failed; the previous checkpoint is intact.
        """
        data = encode_checkpoint(self._version, [self._formatter.to_line(e) for e in entries])
        with self._lock:
            write_atomically(self._path, data, durable=durable)

    def write_entries_if_dir_exists(self, entries: Iterable[T]) -> bool:
        """Like :meth:`write_entries`, but skip (return False) when the directory is gone.

        For flushes that may race with the partition directory being deleted or renamed.
        """
        if not self._path.parent.is_dir():
            return False
        try:
            self.write_entries(entries)
        except FileNotFoundError:
            if self._path.parent.is_dir():
                raise
            return False
        return True

    def read_entries(self) -> list[T]:
        """The entries in the file; none when the file does not exist.

        Raises:
            CorruptCheckpointError: the file is malformed.
            OSError: the file exists but cannot be read.
        """
        with self._lock:
            try:
                data = self._path.read_bytes()
            except FileNotFoundError:
                return []
        return decode_checkpoint(data, self._version, self._formatter.from_line, str(self._path))

    def exists(self) -> bool:
        return self._path.exists()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._path)!r})"


# --------------------------------------------------------------------------- offsets


class _OffsetFormatter:
    """``<topic> <partition> <offset>``."""

    def to_line(self, entry: tuple[tuple[str, int], int]) -> str:
        (topic, partition), offset = entry
        return f"{topic} {partition} {offset}"

    def from_line(self, line: str) -> tuple[tuple[str, int], int] | None:
        parts = _WHITESPACE.split(line)
        if len(parts) != 3 or not parts[0]:
            return None
        partition, offset = _parse_int(parts[1]), _parse_int(parts[2])
        if partition is None or offset is None:
            return None
        return (parts[0], partition), offset


class OffsetCheckpointFile:
    """A per-log-dir checkpoint of one offset per partition.

    Used for ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
    ``replication-offset-checkpoint``. Thread-safe (see :class:`CheckpointFile`).
    """

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[tuple[str, int], int]] = CheckpointFile(
            path, CURRENT_VERSION, _OffsetFormatter()
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Replace the checkpoint with ``{(topic, partition): offset}``.

        Raises:
            ValueError: a topic name contains whitespace (it could not be read back).
            OSError: the write failed; the previous checkpoint is intact.
        """
        for topic, _ in offsets:
            if not topic or _WHITESPACE.search(topic):
                raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
        self._file.write_entries(sorted(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        """``{(topic, partition): offset}``; empty when the file does not exist.

        Raises:
            CorruptCheckpointError: the file is malformed.
        """
        return dict(self._file.read_entries())

    def __repr__(self) -> str:
        return f"OffsetCheckpointFile({str(self.path)!r})"


# --------------------------------------------------------------------------- leader epochs


class _EpochEntryFormatter:
    """``<epoch> <startOffset>``."""

    def to_line(self, entry: EpochEntry) -> str:
        return f"{entry.epoch} {entry.start_offset}"

    def from_line(self, line: str) -> EpochEntry | None:
        parts = _WHITESPACE.split(line)
        if len(parts) != 2:
            return None
        epoch, start_offset = _parse_int(parts[0]), _parse_int(parts[1])
        if epoch is None or start_offset is None:
            return None
        return EpochEntry(epoch, start_offset)


_EPOCH_FORMATTER = _EpochEntryFormatter()


def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    """The bytes of a ``leader-epoch-checkpoint`` holding ``entries`` (for remote uploads)."""
    return encode_checkpoint(CURRENT_VERSION, [_EPOCH_FORMATTER.to_line(e) for e in entries])


def decode_leader_epoch_checkpoint(data: bytes, location: str = "<bytes>") -> list[EpochEntry]:
    """Parse the bytes of a ``leader-epoch-checkpoint``.

    Raises:
        CorruptCheckpointError: the content is malformed.
    """
    return decode_checkpoint(data, CURRENT_VERSION, _EPOCH_FORMATTER.from_line, location)


class LeaderEpochCheckpoint(Protocol):
    """Where a :class:`~tierlog.log.leader_epoch_file_cache.LeaderEpochFileCache` persists."""

    def write(self, entries: Sequence[EpochEntry], *, durable: bool = True) -> None: ...

    def read(self) -> list[EpochEntry]: ...


class LeaderEpochCheckpointFile:
    """The per-partition ``leader-epoch-checkpoint`` file. Thread-safe."""

    FILE_NAME = LEADER_EPOCH_CHECKPOINT_FILENAME

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, CURRENT_VERSION, _EPOCH_FORMATTER
        )

    @classmethod
    def new_file(cls, partition_dir: Path) -> Path:
        """``<partition_dir>/leader-epoch-checkpoint``."""
        return Path(partition_dir) / LEADER_EPOCH_CHECKPOINT_FILENAME

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: Sequence[EpochEntry], *, durable: bool = True) -> None:
        """Replace the checkpoint with ``entries``. Raises OSError on failure."""
        self._file.write_entries(entries, durable=durable)

    def write_if_dir_exists(self, entries: Sequence[EpochEntry]) -> bool:
        """Write unless the partition directory is gone; False when skipped."""
        return self._file.write_entries_if_dir_exists(entries)

    def read(self) -> list[EpochEntry]:
        """The entries; empty when the file does not exist.

        Raises:
            CorruptCheckpointError: the file is malformed.
        """
        return self._file.read_entries()

    def __repr__(self) -> str:
        return f"LeaderEpochCheckpointFile({str(self.path)!r})"


class InMemoryLeaderEpochCheckpoint:
    """A :class:`LeaderEpochCheckpoint` kept in memory (Kafka's, for remote copies/tests)."""

    def __init__(self, entries: Sequence[EpochEntry] = ()) -> None:
        self._entries = list(entries)

    def write(self, entries: Sequence[EpochEntry], *, durable: bool = True) -> None:
        self._entries = list(entries)

    def read(self) -> list[EpochEntry]:
        return list(self._entries)

    def to_bytes(self) -> bytes:
        return encode_leader_epoch_checkpoint(self._entries)
