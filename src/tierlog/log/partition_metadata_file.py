"""Kafka's ``partition.metadata`` file: the topic id of a partition directory.

Format (UTF-8, no trailing newline, as Kafka writes it)::

    version: 0
    topic_id: <topic id>

The topic id is written as Kafka's ``Uuid.toString()``: the 16 bytes (most significant first)
in URL-safe base64 without padding -- 22 characters, e.g. ``AAAAAAAAAAAAAAAAAAAAAQ`` for the
UUID ``00000000-0000-0000-0000-000000000001``. Kafka's ``Uuid`` helpers (random, to and from
that string) live here too; topic, directory and cluster ids all use them.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import threading
import uuid
from pathlib import Path

from tierlog.errors import CorruptCheckpointError
from tierlog.log.log_file_utils import PARTITION_METADATA_FILENAME, fsync_dir, write_atomically

CURRENT_VERSION = 0
#: Kafka's ``Uuid.ZERO_UUID``, never a valid topic id.
ZERO_UUID = uuid.UUID(int=0)

_LINE = re.compile(r":\s+")
_URL_SAFE_BASE64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def uuid_to_kafka_str(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def random_kafka_uuid() -> uuid.UUID:
    """Kafka's ``Uuid.randomUuid()``: never zero, never a string starting with '-'."""
    while True:
        u = uuid.uuid4()
        if u != ZERO_UUID and not uuid_to_kafka_str(u).startswith("-"):
            return u


def kafka_str_to_uuid(s: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString()``: the inverse of :func:`uuid_to_kafka_str`.

    Raises:
        ValueError: ``s`` is not URL-safe base64 of exactly 16 bytes.
    """
    if len(s) > 24:
        raise ValueError(
            f"input string with prefix {s[:24]!r} is too long to be decoded as a base64 UUID"
        )
    if not _URL_SAFE_BASE64.fullmatch(s):
        raise ValueError(f"input string {s!r} is not URL-safe base64")
    try:
        raw = base64.b64decode(s + "=" * (-len(s) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"input string {s!r} is not a base64 UUID: {e}") from None
    if len(raw) != 16:
        raise ValueError(f"input string {s!r} decoded as {len(raw)} bytes, not 16")
    return uuid.UUID(bytes=raw)


def encode_partition_metadata(topic_id: uuid.UUID, version: int = CURRENT_VERSION) -> bytes:
    """The file content for ``topic_id``, byte for byte as Kafka writes it."""
    return f"version: {version}\ntopic_id: {uuid_to_kafka_str(topic_id)}".encode()


def decode_partition_metadata(data: bytes, location: str = "<bytes>") -> uuid.UUID:
    """The topic id in a ``partition.metadata`` content.

    Raises:
        CorruptCheckpointError: malformed lines, a negative version or the zero UUID.
    """
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"partition metadata file [{location}] is not UTF-8") from None

    def value(index: int, key: str) -> str:
        line = lines[index] if index < len(lines) else None
        parts = _LINE.split(line, maxsplit=1) if line is not None else []
        if len(parts) != 2 or parts[0] != key:
            raise CorruptCheckpointError(
                f"malformed line in partition metadata file [{location}]: {line!r}"
            )
        return parts[1]

    version_text = value(0, "version")
    if not re.fullmatch(r"[+-]?[0-9]+", version_text):
        raise CorruptCheckpointError(
            f"malformed line in partition metadata file [{location}]: {lines[0]!r}"
        )
    version = int(version_text)
    # Newer versions are accepted (downgrade compatibility), as Kafka does.
    if version < CURRENT_VERSION:
        raise CorruptCheckpointError(
            f"unrecognized version of partition metadata file ({location}): {version}"
        )
    try:
        topic_id = kafka_str_to_uuid(value(1, "topic_id"))
    except ValueError as e:
        raise CorruptCheckpointError(
            f"malformed line in partition metadata file [{location}]: {lines[1]!r}: {e}"
        ) from None
    if topic_id == ZERO_UUID:
        raise CorruptCheckpointError(f"invalid topic ID in partition metadata file ({location})")
    return topic_id


class PartitionMetadataFile:
    """``<partition dir>/partition.metadata``. Thread-safe; :meth:`write` is idempotent."""

    FILE_NAME = PARTITION_METADATA_FILENAME

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()

    @classmethod
    def new_file(cls, partition_dir: Path) -> Path:
        """``<partition_dir>/partition.metadata``."""
        return Path(partition_dir) / PARTITION_METADATA_FILENAME

    @property
    def path(self) -> Path:
        return self._path

    def write(self, topic_id: uuid.UUID, *, durable: bool = True) -> None:
        """Write ``topic_id`` atomically and, unless ``durable=False``, durably (see
        :func:`~tierlog.log.log_file_utils.write_atomically`; :meth:`flush` makes it durable
        later).

        Raises:
            ValueError: the zero UUID.
            OSError: the write failed; the previous file is intact.
        """
        if topic_id == ZERO_UUID:
            raise ValueError("the zero UUID is not a valid topic id")
        with self._lock:
            write_atomically(self._path, encode_partition_metadata(topic_id), durable=durable)

    def flush(self) -> None:
        """Make the file and its name durable (Kafka's ``maybeFlush`` after ``record``): fsync
        the file, then its directory.

        Raises:
            OSError: the file is missing or the fsync failed.
        """
        with self._lock:
            fd = os.open(self._path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self._path.parent)

    def read(self) -> uuid.UUID | None:
        """The topic id, or None when the file does not exist.

        Raises:
            CorruptCheckpointError: the file is malformed.
            OSError: the file exists but cannot be read.
        """
        with self._lock:
            try:
                data = self._path.read_bytes()
            except FileNotFoundError:
                return None
        return decode_partition_metadata(data, str(self._path))

    def exists(self) -> bool:
        return self._path.exists()

    def delete(self) -> None:
        """Delete the file. Raises FileNotFoundError when it does not exist."""
        self._path.unlink()

    def __repr__(self) -> str:
        return f"PartitionMetadataFile(path={str(self._path)!r})"
