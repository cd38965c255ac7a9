"""Where ACLs persist: Kafka's JSON form of an ACL, and the single-node file
``<first log dir>/acls.json``.

Each ACL is written as Kafka writes it in ZooKeeper's ``/kafka-acl/<ResourceType>/<name>``
(cluster-reference.md §1), so the file and the znodes hold the same values::

    {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}

The file groups them by resource pattern::

    {"version": 1,
     "resources": [{"resourceType": "Topic", "name": "orders", "patternType": "LITERAL",
                    "acls": [{"principal": ..., "permissionType": ..., ...}]}]}

Written atomically (a temporary file, fsync, rename, fsync of the directory), as the SCRAM
credential file is: a crash leaves the old or the new file. :class:`AclStore` is the interface
the broker's authorizer writes through; the cluster's is
:class:`~tierlog.security.zk_acl_store.ZkAclStore`.

:class:`LocalAclStore` is thread-safe (one lock); adding an ACL that is there or removing one
that is gone changes nothing (idempotent).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from tierlog.errors import ConfigError
from tierlog.security.authorizer import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

__all__ = [
    "ACLS_FILE",
    "AclStore",
    "LocalAclStore",
    "acl_from_json",
    "acl_to_json",
    "resource_type_from_name",
    "resource_type_name",
]

ACLS_FILE = "acls.json"

# Kafka's SecurityUtils names (resourceTypeName, operationName, permissionTypeName).
_RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
_RESOURCE_BY_NAME = {v.lower(): k for k, v in _RESOURCE_NAMES.items()}
_OPERATION_NAMES = {
    AclOperation.ALL: "All",
    AclOperation.READ: "Read",
    AclOperation.WRITE: "Write",
    AclOperation.CREATE: "Create",
    AclOperation.DELETE: "Delete",
    AclOperation.ALTER: "Alter",
    AclOperation.DESCRIBE: "Describe",
    AclOperation.CLUSTER_ACTION: "ClusterAction",
    AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
    AclOperation.ALTER_CONFIGS: "AlterConfigs",
    AclOperation.IDEMPOTENT_WRITE: "IdempotentWrite",
    AclOperation.CREATE_TOKENS: "CreateTokens",
    AclOperation.DESCRIBE_TOKENS: "DescribeTokens",
}
_OPERATION_BY_NAME = {v.lower(): k for k, v in _OPERATION_NAMES.items()}
_PERMISSION_NAMES = {AclPermissionType.ALLOW: "Allow", AclPermissionType.DENY: "Deny"}
_PERMISSION_BY_NAME = {v.lower(): k for k, v in _PERMISSION_NAMES.items()}


def resource_type_name(t: ResourceType) -> str:
    """Kafka's name of a resource type in ZooKeeper paths (``Topic``, ``TransactionalId``)."""
    return _RESOURCE_NAMES[t]


def resource_type_from_name(name: str) -> ResourceType | None:
    """The resource type a ZooKeeper path names (any case, ``TOPIC`` or ``Topic``)."""
    return _RESOURCE_BY_NAME.get(name.replace("_", "").lower())


def acl_to_json(e: AccessControlEntry) -> dict[str, str]:
    return {
        "principal": e.principal,
        "permissionType": _PERMISSION_NAMES[e.permission_type],
        "operation": _OPERATION_NAMES[e.operation],
        "host": e.host,
    }


def acl_from_json(d: Any) -> AccessControlEntry:
    """Raises: ValueError, KeyError, TypeError: not an ACL in Kafka's form."""
    op = _OPERATION_BY_NAME.get(str(d["operation"]).replace("_", "").lower())
    perm = _PERMISSION_BY_NAME.get(str(d["permissionType"]).lower())
    if op is None or perm is None:
        raise ValueError(f"unknown operation or permission type in {d!r}")
    return AccessControlEntry(str(d["principal"]), str(d["host"]), op, perm)


class AclStore(Protocol):
    """Durable ACLs. Blocking (file or ZooKeeper I/O): the broker calls them in a thread."""

    def load(self) -> list[AclBinding]:
        """Every stored binding."""
        ...

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Store bindings (validated already)."""
        ...

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        """Drop bindings."""
        ...


class LocalAclStore:
    """The ACLs of a single node in one JSON file (see the module docstring).

    Raises:
        ConfigError: (from :meth:`load`) the file exists but is not an ACL file; the broker
            refuses to start rather than run without the ACLs in it.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    @classmethod
    def in_log_dir(cls, log_dir: Path) -> LocalAclStore:
        return cls(Path(log_dir) / ACLS_FILE)

    def load(self) -> list[AclBinding]:
        with self._lock:
            return list(self._read())

    def add(self, bindings: Iterable[AclBinding]) -> None:
        with self._lock:
            current = self._read()
            for b in bindings:
                current[b] = None
            self._write(current)

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        with self._lock:
            current = self._read()
            for b in bindings:
                current.pop(b, None)
            self._write(current)

    def _read(self) -> dict[AclBinding, None]:
        out: dict[AclBinding, None] = {}
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return out
        try:
            doc = json.loads(text)
            for r in doc["resources"]:
                rtype = resource_type_from_name(str(r["resourceType"]))
                if rtype is None:
                    raise ValueError(f"unknown resource type {r['resourceType']!r}")
                pattern = ResourcePattern(
                    rtype, str(r["name"]), PatternType[str(r["patternType"]).upper()]
                )
                for a in r["acls"]:
                    out[AclBinding(pattern, acl_from_json(a))] = None
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(str(self.path), f"not an ACL file: {e}") from None
        return out

    def _write(self, bindings: Iterable[AclBinding]) -> None:
        grouped: dict[ResourcePattern, list[dict[str, str]]] = {}
        for b in bindings:
            grouped.setdefault(b.pattern, []).append(acl_to_json(b.entry))
        doc = {
            "version": 1,
            "resources": [
                {
                    "resourceType": resource_type_name(p.resource_type),
                    "name": p.name,
                    "patternType": p.pattern_type.name,
                    "acls": acls,
                }
                for p, acls in grouped.items()
            ],
        }
        write_atomically(self.path, (json.dumps(doc, indent=1) + "\n").encode())


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a temporary file, fsync, rename, fsync of the directory.

    Raises:
        OSError: the file cannot be written (the old one is left as it was).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
