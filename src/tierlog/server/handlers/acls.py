"""ACL APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31), Kafka's answers.

Without an authorizer (``authorizer.class.name`` empty) each answers SECURITY_DISABLED (54).
DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER; otherwise
CLUSTER_AUTHORIZATION_FAILED (31), at the top of DescribeAcls and on every result of the others.
A creation Kafka would refuse (a filter-only value, a principal without a type, a CLUSTER not
named ``kafka-cluster`` ...) gets INVALID_REQUEST (42) with Kafka's message; the valid ones are
stored in one write. A store failure answers UNKNOWN_SERVER_ERROR (-1) on the affected results.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tierlog.errors import InvalidRequest, SecurityDisabled
from tierlog.security.acl_checks import CLUSTER_AUTHORIZATION_FAILED, cluster_error
from tierlog.security.authorizer import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.server.kafka_apis import KafkaApis, Request

log = logging.getLogger(__name__)

_DISABLED = (SecurityDisabled.error_code, "No Authorizer is configured on the broker")
_DENIED = (CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


def _enum(cls: Any, v: int) -> Any:
    try:
        return cls(int(v))
    except ValueError:
        return cls.UNKNOWN


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        resource_type=_enum(ResourceType, f.resource_type_filter),
        name=f.resource_name_filter,
        pattern_type=_enum(PatternType, getattr(f, "pattern_type_filter", 3)),
        principal=f.principal_filter,
        host=f.host_filter,
        operation=_enum(AclOperation, f.operation),
        permission_type=_enum(AclPermissionType, f.permission_type),
    )


def _filter_error(f: AclBindingFilter) -> str | None:
    if AclOperation.UNKNOWN in (f.operation,) or f.permission_type == AclPermissionType.UNKNOWN:
        return "Filter contains UNKNOWN elements"
    if f.resource_type == ResourceType.UNKNOWN or f.pattern_type == PatternType.UNKNOWN:
        return "Filter contains UNKNOWN elements"
    return None


def handle_describe_acls(apis: KafkaApis, ev: Request) -> Any:
    cls = response_class(ev.api_key, ev.api_version)

    def top(code: int, message: str | None) -> Any:
        return build(cls, {"error_code": code, "error_message": message, "resources": []})

    if apis.authorizer is None:
        return top(*_DISABLED)
    if cluster_error(apis, AclOperation.DESCRIBE):
        return top(*_DENIED)
    f = _filter(ev.request)
    bad = _filter_error(f)
    if bad is not None:
        return top(InvalidRequest.error_code, bad)
    grouped: dict[ResourcePattern, list[dict[str, Any]]] = {}
    for b in apis.authorizer.authorizer.acls(f):
        grouped.setdefault(b.pattern, []).append(_entry(b.entry))
    resources = [
        {
            "resource_type": int(p.resource_type),
            "resource_name": p.name,
            "pattern_type": int(p.pattern_type),
            "acls": acls,
        }
        for p, acls in grouped.items()
    ]
    return build(cls, {"error_code": 0, "error_message": None, "resources": resources})


def _entry(e: AccessControlEntry) -> dict[str, Any]:
    return {
        "principal": e.principal,
        "host": e.host,
        "operation": int(e.operation),
        "permission_type": int(e.permission_type),
    }


def handle_create_acls(apis: KafkaApis, ev: Request) -> Any:
    cls = response_class(ev.api_key, ev.api_version)
    creations = ev.request.creations

    def all_(code: int, message: str | None) -> Any:
        results = [{"error_code": code, "error_message": message} for _ in creations]
        return build(cls, {"results": results})

    authorizer = apis.authorizer
    if authorizer is None:
        return all_(*_DISABLED)
    if cluster_error(apis, AclOperation.ALTER):
        return all_(*_DENIED)
    results: list[dict[str, Any]] = []
    valid: list[tuple[dict[str, Any], AclBinding]] = []
    for c in creations:
        out: dict[str, Any] = {"error_code": 0, "error_message": None}
        results.append(out)
        b = AclBinding(
            ResourcePattern(
                _enum(ResourceType, c.resource_type),
                c.resource_name,
                _enum(PatternType, getattr(c, "resource_pattern_type", 3)),
            ),
            AccessControlEntry(
                c.principal,
                c.host,
                _enum(AclOperation, c.operation),
                _enum(AclPermissionType, c.permission_type),
            ),
        )
        try:
            b.validate()
        except InvalidAclError as e:
            out.update(error_code=InvalidRequest.error_code, error_message=str(e))
            continue
        valid.append((out, b))
    if not valid:
        return build(cls, {"results": results})

    async def create() -> Any:
        try:
            await authorizer.create([b for _, b in valid])
        except Exception as e:
            log.warning("CreateAcls failed: %s", e)
            for out, _ in valid:
                out.update(error_code=-1, error_message=f"storing the ACLs failed: {e}")
        return build(cls, {"results": results})

    return create()


def handle_delete_acls(apis: KafkaApis, ev: Request) -> Any:
    cls = response_class(ev.api_key, ev.api_version)
    filters = ev.request.filters

    def all_(code: int, message: str | None) -> Any:
        results: list[dict[str, Any]] = [
            {"error_code": code, "error_message": message, "matching_acls": []} for _ in filters
        ]
        return build(cls, {"filter_results": results})

    authorizer = apis.authorizer
    if authorizer is None:
        return all_(*_DISABLED)
    if cluster_error(apis, AclOperation.ALTER):
        return all_(*_DENIED)
    parsed = [_filter(f) for f in filters]
    errors = [_filter_error(f) for f in parsed]
    wanted = [f for f, e in zip(parsed, errors, strict=True) if e is None]

    async def delete() -> Any:
        try:
            matched = iter(await authorizer.delete(wanted))
        except Exception as e:
            log.warning("DeleteAcls failed: %s", e)
            return all_(-1, f"deleting the ACLs failed: {e}")
        results: list[dict[str, Any]] = []
        for err in errors:
            if err is not None:
                results.append(
                    {"error_code": InvalidRequest.error_code, "error_message": err,
                     "matching_acls": []}
                )  # fmt: skip
                continue
            results.append(
                {
                    "error_code": 0,
                    "error_message": None,
                    "matching_acls": [
                        {
                            "error_code": 0,
                            "error_message": None,
                            "resource_type": int(b.pattern.resource_type),
                            "resource_name": b.pattern.name,
                            "pattern_type": int(b.pattern.pattern_type),
                            **_entry(b.entry),
                        }
                        for b in next(matched)
                    ],
                }
            )
        return build(cls, {"filter_results": results})

    return delete()
