"""A faust-streaming word count, the stateful app of the compaction test (run as
``python -m tests.integration.faust_wordcount worker --without-web`` with ``WORDCOUNT_BROKER``
set to the broker's ``host:port``).

Words arrive on the topic ``words`` keyed by the word (one partition, so the table's changelog
partition is the source partition, as faust requires). Each one adds 1 to its count in the
table ``counts``, kept in memory (``memory://``): faust writes every update to the table's
changelog topic ``wordcount-counts-changelog``, which it creates with
``cleanup.policy=compact``, and a restarted worker rebuilds the table from that topic alone.

With ``WORDCOUNT_GUARANTEE=exactly_once`` the app runs with faust's
``processing_guarantee="exactly_once"``: its consumer reads with ``read_committed``, every update
to the changelog and every record it sends to the output topic ``wordcount-totals`` (key: the
word; value: its new count and the offset of the word counted, as text) go through a
transactional producer (``transactional.id`` ``wordcount-<group>-<partition>``) together with
the consumer offsets of the source partition (``send_offsets_to_transaction``), committed every
``broker_commit_interval``. The output topic must exist before the worker starts (faust creates
only its internal topics), and the app subscribes to it (see ``subscribe_totals``).

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
    broker_commit_interval=0.5,
    # A worker killed with SIGKILL leaves no LeaveGroup: its successor's rebalance waits this out.
    broker_session_timeout=10.0,
    processing_guarantee=os.environ.get("WORDCOUNT_GUARANTEE", "at_least_once"),
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
# The running counts, one record per word counted (the latest one per word is its count).
totals = app.topic("wordcount-totals", key_serializer="raw", value_serializer="raw", partitions=1)


@app.agent(words)
async def count(stream: faust.StreamT[bytes]) -> None:
    async for event in stream.events():
        word = event.key.decode()
        counts[word] += 1
        if app.in_transaction:
            # The new count and the offset of the word counted: "<count> <offset>".
            output = f"{counts[word]} {event.message.offset}"
            await totals.send(key=event.key, value=output.encode())


if app.conf.processing_guarantee.value == "exactly_once":
    # faust 0.15.3 sends through a partition's transactional producer only to topics its
    # partition assignor knows (TransactionManager.send: the topic's copartitioned group); a
    # topic the app does not subscribe to goes through the plain producer, outside every
    # transaction. Subscribing puts ``wordcount-totals`` in the group of ``words`` (both one
    # partition, co-subscribed), so its records join the transaction ``wordcount-0-0``.
    @app.agent(totals)
    async def subscribe_totals(stream: faust.StreamT[bytes]) -> None:
        async for _ in stream.events():
            pass


@app.timer(1.0)
async def report() -> None:
    if app.tables.recovery.completed.is_set():
        print("COUNTS " + json.dumps(dict(counts.items()), sort_keys=True), flush=True)


if __name__ == "__main__":
    app.main()
