"""KIP-848 consumer groups against real brokers: confluent-kafka (librdkafka 2.16) consumers
with ``group.protocol=consumer`` join, rebalance on join and leave and commit; commits and the
group survive a restart; a classic and a consumer group side by side; the error cases with
Kafka's codes, over the raw wire; OffsetCommit of unknown topics or partitions."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CfConsumer
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.consumer_group_heartbeat.v1.request import TopicPartitions as HbTopicPartitions
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.static.primitive import i32, i32Timedelta

from tests.integration import wire
from tests.integration.clients import cf_admin, cf_create_topic, cf_produce, kp_admin
from tests.integration.conftest import BrokerProcess, running_broker
from tests.integration.wire import WireClient

# Short heartbeats and sessions so that rebalances take a second, not ten.
FAST_GROUPS = (
    "group.consumer.heartbeat.interval.ms=300",
    "group.consumer.session.timeout.ms=6000",
    "group.consumer.min.heartbeat.interval.ms=100",
    "group.consumer.min.session.timeout.ms=1000",
)


@pytest.fixture(scope="module")
def kip848_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("kip848"), *FAST_GROUPS) as b:
        yield b
        assert b.alive(), f"the broker died:\n{b.tail()}"


def _consumer(bootstrap: str, group: str, **conf) -> CfConsumer:
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    base.update(conf)
    return CfConsumer(base)


def _pump(consumers: list[CfConsumer], seen: dict[bytes, int], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            for m in c.consume(500, 0.05):
                assert not m.error(), m.error()
                seen[m.value()] = seen.get(m.value(), 0) + 1


def _commit_at_the_end(
    consumers: list[CfConsumer], seen: dict[bytes, int], timeout: float = 60
) -> None:
    """Pump until every consumer has read each partition it owns to its end, then commit those
    positions explicitly. A bare ``commit()`` fails with _NO_OFFSET for a consumer that has not
    consumed yet (it got its partitions after another member had read them), and a commit of
    less than the end would let a later reader see old records again."""
    deadline = time.monotonic() + timeout
    while True:
        _pump(consumers, seen, 0.2)
        positions = [c.position(c.assignment()) for c in consumers]
        if all(
            tp.offset == high or low == high  # read to the end, or nothing to read
            for c, tps in zip(consumers, positions, strict=True)
            for tp in tps
            for low, high in [c.get_watermark_offsets(tp, timeout=10)]
        ):
            break
        assert time.monotonic() < deadline, positions
    for c, tps in zip(consumers, positions, strict=True):
        read = [tp for tp in tps if tp.offset >= 0]
        if read:
            c.commit(offsets=read, asynchronous=False)


def _settle(
    consumers,
    seen,
    partitions: int,
    timeout: float = 60,
    *,
    check: WireClient | None = None,
    group: str = "",
) -> list[list[int]]:
    """Poll every consumer until their assignments cover every partition exactly once (and
    each has some), then return them. With ``check``, the coordinator's view is read at each
    round too (one atomic snapshot): no partition is ever assigned to two members."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _pump(consumers, seen, 0.2)
        if check is not None:
            members = (
                check.call(
                    ConsumerGroupDescribeRequest(
                        group_ids=(group,), include_authorized_operations=False
                    )
                )
                .groups[0]
                .members
            )
            given = [
                (tp.topic_id, p)
                for m in members
                for tp in m.assignment.topic_partitions
                for p in tp.partitions
            ]
            assert len(given) == len(set(given)), f"a partition assigned twice: {members}"
        assigned = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
        flat = sorted(p for a in assigned for p in a)
        if flat == list(range(partitions)) and all(assigned):
            return assigned
    raise AssertionError(f"group did not settle: {[c.assignment() for c in consumers]}")


def _describe(bootstrap: str, group: str):
    admin = cf_admin(bootstrap)
    return admin.describe_consumer_groups([group])[group].result(15)


