"""read_committed on a real broker: transactions written by hand (transactional batches over
Produce, markers over WriteTxnMarkers), read in both isolation levels by librdkafka,
kafka-python and aiokafka on a plain topic and on a tiered topic whose transactional segments
are only in remote storage (the clients' own transactional producers: test_transactions.py)."""

from __future__ import annotations

import random

from tests.integration.clients import cf_create_topic
from tests.integration.conftest import BrokerProcess
from tests.integration.tiered_support import (
    SEGMENT_BYTES,
    at_rest,
    tiered_topic_configs,
    wait_until,
)
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TxnScenario,
    aio_read,
    cf_read,
    fetch_partition,
    kp_read,
    list_latest_offset,
)
from tests.integration.wire import WireClient, create_topics
from tierlog.records import iter_headers

END = b"END"


def pids(n: int) -> list[int]:
    return random.sample(range(10**12, 2 * 10**12), n)


def test_read_committed_on_a_plain_topic(broker: BrokerProcess, unique: str):
    topic = f"rc-{unique}"
    c = WireClient(broker.bootstrap)
    try:
        assert create_topics(c, {topic: 1}) == {topic: 0}
        p1, p2, p3, p4 = pids(4)
        s = TxnScenario(c, topic)
        s.txn(p1, [b"a1", b"a2"])
        s.txn(p2, [b"b1"])
        s.plain([b"c1"])
        s.end(p1, commit=True)
        s.txn(p2, [b"b2"])
        s.end(p2, commit=False)
        s.txn(p3, [b"d1", b"d2"])
        s.end(p3, commit=True)
        open_at = s.txn(p4, [b"e1"])  # stays open for now
        s.plain([b"f1"])

        # The LSO stops at the open transaction; the HW does not.
        hw = list_latest_offset(c, topic, 0, READ_UNCOMMITTED)
        assert list_latest_offset(c, topic, 0, READ_COMMITTED) == open_at < hw
        got = fetch_partition(c, topic, 0, 0, READ_COMMITTED)
        assert (got.high_watermark, got.last_stable_offset) == (hw, open_at)
        assert got.aborted == s.aborted == [(p2, 2)]
        assert max(h.next_offset for h in iter_headers(got.records)) <= open_at
        uncommitted = fetch_partition(c, topic, 0, 0, READ_UNCOMMITTED)
        assert uncommitted.aborted is None
        assert cf_read(broker.bootstrap, topic, "read_committed") == s.committed()
        assert s.committed() == [b"a1", b"a2", b"c1", b"d1", b"d2"]

        s.end(p4, commit=False)
        s.plain([END])
        assert list_latest_offset(c, topic, 0, READ_COMMITTED) == list_latest_offset(
            c, topic, 0, READ_UNCOMMITTED
        )
        assert fetch_partition(c, topic, 0, 0, READ_COMMITTED).aborted == [
            (p2, 2),
            (p4, open_at),
        ]
    finally:
        c.close()
    committed = [b"a1", b"a2", b"c1", b"d1", b"d2", b"f1", END]
    everything = [b"a1", b"a2", b"b1", b"c1", b"b2", b"d1", b"d2", b"e1", b"f1", END]
    assert s.committed() == committed and s.everything() == everything
    for read in (cf_read, kp_read, aio_read):
        assert read(broker.bootstrap, topic, "read_committed", until=END) == committed
        assert read(broker.bootstrap, topic, "read_uncommitted", until=END) == everything


def test_read_committed_on_a_tiered_topic_read_from_remote_storage(
    tiered_broker: BrokerProcess, unique: str
):
    """Transactions whose data is only in remote storage: one aborted with its marker in a
    later remote segment, one committed across segments, one that starts in remote storage
    and is aborted by a marker in the local log."""
    b = tiered_broker
    topic = f"rc-tiered-{unique}"
    cf_create_topic(
        b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_bytes=str(SEGMENT_BYTES))
    )
    p1, p2, p3 = pids(3)
    big = 3000  # about ten batches per segment

    def vals(tag: str, n: int) -> list[bytes]:
        return [f"{tag}{i}:".encode() + b"x" * big for i in range(n)]

    c = WireClient(b.bootstrap)
    try:
        s = TxnScenario(c, topic)
        s.plain(vals("head", 1))
        for i in range(12):  # P1 (aborted) and P2 (committed) interleaved over segments
            s.txn(p1, vals(f"p1-{i}-", 1))
            s.txn(p2, vals(f"p2-{i}-", 1))
            s.plain(vals(f"f{i}-", 1))
        for v in vals("mid", 25):  # the abort's marker a few segments later
            s.plain([v])
        s.end(p1, commit=False)
        s.end(p2, commit=True)
        p3_first = s.txn(p3, vals("p3-", 3))
        for v in vals("tail", 40):  # P3's data ends up in remote segments
            s.plain([v])
        s.end(p3, commit=False)  # its marker in the active (local) segment
        s.plain([END])
    finally:
        c.close()

    off = wait_until(
        lambda: at_rest(b, topic, local_retention_bytes=SEGMENT_BYTES),
        timeout=90,
        what="every rolled segment copied and deleted locally",
    )
    # Every transactional record is only in remote storage; P3's marker is local.
    assert off.local > p3_first + 2
    committed = s.committed()
    everything = s.everything()
    assert len(committed) == len(everything) - 12 - 3
    c = WireClient(b.bootstrap)
    try:
        got = fetch_partition(c, topic, 0, 0, READ_COMMITTED)
        assert got.error_code == 0 and got.records
        assert (p1, 1) in (got.aborted or [])
    finally:
        c.close()
    for read in (cf_read, kp_read, aio_read):
        assert read(b.bootstrap, topic, "read_committed", until=END) == committed
        assert read(b.bootstrap, topic, "read_uncommitted", until=END) == everything
