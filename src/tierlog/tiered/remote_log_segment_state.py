"""Lifecycles of a remote log segment and of a remote partition deletion (Kafka's enums).

Both state machines live here, as data: :data:`SEGMENT_TRANSITIONS` and
:data:`PARTITION_DELETE_TRANSITIONS` map a source state (``None`` = not yet known) to the states
it may move to. A self transition is always valid: a retried or failed-over publisher may send
the same state twice (Kafka's ``isValidTransition``).

The ids are the wire values of the metadata records' ``RemoteLogSegmentState`` and
``RemotePartitionDeleteState`` int8 fields.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class RemoteLogSegmentState(enum.IntEnum):
    """State of a remote log segment, driven by the remote log manager.

    ::

        +---------------------+            +----------------------+
        |COPY_SEGMENT_STARTED |----------->|COPY_SEGMENT_FINISHED |
        +-------------------+-+            +--+-------------------+
                            |                 |
                            v                 v
                         +--+-----------------+-+
                         |DELETE_SEGMENT_STARTED|
                         +-----------+----------+
                                     |
                                     v
                         +-----------+-----------+
                         |DELETE_SEGMENT_FINISHED|
                         +-----------------------+

    Only COPY_SEGMENT_FINISHED segments are readable. STARTED and DELETE_SEGMENT_STARTED ones
    are listed so that a failed copy or delete can be cleaned up; DELETE_SEGMENT_FINISHED is
    terminal and the segment is forgotten.
    """

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @classmethod
    def for_id(cls, state_id: int) -> RemoteLogSegmentState:
        """The state with this wire id. Raises ValueError for an unknown id."""
        return cls(state_id)


class RemotePartitionDeleteState(enum.IntEnum):
    """Deletion state of a remote topic partition (topic deletion).

    ::

        +-------------------------+
        |DELETE_PARTITION_MARKED  |   sent by the controller
        +-----------+-------------+
                    |
                    v
        +-----------+--------------+
        |DELETE_PARTITION_STARTED  |   remote partition remover begins deleting segments
        +-----------+--------------+
                    |
                    v
        +-----------+--------------+
        |DELETE_PARTITION_FINISHED |   every segment deleted; the partition is forgotten
        +--------------------------+
    """

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    @classmethod
    def for_id(cls, state_id: int) -> RemotePartitionDeleteState:
        """The state with this wire id. Raises ValueError for an unknown id."""
        return cls(state_id)


_S = RemoteLogSegmentState
_P = RemotePartitionDeleteState

#: Allowed segment transitions, self transitions excluded (they are always allowed).
SEGMENT_TRANSITIONS: Mapping[RemoteLogSegmentState | None, frozenset[RemoteLogSegmentState]] = {
    None: frozenset({_S.COPY_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_STARTED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset(),
}

#: Allowed partition-deletion transitions, self transitions excluded.
PARTITION_DELETE_TRANSITIONS: Mapping[
    RemotePartitionDeleteState | None, frozenset[RemotePartitionDeleteState]
] = {
    None: frozenset({_P.DELETE_PARTITION_MARKED}),
    _P.DELETE_PARTITION_MARKED: frozenset({_P.DELETE_PARTITION_STARTED}),
    _P.DELETE_PARTITION_STARTED: frozenset({_P.DELETE_PARTITION_FINISHED}),
    _P.DELETE_PARTITION_FINISHED: frozenset(),
}


def is_valid_transition(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState) -> bool:
    """Whether a segment may move from ``src`` (None: unknown segment) to ``dst``."""
    return (src is not None and src == dst) or dst in SEGMENT_TRANSITIONS[src]


def is_valid_partition_delete_transition(
    src: RemotePartitionDeleteState | None, dst: RemotePartitionDeleteState
) -> bool:
    """Whether a partition deletion may move from ``src`` (None: not marked) to ``dst``."""
    return (src is not None and src == dst) or dst in PARTITION_DELETE_TRANSITIONS[src]


__all__ = [
    "RemoteLogSegmentState",
    "RemotePartitionDeleteState",
    "SEGMENT_TRANSITIONS",
    "PARTITION_DELETE_TRANSITIONS",
    "is_valid_transition",
    "is_valid_partition_delete_transition",
]
