"""faust-streaming's word count (tests/integration/faust_wordcount.py) with
``processing_guarantee="exactly_once"`` against a real broker.

quixstreams, the issue's first choice, cannot be installed next to the confluent-kafka 2.16.1
the test extra pins (every 2.x/3.x release needs confluent-kafka < 2.13); faust-streaming
0.15.3 runs exactly-once through aiokafka's transactional producer: one ``transactional.id``
per source partition (``wordcount-0-0``), whose transaction holds the table's changelog
records, the records sent to the output topic ``wordcount-totals`` and, through
``send_offsets_to_transaction``, the consumer offsets of the source topic ``words``; its
consumer reads with ``read_committed``.

The output topic carries one record per word counted: the word's new count and the offset of
the word in ``words``. Read with read_committed, every offset of ``words`` is there once and the
counts of every word are exactly 1, 2, ..., n (a record counted twice would repeat a value, a
lost one would leave a gap) -- up to faust's own race at each kill, below.

faust 0.15.3 commits on a timer task, between the steps of the event its agent is processing:
the table update (queued for the changelog), ``await totals.send(...)`` and the ack of the
event's offset may each fall on either side of a commit. Seen in a failed run: the changelog's
``word01=144`` (offset 4733) went into the transaction committed at 4734, while the output
``144`` (offset 4734 of ``wordcount-totals``) went into the next one, which the kill then aborted;
the successor restored 144 from the committed changelog and counted the re-delivered word as
145, so the committed output read 142, 143, 145. The broker did what it must: the committed
transaction whole, the aborted one hidden. Quix Streams commits between records, and
test_quix_exactly_once asserts exact counts; for faust the test allows, at each kill, the one
event in flight at the commit before it (:func:`assert_totals_across_kills`). The broker's own
part is asserted exactly, apart from faust's: read_committed returns the records of the
committed transactions and none of the aborted ones, as the markers in the log say
(:func:`outcomes`).

Two faust limitations shape the app and the test, neither the broker's: faust sends through a
transactional producer only to topics its assignor knows, so the app subscribes to its own
output topic (faust_wordcount.py, ``subscribe_totals``); and its graceful stop in exactly_once
mode can fail (see ``crash``), so workers are ended with SIGKILL."""

from __future__ import annotations

import collections
import itertools
import random
import signal
import time
from pathlib import Path
from typing import Any

from tests import real_parts
from tests.integration.clients import cf_create_topic, cf_produce
from tests.integration.conftest import BrokerProcess, running_broker
from tests.integration.test_faust_changelog import WORDS, Worker, committed, wait_until
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    fetch_partition,
    list_latest_offset,
    read_batches,
)
from tests.integration.wire import WireClient
from tierlog.coordinator.group.group_metadata_manager import java_string_hash
from tierlog.records.control_records import read_end_txn_marker

faust = real_parts.import_module("faust", "faust-streaming (the test extra)")

GROUP = "wordcount"
CHANGELOG = "wordcount-counts-changelog"
TOTALS = "wordcount-totals"


