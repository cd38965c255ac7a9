"""**tierlog** (Kafka cannot do this): compacted topics on the remote tier, and their remote
re-compaction.

Kafka refuses ``remote.storage.enable`` on ``cleanup.policy=compact`` topics. tierlog tiers
them in three parts:

1. **Only clean data is copied** (:mod:`.remote_log_copy_task`): a segment of a compacted
   topic goes to remote storage once the local log cleaner has cleaned it (it ends at or below
   the first dirty offset of ``cleaner-offset-checkpoint``) and its newest record is older
   than the topic's tiering lag (:func:`compacted_copy_lag_ms`). The cleaner is paused for the
   copy (:meth:`~tierlog.log.log_cleaner_manager.LogCleanerManager.try_pause_cleaning`), and
   it never rewrites a segment already copied (:mod:`tierlog.log.cleaner`), so local and
   remote segments keep the same boundaries.
2. **Local tombstones stay**: on a tiered log the local cleaner never drops a tombstone
   (older values of its key may be in remote segments, which it does not touch); the remote
   compactor drops it once every older value is gone.
3. **Remote re-compaction** (:class:`RLMCompactor`, run by the expiration task of the
   partition's leader, at most every ``remote.log.compaction.interval.ms``, when a pass is
   due: the first since the broker started, a kept tombstone's delete horizon passed, or the
   bytes tiered since the last pass exceed ``min.cleanable.dirty.ratio`` of the remote
   bytes -- a pass reads every remote segment, so it waits for as many new bytes)::

       map     newest first: the local data after the last remote segment (up to the last
               stable offset, the cleaner paused meanwhile), then each remote segment,
               newest to oldest, downloaded once: key -> latest offset of all later data;
               a segment's records whose key is mapped later are dead
       groups  consecutive remote segments whose live bytes fit segment.bytes
       pick    a group whose dead share exceeds min.cleanable.dirty.ratio, or that merges
               several segments; and every group with dead records before a group holding a
               tombstone past its delete horizon
       rewrite oldest group first, each into one new segment (the cleaner's clean_into:
               same batches, offsets, producer metadata; tombstones past their horizon
               dropped only when every older group with dead records was rewritten in
               this pass and the map did not overflow)
       swap    new segment COPY_SEGMENT_STARTED -> upload -> COPY_SEGMENT_FINISHED, then each
               old segment DELETE_SEGMENT_STARTED -> delete objects -> DELETE_SEGMENT_FINISHED

   The new segment spans exactly the offsets of the group ([first start, last end], the
   group's last batch kept, emptied if need be), carries the union of their leader-epoch
   starts, the last one's producer snapshot and leader-epoch checkpoint. While both exist,
   the metadata cache resolves the overlap as it does for any overlapping upload: the new
   segment displaces the old one starting at the same offset, later old segments still answer
   for their offsets until they enter DELETE_SEGMENT_STARTED (see
   :mod:`.remote_log_metadata_cache`). Every offset is served by some finished segment at
   every moment; both copies hold the same latest value of every key.

Crash convergence: a new segment left COPY_SEGMENT_STARTED is a dangling copy (the expiration
task deletes it); old segments left COPY_SEGMENT_FINISHED beside a finished new one are
*superseded* (:func:`superseded_segments`: another finished segment of the lineage covers their
offsets and is the one the cache serves at its start) and are deleted at the start of the next
pass; one left DELETE_SEGMENT_STARTED is a dangling delete (deleted again).

Thread-safe: one pass per partition at a time (the expiration task's lock).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tierlog.errors import RemoteStorageError
from tierlog.log import log_file_utils as lfu
from tierlog.log.cleaner import (
    Cleaner,
    CleanerStats,
    SegmentWriter,
    empty_batch_of,
    read_batches,
)
from tierlog.log.file_records import FileRecords
from tierlog.log.log_config import LONG_MAX, LogConfig
from tierlog.log.log_segment import LogSegment
from tierlog.log.offset_map import SkimpyOffsetMap, key_digest
from tierlog.records.record_batch import CONTROL_FLAG_MASK, DELETE_HORIZON_FLAG_MASK
from tierlog.records.record_keys import read_keys
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState
from tierlog.tiered.remote_log_tasks import (
    RemoteLogManagerCore,
    _lineage,
    _PartitionState,
    _Task,
)
from tierlog.tiered.storage.remote_storage_manager import IndexType, LogSegmentData

if TYPE_CHECKING:
    from tierlog.log.log import Log

__all__ = [
    "CleanerCoordination",
    "RLMCompactor",
    "compacted_copy_lag_ms",
    "superseded_segments",
]

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState
_INT32_MAX = 2**31 - 1
_DOWNLOAD_CHUNK = 8 << 20

TopicPartition = tuple[str, int]


class CleanerCoordination(Protocol):
    """What the remote log manager asks of the log cleaner
    (:class:`~tierlog.log.log_cleaner_manager.LogCleanerManager` implements it)."""

    def first_dirty_offset(self, tp: TopicPartition) -> int | None: ...

    def try_pause_cleaning(self, tp: TopicPartition) -> bool: ...

    def resume_cleaning(self, tps: Iterable[TopicPartition]) -> None: ...


def compacted_copy_lag_ms(config: LogConfig) -> int:
    """How old a cleaned segment's newest record must be before it is copied:
    ``remote.log.compaction.lag.ms``; when -1, ``max.compaction.lag.ms`` when set, else 0."""
    lag = int(config.get("remote.log.compaction.lag.ms"))
    if lag >= 0:
        return lag
    max_lag = int(config.get("max.compaction.lag.ms"))
    return max_lag if max_lag < LONG_MAX else 0


def superseded_segments(
    finished: Sequence[RemoteLogSegmentMetadata],
    served_at_start: Callable[[RemoteLogSegmentMetadata], bool],
) -> list[RemoteLogSegmentMetadata]:
    """The finished segments whose offsets another finished segment covers entirely, where
    that other one is the segment the metadata cache serves at its own start
    (``served_at_start``): what a swap interrupted between the new segment's
    COPY_SEGMENT_FINISHED and the old ones' DELETE_SEGMENT_STARTED leaves. All are in the
    partition's leader-epoch lineage, so the covering segment holds the same history."""
    ordered = sorted(finished, key=lambda m: (m.start_offset, -m.end_offset))
    covering = [m for m in ordered if served_at_start(m)]
    out: list[RemoteLogSegmentMetadata] = []
    for m in ordered:
        sid = m.remote_log_segment_id.id
        for c in covering:
            if c.start_offset > m.start_offset:
                break
            if c.remote_log_segment_id.id != sid and c.end_offset >= m.end_offset:
                same = c.start_offset == m.start_offset and c.end_offset == m.end_offset
                if same and served_at_start(m):
                    continue  # same offsets: only the one not served goes
                out.append(m)
                break
    return out


