"""ACLs in ZooKeeper, Kafka's ZK-mode layout (cluster-reference.md §1, Kafka's ``ZkAclStore``
and ``ZkAclChangeStore``)::

    /kafka-acl/<ResourceType>/<name>                     LITERAL patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>   PREFIXED patterns
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                 "Topic:orders"
    /kafka-acl-extended-changes/acl_changes_<seq>
        {"version":1,"resourceType":"TOPIC","name":"ord","patternType":"PREFIXED"}

A resource's znode is updated with a compare-and-set on its version (retried when another
broker wrote in between), then a sequential change node is created; every broker watches both
change paths and reloads. ``<ResourceType>`` is Kafka's name (``Topic``, ``Group``,
``Cluster``, ``TransactionalId``).

Blocking (ZooKeeper round trips): called from worker threads, never on the event loop.
Thread-safe, as the :class:`~tierlog.cluster.kafka_zk_client.KafkaZkClient` under it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tierlog.cluster.zookeeper_client import create_call, delete_call, set_call
from tierlog.errors import ZooKeeperClientError
from tierlog.security.acl_store import (
    acl_from_json,
    acl_to_json,
    resource_type_from_name,
    resource_type_name,
)
from tierlog.security.authorizer import AclBinding, PatternType, ResourcePattern

if TYPE_CHECKING:
    from tierlog.cluster.kafka_zk_client import KafkaZkClient
    from tierlog.cluster.zk_watches import WatchHandle

__all__ = ["ZkAclStore"]

log = logging.getLogger(__name__)

LITERAL_ACL_PATH = "/kafka-acl"
PREFIXED_ACL_PATH = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
_ROOTS = {PatternType.LITERAL: LITERAL_ACL_PATH, PatternType.PREFIXED: PREFIXED_ACL_PATH}
_CAS_ATTEMPTS = 20
#: Kafka's ``ZkNodeChangeNotificationListener.changeExpirationMs``: older change nodes go.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


def resource_path(p: ResourcePattern) -> str:
    return f"{_ROOTS[p.pattern_type]}/{resource_type_name(p.resource_type)}/{p.name}"


class ZkAclStore:
    """ACLs of a ZooKeeper cluster; see the module docstring."""

    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk
        self._watches: list[WatchHandle] = []

    def ensure_paths(self) -> None:
        self.zk.ensure_paths(
            [LITERAL_ACL_PATH, PREFIXED_ACL_PATH, LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH]
        )

    # ----------------------------------------------------------------- reads

    def load(self) -> list[AclBinding]:
        """Every ACL in ZooKeeper (and the change nodes older than 15 minutes deleted, as
        every Kafka broker does when it processes notifications)."""
        self.purge_obsolete_changes()
        out: list[AclBinding] = []
        for pattern_type, root in _ROOTS.items():
            for type_name in self.zk.get_children(root):
                rtype = resource_type_from_name(type_name)
                if rtype is None:
                    log.warning("ignoring ACLs of unknown resource type %s", type_name)
                    continue
                for name in self.zk.get_children(f"{root}/{type_name}"):
                    pattern = ResourcePattern(rtype, name, pattern_type)
                    acls, _ = self._read(pattern)
                    out.extend(AclBinding(pattern, e) for e in acls)
        return out

    def _read(self, p: ResourcePattern) -> tuple[list[Any], int]:
        """The resource's ACLs and its znode version (-1: no znode)."""
        got = self.zk.get_data(resource_path(p))
        if got is None:
            return [], -1
        data, stat = got
        try:
            doc = json.loads(data.decode()) if data else {"acls": []}
            acls = [acl_from_json(a) for a in doc.get("acls", [])]
        except (ValueError, KeyError, TypeError) as e:
            log.warning("ignoring unreadable ACL znode %s: %s", resource_path(p), e)
            acls = []
        return acls, int(stat.version)

    def purge_obsolete_changes(self, now_ms: int | None = None) -> int:
        """Delete change nodes created more than :data:`CHANGE_EXPIRATION_MS` ago; how many."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        gone = 0
        for root in (LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH):
            for child in self.zk.get_children(root):
                got = self.zk.get_data(f"{root}/{child}")
                if got is not None and now - int(got[1].ctime) > CHANGE_EXPIRATION_MS:
                    self.zk.delete_if_exists(f"{root}/{child}")
                    gone += 1
        return gone

    # ----------------------------------------------------------------- writes

    def add(self, bindings: Iterable[AclBinding]) -> None:
        self._update(bindings, adding=True)

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        self._update(bindings, adding=False)

    def _update(self, bindings: Iterable[AclBinding], *, adding: bool) -> None:
        by_pattern: dict[ResourcePattern, list[Any]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, []).append(b.entry)
        for pattern, entries in by_pattern.items():
            self._cas(pattern, entries, adding=adding)
            self._notify(pattern)

    def _cas(self, p: ResourcePattern, entries: list[Any], *, adding: bool) -> None:
        path = resource_path(p)
        for _ in range(_CAS_ATTEMPTS):
            current, version = self._read(p)
            if adding:
                new = list(dict.fromkeys([*current, *entries]))
            else:
                gone = set(entries)
                new = [e for e in current if e not in gone]
            if new == current and version >= 0:
                return
            data = json.dumps(
                {"version": 1, "acls": [acl_to_json(e) for e in new]}, separators=(",", ":")
            ).encode()
            try:
                if version < 0:
                    if not new:
                        return
                    self.zk._one(create_call(path, data))  # the client's retrying single request
                elif new:
                    self.zk._one(set_call(path, data, version))
                else:
                    # Kafka deletes the znode of a resource whose last ACL went.
                    self.zk._one(delete_call(path, version))
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker wrote in between: read again
        raise ZooKeeperClientError(f"{path}: ACL update lost {_CAS_ATTEMPTS} races in a row")

    def _notify(self, p: ResourcePattern) -> None:
        if p.pattern_type == PatternType.LITERAL:
            path = f"{LITERAL_CHANGES_PATH}/{CHANGE_PREFIX}"
            data = f"{resource_type_name(p.resource_type)}:{p.name}".encode()
        else:
            path = f"{EXTENDED_CHANGES_PATH}/{CHANGE_PREFIX}"
            data = json.dumps(
                {
                    "version": 1,
                    "resourceType": p.resource_type.name,
                    "name": p.name,
                    "patternType": p.pattern_type.name,
                },
                separators=(",", ":"),
            ).encode()
        self.zk._one(create_call(path, data, sequence=True))

    # ----------------------------------------------------------------- watches

    def watch(self, on_change: Callable[[], None]) -> None:
        """``on_change()`` after any ACL change anywhere in the cluster (and once now per
        change path). It runs in kazoo's callback thread: it must only enqueue work."""
        for path in (LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH):
            self._watches.append(self.zk.watch_children(path, lambda _children: on_change()))

    def close(self) -> None:
        for w in self._watches:
            w.cancel()
        self._watches.clear()
