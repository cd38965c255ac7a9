"""Kafka's ``LogManager``: every partition log of this broker, spread over several log dirs.

On disk, per log dir (Kafka's names)::

    <log.dir>/meta.properties                    version=1, node.id, cluster.id, directory.id
    <log.dir>/.kafka_cleanshutdown               present only after a clean shutdown
    <log.dir>/recovery-point-offset-checkpoint   <topic> <partition> <offset> per log
    <log.dir>/log-start-offset-checkpoint        <topic> <partition> <offset> per log
    <log.dir>/<topic>-<partition>/               one partition (see Log), with partition.metadata
    <log.dir>/<topic>-<partition>.<uuid>-delete/ a deleted partition, removed in the background
    <log.dir>/__tierlog_topics.json              the topic registry (tierlog's own file)

``meta.properties`` is checked at startup (:mod:`~tierlog.log.meta_properties`). The topic
registry (the ids, partition counts and config overrides of the topics, and the tombstones of
deleted ones) is a :class:`~tierlog.log.topic_registry.TopicRegistry` the LogManager owns; its
module describes the file.

Its jobs are in modules beside it, each a friend of the LogManager (its lock and maps): the
startup load of the log dirs (:mod:`~tierlog.log.log_loading`), the offset checkpoints
(:mod:`~tierlog.log.log_checkpoints`), the topic admin and the partition dirs it creates and
drops (:mod:`~tierlog.log.topic_admin`), the dirs awaiting removal
(:mod:`~tierlog.log.logs_to_be_deleted`) and the future replicas of log dir moves
(:mod:`~tierlog.log.future_logs`).

Order of writes, for crash safety: create and create-partitions write the registry first and
then the logs (a missing partition dir is recreated empty at startup); delete writes the
registry (with the tombstone) first and then renames the dirs to ``-delete``.

Logs are opened on first use (:meth:`LogManager.get_log`). A partition created and not used
yet is a directory with its ``partition.metadata`` and nothing in memory but its name; after a
clean shutdown (the marker vouches for every log dir: flushed, closed, checkpoints written) a
partition is not even listed until used -- its recovery point and log start offset come from
the checkpoints. After an unclean shutdown every log is opened (recovered) at startup. An
unopened log holding data is opened by the first retention check.

Thread-safe: changes to the registry and the set of logs are serialised by a lock, and readers
(``topic``, ``get_log`` ...) read copy-on-write dicts without locking (a log opened on first
use is added in place, under the lock). A background daemon thread applies retention,
flushes, writes checkpoints and removes deleted partition dirs.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from tierlog.errors import ApiError, KafkaStorageError
from tierlog.log import log_file_utils as lfu
from tierlog.log import topic_admin
from tierlog.log.future_logs import FutureLogs
from tierlog.log.log import Log
from tierlog.log.log_checkpoints import Unopened, write_checkpoints
from tierlog.log.log_cleaner import CleanerConfig, LogCleaner
from tierlog.log.log_config import LONG_MAX, LogConfig
from tierlog.log.log_loading import load_logs
from tierlog.log.log_segment import wall_clock_ms
from tierlog.log.logs_to_be_deleted import LogsToBeDeleted
from tierlog.log.meta_properties import check_meta_properties
from tierlog.log.topic_registry import NewTopic, TopicInfo, TopicRegistry

__all__ = ["LogManager"]

log = logging.getLogger(__name__)

_MAX_WAIT_S = 1.0  # longest sleep of the background thread between checks


class LogManager:
    """All partition logs of this broker. See the module docstring for files and formats.

    Thread-safe. Call :meth:`startup` before use and :meth:`shutdown` at the end.
    """

    def __init__(
        self,
        log_dirs: Iterable[Path],
        default_config: LogConfig,
        *,
        node_id: int = 0,
        cluster_id: str | None = None,
        retention_check_interval_ms: int = 300_000,
        flush_check_interval_ms: int = LONG_MAX,
        flush_recovery_offset_checkpoint_interval_ms: int = 60_000,
        flush_start_offset_checkpoint_interval_ms: int = 60_000,
        recovery_threads_per_data_dir: int = 2,
        remote_log_storage_system_enable: bool = False,
        time_ms: Callable[[], int] = wall_clock_ms,
        cleaner_config: CleanerConfig | None = None,
    ) -> None:
        """
        Args:
            log_dirs: the ``log.dirs``; at least one, no duplicates.
            default_config: the broker-level topic defaults (``KafkaConfig.log_config()``).
            node_id: written to and checked against each dir's ``meta.properties``.
            cluster_id: expected cluster id; None adopts the stored one or generates one.
            remote_log_storage_system_enable: the broker flag a topic's
                ``remote.storage.enable=true`` needs.
            time_ms: the clock (injectable for tests).
            cleaner_config: the ``log.cleaner.*`` settings; None or ``enable_cleaner=False``
                runs no log cleaner (compacted topics are then not compacted).
        """
        dirs = [Path(d) for d in log_dirs]
        if not dirs:
            raise ValueError("at least one log dir is needed")
        if len({d.absolute() for d in dirs}) != len(dirs):
            raise ValueError(f"duplicate log dirs in {[str(d) for d in dirs]}")
        self._log_dirs = dirs
        self._default_config = default_config
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._retention_check_interval_ms = retention_check_interval_ms
        self._flush_check_interval_ms = flush_check_interval_ms
        self._recovery_checkpoint_interval_ms = flush_recovery_offset_checkpoint_interval_ms
        self._start_offset_checkpoint_interval_ms = flush_start_offset_checkpoint_interval_ms
        self._recovery_threads = max(1, recovery_threads_per_data_dir) * len(dirs)
        self._remote_storage_enabled = remote_log_storage_system_enable
        self._time_ms = time_ms

        self._lock = threading.RLock()  # registry and the set of logs
        self._checkpoint_lock = threading.Lock()  # write_checkpoints (log_checkpoints)
        # Copy-on-write, like the registry's topics: replaced, never mutated, so readers need
        # no lock. Every partition is in _log_dir_of, and in exactly one of _logs (opened) and
        # _unopened (opened by get_log on first use).
        self._logs: dict[tuple[str, int], Log] = {}
        self._unopened: dict[tuple[str, int], Unopened] = {}
        # Unopened logs whose load at startup failed (a failing file: EIO): recovered when
        # they open, and never vouched for by a clean shutdown marker until then.
        self._unrecovered: set[tuple[str, int]] = set()
        self._log_dir_of: dict[tuple[str, int], Path] = {}
        self._directory_ids: dict[Path, uuid.UUID] = {}
        self._offline_dirs: set[Path] = set()
        self._registry = TopicRegistry(
            dirs,
            default_config,
            offline_dirs=self._offline_dirs,
            storage_error=self._storage_error,
        )

        #: Renamed partition dirs awaiting removal (Kafka's logsToBeDeleted).
        self._logs_to_be_deleted = LogsToBeDeleted(self._lock, self._storage_error)
        self._wakeup = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._cleaner_config = cleaner_config
        #: The log cleaner (Kafka's LogCleaner), started with the manager when enabled.
        self.cleaner: LogCleaner | None = None
        #: Partitions moving to another log dir (AlterReplicaLogDirs): their future replicas.
        self.future_logs = FutureLogs(self)

    # ----------------------------------------------------------------- properties

    @property
    def log_dirs(self) -> list[Path]:
        return list(self._log_dirs)

    @property
    def default_config(self) -> LogConfig:
        """The broker-level topic defaults."""
        return self._default_config

    @property
    def cluster_id(self) -> str:
        """Kafka's 22-character cluster id (known after :meth:`startup`)."""
        if self._cluster_id is None:
            raise RuntimeError("cluster id is known after startup()")
        return self._cluster_id

    @property
    def node_id(self) -> int:
        return self._node_id

    def directory_id(self, log_dir: Path) -> uuid.UUID:
        """The ``directory.id`` of a log dir (after :meth:`startup`)."""
        return self._directory_ids[Path(log_dir)]

    @property
    def offline_log_dirs(self) -> set[Path]:
        """Log dirs where an I/O error happened (Kafka marks them offline)."""
        return set(self._offline_dirs)

    # ----------------------------------------------------------------- lifecycle

    def startup(self) -> None:
        """Create the dirs, check ``meta.properties``, load every log, start the background
        thread.

        Raises:
            KafkaStorageError: a dir cannot be created or read.
            InconsistentLogDirError: a dir belongs to another node or cluster.
        """
        with self._lock:
            if self._started:
                raise RuntimeError("LogManager already started")
            self._stopping.clear()
            for d in self._log_dirs:
                try:
                    d.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise self._storage_error(e, d, "create log dir") from e
            self._cluster_id, self._directory_ids = check_meta_properties(
                self._log_dirs,
                node_id=self._node_id,
                cluster_id=self._cluster_id,
                storage_error=self._storage_error,
            )
            self._registry.load()
            load_logs(self)
            self._started = True
        self._thread = threading.Thread(target=self._run, name="tierlog-log-manager", daemon=True)
        self._thread.start()
        if self._cleaner_config is not None and self._cleaner_config.enable_cleaner:
            # A copy: logs opened on first use are added to _logs in place, from other threads
            # (the cleaner iterating it raised "dictionary changed size during iteration").
            self.cleaner = LogCleaner(
                self._cleaner_config,
                self._log_dirs,
                lambda: dict(self._logs),
                time_ms=self._time_ms,
            )
            self.cleaner.startup()
            self.future_logs.pause_cleaning_of_all()

    def shutdown(self) -> None:
        """Stop the background thread, flush and close every log, write the checkpoints and
        the clean shutdown marker. Idempotent."""
        with self._lock:
            if not self._started:
                return
            self._started = False
        self._stopping.set()
        self._wakeup.set()
        if self.cleaner is not None:
            self.cleaner.shutdown()
            self.cleaner = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._logs_to_be_deleted.delete_logs()
        with self._lock:
            self.future_logs.close_all()
            try:
                self._persist_registry_if_dirty()
            except KafkaStorageError as e:
                log.error("cannot write the topic registry at shutdown: %s", e)
            failed: set[Path] = {self._log_dir_of[tp] for tp in self._unrecovered}
            for tp, lg in self._logs.items():
                for step in (lg.flush, lg.close):  # close (and trim) even when flush failed
                    try:
                        step()
                    except OSError as e:
                        failed.add(self._log_dir_of[tp])
                        log.error("closing %s-%d failed: %s", tp[0], tp[1], e)
            write_checkpoints(self, recovery=True, start=True)
            for d in self._log_dirs:
                if d in failed or d in self._offline_dirs:
                    continue
                try:
                    lfu.write_atomically(
                        d / lfu.CLEAN_SHUTDOWN_FILENAME, b'{"version":0,"brokerEpoch":-1}'
                    )
                except OSError as e:
                    log.error("cannot write the clean shutdown marker in %s: %s", d, e)
            self._logs = {}
            self._unopened = {}
            self._unrecovered = set()
            self._log_dir_of = {}

    # ----------------------------------------------------------------- queries

    def topic(self, name: str) -> TopicInfo | None:
        return self._registry.topics.get(name)

    def topics(self) -> dict[str, TopicInfo]:
        return dict(self._registry.topics)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for info in self._registry.topics.values():
            if info.topic_id == topic_id:
                return info
        return None

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The partition's log, opened now when this is its first use; None: no such
        partition.

        Raises:
            KafkaStorageError: the log could not be opened (EMFILE, ENOSPC, a failing disk).
        """
        tp = (topic, partition)
        lg = self._logs.get(tp)
        if lg is None and tp in self._unopened:
            lg = self._open_unopened(tp)
        return lg

    def current_log(self, topic: str, partition: int) -> Log | None:
        """:meth:`get_log` for threads that may race a log dir move: a log found closed by
        the swap of a move (:mod:`~tierlog.log.future_logs`, which holds the lock
        throughout) is looked up again once the swap is done, so they get the new log."""
        lg = self.get_log(topic, partition)
        if lg is not None and lg.closed:
            with self._lock:
                lg = self.get_log(topic, partition)
        return lg

    def all_logs(self) -> list[Log]:
        """The logs opened so far (see :meth:`get_log`)."""
        return list(self._logs.values())

    def _open_unopened(self, tp: tuple[str, int]) -> Log | None:
        with self._lock:
            lg = self._logs.get(tp)
            state = self._unopened.get(tp)
            if lg is not None or state is None:
                return lg
            info = self._registry.topics[tp[0]]
            path = self._log_dir_of[tp] / lfu.log_dir_name(*tp)
            try:
                lg = Log.open(
                    path,
                    info.config,
                    log_start_offset=state[1],
                    recovery_point=state[0],
                    topic_id=info.topic_id,
                    had_clean_shutdown=tp not in self._unrecovered,
                    time_ms=self._time_ms,
                )
            except OSError as e:
                # The partition's own files: this partition fails, the dir stays online.
                raise self._storage_error(e, path, "open log", partition_only=True) from e
            self._logs[tp] = lg  # in place: whoever iterates takes a copy
            del self._unopened[tp]
            self._unrecovered.discard(tp)
            return lg

    # ----------------------------------------------------------------- topic admin

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str],
        topic_id: uuid.UUID | None = None,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Create a topic with ``configs`` as topic-level overrides.

        Raises:
            InvalidTopic: an illegal name, or one colliding with an existing topic ('.' vs '_').
            TopicAlreadyExists: the name (or the given topic id) is taken.
            InvalidPartitions: ``num_partitions`` < 1.
            InvalidConfig: an unknown config or a bad value (the message names the key).
            KafkaStorageError: the partition dirs cannot be created.
        """
        (result,) = self.create_topics(
            [NewTopic(name, num_partitions, configs, topic_id)], validate_only=validate_only
        )
        if isinstance(result, ApiError):
            raise result
        return result

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> list[TopicInfo | ApiError]:
        """Create several topics (a CreateTopics request) with one registry write: each
        topic's :class:`TopicInfo`, or the error :meth:`create_topic` would raise for it."""
        return topic_admin.create_topics(self, topics, validate_only=validate_only)

    def create_partitions(self, name: str, new_total: int) -> TopicInfo:
        """Grow a topic to ``new_total`` partitions.

        Raises:
            UnknownTopicOrPartition: no such topic.
            InvalidPartitions: ``new_total`` is not more than the current count.
            KafkaStorageError: the new partition dirs cannot be created.
        """
        return topic_admin.create_partitions(self, name, new_total)

    def delete_topic(self, name: str) -> None:
        """Delete a topic: its partition dirs are renamed ``<topic>-<p>.<uuid>-delete`` at once
        and removed by the background thread.

        Raises:
            UnknownTopicOrPartition: no such topic.
            KafkaStorageError: a rename failed (the topic is gone from the registry; the dir
                is removed at the next startup, by its tombstoned topic id).
        """
        topic_admin.delete_topic(self, name)

    def ensure_replica(
        self,
        name: str,
        topic_id: uuid.UUID | None,
        partition: int,
        configs: Mapping[str, str],
    ) -> Log:
        """Host one partition of a cluster topic (the controller made this broker a
        replica): its log, created when new (see :meth:`ensure_replicas`).

        Raises:
            InvalidConfig: ``configs`` has an unknown key or a bad value.
            KafkaStorageError: the partition dir cannot be created or opened.
        """
        self.ensure_replicas(name, topic_id, [partition], configs)
        lg = self.get_log(name, partition)
        assert lg is not None  # hosted now
        return lg

    def ensure_replicas(
        self,
        name: str,
        topic_id: uuid.UUID | None,
        partitions: Iterable[int],
        configs: Mapping[str, str],
    ) -> None:
        """Host these partitions of a cluster topic, creating the new ones with one registry
        write (a broker that learns of a topic hosts all its replicas of it at once). A local
        topic of the same name with another id is an older incarnation (deleted and
        re-created while this broker was away): it is deleted first.

        Raises:
            InvalidConfig: ``configs`` has an unknown key or a bad value.
            KafkaStorageError: a partition dir cannot be created.
        """
        topic_admin.ensure_replicas(self, name, topic_id, partitions, configs)

    def delete_replica(self, name: str, partition: int) -> None:
        """Stop hosting one partition (the topic was deleted, or the replica moved away):
        its dir is renamed for deletion; the last one deletes the topic (with a tombstone).
        Nothing to do when it is not hosted."""
        topic_admin.delete_replica(self, name, partition)

    def alter_topic_config(
        self, name: str, overrides: Mapping[str, str | None], *, incremental: bool
    ) -> TopicInfo:
        """Change a topic's overrides and apply them to every partition's log.

        ``incremental=True`` (IncrementalAlterConfigs): set the given keys, a None value
        deletes the override. ``incremental=False`` (AlterConfigs): the given non-None keys
        become the complete set of overrides.

        Raises:
            UnknownTopicOrPartition: no such topic.
            InvalidConfig: an unknown config or a bad value (the message names the key).
        """
        return topic_admin.alter_topic_config(self, name, overrides, incremental=incremental)

    def reconfigure_default_log_config(self, default_config: LogConfig) -> None:
        """New broker-level topic defaults (Kafka's ``reconfigureDefaultLogConfig``, a dynamic
        broker config changed): every topic and every log keeps its own overrides over them,
        and takes the new defaults for the rest at once.

        Raises:
            InvalidConfig: a topic's overrides do not validate over the new defaults (nothing
                changed).
        """
        topic_admin.reconfigure_default_log_config(self, default_config)

    def reconfigure_cleaner(self, config: CleanerConfig) -> None:
        """New ``log.cleaner.*`` settings: the cleaner threads restart with them (Kafka's
        ``LogCleaner.reconfigure``)."""
        self._cleaner_config = config
        if self.cleaner is not None:
            self.cleaner.reconfigure(config)

    # ----------------------------------------------------------------- maintenance

    def checkpoint_recovery_points(self) -> None:
        """Write ``recovery-point-offset-checkpoint`` in every log dir."""
        write_checkpoints(self, recovery=True, start=False)

    def checkpoint_log_start_offsets(self) -> None:
        """Write ``log-start-offset-checkpoint`` in every log dir."""
        write_checkpoints(self, recovery=False, start=True)

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """Apply retention to every log now (opening the unopened ones that hold data); the
        number of segments deleted."""
        now = self._time_ms() if now_ms is None else now_ms
        deleted = 0
        for tp, (recovery_point, start) in list(self._unopened.items()):
            if recovery_point > (start or 0):  # records below the log end offset
                try:
                    self.get_log(*tp)
                except KafkaStorageError as e:
                    log.error("retention of %s-%d failed: %s", tp[0], tp[1], e)
        for lg in list(self._logs.values()):
            try:
                deleted += lg.delete_old_segments(now)
            except OSError as e:
                log.error("retention of %s failed: %s", lg.dir, e)
        return deleted

    def flush_dirty_logs(self, now_ms: int | None = None) -> None:
        """Flush every log whose ``flush.ms`` is due."""
        now = self._time_ms() if now_ms is None else now_ms
        for lg in list(self._logs.values()):
            try:
                lg.flush_if_due(now)
            except OSError as e:
                log.error("flush of %s failed: %s", lg.dir, e)

    # ----------------------------------------------------------------- background thread

    def _run(self) -> None:
        now = self._time_ms()
        next_retention = now + self._retention_check_interval_ms
        next_flush = now + self._flush_check_interval_ms
        next_recovery = now + self._recovery_checkpoint_interval_ms
        next_start = now + self._start_offset_checkpoint_interval_ms
        while not self._stopping.is_set():
            try:
                self._logs_to_be_deleted.delete_logs()
                self._persist_registry_if_dirty()
                now = self._time_ms()
                if now >= next_retention:
                    self.cleanup_logs(now)
                    next_retention = now + self._retention_check_interval_ms
                if now >= next_flush:
                    self.flush_dirty_logs(now)
                    next_flush = now + self._flush_check_interval_ms
                if now >= next_recovery:
                    self.checkpoint_recovery_points()
                    next_recovery = now + self._recovery_checkpoint_interval_ms
                if now >= next_start:
                    self.checkpoint_log_start_offsets()
                    next_start = now + self._start_offset_checkpoint_interval_ms
                wait_ms = min(next_retention, next_flush, next_recovery, next_start) - now
            except Exception:  # keep the scheduler alive; the next round retries
                log.exception("log manager background task failed")
                wait_ms = 1000
            self._wakeup.wait(min(max(wait_ms / 1000, 0.001), _MAX_WAIT_S))
            self._wakeup.clear()

    def _persist_registry_if_dirty(self) -> None:
        with self._lock:
            self._registry.persist_if_dirty()

    # ----------------------------------------------------------------- helpers

    def _check_started(self) -> None:
        if not self._started:
            raise RuntimeError("LogManager is not started")

    def _storage_error(
        self, e: OSError, path: Path, action: str, *, partition_only: bool = False
    ) -> KafkaStorageError:
        """Kafka's ``maybeHandleIOException``: log, mark the log dir offline, wrap the error.

        A resource that ran out (EMFILE, ENOSPC, ... :func:`lfu.is_resource_exhaustion`) fails
        the operation only: the dir stays online, so freeing the resource is enough, and the
        rest of the dir keeps serving (Kafka marks the dir offline on any IOException). So does
        an error in one partition's own files (``partition_only``: a failing file, EIO)."""
        if lfu.is_resource_exhaustion(e) or partition_only:
            log.warning("cannot %s %s: %s (the log dir stays online)", action, path, e)
            return KafkaStorageError(f"cannot {action} {path}: {e.strerror or e}")
        for d in self._log_dirs:
            if path == d or d in path.parents:
                if d not in self._offline_dirs and self._started:
                    log.error("marking log dir %s offline after: %s", d, e)
                    self._offline_dirs.add(d)
                break
        return KafkaStorageError(f"cannot {action} {path}: {e.strerror or e}")
