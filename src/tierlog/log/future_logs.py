"""The future replicas of the LogManager: a partition moving to another log dir of this broker
(AlterReplicaLogDirs, Kafka's ``LogManager.futureLogs``, ``getOrCreateFutureLog`` and
``replaceCurrentWithFutureLog``).

On disk, while a partition moves (Kafka's names)::

    <source log.dir>/<topic>-<partition>/                    the current replica, serving
    <target log.dir>/<topic>-<partition>.<uuid>-future/      the future replica, being filled

The future replica starts as a follower would after the tiered part (the leader-epoch entries
and the producer snapshot at the current's local log start offset, its log start offset the
current's), and is filled with the current replica's batches, offsets kept
(:mod:`tierlog.server.replica_alter_log_dirs` copies them). Once it has caught up, appends
pause and :meth:`FutureLogs.replace_current_with_future_log` swaps it in:

1. both logs are flushed and closed;
2. the current dir is renamed ``<topic>-<partition>.<uuid>-delete`` (fsync of its parent);
3. the future dir is renamed ``<topic>-<partition>`` (fsync of its parent) and reopened.

Crash safety (the loader, :func:`scan_future_dirs`): a ``-future`` dir whose partition has a
current dir anywhere was cut before step 2: it is loaded as a future replica and the move
resumes (as Kafka's loader does). A ``-future`` dir without a current dir was cut between
steps 2 and 3: the future was complete and flushed, so it is promoted (renamed ``<topic>-
<partition>``). The ``-delete`` dir is removed as any other. So every step recovers to one
complete copy. Kafka renames the future first and then the current; a crash between the two
leaves two current dirs, which Kafka's loader refuses ("Duplicate log directories"): the order
here avoids that state.

Friend of :class:`~tierlog.log.log_manager.LogManager` (its lock and maps): one job, kept out
of that module's size.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.errors import (
    KafkaStorageError,
    LogDirNotFound,
    ReplicaNotAvailable,
    UnknownTopicOrPartition,
)
from tierlog.log import log_file_utils as lfu
from tierlog.log.log import Log
from tierlog.log.log_checkpoints import read_checkpoint, write_checkpoints
from tierlog.log.partition_metadata_file import encode_partition_metadata

if TYPE_CHECKING:
    from tierlog.log.log_manager import LogManager

__all__ = ["FutureLogs", "future_dir_name", "scan_future_dirs"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_MAX_FILE_NAME = 255


def future_dir_name(topic: str, partition: int) -> str:
    """Kafka's ``logFutureDirName``: ``<topic>-<partition>.<uuid hex>-future``, within 255."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{lfu.FUTURE_DIR_SUFFIX}"
    return topic[: _MAX_FILE_NAME - len(suffix)] + suffix


def _parse_future_dir(name: str) -> TopicPartition | None:
    if not name.endswith(lfu.FUTURE_DIR_SUFFIX) or "." not in name:
        return None
    base = name[: name.rindex(".")]
    topic, sep, part = base.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def scan_future_dirs(log_dirs: list[Path]) -> dict[TopicPartition, Path]:
    """Before the logs load: promote every ``-future`` dir whose partition has no current dir
    (a swap cut between its two renames), and return the others (partition -> future dir) to
    load as future replicas. A second ``-future`` dir of one partition is renamed
    ``-delete`` (removed by the loader).

    Raises:
        OSError: a dir cannot be listed or renamed.
    """
    names: dict[Path, list[str]] = {}
    for d in log_dirs:
        try:
            with os.scandir(d) as it:
                names[d] = [e.name for e in it if e.is_dir()]
        except FileNotFoundError:
            names[d] = []
    current: dict[str, Path] = {}
    for d, ns in names.items():
        for n in ns:
            current.setdefault(n, d)
    futures: dict[TopicPartition, Path] = {}
    for d, ns in names.items():
        for n in sorted(ns):
            tp = _parse_future_dir(n)
            if tp is None:
                continue
            path = d / n
            name = lfu.log_dir_name(*tp)
            if tp in futures or current.get(name) == d:
                # A second one, or one beside its current replica: not a move to keep.
                log.warning("a stray future replica of %s-%d: deleting %s", *tp, path)
                stem = n[: -len(lfu.FUTURE_DIR_SUFFIX)]
                path.rename(path.with_name(stem + lfu.DELETE_DIR_SUFFIX))
                continue
            if name in current:
                futures[tp] = path
                continue
            log.warning("promoting %s: the swap of a log dir move was cut after its first step",
                        path)  # fmt: skip
            path.rename(d / name)
            lfu.fsync_dir(d)
            current[name] = d
    return futures


