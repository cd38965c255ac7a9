"""JBOD: AlterReplicaLogDirs (API 34) moves a partition between the ``log.dirs`` of one broker
while it serves, DescribeLogDirs (API 35) shows the move, through real clients over real
sockets against a real broker process (kafka-python's KafkaAdminClient for both APIs, raw kio
requests where a client cannot send what the test needs).

A tiered topic is moved while a producer writes and consumers read its remote part: every
record exactly once, offsets unchanged, remote reads served during and after; a broker
SIGKILLed in the middle of a move restarts and finishes it; the error codes of Kafka.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.structs import TopicPartition as KTP
    from kafka.structs import TopicPartitionReplica

import pytest

from tests.integration.clients import cf_create_topic, kp_admin
from tests.integration.cluster_support import Cluster
from tests.integration.conftest import TieredEnv, running_broker
from tests.integration.tiered_support import (
    SEGMENT_BYTES,
    TIERED_BROKER,
    FileStore,
    Offsets,
    assert_same,
    consume,
    fetch,
    make_records,
    produce,
    tiered_topic_configs,
    wait_until,
)
from tests.integration.wire import WireClient, request_class
from tests.zookeeper_process import ZooKeeperProcess

NONE = 0
REPLICA_NOT_AVAILABLE = 9
UNKNOWN_TOPIC_OR_PARTITION = 3
CLUSTER_AUTHORIZATION_FAILED = 31
KAFKA_STORAGE_ERROR = 56
LOG_DIR_NOT_FOUND = 57


def _dirs(workdir: Path) -> tuple[Path, Path]:
    return (workdir / "logs-a").absolute(), (workdir / "logs-b").absolute()


def _node_id(bootstrap: str) -> int:
    admin = kp_admin(bootstrap)
    try:
        (broker,) = admin.describe_cluster()["brokers"]
        return int(broker.get("node_id", broker.get("broker_id", -1)))
    finally:
        admin.close()


def alter(
    bootstrap: str, moves: dict[tuple[str, int], str], node: int | None = None
) -> dict[tuple[str, int], int]:
    """AlterReplicaLogDirs with kafka-python (to broker ``node``, default: the only one): per
    partition its error code."""
    node = _node_id(bootstrap) if node is None else node
    admin = kp_admin(bootstrap)
    try:
        got = admin.alter_replica_log_dirs(
            {TopicPartitionReplica(t, p, node): d for (t, p), d in moves.items()}
        )
    finally:
        admin.close()
    return {(r.topic, r.partition): int(err.errno) for r, err in got.items()}


def describe(
    bootstrap: str, topic: str, node: int | None = None
) -> list[tuple[str, int, int, int, bool]]:
    """DescribeLogDirs with kafka-python (of broker ``node``, default: the only one):
    (log dir, partition, size, offset lag, is future)."""
    admin = kp_admin(bootstrap)
    try:
        (broker,) = admin.describe_log_dirs([topic], brokers=None if node is None else [node])
    finally:
        admin.close()
    out = []
    for d in broker["log_dirs"]:
        assert d["error_code"] == 0, d
        for t in d["topics"]:
            if t["name"] != topic:
                continue
            for p in t["partitions"]:
                out.append(
                    (
                        d["log_dir"],
                        p["partition_index"],
                        p["partition_size"],
                        p["offset_lag"],
                        p["is_future_key"],
                    )
                )
    return sorted(out)


def _current_dir(bootstrap: str, topic: str, partition: int = 0, node: int | None = None) -> str:
    (entry,) = [e for e in describe(bootstrap, topic, node) if e[1] == partition and not e[4]]
    return entry[0]


def _settled_in(bootstrap: str, topic: str, target: str, node: int | None = None) -> bool:
    """The partition is in ``target`` only, with no future replica left."""
    return [(e[0], e[4]) for e in describe(bootstrap, topic, node)] == [(target, False)]


class _Reader(threading.Thread):
    """Fetches offset 0 (remote storage only) again and again over the wire until stopped:
    counts the reads that returned records, and those that did while a future replica
    existed (read from the broker in between)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.stop = threading.Event()
        self.moving = threading.Event()
        self.served = 0
        self.served_while_moving = 0
        self.errors: list[int] = []

    def run(self) -> None:
        while not self.stop.is_set():
            moving = self.moving.is_set()
            (res,) = fetch(self.bootstrap, [(self.topic, 0, 0)], max_wait_ms=0).values()
            code, records = res[0], res[1]
            if code:
                self.errors.append(code)
            elif records:
                self.served += 1
                if moving and self.moving.is_set():
                    self.served_while_moving += 1


