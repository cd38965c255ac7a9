"""ACLs with real clients: confluent-kafka (librdkafka) and kafka-python against ``tierlog serve``
on a SASL_PLAINTEXT listener with SCRAM users, and a 3-broker cluster on ZooKeeper.

Each refusal names the error the client reports:

* Produce without WRITE: TOPIC_AUTHORIZATION_FAILED (29) on the partition;
* Metadata: topics the user may not DESCRIBE are left out of a listing, and a named one
  answers TOPIC_AUTHORIZATION_FAILED (29);
* a consumer without READ on its group: GROUP_AUTHORIZATION_FAILED (30);
* the ACL APIs without ALTER/DESCRIBE on the cluster: CLUSTER_AUTHORIZATION_FAILED (31);
* kafka-python's idempotent producer (its default) with WRITE on no topic at all: InitProducerId
  answers CLUSTER_AUTHORIZATION_FAILED (31), as Kafka does since KIP-679.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.admin
    import kafka.errors

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.broker_process import ROOT, BrokerProcess
from tests.integration import wire
from tests.integration.cluster_support import Cluster, wait_for
from tests.integration.security_support import SecureBroker

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw", "opsuser": "opsuser-pw"}
MECHANISM = "SCRAM-SHA-256"


def _scram_add(log_dir: Path, workdir: Path, user: str, password: str) -> None:
    pw = workdir / f"{user}.pw"
    pw.write_text(password + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "scram", "add", "--user", user,
         "--mechanism", MECHANISM, "--iterations", "4096", "--password-file", str(pw),
         "--override", f"log.dirs={log_dir}"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    work = tmp_path_factory.mktemp("acl-broker")
    b = SecureBroker(
        work,
        {"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        f"sasl.enabled.mechanisms={MECHANISM},PLAIN",
        # PLAIN too, with the same passwords: the wire-level matrix logs in with it
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in {**USERS, **ROW_USERS}.items())
        + ";",
        f"authorizer.class.name={AUTHORIZER}",
        "super.users=User:admin",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=true",
    )
    for user, password in USERS.items():
        _scram_add(b.log_dir, work, user, password)
    b.start()
    try:
        yield b
    finally:
        if b.alive():
            with contextlib.suppress(RuntimeError):
                b.stop()
        print(b.tail(60))


def cf_conf(b: SecureBroker, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": b.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": USERS[user],
        "socket.timeout.ms": 10_000,
    }


def kp_conf(b: SecureBroker, user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": b.bootstrap_of("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def admin_of(b: SecureBroker, user: str = "admin") -> AdminClient:
    return AdminClient(cf_conf(b, user))


def binding(
    rtype: ResourceType, name: str, principal: str, op: AclOperation,
    perm: AclPermissionType = AclPermissionType.ALLOW,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL, host: str = "*",
) -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def create_acls(admin: AdminClient, *bindings: AclBinding) -> None:
    for f in admin.create_acls(list(bindings)).values():
        f.result(30)


def create_topics(b: SecureBroker, *names: str) -> None:
    admin = admin_of(b)
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(30)


def cf_produce_errors(conf: dict[str, Any], topic: str, n: int = 3) -> list[int]:
    """Produce ``n`` records; the error code of each delivery report (0: delivered)."""
    p = Producer({**conf, "linger.ms": 5, "message.timeout.ms": 20_000})
    codes: list[int] = []

    def cb(err: Any, _msg: Any) -> None:
        codes.append(0 if err is None else err.code())

    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), on_delivery=cb)
    assert p.flush(40) == 0
    return codes


# --------------------------------------------------------------------------- produce


def test_produce_needs_write_and_deny_wins(broker: SecureBroker) -> None:
    create_topics(broker, "orders", "orders-eu")
    admin = admin_of(broker)
    alice = cf_conf(broker, "alice")
    # DESCRIBE only: Metadata answers, the Produce itself is refused.
    create_acls(admin, binding(ResourceType.TOPIC, "orders", "User:alice", AclOperation.DESCRIBE))
    assert cf_produce_errors(alice, "orders") == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    # kafka-python on the wire: the same code for the partition.
    kp = kafka.KafkaProducer(**kp_conf(broker, "alice"), enable_idempotence=False)
    try:
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            kp.send("orders", b"x", partition=0).get(timeout=30)
    finally:
        kp.close()
    # WRITE on the prefix "orders": both topics.
    create_acls(
        admin,
        binding(ResourceType.TOPIC, "orders", "User:alice", AclOperation.WRITE,
                pattern=ResourcePatternType.PREFIXED),
    )  # fmt: skip
    assert cf_produce_errors(alice, "orders") == [0, 0, 0]
    assert cf_produce_errors(alice, "orders-eu") == [0, 0, 0]
    # A DENY on one literal topic wins over the prefixed ALLOW.
    create_acls(
        admin,
        binding(ResourceType.TOPIC, "orders-eu", "User:alice", AclOperation.WRITE,
                AclPermissionType.DENY),
    )  # fmt: skip
    assert cf_produce_errors(alice, "orders-eu") == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    assert cf_produce_errors(alice, "orders") == [0, 0, 0]
    # bob has no ACL at all (allow.everyone.if.no.acl.found=false); admin is a super user.
    assert (
        cf_produce_errors(cf_conf(broker, "bob"), "orders")
        == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    )
    assert cf_produce_errors(cf_conf(broker, "admin"), "orders-eu") == [0, 0, 0]
    # kafka-python's default idempotent producer: InitProducerId is allowed by WRITE on any
    # topic (KIP-679) ...
    kp = kafka.KafkaProducer(**kp_conf(broker, "alice"))
    try:
        assert kp.send("orders", b"idempotent", partition=0).get(timeout=30).offset >= 0
    finally:
        kp.close()
    # ... and refused with CLUSTER_AUTHORIZATION_FAILED to bob, who may write nowhere (he
    # may describe the topic, so its metadata answers).
    create_acls(admin, binding(ResourceType.TOPIC, "orders", "User:bob", AclOperation.DESCRIBE))
    kp = kafka.KafkaProducer(**kp_conf(broker, "bob"))
    try:
        # (kafka-python wraps the InitProducerId error in a generic KafkaError)
        with pytest.raises(kafka.errors.KafkaError, match=r"\[Error 31\] ClusterAuthorization"):
            kp.send("orders", b"x", partition=0).get(timeout=30)
    finally:
        with contextlib.suppress(Exception):
            kp.close(timeout=5)


# --------------------------------------------------------------------------- metadata


def test_metadata_hides_what_the_principal_may_not_describe(broker: SecureBroker) -> None:
    create_topics(broker, "visible-1", "secret-1")
    create_acls(
        admin_of(broker),
        binding(ResourceType.TOPIC, "visible-", "User:bob", AclOperation.READ,
                pattern=ResourcePatternType.PREFIXED),
    )  # fmt: skip
    md = admin_of(broker, "bob").list_topics(timeout=20)
    assert "visible-1" in md.topics
    assert "secret-1" not in md.topics
    assert "__consumer_offsets" not in md.topics
    named = admin_of(broker, "bob").list_topics("secret-1", timeout=20).topics["secret-1"]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # kafka-python's listing agrees
    c = kafka.KafkaConsumer(**kp_conf(broker, "bob"))
    try:
        topics = c.topics()
    finally:
        c.close()
    assert "visible-1" in topics and "secret-1" not in topics
    # the super user sees everything
    assert {"visible-1", "secret-1"} <= set(admin_of(broker).list_topics(timeout=20).topics)
    # auto-creation needs CREATE: bob may describe "visible-new" but not create it
    fresh = admin_of(broker, "bob").list_topics("visible-new", timeout=20).topics["visible-new"]
    assert fresh.error is not None
    assert fresh.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "visible-new" not in admin_of(broker).list_topics(timeout=20).topics


def test_authorized_operations_are_what_the_acls_allow(broker: SecureBroker) -> None:
    """Metadata and DescribeCluster asked for authorized operations answer the ones the
    principal's ACLs allow (implied ones included), as Kafka's authorizedOperations does."""
    # opsuser: a principal of its own, so the WRITE granted here (which also grants
    # IDEMPOTENT_WRITE, KIP-679) never leaks into the other tests' expectations of bob.
    from confluent_kafka import TopicCollection

    create_topics(broker, "opsacl-1")
    create_acls(
        admin_of(broker),
        binding(ResourceType.TOPIC, "opsacl-1", "User:opsuser", AclOperation.WRITE),
        binding(ResourceType.TOPIC, "opsacl-", "User:opsuser", AclOperation.ALTER_CONFIGS,
                pattern=ResourcePatternType.PREFIXED),
    )  # fmt: skip

    def ops(user: str) -> tuple[set[str], set[str]]:
        a = admin_of(broker, user)
        cluster = a.describe_cluster(include_authorized_operations=True).result(20)
        (f,) = a.describe_topics(
            TopicCollection(["opsacl-1"]), include_authorized_operations=True
        ).values()
        topic = f.result(20)
        return (
            # (librdkafka gives None for an empty field; kafka-python below tells them apart)
            {o.name for o in cluster.authorized_operations or ()},
            {o.name for o in topic.authorized_operations},
        )

    cluster_ops, topic_ops = ops("opsuser")
    assert topic_ops == {"WRITE", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}
    assert cluster_ops == set()  # no DESCRIBE on the cluster: none at all, as Kafka
    cluster_acls = [
        binding(ResourceType.BROKER, "kafka-cluster", "User:opsuser", op)
        for op in (AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE)
    ]
    create_acls(admin_of(broker), *cluster_acls)
    try:
        assert ops("opsuser")[0] == {"DESCRIBE", "IDEMPOTENT_WRITE"}
    finally:
        admin = admin_of(broker)
        for f in admin.delete_acls(
            [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                              b.operation, b.permission_type) for b in cluster_acls]
        ).values():  # fmt: skip
            f.result(30)
    # the super user has everything
    cluster_ops, topic_ops = ops("admin")
    assert len(cluster_ops) == 7 and len(topic_ops) == 8
    # kafka-python's DescribeCluster agrees
    k = kafka.admin.KafkaAdminClient(**kp_conf(broker, "opsuser"))
    try:
        assert k.describe_cluster()["authorized_operations"] == []
    finally:
        k.close()


# --------------------------------------------------------------------------- groups


def _cf_consume_one(conf: dict[str, Any], topic: str, group: str) -> Any:
    """The first message or consumer error within 30 s."""
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 10_000})  # fmt: skip
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None:
                return m
        raise AssertionError("neither a message nor an error within 30 s")
    finally:
        c.close()


def test_a_consumer_needs_read_on_its_group(broker: SecureBroker) -> None:
    create_topics(broker, "events")
    admin = admin_of(broker)
    assert cf_produce_errors(cf_conf(broker, "admin"), "events", 2) == [0, 0]
    create_acls(admin, binding(ResourceType.TOPIC, "events", "User:alice", AclOperation.READ))
    m = _cf_consume_one(cf_conf(broker, "alice"), "events", "alice-group")
    assert m.error() is not None
    assert m.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    kc = kafka.KafkaConsumer(
        "events", group_id="alice-group", auto_offset_reset="earliest",
        consumer_timeout_ms=20_000, **kp_conf(broker, "alice"),
    )  # fmt: skip
    try:
        with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
            next(iter(kc))
    finally:
        kc.close()
    create_acls(admin, binding(ResourceType.GROUP, "alice-", "User:alice", AclOperation.READ,
                               pattern=ResourcePatternType.PREFIXED))  # fmt: skip
    m = _cf_consume_one(cf_conf(broker, "alice"), "events", "alice-group")
    assert m.error() is None, m.error()
    assert m.value() == b"v0"


# --------------------------------------------------------------------------- the ACL APIs


def test_acl_apis_with_both_clients_and_a_restart(broker: SecureBroker) -> None:
    admin = admin_of(broker)
    create_acls(
        admin,
        binding(ResourceType.TOPIC, "ledger", "User:carol", AclOperation.READ),
        binding(ResourceType.TOPIC, "led", "User:carol", AclOperation.WRITE,
                pattern=ResourcePatternType.PREFIXED),
        binding(ResourceType.GROUP, "carol-g", "User:carol", AclOperation.READ),
        binding(ResourceType.TRANSACTIONAL_ID, "carol-tx", "User:carol", AclOperation.WRITE,
                AclPermissionType.DENY, host="10.1.2.3"),
    )  # fmt: skip
    # MATCH: the ACLs that apply to topic "ledger" (literal and prefixed)
    match = AclBindingFilter(
        ResourceType.TOPIC, "ledger", ResourcePatternType.MATCH, "User:carol", None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    got = admin.describe_acls(match).result(30)
    assert {(a.name, a.resource_pattern_type, a.operation) for a in got} == {
        ("ledger", ResourcePatternType.LITERAL, AclOperation.READ),
        ("led", ResourcePatternType.PREFIXED, AclOperation.WRITE),
    }
    every_carol = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                   "User:carol", None, AclOperation.ANY,
                                   AclPermissionType.ANY)  # fmt: skip
    assert len(admin.describe_acls(every_carol).result(30)) == 4
    # kafka-python: describe, create, delete
    kpa = kafka.KafkaAdminClient(**kp_conf(broker, "admin"))
    try:
        kfilter = kafka.admin.ACLFilter(
            principal="User:carol", host=None, operation=kafka.admin.ACLOperation.ANY,
            permission_type=kafka.admin.ACLPermissionType.ANY,
            resource_pattern=kafka.admin.ResourcePatternFilter(
                kafka.admin.ResourceType.GROUP, None, kafka.admin.ACLResourcePatternType.ANY),
        )  # fmt: skip
        acls, error = kpa.describe_acls(kfilter)
        assert error is kafka.errors.NoError
        assert [(a.resource_pattern.resource_name, a.operation) for a in acls] == [
            ("carol-g", kafka.admin.ACLOperation.READ)
        ]
        kacl = kafka.admin.ACL(
            principal="User:carol", host="*", operation=kafka.admin.ACLOperation.DESCRIBE,
            permission_type=kafka.admin.ACLPermissionType.ALLOW,
            resource_pattern=kafka.admin.ResourcePattern(
                kafka.admin.ResourceType.GROUP, "carol-g2"),
        )  # fmt: skip
        result = kpa.create_acls([kacl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        deleted = kpa.delete_acls([kfilter])
        (_, matched, err), = deleted  # fmt: skip
        assert err is kafka.errors.NoError
        assert sorted(m.resource_pattern.resource_name for m in matched) == [
            "carol-g", "carol-g2"]  # fmt: skip
    finally:
        kpa.close()
    # confluent: delete the prefixed one by a PREFIXED filter
    pref = AclBindingFilter(ResourceType.TOPIC, "led", ResourcePatternType.PREFIXED, None,
                            None, AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    (gone,) = [f.result(30) for f in admin.delete_acls([pref]).values()]
    assert [(a.name, a.principal) for a in gone] == [("led", "User:carol")]
    left = {(a.restype, a.name) for a in admin.describe_acls(every_carol).result(30)}
    assert left == {(ResourceType.TOPIC, "ledger"), (ResourceType.TRANSACTIONAL_ID, "carol-tx")}

    # a user without ALTER/DESCRIBE on the cluster: CLUSTER_AUTHORIZATION_FAILED
    # (kafka-python shows DescribeAcls' top-level error; librdkafka 2.16 answers an empty list)
    kpa = kafka.KafkaAdminClient(**kp_conf(broker, "alice"))
    try:
        with pytest.raises(kafka.errors.ClusterAuthorizationFailedError):
            kpa.describe_acls(kfilter)
    finally:
        kpa.close()
    alice_admin = admin_of(broker, "alice")
    fs = alice_admin.create_acls([binding(ResourceType.TOPIC, "x", "User:alice",
                                          AclOperation.ALL)])  # fmt: skip
    for f in fs.values():
        with pytest.raises(KafkaException) as e:
            f.result(30)
        assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # ACLs survive a restart: the file in the first log dir, written atomically
    doc = json.loads((broker.log_dir / "acls.json").read_text())
    assert any(r["name"] == "ledger" and r["resourceType"] == "Topic" for r in doc["resources"])
    broker.restart()
    admin = admin_of(broker)
    left = {(a.restype, a.name) for a in admin.describe_acls(every_carol).result(30)}
    assert left == {(ResourceType.TOPIC, "ledger"), (ResourceType.TRANSACTIONAL_ID, "carol-tx")}
    assert "authorizer on:" in broker.log_since_start()


def test_invalid_creations_and_a_broker_without_authorizer(
    broker: SecureBroker, tmp_path: Path
) -> None:
    admin = admin_of(broker)
    # (librdkafka calls Kafka's CLUSTER resource type BROKER; the only name is kafka-cluster)
    bad = binding(ResourceType.BROKER, "not-the-cluster", "User:alice", AclOperation.ALTER)
    for f in admin.create_acls([bad]).values():
        with pytest.raises(KafkaException) as e:
            f.result(30)
        assert e.value.args[0].code() == KafkaError.INVALID_REQUEST
    # no authorizer: the ACL APIs answer SECURITY_DISABLED (54)
    (tmp_path / "plain").mkdir()
    plain = BrokerProcess(tmp_path / "plain")
    plain.start()
    try:
        a = AdminClient({"bootstrap.servers": plain.bootstrap})
        ok = binding(ResourceType.TOPIC, "t", "User:alice", AclOperation.READ)
        for f in a.create_acls([ok]).values():
            with pytest.raises(KafkaException) as e:
                f.result(30)
            assert e.value.args[0].code() == KafkaError.SECURITY_DISABLED
    finally:
        plain.stop()


# --------------------------------------------------------------------------- a cluster


def _describe_acls_v3(c: wire.WireClient) -> Any:
    cls = wire.request_class(29, 3)
    return c.call(cls(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                      principal_filter=None, host_filter=None, operation=1,
                      permission_type=1))  # fmt: skip


def _create_acl_v3(c: wire.WireClient, topic: str, principal: str, op: int, perm: int) -> int:
    cls = wire.request_class(30, 3)
    m = wire._module(cls)
    resp = c.call(cls(creations=(m.AclCreation(
        resource_type=2, resource_name=topic, resource_pattern_type=3, principal=principal,
        host="*", operation=op, permission_type=perm),)))  # fmt: skip
    return int(resp.results[0].error_code)


def _delete_topic_acls_v3(c: wire.WireClient, topic: str) -> int:
    cls = wire.request_class(31, 3)
    m = wire._module(cls)
    resp = c.call(cls(filters=(m.DeleteAclsFilter(
        resource_type_filter=2, resource_name_filter=topic, pattern_type_filter=3,
        principal_filter=None, host_filter=None, operation=1, permission_type=1),)))  # fmt: skip
    return len(resp.filter_results[0].matching_acls)


@pytest.mark.cluster
def test_an_acl_created_on_one_broker_is_enforced_by_the_others(
    tmp_path: Path, zk_connect: str
) -> None:
    """Plaintext listeners (every client is User:ANONYMOUS) and
    allow.everyone.if.no.acl.found=true: replication and topic creation need no ACL; a DENY
    written through one broker stops produces the leader (another broker) takes, then its
    deletion through the third lets them through again. ZooKeeper holds Kafka's layout."""
    cluster = Cluster(tmp_path, zk_connect, 3, f"authorizer.class.name={AUTHORIZER}",
                      "allow.everyone.if.no.acl.found=true")  # fmt: skip
    cluster.start()
    try:
        cluster.create_topic("guarded", partitions=1, rf=3)
        # c2: the leader (where produces go); c1 creates the ACL, c3 deletes it
        lead = cluster.leader("guarded", 0)
        one, three = (i for i in cluster.brokers if i != lead)
        batch = wire.one_record(b"v")
        c2 = wire.WireClient(cluster.brokers[lead].bootstrap)
        c1 = wire.WireClient(cluster.brokers[one].bootstrap)
        c3 = wire.WireClient(cluster.brokers[three].bootstrap)
        try:
            # The leader learns of its leadership from ZooKeeper a moment after the broker
            # that answered the metadata: NOT_LEADER_OR_FOLLOWER until then, as a client sees.
            wait_for(
                "the leader to take the produce",
                lambda: wire.produce(c2, "guarded", [0], batch) == {0: 0},
                timeout=30,
            )
            # DENY WRITE (4) for User:ANONYMOUS through broker 1
            assert _create_acl_v3(c1, "guarded", "User:ANONYMOUS", 4, 2) == 0
            wait_for(
                "broker 2 to refuse the produce",
                lambda: wire.produce(c2, "guarded", [0], batch) == {0: 29},
                timeout=30,
            )
            # ... and broker 3 describes it: every broker loaded it
            wait_for("broker 3 to describe the ACL",
                     lambda: len(_describe_acls_v3(c3).resources) == 1, timeout=30)  # fmt: skip
            # ZooKeeper: Kafka's znode and change notification
            from kazoo.client import KazooClient

            hosts, _, chroot = zk_connect.partition("/")
            zk = KazooClient(hosts=f"{hosts}/{chroot}")
            zk.start(timeout=15)
            try:
                data, _ = zk.get("/kafka-acl/Topic/guarded")
                assert json.loads(data) == {"version": 1, "acls": [
                    {"principal": "User:ANONYMOUS", "permissionType": "Deny",
                     "operation": "Write", "host": "*"}]}  # fmt: skip
                changes = zk.get_children("/kafka-acl-changes")
                assert changes and all(n.startswith("acl_changes_") for n in changes)
                assert zk.get(f"/kafka-acl-changes/{sorted(changes)[-1]}")[0] == b"Topic:guarded"
            finally:
                zk.stop()
                zk.close()
            # deleted through broker 3: broker 2 lets produces through again
            assert _delete_topic_acls_v3(c3, "guarded") == 1
            wait_for(
                "broker 2 to accept the produce again",
                lambda: wire.produce(c2, "guarded", [0], batch) == {0: 0},
                timeout=30,
            )
        finally:
            for c in (c1, c2, c3):
                c.close()
        # the ACL outlives the brokers: restart one, it loads from ZooKeeper
        assert _create_acl_v3_once(cluster.brokers[one].bootstrap) == 0
        cluster.brokers[lead].restart()
        c2 = wire.WireClient(cluster.brokers[lead].bootstrap)
        try:
            assert len(_describe_acls_v3(c2).resources) == 1
        finally:
            c2.close()
    finally:
        cluster.stop()


