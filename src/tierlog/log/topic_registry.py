"""The topic registry: the topics of this broker, their ids, partitions and config overrides.

Kafka keeps topic ids, partition counts and config overrides in its metadata log (KRaft);
tierlog keeps them in ``__tierlog_topics.json``, a copy of which is written atomically (temp
file, fsync, rename) into *every* log dir::

    {"version": 1, "epoch": 12,
     "topics": {"orders": {"topic_id": "<Kafka base64 id>", "partitions": 3,
                           "configs": {"retention.ms": "3600000"}},
                "payments": {"topic_id": "<Kafka base64 id>", "partitions": 8,
                             "configs": {}, "replicas": [2, 5]}},
     "deleted_topic_ids": ["<Kafka base64 id>", ...]}

``epoch`` grows with every write; at startup the copy with the highest epoch wins, so losing a
log dir, or a crash between the copies, loses nothing. ``configs`` holds the topic-level
overrides only (the broker defaults stay in server.properties). ``replicas`` (cluster mode
only) lists the partitions with a replica on this broker; without it, the broker hosts every
partition. ``deleted_topic_ids`` are tombstones: a partition dir still carrying such an id (a
crash in the middle of a delete) is removed at startup. Each partition dir also has Kafka's
``partition.metadata`` with the topic id, so a partition dir not in the registry (a Kafka log
dir, or a registry lost) is adopted: its topic is registered with its own id and no overrides.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierlog.errors import ConfigError, InvalidTopic, KafkaStorageError
from tierlog.log import log_file_utils as lfu
from tierlog.log.log_config import LogConfig
from tierlog.log.partition_metadata_file import kafka_str_to_uuid, uuid_to_kafka_str
from tierlog.log.topic_names import validate_topic_name

__all__ = ["TOPIC_REGISTRY_FILENAME", "NewTopic", "TopicInfo", "TopicRegistry"]

log = logging.getLogger(__name__)

TOPIC_REGISTRY_FILENAME = "__tierlog_topics.json"


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create (:meth:`~tierlog.log.log_manager.LogManager.create_topics`)."""

    name: str
    num_partitions: int
    configs: Mapping[str, str]
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the registry knows it. Immutable."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    config: LogConfig
    #: The partitions with a replica on this broker; None: all of them (a single node).
    replicas: frozenset[int] | None = None

    def hosts(self, partition: int) -> bool:
        return 0 <= partition < self.num_partitions and (
            self.replicas is None or partition in self.replicas
        )

    @property
    def overrides(self) -> dict[str, str]:
        """The topic-level config overrides, as strings."""
        return self.config.to_props(overrides_only=True)