def _wait_stable(bootstrap: str, group: str, members: int, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while True:
        d = _describe(bootstrap, group)
        if d.state == ConsumerGroupState.STABLE and len(d.members) == members:
            return d
        assert time.monotonic() < deadline, f"not Stable with {members}: {d.state} {d.members}"
        time.sleep(0.2)


def test_three_members_rebalance_on_join_and_leave(kip848_broker):
    b = kip848_broker
    topic, group = f"t848-{uuid.uuid4().hex[:8]}", f"g848-{uuid.uuid4().hex[:8]}"
    cf_create_topic(b.bootstrap, topic, 6)
    values = [f"r{i}".encode() for i in range(600)]
    cf_produce(b.bootstrap, topic, [(None, v) for v in values])
    seen: dict[bytes, int] = {}
    w = WireClient(b.bootstrap)

    a = _consumer(b.bootstrap, group)
    a.subscribe([topic])
    assert _settle([a], seen, 6, check=w, group=group) == [[0, 1, 2, 3, 4, 5]]
    b2 = _consumer(b.bootstrap, group)
    b2.subscribe([topic])
    assert sorted(len(x) for x in _settle([a, b2], seen, 6, check=w, group=group)) == [3, 3]
    c = _consumer(b.bootstrap, group)
    c.subscribe([topic])
    assert sorted(len(x) for x in _settle([a, b2, c], seen, 6, check=w, group=group)) == [2, 2, 2]

    d = _wait_stable(b.bootstrap, group, 3)
    assert d.type == ConsumerGroupType.CONSUMER
    assert d.partition_assignor == "uniform"
    described = sorted(
        sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members
    )
    assert sorted(p for x in described for p in x) == list(range(6))

    _commit_at_the_end([a, b2, c], seen)
    b2.close()  # leaves the group (epoch -1): the others take its partitions
    assert sorted(len(x) for x in _settle([a, c], seen, 6, check=w, group=group)) == [3, 3]
    a.close()
    assert _settle([c], seen, 6, check=w, group=group) == [[0, 1, 2, 3, 4, 5]]
    _pump([c], seen, 1.0)
    c.close()
    w.close()
    assert set(seen) == set(values)  # at least once
    # Without commits between rebalances some records come twice, never more than once per
    # member that owned the partition.
    assert max(seen.values()) <= 3

    d = _describe(b.bootstrap, group)
    assert d.state == ConsumerGroupState.EMPTY and not d.members


def test_a_classic_and_a_consumer_group_side_by_side(kip848_broker):
    b = kip848_broker
    topic = f"mix-{uuid.uuid4().hex[:8]}"
    classic_group, consumer_group = f"classic-{topic}", f"consumer-{topic}"
    cf_create_topic(b.bootstrap, topic, 3)
    values = {f"m{i}".encode() for i in range(90)}
    cf_produce(b.bootstrap, topic, [(None, v) for v in sorted(values)])
    classic = _consumer(
        b.bootstrap,
        classic_group,
        **{"group.protocol": "classic", "session.timeout.ms": 10_000},
    )
    modern = _consumer(b.bootstrap, consumer_group)
    classic.subscribe([topic])
    modern.subscribe([topic])
    got_classic: dict[bytes, int] = {}
    got_modern: dict[bytes, int] = {}
    deadline = time.monotonic() + 60
    while (set(got_classic) != values or set(got_modern) != values) and (
        time.monotonic() < deadline
    ):
        _pump([classic], got_classic, 0.2)
        _pump([modern], got_modern, 0.2)
    assert set(got_classic) == values and set(got_modern) == values

    # ListGroups (v5) reports each group's type; confluent's admin filters by it.
    admin = cf_admin(b.bootstrap)
    listed = admin.list_consumer_groups(request_timeout=15).result()
    types = {g.group_id: g.type for g in listed.valid}
    assert types[classic_group] == ConsumerGroupType.CLASSIC
    assert types[consumer_group] == ConsumerGroupType.CONSUMER
    only = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(15)
    assert consumer_group in {g.group_id for g in only.valid}
    assert classic_group not in {g.group_id for g in only.valid}

    # A consumer-protocol member may not join the classic group while it has members, nor a
    # classic member the consumer group (Kafka's codes, over the wire).
    w = WireClient(b.bootstrap)
    r = w.call(_heartbeat(classic_group, str(uuid.uuid4()), 0, topics=(topic,)))
    assert r.error_code.value == 69  # GROUP_ID_NOT_FOUND
    assert r.error_message == f"Group {classic_group} is not a consumer group."
    join = w.call(
        JoinGroupRequest(
            group_id=consumer_group,
            session_timeout=i32Timedelta.parse(_td(10_000)),
            rebalance_timeout=i32Timedelta.parse(_td(10_000)),
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
        )
    )
    assert join.error_code.value == 23  # INCONSISTENT_GROUP_PROTOCOL
    lg = w.call(ListGroupsRequest(states_filter=(), types_filter=("consumer",)))
    mine = {g.group_id: (g.group_type, g.protocol_type) for g in lg.groups}
    assert mine[consumer_group] == ("consumer", "consumer")
    assert classic_group not in mine
    w.close()
    classic.close()
    modern.close()


def _td(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _heartbeat(group, member_id, epoch, topics=None, owned=None, **kw):
    return ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=i32(epoch),
        rebalance_timeout=i32Timedelta.parse(
            _td(kw.pop("rebalance_ms", 30_000 if epoch == 0 else -1))
        ),
        subscribed_topic_names=topics,
        topic_partitions=owned if owned is not None else (() if epoch == 0 else None),
        **kw,
    )


def test_heartbeat_errors_have_kafkas_codes(kip848_broker):
    b = kip848_broker
    topic, group = f"err-{uuid.uuid4().hex[:8]}", f"gerr-{uuid.uuid4().hex[:8]}"
    cf_create_topic(b.bootstrap, topic, 2)
    w = WireClient(b.bootstrap)
    me = str(uuid.uuid4())
    r = w.call(_heartbeat(group, me, 0, topics=(topic,)))
    assert r.error_code.value == 0 and r.member_epoch == 1
    assert r.heartbeat_interval.total_seconds() == 0.3
    assert sum(len(tp.partitions) for tp in r.assignment.topic_partitions) == 2
    cases = [
        (_heartbeat(group, me, 7), 110, "greater member epoch"),  # FENCED_MEMBER_EPOCH
        (_heartbeat(group, "stranger", 1), 25, "is not a member"),  # UNKNOWN_MEMBER_ID
        (_heartbeat(group, "", 0, topics=(topic,)), 42, "MemberId can't be empty"),
        (_heartbeat(group, "x", 0, topics=(topic,), rebalance_ms=-1), 42, "RebalanceTimeoutMs"),
        (_heartbeat(group, "x", 0), 42, "SubscribedTopicNames or SubscribedTopicRegex"),
        (_heartbeat(group, "x", -3), 42, "MemberEpoch -3"),
        (
            _heartbeat(group, "x", 0, topics=(topic,), server_assignor="sticky"),
            112,  # UNSUPPORTED_ASSIGNOR
            "Supported assignors: uniform, range",
        ),
        (
            _heartbeat(group, "x", 0, subscribed_topic_regex="(unclosed"),
            128,  # INVALID_REGULAR_EXPRESSION
            "Invalid regular expression",
        ),
        (_heartbeat("", "x", 0, topics=(topic,)), 42, "GroupId can't be empty"),
    ]
    for req, code, message in cases:
        r = w.call(req)
        assert r.error_code.value == code, (req, r)
        assert message in (r.error_message or ""), r.error_message

    # OffsetCommit v9 carries the member epoch: a stale one is STALE_MEMBER_EPOCH (113), an
    # unknown member UNKNOWN_MEMBER_ID; OffsetFetch v9 checks them too.
    def commit(member_id: str, epoch: int):
        return w.call(
            OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=i32(epoch),
                member_id=member_id,
                group_instance_id=None,
                topics=(
                    OffsetCommitRequestTopic(
                        name=topic,
                        partitions=(
                            OffsetCommitRequestPartition(
                                partition_index=i32(0),
                                committed_offset=5,
                                committed_leader_epoch=i32(-1),
                                committed_metadata="",
                            ),
                        ),
                    ),
                ),
            )
        )

    assert commit(me, 0).topics[0].partitions[0].error_code.value == 113
    assert commit("stranger", 1).topics[0].partitions[0].error_code.value == 25
    assert commit(me, 1).topics[0].partitions[0].error_code.value == 0

    def fetch(member_id, epoch):
        return w.call(
            OffsetFetchRequest(
                groups=(
                    OffsetFetchRequestGroup(
                        group_id=group,
                        member_id=member_id,
                        member_epoch=i32(epoch),
                        topics=(OffsetFetchRequestTopics(name=topic, partition_indexes=(i32(0),)),),
                    ),
                ),
                require_stable=False,
            )
        ).groups[0]

    assert fetch(me, 0).error_code.value == 113
    ok = fetch(me, 1)
    assert ok.error_code.value == 0 and ok.topics[0].partitions[0].committed_offset == 5

    # ConsumerGroupDescribe: the member and its assignment; a classic or unknown group is
    # GROUP_ID_NOT_FOUND.
    d = w.call(
        ConsumerGroupDescribeRequest(
            group_ids=(group, "no-such-group"), include_authorized_operations=False
        )
    )
    assert d.groups[0].error_code.value == 0 and d.groups[0].group_state == "Stable"
    assert [m.member_id for m in d.groups[0].members] == [me]
    assert d.groups[0].members[0].assignment.topic_partitions[0].topic_name == topic
    assert d.groups[1].error_code.value == 69

    # Leave (epoch -1), then a commit without a member works on the empty group.
    r = w.call(_heartbeat(group, me, -1))
    assert r.error_code.value == 0 and r.member_epoch == -1
    assert commit("", -1).topics[0].partitions[0].error_code.value == 0
    w.close()


