"""ACLs in a real ZooKeeper (the session's ``zookeeper`` fixture): Kafka's znodes and JSON,
change notifications that wake a watcher, compare-and-set under concurrent writers, the
resource znode deleted with its last ACL, and the purge of old change nodes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from tierlog.cluster.kafka_zk_client import KafkaZkClient
from tierlog.security.authorizer import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tierlog.security.zk_acl_store import CHANGE_EXPIRATION_MS, ZkAclStore


def acl(name, principal, op=AclOperation.READ, pattern=PatternType.LITERAL,
        rtype=ResourceType.TOPIC, perm=AclPermissionType.ALLOW) -> AclBinding:  # fmt: skip
    return AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, "*", op, perm)
    )


def data_of(zk: KafkaZkClient, path: str) -> bytes:
    got = zk.get_data(path)
    assert got is not None, f"{path} is missing"
    return got[0]


@pytest.fixture
def clients(zk_connect: str) -> Iterator[list[KafkaZkClient]]:
    made = []
    for _ in range(2):
        c = KafkaZkClient(zk_connect, session_timeout_ms=6000, connection_timeout_ms=15000)
        c.start()
        made.append(c)
    try:
        yield made
    finally:
        for c in made:
            c.close()


def test_kafkas_layout_and_a_round_trip(clients: list[KafkaZkClient]) -> None:
    store = ZkAclStore(clients[0])
    store.ensure_paths()
    wanted = [
        acl("orders", "User:alice"),
        acl("orders", "User:bob", AclOperation.WRITE, perm=AclPermissionType.DENY),
        acl("ord", "User:alice", AclOperation.WRITE, PatternType.PREFIXED),
        acl("g1", "User:*", rtype=ResourceType.GROUP),
        acl("tx", "User:alice", AclOperation.WRITE, rtype=ResourceType.TRANSACTIONAL_ID),
    ]
    store.add(wanted)
    zk = clients[1]
    assert json.loads(data_of(zk, "/kafka-acl/Topic/orders")) == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
             "host": "*"},
            {"principal": "User:bob", "permissionType": "Deny", "operation": "Write",
             "host": "*"},
        ],
    }  # fmt: skip
    assert zk.get_data("/kafka-acl-extended/prefixed/Topic/ord") is not None
    assert set(zk.get_children("/kafka-acl")) == {"Topic", "Group", "TransactionalId"}
    literal_changes = zk.get_children("/kafka-acl-changes")
    payloads = {data_of(zk, f"/kafka-acl-changes/{c}") for c in literal_changes}
    assert payloads == {b"Topic:orders", b"Group:g1", b"TransactionalId:tx"}
    (ext,) = zk.get_children("/kafka-acl-extended-changes")
    assert json.loads(data_of(zk, f"/kafka-acl-extended-changes/{ext}")) == {
        "version": 1,
        "resourceType": "TOPIC",
        "name": "ord",
        "patternType": "PREFIXED",
    }
    # another broker's store reads the same bindings
    assert sorted(ZkAclStore(zk).load(), key=str) == sorted(wanted, key=str)
    # the last ACL of a resource takes its znode with it
    store.remove([wanted[0], wanted[1]])
    assert zk.get_data("/kafka-acl/Topic/orders") is None
    store.remove([wanted[0]])  # idempotent
    assert sorted(ZkAclStore(zk).load(), key=str) == sorted(wanted[2:], key=str)


def test_concurrent_writers_lose_no_acl(clients: list[KafkaZkClient]) -> None:
    """Two brokers add ACLs to the same resource at once: the compare-and-set retries, so all
    of them land."""
    stores = [ZkAclStore(c) for c in clients]
    stores[0].ensure_paths()
    barrier = threading.Barrier(2)

    def writer(i: int) -> None:
        barrier.wait()
        for n in range(10):
            stores[i].add([acl("shared", f"User:w{i}-{n}")])

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    got = {b.entry.principal for b in stores[0].load()}
    assert got == {f"User:w{i}-{n}" for i in range(2) for n in range(10)}


def test_a_watcher_hears_of_changes_and_old_notifications_are_purged(
    clients: list[KafkaZkClient],
) -> None:
    writer, reader = ZkAclStore(clients[0]), ZkAclStore(clients[1])
    writer.ensure_paths()
    calls: list[float] = []
    reader.watch(lambda: calls.append(time.monotonic()))
    first = len(calls)  # once per change path at arming
    writer.add([acl("w", "User:alice", AclOperation.WRITE, PatternType.PREFIXED)])
    deadline = time.monotonic() + 30
    while len(calls) == first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(calls) > first, "no change notification reached the watcher"
    assert reader.load() == [acl("w", "User:alice", AclOperation.WRITE, PatternType.PREFIXED)]
    reader.close()
    assert writer.purge_obsolete_changes() == 0  # fresh ones stay
    later = int(time.time() * 1000) + CHANGE_EXPIRATION_MS + 60_000
    assert writer.purge_obsolete_changes(now_ms=later) == 1
    assert clients[0].get_children("/kafka-acl-extended-changes") == []
