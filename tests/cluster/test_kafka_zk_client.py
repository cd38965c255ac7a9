"""KafkaZkClient against a real ZooKeeper 3.8: registration, the controller election and its
fencing, compare-and-set of partition state, topics, chroot, batches, a dead server.

Each test has its own chroot (the ``zk_connect`` fixture) on the session's server; tests that
stop or kill the server take their own (``own_zookeeper``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tests.cluster.conftest import (
    SessionEvents,
    expire_session,
    wait_until,
)
from tierlog.cluster import zk_data as zd
from tierlog.cluster.kafka_zk_client import KafkaZkClient
from tierlog.cluster.zk_data import BrokerEndPoint, BrokerInfo, PartitionState, TopicAssignment
from tierlog.cluster.zookeeper_client import ControllerMovedError
from tierlog.errors import TopicAlreadyExists, ZooKeeperClientError


def broker(broker_id: int, port: int = 9092, rack: str | None = None) -> BrokerInfo:
    return BrokerInfo(
        broker_id, (BrokerEndPoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),), rack
    )


def chroot_of(connect: str) -> str:
    return connect[connect.index("/") :]


# --------------------------------------------------------------------------- session, chroot


def test_chroot_is_created_and_holds_the_data(new_client, zk_connect, raw_zk):
    chroot = chroot_of(zk_connect)
    assert raw_zk.exists(chroot) is None
    c = new_client()
    c.create_top_level_paths()
    c.register_broker(broker(1, rack="r1"))
    data, _ = raw_zk.get(f"{chroot}/brokers/ids/1")
    assert BrokerInfo.decode(1, data).rack == "r1"
    assert raw_zk.exists("/brokers/ids/1") is None  # nothing outside the chroot
    assert set(raw_zk.get_children(chroot)) >= {"brokers", "config", "admin", "consumers"}


def test_cluster_id_is_created_once(new_client):
    a, b = new_client(), new_client()
    assert a.get_or_create_cluster_id("first-id") == "first-id"
    assert b.get_or_create_cluster_id("second-id") == "first-id"


def test_a_dead_zookeeper_fails_start_within_the_connection_timeout(own_zookeeper):
    connect = own_zookeeper.connect_string
    own_zookeeper.kill()
    client = KafkaZkClient(f"{connect}/kafka", session_timeout_ms=4000, connection_timeout_ms=1500)
    started = time.monotonic()
    with pytest.raises(ZooKeeperClientError) as e:
        client.start()
    elapsed = time.monotonic() - started
    print(f"start() gave up after {elapsed:.2f} s")
    assert str(e.value) == f"cannot connect to ZooKeeper at {connect}/kafka within 1500 ms"
    assert elapsed >= 1.5
    assert elapsed < 30  # bounded by the timeout, not kazoo's endless reconnection
    client.close()


def test_requests_wait_for_a_restarted_server(own_zookeeper):
    """A request made while the server is down is answered once it is back.

    The session usually lives on (a restart keeps the sessions), but Debian's ZooKeeper 3.8.0
    does not answer nor close a connection that arrives while it loads its database (an NPE
    in ``NIOServerCnxn.close``): a client that reconnects in that instant waits out its
    handshake timeout, and the session may expire meanwhile. Then the client must have said
    LOST before CONNECTED, never switch sessions silently."""
    client = KafkaZkClient(
        f"{own_zookeeper.connect_string}/kafka",
        session_timeout_ms=6000,
        connection_timeout_ms=60000,
    )
    client.start()
    try:
        events = SessionEvents(client)
        client.create_top_level_paths()
        assignment = TopicAssignment("t", uuid.uuid4(), {0: (1,)})
        client.create_topic(assignment, {})
        session = client.session_id
        own_zookeeper.stop()
        events.wait_for("SUSPENDED")
        result: list[object] = []
        reader = threading.Thread(target=lambda: result.append(client.get_all_topics()))
        reader.start()
        own_zookeeper.start()
        reader.join(120)
        assert result == [{"t"}]
        events.wait_for("CONNECTED")
        assert client.session_id == session or "LOST" in events.seen, events.seen
    finally:
        client.close()


# --------------------------------------------------------------------------- registration


def test_broker_epoch_is_the_czxid(new_client, zk_connect, raw_zk):
    c = new_client()
    c.create_top_level_paths()
    epoch = c.register_broker(broker(1))
    _, stat = raw_zk.get(f"{chroot_of(zk_connect)}/brokers/ids/1")
    assert epoch == stat.czxid
    assert stat.ephemeralOwner == c.session_id
    assert c.get_broker(1) == BrokerInfo(1, broker(1).endpoints, None, epoch)
    # registering again in the same session is a no-op with the same epoch
    assert c.register_broker(broker(1)) == epoch


def test_a_duplicate_broker_id_is_refused(new_client):
    a, b = new_client(), new_client()
    a.create_top_level_paths()
    a.register_broker(broker(1, 9092))
    with pytest.raises(ZooKeeperClientError, match="broker id 1 is already registered"):
        b.register_broker(broker(1, 9093), stale_wait_s=0.5)
    assert a.get_broker(1).endpoints[0].port == 9092  # the holder's registration is intact
    b.register_broker(broker(2, 9093))
    assert set(a.get_all_brokers()) == {1, 2}


def test_a_registration_of_a_killed_process_is_waited_for(new_client):
    """A broker restarted right after a SIGKILL finds its previous process's node, whose
    session has not expired yet: it waits for the node to go instead of failing."""
    a, b = new_client(), new_client()
    a.create_top_level_paths()
    a.register_broker(broker(1, 9092))
    registered: list[int] = []
    t = threading.Thread(
        target=lambda: registered.append(b.register_broker(broker(1, 9093), stale_wait_s=60))
    )
    t.start()
    assert not registered  # still waiting: the node belongs to a's session
    a.close()  # the previous process's session ends: ZooKeeper deletes its ephemeral node
    t.join(60)
    assert registered and b.get_broker(1).endpoints[0].port == 9093
    assert b.kazoo.get("/brokers/ids/1")[1].ephemeralOwner == b.session_id


def test_re_registration_after_the_session_expired(new_client, zookeeper):
    c = new_client()
    events = SessionEvents(c)
    c.create_top_level_paths()
    first_session = c.session_id
    first_epoch = c.register_broker(broker(1))
    expire_session(zookeeper.connect_string, c)
    events.wait_for("LOST")
    events.wait_for("CONNECTED")
    assert c.session_id != first_session
    assert c.get_broker(1) is None  # the ephemeral went with the session
    second_epoch = c.register_broker(broker(1))
    assert second_epoch > first_epoch
    assert c.get_all_brokers()[1].epoch == second_epoch


def test_a_registration_left_by_our_expired_session_is_replaced(new_client):
    """ZOOKEEPER-2985: an ephemeral of an expired session that lingers. The server cannot be
    made to keep one, so another client's session plays it, with this client told that the
    session was one of its own."""
    c, leftover = new_client(), new_client()
    c.create_top_level_paths()
    stale_epoch = leftover.register_broker(broker(1))
    assert leftover.session_id is not None
    c._own_sessions.add(leftover.session_id)  # as if c had held that session before
    epoch = c.register_broker(broker(1))
    assert epoch > stale_epoch
    assert c.kazoo.get("/brokers/ids/1")[1].ephemeralOwner == c.session_id


# --------------------------------------------------------------------------- controller


def test_one_of_two_brokers_wins_the_election(new_client):
    a, b = new_client(), new_client()
    barrier = threading.Barrier(2)
    outcome: dict[int, tuple[int, int] | None] = {}

    def run(client: KafkaZkClient, broker_id: int) -> None:
        barrier.wait()
        outcome[broker_id] = client.elect_controller(broker_id)

    threads = [threading.Thread(target=run, args=(a, 1)), threading.Thread(target=run, args=(b, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [(i, won) for i, won in outcome.items() if won is not None]
    assert len(winners) == 1, outcome
    winner, (epoch, epoch_zk_version) = winners[0]
    assert epoch == 1  # /controller_epoch created as 0, the first election makes it 1
    assert a.get_controller_id() == b.get_controller_id() == winner
    assert b.get_controller_epoch() == (epoch, epoch_zk_version)


def test_the_other_broker_takes_over_when_the_controller_dies(new_client):
    a, b = new_client(), new_client()
    assert a.elect_controller(1) == (1, 1)
    assert b.elect_controller(2) is None
    elected: list[tuple[int, int] | None] = []

    def on_controller(data: bytes | None, version: int | None) -> None:
        if data is None:  # Kafka's ControllerChange: the controller went, run the election
            # a watch callback must not block kazoo's thread: elect from another thread
            threading.Thread(target=lambda: elected.append(b.elect_controller(2))).start()

    b.watch_data(zd.CONTROLLER_PATH, on_controller)
    a.close()  # the controller's session ends: /controller goes with it
    wait_until(lambda: elected, "broker 2's election")
    assert elected == [(2, 2)]
    assert b.get_controller_id() == 2
    assert b.get_controller_epoch() == (2, 2)


def test_resign_deletes_only_our_own_controller_node(new_client):
    a, b = new_client(), new_client()
    a.elect_controller(1)
    b.resign_controller(1)  # b's session does not hold it
    assert a.get_controller_id() == 1
    a.resign_controller(2)  # not broker 2's either
    assert a.get_controller_id() == 1
    a.resign_controller(1)
    assert a.get_controller_id() is None
    assert b.elect_controller(2) == (2, 2)


# --------------------------------------------------------------------------- fencing and CAS


def make_topic(client: KafkaZkClient, name: str, partitions: int) -> TopicAssignment:
    a = TopicAssignment(name, uuid.uuid4(), {p: (1, 2) for p in range(partitions)})
    client.create_topic(a, {})
    return a


def test_a_stale_controller_epoch_writes_nothing(new_client):
    old, new = new_client(), new_client()
    old.create_top_level_paths()
    epoch, old_cev = old.elect_controller(1)
    assignment = make_topic(old, "t", 2)
    created = old.create_partition_states(
        {("t", p): PartitionState(1, 0, (1, 2), epoch) for p in range(2)}, old_cev
    )
    old.close()  # the old controller's session ends; broker 2 is elected
    new_epoch, new_cev = new.elect_controller(2)
    assert new_epoch == epoch + 1
    before = new.get_partition_states([("t", 0), ("t", 1)])

    stale = {tp: PartitionState(2, 1, (2,), epoch, zk_version=0) for tp in before}
    with pytest.raises(ControllerMovedError):
        new.update_partition_states(stale, old_cev)
    with pytest.raises(ControllerMovedError):
        new.create_partition_states({("t", 2): PartitionState(1, 0, (1,), epoch)}, old_cev)
    grown = TopicAssignment("t", assignment.topic_id, {**assignment.partitions, 2: (1, 2)})
    with pytest.raises(ControllerMovedError):
        new.set_topic_assignment(grown, 0, old_cev)
    with pytest.raises(ControllerMovedError):
        new.delete_topic_znodes("t", old_cev)

    assert new.get_partition_states([("t", 0), ("t", 1), ("t", 2)]) == before
    assert before == {tp: s for tp, s in created.items()}
    assert new.get_topic_assignments(["t"])["t"] == assignment.__class__(
        "t", assignment.topic_id, assignment.partitions, zk_version=0
    )
    # the current controller's token works
    updated = new.update_partition_states(stale, new_cev)
    assert {tp: s.zk_version for tp, s in updated.items()} == {("t", 0): 1, ("t", 1): 1}


def test_partition_state_compare_and_set(new_client):
    c = new_client()
    c.create_top_level_paths()
    epoch, cev = c.elect_controller(1)
    make_topic(c, "t", 2)
    states = c.create_partition_states(
        {("t", p): PartitionState(1, 0, (1, 2), epoch) for p in range(2)}, cev
    )
    assert all(s.zk_version == 0 for s in states.values())
    again = c.create_partition_states({("t", 0): PartitionState(1, 0, (1, 2), epoch)}, cev)
    assert isinstance(again[("t", 0)], NodeExistsError)

    # the leader shrinks the ISR (its own write), then the controller writes with a stale
    # version: that partition loses the race, the other one is written
    s0 = states[("t", 0)]
    shrunk = c.update_leader_and_isr(("t", 0), PartitionState(1, 0, (1,), epoch, zk_version=0))
    assert shrunk == PartitionState(1, 0, (1,), epoch, zk_version=1)
    result = c.update_partition_states(
        {
            ("t", 0): PartitionState(2, 1, (2,), epoch, zk_version=s0.zk_version),
            ("t", 1): PartitionState(2, 1, (2,), epoch, zk_version=0),
        },
        cev,
    )
    assert isinstance(result[("t", 0)], BadVersionError)
    assert result[("t", 1)] == PartitionState(2, 1, (2,), epoch, zk_version=1)
    assert c.get_partition_states([("t", 0)])[("t", 0)] == shrunk

    # and the leader's write with a stale version is refused: it re-reads
    assert (
        c.update_leader_and_isr(("t", 1), PartitionState(1, 0, (1,), epoch, zk_version=0)) is None
    )
    assert c.get_partition_states([("t", 1)])[("t", 1)].leader == 2
    missing = PartitionState(1, 0, (1,), epoch, zk_version=0)
    assert isinstance(c.update_partition_states({("t", 9): missing}, cev)[("t", 9)], NoNodeError)
    # a state never read from ZooKeeper has no version to compare: a caller bug
    with pytest.raises(ValueError, match="zk_version"):
        c.update_partition_states({("t", 1): PartitionState(1, 0, (1,), epoch)}, cev)
    with pytest.raises(ValueError, match="zk_version"):
        c.update_leader_and_isr(("t", 1), PartitionState(1, 0, (1,), epoch))


def test_state_of_two_thousand_partitions_in_one_pipeline(new_client):
    c = new_client()
    c.create_top_level_paths()
    epoch, cev = c.elect_controller(1)
    topics = {f"t{i}": 100 for i in range(20)}
    for name, n in topics.items():
        make_topic(c, name, n)
    tps = [(t, p) for t, n in topics.items() for p in range(n)]
    states = {tp: PartitionState(1, 0, (1, 2), epoch) for tp in tps}

    started = time.monotonic()
    created = c.create_partition_states(states, cev)
    create_s = time.monotonic() - started
    started = time.monotonic()
    read = c.get_partition_states(tps)
    read_s = time.monotonic() - started
    started = time.monotonic()
    updated = c.update_partition_states(
        {tp: PartitionState(2, 1, (2, 1), epoch, zk_version=0) for tp in tps}, cev
    )
    update_s = time.monotonic() - started
    print(
        f"{len(tps)} state znodes: created in {create_s:.2f} s, read in {read_s:.2f} s, "
        f"updated in {update_s:.2f} s"
    )
    assert len(created) == len(read) == len(updated) == 2000
    assert read == {tp: PartitionState(1, 0, (1, 2), epoch, zk_version=0) for tp in tps}
    assert all(s == PartitionState(2, 1, (2, 1), epoch, zk_version=1) for s in updated.values())
    # How fast is for bench/bench_cluster_metadata.py, not a timed assert (a loaded machine).
    assigned = c.get_topic_assignments(topics)
    assert {t: len(a.partitions) for t, a in assigned.items()} == topics


# --------------------------------------------------------------------------- topics


def test_topic_create_and_exists(new_client):
    c = new_client()
    c.create_top_level_paths()
    a = TopicAssignment("orders", uuid.uuid4(), {0: (1, 2), 1: (2, 1)})
    c.create_topic(a, {"retention.ms": "1000"})
    assert c.get_all_topics() == {"orders"}
    assert c.get_topic_assignments(["orders", "nope"]) == {
        "orders": TopicAssignment("orders", a.topic_id, a.partitions, zk_version=0)
    }
    assert c.get_topic_configs(["orders", "nope"]) == {
        "orders": {"retention.ms": "1000"},
        "nope": {},
    }
    with pytest.raises(TopicAlreadyExists, match=r"Topic .orders. already exists\."):
        c.create_topic(TopicAssignment("orders", uuid.uuid4(), {0: (1,)}), {"x": "y"})
    assert c.get_topic_configs(["orders"])["orders"] == {"retention.ms": "1000"}

    c.set_topic_config("orders", {"retention.ms": "5"})
    assert c.get_topic_configs(["orders"])["orders"] == {"retention.ms": "5"}
    changes = c.get_children(zd.CONFIG_CHANGES_PATH)
    assert changes == ["config_change_0000000000"]
    data, _ = c.get_data(f"{zd.CONFIG_CHANGES_PATH}/{changes[0]}")
    assert zd.decode_config_change_notification(data) == "topics/orders"

    # partitions added by the admin path (no controller check: -1)
    grown = TopicAssignment("orders", a.topic_id, {**a.partitions, 2: (1, 2)})
    assert c.set_topic_assignment(grown, 0, -1) == 1
    with pytest.raises(BadVersionError):
        c.set_topic_assignment(grown, 0, -1)


def test_topic_deletion(new_client):
    c = new_client()
    c.create_top_level_paths()
    epoch, cev = c.elect_controller(1)
    make_topic(c, "gone", 3)
    c.create_partition_states(
        {("gone", p): PartitionState(1, 0, (1,), epoch) for p in range(3)}, cev
    )
    c.mark_topics_for_deletion(["gone"])
    c.mark_topics_for_deletion(["gone"])  # twice is fine
    assert c.get_topics_marked_for_deletion() == {"gone"}
    with pytest.raises(TopicAlreadyExists, match="already exists"):
        make_topic(c, "gone", 1)
    c.delete_topic_znodes("gone", cev)
    c.delete_topic_znodes("gone", cev)  # a new controller finishing the job
    assert c.get_all_topics() == set()
    assert c.get_topics_marked_for_deletion() == set()
    assert c.get_data(zd.config_topic_path("gone")) is None
    make_topic(c, "gone", 1)  # the name is free again


# --------------------------------------------------------------------------- admin requests


def test_controlled_shutdown_requests(new_client):
    c = new_client()
    c.create_top_level_paths()
    assert c.get_controlled_shutdown_requests() == {}
    c.request_controlled_shutdown(2, 4242)
    c.request_controlled_shutdown(3, 77)
    c.request_controlled_shutdown(3, 78)  # asked again by a new incarnation
    assert c.get_controlled_shutdown_requests() == {2: 4242, 3: 78}
    data, _ = c.get_data("/admin/controlled_shutdown/2")
    assert data == b'{"version":1,"broker_epoch":4242}'
    c.delete_controlled_shutdown_request(2)
    c.delete_controlled_shutdown_request(2)
    assert c.get_controlled_shutdown_requests() == {3: 78}


def test_preferred_replica_election(new_client):
    c = new_client()
    assert c.get_preferred_replica_election() == set()
    c.kazoo.create(
        zd.PREFERRED_REPLICA_ELECTION_PATH,
        b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"t","partition":1}]}',
        makepath=True,
    )
    assert c.get_preferred_replica_election() == {("t", 0), ("t", 1)}
    c.delete_preferred_replica_election()
    assert c.get_preferred_replica_election() == set()


def test_kazoo_without_chroot_is_not_confused_by_ours(zk_connect, raw_zk):
    """What zkCli.sh shows: a Kafka operator finds the layout under the chroot."""
    with KafkaZkClient(zk_connect) as c:
        c.create_top_level_paths()
        c.get_or_create_cluster_id("abc")
        chroot = chroot_of(zk_connect)
        assert isinstance(raw_zk, KazooClient)
        assert raw_zk.get(f"{chroot}/cluster/id")[0] == b'{"version":"1","id":"abc"}'
    assert raw_zk.get_children(f"{chroot}/brokers/ids") == []


def test_a_paused_server_suspends_the_session_until_resumed(own_zookeeper):
    client = KafkaZkClient(
        f"{own_zookeeper.connect_string}/kafka",
        session_timeout_ms=2000,
        connection_timeout_ms=30000,
    )
    client.start()
    try:
        events = SessionEvents(client)
        client.create_top_level_paths()
        own_zookeeper.pause()
        try:
            events.wait_for("SUSPENDED")  # no pings answered within the session timeout
        finally:
            own_zookeeper.resume()
        events.wait_for("CONNECTED")
        # whether or not the session outlived the pause, the client serves requests again
        client.register_broker(broker(1))
        assert set(client.get_all_brokers()) == {1}
    finally:
        client.close()


def test_isr_change_notifications(new_client):
    c = new_client()
    c.create_top_level_paths()
    _, cev = c.elect_controller(1)
    first = c.propagate_isr_changes([("t", 0), ("t", 1)])
    second = c.propagate_isr_changes([("u", 2)])
    assert (first, second) == ("isr_change_0000000000", "isr_change_0000000001")
    assert c.get_isr_change_notifications() == {first: {("t", 0), ("t", 1)}, second: {("u", 2)}}
    with pytest.raises(ControllerMovedError):
        c.delete_isr_change_notifications([first], cev + 1)
    c.delete_isr_change_notifications([first, "isr_change_0000000099"], cev)
    assert c.get_isr_change_notifications() == {second: {("u", 2)}}


def test_a_request_fails_when_zookeeper_stays_away(own_zookeeper):
    """A request made while ZooKeeper is away gives up after zookeeper.connection.timeout.ms
    in all. It waited twice that (once for the answer, then again for the connection): a
    broker stopped with its ZooKeeper gone took 24 s, two requests of 12 s."""
    client = KafkaZkClient(
        f"{own_zookeeper.connect_string}/kafka", session_timeout_ms=4000, connection_timeout_ms=2000
    )
    client.start()
    try:
        events = SessionEvents(client)
        client.create_top_level_paths()
        own_zookeeper.kill()
        events.wait_for("SUSPENDED")
        started = time.monotonic()
        with pytest.raises(
            ZooKeeperClientError, match=r"no connection to ZooKeeper at .* for 2000 ms"
        ):
            client.get_all_brokers()
        waited = time.monotonic() - started
        assert 2.0 <= waited < 3.5, f"gave up after {waited:.2f} s"
    finally:
        client.close()


def test_concurrent_compare_and_set_loses_no_write(new_client):
    """The controller and the partition leader write one state znode at once, each
    read-modify-write in a loop: every write that succeeded got its own version, and the
    znode's version is the number of successes (no write was lost or applied twice)."""
    controller, leader = new_client(), new_client()
    controller.create_top_level_paths()
    epoch, cev = controller.elect_controller(1)
    make_topic(controller, "t", 1)
    controller.create_partition_states({("t", 0): PartitionState(1, 0, (1, 2), epoch)}, cev)
    tp = ("t", 0)
    won: dict[str, list[int]] = {"controller": [], "leader": []}
    barrier = threading.Barrier(2)

    def controller_loop() -> None:
        barrier.wait()
        for _ in range(150):
            s = controller.get_partition_states([tp])[tp]
            new = PartitionState(
                s.leader, s.leader_epoch + 1, s.isr, epoch, zk_version=s.zk_version
            )
            r = controller.update_partition_states({tp: new}, cev)[tp]
            if isinstance(r, PartitionState):
                won["controller"].append(r.zk_version)
            else:
                assert isinstance(r, BadVersionError)

    def leader_loop() -> None:
        barrier.wait()
        for i in range(150):
            s = leader.get_partition_states([tp])[tp]
            isr = (1,) if i % 2 else (1, 2)
            r = leader.update_leader_and_isr(tp, dataclasses.replace(s, isr=isr))
            if r is not None:
                won["leader"].append(r.zk_version)

    threads = [threading.Thread(target=controller_loop), threading.Thread(target=leader_loop)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    versions = won["controller"] + won["leader"]
    final = controller.get_partition_states([tp])[tp]
    print(f"controller won {len(won['controller'])}, leader won {len(won['leader'])}")
    assert sorted(versions) == list(range(1, len(versions) + 1))
    assert final.zk_version == len(versions)
    assert final.leader_epoch == len(won["controller"])  # every controller win bumped it once