def test_commit_to_an_unknown_topic_or_partition_is_refused(kip848_broker):
    """Kafka answers UNKNOWN_TOPIC_OR_PARTITION for that partition (OffsetCommit, and the
    admin's AlterConsumerGroupOffsets, which sends OffsetCommit)."""
    b = kip848_broker
    topic, group = f"known-{uuid.uuid4().hex[:8]}", f"gc-{uuid.uuid4().hex[:8]}"
    cf_create_topic(b.bootstrap, topic, 2)
    w = WireClient(b.bootstrap)
    r = w.call(
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=tuple(
                OffsetCommitRequestTopic(
                    name=name,
                    partitions=tuple(
                        OffsetCommitRequestPartition(
                            partition_index=i32(p),
                            committed_offset=3,
                            committed_leader_epoch=i32(-1),
                            committed_metadata="",
                        )
                        for p in parts
                    ),
                )
                for name, parts in ((topic, (0, 5)), (f"nope-{topic}", (0,)))
            ),
        )
    )
    w.close()
    codes = {
        (t.name, p.partition_index): p.error_code.value for t in r.topics for p in t.partitions
    }
    assert codes == {(topic, 0): 0, (topic, 5): 3, (f"nope-{topic}", 0): 3}

    c = _consumer(b.bootstrap, group, **{"group.protocol": "classic"})
    with pytest.raises(KafkaException) as info:
        c.commit(offsets=[TopicPartition(f"nope-{topic}", 0, 3)], asynchronous=False)
    c.close()
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    admin = cf_admin(b.bootstrap)
    fut = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(f"nope-{topic}", 0, 1)])]
    )[group]
    (tp,) = fut.result(15).topic_partitions
    assert tp.error is not None and tp.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    kp = kp_admin(b.bootstrap)
    offsets = kp.list_group_offsets(group)[group]
    kp.close()
    assert {(tp.topic, tp.partition): o.offset for tp, o in offsets.items()} == {(topic, 0): 3}


