"""WriteTxnMarkers (27): a transaction coordinator asks this broker, the leader of the
partitions, to write COMMIT/ABORT markers (Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``).

A thin wrapper over :meth:`ReplicaManager.append_txn_markers`: every (producer, partition) of
the request becomes one :class:`~tierlog.log.transaction_marker.TxnMarker`, written and waited
for as acks=all, and answered with its own error code. CLUSTER_ACTION on the cluster is
required (only brokers send it): CLUSTER_AUTHORIZATION_FAILED (31) on every partition
otherwise. kio has versions 1 and 2 (Kafka 4 dropped v0); v2's ``transaction_version``
(KIP-890's TV2 marker) is accepted and written as any marker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog.log.transaction_marker import TxnMarker
from tierlog.security.acl_checks import cluster_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

WRITE_TXN_MARKERS = 27


def handle_write_txn_markers(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(WRITE_TXN_MARKERS, ev.api_version)
    denied = cluster_error(apis, AclOperation.CLUSTER_ACTION)
    markers = [
        TxnMarker(
            producer_id=m.producer_id,
            producer_epoch=m.producer_epoch,
            coordinator_epoch=m.coordinator_epoch,
            commit=bool(m.transaction_result),
            topic=t.name,
            partition=index,
        )
        for m in req.markers
        for t in m.topics
        for index in t.partition_indexes
    ]

    def answer(codes: dict[tuple[int, str, int], int]) -> Any:
        out = []
        for m in req.markers:
            out.append(
                {
                    "producer_id": m.producer_id,
                    "topics": [
                        {
                            "name": t.name,
                            "partitions": [
                                {
                                    "partition_index": index,
                                    "error_code": codes.get((m.producer_id, t.name, index), 0),
                                }
                                for index in t.partition_indexes
                            ],
                        }
                        for t in m.topics
                    ],
                }
            )
        return build(cls, {"markers": out})

    if denied:
        return answer({(m.producer_id, m.topic, m.partition): denied for m in markers})

    async def respond() -> Any:
        return answer(await apis.replica_manager.append_txn_markers(markers))

    return respond()
