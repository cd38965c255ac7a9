"""In-memory remote log segment metadata of ONE user partition, in a compact columnar store.

Semantics are Kafka's ``RemoteLogMetadataCache`` + ``RemoteLogLeaderEpochState``:

* every segment that has not reached DELETE_SEGMENT_FINISHED is kept;
* per leader epoch, the COPY_SEGMENT_FINISHED segments are *referenced* by the first offset
  of that epoch in the segment (Kafka's ``offsetToId``); STARTED, DELETE_SEGMENT_STARTED and
  displaced segments are *unreferenced* (listed, so they can be cleaned up, never read);
* overlapping uploads after a leader change: when a segment finishes, the referenced entries of
  the epoch whose key is >= its key are displaced (become unreferenced) if the epoch's highest
  offset so far is <= the new segment's end offset for that epoch;
* the highest offset of an epoch only grows (deleting segments does not lower it).

Method / state table (as Kafka's)::

    method                               STARTED  FINISHED  DELETE_STARTED  DELETE_FINISHED
    remote_log_segment_metadata(e, off)    no       yes          no              no
    list_remote_log_segments(e)            yes      yes          yes             no
    list_all()                             yes      yes          yes             no

One deliberate difference: Kafka's ``offsetToId.put`` silently drops an entry with the *same*
key that was not displaced, so it vanishes from ``listRemoteLogSegments(epoch)``; here that
entry becomes unreferenced and stays listed, so it can still be cleaned up.

Memory layout (the reason this module exists: ~100 bytes per segment in Kafka's estimate, our
budget is 40). Rows = segments sorted by start offset, split into chunks of
:data:`CHUNK_ROWS`; each chunk holds parallel columns:

    ids         bytearray, 16 bytes per row (segment UUID)
    start       IntColumn  start offset (frame of reference: base + narrow delta)
    end         IntColumn  end offset - start offset
    max_ts      IntColumn  max timestamp (ms)
    event_ts    IntColumn  event timestamp (ms)
    size        IntColumn  segment size in bytes
    broker      IntColumn  broker id
    epochs      IntColumn  index into the table of distinct *relative* leader-epoch maps
    flags       array('B') bits 0-1 state, bit 2 txn index empty,
                           bits 3-7 "referenced" bit of leader-epoch entries 0-4
    custom      None, or a list of custom metadata (created only when some segment has it)

A relative leader-epoch map is ``((epoch, first_offset - start_offset), ...)``: a segment that
lies inside one epoch has ``((e, 0),)``, shared by every such segment of that epoch, so the
table stays as small as the number of epoch changes. Typical cost: 16 (id) + 4 (start) +
2-4 (end) + 4 + 4 (timestamps) + 4 (size) + 1 + 1 + 1 = 37-39 bytes per segment.

Per leader epoch a small :class:`EpochState` keeps the highest offset and bounds used to limit
scans. Lookups bisect the start offsets; updates find a row by UUID (searched from the newest
and oldest chunks first: new segments finish, old ones get deleted).

Not thread-safe: the metadata manager serialises access.
"""

from __future__ import annotations

import uuid
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tierlog.errors import InvalidRemoteStateTransitionError, RemoteResourceNotFoundError
from tierlog.tiered._columns import IntColumn
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState, is_valid_transition

CHUNK_ROWS = 4096

_STATE_MASK = 0x03
_TXN_EMPTY = 0x04
_REF_SHIFT = 3
_REF_BITS_IN_FLAGS = 5

_S = RemoteLogSegmentState
_STATES = tuple(RemoteLogSegmentState)

RelativeEpochs = tuple[tuple[int, int], ...]


@dataclass(slots=True)
class EpochState:
    """Per leader epoch: Kafka's ``highestLogOffset`` plus scan bounds.

    ``min_start``/``max_start`` bound the start offsets of segments that contain the epoch and
    ``min_rel``/``max_rel`` bound ``key - start`` (key = first offset of the epoch in the
    segment; ``min_rel`` is 0 unless a segment claims an epoch start before its own start).
    The bounds are conservative: they never shrink while the cache lives.
    """

    highest: int | None
    min_start: int
    max_start: int
    min_rel: int
    max_rel: int