def test_group_and_commits_survive_a_restart(tmp_path: Path):
    """Commits, the group epoch and a member that stays through the restart are kept
    (record types 3-8 replayed from __consumer_offsets)."""
    with running_broker(tmp_path / "b", *FAST_GROUPS) as b:
        topic, group = "persist848", "persist848-group"
        cf_create_topic(b.bootstrap, topic, 4)
        cf_produce(b.bootstrap, topic, [(None, f"v{i}".encode()) for i in range(40)])
        seen: dict[bytes, int] = {}
        stays, leaves = (_consumer(b.bootstrap, group) for _ in range(2))
        for c in (stays, leaves):
            c.subscribe([topic])
        _settle([stays, leaves], seen, 4)
        _commit_at_the_end([stays, leaves], seen)
        assert len(seen) == 40
        leaves.close()
        assert _settle([stays], seen, 4) == [[0, 1, 2, 3]]
        before = _wait_stable(b.bootstrap, group, 1)

        assert b.stop() == 0
        b.start()
        w = WireClient(b.bootstrap)
        d = w.call(
            ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)
        ).groups[0]
        w.close()
        assert d.error_code.value == 0
        assert d.group_epoch >= 3 and d.assignment_epoch == d.group_epoch
        assert [m.member_id for m in d.members] == [before.members[0].member_id]

        # the member that stayed goes on reading new records, from the committed offsets
        cf_produce(b.bootstrap, topic, [(None, f"after{i}".encode()) for i in range(8)])
        rest: dict[bytes, int] = {}
        deadline = time.monotonic() + 60
        while len(rest) < 8 and time.monotonic() < deadline:
            _pump([stays], rest, 0.2)
        assert set(rest) == {f"after{i}".encode() for i in range(8)}
        stays.close()

        # a new consumer of the now empty group resumes from the commits too
        after = _describe(b.bootstrap, group)
        assert (after.type, after.state) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.EMPTY)
        c = _consumer(b.bootstrap, group)
        c.subscribe([topic])
        _pump([c], rest, 3.0)
        c.close()
        assert set(rest) == {f"after{i}".encode() for i in range(8)}


