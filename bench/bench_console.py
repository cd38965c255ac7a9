"""Web console cost (issue 15): what its pages and its message browser take, each against a
baseline measured in the same run.

* render, in process: the partition page (HTML with the segment timeline) of a partition with
  ``--segments`` remote and local segments, vs the JSON API's encoding of the same values:
  the price of the HTML;
* over HTTP, a real ``tierlog serve`` with tiered storage and a fully tiered topic: the
  partition page's latency, as HTML and as JSON, vs ``/api/brokers`` (an HTTP round trip that
  reads almost nothing);
* the message browser at offsets held only in remote storage, 20 records, once per remote
  segment (cold: the segment's indexes are fetched) and again (warm), vs a confluent-kafka
  consumer reading the same 20 records from the same offsets on the same broker.

Figures: ``name: value unit (ratio vs baseline)``; medians. Knobs: ``--records N`` (default
30,000; ``BENCH_QUICK=1`` -> 5,000), ``--segments S`` (default 2,000).
Run: ``.venv/bin/python bench/bench_console.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, TopicPartition
from tests.broker_process import BrokerProcess
from tests.integration.clients import cf_create_topic
from tests.integration.tiered_support import (
    TIERED_BROKER,
    FileStore,
    at_rest,
    finished,
    make_records,
    produce,
    tiered_topic_configs,
    wait_until,
)

from tierlog.console import pages
from tierlog.console.broker_view import PartitionDetail, PartitionSummary, SegmentInfo
from tierlog.console.routes import _json as json_response  # what /api/... answers

LIMIT = 20


def _median_ms(fn: object, n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def _line(name: str, value: float, unit: str, baseline: float) -> None:
    print(f"{name}: {value:.2f} {unit} ({value / baseline:.2f}x vs baseline {baseline:.2f} {unit})")


def bench_render(segments: int) -> None:
    def segment(i: int) -> SegmentInfo:
        remote = i < segments - 1
        return SegmentInfo(
            "remote" if remote else "local", i * 100, i * 100 + 99, 32_000, (i // 500,),
            "COPY_SEGMENT_FINISHED" if remote else "active", 1_700_000_000_000 + i,
            f"id-{i:06d}" if remote else None,
        )  # fmt: skip

    segs = tuple(segment(i) for i in range(segments))
    summary = PartitionSummary(
        "t", 0, True, 0, 3, (0,), (0,), 0, (segments - 1) * 100, segments * 100,
        segments * 100, 32_000, 1, 32_000 * (segments - 1), segments - 1,
        (segments - 1) * 100 - 1, 0, 0, 0, 0,
    )  # fmt: skip
    d = PartitionDetail(summary, segs)
    html_ms = _median_ms(lambda: pages.partition_page(d), 15)
    json_ms = _median_ms(lambda: json_response(d), 15)
    _line(f"render partition page, {segments} segments", html_ms, "ms", json_ms)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as r:
        return bytes(r.read())


def bench_broker(records: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        work = Path(tmp)
        store = FileStore(work / "remote")
        b = BrokerProcess(
            work, *TIERED_BROKER, *store.overrides(), "console.listener=http://127.0.0.1:0"
        )
        b.start()
        try:
            m = re.search(r"console on http://127\.0\.0\.1:(\d+)/", b.log_since_start())
            assert m is not None
            url = f"http://127.0.0.1:{m.group(1)}"
            topic = "bench-console"
            configs = tiered_topic_configs(local_retention_bytes="1")
            cf_create_topic(b.bootstrap, topic, 1, **configs)
            produce(b.bootstrap, topic, make_records(records))
            wait_until(lambda: at_rest(b, topic, local_retention_bytes=1), 300, "tiered")
            starts = [s["start_offset"] for s in finished(b, topic)]
            print(f"({records} records, {len(starts)} remote segments)")

            page_ms = _median_ms(lambda: _get(f"{url}/topics/{topic}/partitions/0"), 20)
            base_ms = _median_ms(lambda: _get(f"{url}/api/brokers"), 20)
            _line(f"GET partition page, {len(starts) + 1} segments", page_ms, "ms", base_ms)
            api_ms = _median_ms(lambda: _get(f"{url}/api/topics/{topic}/partitions/0"), 20)
            _line(f"GET partition JSON, {len(starts) + 1} segments", api_ms, "ms", base_ms)

            def browse(offset: int) -> None:
                body = _get(f"{url}/api/topics/{topic}/partitions/0/messages?offset={offset}"
                            f"&limit={LIMIT}")  # fmt: skip
                assert len(json.loads(body)["messages"]) == LIMIT

            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench",
                          "enable.auto.commit": False, "fetch.wait.max.ms": 10})  # fmt: skip

            def consume(offset: int) -> None:
                c.assign([TopicPartition(topic, 0, offset)])
                got = 0
                while got < LIMIT:
                    got += len([m for m in c.consume(LIMIT - got, 10) if not m.error()])

            offsets = [s + 7 for s in starts]
            try:
                for label in ("cold", "warm"):
                    per_browse, per_consume = [], []
                    for off in offsets:
                        # Alternate, so both see the same cache state: the console goes first
                        # (cold: the segment's indexes fetched), the consumer second (warm).
                        t0 = time.perf_counter()
                        browse(off)
                        per_browse.append((time.perf_counter() - t0) * 1000)
                        t0 = time.perf_counter()
                        consume(off + 1)
                        per_consume.append((time.perf_counter() - t0) * 1000)
                    _line(
                        f"browse {LIMIT} remote records ({label} for the console)",
                        statistics.median(per_browse), "ms", statistics.median(per_consume),
                    )  # fmt: skip
            finally:
                c.close()
        finally:
            b.stop()


def main() -> None:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=5_000 if quick else 30_000)
    ap.add_argument("--segments", type=int, default=2_000)
    args = ap.parse_args()
    bench_render(args.segments)
    bench_broker(args.records)


if __name__ == "__main__":
    main()
