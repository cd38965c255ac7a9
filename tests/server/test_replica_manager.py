"""ReplicaManager over a real LogManager: produce validation, reads at the high watermark,
the fetch long-poll and the response-size rules; and the OffsetStore on __consumer_offsets."""

from __future__ import annotations

import asyncio
import time

import pytest

from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.log.topic_names import GROUP_METADATA_TOPIC_NAME
from tierlog.records.default_records import build_batch, decode_records, iter_records
from tierlog.records.record_batch import CONTROL_FLAG_MASK
from tierlog.server.fetch_path import FetchPartitionRequest
from tierlog.server.offset_store import OffsetStore, ensure_offsets_topic
from tierlog.server.replica_manager import ReplicaManager


@pytest.fixture
def log_manager(tmp_path):
    lm = LogManager([tmp_path / "logs"], LogConfig())
    lm.startup()
    lm.create_topic("t", 2, {})
    yield lm
    lm.shutdown()


@pytest.fixture
def rm(log_manager):
    return ReplicaManager(log_manager)


def batch(n: int = 3, value: bytes = b"v", **kw) -> bytes:
    return build_batch([(1_700_000_000_000 + i, b"k", value) for i in range(n)], **kw)


def test_append_assigns_offsets_and_moves_the_high_watermark(rm):
    r1 = rm.append_records("t", 0, batch(3))
    r2 = rm.append_records("t", 0, batch(2))
    assert (r1.error_code, r1.base_offset, r2.base_offset) == (0, 0, 3)
    assert r2.log_start_offset == 0 and r2.log_append_time == -1
    p = rm.get_partition("t", 0)
    assert p.log.high_watermark == p.log.log_end_offset == 5


@pytest.mark.parametrize(
    ("topic", "partition", "records", "code"),
    [
        ("nope", 0, batch(), 3),  # unknown topic
        ("t", 7, batch(), 3),  # unknown partition
        ("t", 0, None, 87),  # no records
        ("t", 0, b"", 87),
        ("t", 0, batch() + batch(), 87),  # two batches in one partition
        ("t", 0, batch()[:-1], 2),  # truncated
        (GROUP_METADATA_TOPIC_NAME, 0, batch(), 17),  # internal topic
    ],
)
def test_append_errors(rm, log_manager, topic, partition, records, code):
    if topic == GROUP_METADATA_TOPIC_NAME:
        ensure_offsets_topic(log_manager, 1, 1 << 20)
    r = rm.append_records(topic, partition, records)
    assert r.error_code == code


def test_control_batches_from_clients_are_refused(rm):
    control = build_batch([(0, b"\x00\x00\x00\x01", b"\x00" * 6)], is_control=True)
    assert int.from_bytes(control[21:23], "big") & CONTROL_FLAG_MASK
    assert rm.append_records("t", 0, control).error_code == 87


def test_corrupt_crc_is_corrupt_message(rm):
    raw = bytearray(batch(2))
    raw[-1] ^= 0xFF
    assert rm.append_records("t", 0, bytes(raw)).error_code == 2


def _req(offset: int, partition: int = 0, max_bytes: int = 1 << 20) -> FetchPartitionRequest:
    return FetchPartitionRequest("t", partition, offset, max_bytes)


def test_fetch_reads_whole_batches_and_reports_offsets(rm):
    rm.append_records("t", 0, batch(3))
    rm.append_records("t", 0, batch(2))
    results, total, error, _ = rm.fetch_once(
        [_req(0), _req(0, 1)], max_bytes=1 << 20, isolation_level=0
    )
    assert not error
    r0, r1 = results
    assert (r0.high_watermark, r0.last_stable_offset, r0.log_start_offset) == (5, 5, 0)
    assert [rec.offset for _, recs in iter_records(r0.records) for rec in recs] == list(range(5))
    assert r1.records == b"" and r1.high_watermark == 0
    assert total == len(r0.records)
    # from the middle of a batch: the whole batch comes back (clients skip below the offset)
    results, *_ = rm.fetch_once([_req(4)], max_bytes=1 << 20, isolation_level=1)
    assert decode_records(results[0].records)[0].offset == 3


def test_fetch_out_of_range_and_unknown(rm):
    rm.append_records("t", 0, batch(1))
    results, _, error, _ = rm.fetch_once(
        [
            _req(5),
            FetchPartitionRequest("gone", 0, 0, 100),
            FetchPartitionRequest(None, 0, 0, 100, 100),
        ],
        max_bytes=1 << 20,
        isolation_level=0,
    )
    assert error
    assert [r.error_code for r in results] == [1, 3, 100]


def test_response_max_bytes_allows_one_batch_past_the_limit_only_first(rm):
    big = b"x" * 5000
    rm.append_records("t", 0, batch(1, big))
    rm.append_records("t", 1, batch(1, big))
    results, total, _, _ = rm.fetch_once(
        [_req(0, 0, 100), _req(0, 1, 100)], max_bytes=100, isolation_level=0
    )
    assert len(results[0].records) > 5000  # min one message
    assert results[1].records == b""  # the response limit is spent
    assert total == len(results[0].records)