def _create_acl_v3_once(bootstrap: str) -> int:
    c = wire.WireClient(bootstrap)
    try:
        return _create_acl_v3(c, "other", "User:ANONYMOUS", 3, 3)
    finally:
        c.close()


# --------------------------------------------------------------------------- the matrix


def sasl_wire(b: SecureBroker, user: str) -> wire.WireClient:
    """A raw connection logged in with SASL PLAIN as ``user``."""
    c = wire.WireClient(b.bootstrap_of("SASL_PLAINTEXT"))
    assert c.call(wire.request_class(17, 1)(mechanism="PLAIN")).error_code == 0
    auth = wire.request_class(36, 2)
    password = {**USERS, **ROW_USERS}[user]
    resp = c.call(auth(auth_bytes=b"\0" + user.encode() + b"\0" + password.encode()))
    assert resp.error_code == 0, resp.error_message
    return c


def error_codes(entity: Any) -> list[int]:
    """Every ``error_code`` in a response, nested ones too."""
    out: list[int] = []
    if isinstance(entity, tuple):
        for item in entity:
            out += error_codes(item)
        return out
    if not dataclasses.is_dataclass(entity):
        return out
    for f in dataclasses.fields(entity):
        v = getattr(entity, f.name)
        if f.name == "error_code" or f.name.endswith("_error_code"):
            out.append(int(v.value if hasattr(v, "value") else v))
        elif isinstance(v, tuple) or dataclasses.is_dataclass(v):
            out += error_codes(v)
    return out