class _Chunk:
    """Up to ~2 x CHUNK_ROWS consecutive rows; see the module docstring for the columns."""

    __slots__ = (
        "broker",
        "custom",
        "end",
        "epochs",
        "event_ts",
        "flags",
        "ids",
        "max_ts",
        "size",
        "start",
    )

    def __init__(self) -> None:
        self.ids = bytearray()
        self.start = IntColumn()
        self.end = IntColumn()
        self.max_ts = IntColumn()
        self.event_ts = IntColumn()
        self.size = IntColumn()
        self.broker = IntColumn()
        self.epochs = IntColumn()
        self.flags = array("B")
        self.custom: list[bytes | None] | None = None

    @classmethod
    def build(
        cls,
        ids: bytes | bytearray,
        start: Sequence[int],
        end_delta: Sequence[int],
        max_ts: Sequence[int],
        event_ts: Sequence[int],
        size: Sequence[int],
        broker: Sequence[int],
        epochs: Sequence[int],
        flags: Sequence[int],
        custom: list[bytes | None] | None = None,
    ) -> _Chunk:
        """A chunk from whole columns (``end_delta`` = end - start). Rows must be sorted."""
        c = cls.__new__(cls)
        c.ids = bytearray(ids)
        c.start = IntColumn(start)
        c.end = IntColumn(end_delta)
        c.max_ts = IntColumn(max_ts)
        c.event_ts = IntColumn(event_ts)
        c.size = IntColumn(size)
        c.broker = IntColumn(broker)
        c.epochs = IntColumn(epochs)
        c.flags = array("B", flags)
        c.custom = custom
        return c

    def __len__(self) -> int:
        return len(self.flags)

    def int_columns(self) -> tuple[IntColumn, ...]:
        """The IntColumns in file order (see metadata_cache_file)."""
        return (
            self.start,
            self.end,
            self.max_ts,
            self.event_ts,
            self.size,
            self.broker,
            self.epochs,
        )

    def insert(
        self, i: int, sid: bytes, md: RemoteLogSegmentMetadata, map_idx: int, flags: int
    ) -> None:
        self.ids[i * 16 : i * 16] = sid
        self.start.insert(i, md.start_offset)
        self.end.insert(i, md.end_offset - md.start_offset)
        self.max_ts.insert(i, md.max_timestamp_ms)
        self.event_ts.insert(i, md.event_timestamp_ms)
        self.size.insert(i, md.segment_size_in_bytes)
        self.broker.insert(i, md.broker_id)
        self.epochs.insert(i, map_idx)
        self.flags.insert(i, flags)
        if md.custom_metadata is not None and self.custom is None:
            self.custom = [None] * (len(self.flags) - 1)
        if self.custom is not None:
            self.custom.insert(i, md.custom_metadata)

    def delete(self, i: int) -> None:
        del self.ids[i * 16 : i * 16 + 16]
        for col in self.int_columns():
            del col[i]
        del self.flags[i]
        if self.custom is not None:
            del self.custom[i]
            if not any(c is not None for c in self.custom):
                self.custom = None

    def split(self) -> _Chunk:
        """Move the upper half of the rows into a new chunk (returned); both are compacted."""
        n = len(self)
        h = n // 2
        upper = _Chunk.build(
            self.ids[h * 16 :],
            self.start.values()[h:],
            self.end.values()[h:],
            self.max_ts.values()[h:],
            self.event_ts.values()[h:],
            self.size.values()[h:],
            self.broker.values()[h:],
            self.epochs.values()[h:],
            self.flags[h:],
            self.custom[h:] if self.custom is not None else None,
        )
        lower = _Chunk.build(
            self.ids[: h * 16],
            self.start.values()[:h],
            self.end.values()[:h],
            self.max_ts.values()[:h],
            self.event_ts.values()[:h],
            self.size.values()[:h],
            self.broker.values()[:h],
            self.epochs.values()[:h],
            self.flags[:h],
            self.custom[:h] if self.custom is not None else None,
        )
        for name in _Chunk.__slots__:
            setattr(self, name, getattr(lower, name))
        return upper

    def compact(self) -> None:
        self.ids = bytearray(self.ids)
        for col in self.int_columns():
            col.compact()
        self.flags = array("B", self.flags)

    def rfind(self, sid: bytes) -> int:
        """Row index of a segment UUID in this chunk (searched from the end), or -1."""
        ids = self.ids
        pos = ids.rfind(sid)
        while pos != -1 and pos % 16:  # a match straddling two ids: keep looking
            pos = ids.rfind(sid, 0, pos + 15)
        return -1 if pos == -1 else pos // 16


