"""InitProducerId (22) for idempotent producers.

Every call gets a fresh producer id (never reused, see ProducerIdManager) with epoch 0; a
producer bumping its epoch after an error (KIP-360) simply starts over with a new id, which
restarts its sequence numbers as well. Transactions are out of scope: a transactional id is
refused with INVALID_REQUEST (42) and a broker log line saying why.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import ApiError, InvalidRequest
from tierlog.security.acl_checks import idempotent_write_error, transactional_id_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

INIT_PRODUCER_ID = 22
TRANSACTIONS_UNSUPPORTED = "transactions are not supported by tierlog (transactional.id set)"


def handle_init_producer_id(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    cls = response_class(INIT_PRODUCER_ID, ev.api_version)
    if req.transactional_id is not None:
        denied = transactional_id_error(apis, AclOperation.WRITE, req.transactional_id)
    else:
        denied = idempotent_write_error(apis)
    if denied:
        return build(
            cls,
            {"throttle_time": 0, "error_code": denied, "producer_id": -1, "producer_epoch": -1},
        )
    if req.transactional_id is not None:
        log.warning(
            "InitProducerId from client %r with transactional.id %r refused: %s",
            ev.client_id,
            req.transactional_id,
            TRANSACTIONS_UNSUPPORTED,
        )
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": InvalidRequest.error_code,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
    try:
        pid = apis.producer_id_manager.generate_producer_id()
    except ApiError as e:
        log.error("cannot allocate a producer id: %s", e)
        return build(
            cls,
            {
                "throttle_time": 0,
                "error_code": e.error_code,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
    return build(
        cls, {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}
    )
