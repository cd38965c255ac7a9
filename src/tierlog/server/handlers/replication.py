"""OffsetsForLeaderEpoch (23) on the leader: where a leader epoch ends in this broker's log.

Kafka's followers that predate KIP-595 ask, for each partition, the end offset of their own
latest epoch and truncate what they hold beyond it (KIP-101, KIP-279; tierlog's followers
learn the same from the Fetch's diverging epoch instead, one round trip less). Consumers ask,
to detect truncation after a leader change (KIP-320). Per partition (Kafka's
``ReplicaManager.lastOffsetForLeaderEpoch`` and ``Partition.lastOffsetForLeaderEpoch``):

* no such partition here: NOT_LEADER_OR_FOLLOWER (6) when the cluster has it on other
  brokers, else UNKNOWN_TOPIC_OR_PARTITION (3); its log cannot be opened:
  KAFKA_STORAGE_ERROR (56);
* ``current_leader_epoch`` (v2+; -1 = not given) fenced against the partition's leader
  epoch, and only the leader answers (:meth:`Partition.leader_epoch_error`);
* else the leader epoch cache's ``endOffsetFor(leader_epoch, log end offset)``: the largest
  epoch <= the requested one and the start offset of the epoch after it (the log end offset
  for the latest epoch); a requested epoch below every cached one answers itself with the
  first epoch's start offset. An empty cache, an undefined (-1) or a too-large epoch answers
  leader epoch -1, end offset -1 with no error (Kafka's ``UNDEFINED_EPOCH`` /
  ``UNDEFINED_EPOCH_OFFSET``; the follower then truncates to its high watermark).

``replica_id`` (v3+: the follower's broker id, -1 for a consumer, -2 for debugging tools) does
not change the answer, as in Kafka 3.7: the request is always served by the leader only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import KafkaStorageError
from tierlog.log.leader_epoch_file_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.cluster.partition import Partition
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

OFFSET_FOR_LEADER_EPOCH = 23
NO_PARTITION_LEADER_EPOCH = -1
"""Kafka's ``RecordBatch.NO_PARTITION_LEADER_EPOCH``: ``current_leader_epoch`` not given."""


def last_offset_for_leader_epoch(
    partition: Partition, current_leader_epoch: int, leader_epoch: int
) -> tuple[int, int, int]:
    """``(error code, leader epoch, end offset)`` of one partition: Kafka's
    ``Partition.lastOffsetForLeaderEpoch`` (see the module docstring)."""
    code = partition.leader_epoch_error(current_leader_epoch)
    if code:
        return code, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    lg = partition.log
    epoch, end_offset = lg.leader_epoch_cache.end_offset_for(leader_epoch, lg.log_end_offset)
    if end_offset == UNDEFINED_EPOCH_OFFSET:
        return 0, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    return 0, epoch, end_offset


def handle_offset_for_leader_epoch(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    rm = apis.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            current = getattr(p, "current_leader_epoch", NO_PARTITION_LEADER_EPOCH)
            try:
                part = rm.get_partition(t.topic, p.partition)
                code = rm.not_here_error(t.topic, p.partition)
            except KafkaStorageError as e:
                part, code = None, e.error_code
            epoch, end_offset = UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if part is not None:
                try:
                    code, epoch, end_offset = last_offset_for_leader_epoch(
                        part, current, p.leader_epoch
                    )
                except OSError as e:
                    log.error("OffsetsForLeaderEpoch on %s-%d failed: %s", t.topic, p.partition, e)
                    code = KafkaStorageError.error_code
            parts.append(
                {
                    "partition": p.partition,
                    "error_code": code,
                    "leader_epoch": epoch,
                    "end_offset": end_offset,
                }
            )
        topics.append({"topic": t.topic, "partitions": parts})
    cls = response_class(OFFSET_FOR_LEADER_EPOCH, ev.api_version)
    return build(cls, {"throttle_time": 0, "topics": topics})
