"""The offset checkpoints of the LogManager's log dirs (Kafka's
``LogManager.checkpointLogRecoveryOffsets`` and ``checkpointLogStartOffsets``).

On disk, per log dir (Kafka's names, the format is :class:`~tierlog.log.checkpoint_file.
OffsetCheckpointFile`)::

    <log.dir>/recovery-point-offset-checkpoint   <topic> <partition> <offset> per log
    <log.dir>/log-start-offset-checkpoint        <topic> <partition> <offset> per log

They are read at startup (:mod:`~tierlog.log.log_loading`) and written by the background
thread, at shutdown and around a log dir move (:mod:`~tierlog.log.future_logs`).

Friend of :class:`~tierlog.log.log_manager.LogManager` (its lock and maps): one job, kept out
of that module's size.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.errors import CorruptCheckpointError
from tierlog.log import log_file_utils as lfu
from tierlog.log.checkpoint_file import OffsetCheckpointFile

if TYPE_CHECKING:
    from tierlog.log.log_manager import LogManager

__all__ = ["NEW_LOG", "Unopened", "read_checkpoint", "write_checkpoints"]

log = logging.getLogger(__name__)

#: How to open a log not opened yet: (recovery point, log start offset or None: unknown).
Unopened = tuple[int, int | None]
#: A partition created and not used yet.
NEW_LOG: Unopened = (0, None)


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        return OffsetCheckpointFile(path).read()
    except (CorruptCheckpointError, OSError) as e:
        # Kafka: warn and start from scratch (full recovery, segment base offsets).
        log.warning("ignoring unreadable checkpoint %s: %s", path, e)
        return {}


def write_checkpoints(lm: LogManager, *, recovery: bool, start: bool) -> None:
    """An unopened log keeps the offsets it was loaded with (none known: not written). A
    future replica (:mod:`~tierlog.log.future_logs`) is written in its own dir."""
    with lm._checkpoint_lock:
        logs = dict(lm._logs)  # copies: get_log adds to them in place
        unopened = dict(lm._unopened)
        dirs = lm._log_dir_of
        one_dir = len(lm._log_dirs) == 1
        for d in lm._log_dirs:
            if d in lm._offline_dirs:
                continue
            mine = {tp: lg for tp, lg in logs.items() if one_dir or dirs.get(tp) == d}
            # Future replicas too (as Kafka's logsByDir): theirs is another dir.
            mine.update((tp, f) for tp, f in lm.future_logs.items() if f.dir.parent == d)
            rest = {tp: u for tp, u in unopened.items() if one_dir or dirs.get(tp) == d}
            try:
                if recovery:
                    points = {tp: lg.recovery_point for tp, lg in mine.items()}
                    points.update((tp, u[0]) for tp, u in rest.items())
                    OffsetCheckpointFile(d / lfu.RECOVERY_POINT_CHECKPOINT_FILENAME).write(points)
                if start:
                    starts = {tp: lg.log_start_offset for tp, lg in mine.items()}
                    starts.update((tp, u[1]) for tp, u in rest.items() if u[1] is not None)
                    OffsetCheckpointFile(d / lfu.LOG_START_OFFSET_CHECKPOINT_FILENAME).write(starts)
            except OSError as e:
                lm._storage_error(e, d, "write checkpoints in")
