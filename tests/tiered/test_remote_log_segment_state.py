from __future__ import annotations

import itertools

import pytest

from tierlog.tiered.remote_log_segment_state import (
    RemoteLogSegmentState as S,
)
from tierlog.tiered.remote_log_segment_state import (
    RemotePartitionDeleteState as P,
)
from tierlog.tiered.remote_log_segment_state import (
    is_valid_partition_delete_transition,
    is_valid_transition,
)

SEGMENT_ALLOWED = {
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
} | {(s, s) for s in S}

PARTITION_ALLOWED = {
    (None, P.DELETE_PARTITION_MARKED),
    (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED),
    (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED),
} | {(s, s) for s in P}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product([None, *S], S)))
def test_every_segment_transition(src, dst):
    assert is_valid_transition(src, dst) == ((src, dst) in SEGMENT_ALLOWED)


@pytest.mark.parametrize(("src", "dst"), list(itertools.product([None, *P], P)))
def test_every_partition_delete_transition(src, dst):
    assert is_valid_partition_delete_transition(src, dst) == ((src, dst) in PARTITION_ALLOWED)


def test_wire_ids():
    assert [s.value for s in S] == [0, 1, 2, 3]
    assert [p.value for p in P] == [0, 1, 2]
    assert S.for_id(2) is S.DELETE_SEGMENT_STARTED
    with pytest.raises(ValueError):
        S.for_id(4)
    with pytest.raises(ValueError):
        P.for_id(3)
