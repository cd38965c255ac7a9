"""The broker's authorizer: the decision cache (same answers as the uncached rules, cleared by
every change), the local ACL file (atomic, Kafka's JSON names, survives a reopen), KIP-679's
"WRITE on any topic" and the handler-facing checks' error codes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import ConfigError
from tierlog.security import acl_checks
from tierlog.security.acl_checks import BrokerAuthorizer, authorizer_from_config
from tierlog.security.acl_store import LocalAclStore
from tierlog.security.authorizer import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tierlog.security.principal import KafkaPrincipal
from tierlog.server.kafka_config import KafkaConfig

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
ALICE = KafkaPrincipal("User", "alice")


def acl(rtype, name, principal, op, perm=ALLOW, pattern=LIT, host="*") -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm)
    )


class MemoryStore:
    def __init__(self) -> None:
        self.bindings: dict[AclBinding, None] = {}
        self.fail = False

    def load(self) -> list[AclBinding]:
        return list(self.bindings)

    def add(self, bindings) -> None:
        if self.fail:
            raise OSError("disk full")
        for b in bindings:
            self.bindings[b] = None

    def remove(self, bindings) -> None:
        for b in bindings:
            self.bindings.pop(b, None)


def run(coro):
    return asyncio.run(coro)


def started(store, *, super_users=(), allow_if_none=False) -> BrokerAuthorizer:
    a = BrokerAuthorizer(
        AclAuthorizer(super_users, allow_everyone_if_no_acl_found=allow_if_none), store
    )
    run(a.start())
    return a


def test_create_and_delete_clear_the_cache_and_go_through_the_store() -> None:
    store = MemoryStore()
    a = started(store)
    assert not a.authorize(ALICE, "10.0.0.1", Op.WRITE, TOPIC, "orders")  # cached: denied
    run(a.create([acl(TOPIC, "ord", "User:alice", Op.WRITE, pattern=PRE)]))
    assert a.authorize(ALICE, "10.0.0.1", Op.WRITE, TOPIC, "orders")
    assert list(store.bindings) == [acl(TOPIC, "ord", "User:alice", Op.WRITE, pattern=PRE)]
    removed = run(a.delete([AclBindingFilter(resource_type=TOPIC, pattern_type=PatternType.MATCH,
                                             name="orders")]))  # fmt: skip
    assert removed == [[acl(TOPIC, "ord", "User:alice", Op.WRITE, pattern=PRE)]]
    assert not store.bindings
    assert not a.authorize(ALICE, "10.0.0.1", Op.WRITE, TOPIC, "orders")


def test_a_failed_store_write_changes_nothing() -> None:
    store = MemoryStore()
    a = started(store)
    store.fail = True
    with pytest.raises(OSError, match="disk full"):
        run(a.create([acl(TOPIC, "t", "User:alice", Op.READ)]))
    assert not a.authorizer.acls()
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")


def test_a_change_elsewhere_reloads_from_the_store() -> None:
    store = MemoryStore()

    async def scenario() -> None:
        a = BrokerAuthorizer(AclAuthorizer(), store)
        await a.start()
        assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")
        store.add([acl(TOPIC, "t", "User:alice", Op.READ)])  # another broker wrote it
        a.changed()
        for _ in range(200):
            if a.authorize(ALICE, "h", Op.READ, TOPIC, "t"):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the reload never applied the new ACL")

    run(scenario())


names = st.sampled_from(["a", "ab", "abc", "b", "*"])
bindings = st.builds(
    acl,
    st.sampled_from([TOPIC, GROUP]),
    st.sampled_from(["a", "ab", "abc", "b"]) | st.just("*"),
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL]),
    st.sampled_from([ALLOW, DENY]),
    st.sampled_from([LIT, PRE]),
    st.sampled_from(["*", "10.0.0.1"]),
)
questions = st.tuples(
    st.sampled_from(["User:alice", "User:bob"]),
    st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE]),
    st.sampled_from([TOPIC, GROUP]),
    st.sampled_from(["a", "ab", "abc", "b", "c"]),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(bindings, max_size=4), min_size=1, max_size=4),
    st.lists(questions, min_size=1, max_size=12),
)
def test_the_cache_answers_as_the_rules_across_changes(batches, asked) -> None:
    """Each batch is created, the questions asked (twice: cached), then the first binding of
    the batch deleted; the cached answers always equal a fresh authorizer's."""
    store = MemoryStore()
    a = started(store)
    for batch in batches:
        if batch:
            run(a.create(batch))
        for _ in range(2):
            for who, host, op, rtype, name in asked:
                fresh = AclAuthorizer()
                fresh.add_acls(store.load())
                assert a.authorize(who, host, op, rtype, name) == fresh.authorize(
                    who, host, op, rtype, name
                )
        if batch:
            b = batch[0]
            run(a.delete([AclBindingFilter(b.pattern.resource_type, b.pattern.name,
                                           b.pattern.pattern_type, b.entry.principal,
                                           b.entry.host, b.entry.operation,
                                           b.entry.permission_type)]))  # fmt: skip


