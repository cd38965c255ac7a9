"""Moves partitions between the log dirs of this broker (Kafka's ``ReplicaAlterLogDirsManager``
and ``ReplicaAlterLogDirsThread``): AlterReplicaLogDirs (API 34) starts a move, one asyncio
task per moving partition fills its future replica and swaps it in.

A move (see :mod:`tierlog.log.future_logs` for the files and the crash safety):

1. the future replica is created in the target dir, started where the current replica's local
   log starts (the tiered part stays in remote storage: nothing of it is copied; the remote
   log metadata cache is the broker's, keyed by topic id and partition, and does not move);
   log cleaning of the partition is paused (Kafka's ``abortAndPauseCleaning``);
2. in a worker thread, batches are read from the current replica and appended to the future
   one, offsets, epochs and producer state kept (a follower's append), up to
   ``CHUNK_BYTES`` a round (``replica.alter.log.dirs.io.max.bytes.per.second`` limits the
   rate), while the current replica keeps serving produce and fetch; a
   current replica truncated meanwhile (a follower) truncates the future one by the leader
   epochs, and one whose local start passed the copy restarts it;
3. when a round copied less than a chunk, the task takes the partition's append lock on the
   event loop (threaded appends queue on it, the loop's own appends and the follower fetcher
   run on the loop), copies the rest, swaps the logs and points the Partition at the new log:
   readers and appends see either the old log or the new one, never a mix, and the offsets
   do not change. The pause lasts for the copy of less than a chunk plus two renames.

Thread model: everything here runs on the event loop except the copy rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from tierlog.cluster.replica_fetcher import whole_batches
from tierlog.errors import (
    ApiError,
    KafkaStorageError,
    NotLeaderOrFollower,
    OffsetOutOfRange,
    ReplicaNotAvailable,
    UnknownTopicOrPartition,
)
from tierlog.log.future_logs import start_future

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.server.replica_manager import ReplicaManager

__all__ = ["ReplicaAlterLogDirsManager", "copy_step"]

log = logging.getLogger(__name__)

#: Bytes a copy round reads from the current replica (Kafka's replica.fetch.max.bytes).
CHUNK_BYTES = 1024 * 1024
#: Wait before retrying a round that failed, or for a partition not hosted yet (a cluster
#: broker restarted in the middle of a move hosts it once the controller says so).
RETRY_BACKOFF_S = 0.5


def copy_step(current: Log, future: Log, max_bytes: int = CHUNK_BYTES) -> int:
    """One round of a move: append the current replica's next batches to the future one;
    the bytes copied (0: caught up). Blocking.

    Raises:
        OSError, ApiError: a read or an append failed (the move retries the round).
    """
    leo = current.log_end_offset
    end = future.log_end_offset
    epoch = future.leader_epoch_cache.latest_epoch
    if epoch is not None and end > future.local_log_start_offset:
        # The current replica may have been truncated (a follower diverged from its leader):
        # the future keeps only what the current still has, as ReplicaAlterLogDirsThread
        # truncates by the leader epochs of the current replica.
        epoch_end = current.leader_epoch_cache.end_offset_for(epoch, leo)[1]
        if epoch_end < end:
            if epoch_end < future.local_log_start_offset:
                start_future(current, future)
            else:
                future.truncate_to(max(epoch_end, 0))
            end = future.log_end_offset
    if end > leo:
        future.truncate_to(leo)
        end = future.log_end_offset
    if end < current.local_log_start_offset:  # deleted by retention before it was copied
        start_future(current, future)
        end = future.log_end_offset
    try:
        data = current.read(end, max_bytes, min_one_message=True)
    except OffsetOutOfRange:
        start_future(current, future)  # retention raced the check above; next round copies
        return 1
    records = whole_batches(data.records)
    if not records:
        return 0
    future.append(records, assign_offsets=False, origin_client=False)
    return len(records)


def _flush_both(current: Log, future: Log) -> None:
    current.flush()
    future.flush()


class ReplicaAlterLogDirsManager:
    """The moves of one broker (event loop only)."""

    def __init__(
        self, replica_manager: ReplicaManager, *, max_bytes_per_second: int | None = None
    ) -> None:
        """
        Args:
            replica_manager: the broker's; its partitions get the new logs.
            max_bytes_per_second: ``replica.alter.log.dirs.io.max.bytes.per.second`` (None:
                no limit); a round then copies at most a quarter of a second's worth.
        """
        self._rate = max_bytes_per_second
        self._chunk = (
            CHUNK_BYTES
            if max_bytes_per_second is None
            else max(1, min(CHUNK_BYTES, max_bytes_per_second // 4))
        )
        self._rm = replica_manager
        self._lm = replica_manager.log_manager
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._closed = False

    def moving(self) -> set[tuple[str, int]]:
        """Partitions being moved now."""
        return {tp for tp, t in self._tasks.items() if not t.done()}

    async def alter(self, topic: str, partition: int, path: str) -> int:
        """Move one partition to the log dir ``path`` (Kafka's ``alterReplicaLogDirs`` for one
        partition); the error code of the answer. Moving to the dir it is in is a no-op
        (and stops a move to another dir)."""
        fl = self._lm.future_logs
        try:
            target = fl.check_dir(path)
            p = self._rm.get_partition(topic, partition)
            if p is None:
                # Kafka: in the cluster but not here: REPLICA_NOT_AVAILABLE (kept for API 34
                # instead of NOT_LEADER_OR_FOLLOWER), and the dir is remembered for a replica
                # created here later (a reassignment, as kafka-reassign-partitions.sh does
                # with log_dirs); not in the cluster: UNKNOWN_TOPIC_OR_PARTITION.
                if self._rm.not_here_error(topic, partition) == NotLeaderOrFollower.error_code:
                    fl.update_preferred_log_dir(topic, partition, target)
                    raise ReplicaNotAvailable(f"{topic}-{partition} is not hosted here")
                raise UnknownTopicOrPartition(f"{topic}-{partition} does not exist.")
            future = await asyncio.to_thread(fl.get_or_create, topic, partition, target)
        except ApiError as e:
            code = e.error_code
            if code == NotLeaderOrFollower.error_code:
                code = ReplicaNotAvailable.error_code  # Kafka keeps this one for API 34
            return code
        except OSError as e:
            log.error("cannot move %s-%d to %s: %s", topic, partition, path, e)
            return KafkaStorageError.error_code
        if future is None:  # already there: a move elsewhere was dropped
            task = self._tasks.pop((topic, partition), None)
            if task is not None:
                task.cancel()
            return 0
        self._start(topic, partition)
        return 0

    def resume(self) -> None:
        """Start the moves the log manager loaded (cut by a restart)."""
        for (topic, partition), _ in self._lm.future_logs.items():
            self._start(topic, partition)

    async def close(self) -> None:
        """Stop every move (the future replicas stay; a restart resumes them)."""
        self._closed = True
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()

    def _start(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        running = self._tasks.get(tp)
        if self._closed or (running is not None and not running.done()):
            return
        self._tasks[tp] = asyncio.create_task(
            self._move(topic, partition), name=f"alter-log-dir-{topic}-{partition}"
        )

    async def _move(self, topic: str, partition: int) -> None:
        fl = self._lm.future_logs
        while True:
            future = fl.get(topic, partition)
            if future is None:
                return  # dropped (moved back, topic deleted)
            try:
                p = self._rm.get_partition(topic, partition)
            except KafkaStorageError:
                p = None
            if p is None or p.log.closed:
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            current = p.log
            try:
                copied = await asyncio.to_thread(copy_step, current, future, self._chunk)
                if self._rate is not None and copied > 0:
                    await asyncio.sleep(copied / self._rate)  # the io.max.bytes.per.second
                if copied >= self._chunk or fl.get(topic, partition) is not future:
                    continue
                # Caught up but for a chunk: make both durable now, in the thread, so the
                # swap below fsyncs only the last chunk while appends wait.
                await asyncio.to_thread(_flush_both, current, future)
                async with p.append_lock():
                    if p.log is not current or fl.get(topic, partition) is not future:
                        continue
                    # On the loop with appends held: nothing appends meanwhile.
                    while copy_step(current, future, self._chunk) > 0:
                        pass
                    p.log = fl.replace_current_with_future_log(topic, partition)
                p.wake_waiters()
                return
            except (ApiError, OSError) as e:
                log.warning("moving %s-%d: %s; retrying", topic, partition, e)
                await asyncio.sleep(RETRY_BACKOFF_S)
            except Exception:  # a bug must not end the move silently: log it and retry
                log.exception("moving %s-%d failed; retrying", topic, partition)
                await asyncio.sleep(RETRY_BACKOFF_S)
