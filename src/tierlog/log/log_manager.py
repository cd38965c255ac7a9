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

import dataclasses
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tierlog.errors import (
    ApiError,
    ConfigError,
    CorruptCheckpointError,
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    KafkaStorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from tierlog.log import log_file_utils as lfu
from tierlog.log.checkpoint_file import OffsetCheckpointFile
from tierlog.log.future_logs import FutureLogs, scan_future_dirs
from tierlog.log.log import Log
from tierlog.log.log_cleaner import CleanerConfig, LogCleaner
from tierlog.log.log_config import LONG_MAX, TOPIC_CONFIGS, LogConfig
from tierlog.log.log_segment import wall_clock_ms
from tierlog.log.meta_properties import check_meta_properties
from tierlog.log.partition_metadata_file import (
    PartitionMetadataFile,
    encode_partition_metadata,
    random_kafka_uuid,
    uuid_to_kafka_str,
)
from tierlog.log.topic_names import unify_collision_chars, validate_topic_name
from tierlog.log.topic_registry import NewTopic, TopicInfo, TopicRegistry

__all__ = ["LogManager"]

log = logging.getLogger(__name__)

#: How to open a log not opened yet: (recovery point, log start offset or None: unknown).
_Unopened = tuple[int, int | None]
#: A partition created and not used yet.
_NEW_LOG: _Unopened = (0, None)

_MAX_FILE_NAME = 255
_MAX_WAIT_S = 1.0  # longest sleep of the background thread between checks


def _parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` of a ``<topic>-<partition>`` dir name, or None."""
    topic, sep, part = name.rpartition("-")
    if not sep or not part.isdigit() or not part.isascii() or (len(part) > 1 and part[0] == "0"):
        return None
    try:
        validate_topic_name(topic)
    except InvalidTopic:
        return None
    return topic, int(part)


def _delete_dir_name(topic: str, partition: int) -> str:
    """Kafka's ``logDeleteDirName``: ``<topic>-<partition>.<uuid hex>-delete``, within 255."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{lfu.DELETE_DIR_SUFFIX}"
    return topic[: _MAX_FILE_NAME - len(suffix)] + suffix


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
        self._checkpoint_lock = threading.Lock()
        # Copy-on-write, like the registry's topics: replaced, never mutated, so readers need
        # no lock. Every partition is in _log_dir_of, and in exactly one of _logs (opened) and
        # _unopened (opened by get_log on first use).
        self._logs: dict[tuple[str, int], Log] = {}
        self._unopened: dict[tuple[str, int], _Unopened] = {}
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

        self._to_delete: list[Path] = []  # renamed partition dirs awaiting removal
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
            self._load_logs()
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
        self._delete_pending_dirs()
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
            self._write_checkpoints(recovery=True, start=True)
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
        with self._lock:
            self._check_started()
            results: list[TopicInfo | ApiError] = []
            new: dict[str, TopicInfo] = {}
            for t in topics:
                try:
                    info = self._new_topic(t, new)
                except ApiError as e:
                    results.append(e)
                    continue
                new[t.name] = info
                results.append(info)
            if validate_only or not new:
                return results
            try:
                self._registry.save({**self._registry.topics, **new})
            except KafkaStorageError as e:
                return [e if isinstance(r, TopicInfo) else r for r in results]
            for i, r in enumerate(results):
                if not isinstance(r, TopicInfo):
                    continue
                try:
                    self._open_new_logs(r, range(r.num_partitions))
                except BaseException as e:
                    remaining = dict(self._registry.topics)
                    del remaining[r.name]
                    self._roll_back(r.name, range(r.num_partitions), remaining)
                    if not isinstance(e, ApiError):
                        raise
                    results[i] = e
            return results

    def _new_topic(self, t: NewTopic, pending: Mapping[str, TopicInfo]) -> TopicInfo:
        """The TopicInfo of a topic to create, checked against the existing topics and
        ``pending`` (created in the same request). Call with the lock held."""
        name = t.name
        validate_topic_name(name)
        if t.num_partitions < 1:
            raise InvalidPartitions(
                f"Number of partitions was set to an invalid non-positive value: {t.num_partitions}"
            )
        config = self._topic_config(t.configs)
        if name in self._registry.topics or name in pending:
            raise TopicAlreadyExists(f"Topic '{name}' already exists.")
        collision = unify_collision_chars(name)
        for other in (*self._registry.topics, *pending):
            if unify_collision_chars(other) == collision:
                raise InvalidTopic(f"Topic '{name}' collides with existing topic: {other}")
        topic_id = t.topic_id
        if topic_id is not None and (
            self.topic_by_id(topic_id) is not None
            or any(p.topic_id == topic_id for p in pending.values())
        ):
            raise TopicAlreadyExists(f"Topic id {uuid_to_kafka_str(topic_id)} already exists.")
        return TopicInfo(name, topic_id or random_kafka_uuid(), t.num_partitions, config)

    def create_partitions(self, name: str, new_total: int) -> TopicInfo:
        """Grow a topic to ``new_total`` partitions.

        Raises:
            UnknownTopicOrPartition: no such topic.
            InvalidPartitions: ``new_total`` is not more than the current count.
            KafkaStorageError: the new partition dirs cannot be created.
        """
        with self._lock:
            self._check_started()
            info = self._registry.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
            if new_total == info.num_partitions:
                raise InvalidPartitions(f"Topic already has {info.num_partitions} partitions.")
            if new_total < info.num_partitions:
                raise InvalidPartitions(
                    f"Topic currently has {info.num_partitions} partitions, which is higher "
                    f"than the requested {new_total}."
                )
            new = TopicInfo(name, info.topic_id, new_total, info.config)
            self._registry.save({**self._registry.topics, name: new})
            added = range(info.num_partitions, new_total)
            try:
                self._open_new_logs(new, added)
            except BaseException:
                self._roll_back(name, added, {**self._registry.topics, name: info})
                raise
            return new

    def delete_topic(self, name: str) -> None:
        """Delete a topic: its partition dirs are renamed ``<topic>-<p>.<uuid>-delete`` at once
        and removed by the background thread.

        Raises:
            UnknownTopicOrPartition: no such topic.
            KafkaStorageError: a rename failed (the topic is gone from the registry; the dir
                is removed at the next startup, by its tombstoned topic id).
        """
        with self._lock:
            self._check_started()
            info = self._registry.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
            topics = dict(self._registry.topics)
            del topics[name]
            self._flush_partition_metadata(name, info.num_partitions)
            self._registry.save(topics, deleted=self._registry.deleted_ids | {info.topic_id})
            self._drop_logs(name, range(info.num_partitions))
        self._wakeup.set()

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
        with self._lock:
            self._check_started()
            info = self._registry.topics.get(name)
            if info is not None and topic_id is not None and info.topic_id != topic_id:
                log.warning(
                    "topic %s here has id %s, the cluster's has id %s: deleting the old one",
                    name, uuid_to_kafka_str(info.topic_id), uuid_to_kafka_str(topic_id),
                )  # fmt: skip
                self.delete_topic(name)
                info = None
            wanted = sorted(set(partitions))
            new_parts = [p for p in wanted if info is None or not info.hosts(p)]
            if not new_parts:
                return
            count = max(wanted) + 1
            if info is None:
                new = TopicInfo(
                    name,
                    topic_id or random_kafka_uuid(),
                    count,
                    self._topic_config(configs),
                    frozenset(wanted),
                )
            else:
                hosted = info.replicas or frozenset(range(info.num_partitions))
                new = TopicInfo(
                    name,
                    info.topic_id,
                    max(info.num_partitions, count),
                    info.config,
                    hosted | set(wanted),
                )
            previous = dict(self._registry.topics)
            self._registry.save({**self._registry.topics, name: new})
            try:
                self._open_new_logs(new, new_parts)
            except BaseException:
                self._roll_back(name, new_parts, previous)
                raise

    def delete_replica(self, name: str, partition: int) -> None:
        """Stop hosting one partition (the topic was deleted, or the replica moved away):
        its dir is renamed for deletion; the last one deletes the topic (with a tombstone).
        Nothing to do when it is not hosted."""
        with self._lock:
            self._check_started()
            info = self._registry.topics.get(name)
            if info is None or not info.hosts(partition):
                return
            hosted = (info.replicas or frozenset(range(info.num_partitions))) - {partition}
            if not hosted:
                self.delete_topic(name)
                return
            new = TopicInfo(name, info.topic_id, info.num_partitions, info.config, hosted)
            self._registry.save({**self._registry.topics, name: new})
            self._drop_logs(name, [partition])
        self._wakeup.set()

    def _flush_partition_metadata(self, name: str, num_partitions: int) -> None:
        """Make the topic's ``partition.metadata`` files durable before its tombstone is.

        They are written without fsync (the registry is the durable record of a topic id,
        see :func:`~tierlog.log.log._load_topic_id`), but once the registry forgets the topic
        only the file tells a partition dir that survived a machine crash before its rename
        (its id is tombstoned: removed) from one to adopt. A file that cannot be flushed is
        logged: the delete goes on (the next startup adopts such a dir at worst).
        """
        for p in range(num_partitions):
            d = self._log_dir_of.get((name, p))
            if d is None:
                continue
            path = d / lfu.log_dir_name(name, p)
            try:
                PartitionMetadataFile(PartitionMetadataFile.new_file(path)).flush()
            except OSError as e:
                log.warning("cannot flush the partition.metadata of %s: %s", path, e)

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
        with self._lock:
            self._check_started()
            info = self._registry.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
            new_overrides = dict(info.overrides) if incremental else {}
            for key, value in overrides.items():
                if value is not None:
                    new_overrides[key] = value
                elif key not in TOPIC_CONFIGS:
                    raise InvalidConfig(f"{key}: unknown topic config")
                else:
                    new_overrides.pop(key, None)
            config = self._topic_config(new_overrides)
            new = TopicInfo(name, info.topic_id, info.num_partitions, config, info.replicas)
            self._registry.save({**self._registry.topics, name: new})
            for p in range(info.num_partitions):
                lg = self._logs.get((name, p))
                if lg is not None:
                    lg.update_config(config)
            return new

    def reconfigure_default_log_config(self, default_config: LogConfig) -> None:
        """New broker-level topic defaults (Kafka's ``reconfigureDefaultLogConfig``, a dynamic
        broker config changed): every topic and every log keeps its own overrides over them,
        and takes the new defaults for the rest at once.

        Raises:
            InvalidConfig: a topic's overrides do not validate over the new defaults (nothing
                changed).
        """
        with self._lock:
            topics = {
                name: dataclasses.replace(info, config=self._over(default_config, info.config))
                for name, info in self._registry.topics.items()
            }
            logs = {tp: self._over(default_config, lg.config) for tp, lg in self._logs.items()}
            self._default_config = default_config
            self._registry.reconfigure(default_config, topics)
            for tp, config in logs.items():
                self._logs[tp].update_config(config)

    @staticmethod
    def _over(default_config: LogConfig, config: LogConfig) -> LogConfig:
        try:
            return default_config.with_overrides(config.to_props(overrides_only=True))
        except ConfigError as e:
            raise InvalidConfig(str(e)) from None

    def reconfigure_cleaner(self, config: CleanerConfig) -> None:
        """New ``log.cleaner.*`` settings: the cleaner threads restart with them (Kafka's
        ``LogCleaner.reconfigure``)."""
        self._cleaner_config = config
        if self.cleaner is not None:
            self.cleaner.reconfigure(config)

    # ----------------------------------------------------------------- maintenance

    def checkpoint_recovery_points(self) -> None:
        """Write ``recovery-point-offset-checkpoint`` in every log dir."""
        self._write_checkpoints(recovery=True, start=False)

    def checkpoint_log_start_offsets(self) -> None:
        """Write ``log-start-offset-checkpoint`` in every log dir."""
        self._write_checkpoints(recovery=False, start=True)

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
                self._delete_pending_dirs()
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

    def _delete_pending_dirs(self) -> None:
        with self._lock:
            pending, self._to_delete = self._to_delete, []
        for d in pending:
            try:
                shutil.rmtree(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.error("cannot remove deleted partition dir %s: %s", d, e)

    def _persist_registry_if_dirty(self) -> None:
        with self._lock:
            self._registry.persist_if_dirty()

    # ----------------------------------------------------------------- loading

    def _load_logs(self) -> None:
        """Find every partition dir of every log dir; open (recover, in parallel) those of
        a log dir without a clean shutdown marker, leave the others to their first use."""
        jobs: list[tuple[Path, tuple[str, int], uuid.UUID | None, bool, int, int | None]] = []
        try:
            futures = scan_future_dirs(self._log_dirs)
        except OSError as e:
            raise self._storage_error(e, self._log_dirs[0], "load future replicas in") from e
        for d in self._log_dirs:
            clean = (d / lfu.CLEAN_SHUTDOWN_FILENAME).exists()
            recovery = self._read_checkpoint(d / lfu.RECOVERY_POINT_CHECKPOINT_FILENAME)
            starts = self._read_checkpoint(d / lfu.LOG_START_OFFSET_CHECKPOINT_FILENAME)
            try:
                with os.scandir(d) as it:
                    names = sorted(e.name for e in it if e.is_dir())
            except OSError as e:
                raise self._storage_error(e, d, "list") from e
            for dir_name in names:
                entry = d / dir_name
                if dir_name.endswith(lfu.DELETE_DIR_SUFFIX):
                    self._to_delete.append(entry)  # finish an interrupted delete
                    continue
                tp = _parse_partition_dir(dir_name)
                if tp is None:
                    continue  # remote-log-index-cache, -future dirs
                if tp in self._log_dir_of:
                    log.error(
                        "partition %s-%d is in two log dirs (%s and %s); using the first",
                        *tp,
                        self._log_dir_of[tp],
                        d,
                    )
                    continue
                info = self._registry.topics.get(tp[0])
                # Vouched for by the marker (the topic id is checked when the log is opened);
                # with tombstones, each dir's id is read to find a delete to finish.
                vouched = clean and not self._registry.deleted_ids
                if vouched and info is not None and info.hosts(tp[1]):
                    tp = (info.name, tp[1])  # one topic name string for its partitions
                    self._log_dir_of[tp] = d
                    state = (recovery.get(tp, 0), starts.get(tp))
                    self._unopened[tp] = _NEW_LOG if state == _NEW_LOG else state
                    continue
                try:
                    stored_id = PartitionMetadataFile(
                        entry / lfu.PARTITION_METADATA_FILENAME
                    ).read()
                except (CorruptCheckpointError, OSError) as e:
                    log.warning("%s: %s; using the registry's topic id", entry, e)
                    stored_id = None
                if stored_id is not None and stored_id in self._registry.deleted_ids:
                    self._rename_for_delete(entry, *tp)
                    continue
                if info is not None and stored_id is not None and stored_id != info.topic_id:
                    log.error(
                        "%s holds topic id %s but topic %s has id %s; not loading it",
                        entry,
                        uuid_to_kafka_str(stored_id),
                        tp[0],
                        uuid_to_kafka_str(info.topic_id),
                    )
                    continue
                if info is None:
                    info = self._adopt(tp, stored_id)
                elif not info.hosts(tp[1]):
                    log.warning(
                        "%s is not a partition of topic %s in the registry; adopting it",
                        entry,
                        tp[0],
                    )
                    replicas = None if info.replicas is None else info.replicas | {tp[1]}
                    count = max(info.num_partitions, tp[1] + 1)
                    info = TopicInfo(info.name, info.topic_id, count, info.config, replicas)
                    self._registry.set_unsaved({**self._registry.topics, info.name: info})
                self._log_dir_of[tp] = d
                if clean:
                    self._unopened[tp] = (recovery.get(tp, 0), starts.get(tp))
                else:
                    jobs.append(
                        (entry, tp, info.topic_id, False, recovery.get(tp, 0), starts.get(tp))
                    )
        # Registered partitions without a dir (a crash after the registry write): create them.
        counts: dict[Path, int] | None = None
        for name, info in self._registry.topics.items():
            for p in range(info.num_partitions):
                if (name, p) not in self._log_dir_of and info.hosts(p):
                    if counts is None:
                        counts = self._partition_counts(self._log_dir_of)
                    d = self._next_log_dir(counts)
                    self._log_dir_of[(name, p)] = d
                    jobs.append(
                        (d / lfu.log_dir_name(name, p), (name, p), info.topic_id, True, 0, None)
                    )
        if self._registry.dirty:
            self._registry.save(self._registry.topics)

        def open_one(
            job: tuple[Path, tuple[str, int], uuid.UUID | None, bool, int, int | None],
        ) -> tuple[tuple[str, int], Log | OSError]:
            path, tp, topic_id, clean, recovery_point, start = job
            try:
                lg = Log.open(
                    path,
                    self._registry.topics[tp[0]].config,
                    log_start_offset=start,
                    recovery_point=recovery_point,
                    topic_id=topic_id,
                    had_clean_shutdown=clean,
                    time_ms=self._time_ms,
                )
            except OSError as e:
                return tp, e
            return tp, lg

        logs: dict[tuple[str, int], Log] = {}
        with ThreadPoolExecutor(self._recovery_threads, thread_name_prefix="log-recovery") as ex:
            for (path, _, _, clean, recovery_point, start), (tp, got) in zip(
                jobs, ex.map(open_one, jobs), strict=True
            ):
                if isinstance(got, Log):
                    logs[tp] = got
                    continue
                # One partition's failing files (EIO) never stop the broker: the rest load,
                # and this one is tried again, recovered, on its first use (each request
                # meanwhile answers KAFKA_STORAGE_ERROR). Kafka takes the whole dir offline.
                log.error(
                    "cannot load log %s: %s; its requests answer KAFKA_STORAGE_ERROR until "
                    "it opens",
                    path,
                    got.strerror or got,
                )
                self._unopened[tp] = (recovery_point, start)
                if not clean:
                    self._unrecovered.add(tp)
        self._logs = logs
        self.future_logs.load(futures)
        for d in self._log_dirs:
            # The marker is only for the load that just finished (Kafka deletes it here too).
            try:
                (d / lfu.CLEAN_SHUTDOWN_FILENAME).unlink(missing_ok=True)
                lfu.fsync_dir(d)
            except OSError as e:
                raise self._storage_error(e, d, "remove the clean shutdown marker in") from e
        # Tombstones whose dirs are all gone are no longer needed.
        if self._registry.deleted_ids:
            self._registry.save(self._registry.topics, frozenset())
        log.info(
            "loaded %d logs from %s (%d more to open on first use)",
            len(logs),
            ", ".join(map(str, self._log_dirs)),
            len(self._unopened),
        )

    def _adopt(self, tp: tuple[str, int], stored_id: uuid.UUID | None) -> TopicInfo:
        """Register a topic found on disk but not in the registry."""
        name, partition = tp
        info = TopicInfo(
            name, stored_id or random_kafka_uuid(), partition + 1, self._default_config
        )
        log.warning(
            "adopting topic %s (id %s) found in a log dir but not in the topic registry",
            name,
            uuid_to_kafka_str(info.topic_id),
        )
        self._registry.set_unsaved({**self._registry.topics, name: info})
        return info

    def _read_checkpoint(self, path: Path) -> dict[tuple[str, int], int]:
        try:
            return OffsetCheckpointFile(path).read()
        except (CorruptCheckpointError, OSError) as e:
            # Kafka: warn and start from scratch (full recovery, segment base offsets).
            log.warning("ignoring unreadable checkpoint %s: %s", path, e)
            return {}

    # ----------------------------------------------------------------- log creation/removal

    def _open_new_logs(self, info: TopicInfo, partitions: Iterable[int]) -> None:
        """Create the partition dirs, each with its ``partition.metadata``; the logs (their
        first segment) are opened on first use (:meth:`get_log`)."""
        dirs = dict(self._log_dir_of)
        data = encode_partition_metadata(info.topic_id)
        try:
            counts = self._partition_counts(dirs)
            for p in partitions:
                d = self.future_logs.take_preferred_log_dir(
                    info.name, p, counts
                ) or self._next_log_dir(counts)
                path = d / lfu.log_dir_name(info.name, p)
                try:
                    try:
                        path.mkdir()
                    except FileExistsError:  # leftovers of a topic whose registry entry was lost
                        self._rename_for_delete(path, info.name, p)
                        path.mkdir()
                    _write_new_file(path / lfu.PARTITION_METADATA_FILENAME, data)
                except OSError as e:
                    self._discard_partial_dir(path, info.name, p)
                    raise self._storage_error(e, path, "create log") from e
                tp = (info.name, p)
                dirs[tp] = d
                self._unopened[tp] = _NEW_LOG
        finally:
            self._log_dir_of = dirs

    def _roll_back(
        self, topic: str, partitions: Iterable[int], topics: dict[str, TopicInfo]
    ) -> None:
        """Undo a create that failed part way: drop the logs it opened and write the registry
        as it was. Each step is tried even when another fails (the failure that made the
        create fail is the one the caller raises); what cannot be undone now is undone at the
        next startup (a registered partition without a dir is created, a dir renamed
        ``-delete`` is removed)."""
        try:
            self._drop_logs(topic, partitions)
        except (KafkaStorageError, OSError) as e:
            log.warning("rolling back topic %s: %s", topic, e)
        try:
            self._registry.save(topics)
        except (KafkaStorageError, OSError) as e:
            # Served as rolled back now; the next registry write (any topic change) persists it.
            log.error("rolling back topic %s: the registry on disk still has it: %s", topic, e)
            # Written by the background thread or at shutdown.
            self._registry.set_unsaved(dict(topics))

    def _drop_logs(self, topic: str, partitions: Iterable[int]) -> None:
        """Close the logs and rename their dirs for background deletion."""
        logs = dict(self._logs)
        dirs = dict(self._log_dir_of)
        error: KafkaStorageError | None = None
        for p in partitions:
            lg = logs.pop((topic, p), None)
            d = dirs.pop((topic, p), None)
            unopened = self._unopened.pop((topic, p), None)
            self._unrecovered.discard((topic, p))
            if d is None or (lg is None and unopened is None):
                continue
            self.future_logs.drop(topic, p)
            if self.cleaner is not None:
                self.cleaner.abort_cleaning((topic, p))
            if lg is not None:
                try:
                    lg.close()
                except OSError as e:
                    log.warning("closing %s before deleting it: %s", lg.dir, e)
            try:
                self._rename_for_delete(d / lfu.log_dir_name(topic, p), topic, p)
            except KafkaStorageError as e:
                error = e
        self._logs = logs
        self._log_dir_of = dirs
        if error is not None:
            raise error

    def _discard_partial_dir(self, path: Path, topic: str, partition: int) -> None:
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
        with self._lock:
            self._to_delete.append(target)

    def _rename_for_delete(self, path: Path, topic: str, partition: int) -> None:
        target = path.with_name(_delete_dir_name(topic, partition))
        try:
            path.rename(target)
            lfu.fsync_dir(path.parent)
        except OSError as e:
            raise self._storage_error(e, path, "rename for deletion") from e
        with self._lock:
            self._to_delete.append(target)

    def _partition_counts(self, dirs: Mapping[tuple[str, int], Path]) -> dict[Path, int]:
        """Partitions per online log dir, for :meth:`_next_log_dir` (counted once per create,
        not once per partition).

        Raises:
            KafkaStorageError: every log dir is offline.
        """
        counts = {d: 0 for d in self._log_dirs if d not in self._offline_dirs}
        if not counts:
            raise KafkaStorageError("every log dir is offline")
        if len(counts) > 1:
            for d in dirs.values():
                if d in counts:
                    counts[d] += 1
        return counts

    @staticmethod
    def _next_log_dir(counts: dict[Path, int]) -> Path:
        """The online log dir with the fewest partitions (Kafka's choice), first on ties;
        counts the new partition in ``counts``."""
        d = min(counts, key=counts.__getitem__)
        counts[d] += 1
        return d

    # ----------------------------------------------------------------- helpers

    def _topic_config(self, configs: Mapping[str, str]) -> LogConfig:
        try:
            config = self._default_config.with_overrides(configs)
            self._check_topic_config(config)
        except ConfigError as e:
            raise InvalidConfig(str(e)) from None
        return config

    def _check_topic_config(self, config: LogConfig) -> None:
        if config.remote_storage_enable and not self._remote_storage_enabled:
            raise ConfigError(
                "remote.storage.enable",
                "cannot be true when the broker has remote.log.storage.system.enable=false",
            )

    def _check_started(self) -> None:
        if not self._started:
            raise RuntimeError("LogManager is not started")

    def _write_checkpoints(self, *, recovery: bool, start: bool) -> None:
        """An unopened log keeps the offsets it was loaded with (none known: not written). A
        future replica (:mod:`~tierlog.log.future_logs`) is written in its own dir."""
        with self._checkpoint_lock:
            logs = dict(self._logs)  # copies: get_log adds to them in place
            unopened = dict(self._unopened)
            dirs = self._log_dir_of
            one_dir = len(self._log_dirs) == 1
            for d in self._log_dirs:
                if d in self._offline_dirs:
                    continue
                mine = {tp: lg for tp, lg in logs.items() if one_dir or dirs.get(tp) == d}
                # Future replicas too (as Kafka's logsByDir): theirs is another dir.
                mine.update((tp, f) for tp, f in self.future_logs.items() if f.dir.parent == d)
                rest = {tp: u for tp, u in unopened.items() if one_dir or dirs.get(tp) == d}
                try:
                    if recovery:
                        points = {tp: lg.recovery_point for tp, lg in mine.items()}
                        points.update((tp, u[0]) for tp, u in rest.items())
                        OffsetCheckpointFile(d / lfu.RECOVERY_POINT_CHECKPOINT_FILENAME).write(
                            points
                        )
                    if start:
                        starts = {tp: lg.log_start_offset for tp, lg in mine.items()}
                        starts.update((tp, u[1]) for tp, u in rest.items() if u[1] is not None)
                        OffsetCheckpointFile(d / lfu.LOG_START_OFFSET_CHECKPOINT_FILENAME).write(
                            starts
                        )
                except OSError as e:
                    self._storage_error(e, d, "write checkpoints in")

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


def _write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data``, without fsync (see :func:`~tierlog.log.log.
    _load_topic_id`: a machine crash may leave it missing or torn, the registry restores it).

    Raises:
        OSError: it exists, or the write failed.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