def test_local_store_file_is_kafkas_json_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "acls.json"
    store = LocalAclStore(path)
    wanted = [
        acl(TOPIC, "orders", "User:alice", Op.READ),
        acl(TOPIC, "ord", "User:bob", Op.WRITE, DENY, PRE, host="10.0.0.9"),
        acl(CLUSTER, CLUSTER_NAME, "User:ops", Op.CLUSTER_ACTION),
        acl(ResourceType.TRANSACTIONAL_ID, "tx", "User:*", Op.IDEMPOTENT_WRITE),
    ]
    store.add(wanted)
    store.add(wanted[:1])  # idempotent
    doc = json.loads(path.read_text())
    assert doc["version"] == 1
    first = doc["resources"][0]
    assert first == {
        "resourceType": "Topic",
        "name": "orders",
        "patternType": "LITERAL",
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
             "host": "*"}
        ],
    }  # fmt: skip
    assert {r["resourceType"] for r in doc["resources"]} == {
        "Topic", "Cluster", "TransactionalId"}  # fmt: skip
    assert sorted(LocalAclStore(path).load(), key=str) == sorted(wanted, key=str)
    store.remove(wanted[1:])
    assert LocalAclStore(path).load() == wanted[:1]
    assert not (tmp_path / "acls.json.tmp").exists()


def test_a_damaged_acl_file_stops_the_broker_rather_than_open_everything(tmp_path: Path) -> None:
    path = tmp_path / "acls.json"
    path.write_text('{"version": 1, "resources": [{"resourceType": "Topic"}]}')
    with pytest.raises(ConfigError, match="not an ACL file"):
        LocalAclStore(path).load()


def test_write_on_any_topic_allows_an_idempotent_producer() -> None:
    """KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic; a DENY on every topic
    (``*``) takes that back."""
    store = MemoryStore()
    a = started(store)
    ctx = SimpleNamespace(authorizer=a, principal=ALICE, client_host="h")
    assert acl_checks.idempotent_write_error(ctx) == 31
    run(a.create([acl(TOPIC, "logs-", "User:alice", Op.WRITE, pattern=PRE)]))
    assert acl_checks.idempotent_write_error(ctx) == 0
    run(a.create([acl(TOPIC, "*", "User:alice", Op.WRITE, DENY)]))
    assert acl_checks.idempotent_write_error(ctx) == 31
    run(a.create([acl(CLUSTER, CLUSTER_NAME, "User:alice", Op.IDEMPOTENT_WRITE)]))
    assert acl_checks.idempotent_write_error(ctx) == 0


def test_checks_give_kafkas_codes_and_nothing_without_an_authorizer() -> None:
    off = SimpleNamespace(authorizer=None, principal=ALICE, client_host="h")
    no_attr = SimpleNamespace(principal=ALICE, client_host="h")  # handler test doubles
    for ctx in (off, no_attr):
        assert acl_checks.topic_error(ctx, Op.WRITE, "t") == 0
        assert acl_checks.cluster_error(ctx, Op.ALTER) == 0
        assert acl_checks.follower_or_topic_error(ctx, 1, Op.READ, "t") == 0
    a = started(MemoryStore(), super_users={"User:admin"})
    ctx = SimpleNamespace(authorizer=a, principal=ALICE, client_host="h")
    admin = SimpleNamespace(authorizer=a, principal=KafkaPrincipal("User", "admin"),
                            client_host="h")  # fmt: skip
    assert acl_checks.topic_error(ctx, Op.WRITE, "t") == 29
    assert acl_checks.group_error(ctx, Op.READ, "g") == 30
    assert acl_checks.cluster_error(ctx, Op.ALTER) == 31
    assert acl_checks.transactional_id_error(ctx, Op.WRITE, "tx") == 53
    assert acl_checks.config_resource_error(ctx, Op.DESCRIBE_CONFIGS, 2, "t") == 29
    assert acl_checks.config_resource_error(ctx, Op.DESCRIBE_CONFIGS, 4, "0") == 31
    for check in (
        lambda c: acl_checks.topic_error(c, Op.WRITE, "t"),
        lambda c: acl_checks.group_error(c, Op.READ, "g"),
        lambda c: acl_checks.cluster_error(c, Op.ALTER),
    ):
        assert check(admin) == 0
    # a follower needs CLUSTER_ACTION, whatever its topic ACLs
    run(a.create([acl(TOPIC, "t", "User:alice", Op.READ)]))
    assert acl_checks.follower_or_topic_error(ctx, -1, Op.READ, "t") == 0
    assert acl_checks.follower_or_topic_error(ctx, 2, Op.READ, "t") == 29
    run(a.create([acl(CLUSTER, CLUSTER_NAME, "User:alice", Op.CLUSTER_ACTION)]))
    assert acl_checks.follower_or_topic_error(ctx, 2, Op.READ, "other") == 0
    # CREATE on the cluster or the topic
    assert acl_checks.create_topic_error(ctx, "new") == 29
    run(a.create([acl(TOPIC, "ne", "User:alice", Op.CREATE, pattern=PRE)]))
    assert acl_checks.create_topic_error(ctx, "new") == 0


