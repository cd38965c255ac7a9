"""A direct port of Kafka's RemoteLogMetadataCache + RemoteLogLeaderEpochState over dicts.

The oracle for the columnar cache: slow, obviously Kafka-shaped. Two documented differences
are mirrored on purpose (see remote_log_metadata_cache's docstring): an entry replaced under
the same key becomes unreferenced, and a re-added STARTED segment replaces its earlier copy.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from tierlog.errors import InvalidRemoteStateTransitionError, RemoteResourceNotFoundError
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState as S
from tierlog.tiered.remote_log_segment_state import is_valid_transition


@dataclass
class _EpochState:
    offset_to_id: dict[int, uuid.UUID] = field(default_factory=dict)
    unreferenced: set[uuid.UUID] = field(default_factory=set)
    highest: int | None = None


def _epoch_end(md: RemoteLogSegmentMetadata, epoch: int) -> int:
    later = [off for e, off in md.segment_leader_epochs.items() if e > epoch]
    return min(later) - 1 if later else md.end_offset


class KafkaCacheModel:
    def __init__(self) -> None:
        self.id_to_md: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, _EpochState] = {}
        self.initialized = False

    def add_copy_in_progress_segment(self, md: RemoteLogSegmentMetadata) -> None:
        if md.state != S.COPY_SEGMENT_STARTED:
            raise ValueError("state must be STARTED")
        sid = md.remote_log_segment_id.id
        existing = self.id_to_md.get(sid)
        if not is_valid_transition(existing.state if existing else None, md.state):
            raise InvalidRemoteStateTransitionError(existing and existing.state, md.state, sid)
        if existing is not None:
            for st in self.epochs.values():
                st.unreferenced.discard(sid)
        for e in md.segment_leader_epochs:
            self.epochs.setdefault(e, _EpochState()).unreferenced.add(sid)
        self.id_to_md[sid] = md

    def update_remote_log_segment_metadata(self, upd: RemoteLogSegmentMetadataUpdate) -> None:
        sid = upd.remote_log_segment_id.id
        existing = self.id_to_md.get(sid)
        if existing is None:
            if not self.initialized:
                return
            raise RemoteResourceNotFoundError(str(sid))
        if not is_valid_transition(existing.state, upd.state):
            raise InvalidRemoteStateTransitionError(existing.state, upd.state, sid)
        if upd.state == S.COPY_SEGMENT_STARTED:
            raise ValueError("STARTED can not be an update")
        new = existing.create_with_updates(upd)
        if upd.state == S.COPY_SEGMENT_FINISHED:
            for e, key in new.segment_leader_epochs.items():
                st = self.epochs.setdefault(e, _EpochState())
                end_e = _epoch_end(new, e)
                while st.offset_to_id:
                    last = max(st.offset_to_id)
                    if last >= key and st.highest is not None and st.highest <= end_e:
                        st.unreferenced.add(st.offset_to_id.pop(last))
                    else:
                        break
                old = st.offset_to_id.get(key)
                if old is not None and old != sid:
                    st.unreferenced.add(old)
                st.offset_to_id[key] = sid
                st.unreferenced.discard(sid)
                if st.highest is None or end_e > st.highest:
                    st.highest = end_e
            self.id_to_md[sid] = new
        elif upd.state == S.DELETE_SEGMENT_STARTED:
            for e, key in new.segment_leader_epochs.items():
                st = self.epochs.setdefault(e, _EpochState())
                if st.offset_to_id.get(key) == sid:
                    del st.offset_to_id[key]
                st.unreferenced.add(sid)
            self.id_to_md[sid] = new
        else:
            for e in new.segment_leader_epochs:
                self.epochs.setdefault(e, _EpochState()).unreferenced.discard(sid)
            del self.id_to_md[sid]

    def remote_log_segment_metadata(
        self, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        st = self.epochs.get(epoch)
        if st is None:
            return None
        keys = [k for k in st.offset_to_id if k <= offset]
        if not keys:
            return None
        md = self.id_to_md[st.offset_to_id[max(keys)]]
        return None if offset > _epoch_end(md, epoch) else md

    def highest_offset_for_epoch(self, epoch: int) -> int | None:
        st = self.epochs.get(epoch)
        return None if st is None else st.highest

    def list_remote_log_segments(self, epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        if epoch is None:
            mds = list(self.id_to_md.values())
        else:
            st = self.epochs.get(epoch)
            if st is None:
                return []
            ids = set(st.offset_to_id.values()) | st.unreferenced
            mds = [self.id_to_md[i] for i in ids]
        return sorted(mds, key=lambda m: (m.start_offset, m.remote_log_segment_id.id))
