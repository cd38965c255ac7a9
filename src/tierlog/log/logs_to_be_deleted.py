"""The partition dirs of the LogManager awaiting removal (Kafka's ``LogManager.logsToBeDeleted``,
the rename of ``asyncDelete`` and the ``deleteLogs`` task).

On disk (Kafka's names)::

    <log.dir>/<topic>-<partition>.<uuid>-delete/ a deleted partition, removed in the background

A deleted partition's dir is renamed at once and queued here; the LogManager's background
thread (and its shutdown) removes the queued dirs. A ``-delete`` dir found at startup (an
interrupted delete) is queued by the loader.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from tierlog.errors import KafkaStorageError
from tierlog.log import log_file_utils as lfu

__all__ = ["LogsToBeDeleted"]

log = logging.getLogger(__name__)

_MAX_FILE_NAME = 255


def _delete_dir_name(topic: str, partition: int) -> str:
    """Kafka's ``logDeleteDirName``: ``<topic>-<partition>.<uuid hex>-delete``, within 255."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{lfu.DELETE_DIR_SUFFIX}"
    return topic[: _MAX_FILE_NAME - len(suffix)] + suffix


class LogsToBeDeleted:
    """The renamed partition dirs awaiting removal (thread-safe: under the LogManager's
    lock)."""

    def __init__(
        self,
        lock: threading.RLock,
        storage_error: Callable[[OSError, Path, str], KafkaStorageError],
    ) -> None:
        self._lock = lock
        self._storage_error = storage_error
        self._to_delete: list[Path] = []  # renamed partition dirs awaiting removal

    def add(self, path: Path) -> None:
        """Queue a dir already renamed ``-delete``."""
        with self._lock:
            self._to_delete.append(path)

    def discard_partial_dir(self, path: Path, topic: str, partition: int) -> None:
        """A partition dir whose log could not be created (EMFILE, ENOSPC half way): renamed
        for background deletion so a restart does not adopt it. Needs no descriptor."""
        target = path.with_name(_delete_dir_name(topic, partition))
        try:
            path.rename(target)
        except FileNotFoundError:
            return
        except OSError as e:
            log.warning("cannot discard the partly created %s: %s", path, e)
            return
        self.add(target)

    def rename_for_delete(self, path: Path, topic: str, partition: int) -> None:
        target = path.with_name(_delete_dir_name(topic, partition))
        try:
            path.rename(target)
            lfu.fsync_dir(path.parent)
        except OSError as e:
            raise self._storage_error(e, path, "rename for deletion") from e
        self.add(target)

    def delete_logs(self) -> None:
        """Remove the queued dirs (Kafka's ``deleteLogs``)."""
        with self._lock:
            pending, self._to_delete = self._to_delete, []
        for d in pending:
            try:
                shutil.rmtree(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.error("cannot remove deleted partition dir %s: %s", d, e)
