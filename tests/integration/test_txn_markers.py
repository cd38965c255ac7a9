"""WriteTxnMarkers (27) on a real broker process, over raw kio requests: the markers land in
the log as Kafka's control batches, and the producer's epoch and the coordinator's epoch fence
stale markers."""

from __future__ import annotations

import random

import pytest

from tests.integration.conftest import BrokerProcess
from tests.integration.txn_support import (
    READ_UNCOMMITTED,
    fetch_partition,
    produce_batch,
    txn_batch,
    write_txn_markers,
)
from tests.integration.wire import WireClient, create_topics
from tierlog.records import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    EndTransactionMarker,
    iter_headers,
    read_end_txn_marker,
)

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_PRODUCER_EPOCH = 47
TRANSACTION_COORDINATOR_FENCED = 52


@pytest.fixture
def client(broker: BrokerProcess) -> WireClient:
    c = WireClient(broker.bootstrap)
    yield c
    c.close()


def pid() -> int:
    """A producer id no other test uses (the broker's own ids start far below)."""
    return random.randrange(10**12, 2 * 10**12)


@pytest.mark.parametrize("version", [1, 2])
def test_markers_are_control_batches_in_the_log(client: WireClient, unique: str, version: int):
    topic = f"markers-{unique}"
    assert create_topics(client, {topic: 2}) == {topic: 0}
    p1, p2 = pid(), pid()
    assert produce_batch(client, topic, 0, txn_batch(p1, [b"a", b"b", b"c"])) == (0, 0)
    assert produce_batch(client, topic, 1, txn_batch(p2, [b"x"])) == (0, 0)
    assert write_txn_markers(client, p1, False, {topic: [0]}, version=version) == {(topic, 0): 0}
    assert write_txn_markers(
        client, p2, True, {topic: [1]}, coordinator_epoch=3, version=version
    ) == {(topic, 1): 0}

    for partition, producer, control_type, coordinator_epoch, marker_offset in (
        (0, p1, CONTROL_TYPE_ABORT, 0, 3),
        (1, p2, CONTROL_TYPE_COMMIT, 3, 1),
    ):
        got = fetch_partition(client, topic, partition, 0, READ_UNCOMMITTED)
        assert got.error_code == 0
        assert got.high_watermark == marker_offset + 1
        data, control = list(iter_headers(got.records))
        assert not data.is_control_batch and data.is_transactional
        assert control.is_control_batch and control.is_transactional
        assert (control.base_offset, control.producer_id) == (marker_offset, producer)
        assert control.base_sequence == -1 and control.records_count == 1
        assert read_end_txn_marker(got.records, control) == EndTransactionMarker(
            control_type, coordinator_epoch
        )


def test_stale_markers_are_fenced(client: WireClient, unique: str):
    topic = f"fenced-{unique}"
    assert create_topics(client, {topic: 1}) == {topic: 0}
    p = pid()
    assert produce_batch(client, topic, 0, txn_batch(p, [b"a"], producer_epoch=2)) == (0, 0)
    # A marker of an older producer epoch (a zombie's transaction) is refused.
    assert write_txn_markers(client, p, False, {topic: [0]}, producer_epoch=1) == {
        (topic, 0): INVALID_PRODUCER_EPOCH
    }
    assert write_txn_markers(
        client, p, True, {topic: [0]}, producer_epoch=2, coordinator_epoch=5
    ) == {(topic, 0): 0}
    # A marker from an older coordinator epoch (a deposed coordinator) is refused.
    assert write_txn_markers(
        client, p, True, {topic: [0]}, producer_epoch=2, coordinator_epoch=4
    ) == {(topic, 0): TRANSACTION_COORDINATOR_FENCED}
    got = fetch_partition(client, topic, 0, 0, READ_UNCOMMITTED)
    assert [h.base_offset for h in iter_headers(got.records)] == [0, 1]


def test_unknown_partitions_get_their_own_error(client: WireClient, unique: str):
    topic = f"known-{unique}"
    assert create_topics(client, {topic: 1}) == {topic: 0}
    p = pid()
    assert produce_batch(client, topic, 0, txn_batch(p, [b"a"])) == (0, 0)
    got = write_txn_markers(client, p, True, {topic: [0, 7], f"missing-{unique}": [0]})
    assert got == {
        (topic, 0): 0,
        (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
        (f"missing-{unique}", 0): UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_transactional_records_need_a_transactional_id(client: WireClient, unique: str):
    topic = f"no-tid-{unique}"
    assert create_topics(client, {topic: 1}) == {topic: 0}
    batch = txn_batch(pid(), [b"a"])
    assert produce_batch(client, topic, 0, batch, transactional_id=None)[0] == 53
    assert produce_batch(client, topic, 0, batch, transactional_id="tid") == (0, 0)
