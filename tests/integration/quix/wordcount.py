"""quixstreams' word count with ``processing_guarantee="exactly-once"``, run by the quix test
(tests/integration/test_quix_exactly_once.py) in quixstreams' own virtual environment
(tests/integration/quix_venv.py): ``python wordcount.py <broker host:port> <state dir>``.

Words arrive on the topic ``words`` keyed by the word. Each one adds 1 to the word's count in
the app's state (RocksDB, keyed by the message key, its changelog topic written by quixstreams),
and the new count goes to the topic ``wordcount-totals`` (key: the word, value: the count as
text), so the output holds, for each word, the values 1, 2, ..., n. Under exactly-once,
quixstreams' consumer reads with ``read_committed`` and its transactional producer commits the
output records, the changelog records and the source offsets (``send_offsets_to_transaction``)
in one transaction every ``commit_interval``. Its ``transactional.id`` is quixstreams'
default, a random one per run.
"""

from __future__ import annotations

import sys

from quixstreams import Application
from quixstreams.state import State

GROUP = "quix-wordcount"


def count(word: str, state: State) -> str:
    n = int(state.get("count", 0)) + 1
    state.set("count", n)
    return str(n)


def main(broker: str, state_dir: str) -> None:
    app = Application(
        broker_address=broker,
        consumer_group=GROUP,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=0.5,
        state_dir=state_dir,
        loglevel="INFO",
        # quixstreams picks a random transactional.id per run, so a crashed run's open
        # transaction is aborted by the coordinator when it times out (librdkafka's default is
        # 60 s): shorter here so the test's read_committed reads need not wait that long.
        producer_extra_config={"transaction.timeout.ms": 10_000},
        # A run killed with SIGKILL leaves no LeaveGroup: its successor's rebalance waits for
        # the dead member's session to expire (45 s by default).
        consumer_extra_config={"session.timeout.ms": 6_000},
    )
    words = app.topic("words", key_deserializer="str", value_deserializer="str")
    totals = app.topic("wordcount-totals", key_serializer="str", value_serializer="str")
    sdf = app.dataframe(words)
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(totals)
    print("quix wordcount starting", flush=True)
    app.run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
