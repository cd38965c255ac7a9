"""Security APIs: SaslHandshake (17) and SaslAuthenticate (36) on listeners without SASL,
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

On SASL listeners the connection's :class:`~tierlog.security.sasl_server.SaslServerAuthenticator`
answers SaslHandshake and SaslAuthenticate before any handler sees them; here they come only
from PLAINTEXT and SSL listeners, and get ILLEGAL_SASL_STATE (34) as in Kafka.

SCRAM credentials live in the broker's :class:`~tierlog.security.credential_store.CredentialStore`.
AlterUserScramCredentials follows Kafka's checks, per user: a user named twice in one request
gets DUPLICATE_RESOURCE (92), an unknown mechanism UNSUPPORTED_SASL_MECHANISM (33), too few or
too many iterations, an empty name or salt UNACCEPTABLE_CREDENTIAL (93), deleting a credential
that does not exist RESOURCE_NOT_FOUND (91); a user with any error changes nothing, the others
are applied (one atomic write of the credential file, in a worker thread).

Without an authorizer (the ACL work that follows) any client may call them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import (
    ApiError,
    DuplicateResource,
    IllegalSaslState,
    ResourceNotFound,
    UnacceptableCredential,
    UnsupportedSaslMechanism,
)
from tierlog.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
)
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)


def handle_sasl_handshake(apis: KafkaApis, ev: Request) -> Any:
    """SaslHandshake on a listener without SASL: ILLEGAL_SASL_STATE, no mechanisms."""
    cls = response_class(ev.api_key, ev.api_version)
    return build(cls, {"error_code": IllegalSaslState.error_code, "mechanisms": ()})


def handle_sasl_authenticate(apis: KafkaApis, ev: Request) -> Any:
    """SaslAuthenticate on a listener without SASL: ILLEGAL_SASL_STATE (Kafka's message)."""
    cls = response_class(ev.api_key, ev.api_version)
    return build(
        cls,
        {
            "error_code": IllegalSaslState.error_code,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"",
        },
    )


def handle_describe_user_scram_credentials(apis: KafkaApis, ev: Request) -> Any:
    cls = response_class(ev.api_key, ev.api_version)
    store = apis.credentials
    if store is None:
        return build(cls, _top_error(UnsupportedSaslMechanism("SCRAM is not configured")))
    known = store.users()
    wanted = ev.request.users
    results: list[dict[str, Any]] = []
    if not wanted:
        names = sorted(known)
        results = [_described(u, known[u]) for u in names]
    else:
        counts: dict[str, int] = {}
        for u in wanted:
            counts[u.name] = counts.get(u.name, 0) + 1
        for name in dict.fromkeys(u.name for u in wanted):
            if counts[name] > 1:
                err: ApiError = DuplicateResource(
                    "Cannot describe SCRAM credentials for the same user twice in a single request"
                )
                results.append(_user_error(name, err, credential_infos=()))
            elif name not in known:
                err = ResourceNotFound("Attempt to describe a user credential that does not exist")
                results.append(_user_error(name, err, credential_infos=()))
            else:
                results.append(_described(name, known[name]))
    return build(cls, {"error_code": 0, "error_message": None, "results": results})


def _described(user: str, creds: dict[ScramMechanism, int]) -> dict[str, Any]:
    infos = [
        {"mechanism": m.code, "iterations": i}
        for m, i in sorted(creds.items(), key=lambda kv: kv[0].code)
    ]
    return {"user": user, "error_code": 0, "error_message": None, "credential_infos": infos}


def _user_error(user: str, err: ApiError, **extra: Any) -> dict[str, Any]:
    return {"user": user, "error_code": err.error_code, "error_message": err.message, **extra}


def _top_error(err: ApiError) -> dict[str, Any]:
    return {"error_code": err.error_code, "error_message": err.message, "results": ()}


def handle_alter_user_scram_credentials(apis: KafkaApis, ev: Request) -> Any:
    cls = response_class(ev.api_key, ev.api_version)
    store = apis.credentials
    req = ev.request
    order = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
    if store is None:
        err = UnsupportedSaslMechanism("SCRAM is not configured")
        return build(cls, {"results": [_user_error(u, err) for u in order]})
    existing = store.users()
    errors: dict[str, ApiError] = {}
    pairs: dict[tuple[str, int], int] = {}
    for item in (*req.deletions, *req.upsertions):
        pairs[(item.name, item.mechanism)] = pairs.get((item.name, item.mechanism), 0) + 1

    def fail(user: str, err: ApiError) -> None:
        errors.setdefault(user, err)

    for (user, _), n in pairs.items():
        if n > 1:
            fail(
                user,
                DuplicateResource("A user credential cannot be altered twice in the same request"),
            )
    deletions: list[tuple[str, ScramMechanism]] = []
    for d in req.deletions:
        m = _mechanism(d.name, d.mechanism, fail)
        if m is None:
            continue
        if m not in existing.get(d.name, {}):
            fail(
                d.name, ResourceNotFound("Attempt to delete a user credential that does not exist")
            )
            continue
        deletions.append((d.name, m))
    upserts: list[tuple[str, ScramMechanism, ScramCredential]] = []
    for u in req.upsertions:
        m = _mechanism(u.name, u.mechanism, fail)
        if m is None:
            continue
        if u.iterations < MIN_ITERATIONS:
            fail(u.name, UnacceptableCredential("Too few iterations"))
        elif u.iterations > MAX_ITERATIONS:
            fail(u.name, UnacceptableCredential("Too many iterations"))
        elif not u.salt:
            fail(u.name, UnacceptableCredential("Salt must not be empty"))
        elif not u.salted_password:
            fail(u.name, UnacceptableCredential("Salted password must not be empty"))
        else:
            cred = credential_from_salted_password(
                m, bytes(u.salt), bytes(u.salted_password), int(u.iterations)
            )
            upserts.append((u.name, m, cred))
    upserts = [x for x in upserts if x[0] not in errors]
    deletions = [x for x in deletions if x[0] not in errors]

    def response() -> Any:
        results = [_user_error(u, errors[u]) if u in errors else _ok(u) for u in order]
        return build(cls, {"results": results})

    if not upserts and not deletions:
        return response()

    async def write() -> Any:
        await asyncio.to_thread(store.alter, upserts, deletions)
        for user, m, _ in upserts:
            log.info("SCRAM credential of %s for %s set", user, m.mechanism_name)
        for user, m in deletions:
            log.info("SCRAM credential of %s for %s deleted", user, m.mechanism_name)
        return response()

    return write()


def _ok(user: str) -> dict[str, Any]:
    return {"user": user, "error_code": 0, "error_message": None}


def _mechanism(user: str, code: int, fail: Any) -> ScramMechanism | None:
    if not user:
        fail(user, UnacceptableCredential("Username must not be empty"))
        return None
    m = ScramMechanism.for_code(int(code))
    if m is None:
        fail(user, UnsupportedSaslMechanism("Unknown SCRAM mechanism"))
    return m
