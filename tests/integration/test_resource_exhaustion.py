"""Running out of a resource fails one request, never the broker (issue: scale, part 1).

Each test makes the exhaustion happen for real: a low ``ulimit -n`` for the broker process
(set in the child before exec), a log dir on a tmpfs mounted full, a partition's files failing
with EIO (tests/integration/eio_launcher.py). Each asserts the failing
request's error code, that the other partitions keep serving, and that the broker restarts.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests import real_parts
from tests.integration.clients import cf_consume, cf_high_watermark, cf_values
from tests.integration.conftest import BrokerProcess, running_broker
from tests.integration.wire import (
    WireClient,
    create_topics,
    delete_topics,
    fetch,
    one_record,
    produce,
)
from tierlog.records.record_batch import iter_headers

KAFKA_STORAGE_ERROR = 56


def batches(results: dict[int, tuple[int, bytes]]) -> dict[int, tuple[int, int]]:
    """Fetch results as (error code, number of batches) per partition."""
    return {p: (code, len(list(iter_headers(records)))) for p, (code, records) in results.items()}


# ---------------------------------------------------------------------- open files


def test_many_partitions_in_a_low_open_files_limit(tmp_path: Path) -> None:
    """400 partitions (1,200 segment files and their mappings) under a limit of 300
    descriptors: every partition takes a record and reads it back, the broker never holds
    more than its limit, and it restarts into the same state."""
    topics = {f"many-{i}": 40 for i in range(10)}
    with running_broker(tmp_path / "b", "offsets.topic.num.partitions=5", nofile=300) as b:
        assert "open files: soft limit 300 (was 300), hard limit 300" in b.log_since_start()
        c = WireClient(b.bootstrap, timeout=60)
        try:
            assert create_topics(c, topics) == dict.fromkeys(topics, 0)
            for name, n in topics.items():
                assert produce(c, name, range(n), one_record(name.encode())) == dict.fromkeys(
                    range(n), 0
                )
        finally:
            c.close()
        assert b.open_fds() <= 300
        for name, n in topics.items():
            assert cf_values(b.bootstrap, name, n) == [name.encode()] * n
        assert b.open_fds() <= 300
        b.restart()
        loaded = re.search(r"loaded (\d+) logs .* \((\d+) more to open", b.log_since_start())
        assert loaded is not None and int(loaded[1]) + int(loaded[2]) == 405
        for name, n in list(topics.items())[:3]:
            assert cf_values(b.bootstrap, name, n) == [name.encode()] * n
        assert b.open_fds() <= 300


def test_running_out_of_descriptors_fails_the_request_not_the_broker(tmp_path: Path) -> None:
    """With the segment-file budget lifted past the limit, topics are created (a partition
    not used yet holds no descriptor) and written to until opening a log meets EMFILE: those
    partitions answer KAFKA_STORAGE_ERROR, the log dir stays online, the partitions opened
    before keep serving reads on the same connection, a delete that frees descriptors makes
    produce work again, and a restart with the default budget loads everything."""
    workdir = tmp_path / "b"
    b = BrokerProcess(
        workdir, "offsets.topic.num.partitions=5", "log.max.open.files=100000", nofile=200
    )
    workdir.mkdir()
    b.start()
    try:
        # Every request schema is imported (a thread at startup): none is needed later, when
        # an import could not open its file.
        deadline = time.monotonic() + 60
        while "protocol schemas of" not in b.log_since_start():
            assert time.monotonic() < deadline, b.tail()
            time.sleep(0.05)
        c = WireClient(b.bootstrap, timeout=60)
        created: list[str] = []
        failed: str | None = None
        for i in range(100):
            name = f"fill-{i}"
            assert create_topics(c, {name: 10}) == {name: 0}
            codes = produce(c, name, range(10), one_record(b"before"))
            if set(codes.values()) == {0}:
                created.append(name)
                continue
            assert set(codes.values()) <= {0, KAFKA_STORAGE_ERROR}, f"{name}: {codes}"
            failed = name
            break
        assert failed is not None, "200 descriptors never ran out"
        assert len(created) >= 2, "the descriptors ran out too early to tell anything"
        log = b.log_since_start()
        assert "Too many open files" in log
        assert "offline" not in log
        # Reads need no new descriptor: they keep serving while none is left.
        assert batches(fetch(c, created[0], range(10))) == dict.fromkeys(range(10), (0, 1))
        # A delete gives descriptors back; produce (which may need one) works again.
        assert delete_topics(c, [created[-1]]) == {created[-1]: 0}
        assert produce(c, created[0], range(10), one_record(b"after")) == dict.fromkeys(
            range(10), 0
        )
        c.close()
        b.stop()
        # The default budget (half the limit) loads every log within the limit.
        b.extra_overrides.remove("log.max.open.files=100000")
        b.start()
        assert cf_values(b.bootstrap, created[0], 10, per_partition=2) == sorted(
            [b"before", b"after"] * 10
        )
        assert b.open_fds() <= 200
        c = WireClient(b.bootstrap, timeout=60)
        try:  # the partitions that could not be opened can be now
            assert produce(c, failed, range(10), one_record(b"later")) == dict.fromkeys(
                range(10), 0
            )
        finally:
            c.close()
    finally:
        if b.alive():
            b.stop()


# ---------------------------------------------------------------------- disk space


def test_a_full_disk_fails_produce_with_a_storage_error_and_reads_go_on(tmp_path: Path) -> None:
    """The log dir on a 4 MiB tmpfs, filled by produce: the append that meets ENOSPC answers
    KAFKA_STORAGE_ERROR, what was acknowledged reads back, the dir stays online, a restart on
    the full disk works, and once a delete frees space produce works again."""
    with real_parts.tmpfs(tmp_path / "disk", "4m") as disk:
        b = BrokerProcess(
            tmp_path / "b",
            f"log.dirs={disk / 'logs'}",
            "offsets.topic.num.partitions=1",
            "log.segment.bytes=1048576",
            "log.index.size.max.bytes=65536",
        )
        (tmp_path / "b").mkdir()
        b.start()
        try:
            c = WireClient(b.bootstrap, timeout=60)
            assert create_topics(c, {"full": 1, "filler": 1}) == {"full": 0, "filler": 0}
            value = bytes(64 * 1024)
            acked = 0
            codes: dict[int, int] = {}
            for _ in range(200):
                codes = produce(c, "full", range(1), one_record(value))
                if codes[0] != 0:
                    break
                acked += 1
            assert codes == {0: KAFKA_STORAGE_ERROR}, f"after {acked} records: {codes}"
            assert acked >= 20
            assert "offline" not in b.log_since_start()
            # What was acknowledged reads back whole.
            assert len(cf_consume(b.bootstrap, "full", acked, timeout=60)) == acked
            c.close()
            b.stop()
            b.start()  # a restart on a full disk works
            assert len(cf_consume(b.bootstrap, "full", acked, timeout=60)) == acked
            # Deleting the topic frees the space (its dir is removed in the background).
            c = WireClient(b.bootstrap, timeout=60)
            assert delete_topics(c, ["full"]) == {"full": 0}
            deadline = time.monotonic() + 60
            while produce(c, "filler", range(1), one_record(b"x" * 1000)) != {0: 0}:
                assert time.monotonic() < deadline, "produce never worked again after the delete"
                time.sleep(0.1)
            c.close()
        finally:
            if b.alive():
                b.stop()


# ---------------------------------------------------------------------- a failing file


def test_a_failing_file_fails_its_requests_with_a_storage_error_and_the_rest_go_on(
    tmp_path: Path,
) -> None:
    """Every read and write of one partition's files fails with EIO, as a failing disk's do
    (tests/integration/eio_launcher.py): produce and fetch of that partition answer
    KAFKA_STORAGE_ERROR, the other partition keeps serving; the failed appends leave nothing
    behind (once the disk heals the next record takes the next offset and everything
    acknowledged reads back); a restart while the file still fails works, and so does one
    after it heals."""
    faults = tmp_path / "faults"
    faults.mkdir()
    (tmp_path / "b").mkdir()
    b = BrokerProcess(
        tmp_path / "b",
        "offsets.topic.num.partitions=1",
        module="tests.integration.eio_launcher",
        env={"TIERLOG_TEST_FAULTS": str(faults)},
    )
    b.start()
    failing_dir = b.log_dir / "failing-0"

    def arm() -> None:
        (faults / "eio").write_text(f"{failing_dir}\n")

    def heal() -> None:
        (faults / "eio").unlink()

    def read(topic: str, expected: list[bytes]) -> None:
        """The partition holds exactly ``expected``, at offsets 0, 1, ... and nothing more."""
        got = cf_consume(b.bootstrap, topic, len(expected), timeout=30)
        assert [(m.offset(), m.value()) for m in got] == list(enumerate(expected)), topic
        assert cf_high_watermark(b.bootstrap, topic) == len(expected), topic

    try:
        c = WireClient(b.bootstrap, timeout=60)
        assert create_topics(c, {"failing": 1, "healthy": 1}) == {"failing": 0, "healthy": 0}
        before = [b"before-%d" % i for i in range(5)]
        for v in before:
            for topic in ("failing", "healthy"):
                assert produce(c, topic, range(1), one_record(v)) == {0: 0}
        arm()
        for _ in range(3):
            assert produce(c, "failing", range(1), one_record(b"lost")) == {0: KAFKA_STORAGE_ERROR}
        assert fetch(c, "failing", range(1))[0][0] == KAFKA_STORAGE_ERROR
        # The other partition, in the same log dir, keeps serving both ways.
        assert produce(c, "healthy", range(1), one_record(b"during")) == {0: 0}
        read("healthy", [*before, b"during"])
        assert "offline" not in b.log_since_start()
        assert re.search(r"append to failing-0 failed: .*Input/output error", b.log_since_start())

        heal()
        assert produce(c, "failing", range(1), one_record(b"after")) == {0: 0}
        read("failing", [*before, b"after"])
        c.close()

        arm()  # a restart while the disk still fails
        b.stop()
        b.start()
        c = WireClient(b.bootstrap, timeout=60)
        assert fetch(c, "failing", range(1))[0][0] == KAFKA_STORAGE_ERROR
        assert produce(c, "healthy", range(1), one_record(b"restarted")) == {0: 0}
        read("healthy", [*before, b"during", b"restarted"])
        c.close()

        heal()  # and one after it heals: everything acknowledged is there
        b.stop()
        b.start()
        c = WireClient(b.bootstrap, timeout=60)
        read("failing", [*before, b"after"])
        read("healthy", [*before, b"during", b"restarted"])
        c.close()
    finally:
        if b.alive():
            b.stop()
