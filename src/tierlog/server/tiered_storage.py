"""The broker's side of tiered storage (KIP-405): builds the plugins and the
:class:`~tierlog.tiered.RemoteLogManager`, follows topic changes, and owes remote deletions.

Built at startup when ``remote.log.storage.system.enable=true``, right after the LogManager
loaded the logs (first log dir = ``log.dirs[0]``)::

    __remote_log_metadata               created when missing (remote_log_metadata_publisher)
    rsm    PyArrowRemoteStorageManager.from_config(rsm.config.*)
           (rsm.config.uri defaults to file://<abs ./data/remote>, beside log.dir's ./data/logs)
    rlmm   TopicBasedRemoteLogMetadataManager over the broker's own metadata topic, file
           caches in <log.dirs[0]>/remote-log-metadata-cache/
    cache  RemoteIndexCache in <log.dirs[0]>/remote-log-index-cache/
    rlm    RemoteLogManager; every partition with remote.storage.enable=true is led here

Topic changes (the admin handlers call these on the event loop; the work runs in order on
one ``tiered-admin`` thread, because loading a partition's metadata and deleting remote
segments block):

* created, partitions added, ``remote.storage.enable`` turned on: the partitions become
  leaders in the remote log manager (copy + expiration tasks).
* deleted, or ``remote.storage.enable`` turned off with ``remote.log.delete.on.disable=true``:
  ``RemoteLogManager.stop_partitions(delete=True)`` (DELETE_PARTITION_MARKED -> STARTED ->
  every segment deleted -> FINISHED); for a disable the log start offset then moves to the
  local log start offset. The deletion is first written to
  ``<log.dirs[0]>/remote-log-pending-deletions.json`` (atomically) and removed from it once
  done, so a crash or a failure (remote store down) never leaks remote data: pending
  deletions are retried with backoff and resumed at startup.

A background task polls the metadata manager (``poll()``: events other brokers published)
every second and writes its file caches every 10 s (only the partitions that changed), and
at shutdown through ``close()``, so a restart loads them and reads only the events after.

Thread-safe where noted; :meth:`TieredStorage.run` runs on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlog.errors import ApiError, KafkaStorageError, RemoteStorageError
from tierlog.log import log_file_utils as lfu
from tierlog.log.partition_metadata_file import kafka_str_to_uuid, uuid_to_kafka_str
from tierlog.server.remote_log_metadata_publisher import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    LogMetadataPublisher,
    ensure_remote_log_metadata_topic,
)
from tierlog.tiered.remote_log_metadata_manager import (
    MetadataPublisher,
    TopicBasedRemoteLogMetadataManager,
)
from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from tierlog.log.log import Log
    from tierlog.log.log_cleaner_manager import LogCleanerManager
    from tierlog.log.log_manager import LogManager
    from tierlog.log.topic_registry import TopicInfo
    from tierlog.server.kafka_config import KafkaConfig
    from tierlog.tiered.remote_log_manager import RemoteLogManager
    from tierlog.tiered.storage.pyarrow_remote_storage_manager import (
        PyArrowRemoteStorageManager,
    )

__all__ = [
    "DEFAULT_REMOTE_DIR",
    "open_remote_storage",
    "METADATA_CACHE_DIR",
    "PENDING_DELETIONS_FILENAME",
    "PendingDeletion",
    "PendingDeletions",
    "TieredStorage",
    "default_rsm_config",
]

log = logging.getLogger(__name__)

METADATA_CACHE_DIR = "remote-log-metadata-cache"
PENDING_DELETIONS_FILENAME = "remote-log-pending-deletions.json"
#: Where ``rsm.config.uri`` points when not set (relative to the working directory, like
#: ``log.dir``'s default ``./data/logs``).
DEFAULT_REMOTE_DIR = Path("data") / "remote"

POLL_INTERVAL_S = 1.0
FLUSH_INTERVAL_S = 10.0
_RETRY_BACKOFF_S = 1.0
_RETRY_BACKOFF_MAX_S = 30.0

REASON_DELETE = "delete"  # the topic was deleted
REASON_DISABLE = "disable"  # remote.storage.enable turned off with delete.on.disable


def default_rsm_config(rsm_config: dict[str, str]) -> dict[str, str]:
    """``rsm.config.*`` with ``uri`` defaulting to ``file://<abs ./data/remote>``."""
    out = dict(rsm_config)
    if "uri" not in out:
        out["uri"] = DEFAULT_REMOTE_DIR.resolve().as_uri()
    return out