def test_regex_subscription_picks_up_new_topics(kip848_broker):
    """librdkafka sends a ``^`` subscription as SubscribedTopicRegex (Python's re, full match,
    on the broker); a topic created later that matches is assigned too."""
    b = kip848_broker
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    cf_create_topic(b.bootstrap, f"{prefix}-one", 2)
    cf_create_topic(b.bootstrap, f"other{prefix}", 1)
    c = _consumer(b.bootstrap, f"g-{prefix}")
    c.subscribe([f"^{prefix}-.*"])
    seen: dict[bytes, int] = {}

    def assigned() -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in c.assignment()}

    deadline = time.monotonic() + 60
    while assigned() != {(f"{prefix}-one", 0), (f"{prefix}-one", 1)}:
        assert time.monotonic() < deadline, assigned()
        _pump([c], seen, 0.2)
    cf_create_topic(b.bootstrap, f"{prefix}-two", 1)
    cf_produce(b.bootstrap, f"{prefix}-two", [(None, b"late")])
    while b"late" not in seen:
        assert time.monotonic() < deadline, assigned()
        _pump([c], seen, 0.2)
    assert (f"{prefix}-two", 0) in assigned()
    assert not any(t == f"other{prefix}" for t, _ in assigned())
    w = WireClient(b.bootstrap)
    d = w.call(
        ConsumerGroupDescribeRequest(
            group_ids=(f"g-{prefix}",), include_authorized_operations=False
        )
    ).groups[0]
    w.close()
    c.close()
    (member,) = d.members
    # the broker resolved it: librdkafka sends its regexes joined, each in parentheses
    assert member.subscribed_topic_regex == f"(^{prefix}-.*)"
    assert member.subscribed_topic_names == ()