def test_move_a_tiered_partition_while_it_is_written_and_its_remote_part_read(
    tiered_env: TieredEnv, unique: str
) -> None:
    """Once per remote store: a local dir, and SeaweedFS (S3, marked ``s3``)."""
    a, b = _dirs(tiered_env.workdir)
    topic = f"jbod-{unique}"
    broker = tiered_env.start(
        f"log.dirs={a},{b}",
        # ~64 KB local at 32 KB/s: the move lasts seconds, long enough to be seen.
        "replica.alter.log.dirs.io.max.bytes.per.second=32768",
    )
    bs = broker.bootstrap
    cf_create_topic(
        bs, topic, 1, **tiered_topic_configs(local_retention_bytes=str(2 * SEGMENT_BYTES))
    )
    first = make_records(3000)
    produce(bs, topic, first)
    wait_until(
        lambda: Offsets(bs, topic).local >= 1500,
        what="the first half of the topic in remote storage only",
    )
    source = _current_dir(bs, topic)
    target = str(b if source == str(a) else a)
    before = describe(bs, topic)
    assert [(e[0], e[4]) for e in before] == [(source, False)]
    assert before[0][2] > 0  # its local size

    reader = _Reader(bs, topic)
    reader.start()
    wait_until(lambda: reader.served > 0, what="a remote read")
    more = make_records(1500, start=3000)
    producer = threading.Thread(
        target=lambda: [produce(bs, topic, more[i : i + 100]) for i in range(0, 1500, 100)],
        daemon=True,
    )
    producer.start()

    assert alter(bs, {(topic, 0): target}) == {(topic, 0): NONE}
    reader.moving.set()
    # While it moves: the current replica in the source dir, the future one in the target.
    seen = wait_until(
        lambda: [e for e in describe(bs, topic) if e[4]],
        what="the future replica in DescribeLogDirs",
    )
    assert seen[0][0] == target and seen[0][1] == 0
    wait_until(lambda: reader.served_while_moving >= 3, what="remote reads during the move")
    wait_until(lambda: _settled_in(bs, topic, target), timeout=60, what="the move done")
    reader.moving.clear()
    producer.join(60)
    assert not producer.is_alive()
    served = reader.served
    wait_until(lambda: reader.served > served, what="a remote read after the move")
    reader.stop.set()
    reader.join(30)
    assert reader.served_while_moving >= 3
    assert not reader.errors, reader.errors[:5]

    # Every record exactly once, at its offset, byte for byte; the offsets unchanged.
    sent = first + more
    off = Offsets(bs, topic)
    assert off.earliest == 0 and off.end == len(sent), off
    got = consume(bs, topic, len(sent))
    offsets = [m.offset() for m in got]
    bad = next((i for i, o in enumerate(offsets) if o != i), None)
    assert bad is None, (bad, offsets[max(0, (bad or 0) - 3) : (bad or 0) + 3])
    assert_same(sent, got)
    after = describe(bs, topic)
    assert after[0][0] == target and after[0][2] > 0
    # On disk: the partition in the target dir only, no -future or -delete dir left.
    wait_until(lambda: not list(Path(source).glob(f"{topic}-0*")), what="the source gone")
    assert [p.name for p in Path(target).glob(f"{topic}-0*")] == [f"{topic}-0"]
    assert "Traceback" not in broker.log_text(), broker.tail()


