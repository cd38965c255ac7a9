"""Hypothesis strategies and builders for remote log metadata."""

from __future__ import annotations

import uuid

from hypothesis import strategies as st

from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState as S
from tierlog.tiered.remote_log_segment_state import RemotePartitionDeleteState

TP = TopicIdPartition(uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "orders", 3)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
uuids = st.binary(min_size=16, max_size=16).map(lambda b: uuid.UUID(bytes=b))
topic_id_partitions = st.builds(
    TopicIdPartition, uuids, st.text(max_size=40), st.integers(0, 2**31 - 1)
)
custom_metadata = st.none() | st.binary(max_size=200)


def segment(
    start: int,
    end: int,
    epochs: dict[int, int] | None = None,
    *,
    sid: uuid.UUID | None = None,
    tp: TopicIdPartition = TP,
    state: S = S.COPY_SEGMENT_STARTED,
    size: int = 1000,
    event_ts: int = 1_700_000_000_000,
    max_ts: int | None = None,
    broker: int = 1,
    custom: bytes | None = None,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, sid or uuid.uuid4()),
        start,
        end,
        max_ts if max_ts is not None else event_ts - 1000,
        broker,
        event_ts,
        size,
        epochs if epochs is not None else {0: start},
        custom,
        state,
    )


def update(
    md: RemoteLogSegmentMetadata,
    state: S,
    *,
    event_ts: int = 1_700_000_001_000,
    broker: int = 1,
    custom: bytes | None = None,
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, event_ts, custom, state, broker)


@st.composite
def segment_metadata(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start = draw(st.integers(0, 2**62))
    end = draw(st.integers(start, 2**63 - 1))
    epochs = draw(st.dictionaries(INT32, st.integers(start, end), min_size=1, max_size=5))
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(draw(topic_id_partitions), draw(uuids)),
        start,
        end,
        draw(INT64),
        draw(INT32),
        draw(INT64),
        draw(INT32),
        epochs,
        draw(custom_metadata),
        draw(st.sampled_from(S)),
        draw(st.booleans()),
    )


segment_updates = st.builds(
    RemoteLogSegmentMetadataUpdate,
    st.builds(RemoteLogSegmentId, topic_id_partitions, uuids),
    INT64,
    custom_metadata,
    st.sampled_from(S),
    INT32,
)
partition_deletes = st.builds(
    RemotePartitionDeleteMetadata,
    topic_id_partitions,
    st.sampled_from(RemotePartitionDeleteState),
    INT64,
    INT32,
)


@st.composite
def snapshots(draw: st.DrawFn) -> RemoteLogSegmentMetadataSnapshot:
    md = draw(segment_metadata())
    return RemoteLogSegmentMetadataSnapshot.create(md)


any_metadata = segment_metadata() | segment_updates | partition_deletes | snapshots()
