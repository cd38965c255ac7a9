"""What a follower does when its leader answers OFFSET_MOVED_TO_TIERED_STORAGE (Kafka's
``ReplicaFetcherTierStateMachine``, KIP-405 "Follower fetch"; seed 002).

A follower never fetches tiered data. When its fetch offset is below the leader's local log
start, the leader answers 109; the follower asks the leader's earliest local offset
(ListOffsets -4, done by the fetcher) and then, here:

1. finds the COPY_SEGMENT_FINISHED remote segment that holds the offset just before it
   (from the remote log metadata this broker already follows for the partition);
2. fetches that segment's leader-epoch checkpoint and producer snapshot, both from its ONE
   indexes object (seed 001);
3. truncates its log fully and starts it one past that segment's end, with the leader's log
   start offset, those epochs and that producer state (``UnifiedLog.restore_remote_log_aux_state``),
   only if the log still ends at the fetch offset the leader answered 109 to. The remote reads
   run in a thread that nothing cancels, and a new leader epoch re-adds the partition to a
   fetcher, which fetches it again: a second rebuild, ending after the first one had let the
   follower fetch the leader's local part and join the ISR, wiped that part.

It then fetches from there, so a new or wiped replica of a tiered partition moves only the
leader's local part. Blocking (remote storage): the fetcher runs it in a thread.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tierlog.errors import CorruptCheckpointError, RemoteStorageError
from tierlog.log.checkpoint_file import decode_leader_epoch_checkpoint
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState
from tierlog.tiered.storage.remote_storage_manager import IndexType

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.tiered.remote_log_manager import RemoteLogManager
    from tierlog.tiered.remote_log_segment_metadata import (
        RemoteLogSegmentMetadata,
        TopicIdPartition,
    )

__all__ = ["build_remote_log_aux_state", "segment_before"]

log = logging.getLogger(__name__)


def segment_before(
    segments: list[RemoteLogSegmentMetadata], offset: int
) -> RemoteLogSegmentMetadata | None:
    """The finished remote segment holding ``offset - 1`` (of several, e.g. overlapping
    uploads after a leader change, the one of the latest leader epoch, then ending last)."""
    target = offset - 1
    holding = [
        m
        for m in segments
        if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        and m.start_offset <= target <= m.end_offset
    ]
    if not holding:
        return None
    return max(holding, key=lambda m: (max(m.segment_leader_epochs, default=-1), m.end_offset))


def build_remote_log_aux_state(
    rlm: RemoteLogManager,
    tp: TopicIdPartition,
    lg: Log,
    leader_local_log_start_offset: int,
    leader_log_start_offset: int,
    fetch_offset: int,
) -> int | None:
    """Rebuild ``lg`` (a follower's log, whose fetch from ``fetch_offset`` the leader answered
    109) from remote metadata; the offset to fetch from, or None when the log no longer ends
    at ``fetch_offset`` (it moved on meanwhile: left as it is).

    Raises:
        RemoteStorageError: the metadata does not have the segment yet (retry later: the
            metadata manager follows the leader's publications), or remote storage failed.
    """
    rlmm = rlm.rlmm
    if not rlmm.is_ready(tp):
        rlmm.on_partition_leadership_changes(set(), {tp})
    rlmm.poll()
    metadata = segment_before(rlmm.list_remote_log_segments(tp), leader_local_log_start_offset)
    if metadata is None:
        raise RemoteStorageError(
            f"{tp}: no finished remote segment holds offset {leader_local_log_start_offset - 1} "
            "(the leader's local log starts after it) yet"
        )
    indexes = rlm.rsm.fetch_indexes(metadata, (IndexType.LEADER_EPOCH, IndexType.PRODUCER_SNAPSHOT))
    try:
        epochs = decode_leader_epoch_checkpoint(
            indexes.get(IndexType.LEADER_EPOCH, b""), f"{metadata.remote_log_segment_id}"
        )
    except CorruptCheckpointError as e:
        raise RemoteStorageError(f"{tp}: leader epochs of {metadata}: {e}") from e
    next_offset = metadata.end_offset + 1
    if not lg.restore_remote_log_aux_state(
        next_offset,
        leader_log_start_offset,
        epochs,
        indexes.get(IndexType.PRODUCER_SNAPSHOT),
        expected_log_end_offset=fetch_offset,
    ):
        log.info(
            "follower %s: not rebuilt from remote storage, its log moved on from %d to %d "
            "meanwhile",
            tp, fetch_offset, lg.log_end_offset,
        )  # fmt: skip
        return None
    log.info(
        "follower %s rebuilt from remote segment %s [%d, %d]: fetching from %d (leader's local "
        "log starts at %d, log start %d), %d leader epochs restored",
        tp,
        metadata.remote_log_segment_id,
        metadata.start_offset,
        metadata.end_offset,
        next_offset,
        leader_local_log_start_offset,
        leader_log_start_offset,
        len(epochs),
    )
    return next_offset
