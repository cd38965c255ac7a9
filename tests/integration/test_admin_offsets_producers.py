"""OffsetDelete (47) and DescribeProducers (61) through kafka-python's admin client, against a
real broker (issue 15)."""

from __future__ import annotations

import time

import kafka.errors as kerr
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CfTopicPartition
from kafka import TopicPartition

from tests.integration.clients import cf_create_topic, cf_produce, kp_admin


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit ``offsets`` for ``group`` without joining it (an Empty group)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(
            offsets=[CfTopicPartition(t, p, o) for (t, p), o in offsets.items()],
            asynchronous=False,
        )
    finally:
        c.close()


def _committed(admin, group: str) -> dict[tuple[str, int], int]:
    offsets = admin.list_group_offsets(group)[group]
    return {(tp.topic, tp.partition): m.offset for tp, m in offsets.items()}


def test_offset_delete(fresh_broker):
    b = fresh_broker
    a, other = "od-a", "od-b"
    cf_create_topic(b.bootstrap, a, 2)
    cf_create_topic(b.bootstrap, other, 1)
    cf_produce(b.bootstrap, a, [(None, b"x")] * 4, partition=0)
    group = "od-group"
    _commit(b.bootstrap, group, {(a, 0): 3, (a, 1): 0, (other, 0): 0})
    admin = kp_admin(b.bootstrap)
    try:
        assert _committed(admin, group) == {(a, 0): 3, (a, 1): 0, (other, 0): 0}
        result = admin.delete_group_offsets(
            group, [TopicPartition(a, 0), TopicPartition(a, 7), TopicPartition("od-none", 0)]
        )
        assert result == {
            TopicPartition(a, 0): kerr.NoError,
            TopicPartition(a, 7): kerr.UnknownTopicOrPartitionError,
            TopicPartition("od-none", 0): kerr.UnknownTopicOrPartitionError,
        }
        assert _committed(admin, group) == {(a, 1): 0, (other, 0): 0}
        # A partition without an offset: nothing to delete, no error (as Kafka).
        assert admin.delete_group_offsets(group, [TopicPartition(a, 0)]) == {
            TopicPartition(a, 0): kerr.NoError
        }
        with pytest.raises(kerr.GroupIdNotFoundError):
            admin.delete_group_offsets("od-no-such-group", [TopicPartition(a, 0)])

        # A live consumer group keeps the offsets of the topics it subscribes to.
        member = Consumer(
            {"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        try:
            member.subscribe([other])
            deadline = time.monotonic() + 60
            while not member.assignment() and time.monotonic() < deadline:
                member.poll(0.2)
            assert member.assignment()
            result = admin.delete_group_offsets(
                group, [TopicPartition(other, 0), TopicPartition(a, 1)]
            )
            assert result == {
                TopicPartition(other, 0): kerr.GroupSubscribedToTopicError,
                TopicPartition(a, 1): kerr.NoError,
            }
        finally:
            member.close()
        assert _committed(admin, group) == {(other, 0): 0}
    finally:
        admin.close()
    # The deletion is in __consumer_offsets: a restart does not bring the offsets back.
    b.restart()
    admin = kp_admin(b.bootstrap)
    try:
        assert _committed(admin, group) == {(other, 0): 0}
    finally:
        admin.close()


def test_describe_producers(broker, unique):
    topic = f"dp-{unique}"
    cf_create_topic(broker.bootstrap, topic, 2)
    cf_produce(broker.bootstrap, topic, [(None, b"%d" % i) for i in range(7)], partition=0,
               enable_idempotence=True)  # fmt: skip
    admin = kp_admin(broker.bootstrap)
    try:
        got = admin.describe_producers([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        p0 = got[TopicPartition(topic, 0)].active_producers
        assert len(p0) == 1
        (state,) = p0
        assert state.producer_id >= 0 and state.producer_epoch == 0
        assert state.last_sequence == 6  # seven records, sequences 0..6
        assert state.last_timestamp > 0
        assert state.current_transaction_start_offset == -1
        assert got[TopicPartition(topic, 1)].active_producers == []
        with pytest.raises(kerr.UnknownTopicOrPartitionError):
            admin.describe_producers([TopicPartition(topic, 9)])
    finally:
        admin.close()