def open_remote_storage(config: KafkaConfig) -> PyArrowRemoteStorageManager:
    """The RemoteStorageManager of ``rsm.config.*``, checked: the broker calls this before it
    writes anything to its log dirs, so a bad URI or an unreachable store stops it first.

    ``tierlog.remote.storage.startup.check``: ``fail`` (default) writes, reads back and
    deletes a probe object and refuses to start when that fails; ``warn`` logs the failure
    and starts anyway (copies then fail and are retried, as when the store goes down later);
    ``none`` skips the probe.

    Raises:
        ConfigError: a bad ``rsm.config.*`` (the key named).
        RemoteStorageError: the probe failed under ``fail``.
    """
    from tierlog.tiered.storage.pyarrow_remote_storage_manager import (
        PyArrowRemoteStorageManager,
    )

    rsm_config = default_rsm_config(config.rsm_config)
    uri = rsm_config["uri"]
    try:
        rsm = PyArrowRemoteStorageManager.from_config(rsm_config)
    except OSError as e:  # the local root cannot be created
        raise RemoteStorageError(f"remote storage {uri} cannot be used: {e}") from e
    mode = config.remote_storage_startup_check
    if mode == "none":
        return rsm
    t0 = time.monotonic()
    try:
        rsm.check_writable()
    except RemoteStorageError as e:
        hint = (
            "check rsm.config.uri and rsm.config.s3.* (endpoint, region, credentials), or set "
            "tierlog.remote.storage.startup.check=warn to start anyway"
        )
        if mode == "fail":
            rsm.close()
            raise RemoteStorageError(
                f"remote storage {uri} is not reachable and writable: {e}; {hint}"
            ) from e
        log.warning("remote storage %s is not reachable and writable, starting anyway "
                    "(tierlog.remote.storage.startup.check=warn): %s", uri, e)  # fmt: skip
        return rsm
    log.info("remote storage %s is reachable and writable (checked in %.2fs)",
             uri, time.monotonic() - t0)  # fmt: skip
    return rsm


# ---------------------------------------------------------------------- pending deletions


@dataclass(frozen=True, slots=True)
class PendingDeletion:
    """Remote data of these partitions must be deleted (see the module docstring)."""

    topic: str
    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    reason: str

    def topic_id_partitions(self) -> list[TopicIdPartition]:
        return [TopicIdPartition(self.topic_id, self.topic, p) for p in self.partitions]

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "topic_id": uuid_to_kafka_str(self.topic_id),
            "partitions": list(self.partitions),
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PendingDeletion:
        return cls(
            str(d["topic"]),
            kafka_str_to_uuid(str(d["topic_id"])),
            tuple(int(p) for p in d["partitions"]),
            str(d.get("reason", REASON_DELETE)),
        )

    def __str__(self) -> str:
        return (
            f"{self.topic} ({uuid_to_kafka_str(self.topic_id)}) partitions {list(self.partitions)}"
        )