T, G = "matrix", "matrix-g"
_P0 = [{"partition_index": 0}]
# (what, api key, version, request fields, the code a principal without ACLs gets)
MATRIX: list[tuple[str, int, int, dict[str, Any], int]] = [
    ("Produce", 0, 9, {"acks": 1, "timeout": 30_000, "topic_data": [
        {"name": T, "partition_data": [{"index": 0, "records": wire.one_record(b"m")}]}]}, 29),
    ("Fetch", 1, 12, {"replica_id": -1, "max_bytes": 1 << 20, "session_epoch": -1, "topics": [
        {"topic": T, "partitions": [{"partition": 0, "partition_max_bytes": 1 << 16}]}]}, 29),
    ("ListOffsets", 2, 7, {"replica_id": -1, "topics": [
        {"name": T, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}, 29),
    ("Metadata, a named topic", 3, 12, {"topics": [{"name": T}]}, 29),
    ("OffsetForLeaderEpoch", 23, 4, {"replica_id": -1, "topics": [
        {"topic": T, "partitions": [{"partition": 0, "leader_epoch": 0,
                                     "current_leader_epoch": -1}]}]}, 29),
    ("CreateTopics", 19, 5, {"timeout": 30_000, "validate_only": True, "topics": [
        {"name": "matrix-new", "num_partitions": 1, "replication_factor": 1}]}, 29),
    ("DeleteTopics", 20, 4, {"topic_names": ["matrix-none"], "timeout": 30_000}, 29),
    ("CreatePartitions", 37, 3, {"timeout": 30_000, "validate_only": True,
                                 "topics": [{"name": T, "count": 2, "assignments": None}]}, 29),
    ("DeleteRecords", 21, 2, {"timeout": 30_000, "topics": [
        {"name": T, "partitions": [{"partition_index": 0, "offset": 0}]}]}, 29),
    ("DescribeConfigs, a topic", 32, 4, {"resources": [
        {"resource_type": 2, "resource_name": T, "configuration_keys": None}]}, 29),
    ("DescribeConfigs, the broker", 32, 4, {"resources": [
        {"resource_type": 4, "resource_name": "0", "configuration_keys": None}]}, 31),
    ("IncrementalAlterConfigs", 44, 1, {"validate_only": True, "resources": [
        {"resource_type": 2, "resource_name": T, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}]}, 29),
    ("AlterConfigs, the broker", 33, 2, {"validate_only": True, "resources": [
        {"resource_type": 4, "resource_name": "0", "configs": []}]}, 31),
    ("OffsetCommit", 8, 8, {"group_id": G, "generation_id_or_member_epoch": -1,
                            "member_id": "", "topics": [{"name": T, "partitions": [
                                {"partition_index": 0, "committed_offset": 0}]}]}, 30),
    ("OffsetFetch", 9, 8, {"groups": [{"group_id": G, "topics": None}]}, 30),
    ("JoinGroup", 11, 7, {"group_id": G, "session_timeout": 10_000,
                          "rebalance_timeout": 10_000, "member_id": "",
                          "protocol_type": "consumer",
                          "protocols": [{"name": "range", "metadata": b""}]}, 30),
    ("Heartbeat", 12, 4, {"group_id": G, "generation_id": 1, "member_id": "m"}, 30),
    ("DescribeGroups", 15, 5, {"groups": [G]}, 30),
    ("DeleteGroups", 42, 2, {"groups_names": [G]}, 30),
    ("FindCoordinator, a group", 10, 4, {"key_type": 0, "coordinator_keys": [G]}, 30),
    ("FindCoordinator, a transactional id", 10, 4,
     {"key_type": 1, "coordinator_keys": ["tx"]}, 53),
    ("InitProducerId, transactional", 22, 4,
     {"transactional_id": "tx", "transaction_timeout": 60_000}, 53),
    ("InitProducerId, idempotent", 22, 4,
     {"transactional_id": None, "transaction_timeout": 60_000}, 31),
    ("WriteTxnMarkers", 27, 1, {"markers": [
        {"producer_id": 1, "producer_epoch": 0, "transaction_result": False,
         "coordinator_epoch": 0, "topics": [{"name": T, "partition_indexes": [99]}]}]}, 31),
    ("AddPartitionsToTxn", 24, 3, {"v3_and_below_transactional_id": "tx",
                                   "v3_and_below_producer_id": 1,
                                   "v3_and_below_producer_epoch": 0,
                                   "v3_and_below_topics": [{"name": T, "partitions": [0]}]}, 53),
    ("AddPartitionsToTxn, verify only", 24, 4, {"transactions": [
        {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "verify_only": True,
         "topics": [{"name": T, "partitions": [0]}]}]}, 31),
    ("AddOffsetsToTxn", 25, 3, {"transactional_id": "tx", "producer_id": 1,
                                "producer_epoch": 0, "group_id": G}, 53),
    ("EndTxn", 26, 3, {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0,
                       "committed": True}, 53),
    ("TxnOffsetCommit", 28, 3, {"transactional_id": "tx", "group_id": G, "producer_id": 1,
                                "producer_epoch": 0, "topics": [{"name": T, "partitions": [
                                    {"partition_index": 0, "committed_offset": 1,
                                     "committed_metadata": ""}]}]}, 53),
    ("DescribeTransactions", 65, 0, {"transactional_ids": ["tx"]}, 53),
    ("ElectLeaders", 43, 2, {"election_type": 0, "timeout": 30_000,
                             "topic_partitions": [{"topic": T, "partitions": [0]}]}, 31),
    ("AlterPartitionReassignments", 45, 0, {"timeout": 30_000, "topics": []}, 31),
    ("ListPartitionReassignments", 46, 0, {"timeout": 30_000, "topics": None}, 31),
    ("DescribeUserScramCredentials", 50, 0, {"users": None}, 31),
    ("AlterUserScramCredentials", 51, 0, {"deletions": [{"name": "nobody", "mechanism": 1}],
                                          "upsertions": []}, 31),
    ("DescribeAcls", 29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1,
                             "operation": 1, "permission_type": 1}, 31),
    ("CreateAcls", 30, 3, {"creations": [
        {"resource_type": 2, "resource_name": "x", "resource_pattern_type": 3,
         "principal": "User:bob", "host": "*", "operation": 2, "permission_type": 3}]}, 31),
    ("DeleteAcls", 31, 3, {"filters": [
        {"resource_type_filter": 2, "resource_name_filter": "x", "pattern_type_filter": 3,
         "operation": 1, "permission_type": 1}]}, 31),
    ("ConsumerGroupHeartbeat", 68, 1, {"group_id": G, "member_id": "acl-m", "member_epoch": 0,
                                       "rebalance_timeout": 30_000,
                                       "subscribed_topic_names": [T], "topic_partitions": []},
     30),
    ("ConsumerGroupDescribe", 69, 1, {"group_ids": [G]}, 30),
    ("DescribeConfigs, a group", 32, 4, {"resources": [
        {"resource_type": 32, "resource_name": G, "configuration_keys": None}]}, 30),
]  # fmt: skip
AUTHORIZATION_ERRORS = {29, 30, 31, 53}
TOPIC_, GROUP_, CLUSTER_, TXN_ = 2, 3, 4, 5
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
KC = "kafka-cluster"
#: The literal ACLs (resource type, name, operation) Kafka requires for each row, exactly.
NEEDS: dict[str, list[tuple[int, str, int]]] = {
    "Produce": [(TOPIC_, T, WRITE)],
    "Fetch": [(TOPIC_, T, READ)],
    "ListOffsets": [(TOPIC_, T, DESCRIBE)],
    "Metadata, a named topic": [(TOPIC_, T, DESCRIBE)],
    "OffsetForLeaderEpoch": [(TOPIC_, T, DESCRIBE)],
    "CreateTopics": [(TOPIC_, "matrix-new", CREATE)],
    "DeleteTopics": [(TOPIC_, "matrix-none", DELETE)],
    "CreatePartitions": [(TOPIC_, T, ALTER)],
    "DeleteRecords": [(TOPIC_, T, DELETE)],
    "DescribeConfigs, a topic": [(TOPIC_, T, DESCRIBE_CONFIGS)],
    "DescribeConfigs, the broker": [(CLUSTER_, KC, DESCRIBE_CONFIGS)],
    "IncrementalAlterConfigs": [(TOPIC_, T, ALTER_CONFIGS)],
    "AlterConfigs, the broker": [(CLUSTER_, KC, ALTER_CONFIGS)],
    "OffsetCommit": [(GROUP_, G, READ), (TOPIC_, T, READ)],
    "OffsetFetch": [(GROUP_, G, DESCRIBE)],
    "JoinGroup": [(GROUP_, G, READ)],
    "Heartbeat": [(GROUP_, G, READ)],
    "DescribeGroups": [(GROUP_, G, DESCRIBE)],
    "DeleteGroups": [(GROUP_, G, DELETE)],
    "FindCoordinator, a group": [(GROUP_, G, DESCRIBE)],
    "FindCoordinator, a transactional id": [(TXN_, "tx", DESCRIBE)],
    "InitProducerId, transactional": [(TXN_, "tx", WRITE)],
    "InitProducerId, idempotent": [(CLUSTER_, KC, IDEMPOTENT_WRITE)],
    "WriteTxnMarkers": [(CLUSTER_, KC, CLUSTER_ACTION)],
    "AddPartitionsToTxn": [(TXN_, "tx", WRITE), (TOPIC_, T, WRITE)],
    "AddPartitionsToTxn, verify only": [(CLUSTER_, KC, CLUSTER_ACTION)],
    "AddOffsetsToTxn": [(TXN_, "tx", WRITE), (GROUP_, G, READ)],
    "EndTxn": [(TXN_, "tx", WRITE)],
    "TxnOffsetCommit": [(TXN_, "tx", WRITE), (GROUP_, G, READ), (TOPIC_, T, READ)],
    "DescribeTransactions": [(TXN_, "tx", DESCRIBE)],
    "ElectLeaders": [(CLUSTER_, KC, ALTER)],
    "AlterPartitionReassignments": [(CLUSTER_, KC, ALTER)],
    "ListPartitionReassignments": [(CLUSTER_, KC, DESCRIBE)],
    "DescribeUserScramCredentials": [(CLUSTER_, KC, DESCRIBE)],
    "AlterUserScramCredentials": [(CLUSTER_, KC, ALTER)],
    "DescribeAcls": [(CLUSTER_, KC, DESCRIBE)],
    "CreateAcls": [(CLUSTER_, KC, ALTER)],
    "DeleteAcls": [(CLUSTER_, KC, ALTER)],
    "ConsumerGroupHeartbeat": [(GROUP_, G, READ)],
    "ConsumerGroupDescribe": [(GROUP_, G, DESCRIBE)],
    "DescribeConfigs, a group": [(GROUP_, G, DESCRIBE_CONFIGS)],
}
#: PLAIN-only users of the matrix: one per row, holding exactly that row's ACLs.
ROW_USERS = {f"row{i}": f"row{i}-pw" for i in range(len(MATRIX))}


def test_every_api_answers_kafkas_authorization_error(broker: SecureBroker) -> None:
    """Each API family, over the wire: a principal without ACLs (bob) gets Kafka's exact code
    and nothing else; a principal holding exactly the ACLs Kafka requires for it, and the
    super user, get no authorization error at all."""
    from tierlog.server.handlers._build import build

    create_topics(broker, T)
    assert cf_produce_errors(cf_conf(broker, "admin"), T, 1) == [0]
    bob, admin = sasl_wire(broker, "bob"), sasl_wire(broker, "admin")
    try:
        for what, key, version, fields, code in MATRIX:
            req = build(wire.request_class(key, version), fields)
            denied = error_codes(bob.call(req))
            assert code in denied and set(denied) <= {0, code}, (what, denied)
            allowed = error_codes(admin.call(req))
            assert not AUTHORIZATION_ERRORS & set(allowed), (what, allowed)
        # one user per row, holding exactly the ACLs the row needs
        creation = wire.request_class(30, 3)
        grants = [
            {"resource_type": rtype, "resource_name": name, "resource_pattern_type": 3,
             "principal": f"User:row{i}", "host": "*", "operation": op, "permission_type": 3}
            for i, (what, *_) in enumerate(MATRIX)
            for rtype, name, op in NEEDS[what]
        ]  # fmt: skip
        assert set(error_codes(admin.call(build(creation, {"creations": grants})))) == {0}
        for i, (what, key, version, fields, _code) in enumerate(MATRIX):
            c = sasl_wire(broker, f"row{i}")
            try:
                got = error_codes(c.call(build(wire.request_class(key, version), fields)))
            finally:
                c.close()
            assert not AUTHORIZATION_ERRORS & set(got), (what, NEEDS[what], got)
        # ListGroups: bob is not refused, he sees no group he may not describe
        listed = bob.call(build(wire.request_class(16, 4), {"states_filter": []}))
        assert listed.error_code == 0 and listed.groups == ()
    finally:
        bob.close()
        admin.close()
