"""What the web console may ask of a broker: the :class:`BrokerView` protocol and the plain
values it answers with.

The console never imports ``tierlog.server``: the broker hands it an object that implements
:class:`BrokerView` over its own parts (``tierlog.server.console_view``), as the group
coordinator reaches ``__consumer_offsets`` through its ``OffsetStore``. Every answer is a
frozen value, built on the broker's event loop thread and safe to render anywhere.

Offsets follow Kafka: ``end_offset`` of a segment is inclusive (Kafka's
``RemoteLogSegmentMetadata.endOffset``), the log end offset and high watermark are exclusive.
A number the broker does not know (a partition hosted elsewhere in a cluster, a gauge of a
partition that is not tiered) is ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "BrokerNode",
    "BrokerView",
    "ClusterSummary",
    "FetchedBatches",
    "GroupDetail",
    "GroupMember",
    "GroupOffset",
    "GroupSummary",
    "PartitionDetail",
    "PartitionSummary",
    "SegmentInfo",
    "TopicSummary",
]


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """A live broker: its id, advertised endpoints (``LISTENER://host:port``) and rack."""

    id: int
    endpoints: tuple[str, ...]
    rack: str | None
    is_controller: bool
    #: The broker serving this console.
    is_self: bool


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    """The cluster as this broker sees it: ``mode`` is ``"single node"`` or ``"ZooKeeper"``."""

    mode: str
    cluster_id: str
    local_broker_id: int
    controller_id: int | None
    brokers: tuple[BrokerNode, ...]
    tiered_storage: bool
    log_dirs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicSummary:
    """A topic: bytes and segments count what this broker hosts (local) and what its led
    partitions have in remote storage (COPY_SEGMENT_FINISHED)."""

    name: str
    topic_id: str
    partitions: int
    internal: bool
    remote_storage: bool
    local_bytes: int
    remote_bytes: int
    #: The topic-level config overrides.
    configs: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """One partition's leadership, offsets, bytes per tier and tiering lag.

    The lag numbers are the RemoteLogManager's gauges (``RemoteCopyLagBytes``,
    ``RemoteCopyLagSegments``, ``RemoteDeleteLagBytes``, ``RemoteDeleteLagSegments``): None
    while the partition is not tiered by this broker.
    """

    topic: str
    partition: int
    hosted: bool
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int | None
    local_log_start_offset: int | None
    high_watermark: int | None
    log_end_offset: int | None
    local_bytes: int | None
    local_segments: int | None
    remote_bytes: int | None
    remote_segments: int | None
    #: The highest offset in remote storage (-1: none; None: not tiered here).
    highest_tiered_offset: int | None
    copy_lag_bytes: int | None
    copy_lag_segments: int | None
    delete_lag_bytes: int | None
    delete_lag_segments: int | None


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A local or remote segment: its offsets (``end_offset`` inclusive), bytes, leader epochs
    and state (``active``/``rolled`` locally, the remote segment's RemoteLogSegmentState)."""

    tier: str  # "local" | "remote"
    start_offset: int
    end_offset: int
    size_bytes: int
    leader_epochs: tuple[int, ...]
    state: str
    #: The largest record timestamp (-1: none known).
    max_timestamp_ms: int
    #: The remote segment's id (Kafka's Uuid string); None for a local segment.
    segment_id: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionDetail:
    summary: PartitionSummary
    #: Remote segments by start offset, then local ones by base offset.
    segments: tuple[SegmentInfo, ...]


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """A consumer group this broker coordinates; ``lag`` sums the known per-partition lags."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: int
    lag: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """A committed offset; ``lag`` is the high watermark minus it (None when this broker does
    not host the partition, so does not know its high watermark)."""

    topic: str
    partition: int
    committed_offset: int
    high_watermark: int | None
    lag: int | None
    metadata: str


@dataclass(frozen=True, slots=True)
class GroupDetail:
    summary: GroupSummary
    members: tuple[GroupMember, ...]
    offsets: tuple[GroupOffset, ...]


@dataclass(frozen=True, slots=True)
class FetchedBatches:
    """Whole record batches read from ``offset`` by the broker's fetch path (local or
    remote); the console decodes only what it shows. ``error`` names a Kafka error code."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    error: str | None = None


class BrokerView(Protocol):
    """The broker's state, read on the event loop thread. Methods return None for a topic,
    partition or group the broker does not know. The async ones may wait for blocking work
    (opening logs, remote reads) done in other threads."""

    def authorized(self, client_host: str, operation: str, resource_type: str, name: str) -> bool:
        """Whether the console's user -- anonymous: ``User:ANONYMOUS`` from ``client_host``
        -- may do ``operation`` (``"DESCRIBE"``, ``"READ"``) on the ``resource_type``
        (``"TOPIC"``, ``"GROUP"``) ``name`` under the broker's ACLs; always True without an
        authorizer."""
        ...

    def cluster(self) -> ClusterSummary: ...

    def topics(self) -> list[TopicSummary]: ...

    async def topic_partitions(self, topic: str) -> list[PartitionSummary] | None:
        """Every partition of the topic (async: the broker may open their logs first, off
        its event loop)."""
        ...

    async def partition(self, topic: str, partition: int) -> PartitionDetail | None: ...

    async def groups(self) -> list[GroupSummary]: ...

    async def group(self, group_id: str) -> GroupDetail | None: ...

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int:
        """The first offset whose timestamp is >= ``timestamp`` (remote segments included),
        -1 when none.

        Raises:
            ApiError: the partition cannot answer (not its leader, remote storage failed).
        """
        ...

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchedBatches:
        """Batches from ``offset`` up to the high watermark, through the fetch path a consumer
        uses (remote storage for tiered offsets)."""
        ...
