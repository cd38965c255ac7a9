"""InitProducerId (22): idempotent and transactional producers.

Without a transactional id every call gets a fresh producer id (never reused, see
ProducerIdManager) with epoch 0; a producer bumping its epoch after an error (KIP-360) simply
starts over with a new id, which restarts its sequence numbers as well.

With a transactional id the transaction coordinator answers
(:meth:`~tierlog.coordinator.transaction.TransactionCoordinator.init_producer_id`): the
id's producer id with a bumped epoch, fencing older instances. ``__transaction_state`` is
created on first use (:mod:`tierlog.server.txn_state_topic`). v3+ carries the producer's
current (producer id, epoch) for KIP-360's epoch bump; both or neither must be set
(INVALID_REQUEST). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4 (KIP-588).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    ApiError,
    CoordinatorNotAvailable,
    InvalidProducerEpoch,
    InvalidRequest,
    ProducerFenced,
)
from tierlog.security.acl_checks import idempotent_write_error, transactional_id_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class
from tierlog.server.txn_state_topic import ensure_transaction_state_topic

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

INIT_PRODUCER_ID = 22


def _ms(v: Any) -> int:
    if isinstance(v, int):
        return v
    return round(float(v.total_seconds()) * 1000)


def handle_init_producer_id(apis: KafkaApis, ev: Request) -> Any:
    req = ev.request
    version = ev.api_version
    cls = response_class(INIT_PRODUCER_ID, version)

    def answer(code: int, pid: int = -1, epoch: int = -1) -> Any:
        if code == ProducerFenced.error_code and version < 4:
            code = InvalidProducerEpoch.error_code
        return build(
            cls,
            {"throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch},
        )

    txn_id = req.transactional_id
    if txn_id is not None:
        denied = transactional_id_error(apis, AclOperation.WRITE, txn_id)
    else:
        denied = idempotent_write_error(apis)
    if denied:
        return answer(denied)
    if txn_id is None:
        try:
            return answer(0, apis.producer_id_manager.generate_producer_id(), 0)
        except ApiError as e:
            log.error("cannot allocate a producer id: %s", e)
            return answer(e.error_code)
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if (pid == -1) != (epoch == -1):
        return answer(InvalidRequest.error_code)
    tc = getattr(apis, "txn_coordinator", None)
    if tc is None or not ensure_transaction_state_topic(apis):
        return answer(CoordinatorNotAvailable.error_code)
    coro = tc.init_producer_id(
        txn_id, _ms(req.transaction_timeout), None if pid == -1 else (pid, epoch)
    )

    async def respond() -> Any:
        code, new_pid, new_epoch = await coro
        return answer(code, new_pid, new_epoch)

    return respond()