def test_a_broker_killed_in_the_middle_of_a_move_finishes_it_after_a_restart(
    tmp_path: Path, unique: str
) -> None:
    a, b = _dirs(tmp_path)
    topic = f"jbod-kill-{unique}"
    slow = "replica.alter.log.dirs.io.max.bytes.per.second=8192"
    with running_broker(tmp_path, *_tiered_broker(tmp_path), f"log.dirs={a},{b}", slow) as br:
        bs = br.bootstrap
        cf_create_topic(
            bs, topic, 1, **tiered_topic_configs(local_retention_bytes=str(2 * SEGMENT_BYTES))
        )
        sent = make_records(2000)
        produce(bs, topic, sent)
        wait_until(lambda: Offsets(bs, topic).local > 0, what="a part in remote storage only")
        source = _current_dir(bs, topic)
        target = str(b if source == str(a) else a)
        assert alter(bs, {(topic, 0): target}) == {(topic, 0): NONE}
        wait_until(
            lambda: any(e[4] and e[2] > 0 for e in describe(bs, topic)),
            what="a partly filled future replica",
        )
        br.kill()  # SIGKILL
        assert len(list(Path(target).glob(f"{topic}-0.*-future"))) == 1
        # Restarted without the limit: the loader keeps the future replica, the move resumes.
        br.extra_overrides.remove(slow)
        br.start()
        wait_until(lambda: _settled_in(bs, topic, target), timeout=60, what="the move done")
        off = Offsets(bs, topic)
        assert off.earliest == 0 and off.end == len(sent), off
        assert_same(sent, consume(bs, topic, len(sent)))
        assert [p.name for p in Path(target).glob(f"{topic}-0*")] == [f"{topic}-0"]
        wait_until(lambda: not list(Path(source).glob(f"{topic}-0*")), what="the source gone")


