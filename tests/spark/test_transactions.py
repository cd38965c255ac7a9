"""The Spark source on a tiered transactional topic: read_committed drops aborted records and
control batches exactly, through the broker and with direct remote reads alike, including a
transaction that starts in a remote segment and is aborted by a marker in the local log, and
one whose marker is in a later remote segment. read_uncommitted (the default, as Spark's Kafka
consumer) reads every data record and still no control batch."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.txn_support import TxnScenario
from tests.integration.wire import WireClient
from tests.spark.conftest import BrokerProcess, create_topic
from tests.spark.tiering import TIERED_TOPIC_CONFIGS, tiering_overrides, wait_until_tiered
from tierlog.spark.options import parse_source_options
from tierlog.spark.planning import Planner
from tierlog.tiered import RemoteLogSegmentMetadata

TOPIC = "txn"
VALUE_BYTES = 3000  # about ten batches per 32 KiB segment


@dataclass
class TxnTopic:
    broker: BrokerProcess
    remote: dict[str, str]
    segments: list[RemoteLogSegmentMetadata]
    scenario: TxnScenario
    p1: int  # aborted, marker in a later remote segment
    p3: int  # starts in remote storage, aborted by a marker in the local log
    p3_first: int
    p3_marker: int

    def options(self, *, remote: bool, **extra: str) -> dict[str, str]:
        out = {"kafka.bootstrap.servers": self.broker.bootstrap, "subscribe": TOPIC, **extra}
        if remote:
            out.update({f"tierlog.remote.{k}": v for k, v in self.remote.items()})
        return out


def values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}{i}:".encode() + b"x" * VALUE_BYTES for i in range(n)]


@pytest.fixture(scope="module")
def txn_topic(tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("spark-txn")
    rsm_config = {"uri": f"file://{workdir / 'remote'}"}
    broker = BrokerProcess(workdir, *tiering_overrides(rsm_config))
    broker.start()
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_topic(admin, TOPIC, 1, **{"segment.bytes": "32768", **TIERED_TOPIC_CONFIGS})
        p1, p2, p3 = random.sample(range(10**12, 2 * 10**12), 3)
        c = WireClient(broker.bootstrap)
        try:
            s = TxnScenario(c, TOPIC)
            s.plain(values("head", 1))
            for i in range(8):  # P1 (aborted) and P2 (committed) interleaved over segments
                s.txn(p1, values(f"p1-{i}-", 1))
                s.txn(p2, values(f"p2-{i}-", 1))
                s.plain(values(f"f{i}-", 1))
            for v in values("mid", 25):  # P1's marker two segments later
                s.plain([v])
            s.end(p1, commit=False)
            s.end(p2, commit=True)
            p3_first = s.txn(p3, values("p3-", 3))
            for v in values("tail", 25):  # P3's data ends up in remote segments
                s.plain([v])
            s.end(p3, commit=False)
            # The marker's segment is the active one (never copied): it stays local.
            p3_marker = s.plain([b"END"]) - 1
        finally:
            c.close()
        segments = wait_until_tiered(broker.bootstrap, TOPIC, workdir / "logs", rsm_config)
        yield TxnTopic(broker, rsm_config, segments, s, p1, p3, p3_first, p3_marker)
    finally:
        broker.stop()


def read_values(spark: Any, options: dict[str, str]) -> list[bytes]:
    r = spark.read.format("tierlog")
    for k, v in options.items():
        r = r.option(k, v)
    rows = r.load().select("offset", "value").orderBy("offset").collect()
    return [bytes(row["value"]) for row in rows]


def test_the_layout_is_the_one_under_test(txn_topic: TxnTopic) -> None:
    t = txn_topic
    remote_end = t.segments[-1].end_offset + 1
    # P3's data is only remote, its marker local; P1's marker is in a later remote segment.
    assert t.p3_first + 2 < remote_end <= t.p3_marker
    (p1_first,) = [f for pid, f in t.scenario.aborted if pid == t.p1]
    first_segment = next(s for s in t.segments if s.start_offset <= p1_first <= s.end_offset)
    assert first_segment.end_offset < remote_end - 1
    assert any(not s.txn_idx_empty for s in t.segments)
    assert any(s.txn_idx_empty for s in t.segments)
    opts = parse_source_options(
        t.options(remote=True, **{"kafka.isolation.level": "read_committed"}), streaming=False
    )
    with Planner(opts) as planner:
        ranges = planner.plan_batch()
    p3_ranges = [r for r in ranges if r.segment is not None and r.start <= t.p3_first < r.end]
    assert p3_ranges and (t.p3, t.p3_first) in p3_ranges[0].aborted


@pytest.mark.parametrize("remote", [True, False], ids=["remote-reads", "through-the-broker"])
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "one-range-per-segment"])
def test_read_committed_drops_aborted_records_exactly(
    spark: Any, txn_topic: TxnTopic, remote: bool, packed: bool
) -> None:
    extra = {} if packed else {"tierlog.maxPartitionBytes": "0"}
    s = txn_topic.scenario
    committed = read_values(
        spark,
        txn_topic.options(remote=remote, **{"kafka.isolation.level": "read_committed"}, **extra),
    )
    assert committed == s.committed()
    assert len(committed) == len(s.everything()) - 8 - 3
    # The default, as Spark's Kafka source: read_uncommitted, every data record.
    assert read_values(spark, txn_topic.options(remote=remote, **extra)) == s.everything()
