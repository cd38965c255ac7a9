"""A :class:`tierlog.console.BrokerView` over fixed values, for the console's unit tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from tierlog.console.broker_view import (
    BrokerNode,
    ClusterSummary,
    FetchedBatches,
    GroupDetail,
    GroupMember,
    GroupOffset,
    GroupSummary,
    PartitionDetail,
    PartitionSummary,
    SegmentInfo,
    TopicSummary,
)
from tierlog.errors import NotLeaderOrFollower
from tierlog.records import build_batch

TOPIC = "orders"
RECORDS = 10


def summary(topic: str = TOPIC, partition: int = 0, hosted: bool = True) -> PartitionSummary:
    if not hosted:
        return PartitionSummary(topic, partition, False, 2, 1, (1, 2), (2,), *([None] * 13))
    return PartitionSummary(
        topic, partition, True, 0, 1, (0,), (0,), 0, 6, RECORDS, RECORDS, 300, 1, 600, 2, 5,
        0, 0, 0, 0,
    )  # fmt: skip


def batches(base: int, n: int) -> bytes:
    return build_batch(
        [(100 + base + i, f"k{base + i}".encode(), f"v{base + i}".encode()) for i in range(n)],
        base_offset=base,
    )


@dataclass
class FakeView:
    topic_name: str = TOPIC
    group_id: str = "g"
    client_id: str = "client"
    key_prefix: str = "k"
    #: What read() answers, in turn (the last one again when exhausted).
    reads: list[FetchedBatches] = field(default_factory=list)
    read_calls: list[int] = field(default_factory=list)
    fail_timestamp: bool = False
    #: (operation, resource type, name) the ACLs refuse; the hosts asked from.
    denied: set[tuple[str, str, str]] = field(default_factory=set)
    asked_hosts: set[str] = field(default_factory=set)

    def authorized(self, client_host: str, operation: str, resource_type: str, name: str) -> bool:
        self.asked_hosts.add(client_host)
        return (operation, resource_type, name) not in self.denied

    def cluster(self) -> ClusterSummary:
        me = BrokerNode(0, ("PLAINTEXT://127.0.0.1:9092",), None, True, True)
        return ClusterSummary("single node", "cid", 0, 0, (me,), True, ("/data",))

    def topics(self) -> list[TopicSummary]:
        return [
            TopicSummary(
                self.topic_name, "tid", 2, False, True, 300, 600, (("segment.bytes", "1"),)
            )
        ]

    async def topic_partitions(self, topic: str) -> list[PartitionSummary] | None:
        if topic != self.topic_name:
            return None
        return [summary(topic, 0), summary(topic, 1, hosted=False)]

    async def partition(self, topic: str, partition: int) -> PartitionDetail | None:
        if topic != self.topic_name or partition not in (0, 1):
            return None
        if partition == 1:
            return PartitionDetail(summary(topic, 1, hosted=False), ())
        segs = (
            SegmentInfo("remote", 0, 2, 300, (0,), "COPY_SEGMENT_FINISHED", 102, "id-a"),
            SegmentInfo("remote", 3, 5, 300, (0, 1), "COPY_SEGMENT_FINISHED", 105, "id-b"),
            SegmentInfo("local", 6, 9, 300, (1,), "active", 109),
        )
        return PartitionDetail(summary(topic, 0), segs)

    def _offsets(self) -> tuple[GroupOffset, ...]:
        return (GroupOffset(self.topic_name, 0, 4, RECORDS, RECORDS - 4, ""),
                GroupOffset(self.topic_name, 1, 3, None, None, "m"))  # fmt: skip

    async def groups(self) -> list[GroupSummary]:
        return [GroupSummary(self.group_id, "Stable", "consumer", "range", 1, RECORDS - 4)]

    async def group(self, group_id: str) -> GroupDetail | None:
        if group_id != self.group_id:
            return None
        member = GroupMember("m-1", None, self.client_id, "/127.0.0.1")
        return GroupDetail((await self.groups())[0], (member,), self._offsets())

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int:
        if self.fail_timestamp:
            raise NotLeaderOrFollower("not the leader")
        offset = timestamp - 100
        return offset if 0 <= offset < RECORDS else -1

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchedBatches:
        self.read_calls.append(offset)
        if self.reads:
            return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        base = offset - offset % 3  # batches of 3, as a log holds them
        return FetchedBatches(batches(base, min(3, RECORDS - base)) + batches(base + 3, 3)
                              if base + 3 < RECORDS else batches(base, RECORDS - base),
                              RECORDS, 0)  # fmt: skip