def test_errors_of_alter_replica_log_dirs(tmp_path: Path, unique: str) -> None:
    a, b = _dirs(tmp_path)
    topic = f"jbod-err-{unique}"
    with running_broker(tmp_path, f"log.dirs={a},{b}") as broker:
        bs = broker.bootstrap
        cf_create_topic(bs, topic, 2)
        produce(bs, topic, make_records(10))
        got = alter(
            bs,
            {
                (topic, 0): str(tmp_path / "not-a-log-dir"),  # not in log.dirs
                (topic, 1): _current_dir(bs, topic, 1),
                (f"missing-{unique}", 0): str(a),
                (topic, 7): str(b),  # no such partition
            },
        )
        assert got == {
            (topic, 0): LOG_DIR_NOT_FOUND,
            (topic, 1): NONE,  # already there: nothing to do
            (f"missing-{unique}", 0): UNKNOWN_TOPIC_OR_PARTITION,
            (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
        }
        # The same through v1 with a raw request (kafka-python sends v2? either way, both).
        for version in (1, 2):
            cls = request_class(34, version)
            m = __import__(cls.__module__, fromlist=["AlterReplicaLogDir"])
            req = cls(
                dirs=(
                    m.AlterReplicaLogDir(
                        path="relative/elsewhere",
                        topics=(m.AlterReplicaLogDirTopic(name=topic, partitions=(0,)),),
                    ),
                )
            )
            c = WireClient(bs)
            try:
                resp = c.call(req)
            finally:
                c.close()
            (t,) = resp.results
            assert t.topic_name == topic
            assert [(p.partition_index, p.error_code) for p in t.partitions] == [
                (0, LOG_DIR_NOT_FOUND)
            ]
        # Nothing moved, nothing half created.
        assert [e[4] for e in describe(bs, topic)] == [False, False]
        assert not list(Path(a).glob("*-future")) and not list(Path(b).glob("*-future"))


def test_a_move_to_a_failed_log_dir_answers_kafka_storage_error(
    tmp_path: Path, unique: str
) -> None:
    a, b = _dirs(tmp_path)
    topic = f"jbod-disk-{unique}"
    with running_broker(tmp_path, f"log.dirs={a},{b}") as broker:
        bs = broker.bootstrap
        cf_create_topic(bs, topic, 1)
        sent = make_records(20)
        produce(bs, topic, sent)
        source = _current_dir(bs, topic)
        target = b if source == str(a) else a
        # A dead disk: the target dir is gone, a plain file in its place.
        parked = target.with_name(target.name + ".parked")
        target.rename(parked)
        target.write_bytes(b"a failed disk\n")
        try:
            assert alter(bs, {(topic, 0): str(target)}) == {(topic, 0): KAFKA_STORAGE_ERROR}
            # Now offline: refused at once, and DescribeLogDirs reports it.
            assert alter(bs, {(topic, 0): str(target)}) == {(topic, 0): KAFKA_STORAGE_ERROR}
            admin = kp_admin(bs)
            try:
                (desc,) = admin.describe_log_dirs([topic])
            finally:
                admin.close()
            errors = {d["log_dir"]: d["error_code"] for d in desc["log_dirs"]}
            assert errors == {source: NONE, str(target): KAFKA_STORAGE_ERROR}
            # The partition keeps serving from its own dir.
            assert_same(sent, consume(bs, topic, len(sent)))
        finally:
            target.unlink()
            parked.rename(target)


def test_alter_replica_log_dirs_needs_alter_on_the_cluster(tmp_path: Path, unique: str) -> None:
    a, b = _dirs(tmp_path)
    # ANONYMOUS on PLAINTEXT, no ACL: not allowed to ALTER the cluster.
    authorizer = "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"
    with running_broker(tmp_path, f"log.dirs={a},{b}", authorizer) as broker:
        got = _raw_alter(broker.bootstrap, str(b), f"t-{unique}", 0)
        assert got == CLUSTER_AUTHORIZATION_FAILED
        # Authorization is checked before the dir: a bad path is not even looked at.
        assert _raw_alter(broker.bootstrap, "nowhere", f"t-{unique}", 0) == (
            CLUSTER_AUTHORIZATION_FAILED
        )


def _raw_alter(bootstrap: str, path: str, topic: str, partition: int) -> int:
    cls = request_class(34, 2)
    m = __import__(cls.__module__, fromlist=["AlterReplicaLogDir"])
    req = cls(
        dirs=(
            m.AlterReplicaLogDir(
                path=path,
                topics=(m.AlterReplicaLogDirTopic(name=topic, partitions=(partition,)),),
            ),
        )
    )
    c = WireClient(bootstrap)
    try:
        resp = c.call(req)
    finally:
        c.close()
    return int(resp.results[0].partitions[0].error_code)


def _partitions_in(c: Cluster, node: int, log_dir: Path) -> int:
    """How many partitions broker ``node`` has in ``log_dir`` (DescribeLogDirs)."""
    admin = kp_admin(c.bootstrap)
    try:
        (broker,) = admin.describe_log_dirs(None, brokers=[node])
    finally:
        admin.close()
    (d,) = [d for d in broker["log_dirs"] if d["log_dir"] == str(log_dir)]
    return sum(len(t["partitions"]) for t in d["topics"])


def _reassign(c: Cluster, topic: str, replicas: list[int]) -> None:
    """AlterPartitionReassignments with kafka-python; waits until done, the ISR full."""
    admin = kp_admin(c.bootstrap)
    try:
        admin.alter_partition_reassignments({KTP(topic, 0): replicas})

        def done() -> bool:
            p = c.partitions(topic)[0]
            ongoing = admin.list_partition_reassignments([KTP(topic, 0)])
            return sorted(p.replicas) == sorted(replicas) == sorted(p.isrs) and not ongoing

        wait_until(done, timeout=120, what=f"the reassignment of {topic}")
    finally:
        admin.close()


def _tiered_broker(workdir: Path) -> list[str]:
    store = FileStore(workdir / "remote")
    return [*TIERED_BROKER, *store.overrides()]


@pytest.mark.cluster
def test_moves_of_a_leader_and_a_follower_replica_in_a_cluster(
    tmp_path: Path, zookeeper: ZooKeeperProcess, unique: str
) -> None:
    """Two brokers with two log dirs each; a tiered partition with a replica on each: the
    leader's and the follower's replicas move at once while a producer writes (acks=all) and
    a reader fetches the remote part from the leader."""
    topic = f"jbod-cluster-{unique}"
    store = FileStore(tmp_path / "remote")
    c = Cluster(
        tmp_path,
        f"{zookeeper.connect_string}/jbod-{unique}",
        2,
        *TIERED_BROKER,
        *store.overrides(),
        "min.insync.replicas=2",
        "remote.log.metadata.topic.replication.factor=2",
        "offsets.topic.replication.factor=2",
        "replica.alter.log.dirs.io.max.bytes.per.second=65536",
    )
    dirs = {i: _dirs(b.workdir) for i, b in c.brokers.items()}
    for i, b in c.brokers.items():
        b.extra_overrides.append(f"log.dirs={dirs[i][0]},{dirs[i][1]}")
    c.start()
    try:
        c.create_topic(
            topic, 1, 2, **tiered_topic_configs(local_retention_bytes=str(2 * SEGMENT_BYTES))
        )
        first = make_records(3000)
        produce(c.bootstrap, topic, first)
        wait_until(
            lambda: Offsets(c.bootstrap, topic).local >= 1500, timeout=60, what="a tiered part"
        )
        leader = c.leader(topic, 0)
        leader_bs = c.brokers[leader].bootstrap
        # A partition of the cluster that a broker does not host: REPLICA_NOT_AVAILABLE there,
        # and the dir is where a reassignment creates the replica later (Kafka's preferred
        # log dir): the dir the broker would not have chosen (it takes the emptier one).
        lone = f"jbod-lone-{unique}"
        c.create_topic(lone, 1, 1)
        lone_leader = c.leader(lone, 0)
        (elsewhere,) = set(c.brokers) - {lone_leader}
        dir_a, dir_b = dirs[elsewhere]
        in_a, in_b = (_partitions_in(c, elsewhere, d) for d in (dir_a, dir_b))
        preferred = str(dir_b if in_a <= in_b else dir_a)  # the emptier one is the default
        assert alter(c.bootstrap, {(lone, 0): preferred}, node=elsewhere) == {
            (lone, 0): REPLICA_NOT_AVAILABLE
        }
        _reassign(c, lone, [lone_leader, elsewhere])
        assert _current_dir(c.bootstrap, lone, node=elsewhere) == preferred
        targets = {}
        for i in c.brokers:
            source = _current_dir(c.bootstrap, topic, node=i)
            targets[i] = str(dirs[i][1] if source == str(dirs[i][0]) else dirs[i][0])

        reader = _Reader(leader_bs, topic)
        reader.start()
        wait_until(lambda: reader.served > 0, what="a remote read")
        more = make_records(1500, start=3000)
        producer = threading.Thread(
            target=lambda: [
                produce(c.bootstrap, topic, more[i : i + 100]) for i in range(0, 1500, 100)
            ],
            daemon=True,
        )
        producer.start()
        for i in c.brokers:
            assert alter(c.bootstrap, {(topic, 0): targets[i]}, node=i) == {(topic, 0): NONE}
        reader.moving.set()
        wait_until(
            lambda: (
                reader.served_while_moving >= 2
                or all(_settled_in(c.bootstrap, topic, targets[i], i) for i in c.brokers)
            ),
            what="remote reads during the moves",
        )
        for i in c.brokers:
            wait_until(
                lambda i=i: _settled_in(c.bootstrap, topic, targets[i], i),
                timeout=90,
                what=f"the move on broker {i}",
            )
        reader.moving.clear()
        producer.join(120)
        assert not producer.is_alive()
        served = reader.served
        wait_until(lambda: reader.served > served, what="a remote read after the moves")
        reader.stop.set()
        reader.join(30)
        assert reader.served_while_moving >= 1
        assert not reader.errors, reader.errors[:5]
        c.wait_healthy(topic, 1, 2)  # both replicas in the ISR again
        sent = first + more
        got = consume(c.bootstrap, topic, len(sent))
        offsets = [m.offset() for m in got]
        bad = next((i for i, o in enumerate(offsets) if o != i), None)
        assert bad is None, (
            bad,
            offsets[max(0, (bad or 0) - 3) : (bad or 0) + 3],
            Offsets(c.bootstrap, topic),
        )
        assert_same(sent, got)
        # The follower's copy, after the moves, is the leader's: make it lead and read again.
        assert Offsets(c.bootstrap, topic).end == len(sent)
    finally:
        c.stop()
        store.close()
