"""The startup load of the LogManager's log dirs (Kafka's ``LogManager.loadLogs``).

Per log dir: the clean shutdown marker (``.kafka_cleanshutdown``) and the two offset
checkpoints (:mod:`~tierlog.log.log_checkpoints`) are read, and every partition dir is listed.
After a clean shutdown the marker vouches for the dir: its partitions stay unopened, to open
on first use with their checkpointed offsets. Otherwise each partition is opened (recovered)
now, on a pool of ``num.recovery.threads.per.data.dir`` threads per log dir. Along the way:
``-delete`` dirs (interrupted deletes) are queued for removal, a dir of a tombstoned topic id
is renamed for deletion, a dir missing from the topic registry is adopted, a registered
partition without a dir (a crash after the registry write) is created, and the future
replicas of log dir moves (:mod:`~tierlog.log.future_logs`) are loaded. The marker is
removed at the end: it is only for the load that just finished.

Friend of :class:`~tierlog.log.log_manager.LogManager` (its lock and maps): one job, kept out
of that module's size. Called with the LogManager's lock held.
"""

from __future__ import annotations

import logging
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.errors import CorruptCheckpointError, InvalidTopic
from tierlog.log import log_file_utils as lfu
from tierlog.log.future_logs import scan_future_dirs
from tierlog.log.log import Log
from tierlog.log.log_checkpoints import NEW_LOG, read_checkpoint
from tierlog.log.partition_metadata_file import (
    PartitionMetadataFile,
    random_kafka_uuid,
    uuid_to_kafka_str,
)
from tierlog.log.topic_admin import next_log_dir, partition_counts
from tierlog.log.topic_names import validate_topic_name
from tierlog.log.topic_registry import TopicInfo

if TYPE_CHECKING:
    from tierlog.log.log_manager import LogManager

__all__ = ["load_logs"]

log = logging.getLogger(__name__)


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


