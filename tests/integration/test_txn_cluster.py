"""Transactions in a 3-broker cluster: the transaction's partitions are led by different
brokers (markers go over WriteTxnMarkers), and the coordinator's broker is SIGKILLed right as
the producer commits. The new coordinator (the next leader of the transactional id's
``__transaction_state`` partition) completes or aborts the transaction, never a part of it:
a read_committed consumer sees all of its records or none (all when the commit returned)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.integration.cluster_support import SESSION_TIMEOUT_MS, Cluster, wait_for
from tests.zookeeper_process import ZooKeeperProcess
from tierlog.coordinator.group.group_metadata_manager import java_string_hash

pytestmark = pytest.mark.cluster

TXN_PARTITIONS = 5
PARTITIONS = 3
RECORDS = 30


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("txn-cluster"),
        f"{zookeeper.connect_string}/txn-{uuid.uuid4().hex}",
        3,
        "min.insync.replicas=2",
        "default.replication.factor=3",
        "offsets.topic.replication.factor=3",
        f"transaction.state.log.num.partitions={TXN_PARTITIONS}",
        "transaction.state.log.replication.factor=3",
        "transaction.state.log.min.isr=2",
        "auto.leader.rebalance.enable=false",
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def txn_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "acks": "all",
            "transaction.timeout.ms": 60_000,
            "message.timeout.ms": 60_000,
            "socket.connection.setup.timeout.ms": 3000,
        }
    )
    p.init_transactions(120)
    return p


def coordinator_of(cluster: Cluster, txn_id: str) -> int:
    h = java_string_hash(txn_id)
    partition = (0 if h == -(1 << 31) else abs(h)) % TXN_PARTITIONS
    return wait_for(
        "a leader of the transactional id's partition",
        lambda: (leader := cluster.leader("__transaction_state", partition)) >= 0 and leader,
        60,
    )


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(2))
def test_coordinator_killed_mid_commit_is_all_or_nothing(cluster, round_):
    b = cluster.bootstrap
    topic = f"txn-fo-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, PARTITIONS, 3)
    leaders = {cluster.leader(topic, p) for p in range(PARTITIONS)}
    assert len(leaders) > 1, "the transaction should span brokers"
    txn_id = f"fo-{uuid.uuid4().hex[:8]}"
    p = txn_producer(b, txn_id)
    victim = coordinator_of(cluster, txn_id)
    values = [f"t:{i}".encode() for i in range(RECORDS)]
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % PARTITIONS)
    p.flush(60)
    outcome: list[object] = []

    def commit() -> None:
        try:
            p.commit_transaction(120)
            outcome.append("committed")
        except KafkaException as e:
            outcome.append(e.args[0])

    t = threading.Thread(target=commit)
    t.start()
    cluster.brokers[victim].stop(signal.SIGKILL)
    t.join(180)
    assert outcome, "commit_transaction did not return"
    cluster.brokers[victim].start()
    back_s = SESSION_TIMEOUT_MS / 1000 + 60
    wait_for("the victim back", lambda: victim in cluster.live_ids(), back_s)
    cluster.wait_healthy(topic, PARTITIONS, 3, timeout=120)

    # A new instance fences the first; its own transaction ends the story.
    seen = read_committed_until_end(cluster, topic, txn_id)
    assert sorted(seen) in ([], sorted(values)), f"a part of the transaction: {len(seen)}"
    if outcome[0] == "committed":
        assert sorted(seen) == sorted(values)
    print(f"round {round_}: commit {outcome[0]}, {len(seen)} of {RECORDS} records visible")


@pytest.mark.slow
def test_new_coordinator_completes_a_prepared_commit(cluster):
    """Deterministic: a leader of the transaction's partitions is paused (SIGSTOP) so the
    markers cannot all be written, the commit is decided (PrepareCommit written, EndTxn
    answered), then the coordinator's broker is SIGKILLed and the paused one resumed. The
    next coordinator (another broker, or the killed one back) loads PrepareCommit and
    completes the commit: every record visible."""
    b = cluster.bootstrap
    txn_id = f"prep-{uuid.uuid4().hex[:8]}"
    p = txn_producer(b, txn_id)
    coordinator = coordinator_of(cluster, txn_id)
    others = sorted(set(cluster.brokers) - {coordinator})
    paused = others[0]
    # Every partition led by the broker to pause (it is not the coordinator).
    topic = f"txn-prep-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    order = [paused, *(i for i in cluster.brokers if i != paused)]
    fs = admin.create_topics(
        [NewTopic(topic, PARTITIONS, replica_assignment=[order] * PARTITIONS)], operation_timeout=30
    )
    fs[topic].result(30)
    cluster.wait_healthy(topic, PARTITIONS, 3)
    assert {cluster.leader(topic, part) for part in range(PARTITIONS)} == {paused}
    values = [f"t:{i}".encode() for i in range(RECORDS)]
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % PARTITIONS)
    p.flush(60)
    pb = cluster.brokers[paused]
    assert pb.proc is not None
    os.kill(pb.proc.pid, signal.SIGSTOP)
    try:
        p.commit_transaction(120)  # decided: PrepareCommit is in __transaction_state
        cluster.brokers[coordinator].stop(signal.SIGKILL)
    finally:
        os.kill(pb.proc.pid, signal.SIGCONT)
    cluster.brokers[coordinator].start()
    back_s = SESSION_TIMEOUT_MS / 1000 + 60
    wait_for("every broker back", lambda: cluster.live_ids() == set(cluster.brokers), back_s)
    seen = read_committed_until_end(cluster, topic, txn_id)
    assert sorted(seen) == sorted(values)
    # The next coordinator is usually another broker; on a slow machine the killed one can be
    # back before the controller moved its partitions, and lead __transaction_state again:
    # either way, a broker that loaded the state completed the commit.
    logs = "".join(b.log_since_start() for b in cluster.brokers.values())
    assert f"{txn_id}: completing the transaction left in PrepareCommit" in logs


def read_committed_until_end(cluster: Cluster, topic: str, txn_id: str) -> list[bytes]:
    """The topic's records in read_committed, up to an end record per partition that a new
    instance of ``txn_id`` commits (it fences the old one first)."""
    last = txn_producer(cluster.bootstrap, txn_id)
    last.begin_transaction()
    for part in range(PARTITIONS):
        last.produce(topic, f"end:{part}".encode(), partition=part)
    last.commit_transaction(120)
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "checker",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    seen: list[bytes] = []
    ends = 0
    try:
        c.assign([TopicPartition(topic, part, 0) for part in range(PARTITIONS)])
        deadline = time.monotonic() + 120
        while ends < PARTITIONS:
            assert time.monotonic() < deadline, f"end records not read ({ends})"
            for m in c.consume(1000, 1.0):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                if m.value().startswith(b"end:"):
                    ends += 1
                else:
                    seen.append(m.value())
    finally:
        c.close()
    return seen
