"""The broker's side of the web console: :class:`ConsoleView` implements
:class:`tierlog.console.BrokerView` over the broker's own parts (log manager, replica manager,
RemoteLogManager, group coordinator, the cluster's metadata), so ``tierlog.console`` never
imports ``server``.

What it reads, and how:

* brokers and the controller: the cluster's metadata cache (ZooKeeper mode), or this node;
* topics and partitions: the log manager's registry (a cluster's metadata for leadership);
  topic sizes count only the logs already open, so listing topics opens none; a page showing
  partitions (a topic's, a group's) first opens their logs in a thread (a single node opens a
  log on its first use), then reads them on the event loop;
* remote segments: the RemoteLogMetadataManager's cache (in memory); tiering lag: the
  RemoteLogManager's gauges (``RemoteCopyLagBytes``...), read, not recomputed;
* ACLs: with an authorizer, the console's user is ``User:ANONYMOUS`` from the browser's
  address; the console lists what it may DESCRIBE and browses what it may READ;
* groups: the group coordinator's groups (those this broker coordinates), lag against the
  high watermark of the partitions this broker hosts;
* messages: :meth:`ReplicaManager.fetch` as a consumer's Fetch (read_uncommitted, up to the
  high watermark; remote storage for tiered offsets), so the browser is counted in
  BrokerTopicMetrics like any consumer; timestamps: ListOffsets' own lookup.

Runs on the event loop thread only (the replica manager's), like the handlers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
from tierlog.errors import ApiError, KafkaStorageError, TierlogError, for_code
from tierlog.log.topic_names import INTERNAL_TOPICS
from tierlog.security.authorizer import AclOperation, ResourceType
from tierlog.security.principal import ANONYMOUS
from tierlog.server.fetch_path import READ_UNCOMMITTED, FetchPartitionRequest
from tierlog.server.handlers.list_offsets import lookup_offset, lookup_offset_tiered
from tierlog.server.replica_manager import ReplicaManager
from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition, kafka_uuid_str
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState

if TYPE_CHECKING:
    from tierlog.cluster.partition import Partition
    from tierlog.cluster.zk_broker import ZkBroker
    from tierlog.coordinator.group.group_coordinator import GroupCoordinator
    from tierlog.coordinator.group.group_metadata import GroupMetadata
    from tierlog.log.log import Log
    from tierlog.log.log_manager import LogManager
    from tierlog.security.acl_checks import BrokerAuthorizer
    from tierlog.server.kafka_apis import BrokerEndpoint
    from tierlog.tiered.remote_log_manager import RemoteLogManager

__all__ = ["ConsoleView"]

log = logging.getLogger(__name__)

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


class ConsoleView:
    """:class:`tierlog.console.BrokerView` over a running broker. Event loop thread only."""

    def __init__(
        self,
        *,
        log_manager: LogManager,
        replica_manager: ReplicaManager,
        group_coordinator: GroupCoordinator,
        node_id: int,
        rack: str | None,
        endpoints: dict[str, BrokerEndpoint],
        zk_broker: ZkBroker | None,
        controller_active: Callable[[], bool],
        authorizer: BrokerAuthorizer | None = None,
    ) -> None:
        self._lm = log_manager
        self._rm = replica_manager
        self._gc = group_coordinator
        self._node_id = node_id
        self._rack = rack
        self._endpoints = endpoints
        self._zk = zk_broker
        self._controller_active = controller_active
        self._authorizer = authorizer

    @property
    def _rlm(self) -> RemoteLogManager | None:
        return self._rm.remote_log_manager

    # ----------------------------------------------------------------- ACLs

    def authorized(self, client_host: str, operation: str, resource_type: str, name: str) -> bool:
        """The broker's ACLs for ``User:ANONYMOUS`` from ``client_host`` (the console does not
        authenticate its users)."""
        a = self._authorizer
        if a is None:
            return True
        return a.authorize(
            ANONYMOUS, client_host, AclOperation[operation], ResourceType[resource_type], name
        )

    # ----------------------------------------------------------------- brokers

    def cluster(self) -> ClusterSummary:
        log_dirs = tuple(str(d) for d in self._lm.log_dirs)
        tiered = self._rlm is not None
        if self._zk is None:
            me = BrokerNode(
                self._node_id,
                tuple(f"{n}://{e.host}:{e.port}" for n, e in self._endpoints.items()),
                self._rack,
                is_controller=True,
                is_self=True,
            )
            return ClusterSummary(
                "single node", self._lm.cluster_id, self._node_id, self._node_id, (me,),
                tiered, log_dirs,
            )  # fmt: skip
        md = self._zk.metadata
        brokers = tuple(
            BrokerNode(
                b.id,
                tuple(f"{ep.listener}://{ep.host}:{ep.port}" for ep in b.endpoints),
                b.rack,
                is_controller=b.id == md.controller_id,
                is_self=b.id == self._node_id,
            )
            for b in sorted(md.brokers.values(), key=lambda b: b.id)
        )
        return ClusterSummary(
            "ZooKeeper", self._lm.cluster_id, self._node_id, md.controller_id, brokers,
            tiered, log_dirs,
        )  # fmt: skip

    # ----------------------------------------------------------------- topics

    def _topic_names(self) -> dict[str, tuple[str, int]]:
        """name -> (topic id, partition count), from the cluster's metadata when there is
        one (it knows topics this broker hosts no replica of), else the registry."""
        out: dict[str, tuple[str, int]] = {}
        for name, info in self._lm.topics().items():
            out[name] = (kafka_uuid_str(info.topic_id), info.num_partitions)
        if self._zk is not None:
            for t in self._zk.metadata.topics():
                tid = kafka_uuid_str(t.topic_id) if t.topic_id is not None else "-"
                out[t.name] = (tid, len(t.partitions))
        return out

    def topics(self) -> list[TopicSummary]:
        local: dict[str, int] = {}
        remote: dict[str, int] = {}
        for lg in self._lm.all_logs():  # the open logs only: listing topics opens none
            try:
                local[lg.topic] = local.get(lg.topic, 0) + lg.size_in_bytes
                size = self._remote_size(lg)
            except Exception as e:  # closed under us (a topic being deleted)
                log.debug("console: skipping %s-%d: %s", lg.topic, lg.partition, e)
                continue
            if size is not None:
                remote[lg.topic] = remote.get(lg.topic, 0) + size
        out = []
        for name, (tid, n) in sorted(self._topic_names().items()):
            info = self._lm.topic(name)
            if info is not None:
                remote_enabled = bool(info.config.remote_storage_enable)
                configs = tuple(sorted(info.overrides.items()))
            else:  # a topic this broker hosts no replica of: the cluster's view of it
                tm = self._zk.metadata.topic(name) if self._zk is not None else None
                overrides = dict(tm.configs) if tm is not None else {}
                remote_enabled = overrides.get("remote.storage.enable", "").lower() == "true"
                configs = tuple(sorted(overrides.items()))
            out.append(
                TopicSummary(
                    name=name,
                    topic_id=tid,
                    partitions=n,
                    internal=name in INTERNAL_TOPICS,
                    remote_storage=remote_enabled,
                    local_bytes=local.get(name, 0),
                    remote_bytes=remote.get(name, 0),
                    configs=configs,
                )
            )
        return out

    async def _open_logs(self, tps: list[tuple[str, int]]) -> None:
        """Open the logs of these partitions that are not open yet, in a thread (a single
        node opens a log on its first use: recovery reads files), so that a page listing many
        partitions does not hold the event loop."""
        unopened = set(tps) - {(lg.topic, lg.partition) for lg in self._lm.all_logs()}
        if not unopened:
            return

        def open_all() -> None:
            for topic, index in sorted(unopened):
                try:
                    self._lm.get_log(topic, index)
                except (KafkaStorageError, ApiError, KeyError, ValueError) as e:
                    log.debug("console: cannot open %s-%d: %s", topic, index, e)

        await asyncio.to_thread(open_all)

    async def topic_partitions(self, topic: str) -> list[PartitionSummary] | None:
        found = self._topic_names().get(topic)
        if found is None:
            return None
        await self._open_logs([(topic, i) for i in range(found[1])])
        return [self._summary(topic, i, self._partition(topic, i)) for i in range(found[1])]

    def _partition(self, topic: str, index: int) -> Partition | None:
        try:
            return self._rm.get_partition(topic, index)
        except KafkaStorageError:
            return None

    async def partition(self, topic: str, partition: int) -> PartitionDetail | None:
        found = self._topic_names().get(topic)
        if found is None or not 0 <= partition < found[1]:
            return None
        await self._open_logs([(topic, partition)])
        p = self._partition(topic, partition)
        if p is None:
            return PartitionDetail(self._summary(topic, partition, None), ())
        remote = self._remote_list(p)  # once: the summary and the rows agree
        summary = self._summary(topic, partition, p, remote)
        return PartitionDetail(
            summary, (*self._remote_segments(remote or []), *self._local_segments(p.log))
        )

    def _summary(
        self, topic: str, index: int, p: Partition | None, remote_list: list[Any] | None = None
    ) -> PartitionSummary:
        if p is None:
            leader, epoch = -1, -1
            replicas: tuple[int, ...] = ()
            isr: tuple[int, ...] = ()
            if self._zk is not None:
                pm = self._zk.metadata.partition(topic, index)
                if pm is not None:
                    leader, epoch, replicas, isr = pm.leader, pm.leader_epoch, pm.replicas, pm.isr
            return PartitionSummary(
                topic, index, False, leader, epoch, tuple(replicas), tuple(sorted(isr)),
                *([None] * 13),
            )  # fmt: skip
        lg = p.log
        lag = self._lag(p)
        if remote_list is None:
            remote_list = self._remote_list(p)
        remote = None if remote_list is None else [m for m in remote_list if m.state == _FINISHED]
        tiered = self._tiered_here(p)
        return PartitionSummary(
            topic=topic,
            partition=index,
            hosted=True,
            leader=p.leader_id,
            leader_epoch=p.leader_epoch,
            replicas=tuple(p.assigned_replicas),
            isr=tuple(sorted(p.isr)),
            log_start_offset=lg.log_start_offset,
            local_log_start_offset=lg.local_log_start_offset,
            high_watermark=lg.high_watermark,
            log_end_offset=lg.log_end_offset,
            local_bytes=lg.size_in_bytes,
            local_segments=lg.number_of_segments,
            remote_bytes=None if remote is None else sum(m.segment_size_in_bytes for m in remote),
            remote_segments=None if remote is None else len(remote),
            highest_tiered_offset=lg.highest_offset_in_remote_storage if tiered else None,
            copy_lag_bytes=lag.get("copy_lag_bytes"),
            copy_lag_segments=lag.get("copy_lag_segments"),
            delete_lag_bytes=lag.get("delete_lag_bytes"),
            delete_lag_segments=lag.get("delete_lag_segments"),
        )

    # ----------------------------------------------------------------- tiers

    def _tp(self, p: Partition) -> TopicIdPartition | None:
        return None if p.topic_id is None else TopicIdPartition(p.topic_id, p.topic, p.index)

    def _tiered_here(self, p: Partition) -> bool:
        """Whether this broker's RemoteLogManager manages the partition's remote tier."""
        return self._rlm is not None and p.topic_id is not None and p.log.remote_log_enabled

    def _remote_list(self, p: Partition) -> list[Any] | None:
        rlm, tp = self._rlm, self._tp(p)
        if rlm is None or tp is None or not self._tiered_here(p):
            return None
        try:
            return list(rlm.rlmm.list_remote_log_segments(tp))
        except TierlogError as e:  # metadata still loading
            log.debug("console: remote segments of %s not readable: %s", tp, e)
            return None

    def _remote_finished(self, p: Partition) -> list[Any] | None:
        segs = self._remote_list(p)
        return None if segs is None else [m for m in segs if m.state == _FINISHED]

    def _remote_size(self, lg: Log) -> int | None:
        p = self._rm.get_partition(lg.topic, lg.partition) if lg.remote_log_enabled else None
        if p is None:
            return None
        segs = self._remote_finished(p)
        return None if segs is None else sum(m.segment_size_in_bytes for m in segs)

    def _remote_segments(self, remote: list[Any]) -> list[SegmentInfo]:
        return [
            SegmentInfo(
                "remote",
                m.start_offset,
                m.end_offset,
                m.segment_size_in_bytes,
                tuple(m.segment_leader_epochs),
                m.state.name,
                m.max_timestamp_ms,
                kafka_uuid_str(m.remote_log_segment_id.id),
            )
            for m in remote
        ]

    def _local_segments(self, lg: Log) -> list[SegmentInfo]:
        segs = list(lg.segments.snapshot())
        end = lg.log_end_offset
        out = []
        for i, s in enumerate(segs):
            active = i == len(segs) - 1
            nxt = end if active else segs[i + 1].base_offset
            epochs = lg.leader_epoch_cache.epochs_between(
                s.base_offset, max(nxt, s.base_offset + 1)
            )
            out.append(
                SegmentInfo(
                    "local",
                    s.base_offset,
                    max(nxt - 1, s.base_offset - 1) if active else nxt - 1,
                    s.size,
                    tuple(epochs),
                    "active" if active else "rolled",
                    s.max_timestamp_so_far,
                )
            )
        return out

    def _lag(self, p: Partition) -> dict[str, int]:
        """The RemoteLogManager's lag gauges of a partition it tiers as leader."""
        rlm, tp = self._rlm, self._tp(p)
        if rlm is None or tp is None or not self._tiered_here(p) or not p.is_leader:
            return {}
        m = rlm.metrics.partition(tp)
        out = {}
        for name in ("copy_lag_bytes", "copy_lag_segments", "delete_lag_bytes",
                     "delete_lag_segments"):  # fmt: skip
            samples = getattr(m, name).collect()[0].samples
            out[name] = int(samples[0].value) if samples else 0
        return out

    # ----------------------------------------------------------------- groups

    def _high_watermark(self, topic: str, index: int) -> int | None:
        try:
            p = self._rm.get_partition(topic, index)
        except (KafkaStorageError, ApiError):
            return None
        return None if p is None else int(p.log.high_watermark)

    def _offsets(self, g: GroupMetadata) -> list[GroupOffset]:
        out = []
        for (topic, index), c in sorted(g.offsets.copy().items()):
            hw = self._high_watermark(topic, index)
            lag = None if hw is None else max(hw - c.offset, 0)
            out.append(GroupOffset(topic, index, c.offset, hw, lag, c.metadata))
        return out

    def _group_summary(self, g: GroupMetadata, offsets: list[GroupOffset]) -> GroupSummary:
        return GroupSummary(
            g.group_id,
            g.state.value,
            g.protocol_type or "",
            g.protocol_name or "",
            len(g.members),
            sum(o.lag for o in offsets if o.lag is not None),
        )

    async def groups(self) -> list[GroupSummary]:
        gs = sorted(self._gc.group_manager.current_groups(), key=lambda g: g.group_id)
        await self._open_logs([tp for g in gs for tp in g.offsets.copy()])
        return [self._group_summary(g, self._offsets(g)) for g in gs]

    async def group(self, group_id: str) -> GroupDetail | None:
        g = self._gc.group_manager.get_group(group_id)
        if g is None:
            return None
        await self._open_logs(list(g.offsets.copy()))
        if self._gc.group_manager.get_group(group_id) is not g:
            return None  # unloaded or deleted meanwhile
        offsets = self._offsets(g)
        members = tuple(
            GroupMember(m.member_id, m.group_instance_id, m.client_id, m.client_host)
            for m in g.members.values()
        )
        return GroupDetail(self._group_summary(g, offsets), members, tuple(offsets))

    # ----------------------------------------------------------------- messages

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int:
        p = self._rm.get_partition(topic, partition)
        if p is None:
            raise for_code(self._rm.not_here_error(topic, partition))()
        rlm = self._rlm
        if rlm is not None and self._tiered_here(p):
            _, offset = await asyncio.to_thread(
                lookup_offset_tiered, rlm, p, timestamp, READ_UNCOMMITTED
            )
        else:
            _, offset = lookup_offset(p.log, timestamp, READ_UNCOMMITTED)
        return offset

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchedBatches:
        p = self._partition(topic, partition)
        if p is not None and not p.is_leader:
            leader = f"broker {p.leader_id}" if p.leader_id >= 0 else "no broker"
            return FetchedBatches(
                b"", -1, -1,
                f"this broker only follows {topic}-{partition} ({leader} leads it): browse it "
                "on the leader's console",
            )  # fmt: skip
        req = FetchPartitionRequest(topic, partition, offset, max_bytes)
        (res,) = await self._rm.fetch(
            [req], max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
            isolation_level=READ_UNCOMMITTED,
        )  # fmt: skip
        error = None
        if res.error_code:
            error = f"{for_code(res.error_code).__name__} (error code {res.error_code})"
        return FetchedBatches(
            bytes(res.records or b""), res.high_watermark, res.log_start_offset, error
        )