def test_static_member_comes_back_to_its_partitions(kip848_broker):
    """group.instance.id: a static member that closes (epoch -2) keeps its partitions for its
    session; its successor with the same instance id gets them back at the same group epoch,
    and the other member is never disturbed."""
    b = kip848_broker
    topic, group = f"st-{uuid.uuid4().hex[:8]}", f"gst-{uuid.uuid4().hex[:8]}"
    cf_create_topic(b.bootstrap, topic, 4)
    seen: dict[bytes, int] = {}
    one = _consumer(b.bootstrap, group, **{"group.instance.id": "one"})
    two = _consumer(b.bootstrap, group, **{"group.instance.id": "two"})
    for c in (one, two):
        c.subscribe([topic])
    first = _settle([one, two], seen, 4)
    epoch = _wait_stable(b.bootstrap, group, 2)
    w = WireClient(b.bootstrap)

    def described():
        return w.call(
            ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)
        ).groups[0]

    before = described()
    one.close()
    again = _consumer(b.bootstrap, group, **{"group.instance.id": "one"})
    again.subscribe([topic])
    back = _settle([again, two], seen, 4)
    assert back == first
    after = described()
    w.close()
    assert after.group_epoch == before.group_epoch  # no rebalance
    assert {m.instance_id for m in after.members} == {"one", "two"}
    assert len(epoch.members) == 2
    again.close()
    two.close()


def _group_configs(admin, group: str) -> dict[str, tuple[str, ConfigSource]]:
    res = ConfigResource(ResourceType.GROUP, group)
    entries = admin.describe_configs([res])[res].result(15)
    return {n: (e.value, ConfigSource(e.source)) for n, e in entries.items()}


def test_group_configs_change_the_heartbeat_interval_and_survive_a_restart(tmp_path: Path):
    with running_broker(tmp_path / "b", *FAST_GROUPS) as b:
        group = "configured"
        admin = cf_admin(b.bootstrap)
        assert _group_configs(admin, group) == {
            "consumer.heartbeat.interval.ms": ("300", ConfigSource.DEFAULT_CONFIG),
            "consumer.session.timeout.ms": ("6000", ConfigSource.DEFAULT_CONFIG),
        }

        def alter(name: str, value: str | None):
            op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
            res = ConfigResource(
                ResourceType.GROUP,
                group,
                incremental_configs=[ConfigEntry(name, value, incremental_operation=op)],
            )
            return admin.incremental_alter_configs([res])[res]

        alter("consumer.heartbeat.interval.ms", "700").result(15)
        assert _group_configs(admin, group)["consumer.heartbeat.interval.ms"] == (
            "700",
            ConfigSource.GROUP_CONFIG,
        )
        cf_create_topic(b.bootstrap, "cfg", 1)
        w = WireClient(b.bootstrap)
        r = w.call(_heartbeat(group, str(uuid.uuid4()), 0, topics=("cfg",)))
        assert r.error_code.value == 0 and r.heartbeat_interval.total_seconds() == 0.7
        w.close()

        # Kafka's bounds and names, each with its message (INVALID_CONFIG)
        for name, value, message in (
            ("consumer.heartbeat.interval.ms", "50", "greater than or equal to"),
            ("consumer.session.timeout.ms", "600000", "less than or equal to"),
            ("consumer.heartbeat.interval.ms", "6000", "must be less than"),
            ("consumer.session.timeout.ms", "soon", "is not an integer"),
            ("consumer.rebalance.timeout.ms", "1", "unknown group config"),
        ):
            with pytest.raises(KafkaException, match=message) as info:
                alter(name, value).result(15)
            assert info.value.args[0].code() == KafkaError.INVALID_CONFIG

        assert b.stop() == 0
        b.start()
        admin = cf_admin(b.bootstrap)
        assert _group_configs(admin, group)["consumer.heartbeat.interval.ms"] == (
            "700",
            ConfigSource.GROUP_CONFIG,
        )
        alter("consumer.heartbeat.interval.ms", None).result(15)
        assert _group_configs(admin, group)["consumer.heartbeat.interval.ms"][0] == "300"