@dataclass(slots=True)
class _Remote:
    """A downloaded remote segment and what the map pass learnt of it."""

    metadata: RemoteLogSegmentMetadata
    records: FileRecords
    dead: int = 0  # records whose key has a later record (or no key)
    expired_tombstones: int = 0  # latest of their key, past their delete horizon
    total: int = 0
    next_horizon: int = -1  # earliest delete horizon not passed yet of a tombstone kept

    @property
    def size(self) -> int:
        return self.metadata.segment_size_in_bytes

    @property
    def live_size(self) -> int:
        if self.total == 0:
            return self.size
        return self.size * (self.total - self.dead - self.expired_tombstones) // self.total


@dataclass(slots=True)
class _Pass:
    """Where a partition's remote compaction stands (kept in memory only)."""

    last_run_ms: int = -1
    #: The finished segments the last pass left (None: no pass yet since this start).
    clean: frozenset[uuid.UUID] | None = None
    #: The earliest delete horizon of a tombstone the last pass kept (-1: none).
    next_horizon: int = -1
    passes: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rewritten: list[int] = field(default_factory=list)


class RLMCompactor(RemoteLogManagerCore):
    """Remote re-compaction of compacted topics (see the module docstring); the manager
    inherits it. Thread-safe: one pass per partition at a time (the expiration task)."""

    _cleaner_coordination: Callable[[], CleanerCoordination | None]

    # ------------------------------------------------------------------ entry points

    def _compact_remote_log(self, st: _PartitionState, lg: Log, task: _Task) -> None:
        """Finish interrupted swaps, then run a pass when one is due (expiration task)."""
        if not lg.config.compact:
            return
        tp = st.tp
        lineage = _lineage(lg)
        if not lineage:
            return
        finished = sorted(self._finished_in_lineage(tp, lg, lineage), key=lambda m: m.start_offset)
        stale = superseded_segments(finished, lambda m: self._served_at_start(tp, m))
        for md in stale:
            if task.cancelled.is_set() or not st.leader:
                return
            log.info("%s: deleting remote segment %s, superseded by a re-compacted one",
                     tp, md.remote_log_segment_id)  # fmt: skip
            try:
                self._delete_remote_log_segment(tp, st.metrics, md)
            except RemoteStorageError as e:
                log.warning("%s: deleting superseded %s failed (retried next run): %s",
                            tp, md.remote_log_segment_id, e)  # fmt: skip
                return
        if stale:
            gone = {m.remote_log_segment_id.id for m in stale}
            finished = [m for m in finished if m.remote_log_segment_id.id not in gone]
        p = self._compaction_state(st)
        now = self._time_ms()
        interval = int(lg.config.get("remote.log.compaction.interval.ms"))
        if p.last_run_ms >= 0 and now - p.last_run_ms < interval:
            return
        if not finished or not self._pass_due(p, finished, lg.config, now):
            return
        p.last_run_ms = now
        passed = self._compact_pass(st, lg, finished, task)
        self._update_size_metrics(st, lg)
        if passed:
            # What is remote now (the rewritten segments replaced the old ones).
            after = self._finished_in_lineage(tp, lg, _lineage(lg))
            p.clean = frozenset(m.remote_log_segment_id.id for m in after)

    @staticmethod
    def _pass_due(
        p: _Pass, finished: list[RemoteLogSegmentMetadata], config: LogConfig, now: int
    ) -> bool:
        """A pass is due (as the local cleaner's dirty ratio): the first since this start;
        a kept tombstone's delete horizon passed; or the bytes tiered since the last pass
        exceed ``min.cleanable.dirty.ratio`` of the remote bytes -- so each pass, which
        reads every remote segment, is paid for by as many new bytes."""
        if p.clean is None:
            return True
        if 0 <= p.next_horizon <= now:
            return True
        total = sum(m.segment_size_in_bytes for m in finished)
        dirty = sum(
            m.segment_size_in_bytes for m in finished if m.remote_log_segment_id.id not in p.clean
        )
        return dirty > 0 and dirty / total > float(config.get("min.cleanable.dirty.ratio"))

    def remote_compaction_passes(self, tp: TopicIdPartition) -> int:
        """Completed re-compaction passes of ``tp`` since this manager started (tests)."""
        st = self._state(tp)
        return 0 if st is None else self._compaction_state(st).passes

    @staticmethod
    def _compaction_state(st: _PartitionState) -> _Pass:
        p = st.extra.get("remote_compaction")
        if not isinstance(p, _Pass):
            p = st.extra["remote_compaction"] = _Pass()
        return p

    def _served_at_start(self, tp: TopicIdPartition, md: RemoteLogSegmentMetadata) -> bool:
        first_epoch = min(md.segment_leader_epochs.items(), key=lambda e: e[1])[0]
        try:
            served = self.rlmm.remote_log_segment_metadata(tp, first_epoch, md.start_offset)
        except RemoteStorageError:
            return False
        return served is not None and served.remote_log_segment_id == md.remote_log_segment_id

    # ------------------------------------------------------------------ one pass

    def _compact_pass(
        self,
        st: _PartitionState,
        lg: Log,
        finished: list[RemoteLogSegmentMetadata],
        task: _Task,
    ) -> bool:
        """One re-compaction pass; True when it went through (nothing left to do this run)."""
        tp = st.tp
        # A contiguous run of remote segments from the first.
        run = [finished[0]]
        for m in finished[1:]:
            if m.start_offset != run[-1].end_offset + 1:
                break
            run.append(m)
        coordination = self._cleaner_coordination()
        ktp = (tp.topic, tp.partition)
        if coordination is None or not coordination.try_pause_cleaning(ktp):
            return False  # a clean in progress: the next run tries again
        tmp = Path(tempfile.mkdtemp(prefix="tierlog-remote-compaction-"))
        cleaner = Cleaner(
            SkimpyOffsetMap(self.config.remote_log_compaction_dedupe_buffer_size),
            check_done=lambda _tp: self._check_compaction_cancelled(st, task),
            time_ms=self._time_ms,
        )
        stats = CleanerStats()
        try:
            upper = lg.last_stable_offset
            try:
                overflowed = self._map_local(cleaner, lg, run[-1].end_offset + 1, upper, stats)
            finally:
                coordination.resume_cleaning([ktp])
            remotes: list[_Remote] = []
            for md in reversed(run):
                self._check_compaction_cancelled(st, task)
                path = tmp / lfu.log_file(Path(), md.start_offset).name
                self._download(md, path)
                r = _Remote(md, FileRecords(path, file_already_exists=True))
                remotes.append(r)
                overflowed = self._map_remote(cleaner, r, overflowed, stats) or overflowed
            remotes.reverse()
            cleaner.offset_map.update_latest_offset(upper - 1)
            groups = _groups(remotes, lg.config)
            picked = self._pick(groups, lg.config, overflowed)
            rewritten = 0
            before = sum(r.size for r in remotes)
            for g, group in enumerate(groups):
                if not picked[g]:
                    continue
                self._check_compaction_cancelled(st, task)
                self._rewrite(st, lg, cleaner, group, tmp / f"g{g}", not overflowed, stats)
                rewritten += 1
            p = self._compaction_state(st)
            p.passes += 1
            p.next_horizon = min((r.next_horizon for r in remotes if r.next_horizon >= 0),
                                 default=-1)  # fmt: skip
            p.bytes_before = before
            p.bytes_after = (
                before
                - sum(r.size for g, grp in enumerate(groups) if picked[g] for r in grp)
                + stats.bytes_written
            )
            log.info(
                "%s: remote compaction pass %d: %d of %d groups of %d remote segments "
                "rewritten, %d -> %d bytes (map of %d keys%s)",
                tp,
                p.passes,
                rewritten,
                len(groups),
                len(remotes),
                p.bytes_before,
                p.bytes_after,
                len(cleaner.offset_map),
                ", full" if overflowed else "",
            )
            return True
        except _Cancelled:
            return False
        except RemoteStorageError as e:
            log.warning("%s: remote compaction failed (retried next run): %s", tp, e)
            return False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _download(self, md: RemoteLogSegmentMetadata, path: Path) -> None:
        """The segment's log into ``path``, in ranged reads of at most 8 MiB (a segment may be
        as large as segment.bytes: it is never held in memory whole)."""
        size = md.segment_size_in_bytes
        with path.open("wb") as f:
            pos = 0
            while pos < size:
                end = min(pos + _DOWNLOAD_CHUNK, size) - 1
                data = self.rsm.fetch_log_segment(md, pos, end)
                if not data:
                    raise RemoteStorageError(f"{md.remote_log_segment_id} ends at {pos} of {size}")
                f.write(data)
                pos += len(data)

    def _check_compaction_cancelled(self, st: _PartitionState, task: _Task) -> None:
        if task.cancelled.is_set() or not st.leader:
            raise _Cancelled

    # ------------------------------------------------------------------ the map

    @staticmethod
    def _room(cleaner: Cleaner) -> int:
        m = cleaner.offset_map
        return int(m.slots * cleaner.dup_buffer_load_factor) - len(m)

    def _map_local(
        self, cleaner: Cleaner, lg: Log, start: int, end: int, stats: CleanerStats
    ) -> bool:
        """Map the keys of the local records in [start, end) (later wins); True when the map
        filled up."""
        table = cleaner.offset_map.table
        full = False
        for segment in lg.segments.values_between(start, end):
            for chunk, header in read_batches(
                segment.log, 0, cleaner.io_buffer_size, cleaner.max_io_buffer_size
            ):
                last = header.base_offset + header.last_offset_delta
                if last < start or header.attributes & CONTROL_FLAG_MASK:
                    continue
                if header.base_offset >= end:
                    break
                offsets, keys, _ = read_keys(chunk, header)
                stats.map_messages_read += len(offsets)
                for offset, key in zip(offsets, keys, strict=True):
                    if key is None or not start <= offset < end:
                        continue
                    if table.get(key) < 0 and self._room(cleaner) <= 0:
                        full = True
                        continue
                    table.put(key, offset)
        return full

    def _map_remote(self, cleaner: Cleaner, r: _Remote, full: bool, stats: CleanerStats) -> bool:
        """Count what is dead in ``r`` against the map of later data, then add its keys the
        map does not have yet; True when the map filled up."""
        table = cleaner.offset_map.table
        now = self._time_ms()
        own: dict[bytes, tuple[int, bool, bool]] = {}  # digest -> offset, tombstone, expired
        for chunk, header in read_batches(
            r.records, 0, cleaner.io_buffer_size, cleaner.max_io_buffer_size
        ):
            if header.attributes & CONTROL_FLAG_MASK:
                continue
            has_horizon = bool(header.attributes & DELETE_HORIZON_FLAG_MASK)
            expired = has_horizon and now >= header.base_timestamp
            if (
                has_horizon
                and not expired
                and (r.next_horizon < 0 or header.base_timestamp < r.next_horizon)
            ):
                r.next_horizon = header.base_timestamp
            offsets, keys, has_values = read_keys(chunk, header)
            stats.map_messages_read += len(offsets)
            r.total += len(offsets)
            for offset, key, has_value in zip(offsets, keys, has_values, strict=True):
                if key is None:
                    r.dead += 1
                    continue
                digest = key_digest(key)
                if digest in own:
                    r.dead += 1  # an earlier record of a key this segment has again
                own[digest] = (offset, not has_value, expired)
        # (A digest is its own digest: the table takes them as keys.)
        for digest, (offset, tombstone, expired) in own.items():
            if table.get(digest) >= 0:
                r.dead += 1
            elif tombstone and expired:
                r.expired_tombstones += 1
                if not full and self._room(cleaner) > 0:
                    table.put(digest, offset)
            elif not full:
                if self._room(cleaner) > 0:
                    table.put(digest, offset)
                else:
                    full = True
        return full

    # ------------------------------------------------------------------ choosing

    @staticmethod
    def _pick(groups: list[list[_Remote]], config: LogConfig, overflowed: bool) -> list[bool]:
        ratio = float(config.get("min.cleanable.dirty.ratio"))
        picked = []
        for group in groups:
            size = sum(r.size for r in group)
            dead = size - sum(r.live_size for r in group)
            picked.append(len(group) > 1 or (size > 0 and dead / size > ratio))
        if not overflowed:
            # Dropping a tombstone needs every older value of its key gone first.
            last_with_tombstones = max(
                (g for g, grp in enumerate(groups) if any(r.expired_tombstones for r in grp)),
                default=-1,
            )
            for g in range(last_with_tombstones + 1):
                if any(r.dead or r.expired_tombstones for r in groups[g]):
                    picked[g] = True
        return picked

    # ------------------------------------------------------------------ rewrite and swap

    def _rewrite(
        self,
        st: _PartitionState,
        lg: Log,
        cleaner: Cleaner,
        group: list[_Remote],
        work: Path,
        drop_tombstones: bool,
        stats: CleanerStats,
    ) -> None:
        """Rewrite ``group`` into one new remote segment and swap it in for the group."""
        tp = st.tp
        work.mkdir()
        first, last = group[0].metadata, group[-1].metadata
        config = lg.config
        segment = LogSegment.open(work, first.start_offset, config, file_already_exists=False)
        try:
            writer = SegmentWriter(segment, cleaner.throttler, stats)
            active = lg.last_records_of_active_producers()
            retention = int(config.get("delete.retention.ms"))
            now = self._time_ms()
            last_dropped = None
            for r in group:
                last_dropped = cleaner.clean_into(
                    (tp.topic, tp.partition),
                    r.records,
                    writer,
                    active,
                    last.end_offset + 1,
                    retention,
                    now,
                    stats,
                    drop_tombstones=drop_tombstones,
                )
            if last_dropped is not None:
                # The new segment ends where the group ended (readers and the lineage
                # checks rely on the end offset).
                writer.write(empty_batch_of(last_dropped), last_dropped)
            writer.flush()
            segment.on_become_inactive_segment()
            segment.flush()
            snapshot = work / lfu.producer_snapshot_file(Path(), last.end_offset + 1).name
            snapshot.write_bytes(self.rsm.fetch_index(last, IndexType.PRODUCER_SNAPSHOT))
            epochs: dict[int, int] = {}
            for r in group:
                for e, o in r.metadata.segment_leader_epochs.items():
                    epochs[e] = min(o, epochs.get(e, o))
            metadata = RemoteLogSegmentMetadata(
                remote_log_segment_id=RemoteLogSegmentId(tp, uuid.uuid4()),
                start_offset=first.start_offset,
                end_offset=last.end_offset,
                max_timestamp_ms=max(r.metadata.max_timestamp_ms for r in group),
                broker_id=self.broker_id,
                event_timestamp_ms=now,
                segment_size_in_bytes=segment.size,
                segment_leader_epochs=dict(sorted(epochs.items())),
            )
            data = LogSegmentData(
                log_segment=segment.log.path,
                offset_index=segment.offset_index.path,
                time_index=segment.time_index.path,
                transaction_index=None,
                producer_snapshot_index=snapshot,
                leader_epoch_index=self.rsm.fetch_index(last, IndexType.LEADER_EPOCH),
            )
            self._swap_in(st, metadata, data, [r.metadata for r in group])
        finally:
            segment.close_handlers()

    def _swap_in(
        self,
        st: _PartitionState,
        metadata: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        old: list[RemoteLogSegmentMetadata],
    ) -> None:
        """Upload the new segment through the metadata state machine, then delete the old
        ones (see the module docstring for why a reader never sees a gap).

        Raises:
            RemoteStorageError: the upload failed (what it left is deleted); or a delete
                failed (the next pass finishes it).
        """
        tp, m = st.tp, st.metrics
        sid = metadata.remote_log_segment_id
        with st.lock:
            st.being_copied.add(sid.id)
        try:
            self.rlmm.add_remote_log_segment_metadata(metadata)
            m.copy_requests.inc()
            try:
                custom = self.rsm.copy_log_segment_data(metadata, data)
                limit = self.config.remote_log_metadata_custom_metadata_max_bytes
                if custom is not None and len(custom) > limit:
                    raise RemoteStorageError(
                        f"custom metadata of {len(custom)} bytes exceeds "
                        f"remote.log.metadata.custom.metadata.max.bytes={limit}"
                    )
            except Exception as e:
                m.copy_errors.inc()
                try:
                    self._delete_remote_log_segment(tp, m, metadata)
                except RemoteStorageError as e2:
                    log.warning("%s: cleaning the failed upload %s failed: %s", tp, sid, e2)
                if isinstance(e, RemoteStorageError):
                    raise
                raise RemoteStorageError(f"uploading {sid}: {e}") from e
            self.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    sid, self._time_ms(), custom, _S.COPY_SEGMENT_FINISHED, self.broker_id
                )
            )
        finally:
            with st.lock:
                st.being_copied.discard(sid.id)
        m.copy_bytes.inc(metadata.segment_size_in_bytes)
        log.info(
            "%s: re-compacted remote segments %s (%d-%d, %d bytes) into %s (%d bytes)",
            tp,
            [str(o.remote_log_segment_id.id) for o in old],
            metadata.start_offset,
            metadata.end_offset,
            sum(o.segment_size_in_bytes for o in old),
            sid.id,
            metadata.segment_size_in_bytes,
        )
        for o in old:
            self._delete_remote_log_segment(tp, m, o)


class _Cancelled(Exception):
    """The task was cancelled or the partition's leadership moved during a pass."""


def _groups(remotes: list[_Remote], config: LogConfig) -> list[list[_Remote]]:
    """Consecutive remote segments whose live bytes fit ``segment.bytes`` and whose offsets
    fit 32-bit relative offsets (the cleaner's ``group_segments_by_size`` on estimates)."""
    max_size = config.segment_size
    groups: list[list[_Remote]] = []
    for r in remotes:
        if groups:
            g = groups[-1]
            if (
                sum(x.live_size for x in g) + r.live_size <= max_size
                and r.metadata.end_offset - g[0].metadata.start_offset <= _INT32_MAX
            ):
                g.append(r)
                continue
        groups.append([r])
    return groups
