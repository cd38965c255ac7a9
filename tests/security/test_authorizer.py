"""ACL decisions with Kafka's model (AclAuthorizerTest's cases), filters, validation, and a
Hypothesis check against a brute-force reading of Kafka's rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.security.authorizer import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tierlog.security.principal import KafkaPrincipal

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def acl(
    rtype: ResourceType,
    name: str,
    principal: str,
    op: AclOperation,
    perm: AclPermissionType = ALLOW,
    *,
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm)
    )


def test_no_acl_found_follows_the_setting() -> None:
    assert not AclAuthorizer().authorize(ALICE, "h", Op.READ, TOPIC, "t")
    assert AclAuthorizer(allow_everyone_if_no_acl_found=True).authorize(
        ALICE, "h", Op.READ, TOPIC, "t"
    )
    # an ACL for someone else on the resource: the resource has ACLs, so alice is denied
    a = AclAuthorizer(allow_everyone_if_no_acl_found=True)
    a.add_acls([acl(TOPIC, "t", "User:bob", Op.READ)])
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    assert a.authorize(BOB, "h", Op.READ, TOPIC, "t")
    assert a.authorize(ALICE, "h", Op.READ, TOPIC, "other")  # no ACL on that one


def test_deny_wins_over_allow_and_all() -> None:
    a = AclAuthorizer()
    a.add_acls(
        [
            acl(TOPIC, "*", "User:*", Op.ALL),
            acl(TOPIC, "secret", "User:alice", Op.READ, DENY),
        ]
    )
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "secret")
    assert a.authorize(ALICE, "h", Op.WRITE, TOPIC, "secret")
    assert a.authorize(BOB, "h", Op.READ, TOPIC, "secret")
    a.add_acls([acl(TOPIC, "secret", "User:*", Op.ALL, DENY)])
    assert not a.authorize(BOB, "h", Op.DESCRIBE, TOPIC, "secret")


def test_prefixed_and_wildcard_patterns_and_hosts() -> None:
    a = AclAuthorizer()
    a.add_acls(
        [
            acl(TOPIC, "payments-", "User:alice", Op.WRITE, pattern=PRE),
            acl(GROUP, "*", "User:alice", Op.READ, host="10.0.0.1"),
        ]
    )
    assert a.authorize(ALICE, "h", Op.WRITE, TOPIC, "payments-eu")
    assert a.authorize(ALICE, "h", Op.WRITE, TOPIC, "payments-")
    assert not a.authorize(ALICE, "h", Op.WRITE, TOPIC, "payment")
    assert not a.authorize(ALICE, "h", Op.WRITE, GROUP, "payments-eu")  # other type
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, GROUP, "g")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, GROUP, "g")


@pytest.mark.parametrize(
    ("granted", "asked", "allowed"),
    [
        (Op.READ, Op.DESCRIBE, True),
        (Op.WRITE, Op.DESCRIBE, True),
        (Op.DELETE, Op.DESCRIBE, True),
        (Op.ALTER, Op.DESCRIBE, True),
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
        (Op.DESCRIBE, Op.READ, False),
        (Op.CREATE, Op.DESCRIBE, False),
        (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, False),
        (Op.ALL, Op.IDEMPOTENT_WRITE, True),
    ],
)
def test_implied_operations(granted: AclOperation, asked: AclOperation, allowed: bool) -> None:
    a = AclAuthorizer()
    a.add_acls([acl(TOPIC, "t", "User:alice", granted)])
    assert a.authorize(ALICE, "h", asked, TOPIC, "t") is allowed


def test_a_deny_of_read_does_not_deny_describe() -> None:
    a = AclAuthorizer()
    a.add_acls(
        [acl(TOPIC, "t", "User:alice", Op.DESCRIBE), acl(TOPIC, "t", "User:alice", Op.READ, DENY)]
    )
    assert a.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t")


def test_super_users() -> None:
    a = AclAuthorizer(AclAuthorizer.parse_super_users("User:admin; User:ops"))
    a.add_acls([acl(CLUSTER, CLUSTER_NAME, "User:*", Op.ALL, DENY)])
    assert a.authorize(KafkaPrincipal("User", "ops"), "h", Op.ALTER, CLUSTER, CLUSTER_NAME)
    assert not a.authorize(ALICE, "h", Op.ALTER, CLUSTER, CLUSTER_NAME)


@pytest.mark.parametrize(
    ("binding", "needle"),
    [
        (acl(ResourceType.ANY, "t", "User:a", Op.READ), "resource type"),
        (acl(TOPIC, "t", "User:a", Op.READ, pattern=PatternType.MATCH), "pattern type"),
        (acl(TOPIC, "t", "User:a", Op.ANY), "operation"),
        (acl(TOPIC, "t", "User:a", Op.READ, AclPermissionType.ANY), "permission type"),
        (acl(TOPIC, "", "User:a", Op.READ), "must not be empty"),
        (acl(CLUSTER, "c", "User:a", Op.ALTER), "kafka-cluster"),
        (acl(TOPIC, "t", "alice", Op.READ), "Type:name"),
        (acl(TOPIC, "t", "User:a", Op.READ, host=""), "Host"),
    ],
)
def test_invalid_bindings_are_refused_whole(binding: AclBinding, needle: str) -> None:
    a = AclAuthorizer()
    with pytest.raises(InvalidAclError, match=needle):
        a.add_acls([acl(TOPIC, "ok", "User:a", Op.READ), binding])
    assert a.acls() == []


def test_filters_for_describe_and_delete() -> None:
    a = AclAuthorizer()
    lit = acl(TOPIC, "orders", "User:alice", Op.READ)
    star = acl(TOPIC, "*", "User:bob", Op.WRITE)
    pre = acl(TOPIC, "ord", "User:alice", Op.DESCRIBE, pattern=PRE)
    other = acl(TOPIC, "payments", "User:alice", Op.READ, DENY)
    grp = acl(GROUP, "orders", "User:alice", Op.READ)
    a.add_acls([lit, star, pre, other, grp, lit])  # adding twice keeps one
    assert len(a.acls()) == 5
    assert a.acls(AclBindingFilter(TOPIC, "orders", PatternType.MATCH)) == [lit, star, pre]
    assert a.acls(AclBindingFilter(TOPIC, "orders", PatternType.LITERAL)) == [lit]
    assert a.acls(AclBindingFilter(name="orders")) == [lit, grp]
    assert a.acls(AclBindingFilter(principal="User:alice", permission_type=DENY)) == [other]
    assert a.acls(AclBindingFilter(operation=Op.WRITE)) == [star]
    assert a.remove_acls(AclBindingFilter(TOPIC, pattern_type=PRE)) == [pre]
    assert a.remove_acls(AclBindingFilter(TOPIC, pattern_type=PRE)) == []
    assert len(a.acls()) == 4


# ------------------------------------------------------------------------- oracle

names = st.sampled_from(["a", "ab", "abc", "b", "*"])
principals = st.sampled_from(["User:alice", "User:bob", "User:*"])
hosts = st.sampled_from(["*", "h1", "h2"])
ops = st.sampled_from([o for o in Op if o not in (Op.ANY, Op.UNKNOWN)])
bindings = st.builds(
    acl,
    st.sampled_from([TOPIC, GROUP]),
    names.filter(lambda n: n != ""),
    principals,
    ops,
    st.sampled_from([ALLOW, DENY]),
    pattern=st.sampled_from([LIT, PRE]),
    host=hosts,
)


def oracle(acls: list[AclBinding], who: str, host: str, op: AclOperation, rtype, name: str,
           allow_if_none: bool) -> bool:  # fmt: skip
    """Kafka's rules, read literally, one ACL at a time."""

    def on_resource(b: AclBinding) -> bool:
        p = b.pattern
        if p.resource_type != rtype:
            return False
        if p.pattern_type == LIT:
            return p.name == name or p.name == "*"
        return name[: len(p.name)] == p.name

    resource_acls = [b for b in acls if on_resource(b)]
    if not resource_acls:
        return allow_if_none
    mine = [
        b.entry
        for b in resource_acls
        if b.entry.principal in (who, "User:*") and b.entry.host in (host, "*")
    ]
    if any(e.permission_type == DENY and e.operation in (op, Op.ALL) for e in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
               Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}.get(op, set())  # fmt: skip
    return any(
        e.permission_type == ALLOW and (e.operation in (op, Op.ALL) or e.operation in implied)
        for e in mine
    )


@settings(max_examples=300)
@given(
    st.lists(bindings, max_size=8),
    st.sampled_from(["User:alice", "User:bob", "User:carol"]),
    st.sampled_from(["h1", "h2"]),
    ops,
    st.sampled_from([TOPIC, GROUP]),
    st.sampled_from(["a", "ab", "abc", "b", "c"]),
    st.booleans(),
)
def test_matches_the_oracle(acls, who, host, op, rtype, name, allow_if_none) -> None:
    a = AclAuthorizer(allow_everyone_if_no_acl_found=allow_if_none)
    a.add_acls(acls)
    assert a.authorize(who, host, op, rtype, name) == oracle(
        acls, who, host, op, rtype, name, allow_if_none
    )