def load_logs(lm: LogManager) -> None:
    """Find every partition dir of every log dir; open (recover, in parallel) those of
    a log dir without a clean shutdown marker, leave the others to their first use."""
    jobs: list[tuple[Path, tuple[str, int], uuid.UUID | None, bool, int, int | None]] = []
    try:
        futures = scan_future_dirs(lm._log_dirs)
    except OSError as e:
        raise lm._storage_error(e, lm._log_dirs[0], "load future replicas in") from e
    for d in lm._log_dirs:
        clean = (d / lfu.CLEAN_SHUTDOWN_FILENAME).exists()
        recovery = read_checkpoint(d / lfu.RECOVERY_POINT_CHECKPOINT_FILENAME)
        starts = read_checkpoint(d / lfu.LOG_START_OFFSET_CHECKPOINT_FILENAME)
        try:
            with os.scandir(d) as it:
                names = sorted(e.name for e in it if e.is_dir())
        except OSError as e:
            raise lm._storage_error(e, d, "list") from e
        for dir_name in names:
            entry = d / dir_name
            if dir_name.endswith(lfu.DELETE_DIR_SUFFIX):
                lm._logs_to_be_deleted.add(entry)  # finish an interrupted delete
                continue
            tp = _parse_partition_dir(dir_name)
            if tp is None:
                continue  # remote-log-index-cache, -future dirs
            if tp in lm._log_dir_of:
                log.error(
                    "partition %s-%d is in two log dirs (%s and %s); using the first",
                    *tp,
                    lm._log_dir_of[tp],
                    d,
                )
                continue
            info = lm._registry.topics.get(tp[0])
            # Vouched for by the marker (the topic id is checked when the log is opened);
            # with tombstones, each dir's id is read to find a delete to finish.
            vouched = clean and not lm._registry.deleted_ids
            if vouched and info is not None and info.hosts(tp[1]):
                tp = (info.name, tp[1])  # one topic name string for its partitions
                lm._log_dir_of[tp] = d
                state = (recovery.get(tp, 0), starts.get(tp))
                lm._unopened[tp] = NEW_LOG if state == NEW_LOG else state
                continue
            try:
                stored_id = PartitionMetadataFile(entry / lfu.PARTITION_METADATA_FILENAME).read()
            except (CorruptCheckpointError, OSError) as e:
                log.warning("%s: %s; using the registry's topic id", entry, e)
                stored_id = None
            if stored_id is not None and stored_id in lm._registry.deleted_ids:
                lm._logs_to_be_deleted.rename_for_delete(entry, *tp)
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
                info = _adopt(lm, tp, stored_id)
            elif not info.hosts(tp[1]):
                log.warning(
                    "%s is not a partition of topic %s in the registry; adopting it",
                    entry,
                    tp[0],
                )
                replicas = None if info.replicas is None else info.replicas | {tp[1]}
                count = max(info.num_partitions, tp[1] + 1)
                info = TopicInfo(info.name, info.topic_id, count, info.config, replicas)
                lm._registry.set_unsaved({**lm._registry.topics, info.name: info})
            lm._log_dir_of[tp] = d
            if clean:
                lm._unopened[tp] = (recovery.get(tp, 0), starts.get(tp))
            else:
                jobs.append((entry, tp, info.topic_id, False, recovery.get(tp, 0), starts.get(tp)))
    # Registered partitions without a dir (a crash after the registry write): create them.
    counts: dict[Path, int] | None = None
    for name, info in lm._registry.topics.items():
        for p in range(info.num_partitions):
            if (name, p) not in lm._log_dir_of and info.hosts(p):
                if counts is None:
                    counts = partition_counts(lm, lm._log_dir_of)
                d = next_log_dir(counts)
                lm._log_dir_of[(name, p)] = d
                jobs.append(
                    (d / lfu.log_dir_name(name, p), (name, p), info.topic_id, True, 0, None)
                )
    if lm._registry.dirty:
        lm._registry.save(lm._registry.topics)

    def open_one(
        job: tuple[Path, tuple[str, int], uuid.UUID | None, bool, int, int | None],
    ) -> tuple[tuple[str, int], Log | OSError]:
        path, tp, topic_id, clean, recovery_point, start = job
        try:
            lg = Log.open(
                path,
                lm._registry.topics[tp[0]].config,
                log_start_offset=start,
                recovery_point=recovery_point,
                topic_id=topic_id,
                had_clean_shutdown=clean,
                time_ms=lm._time_ms,
            )
        except OSError as e:
            return tp, e
        return tp, lg

    logs: dict[tuple[str, int], Log] = {}
    with ThreadPoolExecutor(lm._recovery_threads, thread_name_prefix="log-recovery") as ex:
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
                "cannot load log %s: %s; its requests answer KAFKA_STORAGE_ERROR until it opens",
                path,
                got.strerror or got,
            )
            lm._unopened[tp] = (recovery_point, start)
            if not clean:
                lm._unrecovered.add(tp)
    lm._logs = logs
    lm.future_logs.load(futures)
    for d in lm._log_dirs:
        # The marker is only for the load that just finished (Kafka deletes it here too).
        try:
            (d / lfu.CLEAN_SHUTDOWN_FILENAME).unlink(missing_ok=True)
            lfu.fsync_dir(d)
        except OSError as e:
            raise lm._storage_error(e, d, "remove the clean shutdown marker in") from e
    # Tombstones whose dirs are all gone are no longer needed.
    if lm._registry.deleted_ids:
        lm._registry.save(lm._registry.topics, frozenset())
    log.info(
        "loaded %d logs from %s (%d more to open on first use)",
        len(logs),
        ", ".join(map(str, lm._log_dirs)),
        len(lm._unopened),
    )


def _adopt(lm: LogManager, tp: tuple[str, int], stored_id: uuid.UUID | None) -> TopicInfo:
    """Register a topic found on disk but not in the registry."""
    name, partition = tp
    info = TopicInfo(name, stored_id or random_kafka_uuid(), partition + 1, lm._default_config)
    log.warning(
        "adopting topic %s (id %s) found in a log dir but not in the topic registry",
        name,
        uuid_to_kafka_str(info.topic_id),
    )
    lm._registry.set_unsaved({**lm._registry.topics, name: info})
    return info