def read_topic(b: BrokerProcess, topic: str, isolation: str) -> list[Any]:
    """Every record of partition 0 up to the end the isolation level allows (the last stable
    offset for read_committed, the high watermark for read_uncommitted)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    out: list[Any] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    raise KafkaException(m.error())
                out.append(m)
        raise AssertionError(f"{topic} not read to its end ({isolation}) within 30 s")
    finally:
        c.close()


def totals_of(messages: list[Any]) -> list[tuple[str, int, int]]:
    """The output records as (word, count, offset of the word in ``words``)."""
    out = []
    for m in messages:
        count, source = m.value().decode().split()
        out.append((m.key().decode(), int(count), int(source)))
    return out


def counts_by_word(totals: list[tuple[str, int, int]]) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = collections.defaultdict(list)
    for word, count, _ in totals:
        seen[word].append(count)
    return seen


def assert_exact_totals(messages: list[Any], expected: collections.Counter[str]) -> None:
    """Each word's counts in the output topic are 1..n, n its count, and each word of
    ``words`` was counted once: nothing twice, no gap."""
    totals = totals_of(messages)
    assert sorted(source for _, _, source in totals) == list(range(sum(expected.values())))
    seen = counts_by_word(totals)
    assert {w: len(v) for w, v in seen.items()} == dict(expected)
    for word, values in seen.items():
        assert values == list(range(1, expected[word] + 1)), word


def assert_totals_across_kills(
    messages: list[Any], expected: collections.Counter[str], kills: int
) -> dict[str, int]:
    """Exactly once but for faust's race (module docstring), at most one event per kill:
    every word of ``words`` counted, at most ``kills`` of them twice; each word's counts go
    up by one from 1 but for at most ``kills`` steps in all (by 0 or 2: the event's changelog
    update and its output in different transactions). An aborted transaction shown, or a
    committed one lost, breaks this by the size of a transaction. Returns the last count of
    each word."""
    totals = totals_of(messages)
    sources = collections.Counter(source for _, _, source in totals)
    assert sorted(sources) == list(range(sum(expected.values()))), "a word never counted"
    twice = {o: n for o, n in sources.items() if n > 1}
    assert sum(n - 1 for n in twice.values()) <= kills, f"words counted twice: {twice}"
    irregular = []
    last = {}
    for word, values in counts_by_word(totals).items():
        steps = [b - a for a, b in itertools.pairwise([0, *values])]
        irregular += [(word, i, step) for i, step in enumerate(steps) if step != 1]
        last[word] = values[-1]
    assert len(irregular) <= kills, f"irregular counts (word, index, step): {irregular}"
    assert all(step in (0, 2) for _, _, step in irregular), irregular
    assert sum(abs(last[w] - n) for w, n in expected.items()) <= kills, (last, expected)
    print(f"faust's race at {kills} kills: words counted twice {twice}, irregular {irregular}")
    return last


def offsets_batches(b: BrokerProcess) -> list[Any]:
    """The batch headers of the group's ``__consumer_offsets`` partition, read uncommitted."""
    partition = abs(java_string_hash(GROUP)) % 50
    return [h for _, h in read_batches(b.bootstrap, "__consumer_offsets", partition)]


def outcomes(b: BrokerProcess, topic: str) -> tuple[set[int], set[int]]:
    """The offsets of the records of partition 0 (not compacted: every offset of a data batch
    is a record), read uncommitted batch by batch and sorted by how their transaction ended,
    from the markers decoded here rather than the broker's aborted-transaction lists:
    (committed or not transactional, aborted). A transaction open at the end is in neither."""
    committed: set[int] = set()
    aborted: set[int] = set()
    ongoing: dict[int, list[int]] = collections.defaultdict(list)  # producer id -> offsets
    for records, h in read_batches(b.bootstrap, topic):
        offsets = range(h.base_offset, h.last_offset + 1)
        if h.is_control_batch:
            marker = read_end_txn_marker(records, h)
            assert marker is not None, h
            ended = ongoing.pop(h.producer_id, [])
            (aborted if marker.is_abort else committed).update(ended)
        elif h.is_transactional:
            ongoing[h.producer_id].extend(offsets)
        else:
            committed.update(offsets)
    return committed, aborted


def producer_ids(b: BrokerProcess, topic: str) -> set[int]:
    return {h.producer_id for _, h in read_batches(b.bootstrap, topic) if h.is_transactional}


def send_words(b: BrokerProcess, words: list[str]) -> None:
    cf_produce(b.bootstrap, "words", [(w.encode(), w.encode()) for w in words], partition=0)


def crash(worker: Worker) -> None:
    """End a worker with SIGKILL. Not SIGTERM: faust 0.15.3's graceful stop in exactly_once
    mode can end the transaction (``commit_and_end_transactions``: commit without starting a
    new one) in ``Consumer.wait_empty`` and then commit again in ``on_stop`` when more messages
    were acked meanwhile; aiokafka refuses ``send_offsets_to_transaction`` outside a
    transaction (``IllegalOperation: Not in the middle of a transaction``, raised in the
    client, no request sent) and the worker hangs instead of exiting. A crash is what
    exactly-once must survive anyway."""
    if worker.proc.poll() is None:
        worker.proc.kill()
        worker.proc.wait()


