"""The topic admin of the LogManager: create topics and partitions, host and drop the
replicas of cluster topics, delete topics, alter topic configs and the broker's topic defaults
(what Kafka's ``AdminManager`` and controller do for topics, here on the broker's own
:class:`~tierlog.log.topic_registry.TopicRegistry`), with the partition dirs they create
(Kafka's ``LogManager.createLogDirectory`` and ``nextLogDirs``) and drop (``asyncDelete``).

The public functions are the bodies of the LogManager's methods of the same names, which
say what they do and raise. Order of writes, for crash safety: see the LogManager's module
docstring.

Friend of :class:`~tierlog.log.log_manager.LogManager` (its lock and maps): one job, kept out
of that module's size.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.errors import (
    ApiError,
    ConfigError,
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    KafkaStorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from tierlog.log import log_file_utils as lfu
from tierlog.log.log_checkpoints import NEW_LOG
from tierlog.log.log_config import TOPIC_CONFIGS, LogConfig
from tierlog.log.partition_metadata_file import (
    PartitionMetadataFile,
    encode_partition_metadata,
    random_kafka_uuid,
    uuid_to_kafka_str,
)
from tierlog.log.topic_names import unify_collision_chars, validate_topic_name
from tierlog.log.topic_registry import NewTopic, TopicInfo

if TYPE_CHECKING:
    from tierlog.log.log_manager import LogManager

__all__ = [
    "create_topics",
    "create_partitions",
    "delete_topic",
    "ensure_replicas",
    "delete_replica",
    "alter_topic_config",
    "reconfigure_default_log_config",
    "partition_counts",
    "next_log_dir",
]

log = logging.getLogger(__name__)


def create_topics(
    lm: LogManager, topics: Sequence[NewTopic], *, validate_only: bool = False
) -> list[TopicInfo | ApiError]:
    """The body of :meth:`LogManager.create_topics`."""
    with lm._lock:
        lm._check_started()
        results: list[TopicInfo | ApiError] = []
        new: dict[str, TopicInfo] = {}
        for t in topics:
            try:
                info = _new_topic(lm, t, new)
            except ApiError as e:
                results.append(e)
                continue
            new[t.name] = info
            results.append(info)
        if validate_only or not new:
            return results
        try:
            lm._registry.save({**lm._registry.topics, **new})
        except KafkaStorageError as e:
            return [e if isinstance(r, TopicInfo) else r for r in results]
        for i, r in enumerate(results):
            if not isinstance(r, TopicInfo):
                continue
            try:
                _open_new_logs(lm, r, range(r.num_partitions))
            except BaseException as e:
                remaining = dict(lm._registry.topics)
                del remaining[r.name]
                _roll_back(lm, r.name, range(r.num_partitions), remaining)
                if not isinstance(e, ApiError):
                    raise
                results[i] = e
        return results


def _new_topic(lm: LogManager, t: NewTopic, pending: Mapping[str, TopicInfo]) -> TopicInfo:
    """The TopicInfo of a topic to create, checked against the existing topics and
    ``pending`` (created in the same request). Call with the lock held."""
    name = t.name
    validate_topic_name(name)
    if t.num_partitions < 1:
        raise InvalidPartitions(
            f"Number of partitions was set to an invalid non-positive value: {t.num_partitions}"
        )
    config = _topic_config(lm, t.configs)
    if name in lm._registry.topics or name in pending:
        raise TopicAlreadyExists(f"Topic '{name}' already exists.")
    collision = unify_collision_chars(name)
    for other in (*lm._registry.topics, *pending):
        if unify_collision_chars(other) == collision:
            raise InvalidTopic(f"Topic '{name}' collides with existing topic: {other}")
    topic_id = t.topic_id
    if topic_id is not None and (
        lm.topic_by_id(topic_id) is not None
        or any(p.topic_id == topic_id for p in pending.values())
    ):
        raise TopicAlreadyExists(f"Topic id {uuid_to_kafka_str(topic_id)} already exists.")
    return TopicInfo(name, topic_id or random_kafka_uuid(), t.num_partitions, config)


def create_partitions(lm: LogManager, name: str, new_total: int) -> TopicInfo:
    """The body of :meth:`LogManager.create_partitions`."""
    with lm._lock:
        lm._check_started()
        info = lm._registry.topics.get(name)
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
        lm._registry.save({**lm._registry.topics, name: new})
        added = range(info.num_partitions, new_total)
        try:
            _open_new_logs(lm, new, added)
        except BaseException:
            _roll_back(lm, name, added, {**lm._registry.topics, name: info})
            raise
        return new


def delete_topic(lm: LogManager, name: str) -> None:
    """The body of :meth:`LogManager.delete_topic`."""
    with lm._lock:
        lm._check_started()
        info = lm._registry.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        topics = dict(lm._registry.topics)
        del topics[name]
        _flush_partition_metadata(lm, name, info.num_partitions)
        lm._registry.save(topics, deleted=lm._registry.deleted_ids | {info.topic_id})
        _drop_logs(lm, name, range(info.num_partitions))
    lm._wakeup.set()


def ensure_replicas(
    lm: LogManager,
    name: str,
    topic_id: uuid.UUID | None,
    partitions: Iterable[int],
    configs: Mapping[str, str],
) -> None:
    """The body of :meth:`LogManager.ensure_replicas`."""
    with lm._lock:
        lm._check_started()
        info = lm._registry.topics.get(name)
        if info is not None and topic_id is not None and info.topic_id != topic_id:
            log.warning(
                "topic %s here has id %s, the cluster's has id %s: deleting the old one",
                name, uuid_to_kafka_str(info.topic_id), uuid_to_kafka_str(topic_id),
            )  # fmt: skip
            delete_topic(lm, name)
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
                _topic_config(lm, configs),
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
        previous = dict(lm._registry.topics)
        lm._registry.save({**lm._registry.topics, name: new})
        try:
            _open_new_logs(lm, new, new_parts)
        except BaseException:
            _roll_back(lm, name, new_parts, previous)
            raise


def delete_replica(lm: LogManager, name: str, partition: int) -> None:
    """The body of :meth:`LogManager.delete_replica`."""
    with lm._lock:
        lm._check_started()
        info = lm._registry.topics.get(name)
        if info is None or not info.hosts(partition):
            return
        hosted = (info.replicas or frozenset(range(info.num_partitions))) - {partition}
        if not hosted:
            delete_topic(lm, name)
            return
        new = TopicInfo(name, info.topic_id, info.num_partitions, info.config, hosted)
        lm._registry.save({**lm._registry.topics, name: new})
        _drop_logs(lm, name, [partition])
    lm._wakeup.set()


def _flush_partition_metadata(lm: LogManager, name: str, num_partitions: int) -> None:
    """Make the topic's ``partition.metadata`` files durable before its tombstone is.

    They are written without fsync (the registry is the durable record of a topic id,
    see :func:`~tierlog.log.log_loader._load_topic_id`), but once the registry forgets the topic
    only the file tells a partition dir that survived a machine crash before its rename
    (its id is tombstoned: removed) from one to adopt. A file that cannot be flushed is
    logged: the delete goes on (the next startup adopts such a dir at worst).
    """
    for p in range(num_partitions):
        d = lm._log_dir_of.get((name, p))
        if d is None:
            continue
        path = d / lfu.log_dir_name(name, p)
        try:
            PartitionMetadataFile(PartitionMetadataFile.new_file(path)).flush()
        except OSError as e:
            log.warning("cannot flush the partition.metadata of %s: %s", path, e)


def alter_topic_config(
    lm: LogManager, name: str, overrides: Mapping[str, str | None], *, incremental: bool
) -> TopicInfo:
    """The body of :meth:`LogManager.alter_topic_config`."""
    with lm._lock:
        lm._check_started()
        info = lm._registry.topics.get(name)
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
        config = _topic_config(lm, new_overrides)
        new = TopicInfo(name, info.topic_id, info.num_partitions, config, info.replicas)
        lm._registry.save({**lm._registry.topics, name: new})
        for p in range(info.num_partitions):
            lg = lm._logs.get((name, p))
            if lg is not None:
                lg.update_config(config)
        return new


def reconfigure_default_log_config(lm: LogManager, default_config: LogConfig) -> None:
    """The body of :meth:`LogManager.reconfigure_default_log_config`."""
    with lm._lock:
        topics = {
            name: dataclasses.replace(info, config=_over(default_config, info.config))
            for name, info in lm._registry.topics.items()
        }
        logs = {tp: _over(default_config, lg.config) for tp, lg in lm._logs.items()}
        lm._default_config = default_config
        lm._registry.reconfigure(default_config, topics)
        for tp, config in logs.items():
            lm._logs[tp].update_config(config)


def _over(default_config: LogConfig, config: LogConfig) -> LogConfig:
    try:
        return default_config.with_overrides(config.to_props(overrides_only=True))
    except ConfigError as e:
        raise InvalidConfig(str(e)) from None


def _topic_config(lm: LogManager, configs: Mapping[str, str]) -> LogConfig:
    try:
        config = lm._default_config.with_overrides(configs)
        _check_topic_config(lm, config)
    except ConfigError as e:
        raise InvalidConfig(str(e)) from None
    return config


def _check_topic_config(lm: LogManager, config: LogConfig) -> None:
    if config.remote_storage_enable and not lm._remote_storage_enabled:
        raise ConfigError(
            "remote.storage.enable",
            "cannot be true when the broker has remote.log.storage.system.enable=false",
        )


def _open_new_logs(lm: LogManager, info: TopicInfo, partitions: Iterable[int]) -> None:
    """Create the partition dirs, each with its ``partition.metadata``; the logs (their
    first segment) are opened on first use (:meth:`LogManager.get_log`)."""
    dirs = dict(lm._log_dir_of)
    data = encode_partition_metadata(info.topic_id)
    try:
        counts = partition_counts(lm, dirs)
        for p in partitions:
            d = lm.future_logs.take_preferred_log_dir(info.name, p, counts) or next_log_dir(counts)
            path = d / lfu.log_dir_name(info.name, p)
            try:
                try:
                    path.mkdir()
                except FileExistsError:  # leftovers of a topic whose registry entry was lost
                    lm._logs_to_be_deleted.rename_for_delete(path, info.name, p)
                    path.mkdir()
                _write_new_file(path / lfu.PARTITION_METADATA_FILENAME, data)
            except OSError as e:
                lm._logs_to_be_deleted.discard_partial_dir(path, info.name, p)
                raise lm._storage_error(e, path, "create log") from e
            tp = (info.name, p)
            dirs[tp] = d
            lm._unopened[tp] = NEW_LOG
    finally:
        lm._log_dir_of = dirs


def _roll_back(
    lm: LogManager, topic: str, partitions: Iterable[int], topics: dict[str, TopicInfo]
) -> None:
    """Undo a create that failed part way: drop the logs it opened and write the registry
    as it was. Each step is tried even when another fails (the failure that made the
    create fail is the one the caller raises); what cannot be undone now is undone at the
    next startup (a registered partition without a dir is created, a dir renamed
    ``-delete`` is removed)."""
    try:
        _drop_logs(lm, topic, partitions)
    except (KafkaStorageError, OSError) as e:
        log.warning("rolling back topic %s: %s", topic, e)
    try:
        lm._registry.save(topics)
    except (KafkaStorageError, OSError) as e:
        # Served as rolled back now; the next registry write (any topic change) persists it.
        log.error("rolling back topic %s: the registry on disk still has it: %s", topic, e)
        # Written by the background thread or at shutdown.
        lm._registry.set_unsaved(dict(topics))


def _drop_logs(lm: LogManager, topic: str, partitions: Iterable[int]) -> None:
    """Close the logs and rename their dirs for background deletion."""
    logs = dict(lm._logs)
    dirs = dict(lm._log_dir_of)
    error: KafkaStorageError | None = None
    for p in partitions:
        lg = logs.pop((topic, p), None)
        d = dirs.pop((topic, p), None)
        unopened = lm._unopened.pop((topic, p), None)
        lm._unrecovered.discard((topic, p))
        if d is None or (lg is None and unopened is None):
            continue
        lm.future_logs.drop(topic, p)
        if lm.cleaner is not None:
            lm.cleaner.abort_cleaning((topic, p))
        if lg is not None:
            try:
                lg.close()
            except OSError as e:
                log.warning("closing %s before deleting it: %s", lg.dir, e)
        try:
            lm._logs_to_be_deleted.rename_for_delete(d / lfu.log_dir_name(topic, p), topic, p)
        except KafkaStorageError as e:
            error = e
    lm._logs = logs
    lm._log_dir_of = dirs
    if error is not None:
        raise error


def partition_counts(lm: LogManager, dirs: Mapping[tuple[str, int], Path]) -> dict[Path, int]:
    """Partitions per online log dir, for :func:`next_log_dir` (counted once per create,
    not once per partition).

    Raises:
        KafkaStorageError: every log dir is offline.
    """
    counts = {d: 0 for d in lm._log_dirs if d not in lm._offline_dirs}
    if not counts:
        raise KafkaStorageError("every log dir is offline")
    if len(counts) > 1:
        for d in dirs.values():
            if d in counts:
                counts[d] += 1
    return counts


def next_log_dir(counts: dict[Path, int]) -> Path:
    """The online log dir with the fewest partitions (Kafka's choice), first on ties;
    counts the new partition in ``counts``."""
    d = min(counts, key=counts.__getitem__)
    counts[d] += 1
    return d


def _write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data``, without fsync (see
    :func:`~tierlog.log.log_loader._load_topic_id`: a machine crash may leave it missing or
    torn, the registry restores it).

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
