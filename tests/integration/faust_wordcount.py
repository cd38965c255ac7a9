"""A faust-streaming word count, the stateful app of the compaction test (run as
``python -m tests.integration.faust_wordcount worker`` with ``WORDCOUNT_BROKER`` set to the
broker's ``host:port``).

Words arrive on the topic ``words`` keyed by the word (one partition, so the table's changelog
partition is the source partition, as faust requires). Each one adds 1 to its count in the
table ``counts``, kept in memory (``memory://``): faust writes every update to the table's
changelog topic ``wordcount-counts-changelog``, which it creates with
``cleanup.policy=compact``, and a restarted worker rebuilds the table from that topic alone.

Every second the worker prints ``COUNTS <json>`` with the table's contents once the table is
recovered (the test reads them from its output).
"""

from __future__ import annotations

import json
import os

import faust

app = faust.App(
    "wordcount",
    broker=f"kafka://{os.environ.get('WORDCOUNT_BROKER', '127.0.0.1:9092')}",
    store="memory://",
    topic_partitions=1,
    web_enabled=False,
    broker_commit_interval=0.5,
)
# The words as the test sends them: plain bytes (the table's own changelog is faust's JSON).
words = app.topic("words", key_serializer="raw", value_serializer="raw", partitions=1)
counts = app.Table(
    "counts",
    default=int,
    partitions=1,
    # Small segments so the changelog rolls often and the cleaner has something to clean.
    extra_topic_configs={
        "segment.bytes": "16384",
        "min.cleanable.dirty.ratio": "0.01",
    },
)


@app.agent(words)
async def count(stream: faust.StreamT[bytes]) -> None:
    async for event in stream.events():
        counts[event.key.decode()] += 1


@app.timer(1.0)
async def report() -> None:
    if app.tables.recovery.completed.is_set():
        print("COUNTS " + json.dumps(dict(counts.items()), sort_keys=True), flush=True)


if __name__ == "__main__":
    app.main()