def create_topics(b: BrokerProcess) -> None:
    cf_create_topic(b.bootstrap, "words")
    cf_create_topic(b.bootstrap, TOTALS)  # faust creates only its internal topics


def test_faust_exactly_once_counts_and_transactional_offsets(tmp_path: Path) -> None:
    rng = random.Random(2024)
    with running_broker(tmp_path / "broker") as b:
        create_topics(b)
        first = [rng.choice(WORDS) for _ in range(3000)]
        send_words(b, first)
        expected = collections.Counter(first)
        worker = Worker(tmp_path, b.bootstrap, guarantee="exactly_once")
        try:
            wait_until(
                "faust's transactional commit of every word",
                lambda: committed(b, GROUP, "words") == len(first),
                worker,
            )
            # (1) read_committed: one output record per word counted, each count exactly once.
            assert_exact_totals(read_topic(b, TOTALS, "read_committed"), expected)
            changelog = read_topic(b, CHANGELOG, "read_committed")
            assert {m.key().decode().strip('"'): int(m.value()) for m in changelog} == expected
            # The output records, the changelog and the offsets are all the transactional
            # producer's: faust's transactional id, one producer id for all three.
            pids = producer_ids(b, TOTALS)
            assert len(pids) == 1, f"output records from transactional producers {pids}"
            (pid,) = pids
            assert producer_ids(b, CHANGELOG) == {pid}
            # (3) the group's offsets went in as transactional batches of that producer
            # (TxnOffsetCommit), closed by COMMIT markers: committed with the transactions.
            batches = [h for h in offsets_batches(b) if h.producer_id == pid]
            data = [h for h in batches if not h.is_control_batch]
            markers = [h for h in batches if h.is_control_batch]
            assert data and all(h.is_transactional for h in data)
            assert len(markers) >= len(data) > 0
        finally:
            crash(worker)


def open_transaction_on_totals(b: BrokerProcess) -> bool:
    c = WireClient(b.bootstrap)
    try:
        hw = list_latest_offset(c, TOTALS, 0, READ_UNCOMMITTED)
        return list_latest_offset(c, TOTALS, 0, READ_COMMITTED) < hw
    finally:
        c.close()