@pytest.mark.parametrize(
    ("props", "on", "super_users", "allow"),
    [
        ({}, False, None, None),
        ({"authorizer.class.name": ""}, False, None, None),
        ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
          "super.users": "User:admin;User:ops"}, True, {"User:admin", "User:ops"}, False),
        ({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
          "allow.everyone.if.no.acl.found": "true"}, True, set(), True),
    ],
)  # fmt: skip
def test_authorizer_from_config(props, on, super_users, allow) -> None:
    rules = authorizer_from_config(KafkaConfig(props))
    assert (rules is not None) == on
    if rules is not None:
        assert rules.super_users == super_users
        assert rules.allow_everyone_if_no_acl_found == allow


def test_unknown_authorizer_class_and_bad_super_users_are_refused() -> None:
    with pytest.raises(ConfigError, match="authorizer is built in"):
        KafkaConfig({"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(ConfigError, match="Type:name"):
        KafkaConfig({"super.users": "admin;User:ops"})


def test_authorized_operations_bit_fields() -> None:
    """Kafka's bit fields: bit ``op`` per operation; without an authorizer every operation the
    resource type has (topic 0x0ff8 -> READ..ALTER_CONFIGS as Kafka 3 answers; the cluster
    0x1fa0 + ...), with one the allowed ones, implied ones included."""
    off = SimpleNamespace(authorizer=None, principal=ALICE, client_host="h")
    topic_ops = acl_checks.authorized_operations(off, TOPIC, "t")
    # READ(3) WRITE(4) CREATE(5) DELETE(6) ALTER(7) DESCRIBE(8) DESCRIBE_CONFIGS(10)
    # ALTER_CONFIGS(11): the value a Kafka 3 broker without authorizer answers
    assert topic_ops == 0b1101_1111_1000 == 3576
    # CREATE(5) ALTER(7) DESCRIBE(8) CLUSTER_ACTION(9) DESCRIBE_CONFIGS(10) ALTER_CONFIGS(11)
    # IDEMPOTENT_WRITE(12)
    assert acl_checks.authorized_operations(off, CLUSTER, CLUSTER_NAME) == 0b1_1111_1010_0000
    assert acl_checks.authorized_operations(off, GROUP, "g") == (1 << 3) | (1 << 8) | (1 << 6)
    a = started(MemoryStore(), super_users={"User:admin"})
    ctx = SimpleNamespace(authorizer=a, principal=ALICE, client_host="h")
    assert acl_checks.authorized_operations(ctx, TOPIC, "t") == 0
    run(
        a.create(
            [
                acl(TOPIC, "t", "User:alice", Op.READ),
                acl(TOPIC, "t", "User:alice", Op.ALTER_CONFIGS),
            ]
        )
    )
    assert acl_checks.authorized_operations(ctx, TOPIC, "t") == (
        (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)
    )
    run(a.create([acl(TOPIC, "t", "User:alice", Op.DESCRIBE, DENY)]))
    assert acl_checks.authorized_operations(ctx, TOPIC, "t") == (
        (1 << Op.READ) | (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)
    )
    admin = SimpleNamespace(authorizer=a, principal=KafkaPrincipal("User", "admin"),
                            client_host="h")  # fmt: skip
    assert acl_checks.authorized_operations(admin, TOPIC, "t") == topic_ops