class FutureLogs:
    """The future replicas of one LogManager (thread-safe: under the LogManager's lock)."""

    def __init__(self, lm: LogManager) -> None:
        self._lm = lm
        self._logs: dict[TopicPartition, Log] = {}  # copy-on-write
        self._cleaning_paused: set[TopicPartition] = set()
        #: Kafka's preferredLogDirs: where a partition not hosted yet goes when it is created
        #: (AlterReplicaLogDirs before a reassignment brings it here).
        self._preferred: dict[TopicPartition, Path] = {}

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def items(self) -> list[tuple[TopicPartition, Log]]:
        return list(self._logs.items())

    def log_dir(self, lg: Log) -> Path:
        return lg.dir.parent

    # ----------------------------------------------------------------- create

    def check_dir(self, path: str) -> Path:
        """The log dir named by an AlterReplicaLogDirs path.

        Raises:
            LogDirNotFound: not one of ``log.dirs``.
            KafkaStorageError: that dir is offline.
        """
        wanted = Path(path).absolute()
        for d in self._lm.log_dirs:
            if d.absolute() == wanted:
                if d in self._lm.offline_log_dirs:
                    raise KafkaStorageError(f"Log dir {d} is offline")
                return d
        raise LogDirNotFound(f"Log dir {path} is not found in the config.")

    def get_or_create(self, topic: str, partition: int, target: Path) -> Log | None:
        """Kafka's ``maybeCreateFutureReplica``: the future replica of a hosted partition in
        ``target`` (an existing one in another dir is dropped first); None when the current
        replica already is in ``target`` (nothing to move).

        Raises:
            UnknownTopicOrPartition: no such topic.
            ReplicaNotAvailable: the topic exists, this broker does not host the partition.
            KafkaStorageError: a log dir is offline, or the dir cannot be created.
        """
        lm = self._lm
        tp = (topic, partition)
        with lm._lock:
            lm._check_started()
            if lm.offline_log_dirs:
                # As Kafka: no future replica while a dir is offline, so one partition never
                # has future replicas in several dirs.
                raise KafkaStorageError("a log dir is offline: no replica moves meanwhile")
            info = lm.topic(topic)
            if info is None:
                raise UnknownTopicOrPartition(f"Topic '{topic}' does not exist.")
            current = lm.get_log(topic, partition)
            if current is None:
                raise ReplicaNotAvailable(f"{topic}-{partition} is not hosted on this broker")
            existing = self._logs.get(tp)
            if existing is not None:
                if existing.dir.parent == target:
                    return existing
                self.drop(topic, partition)
            if current.dir.parent == target:
                return None
            path = target / future_dir_name(topic, partition)
            try:
                path.mkdir()
                (path / lfu.PARTITION_METADATA_FILENAME).write_bytes(
                    encode_partition_metadata(info.topic_id)
                )
                future = Log.open(path, info.config, topic_id=info.topic_id, time_ms=lm._time_ms)
                start_future(current, future)
            except OSError as e:
                raise lm._storage_error(e, path, "create the future replica") from e
            self._logs = {**self._logs, tp: future}
            self._pause_cleaning(tp)
        # Its log start offset (the partition's, below its segments when tiered) and the
        # current's, durable before any copy: a restart resumes from them.
        write_checkpoints(lm, recovery=True, start=True)
        log.info("moving %s-%d from %s to %s", topic, partition, current.dir.parent, target)
        return future

    def pause_cleaning_of_all(self) -> None:
        """The log cleaner started: keep it off the partitions moving (Kafka's
        ``abortAndPauseCleaning``; the cleaner would replace segments under the copy)."""
        for tp, _ in self.items():
            self._pause_cleaning(tp)

    def _pause_cleaning(self, tp: TopicPartition) -> None:
        cleaner = self._lm.cleaner
        if cleaner is not None and tp not in self._cleaning_paused:
            cleaner.cleaner_manager.abort_and_pause_cleaning(tp)
            self._cleaning_paused.add(tp)

    def _resume_cleaning(self, tp: TopicPartition) -> None:
        cleaner = self._lm.cleaner
        if tp in self._cleaning_paused:
            self._cleaning_paused.discard(tp)
            if cleaner is not None:
                try:
                    cleaner.cleaner_manager.resume_cleaning([tp])
                except RuntimeError as e:  # not paused: nothing to undo
                    log.warning("resuming the cleaning of %s-%d: %s", *tp, e)

    def update_preferred_log_dir(self, topic: str, partition: int, log_dir: Path) -> None:
        """Kafka's ``maybeUpdatePreferredLogDir``: create the partition in ``log_dir`` if it
        comes here later (kept until then, or until the broker stops)."""
        self._preferred[(topic, partition)] = log_dir

    def take_preferred_log_dir(
        self, topic: str, partition: int, counts: dict[Path, int]
    ) -> Path | None:
        """The preferred dir of a partition being created, if one was set and is online
        (``counts``: partitions per online dir, which counts it)."""
        d = self._preferred.pop((topic, partition), None)
        if d is None or d not in counts:
            return None
        counts[d] += 1
        return d

    def load(self, futures: dict[TopicPartition, Path]) -> None:
        """Open the future replicas :func:`scan_future_dirs` left (recovered: they were not
        closed cleanly, or the move was cut); one that cannot open, or whose partition is no
        longer hosted, is renamed for deletion."""
        lm = self._lm
        logs: dict[TopicPartition, Log] = {}
        for tp, path in futures.items():
            info = lm.topic(tp[0])
            current_dir = lm._log_dir_of.get(tp)
            if info is None or current_dir is None or current_dir == path.parent:
                lm._logs_to_be_deleted.rename_for_delete(path, *tp)
                continue
            # Its dir's checkpoints hold it (written when it was created and since): its log
            # start offset is the partition's, below its segments when tiered.
            d = path.parent
            recovery = read_checkpoint(d / lfu.RECOVERY_POINT_CHECKPOINT_FILENAME)
            starts = read_checkpoint(d / lfu.LOG_START_OFFSET_CHECKPOINT_FILENAME)
            try:
                logs[tp] = Log.open(
                    path,
                    info.config,
                    log_start_offset=starts.get(tp),
                    recovery_point=recovery.get(tp, 0),
                    topic_id=info.topic_id,
                    time_ms=lm._time_ms,
                )
            except Exception as e:  # a future replica is only a copy: start over
                log.warning("cannot load the future replica %s (%s): deleting it", path, e)
                lm._logs_to_be_deleted.rename_for_delete(path, *tp)
                continue
            log.info("resuming the move of %s-%d to %s", *tp, path.parent)
        self._logs = logs

    # ----------------------------------------------------------------- end

    def drop(self, topic: str, partition: int) -> None:
        """Abandon a move: close the future replica and rename its dir for deletion."""
        lm = self._lm
        tp = (topic, partition)
        with lm._lock:
            future = self._logs.get(tp)
            if future is None:
                return
            logs = dict(self._logs)
            del logs[tp]
            self._logs = logs
            try:
                future.close()
            except OSError as e:
                log.warning("closing the future replica %s: %s", future.dir, e)
            try:
                lm._logs_to_be_deleted.rename_for_delete(future.dir, topic, partition)
            except KafkaStorageError as e:
                log.error("cannot delete the future replica %s: %s", future.dir, e)
            self._resume_cleaning(tp)

    def close_all(self) -> None:
        """Shutdown: flush and close every future replica (the move resumes at startup)."""
        for tp, future in self.items():
            try:
                future.flush()
                future.close()
            except OSError as e:
                log.error("closing the future replica of %s-%d: %s", *tp, e)
        self._logs = {}

    def replace_current_with_future_log(self, topic: str, partition: int) -> Log:
        """Kafka's ``replaceCurrentWithFutureLog``: the caught-up future replica becomes the
        partition's log (see the module docstring for the steps). The caller holds appends
        (the future's log end offset must equal the current's). Returns the new log.

        Raises:
            KafkaStorageError: a rename or the reopen failed.
        """
        lm = self._lm
        tp = (topic, partition)
        with lm._lock:
            future = self._logs[tp]
            current = lm._logs[tp]
            if future.log_end_offset != current.log_end_offset:
                raise RuntimeError(
                    f"{topic}-{partition}: future replica at {future.log_end_offset}, "
                    f"current at {current.log_end_offset}"
                )
            info = lm._registry.topics[topic]
            hw = current.high_watermark
            start = current.log_start_offset
            remote = current.highest_offset_in_remote_storage
            target = future.dir.parent
            source = current.dir
            dest = target / lfu.log_dir_name(topic, partition)
            try:
                future.flush()
                future.close()
                current.close()
                doomed = source.with_name(_delete_name(topic, partition))
                source.rename(doomed)
                lfu.fsync_dir(source.parent)
                future.dir.rename(dest)
                lfu.fsync_dir(target)
            except OSError as e:
                raise lm._storage_error(e, target, "swap in the future replica") from e
            try:
                new = Log.open(
                    dest,
                    info.config,
                    log_start_offset=start,
                    recovery_point=future.log_end_offset,
                    topic_id=info.topic_id,
                    had_clean_shutdown=True,
                    time_ms=lm._time_ms,
                    high_watermark=hw,
                )
            except OSError as e:
                raise lm._storage_error(e, dest, "reopen the moved log") from e
            new.update_highest_offset_in_remote_storage(remote)
            logs = dict(self._logs)
            del logs[tp]
            self._logs = logs
            lm._logs = {**lm._logs, tp: new}
            lm._log_dir_of = {**lm._log_dir_of, tp: target}
            lm._logs_to_be_deleted.add(doomed)
            self._resume_cleaning(tp)
        # Both dirs' checkpoints now name the log where it is (its log start offset above
        # all: a tiered log's remote part is not in its segments).
        write_checkpoints(lm, recovery=True, start=True)
        lm._wakeup.set()
        log.info("moved %s-%d to %s", topic, partition, target)
        return new


def _delete_name(topic: str, partition: int) -> str:
    suffix = f"-{partition}.{uuid.uuid4().hex}{lfu.DELETE_DIR_SUFFIX}"
    return topic[: _MAX_FILE_NAME - len(suffix)] + suffix


def start_future(current: Log, future: Log) -> None:
    """Start an empty future replica where the current's local log starts, as a follower
    after the tiered part (Kafka's ``buildRemoteLogAuxState``, from the local current
    replica): the current's leader epochs, its producer snapshot at that offset when it has
    one, and its log start offset (the remote part is the partition's).

    Raises:
        OSError: a checkpoint or snapshot could not be written or read.
    """
    local_start = current.local_log_start_offset
    snapshot_file = lfu.producer_snapshot_file(current.dir, local_start)
    try:
        snapshot: bytes | None = snapshot_file.read_bytes()
    except FileNotFoundError:
        snapshot = None
    future.restore_remote_log_aux_state(
        local_start,
        current.log_start_offset,
        current.leader_epoch_cache.epoch_entries(),
        snapshot,
    )