class PendingDeletions:
    """``remote-log-pending-deletions.json``: ``{"version": 1, "deletions": [...]}``, written
    atomically (temp + fsync + rename) on every change. Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: list[PendingDeletion] = []
        try:
            doc = json.loads(path.read_bytes())
            self._entries = [PendingDeletion.from_json(d) for d in doc.get("deletions", [])]
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as e:
            # Losing it would leak remote data; refusing to start would be worse. Say so.
            log.error("ignoring unreadable %s (remote data may be left behind): %s", path, e)

    def entries(self) -> list[PendingDeletion]:
        with self._lock:
            return list(self._entries)

    def _write(self) -> None:
        doc = {"version": 1, "deletions": [d.to_json() for d in self._entries]}
        lfu.write_atomically(self.path, (json.dumps(doc, indent=1) + "\n").encode())

    def add(self, deletion: PendingDeletion) -> None:
        """Raises: OSError: the file could not be written."""
        with self._lock:
            if deletion not in self._entries:
                self._entries.append(deletion)
                self._write()

    def remove(self, deletion: PendingDeletion) -> None:
        with self._lock:
            if deletion in self._entries:
                self._entries.remove(deletion)
                try:
                    self._write()
                except OSError as e:  # done anyway: redoing it at startup is harmless
                    log.error("cannot update %s: %s", self.path, e)


# ---------------------------------------------------------------------- the service


class TieredStorage:
    """Tiered storage on this broker (see the module docstring).

    Args:
        config: the broker config.
        log_manager: the started LogManager.
        loop: the broker's event loop (metadata appends wake parked fetches through it).
    """

    def __init__(
        self,
        config: KafkaConfig,
        log_manager: LogManager,
        loop: asyncio.AbstractEventLoop | None = None,
        metrics_registry: CollectorRegistry | None = None,
        rsm: PyArrowRemoteStorageManager | None = None,
    ) -> None:
        self.config = config
        #: The store opened (and checked) by :func:`open_remote_storage`; None: built by start.
        self._opened_rsm = rsm
        #: Where the tiered metrics are registered (the broker's ``/metrics`` registry;
        #: None: a registry of their own, not served).
        self.metrics_registry = metrics_registry
        self.log_manager = log_manager
        self.loop = loop
        self.log_dir = Path(config.log_dirs[0])
        self.pending = PendingDeletions(self.log_dir / PENDING_DELETIONS_FILENAME)
        self._admin = ThreadPoolExecutor(1, thread_name_prefix="tiered-admin")
        self._retry_lock = threading.Lock()
        self._retry_at: dict[PendingDeletion, tuple[float, int]] = {}
        self._in_flight: set[PendingDeletion] = set()
        self._closed = False
        #: Called with a metadata partition after an event was appended to it (the broker
        #: wakes fetches parked on it); may be set after :meth:`start`.
        self.on_metadata_append: Any = None
        #: A cluster member: the metadata topic is replicated, leadership comes from the
        #: controller (set by :meth:`start`).
        self.in_cluster = False
        #: Partition roles waiting to be applied on the admin thread (cluster), latest wins:
        #: True leader, False follower, None stopped.
        self._roles: dict[TopicIdPartition, bool | None] = {}
        self._roles_lock = threading.Lock()
        self._roles_scheduled = False
        # Built by start():
        self.publisher: MetadataPublisher
        self.rsm: PyArrowRemoteStorageManager
        self.rlmm: TopicBasedRemoteLogMetadataManager
        self.rlm: RemoteLogManager

    # ------------------------------------------------------------------ startup

    def start(
        self,
        publisher: MetadataPublisher | None = None,
        num_metadata_partitions: int | None = None,
    ) -> None:
        """Build everything (blocking: loads metadata).

        On a single node (no ``publisher``) ``__remote_log_metadata`` is a topic of this
        broker's own logs, created here when missing, and every tiered partition is led here
        at once. In a cluster ``publisher`` reaches the replicated topic through its leaders
        (:mod:`~tierlog.server.cluster_metadata_publisher`), and partitions are taken as the
        controller makes this broker their leader or follower (:meth:`partition_changed`).

        Raises:
            ConfigError: a bad ``rsm.config.*``.
            RemoteStorageError: the metadata manager could not load a partition.
            OSError: a cache directory cannot be used.
        """
        from tierlog.tiered.metrics import RemoteStorageMetrics
        from tierlog.tiered.remote_index_cache import DIR_NAME, RemoteIndexCache
        from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig
        from tierlog.tiered.storage.pyarrow_remote_storage_manager import (
            PyArrowRemoteStorageManager,
        )

        c = self.config
        t0 = time.monotonic()
        if publisher is None:
            num_metadata = ensure_remote_log_metadata_topic(
                self.log_manager, c.remote_log_metadata_topic_num_partitions
            )
            local = LogMetadataPublisher(self.log_manager, on_append=self._metadata_appended)
            publisher = local
        else:
            local = None
            num_metadata = num_metadata_partitions or c.remote_log_metadata_topic_num_partitions
            self.in_cluster = True
        if self._opened_rsm is not None:
            self.rsm = self._opened_rsm
        else:
            self.rsm = PyArrowRemoteStorageManager.from_config(default_rsm_config(c.rsm_config))
        if self.rsm.credentials_source is not None:
            log.info("remote storage S3 credentials from %s", self.rsm.credentials_source)
        self.publisher = publisher
        self.rlmm = TopicBasedRemoteLogMetadataManager(
            self.publisher,
            num_metadata_partitions=num_metadata,
            cache_dir=self.log_dir / METADATA_CACHE_DIR,
        )
        index_cache = RemoteIndexCache(
            self.rsm, self.log_dir / DIR_NAME, c.remote_log_index_file_cache_total_size_bytes
        )
        self.rlm = RemoteLogManager(
            RemoteLogManagerConfig.from_broker_config(c),
            self.rsm,
            self.rlmm,
            index_cache,
            self.log_lookup,
            c.node_id,
            cleaner_coordination=self._cleaner_manager,
            metrics=RemoteStorageMetrics(self.metrics_registry),
            metadata_never_waits_on_loop=not self.in_cluster,
        )
        if local is None:
            log.info(
                "tiered storage started in %.3fs: remote storage %s; partitions are taken as "
                "this broker leads or follows them",
                time.monotonic() - t0,
                self.rsm.uri,
            )
        else:
            tps = self.tiered_partitions()
            t1 = time.monotonic()
            self.rlm.on_leadership_change(set(tps), set())
            self._reconcile_log_start_offsets(tps)
            log.info(
                "tiered storage started in %.3fs: remote storage %s, %d tiered partitions ready "
                "in %.3fs after reading %d records of %s",
                time.monotonic() - t0,
                self.rsm.uri,
                len(tps),
                time.monotonic() - t1,
                local.records_read,
                REMOTE_LOG_METADATA_TOPIC_NAME,
            )
        for deletion in self.pending.entries():
            log.info("resuming the remote deletion of %s (%s)", deletion, deletion.reason)
            self._submit_deletion(deletion)

    def _reconcile_log_start_offsets(self, tps: list[TopicIdPartition]) -> None:
        """After a crash the log start offset (checkpointed every
        ``log.flush.start.offset.checkpoint.interval.ms``) may lag remote deletions that
        happened before it: offsets below the local log start must then start at the
        earliest finished remote segment (or at the local log start when none is left), or
        consumers would be sent to data that is gone."""
        for tp in tps:
            lg = self.log_lookup(tp)
            if lg is None or lg.log_start_offset >= lg.local_log_start_offset:
                continue
            try:
                earliest = self.rlm.earliest_offset(tp)
            except RemoteStorageError as e:
                log.warning("%s: earliest remote offset unknown: %s", tp, e)
                continue
            target = lg.local_log_start_offset if earliest is None else earliest
            target = min(target, lg.local_log_start_offset)
            if target > lg.log_start_offset:
                log.warning(
                    "%s: log start offset %d is below the earliest remote data; moving it to %d",
                    tp,
                    lg.log_start_offset,
                    target,
                )
                lg.maybe_increment_log_start_offset(target)

    # ------------------------------------------------------------------ partitions

    def _cleaner_manager(self) -> LogCleanerManager | None:
        """The log cleaner's manager (compacted topics tier only once cleaned), if it runs."""
        cleaner = self.log_manager.cleaner
        return None if cleaner is None else cleaner.cleaner_manager

    def log_lookup(self, tp: TopicIdPartition) -> Log | None:
        """The partition's Log on this broker, if its topic id matches (thread-safe)."""
        try:
            # current_log: a remote read racing a log dir move gets the moved log.
            lg = self.log_manager.current_log(tp.topic, tp.partition)
        except KafkaStorageError as e:
            log.warning("%s: %s", tp, e)  # retried by the next copy or expiration run
            return None
        if lg is None or lg.closed or lg.topic_id != tp.topic_id:
            return None
        return lg

    def topic_id_partitions(self, info: TopicInfo) -> list[TopicIdPartition]:
        return [TopicIdPartition(info.topic_id, info.name, p) for p in range(info.num_partitions)]

    def tiered_partitions(self, topic: str | None = None) -> list[TopicIdPartition]:
        """Every partition (of ``topic``) with ``remote.storage.enable=true``."""
        out: list[TopicIdPartition] = []
        for name, info in self.log_manager.topics().items():
            if (topic is None or name == topic) and info.config.remote_storage_enable:
                out += self.topic_id_partitions(info)
        return out

    def _metadata_appended(self, metadata_partition: int) -> None:
        callback, loop = self.on_metadata_append, self.loop
        if callback is None or loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(callback, metadata_partition)
        except RuntimeError:  # the loop closed meanwhile
            pass

    # ------------------------------------------------------------------ topic changes

    def _submit(self, fn: Any, *args: Any) -> Future[Any] | None:
        if self._closed:
            return None
        try:
            return self._admin.submit(fn, *args)
        except RuntimeError:  # shut down concurrently
            return None

    def topic_changed(self, name: str) -> Future[Any] | None:
        """A topic was created, grew partitions or turned remote storage on: lead its tiered
        partitions (idempotent; a no-op for topics without remote storage). In a cluster the
        roles come from the controller instead (:meth:`partition_changed`)."""
        if self.in_cluster:
            return None
        return self._submit(self._lead, name)

    # ------------------------------------------------------------------ cluster roles

    def partition_changed(self, tp: TopicIdPartition, leader: bool | None) -> None:
        """(Cluster) this broker now leads (True) or follows (False) ``tp``, or no longer
        hosts it (None). Applied on the admin thread, in order, coalesced (the latest role of
        each partition wins); a failure (the metadata topic's leader unreachable) is retried
        by :meth:`run` every second. Partitions without remote storage are ignored there."""
        with self._roles_lock:
            self._roles[tp] = leader
        self._schedule_roles()

    def _schedule_roles(self) -> None:
        with self._roles_lock:
            if self._roles_scheduled or not self._roles:
                return
            self._roles_scheduled = True
        if self._submit(self._apply_roles) is None:
            with self._roles_lock:
                self._roles_scheduled = False

    def _apply_roles(self) -> None:
        with self._roles_lock:
            roles, self._roles = self._roles, {}
            self._roles_scheduled = False
        leaders = {tp for tp, r in roles.items() if r is True}
        followers = {tp for tp, r in roles.items() if r is False}
        stopped = [tp for tp, r in roles.items() if r is None]
        try:
            if stopped:
                self.rlm.stop_partitions(stopped, delete=False)
            if leaders or followers:
                self.rlm.on_leadership_change(leaders, followers)
                self._reconcile_log_start_offsets(sorted(leaders | followers, key=str))
        except Exception as e:
            log.warning(
                "tiered storage could not take %d partitions yet (retrying): %s", len(roles), e
            )
            with self._roles_lock:
                for tp, r in roles.items():
                    self._roles.setdefault(tp, r)

    def topic_deleted_in_cluster(
        self, name: str, topic_id: uuid.UUID, num_partitions: int, *, controller: bool
    ) -> None:
        """(Cluster) a topic was deleted. The active controller's broker deletes its remote
        data (DELETE_PARTITION_MARKED -> STARTED -> every segment -> FINISHED, resumed after a
        restart from the pending deletions file, as on one node); every other broker stops
        the partitions and drops their metadata caches and cache files."""
        tps = [TopicIdPartition(topic_id, name, p) for p in range(num_partitions)]
        with self._roles_lock:
            for tp in tps:
                self._roles.pop(tp, None)
        if controller:
            deletion = PendingDeletion(name, topic_id, tuple(range(num_partitions)), REASON_DELETE)
            try:
                self.pending.add(deletion)
            except OSError as e:
                log.error("cannot record the remote deletion of %s: %s", deletion, e)
            self._submit_deletion(deletion)
        else:
            self._submit(self._forget, tps)

    def remote_storage_disabled_in_cluster(
        self, name: str, topic_id: uuid.UUID, num_partitions: int, *, controller: bool
    ) -> None:
        """(Cluster) ``remote.storage.enable`` was turned off with
        ``remote.log.delete.on.disable=true`` (KIP-950). The active controller's broker
        deletes the topic's remote data (recorded first, resumed after a restart, as a
        deleted topic's); every broker stops tiering its partitions and moves each hosted
        log's start offset up to its local log start offset (the remote part is no longer
        the partition's)."""
        tps = [TopicIdPartition(topic_id, name, p) for p in range(num_partitions)]
        with self._roles_lock:
            for tp in tps:
                self._roles.pop(tp, None)
        if controller:
            deletion = PendingDeletion(name, topic_id, tuple(range(num_partitions)), REASON_DISABLE)
            try:
                self.pending.add(deletion)
            except OSError as e:
                log.error("cannot record the remote deletion of %s: %s", deletion, e)
            self._submit_deletion(deletion)
        else:
            self._submit(self._forget_tiered_part, tps)

    def _forget_tiered_part(self, tps: list[TopicIdPartition]) -> None:
        self._forget(tps)
        self._start_at_local_log_start(tps)

    def _start_at_local_log_start(self, tps: list[TopicIdPartition]) -> None:
        """Remote storage turned off: each hosted log starts where its local part does."""
        for tp in tps:
            lg = self.log_lookup(tp)
            if lg is None or lg.remote_log_enabled:
                continue
            try:
                lg.maybe_increment_log_start_offset(lg.local_log_start_offset)
            except ApiError as e:  # above the high watermark (a follower behind): later
                log.warning("%s: log start offset not moved to %d: %s",
                            tp, lg.local_log_start_offset, e)  # fmt: skip

    def _forget(self, tps: list[TopicIdPartition]) -> None:
        try:
            self.rlm.stop_partitions(tps, delete=False)
            self.rlmm.forget_partitions(tps)
        except Exception:
            log.exception("dropping the tiered state of %s failed", tps[0].topic if tps else "")

    def _lead(self, name: str) -> None:
        tps = self.tiered_partitions(name)
        if not tps:
            return
        try:
            self.rlm.on_leadership_change(set(tps), set())
        except RemoteStorageError as e:
            log.error("tiered storage could not take the partitions of %s: %s", name, e)
        except Exception:
            log.exception("tiered storage could not take the partitions of %s", name)

    def before_topic_deleted(self, info: TopicInfo) -> PendingDeletion | None:
        """Record that the topic's remote data must go (call BEFORE deleting the topic).

        Raises:
            OSError: the pending deletions file could not be written (do not delete then).
        """
        if not info.config.remote_storage_enable:
            return None
        deletion = PendingDeletion(
            info.name, info.topic_id, tuple(range(info.num_partitions)), REASON_DELETE
        )
        self.pending.add(deletion)
        return deletion

    def after_topic_deleted(self, deletion: PendingDeletion | None) -> None:
        """The topic is deleted: delete its remote data (in the background)."""
        if deletion is not None:
            self._submit_deletion(deletion)

    def before_remote_storage_disabled(self, info: TopicInfo) -> PendingDeletion:
        """``remote.storage.enable`` is about to turn off with
        ``remote.log.delete.on.disable=true``: record that the topic's remote data must go
        (call BEFORE changing the config; then :meth:`after_remote_storage_disabled`).

        Raises:
            OSError: the pending deletions file could not be written (do not change it then).
        """
        deletion = PendingDeletion(
            info.name, info.topic_id, tuple(range(info.num_partitions)), REASON_DISABLE
        )
        self.pending.add(deletion)
        return deletion

    def after_remote_storage_disabled(self, deletion: PendingDeletion) -> None:
        """Delete the remote data, then move each log start offset to the local log start
        offset (in the background)."""
        self._submit_deletion(deletion)

    def _still_owed(self, deletion: PendingDeletion) -> bool:
        """False when the change that asked for the deletion never happened (a crash between
        recording it and making it, or a failed config change): the data must stay."""
        if self.in_cluster and deletion.reason == REASON_DELETE:
            return True  # recorded once the controller deleted the topic: it is gone
        info = self.log_manager.topic(deletion.topic)
        if info is None or info.topic_id != deletion.topic_id:
            return True  # the topic is gone: its remote data must go whatever the reason
        return deletion.reason == REASON_DISABLE and not info.config.remote_storage_enable

    def _submit_deletion(self, deletion: PendingDeletion) -> None:
        with self._retry_lock:
            if deletion in self._in_flight:
                return
            self._in_flight.add(deletion)
        if self._submit(self._delete, deletion) is None:
            with self._retry_lock:
                self._in_flight.discard(deletion)

    def _delete(self, deletion: PendingDeletion) -> None:
        try:
            if not self._still_owed(deletion):
                log.warning("not deleting the remote data of %s: the topic still uses it", deletion)
                with self._retry_lock:
                    self._retry_at.pop(deletion, None)
                self.pending.remove(deletion)
                return
            tps = deletion.topic_id_partitions()
            try:
                self.rlm.stop_partitions(tps, delete=True)
            except RemoteStorageError as e:
                with self._retry_lock:
                    _, failures = self._retry_at.get(deletion, (0.0, 0))
                    failures += 1
                    backoff = min(_RETRY_BACKOFF_S * 2 ** (failures - 1), _RETRY_BACKOFF_MAX_S)
                    backoff *= random.uniform(0.8, 1.2)
                    self._retry_at[deletion] = (time.monotonic() + backoff, failures)
                log.warning(
                    "deleting the remote data of %s failed (attempt %d, retrying in %.1fs): %s",
                    deletion,
                    failures,
                    backoff,
                    e,
                )
                return
            if deletion.reason == REASON_DISABLE:
                self._start_at_local_log_start(tps)
            with self._retry_lock:
                self._retry_at.pop(deletion, None)
            self.pending.remove(deletion)
            log.info("deleted the remote data of %s (%s)", deletion, deletion.reason)
        except Exception:
            log.exception("remote deletion of %s failed", deletion)
        finally:
            with self._retry_lock:
                self._in_flight.discard(deletion)

    def _retry_due_deletions(self) -> None:
        now = time.monotonic()
        with self._retry_lock:
            due = [d for d, (at, _) in self._retry_at.items() if at <= now]
        for d in due:
            if d in self.pending.entries():
                self._submit_deletion(d)
            else:
                with self._retry_lock:
                    self._retry_at.pop(d, None)

    # ------------------------------------------------------------------ background

    async def run(self) -> None:
        """Poll the metadata manager, write its file caches, retry failed deletions; until
        cancelled."""
        next_flush = time.monotonic() + FLUSH_INTERVAL_S
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            try:
                await asyncio.to_thread(self.rlmm.poll)
                if time.monotonic() >= next_flush:
                    await asyncio.to_thread(self.rlmm.flush)
                    next_flush = time.monotonic() + FLUSH_INTERVAL_S
                self._retry_due_deletions()
                self._schedule_roles()  # roles that failed to apply
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("tiered storage background task failed")

    def close(self) -> None:
        """Stop the admin thread, the remote log manager (which closes the plugins and writes
        the metadata file caches). Blocking; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._admin.shutdown(wait=True, cancel_futures=True)
        rlm = getattr(self, "rlm", None)
        if rlm is not None:
            rlm.close()