class TopicRegistry:
    """The registry in memory and its copies on disk. See the module docstring for the file.

    Not thread-safe: the :class:`~tierlog.log.log_manager.LogManager` that owns it changes it
    under its lock. :attr:`topics` is copy-on-write (replaced, never mutated), so readers need
    no lock.
    """

    def __init__(
        self,
        log_dirs: Sequence[Path],
        default_config: LogConfig,
        *,
        offline_dirs: Set[Path],
        storage_error: Callable[[OSError, Path, str], KafkaStorageError],
    ) -> None:
        """
        Args:
            log_dirs: the log dirs, each with a copy of the registry.
            default_config: the broker-level topic defaults the overrides apply to.
            offline_dirs: the log dirs not to write to (the LogManager's set, live).
            storage_error: wraps, and reports, an I/O error on a path (the LogManager's
                ``_storage_error``: it marks the log dir offline).
        """
        self._log_dirs = list(log_dirs)
        self._default_config = default_config
        self._offline_dirs = offline_dirs
        self._storage_error = storage_error
        self._topics: dict[str, TopicInfo] = {}
        self._deleted_ids: frozenset[uuid.UUID] = frozenset()
        self._epoch = 0
        self._dirty = False  # the registry on disk lags the one in memory
        self._lines: dict[str, tuple[TopicInfo, str]] = {}  # see _encode

    @property
    def topics(self) -> dict[str, TopicInfo]:
        """The live registry, by topic name. Do not mutate: it is replaced on every change."""
        return self._topics

    @property
    def deleted_ids(self) -> frozenset[uuid.UUID]:
        """The tombstones: ids of deleted topics whose partition dirs may remain."""
        return self._deleted_ids

    @property
    def dirty(self) -> bool:
        """The registry on disk lags the one in memory (see :meth:`persist_if_dirty`)."""
        return self._dirty

    def paths(self) -> list[Path]:
        """The registry's copy in each log dir."""
        return [d / TOPIC_REGISTRY_FILENAME for d in self._log_dirs]

    def load(self) -> None:
        """Read the copy with the highest epoch; unreadable copies and malformed entries are
        logged and skipped (a skipped topic's partition dirs are adopted by the LogManager).
        A log dir without that copy makes the registry :attr:`dirty`."""
        best: dict[str, Any] | None = None
        epochs: list[int] = []
        for path in self.paths():
            try:
                data = json.loads(path.read_bytes())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as e:
                log.error("ignoring unreadable topic registry %s: %s", path, e)
                continue
            if not isinstance(data, dict) or data.get("version") != 1:
                log.error("ignoring topic registry %s of unknown format", path)
                continue
            epochs.append(int(data.get("epoch", 0)))
            if best is None or epochs[-1] > int(best.get("epoch", 0)):
                best = data
        topics: dict[str, TopicInfo] = {}
        deleted: set[uuid.UUID] = set()
        if best is not None:
            self._epoch = int(best.get("epoch", 0))
            # A dir without the newest copy (added to log.dirs, or a crash between copies).
            self._dirty = epochs.count(self._epoch) != len(self._log_dirs)
            for name, t in best.get("topics", {}).items():
                if not isinstance(t, dict):
                    log.error("malformed registry entry for topic %s", name)
                    continue
                try:
                    validate_topic_name(name)
                    config = self._default_config.with_overrides(t.get("configs", {}))
                except (InvalidTopic, ConfigError) as e:
                    # A broker default or a config rule changed since it was written: keep the
                    # topic with its valid overrides only, and say so.
                    log.error("topic %s in the registry: %s", name, e)
                    if isinstance(e, InvalidTopic):
                        continue
                    config = self._lenient_config(t.get("configs", {}))
                try:
                    topic_id, partitions = kafka_str_to_uuid(t["topic_id"]), int(t["partitions"])
                    hosted = t.get("replicas")
                    replicas = None if hosted is None else frozenset(int(x) for x in hosted)
                except (KeyError, TypeError, ValueError) as e:
                    # Its partition dirs are adopted, with their partition.metadata ids.
                    log.error("malformed registry entry for topic %s: %r", name, e)
                    continue
                topics[name] = TopicInfo(name, topic_id, partitions, config, replicas)
            for s in best.get("deleted_topic_ids", []):
                try:
                    deleted.add(kafka_str_to_uuid(s))
                except ValueError as e:
                    log.error("malformed deleted topic id in the registry: %s", e)
        self._topics = topics
        self._deleted_ids = frozenset(deleted)

    def reconfigure(self, default_config: LogConfig, topics: Mapping[str, TopicInfo]) -> None:
        """New broker-level defaults and the topics' configs derived from them (in memory:
        the file keeps only each topic's overrides, which did not change)."""
        self._default_config = default_config
        self._topics = dict(topics)

    def _lenient_config(self, configs: Mapping[str, str]) -> LogConfig:
        config = self._default_config
        for k, v in configs.items():
            try:
                config = config.with_overrides({k: v})
            except ConfigError as e:
                log.error("dropping topic config override %s=%s: %s", k, v, e)
        return config

    def save(
        self, topics: dict[str, TopicInfo], deleted: frozenset[uuid.UUID] | None = None
    ) -> None:
        """Persist ``topics`` and the tombstones ``deleted`` (None: the current ones) in every
        online log dir, then make them the live registry.

        Raises:
            KafkaStorageError: no log dir could be written (the live registry is unchanged).
        """
        deleted = self._deleted_ids if deleted is None else deleted
        epoch = self._epoch + 1
        data = self._encode(epoch, topics, deleted)
        written = 0
        error: OSError | None = None
        for d, path in zip(self._log_dirs, self.paths(), strict=True):
            if d in self._offline_dirs:
                continue
            try:
                lfu.write_atomically(path, data)
                written += 1
            except OSError as e:
                error = e
                self._storage_error(e, path, "write")
        if written == 0:
            why = error if error is not None else "every log dir is offline"
            raise KafkaStorageError(f"cannot write the topic registry in any log dir: {why}")
        self._epoch = epoch
        self._topics = dict(topics)
        self._deleted_ids = frozenset(deleted)
        self._dirty = False

    def set_unsaved(self, topics: dict[str, TopicInfo]) -> None:
        """Make ``topics`` (handed over, not copied) the live registry without writing it: it
        is :attr:`dirty` until the next :meth:`save` or :meth:`persist_if_dirty`."""
        self._topics = topics
        self._dirty = True

    def persist_if_dirty(self) -> None:
        """Write the registry when the copy on disk lags the one in memory (a write that
        failed, e.g. on EMFILE during a rollback).

        Raises:
            KafkaStorageError: as :meth:`save`.
        """
        if self._dirty:
            self.save(self._topics)

    def _encode(
        self, epoch: int, topics: dict[str, TopicInfo], deleted: frozenset[uuid.UUID]
    ) -> bytes:
        """The registry file: one line per topic, each line encoded once per TopicInfo (a
        create rewrites the file, so encoding every topic each time is quadratic)."""
        cache: dict[str, tuple[TopicInfo, str]] = {}
        lines = []
        for name, info in sorted(topics.items()):
            cached = self._lines.get(name)
            if cached is None or cached[0] is not info:
                entry: dict[str, Any] = {
                    "topic_id": uuid_to_kafka_str(info.topic_id),
                    "partitions": info.num_partitions,
                    "configs": info.overrides,
                }
                if info.replicas is not None:
                    entry["replicas"] = sorted(info.replicas)
                cached = (info, f"  {json.dumps(name)}: {json.dumps(entry)}")
            cache[name] = cached
            lines.append(cached[1])
        self._lines = cache
        tombstones = json.dumps(sorted(uuid_to_kafka_str(u) for u in deleted))
        topics_json = "{\n" + ",\n".join(lines) + "\n }" if lines else "{}"
        return (
            f'{{\n "version": 1,\n "epoch": {epoch},\n "topics": {topics_json},\n'
            f' "deleted_topic_ids": {tombstones}\n}}\n'
        ).encode()