class RemoteLogMetadataCache:
    """Remote segment metadata of one user partition (see the module docstring).

    Not thread-safe. Operations are idempotent where Kafka's are (self state transitions).
    """

    def __init__(self, topic_id_partition: TopicIdPartition) -> None:
        self.topic_id_partition = topic_id_partition
        self._chunks: list[_Chunk] = []
        self._firsts: list[int] = []  # start offset of each chunk's first row
        self._maps: list[RelativeEpochs] = []
        self._map_pos: list[dict[int, int]] = []  # per map: epoch -> entry index
        self._map_index: dict[RelativeEpochs, int] = {}
        self._epochs: dict[int, EpochState] = {}
        self._ref_overflow: dict[bytes, int] = {}  # full referenced mask of maps with > 5 entries
        self._count = 0
        self._initialized = False

    # ------------------------------------------------------------------ initialization

    def mark_initialized(self) -> None:
        """The metadata partition has been read to its end: the cache can serve."""
        self._initialized = True

    @property
    def is_initialized(self) -> bool:
        return self._initialized

    def __len__(self) -> int:
        return self._count

    # ------------------------------------------------------------------ row helpers

    def _intern(self, rel: RelativeEpochs) -> int:
        idx = self._map_index.get(rel)
        if idx is None:
            idx = len(self._maps)
            self._maps.append(rel)
            self._map_pos.append({e: j for j, (e, _) in enumerate(rel)})
            self._map_index[rel] = idx
        return idx

    def _find(self, sid: bytes) -> tuple[int, int] | None:
        """Row of a segment id: newest chunk first (copies finish there), then the oldest
        (retention deletes there), then the rest."""
        chunks = self._chunks
        n = len(chunks)
        if n == 0:
            return None
        ri = chunks[-1].rfind(sid)
        if ri >= 0:
            return n - 1, ri
        for ci in (0, *range(n - 2, 0, -1)) if n > 1 else ():
            ri = chunks[ci].rfind(sid)
            if ri >= 0:
                return ci, ri
        return None

    def _find_at_start(self, sid: bytes, start: int) -> tuple[int, int] | None:
        """Row of a segment id among the rows starting at ``start`` (a segment id's start
        offset never changes, so an existing copy of it can only be there)."""
        for c, i in self._rows(self._bisect_left(start), self._bisect_right(start)):
            if c.ids[i * 16 : i * 16 + 16] == sid:
                ci = self._chunks.index(c)
                return ci, i
        return None

    def _ref_mask(self, c: _Chunk, i: int) -> int:
        if len(self._maps[c.epochs[i]]) > _REF_BITS_IN_FLAGS:
            return self._ref_overflow.get(bytes(c.ids[i * 16 : i * 16 + 16]), 0)
        return c.flags[i] >> _REF_SHIFT

    def _set_ref_mask(self, c: _Chunk, i: int, mask: int) -> None:
        if len(self._maps[c.epochs[i]]) > _REF_BITS_IN_FLAGS:
            self._ref_overflow[bytes(c.ids[i * 16 : i * 16 + 16])] = mask
        else:
            c.flags[i] = (c.flags[i] & (_STATE_MASK | _TXN_EMPTY)) | (mask << _REF_SHIFT)

    def _bisect_left(self, offset: int) -> tuple[int, int]:
        """Position of the first row whose start offset is >= offset."""
        ci = bisect_left(self._firsts, offset) - 1
        if ci < 0:
            return 0, 0
        return ci, self._chunks[ci].start.bisect_left(offset)

    def _bisect_right(self, offset: int) -> tuple[int, int]:
        """Position after the last row whose start offset is <= offset."""
        ci = bisect_right(self._firsts, offset) - 1
        if ci < 0:
            return 0, 0
        return ci, self._chunks[ci].start.bisect_right(offset)

    def _rows(self, lo: tuple[int, int], hi: tuple[int, int]) -> Iterator[tuple[_Chunk, int]]:
        """Rows in [lo, hi), ascending."""
        chunks = self._chunks
        ci, ri = lo
        hci, hri = hi
        while ci < len(chunks) and (ci, ri) < (hci, hri):
            c = chunks[ci]
            stop = hri if ci == hci else len(c)
            for i in range(ri, stop):
                yield c, i
            ci, ri = ci + 1, 0

    def _rows_back(self, hi: tuple[int, int], lo: tuple[int, int]) -> Iterator[tuple[_Chunk, int]]:
        """Rows in [lo, hi), descending."""
        chunks = self._chunks
        ci, ri = hi
        lci, lri = lo
        if ci >= len(chunks):
            if not chunks:
                return
            ci, ri = len(chunks) - 1, len(chunks[-1])
        while ci >= lci:
            c = chunks[ci]
            stop = lri if ci == lci else 0
            for i in range(min(ri, len(c)) - 1, stop - 1, -1):
                yield c, i
            ci -= 1
            if ci >= 0:
                ri = len(chunks[ci])

    def _materialize(self, c: _Chunk, i: int) -> RemoteLogSegmentMetadata:
        start = c.start[i]
        flags = c.flags[i]
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(
                self.topic_id_partition, uuid.UUID(bytes=bytes(c.ids[i * 16 : i * 16 + 16]))
            ),
            start_offset=start,
            end_offset=start + c.end[i],
            max_timestamp_ms=c.max_ts[i],
            broker_id=c.broker[i],
            event_timestamp_ms=c.event_ts[i],
            segment_size_in_bytes=c.size[i],
            segment_leader_epochs={e: start + rel for e, rel in self._maps[c.epochs[i]]},
            custom_metadata=c.custom[i] if c.custom is not None else None,
            state=_STATES[flags & _STATE_MASK],
            txn_idx_empty=bool(flags & _TXN_EMPTY),
        )

    def _insert_row(
        self, sid: bytes, md: RemoteLogSegmentMetadata, map_idx: int, flags: int
    ) -> None:
        chunks = self._chunks
        start = md.start_offset
        if not chunks:
            chunks.append(_Chunk())
            self._firsts.append(start)
        ci, ri = self._bisect_right(start)
        c = chunks[ci]
        if ci == len(chunks) - 1 and ri == len(c) and len(c) >= CHUNK_ROWS:
            c.compact()  # sealed: drop the arrays' spare room
            c = _Chunk()
            chunks.append(c)
            self._firsts.append(start)
            ci, ri = len(chunks) - 1, 0
        c.insert(ri, sid, md, map_idx, flags)
        if ri == 0:
            self._firsts[ci] = start
        if len(c) > 2 * CHUNK_ROWS:
            upper = c.split()
            chunks.insert(ci + 1, upper)
            self._firsts.insert(ci + 1, upper.start[0])
        self._count += 1

    def _delete_row(self, ci: int, ri: int) -> None:
        c = self._chunks[ci]
        if len(self._maps[c.epochs[ri]]) > _REF_BITS_IN_FLAGS:
            self._ref_overflow.pop(bytes(c.ids[ri * 16 : ri * 16 + 16]), None)
        c.delete(ri)
        if len(c) == 0:
            del self._chunks[ci]
            del self._firsts[ci]
        elif ri == 0:
            self._firsts[ci] = c.start[0]
        self._count -= 1

    # ------------------------------------------------------------------ mutations

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Track a segment whose copy has started (not readable until COPY_SEGMENT_FINISHED).

        Raises:
            ValueError: the metadata is not in state COPY_SEGMENT_STARTED, or is for another
                partition.
            InvalidRemoteStateTransitionError: the segment is already known in a later state.
        """
        if metadata.state != _S.COPY_SEGMENT_STARTED:
            raise ValueError(
                f"{metadata.remote_log_segment_id} must be in state COPY_SEGMENT_STARTED to be "
                f"added, not {metadata.state.name}"
            )
        self._check_partition(metadata.topic_id_partition)
        sid = metadata.remote_log_segment_id.id.bytes
        loc = self._find_at_start(sid, metadata.start_offset)
        if loc is not None:
            c, i = self._chunks[loc[0]], loc[1]
            existing = _STATES[c.flags[i] & _STATE_MASK]
            if not is_valid_transition(existing, metadata.state):
                raise InvalidRemoteStateTransitionError(
                    existing.name, metadata.state.name, metadata.remote_log_segment_id
                )
            self._delete_row(*loc)  # a retried STARTED replaces the earlier one
        start = metadata.start_offset
        rel = tuple((e, off - start) for e, off in metadata.segment_leader_epochs.items())
        map_idx = self._intern(rel)
        flags = int(metadata.state) | (_TXN_EMPTY if metadata.txn_idx_empty else 0)
        self._insert_row(sid, metadata, map_idx, flags)
        if len(rel) > _REF_BITS_IN_FLAGS:
            self._ref_overflow[sid] = 0
        epochs = self._epochs
        for e, r in rel:
            st = epochs.get(e)
            if st is None:
                epochs[e] = EpochState(None, start, start, min(r, 0), max(r, 0))
            else:
                st.min_start = min(st.min_start, start)
                st.max_start = max(st.max_start, start)
                st.min_rel = min(st.min_rel, r)
                st.max_rel = max(st.max_rel, r)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Apply a state change (COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED/FINISHED).

        An update for an unknown segment is dropped while the cache is not initialized (its
        add may be in a part of the metadata topic that was already compacted away).

        Raises:
            RemoteResourceNotFoundError: unknown segment (once initialized).
            InvalidRemoteStateTransitionError: the lifecycle forbids the change.
            ValueError: the update's state is COPY_SEGMENT_STARTED (use add), or is for
                another partition.
        """
        self._check_partition(update.topic_id_partition)
        sid = update.remote_log_segment_id.id.bytes
        loc = self._find(sid)
        if loc is None:
            if not self._initialized:
                return
            raise RemoteResourceNotFoundError(
                f"no remote log segment metadata found for {update.remote_log_segment_id}"
            )
        ci, ri = loc
        c = self._chunks[ci]
        src = _STATES[c.flags[ri] & _STATE_MASK]
        dst = update.state
        if not is_valid_transition(src, dst):
            raise InvalidRemoteStateTransitionError(
                src.name, dst.name, update.remote_log_segment_id
            )
        if dst == _S.COPY_SEGMENT_STARTED:
            raise ValueError(
                f"{update.remote_log_segment_id}: COPY_SEGMENT_STARTED can not be an update"
            )
        if dst == _S.DELETE_SEGMENT_FINISHED:
            self._delete_row(ci, ri)  # terminal: forget the segment
            return
        c.broker[ri] = update.broker_id
        c.event_ts[ri] = update.event_timestamp_ms
        if update.custom_metadata is not None and c.custom is None:
            c.custom = [None] * len(c)
        if c.custom is not None:
            c.custom[ri] = update.custom_metadata
        c.flags[ri] = (c.flags[ri] & ~_STATE_MASK) | int(dst)
        if dst == _S.COPY_SEGMENT_FINISHED:
            self._handle_copy_finished(c, ri)
        else:  # DELETE_SEGMENT_STARTED: unreference in every epoch; kept for delete retries
            self._set_ref_mask(c, ri, 0)

    def _handle_copy_finished(self, c: _Chunk, ri: int) -> None:
        start = c.start[ri]
        end = start + c.end[ri]
        rel = self._maps[c.epochs[ri]]
        for j, (e, r) in enumerate(rel):
            key = start + r
            epoch_end = start + rel[j + 1][1] - 1 if j + 1 < len(rel) else end
            st = self._epochs.get(e)
            if st is None:  # possible only for rows restored without their epoch state
                st = self._epochs[e] = EpochState(None, start, start, min(r, 0), max(r, 0))
            displace_all = st.highest is not None and st.highest <= epoch_end
            # Referenced entries of epoch e with key >= this key (Kafka walks offsetToId's
            # last entries). Keys are >= start - max_rel, so the scan starts there.
            lo = self._bisect_left(key - st.max_rel)
            hi = self._bisect_right(st.max_start)
            for oc, oi in self._rows(lo, hi):
                j2 = self._map_pos[oc.epochs[oi]].get(e)
                if j2 is None:
                    continue
                mask = self._ref_mask(oc, oi)
                if not mask >> j2 & 1:
                    continue
                okey = oc.start[oi] + self._maps[oc.epochs[oi]][j2][1]
                if (okey > key and displace_all) or okey == key:
                    self._set_ref_mask(oc, oi, mask & ~(1 << j2))
            if st.highest is None or epoch_end > st.highest:
                st.highest = epoch_end
        # Reference this segment in all its epochs (also undoes a self-displacement above).
        self._set_ref_mask(c, ri, (1 << len(rel)) - 1)

    def _check_partition(self, tp: TopicIdPartition) -> None:
        if tp != self.topic_id_partition:
            raise ValueError(f"metadata of {tp} given to the cache of {self.topic_id_partition}")

    # ------------------------------------------------------------------ queries

    def remote_log_segment_metadata(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` written in ``leader_epoch``."""
        st = self._epochs.get(leader_epoch)
        if st is None or st.highest is None or offset > st.highest:
            return None
        best: tuple[_Chunk, int, int] | None = None
        best_key = -1
        hi = self._bisect_right(offset - st.min_rel)  # rows starting after it have key > offset
        for c, i in self._rows_back(hi, self._bisect_left(st.min_start)):
            start = c.start[i]
            if best is not None and start + st.max_rel <= best_key:
                break  # no earlier row can have a key above best_key
            j = self._map_pos[c.epochs[i]].get(leader_epoch)
            if j is None or not self._ref_mask(c, i) >> j & 1:
                continue
            key = start + self._maps[c.epochs[i]][j][1]
            if best_key < key <= offset:
                best, best_key = (c, i, j), key
        if best is None:
            return None
        c, i, j = best
        rel = self._maps[c.epochs[i]]
        start = c.start[i]
        epoch_end = start + rel[j + 1][1] - 1 if j + 1 < len(rel) else start + c.end[i]
        return self._materialize(c, i) if offset <= epoch_end else None

    def segment_state(self, segment_id: uuid.UUID) -> RemoteLogSegmentState | None:
        """State of a known segment (None: unknown or DELETE_SEGMENT_FINISHED)."""
        loc = self._find(segment_id.bytes)
        if loc is None:
            return None
        return _STATES[self._chunks[loc[0]].flags[loc[1]] & _STATE_MASK]

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """Highest offset of ``leader_epoch`` in COPY_SEGMENT_FINISHED (or later) segments."""
        st = self._epochs.get(leader_epoch)
        return None if st is None else st.highest

    def _epoch_rows(self, leader_epoch: int | None) -> Iterator[tuple[_Chunk, int]]:
        if leader_epoch is None:
            yield from self._rows((0, 0), (len(self._chunks), 0))
            return
        st = self._epochs.get(leader_epoch)
        if st is None:
            return
        for c, i in self._rows(self._bisect_left(st.min_start), self._bisect_right(st.max_start)):
            if leader_epoch in self._map_pos[c.epochs[i]]:
                yield c, i

    def list_remote_log_segments(
        self, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments (any state but DELETE_SEGMENT_FINISHED) sorted by start offset; only those
        containing ``leader_epoch`` when given."""
        return [self._materialize(c, i) for c, i in self._epoch_rows(leader_epoch)]

    def list_all(self) -> list[RemoteLogSegmentMetadata]:
        """Every known segment, sorted by start offset."""
        return self.list_remote_log_segments(None)

    def remote_log_size(self, leader_epoch: int | None = None) -> int:
        """Total size in bytes of the segments :meth:`list_remote_log_segments` would return."""
        if leader_epoch is None:
            return sum(sum(c.size.arr) + c.size.base * len(c) for c in self._chunks)
        return sum(c.size[i] for c, i in self._epoch_rows(leader_epoch))

    def leader_epochs(self) -> list[int]:
        """Leader epochs seen in any segment, ascending."""
        return sorted(self._epochs)

    def memory_columns_nbytes(self) -> int:
        """Bytes held by the column arrays (a lower bound of the real footprint)."""
        total = 0
        for c in self._chunks:
            total += len(c.ids) + len(c.flags) + sum(col.nbytes() for col in c.int_columns())
        return total

    # ------------------------------------------------------------------ bulk restore

    def _restore(
        self,
        chunks: list[_Chunk],
        maps: list[RelativeEpochs],
        epochs: dict[int, EpochState],
        ref_overflow: dict[bytes, int],
    ) -> None:
        """Replace the whole state (used by the cache file loader). Rows must be sorted."""
        self._chunks = chunks
        self._firsts = [c.start[0] for c in chunks]
        self._maps = list(maps)
        self._map_index = {m: i for i, m in enumerate(self._maps)}
        self._map_pos = [{e: j for j, (e, _) in enumerate(m)} for m in self._maps]
        self._epochs = epochs
        self._ref_overflow = ref_overflow
        self._count = sum(len(c) for c in chunks)


__all__ = ["CHUNK_ROWS", "EpochState", "RemoteLogMetadataCache"]