def test_heartbeat_v0_gets_a_member_id_from_the_coordinator(kip848_broker):
    b = kip848_broker
    topic = f"v0-{uuid.uuid4().hex[:8]}"
    cf_create_topic(b.bootstrap, topic, 1)
    w = WireClient(b.bootstrap)
    v0 = wire.request_class(68, 0)
    r = w.call(
        v0(
            group_id=f"g{topic}",
            member_id="",
            member_epoch=i32(0),
            rebalance_timeout=i32Timedelta.parse(_td(30_000)),
            subscribed_topic_names=(topic,),
            topic_partitions=(),
        )
    )
    w.close()
    assert r.error_code.value == 0 and len(r.member_id) == 32 and r.member_epoch == 1


def _owned(response) -> set[int]:
    if response.assignment is None:
        return set()
    return {p for tp in response.assignment.topic_partitions for p in tp.partitions}


def test_a_partition_moves_only_after_its_owner_revoked_it(kip848_broker):
    """Kafka's unreleased partitions, with a raw member (W) and librdkafka (C): C is not given
    a partition W still owns; W acknowledging its revocation releases two to C; W then going
    silent past its session is fenced and C gets everything."""
    b = kip848_broker
    topic, group = f"rev-{uuid.uuid4().hex[:8]}", f"grev-{uuid.uuid4().hex[:8]}"
    cf_create_topic(b.bootstrap, topic, 4)
    w = WireClient(b.bootstrap)
    wid = str(uuid.uuid4())
    r = w.call(_heartbeat(group, wid, 0, topics=(topic,)))
    assert r.error_code.value == 0 and _owned(r) == {0, 1, 2, 3}
    topic_id = r.assignment.topic_partitions[0].topic_id
    epoch = r.member_epoch

    c = _consumer(b.bootstrap, group)
    c.subscribe([topic])
    seen: dict[bytes, int] = {}

    def c_assigned() -> set[int]:
        _pump([c], seen, 0.1)
        return {tp.partition for tp in c.assignment()}

    # W heartbeats (so its session lasts) until C's arrival tells it to keep only two; it
    # stays at its epoch until it acknowledges, and C gets nothing meanwhile.
    deadline = time.monotonic() + 30
    keep: set[int] = set()
    while not keep:
        assert time.monotonic() < deadline
        assert c_assigned() == set()
        r = w.call(_heartbeat(group, wid, epoch))
        assert r.error_code.value == 0 and r.member_epoch == epoch
        keep = _owned(r)
    assert len(keep) == 2
    d = w.call(
        ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)
    ).groups[0]
    assert d.group_state == "Reconciling" and len(d.members) == 2
    for _ in range(5):
        assert c_assigned() == set()  # the other two are still W's until it says so
    owned = (HbTopicPartitions(topic_id=topic_id, partitions=tuple(i32(p) for p in keep)),)
    r = w.call(_heartbeat(group, wid, epoch, owned=owned))
    assert r.error_code.value == 0 and r.member_epoch > epoch
    deadline = time.monotonic() + 30
    while c_assigned() != {0, 1, 2, 3} - keep:
        assert time.monotonic() < deadline, c.assignment()
    # W goes silent: its session (6 s) expires, it is fenced and C gets all four.
    w.close()
    deadline = time.monotonic() + 30
    while c_assigned() != {0, 1, 2, 3}:
        assert time.monotonic() < deadline, c.assignment()
    c.close()
