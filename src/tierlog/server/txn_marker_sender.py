"""The broker's side of the transaction coordinator's marker channel: where each marker goes.

:class:`TxnMarkerSender` implements
:class:`~tierlog.coordinator.transaction.transaction_marker_channel_manager.TxnMarkerWriter`:
a partition this broker leads gets its marker in-process
(``ReplicaManager.append_txn_markers``, which waits as acks=all would); in a cluster the other
partitions' leaders get WriteTxnMarkers (API 27, v1) over
:class:`~tierlog.cluster.broker_client.BrokerClient`, one connection per leader, opened on first
use and again after a failure. A partition without a live leader, a leader that cannot be
reached or answers NOT_LEADER_OR_FOLLOWER is reported as such; the channel retries it.

Not thread-safe: the event loop's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tierlog.coordinator.transaction.transaction_marker_channel_manager import TxnMarkerEntry
from tierlog.errors import (
    BrokerNotAvailableError,
    NotLeaderOrFollower,
    UnknownTopicOrPartition,
)
from tierlog.log.transaction_marker import TxnMarker
from tierlog.protocol.api_versions import request_class
from tierlog.server.handlers._build import build

if TYPE_CHECKING:
    from tierlog.cluster.broker_client import BrokerClient
    from tierlog.cluster.zk_broker import ZkBroker
    from tierlog.log.log_manager import LogManager
    from tierlog.server.replica_manager import ReplicaManager

__all__ = ["TxnMarkerSender"]

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
_REQUEST_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 10.0

Key = tuple[int, str, int]


class TxnMarkerSender:
    """Writes markers to the partitions' leaders (this broker's in-process, others' over
    WriteTxnMarkers)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        log_manager: LogManager,
        node_id: int,
        cluster: ZkBroker | None = None,
    ) -> None:
        self._rm = replica_manager
        self._lm = log_manager
        self._node_id = node_id
        self._cluster = cluster
        self._clients: dict[int, BrokerClient] = {}

    def partition_exists(self, topic: str, partition: int) -> bool:
        if self._cluster is not None:
            t = self._cluster.metadata.topic(topic)
            return t is not None and partition in t.partitions
        info = self._lm.topic(topic)
        return info is not None and 0 <= partition < info.num_partitions

    async def write_txn_markers(self, entries: Sequence[TxnMarkerEntry]) -> Mapping[Key, int]:
        local: list[TxnMarker] = []
        remote: dict[int, list[TxnMarkerEntry]] = {}
        out: dict[Key, int] = {}
        for e in entries:
            for topic, partition in e.partitions:
                leader = self._leader(topic, partition)
                if leader is None:
                    out[(e.producer_id, topic, partition)] = NotLeaderOrFollower.error_code
                elif leader == self._node_id:
                    local.append(
                        TxnMarker(
                            e.producer_id,
                            e.producer_epoch,
                            e.coordinator_epoch,
                            e.commit,
                            topic,
                            partition,
                        )
                    )
                else:
                    remote.setdefault(leader, []).append(
                        TxnMarkerEntry(
                            e.producer_id,
                            e.producer_epoch,
                            e.coordinator_epoch,
                            e.commit,
                            ((topic, partition),),
                        )
                    )
        jobs = [self._send(leader, es) for leader, es in remote.items()]
        if local:
            jobs.append(self._append_local(local))
        for result in await asyncio.gather(*jobs):
            out.update(result)
        return out

    def _leader(self, topic: str, partition: int) -> int | None:
        if self._cluster is None:
            return self._node_id if self.partition_exists(topic, partition) else None
        leader = self._cluster.metadata.leader(topic, partition)
        return None if leader is None else leader[0]

    async def _append_local(self, markers: list[TxnMarker]) -> Mapping[Key, int]:
        try:
            return await self._rm.append_txn_markers(markers)
        except Exception as e:
            log.warning("writing %d markers locally failed: %r", len(markers), e)
            return {
                (m.producer_id, m.topic, m.partition): UnknownTopicOrPartition.error_code
                for m in markers
            }

    async def _send(self, broker_id: int, entries: list[TxnMarkerEntry]) -> Mapping[Key, int]:
        keys = [(e.producer_id, t, p) for e in entries for t, p in e.partitions]
        failed = dict.fromkeys(keys, NotLeaderOrFollower.error_code)
        try:
            client = await self._client(broker_id)
            if client is None:
                return failed
            markers = []
            for e in entries:
                by_topic: dict[str, list[int]] = {}
                for t, p in e.partitions:
                    by_topic.setdefault(t, []).append(p)
                markers.append(
                    {
                        "producer_id": e.producer_id,
                        "producer_epoch": e.producer_epoch,
                        "transaction_result": e.commit,
                        "topics": [
                            {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()
                        ],
                        "coordinator_epoch": e.coordinator_epoch,
                    }
                )
            request = build(request_class(WRITE_TXN_MARKERS, 1), {"markers": markers})
            response: Any = await client.request(request, timeout_s=_REQUEST_TIMEOUT_S)
        except (BrokerNotAvailableError, OSError) as e:
            log.info("WriteTxnMarkers to broker %d failed: %s", broker_id, e)
            stale = self._clients.pop(broker_id, None)
            if stale is not None:
                await stale.close()
            return failed
        out = dict(failed)
        for m in response.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[(int(m.producer_id), str(t.name), int(p.partition_index))] = int(
                        p.error_code.value
                    )
        return out

    async def _client(self, broker_id: int) -> BrokerClient | None:
        from tierlog.cluster.broker_client import BrokerClient

        client = self._clients.get(broker_id)
        if client is not None and client.connected:
            return client
        assert self._cluster is not None
        address = self._cluster.broker_address(broker_id)
        if address is None:
            return None
        client = BrokerClient(f"tierlog-broker-{self._node_id}-txn-markers")
        await client.connect(*address, timeout_s=_CONNECT_TIMEOUT_S)
        self._clients[broker_id] = client
        return client

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()
