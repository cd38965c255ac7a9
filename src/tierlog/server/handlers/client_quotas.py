"""DescribeClientQuotas (48) and AlterClientQuotas (49) (``kafka-configs --entity-type users
/clients``); the work is :class:`~tierlog.server.client_quotas.ClientQuotas`'. Describing
needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS (else
CLUSTER_AUTHORIZATION_FAILED), as Kafka."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog.security.acl_checks import cluster_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49


def handle_describe_client_quotas(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(DESCRIBE_CLIENT_QUOTAS, ev.api_version)
    entries: list[dict[str, Any]]
    message: str | None
    if denied := cluster_error(apis, AclOperation.DESCRIBE_CONFIGS):
        code, message, entries = denied, "Cluster authorization failed.", []
    else:
        code, message, entries = apis.client_quotas.describe(
            [(c.entity_type, int(c.match_type), c.match) for c in req.components], req.strict
        )
    return build(
        cls,
        {
            "throttle_time": 0,
            "error_code": code,
            "error_message": message,
            "entries": entries if not code else None,
        },
    )


def handle_alter_client_quotas(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(ALTER_CLIENT_QUOTAS, ev.api_version)
    wire = [
        (
            [(e.entity_type, e.entity_name) for e in entry.entity],
            [(op.key, float(op.value), op.remove) for op in entry.ops],
        )
        for entry in req.entries
    ]

    def response(results: list[tuple[int, str | None]]) -> Any:
        return build(
            cls,
            {
                "throttle_time": 0,
                "entries": [
                    {
                        "error_code": code,
                        "error_message": message,
                        "entity": [{"entity_type": t, "entity_name": n} for t, n in components],
                    }
                    for (components, _ops), (code, message) in zip(wire, results, strict=True)
                ],
            },
        )

    if denied := cluster_error(apis, AclOperation.ALTER_CONFIGS):
        return response([(denied, "Cluster authorization failed.")] * len(wire))
    quotas = apis.client_quotas

    async def respond() -> Any:
        return response(await quotas.alter(wire, req.validate_only))

    return respond()