def test_long_poll_wakes_on_append_and_times_out(rm):
    async def main() -> tuple[float, float, int]:
        t0 = time.monotonic()
        empty = await rm.fetch(
            [_req(0)], max_wait_ms=200, min_bytes=1, max_bytes=1 << 20, isolation_level=0
        )
        waited = time.monotonic() - t0
        assert empty[0].records == b""

        async def later() -> None:
            await asyncio.sleep(0.1)
            rm.append_records("t", 0, batch(1))

        t1 = time.monotonic()
        task = asyncio.create_task(later())
        got = await rm.fetch(
            [_req(0)], max_wait_ms=5000, min_bytes=1, max_bytes=1 << 20, isolation_level=0
        )
        await task
        return waited, time.monotonic() - t1, len(got[0].records)

    waited, woke, size = asyncio.run(main())
    assert 0.18 <= waited < 1.0
    assert woke < 1.0 and size > 0


def test_fetch_at_once_answers_from_its_first_read_or_waits_for_the_next_append(rm):
    rm.append_records("t", 0, batch(3))
    end = rm.get_partition("t", 0).log.log_end_offset

    async def main() -> None:
        got = rm.fetch_at_once(
            [_req(0)], max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0
        )
        assert isinstance(got, list)  # the records are there: an answer, no task
        assert len(got[0].records) > 0

        waiting = rm.fetch_at_once(
            [_req(end)], max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0
        )
        assert not isinstance(waiting, list)
        # An append after the first read and before the waiting task ever ran (another
        # connection's produce in the same turn of the loop): it must not be missed.
        rm.append_records("t", 0, batch(2))
        later = await asyncio.wait_for(waiting, 10)  # not the 60 s of max_wait_ms
        offsets = [rec.offset for _, recs in iter_records(later[0].records) for rec in recs]
        assert offsets == [end, end + 1]

    asyncio.run(main())


def test_min_bytes_keeps_waiting_until_enough(rm):
    async def main() -> float:
        async def feed() -> None:
            for _ in range(5):
                await asyncio.sleep(0.05)
                rm.append_records("t", 0, batch(1, b"y" * 100))

        t0 = time.monotonic()
        task = asyncio.create_task(feed())
        got = await rm.fetch(
            [_req(0)], max_wait_ms=3000, min_bytes=400, max_bytes=1 << 20, isolation_level=0
        )
        await task
        assert len(got[0].records) >= 400
        return time.monotonic() - t0

    assert asyncio.run(main()) < 2.0


def test_offset_store_roundtrip_and_restart(tmp_path):
    lm = LogManager([tmp_path], LogConfig())
    lm.startup()
    assert ensure_offsets_topic(lm, 3, 1 << 20) == 3
    store = OffsetStore(ReplicaManager(lm))

    async def write() -> None:
        await store.append(1, [(b"k1", b"a"), (b"k2", b"b")])
        await store.append(1, [(b"k1", None)])
        await store.append(2, [])

    asyncio.run(write())
    assert list(store.replay(1)) == [(b"k1", b"a"), (b"k2", b"b"), (b"k1", None)]
    assert list(store.replay(0)) == []
    lm.shutdown()

    lm = LogManager([tmp_path], LogConfig())
    lm.startup()
    assert ensure_offsets_topic(lm, 50, 1 << 20) == 3  # fixed once created
    store = OffsetStore(ReplicaManager(lm))
    assert list(store.replay(1))[-1] == (b"k1", None)
    lm.shutdown()


def test_flush_messages_partitions_append_in_a_thread_in_order(rm, log_manager):
    log_manager.create_topic("fsync", 1, {"flush.messages": "1"})
    assert rm.append_in_thread("fsync", 0) and not rm.append_in_thread("t", 0)

    async def main():
        tasks = [
            asyncio.create_task(rm.append_records_in_thread("fsync", 0, batch(2, b"%d" % i)))
            for i in range(6)
        ]
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    assert [r.base_offset for r in results] == [0, 2, 4, 6, 8, 10]
    lg = rm.get_partition("fsync", 0).log
    assert lg.recovery_point == lg.log_end_offset == 12  # fsynced
    bad = asyncio.run(rm.append_records_in_thread("fsync", 0, b"junk"))
    assert bad.error_code == 2


def test_a_follower_gets_whole_batches_where_a_consumer_gets_a_cut_one(rm):
    """A cut last batch is Kafka's answer to a consumer (it skips it); a follower would drop it
    and fetch it again, so the leader stops its read at the last whole batch."""
    sizes = [len(b) for b in (batch(40), batch(40), batch(40))]
    for _ in sizes:
        rm.append_records("t", 0, batch(40))
    limit = sizes[0] + sizes[1] + sizes[2] // 2
    (consumer,), *_ = rm.fetch_once([_req(0, 0, limit)], max_bytes=1 << 20, isolation_level=0)
    (follower,), *_ = rm.fetch_once(
        [_req(0, 0, limit)], max_bytes=1 << 20, isolation_level=0, replica_id=2
    )
    assert len(consumer.records) == limit
    assert bytes(follower.records) == bytes(consumer.records)[: sizes[0] + sizes[1]]
    assert [r.offset for _, recs in iter_records(follower.records) for r in recs] == list(range(80))