def stable_offset(b: BrokerProcess) -> int:
    """The group's committed offset on ``words`` as OffsetFetch answers it without
    require_stable (kafka-python's admin): offsets of an open transaction not included."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        offsets = admin.list_group_offsets(GROUP)[GROUP]
    finally:
        admin.close()
    return int(next(o.offset for tp, o in offsets.items() if tp.topic == "words"))


def pause_in_open_transaction(
    b: BrokerProcess, worker: Worker, expected: collections.Counter[str], rng: random.Random
) -> None:
    """Stop the worker (SIGSTOP) at a moment its transaction holds output records not yet
    committed, so that what happens next happens to that open transaction (more words are
    sent whenever the worker has caught up)."""
    deadline = time.monotonic() + 60
    while True:
        assert worker.proc.poll() is None, f"faust exited:\n{worker.tail()}"
        worker.proc.send_signal(signal.SIGSTOP)
        if open_transaction_on_totals(b):
            return
        worker.proc.send_signal(signal.SIGCONT)
        assert time.monotonic() < deadline, f"no open transaction seen:\n{worker.tail()}"
        if committed(b, GROUP, "words") == sum(expected.values()):
            more = [rng.choice(WORDS) for _ in range(500)]
            send_words(b, more)
            expected.update(more)
        time.sleep(0.05)


def test_faust_exactly_once_across_broker_and_worker_kills(tmp_path: Path) -> None:
    rng = random.Random(4242)
    with running_broker(tmp_path / "broker") as b:
        create_topics(b)
        expected: collections.Counter[str] = collections.Counter()
        worker = Worker(tmp_path, b.bootstrap, guarantee="exactly_once")
        try:
            batch = [rng.choice(WORDS) for _ in range(4000)]
            send_words(b, batch)
            expected.update(batch)
            # The worker dies in the middle of a transaction: the next one with the same
            # transactional id aborts it (InitProducerId) and starts from the committed offset.
            wait_until("counting under way", lambda: committed(b, GROUP, "words") > 0, worker)
            pause_in_open_transaction(b, worker, expected, rng)
            # (3) The committed offset and the committed output move together: read_committed,
            # the output holds the words below the committed offset, each once (and, by
            # faust's race, perhaps the word at it), while read_uncommitted already shows the
            # open transaction's records.
            in_flight = read_topic(b, TOTALS, "read_uncommitted")
            done = read_topic(b, TOTALS, "read_committed")
            stable = stable_offset(b)
            sources = [source for _, _, source in totals_of(done)]
            assert sources in (list(range(stable)), list(range(stable + 1))), (stable, sources)
            assert len(done) < len(in_flight), (len(done), len(in_flight))
            crash(worker)
            worker = Worker(tmp_path, b.bootstrap, guarantee="exactly_once")
            batch = [rng.choice(WORDS) for _ in range(4000)]
            send_words(b, batch)
            expected.update(batch)
            # The broker dies (SIGKILL) with the worker's transaction open, and comes back
            # on its port; then the worker goes on.
            total = sum(expected.values())
            wait_until(
                "counting past the first batch",
                lambda: committed(b, GROUP, "words") > total - len(batch),
                worker,
            )
            pause_in_open_transaction(b, worker, expected, rng)
            b.kill()
            b.start()
            # The worker is replaced, never resumed: faust 0.15.3 whose produce failed with
            # the broker gone aborts that transaction itself and goes on with the table it
            # holds in memory, increments of the aborted transaction included, so a count
            # it emits next skips one (seen in CI: word08 read 1, 2, 3, 4, 6, ...). A new
            # worker restores the table from the changelog as read_committed has it.
            crash(worker)
            worker = Worker(tmp_path, b.bootstrap, guarantee="exactly_once")
            batch = [rng.choice(WORDS) for _ in range(1000)]
            send_words(b, batch)
            expected.update(batch)
            total = sum(expected.values())
            wait_until(
                "every word committed",
                lambda: committed(b, GROUP, "words") == total,
                worker,
                timeout=180,
            )
            # The broker's part, exact: read_committed returns the records of the committed
            # transactions, every one, and none of the aborted ones (the kills left some), as
            # the markers in the log have it.
            committed_totals = read_topic(b, TOTALS, "read_committed")
            done, undone = outcomes(b, TOTALS)
            assert sorted(m.offset() for m in committed_totals) == sorted(done)
            assert len(undone) > 0
            # (2) read_committed: each word counted once, whatever was aborted (but for
            # faust's race, at most one word per kill: two kills).
            last = assert_totals_across_kills(committed_totals, expected, kills=2)
            # The committed changelog, the last counts sent and the table the worker holds
            # agree.
            changelog = read_topic(b, CHANGELOG, "read_committed")
            assert {m.key().decode().strip('"'): int(m.value()) for m in changelog} == last
            wait_until("the table printed", lambda: worker.latest_counts() == last, worker)
            # read_uncommitted also returns the aborted transaction's output records: counts
            # the dead worker had sent and its successor sent again.
            uncommitted = read_topic(b, TOTALS, "read_uncommitted")
            assert len(uncommitted) > len(committed_totals)
            keys = collections.Counter((m.key(), m.value()) for m in uncommitted)
            assert any(n > 1 for n in keys.values())
            c = WireClient(b.bootstrap)
            try:
                aborted = fetch_partition(c, TOTALS, 0, 0, READ_COMMITTED, max_bytes=16 << 20)
            finally:
                c.close()
            assert aborted.aborted, "the killed worker's transaction is listed as aborted"
            print(
                f"faust restarted after the broker kill: {len(committed_totals)} output "
                f"records read_committed, {len(uncommitted)} read_uncommitted, "
                f"{len(aborted.aborted)} aborted txns"
            )
        finally:
            crash(worker)
