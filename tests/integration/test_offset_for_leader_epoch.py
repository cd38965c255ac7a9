"""OffsetsForLeaderEpoch (23) on a real broker process, with raw kio requests (wire.py):
where each leader epoch ends in the leader's log (KIP-101, KIP-320)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from tests.integration.conftest import BrokerProcess
from tests.integration.wire import (
    WireClient,
    create_topics,
    one_record,
    produce,
    request_class,
)

OFFSET_FOR_LEADER_EPOCH = 23
UNKNOWN_TOPIC_OR_PARTITION = 3


def ofle_request(version: int, topic: str, partitions: dict[int, int], current: int = -1) -> Any:
    """OffsetsForLeaderEpoch of ``{partition: requested leader epoch}``."""
    cls = request_class(OFFSET_FOR_LEADER_EPOCH, version)
    m = importlib.import_module(cls.__module__)
    extra = {"replica_id": -1} if version >= 3 else {}
    return cls(
        topics=(
            m.OffsetForLeaderTopic(
                topic=topic,
                partitions=tuple(
                    m.OffsetForLeaderPartition(
                        partition=p, current_leader_epoch=current, leader_epoch=e
                    )
                    for p, e in partitions.items()
                ),
            ),
        ),
        **extra,
    )


def answers(c: WireClient, req: Any) -> dict[int, tuple[int, int, int]]:
    """{partition: (error code, leader epoch, end offset)}"""
    resp = c.call(req)
    return {
        p.partition: (int(p.error_code), int(p.leader_epoch), int(p.end_offset))
        for t in resp.topics
        for p in t.partitions
    }


@pytest.fixture
def topic(broker: BrokerProcess, unique: str) -> str:
    name = f"ofle-{unique}"
    c = WireClient(broker.bootstrap)
    try:
        assert create_topics(c, {name: 3}) == {name: 0}
        for _ in range(3):  # three batches of one record each to partition 0, one to 1
            assert produce(c, name, [0], one_record(b"v")) == {0: 0}
        assert produce(c, name, [1], one_record(b"v")) == {1: 0}
    finally:
        c.close()
    return name


@pytest.mark.parametrize("version", [2, 3, 4])
def test_epoch_0_ends_at_the_log_end_offset(broker: BrokerProcess, topic: str, version: int):
    c = WireClient(broker.bootstrap)
    try:
        got = answers(c, ofle_request(version, topic, {0: 0, 1: 0}, current=0))
    finally:
        c.close()
    # every batch was written in leader epoch 0: the latest epoch ends at the LEO
    assert got == {0: (0, 0, 3), 1: (0, 0, 1)}


def test_unknown_epochs_and_an_empty_log(broker: BrokerProcess, topic: str):
    c = WireClient(broker.bootstrap)
    try:
        got = answers(c, ofle_request(4, topic, {0: 7, 1: -1, 2: 0}))
    finally:
        c.close()
    assert got == {
        0: (0, -1, -1),  # above the latest epoch: UNDEFINED
        1: (0, -1, -1),  # UNDEFINED_EPOCH asked
        2: (0, -1, -1),  # nothing written yet: the epoch cache is empty
    }


def test_unknown_topic_and_partition(broker: BrokerProcess, topic: str, unique: str):
    c = WireClient(broker.bootstrap)
    try:
        missing_topic = answers(c, ofle_request(4, f"missing-{unique}", {0: 0}))
        missing_partition = answers(c, ofle_request(4, topic, {9: 0}))
    finally:
        c.close()
    assert missing_topic == {0: (UNKNOWN_TOPIC_OR_PARTITION, -1, -1)}
    assert missing_partition == {9: (UNKNOWN_TOPIC_OR_PARTITION, -1, -1)}
