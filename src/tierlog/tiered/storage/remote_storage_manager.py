"""The RemoteStorageManager plugin interface (Kafka's storage-api), plus seed 001's fetch_indexes.

A RemoteStorageManager copies a rolled log segment and its indexes to remote storage, serves
byte ranges of it and its indexes back, and deletes it. Every segment upload attempt has its
own :class:`RemoteLogSegmentId`, so objects of two attempts never collide.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tierlog.errors import RemoteResourceNotFoundError, RemoteStorageError
from tierlog.tiered.remote_log_segment_metadata import RemoteLogSegmentMetadata


class IndexType(enum.IntEnum):
    """The per-segment auxiliary files shipped with a segment (Kafka's ``IndexType``)."""

    OFFSET = 0
    TIMESTAMP = 1
    PRODUCER_SNAPSHOT = 2
    TRANSACTION = 3
    LEADER_EPOCH = 4


ALL_INDEX_TYPES: frozenset[IndexType] = frozenset(IndexType)


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """What is uploaded for one segment (Kafka's ``LogSegmentData``).

    ``transaction_index`` is None when the segment has no aborted transactions;
    ``leader_epoch_index`` is the leader-epoch checkpoint content up to the segment's end.
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes


class RemoteStorageManager(abc.ABC):
    """Kafka's RemoteStorageManager. Implementations are thread-safe."""

    @abc.abstractmethod
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        """Upload the segment and its indexes; return custom metadata for the segment, if any.

        Idempotent: a retry overwrites whatever an earlier attempt left. Never leaves a
        partial object visible under its final name.

        Raises:
            RemoteStorageError: the upload failed (objects written so far may remain; the
                caller deletes them with :meth:`delete_log_segment_data`).
        """

    @abc.abstractmethod
    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> bytes:
        """Bytes ``[start_position, end_position]`` (inclusive; to the end when None) of the
        segment, in ONE remote read.

        Raises:
            RemoteResourceNotFoundError: the segment is not in remote storage.
            RemoteStorageError: any other failure.
        """

    @abc.abstractmethod
    def fetch_indexes(
        self,
        metadata: RemoteLogSegmentMetadata,
        index_types: Collection[IndexType] = ALL_INDEX_TYPES,
    ) -> dict[IndexType, bytes]:
        """The requested indexes of a segment, all from ONE remote request (seed 001).

        An index the segment does not have (a transaction index) is left out of the result.

        Raises:
            RemoteResourceNotFoundError: the segment is not in remote storage.
            RemoteStorageError: any other failure, including a corrupt index object.
        """

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """One index of a segment (Kafka's ``fetchIndex``).

        Raises:
            RemoteResourceNotFoundError: the segment, or this index of it, does not exist.
            RemoteStorageError: any other failure.
        """
        indexes = self.fetch_indexes(metadata, (index_type,))
        if index_type not in indexes:
            raise RemoteResourceNotFoundError(
                f"{index_type.name} index of {metadata.remote_log_segment_id} does not exist"
            )
        return indexes[index_type]

    @abc.abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment. Idempotent: missing objects are fine.

        Raises:
            RemoteStorageError: an object could not be deleted.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and caches; idempotent."""


@contextmanager
def map_exceptions(what: str, extra: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Translate storage-client errors at the plugin boundary (httpcore's ``map_exceptions``).

    FileNotFoundError becomes :class:`RemoteResourceNotFoundError`; any other OSError or an
    ``extra`` type (e.g. ``pyarrow.ArrowException``) becomes :class:`RemoteStorageError`.
    ``what`` (operation + URI) leads the message.
    """
    try:
        yield
    except RemoteStorageError:
        raise
    except FileNotFoundError as e:
        raise RemoteResourceNotFoundError(f"{what}: not found: {e}") from e
    except Exception as e:
        if isinstance(e, (OSError, *extra)):
            raise RemoteStorageError(f"{what}: {type(e).__name__}: {e}") from e
        raise


__all__ = [
    "ALL_INDEX_TYPES",
    "IndexType",
    "LogSegmentData",
    "RemoteStorageManager",
    "map_exceptions",
]
