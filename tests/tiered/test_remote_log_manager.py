"""RemoteLogManager with real Logs, a file:// pyarrow RSM behind the recording double and the
in-memory metadata manager: copy, local deletion gate, expiration, reads, timestamps, topic
deletion. Faults are in test_remote_log_manager_faults.py."""

from __future__ import annotations

import itertools
import threading
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tierlog.errors import OffsetOutOfRange, RemoteStorageError
from tierlog.records.default_records import build_batch, read_records
from tierlog.records.record_batch import iter_headers
from tierlog.tiered import (
    InMemoryRemoteLogMetadataManager,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.metrics import start_metrics_server
from tierlog.tiered.remote_log_manager import (
    RemoteLogManagerConfig,
    RemoteStorageFetchInfo,
    build_filtered_leader_epoch_map,
    is_remote_segment_within_leader_epochs,
)
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from tierlog.tiered.storage import EventType, LogSegmentData, PyArrowRemoteStorageManager

from .tiered_harness import HOUR, T0, TOPIC_ID, World, config

S = RemoteLogSegmentState


def states(w: World, tp: TopicIdPartition | None = None) -> list[tuple[int, int, str]]:
    return [
        (m.start_offset, m.end_offset, m.state.name)
        for m in w.rlmm.list_remote_log_segments(tp or w.tp)
    ]


def remote_objects(w: World) -> list[Path]:
    return sorted(p for p in w.remote_dir.rglob("*") if p.is_file())


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path, topic_config=config(local_retention_ms=0, retention_ms=-1))
    yield w
    w.close()


# ---------------------------------------------------------------------------------- copy


def test_copies_rolled_segments_oldest_first_never_the_active_one(world: World) -> None:
    world.fill_segments(5)
    segments = world.log.segments.values()
    world.rlm.run_copy(world.tp)
    expected = [
        (s.base_offset, n.base_offset - 1, "COPY_SEGMENT_FINISHED")
        for s, n in itertools.pairwise(segments)
    ]
    assert states(world) == expected
    assert world.rlm.highest_offset_in_remote_storage(world.tp) == segments[-1].base_offset - 1
    copies = world.rsm.events_of(EventType.COPY_SEGMENT)
    assert len(copies) == 4
    # a second run copies nothing new
    world.rlm.run_copy(world.tp)
    assert len(world.rsm.events_of(EventType.COPY_SEGMENT)) == 4
    md = world.rlmm.list_remote_log_segments(world.tp)[0]
    assert md.segment_leader_epochs == {0: 0}
    assert md.broker_id == 1
    assert md.segment_size_in_bytes == segments[0].size
    assert md.max_timestamp_ms == segments[0].largest_timestamp


def test_a_log_swapped_out_by_a_move_is_not_copied_from_and_its_successor_takes_over(
    world: World,
) -> None:
    """A JBOD move closes the log (then renames its dir) while the copy task may hold it: no
    upload from the closed log (no empty producer snapshot shipped); the log that replaced it
    gets the highest remote offset at the next run, then copies the rest."""
    from tierlog.log.log import Log

    world.fill_segments(3)
    world.rlm.run_copy(world.tp)
    copied = world.log.highest_offset_in_remote_storage
    assert copied > 0
    world.fill_segments(5)
    old = world.log
    old.close()  # swapped out: the lookup still returns it until the move is done
    world.rlm.run_copy(world.tp)
    assert states(world)[-1] == (
        old.segments.values()[1].base_offset,
        copied,
        "COPY_SEGMENT_FINISHED",
    )
    assert len(world.rsm.events_of(EventType.COPY_SEGMENT)) == 2
    new = Log.open(old.dir, world.topic_config, topic_id=TOPIC_ID, time_ms=world.clock)
    world.logs[world.tp] = new
    assert new.highest_offset_in_remote_storage == -1
    world.rlm.run_copy(world.tp)
    segments = new.segments.values()
    assert new.highest_offset_in_remote_storage == segments[-1].base_offset - 1 > copied
    assert [s[2] for s in states(world)] == ["COPY_SEGMENT_FINISHED"] * (len(segments) - 1)


def test_only_segments_below_the_last_stable_offset_are_copied(world: World) -> None:
    world.fill_segments(4)
    segments = world.log.segments.values()
    world.log.update_high_watermark(segments[2].base_offset)  # LSO = HW = start of segment 2
    world.rlm.run_copy(world.tp)
    assert [s[0] for s in states(world)] == [segments[0].base_offset, segments[1].base_offset]
    world.log.update_high_watermark(world.log.log_end_offset)
    world.rlm.run_copy(world.tp)
    assert len(states(world)) == 3


def test_offload_and_read_back_byte_identical_after_local_deletion(world: World) -> None:
    world.fill_segments(6)
    before = world.local_bytes()
    world.rlm.run_copy(world.tp)
    world.clock.now = T0 + HOUR
    assert world.log.delete_old_segments() == 5
    lg = world.log
    assert lg.log_start_offset == 0
    assert lg.local_log_start_offset == lg.segments.values()[0].base_offset > 0
    with pytest.raises(OffsetOutOfRange):
        lg.read(0, 100)
    remote = world.remote_bytes(0, lg.local_log_start_offset)
    assert remote + world.local_bytes() == before
    assert world.rlm.needs_remote_read(lg, 0)
    assert not world.rlm.needs_remote_read(lg, lg.local_log_start_offset)
    # reading from the middle of a batch starts at the batch holding the offset
    info = world.rlm.read(RemoteStorageFetchInfo(world.tp, 4, 10_000, True))
    first = next(iter_headers(info.records))
    assert first.base_offset <= 4 <= first.last_offset


def test_cold_segment_read_costs_exactly_two_remote_requests(world: World) -> None:
    world.fill_segments(4)
    world.rlm.run_copy(world.tp)
    world.clock.now = T0 + HOUR
    world.log.delete_old_segments()
    world.rsm.clear()
    for md in world.rlmm.list_remote_log_segments(world.tp):
        world.rsm.clear()
        info = world.rlm.read(RemoteStorageFetchInfo(world.tp, md.start_offset + 1, 300, True))
        assert info.records
        assert [e.type for e in world.rsm.events] == [
            EventType.FETCH_INDEXES,
            EventType.FETCH_SEGMENT,
        ]
        # warm: the indexes come from the cache, one ranged read remains
        world.rsm.clear()
        world.rlm.read(RemoteStorageFetchInfo(world.tp, md.end_offset, 300, True))
        assert [e.type for e in world.rsm.events] == [EventType.FETCH_SEGMENT]


def test_a_read_that_raced_its_segments_deletion_looks_the_offset_up_again(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment's objects can go while a read of it runs (retention, or a compacted topic's
    remote swap superseding it): the read looks the offset up again, once; an object that is
    really missing still fails the read."""
    from tierlog.errors import RemoteResourceNotFoundError

    world.fill_segments(4)
    world.rlm.run_copy(world.tp)
    world.clock.now = T0 + HOUR
    world.log.delete_old_segments()
    real = world.rlm._read_segment
    calls: list[int] = []

    def gone_once(md, fi):  # type: ignore[no-untyped-def]
        calls.append(md.start_offset)
        if len(calls) == 1:
            raise RemoteResourceNotFoundError("deleted under the read")
        return real(md, fi)

    monkeypatch.setattr(world.rlm, "_read_segment", gone_once)
    info = world.rlm.read(RemoteStorageFetchInfo(world.tp, 0, 10_000, True))
    assert next(iter_headers(info.records)).base_offset == 0
    assert calls[:2] == [0, 0]
    monkeypatch.undo()
    for path in remote_objects(world):  # really missing: every object of every segment
        path.unlink()
    with pytest.raises(RemoteResourceNotFoundError):
        world.rlm.read(RemoteStorageFetchInfo(world.tp, 0, 10_000, True))


def test_read_respects_max_bytes_and_min_one_message(world: World) -> None:
    world.fill_segments(3, value_size=100)
    world.rlm.run_copy(world.tp)
    tp = world.tp
    whole = world.rlm.read(RemoteStorageFetchInfo(tp, 0, 10_000, True)).records
    first = next(iter_headers(whole))
    one = world.rlm.read(RemoteStorageFetchInfo(tp, 0, 10, True))
    assert one.records == whole[: first.size_in_bytes]
    none = world.rlm.read(RemoteStorageFetchInfo(tp, 0, 10, False))
    assert none.records == b""
    some = world.rlm.read(RemoteStorageFetchInfo(tp, 0, first.size_in_bytes + 50, True))
    assert some.records == whole[: first.size_in_bytes + 50]  # ends in a partial batch


def test_read_of_an_offset_not_in_remote_storage(world: World) -> None:
    world.fill_segments(3)
    with pytest.raises(OffsetOutOfRange):
        world.rlm.read(RemoteStorageFetchInfo(world.tp, 0, 100, True))


def test_local_deletion_waits_for_the_copy(world: World) -> None:
    world.fill_segments(4)
    world.clock.now = T0 + HOUR
    n = world.log.number_of_segments
    assert world.log.delete_old_segments() == 0  # nothing copied yet
    assert world.log.number_of_segments >= n
    world.rlm.run_copy(world.tp)
    assert world.log.delete_old_segments() > 0
    copied_up_to = world.rlm.highest_offset_in_remote_storage(world.tp)
    assert world.log.local_log_start_offset == copied_up_to + 1
    assert world.log.log_start_offset == 0


def test_active_segment_rolled_on_local_retention_breach_then_offloaded(tmp_path) -> None:
    w = World(tmp_path, topic_config=config(local_retention_ms=HOUR, segment_bytes=1 << 20))
    try:
        w.produce(10)
        assert w.log.number_of_segments == 1
        w.clock.now = T0 + 2 * HOUR
        w.log.delete_old_segments()  # breach: the active segment is rolled, not deleted
        assert w.log.number_of_segments == 2
        w.rlm.run_copy(w.tp)
        assert states(w) == [(0, 29, "COPY_SEGMENT_FINISHED")]
        assert w.log.delete_old_segments() == 1
        assert w.log.local_log_start_offset == 30
        assert w.remote_bytes(0, 30)
    finally:
        w.close()


def test_copy_disable_stops_copying_but_reads_still_work(tmp_path) -> None:
    w = World(tmp_path, topic_config=config(local_retention_ms=0))
    try:
        w.fill_segments(3)
        w.rlm.run_copy(w.tp)
        assert len(states(w)) == 2
        w.log.update_config(config(local_retention_ms=0, remote_log_copy_disable=True))
        w.fill_segments(6)
        w.rlm.run_copy(w.tp)
        assert len(states(w)) == 2
        assert w.remote_bytes(0, 5)
    finally:
        w.close()


def test_enabling_remote_storage_on_an_existing_topic(tmp_path) -> None:
    w = World(tmp_path, topic_config=config(remote_storage_enable=False))
    try:
        w.fill_segments(3)
        w.rlm.on_leadership_change({w.tp}, set())
        with pytest.raises(Exception, match="not managed"):
            w.rlm.run_copy(w.tp)  # remote storage off: not managed
        w.log.update_config(config())
        w.rlm.on_leadership_change({w.tp}, set())
        w.rlm.run_copy(w.tp)
        assert len(states(w)) == 2
    finally:
        w.close()


# ---------------------------------------------------------------------------------- expiration


def test_retention_by_time_deletes_remote_and_moves_log_start(tmp_path) -> None:
    w = World(tmp_path, topic_config=config(local_retention_ms=0, retention_ms=HOUR))
    try:
        w.fill_segments(5)
        w.rlm.run_copy(w.tp)
        mds = w.rlmm.list_remote_log_segments(w.tp)
        # the first two segments are older than the total retention
        w.clock.now = mds[1].max_timestamp_ms + HOUR
        w.rlm.run_expiration(w.tp)
        assert [s[0] for s in states(w)] == [m.start_offset for m in mds[2:]]
        assert w.log.log_start_offset == mds[1].end_offset + 1
        deletes = w.rsm.events_of(EventType.DELETE_SEGMENT)
        assert [e.segment_id for e in deletes] == [m.remote_log_segment_id for m in mds[:2]]
        with pytest.raises(OffsetOutOfRange):
            w.rlm.read(RemoteStorageFetchInfo(w.tp, 0, 100, True))
    finally:
        w.close()


def test_retention_by_size_over_local_and_remote(tmp_path) -> None:
    w = World(tmp_path, topic_config=config(local_retention_ms=0, retention_ms=-1))
    try:
        w.fill_segments(6)
        w.rlm.run_copy(w.tp)
        w.clock.now = T0 + HOUR
        w.log.delete_old_segments()
        mds = w.rlmm.list_remote_log_segments(w.tp)
        local_only = sum(
            s.size
            for s in w.log.segments.values()
            if s.base_offset > w.rlm.highest_offset_in_remote_storage(w.tp)
        )
        remote = sum(m.segment_size_in_bytes for m in mds)
        # keep room for everything but the first two remote segments
        target = local_only + remote - mds[0].segment_size_in_bytes - mds[1].segment_size_in_bytes
        w.log.update_config(config(local_retention_ms=0, retention_ms=-1, retention_bytes=target))
        w.rlm.run_expiration(w.tp)
        assert [s[0] for s in states(w)] == [m.start_offset for m in mds[2:]]
        assert w.log.log_start_offset == mds[2].start_offset
        assert w.rlm.remote_log_size(w.tp) == sum(m.segment_size_in_bytes for m in mds[2:])
    finally:
        w.close()


def test_retention_by_log_start_offset_delete_records(world: World) -> None:
    world.fill_segments(5)
    world.rlm.run_copy(world.tp)
    mds = world.rlmm.list_remote_log_segments(world.tp)
    world.log.delete_records_before(mds[2].start_offset + 1)
    world.rlm.run_expiration(world.tp)
    assert [s[0] for s in states(world)] == [m.start_offset for m in mds[2:]]
    assert world.log.log_start_offset == mds[2].start_offset + 1
    # the new start is in the middle of a remote segment: still readable from there
    info = world.rlm.read(RemoteStorageFetchInfo(world.tp, world.log.log_start_offset, 500, True))
    assert info.records


def test_segments_of_epochs_before_the_lineage_are_deleted(world: World) -> None:
    world.fill_segments(3)
    world.rlm.run_copy(world.tp)
    stale = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(world.tp, uuid.uuid4()), 0, 5, T0, 2, T0, 100, {0: 0}
    )
    # an unclean-election leftover: epoch 0 no longer in the lineage once it starts at 7
    world.fill_segments(5, leader_epoch=7)
    world.log.delete_records_before(world.log.segments.values()[3].base_offset)
    world.rlmm.add_remote_log_segment_metadata(stale)
    world.rlm.run_expiration(world.tp)
    remaining = world.rlmm.list_remote_log_segments(world.tp)
    assert all(max(m.segment_leader_epochs) >= 7 for m in remaining)


def test_segments_diverged_from_the_lineage_are_deleted(world: World) -> None:
    """An uncleanly elected leader's lineage ends epoch 0 where its own log ends; a segment
    another leader uploaded with later offsets of epoch 0 is not in it: expiration deletes it
    (Kafka leaves it until total retention). A segment of a later epoch than this leader's
    (a newer leader's) stays."""
    world.fill_segments(3)
    world.rlm.run_copy(world.tp)
    end = world.log.log_end_offset
    diverged = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(world.tp, uuid.uuid4()), end, end + 50, T0, 2, T0, 100, {0: end}
    )
    newer = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(world.tp, uuid.uuid4()), end, end + 50, T0, 2, T0, 100, {9: end}
    )
    world.fill_segments(2, leader_epoch=3)  # this leader's own epoch starts at ``end``
    for md in (diverged, newer):
        world.rlmm.add_remote_log_segment_metadata(md)
        world.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, T0, None, S.COPY_SEGMENT_FINISHED, 2
            )
        )
    world.rlm.run_expiration(world.tp)
    remaining = {m.remote_log_segment_id for m in world.rlmm.list_remote_log_segments(world.tp)}
    assert diverged.remote_log_segment_id not in remaining
    assert newer.remote_log_segment_id in remaining
    # what this leader copied itself stays, and reads of it still work
    assert {m.start_offset for m in world.rlmm.list_remote_log_segments(world.tp, 0)} >= {0}


def test_segments_being_copied_are_not_expired(world: World) -> None:
    world.fill_segments(3)
    world.rlm.run_copy(world.tp)
    st = world.rlm._state(world.tp)
    assert st is not None
    md = world.rlmm.list_remote_log_segments(world.tp)[0]
    st.being_copied.add(md.remote_log_segment_id.id)
    world.log.delete_records_before(world.log.log_end_offset)
    world.rlm.run_expiration(world.tp)
    assert md.remote_log_segment_id in {
        m.remote_log_segment_id for m in world.rlmm.list_remote_log_segments(world.tp)
    }
    st.being_copied.clear()
    world.rlm.run_expiration(world.tp)
    assert world.rlmm.list_remote_log_segments(world.tp) == []


def test_a_copy_finishing_during_expiration_is_not_deleted_as_dangling(tmp_path) -> None:
    """Expiration lists a segment while its copy is in flight (COPY_SEGMENT_STARTED); the copy
    finishes, the local segment may go, and only then does expiration ask whether the segment
    is being copied: it is not, but it is not dangling either -- it is the only copy left."""
    uploading, upload = threading.Event(), threading.Event()

    class GatedRSM(PyArrowRemoteStorageManager):
        def copy_log_segment_data(
            self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
        ) -> bytes | None:
            uploading.set()
            assert upload.wait(30)  # the timeout only bounds a hang
            return super().copy_log_segment_data(metadata, segment_data)

    class ListingHookRLMM(InMemoryRemoteLogMetadataManager):
        """Runs ``after_listing_all`` once, after the next listing of every segment."""

        after_listing_all: Callable[[], None] | None = None

        def list_remote_log_segments(
            self, tp: TopicIdPartition, leader_epoch: int | None = None
        ) -> list[RemoteLogSegmentMetadata]:
            segments = super().list_remote_log_segments(tp, leader_epoch)
            hook = self.after_listing_all
            if leader_epoch is None and hook is not None:
                self.after_listing_all = None
                hook()
            return segments

    rlmm = ListingHookRLMM()
    w = World(
        tmp_path,
        topic_config=config(local_retention_ms=0, retention_ms=-1),
        rsm=GatedRSM(f"file://{tmp_path / 'remote'}"),
        rlmm=rlmm,
    )
    try:
        w.fill_segments(2)
        first = w.log.segments.values()[0]
        end = w.log.segments.values()[1].base_offset - 1
        expected = w.local_bytes()[: first.size]
        copier = threading.Thread(target=w.rlm.run_copy, args=(w.tp,))
        copier.start()
        assert uploading.wait(30)
        assert states(w) == [(0, end, "COPY_SEGMENT_STARTED")]

        def copy_finishes_and_local_retention_runs() -> None:
            upload.set()
            copier.join()
            w.clock.now = T0 + HOUR
            w.log.delete_old_segments()

        rlmm.after_listing_all = copy_finishes_and_local_retention_runs
        w.rlm.run_expiration(w.tp)
        assert rlmm.after_listing_all is None  # the interleaving happened
        assert w.log.local_log_start_offset == end + 1  # the local copy is gone
        assert states(w) == [(0, end, "COPY_SEGMENT_FINISHED")]
        assert w.remote_bytes(0, end + 1) == expected
    finally:
        upload.set()
        w.close()


# ---------------------------------------------------------------------------------- timestamps


def test_find_offset_by_timestamp_through_remote_time_indexes(world: World) -> None:
    world.fill_segments(5)
    world.rlm.run_copy(world.tp)
    world.clock.now = T0 + HOUR
    world.log.delete_old_segments()
    cache = world.log.leader_epoch_cache
    mds = world.rlmm.list_remote_log_segments(world.tp)
    # batch i has timestamps T0 + 10 i .. T0 + 10 i + 2; pick a record in the third segment
    target_md = mds[2]
    data = world.remote_bytes(target_md.start_offset, target_md.start_offset + 1)
    header = next(iter_headers(data))
    record = read_records(data, header)[1]
    world.cache.remove(target_md.remote_log_segment_id.id)  # cold again
    world.rsm.clear()
    found = world.rlm.find_offset_by_timestamp(world.tp, record.timestamp, 0, cache)
    assert found is not None
    assert (found.timestamp, found.offset) == (record.timestamp, record.offset)
    assert [e.type for e in world.rsm.events] == [
        EventType.FETCH_INDEXES,
        EventType.FETCH_SEGMENT,
    ]
    # a timestamp between records finds the next record
    found = world.rlm.find_offset_by_timestamp(world.tp, record.timestamp + 3, 0, cache)
    assert found is not None and found.offset > record.offset
    # start offset honoured
    found = world.rlm.find_offset_by_timestamp(world.tp, T0, 7, cache)
    assert found is not None and found.offset == 7
    # later than everything remote: None (the local log answers)
    assert world.rlm.find_offset_by_timestamp(world.tp, T0 + 10**9, 0, cache) is None


def test_find_offset_by_timestamp_does_not_inflate_a_remote_compression_bomb(
    world: World,
) -> None:
    """A remote batch that decompresses far beyond its size is not inflated: the lookup
    answers from its header (max timestamp, last offset), as the local lookup does."""
    world.produce(1, ts=lambda _j: T0)
    bomb = build_batch([(T0 + 10, None, bytes(10 << 20)), (T0 + 20, None, bytes(10 << 20))], 4)
    assert len(bomb) < 1024  # zstd; 20 MiB inflated, past the 16 MiB bound
    info = world.log.append(bomb)
    world.fill_segments(3)
    world.rlm.run_copy(world.tp)
    world.clock.now = T0 + HOUR
    world.log.delete_old_segments()
    assert world.log.local_log_start_offset > info.last_offset  # the bomb is remote only
    cache = world.log.leader_epoch_cache
    found = world.rlm.find_offset_by_timestamp(world.tp, T0 + 15, 0, cache)
    assert found is not None
    assert (found.timestamp, found.offset) == (T0 + 20, info.last_offset)


# ---------------------------------------------------------------------------------- followers


def test_follower_tracks_highest_remote_offset_and_gates_deletion(tmp_path) -> None:
    leader = World(tmp_path / "a", topic_config=config(local_retention_ms=0))
    try:
        leader.fill_segments(4)
        leader.rlm.run_copy(leader.tp)
        follower = World(
            tmp_path / "b",
            topic_config=config(local_retention_ms=0),
            rsm=leader.base_rsm,
            rlmm=leader.rlmm,
        )
        try:
            follower.rlm.on_leadership_change(set(), {follower.tp})
            follower.fill_segments(4)
            follower.rlm.run_follower(follower.tp)
            assert follower.rlm.highest_offset_in_remote_storage(
                follower.tp
            ) == leader.rlm.highest_offset_in_remote_storage(leader.tp)
            follower.clock.now = T0 + HOUR
            assert follower.log.delete_old_segments() > 0
        finally:
            follower.close()
    finally:
        leader.close()


# ---------------------------------------------------------------------------------- topic deletion


def test_stop_partitions_with_delete_removes_every_remote_segment(world: World) -> None:
    world.fill_segments(4)
    world.rlm.run_copy(world.tp)
    world.rlm.read(RemoteStorageFetchInfo(world.tp, 0, 100, True))
    assert len(world.cache) == 1
    assert remote_objects(world)
    world.rlm.stop_partitions([world.tp], delete=True)
    assert remote_objects(world) == []
    assert len(world.cache) == 0
    assert len(world.rsm.events_of(EventType.DELETE_SEGMENT)) == 3
    # idempotent: a second call (e.g. after a restart) finishes without error
    world.rlm.stop_partitions([world.tp], delete=True)


def test_stop_partitions_without_delete_keeps_remote_data(world: World) -> None:
    world.fill_segments(3)
    world.rlm.run_copy(world.tp)
    world.rlm.stop_partitions([world.tp], delete=False)
    assert len(states(world)) == 2
    with pytest.raises(Exception, match="not managed"):
        world.rlm.run_copy(world.tp)


# ---------------------------------------------------------------------------------- parallel reads


def test_read_many_serves_every_partition(tmp_path) -> None:
    w = World(tmp_path, partitions=3, topic_config=config(local_retention_ms=0))
    try:
        for tp in w.tps:
            w.fill_segments(3, tp=tp)
        w.copy_all()
        results = w.rlm.read_many([RemoteStorageFetchInfo(tp, 1, 500, True) for tp in w.tps])
        assert [r.fetch_info.topic_id_partition for r in results] == w.tps
        for r in results:
            assert r.error is None and r.info is not None and r.info.records
    finally:
        w.close()


# ---------------------------------------------------------------------------------- metrics


def test_metrics_have_kafka_names_and_are_served(world: World) -> None:
    world.fill_segments(4)
    world.rlm.run_copy(world.tp)
    world.rlm.read(RemoteStorageFetchInfo(world.tp, 0, 500, True))
    world.log.delete_records_before(world.log.log_end_offset)
    world.rlm.run_expiration(world.tp)
    server = start_metrics_server(0, "127.0.0.1", world.rlm.metrics.registry)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
    finally:
        server.close()
    labels = '{partition="0",topic="orders"}'
    for name in (
        "RemoteCopyBytesPerSec_total",
        "RemoteFetchBytesPerSec_total",
        "RemoteCopyRequestsPerSec_total",
        "RemoteFetchRequestsPerSec_total",
        "RemoteDeleteRequestsPerSec_total",
        "RemoteCopyErrorsPerSec_total",
        "RemoteFetchErrorsPerSec_total",
        "RemoteDeleteErrorsPerSec_total",
        "RemoteLogMetadataCount",
        "RemoteLogSizeBytes",
        "RemoteCopyLagBytes",
        "RemoteCopyLagSegments",
        "RemoteDeleteLagBytes",
        "RemoteDeleteLagSegments",
    ):
        assert f"kafka_server_BrokerTopicMetrics_{name}{labels}" in text, name
    copied = sum(m.segment_size_in_bytes for m in [*world.rlmm.list_remote_log_segments(world.tp)])
    assert copied == 0  # all expired by the DeleteRecords
    assert f"kafka_server_BrokerTopicMetrics_RemoteCopyRequestsPerSec_total{labels} 3.0" in text
    assert f"kafka_server_BrokerTopicMetrics_RemoteDeleteRequestsPerSec_total{labels} 3.0" in text
    assert "kafka_log_remote_RemoteLogManager_RemoteLogReaderFetchRateAndTimeMs" in text


def test_a_clean_read_and_the_read_ahead_past_remote_storage_count_no_fetch_error(
    world: World,
) -> None:
    """issue 15: RemoteFetchErrorsPerSec read 1 after a clean read. The broker reads ahead
    from the offset after the records it served (remote_read_ahead); after the last remote
    segment that offset is not in remote storage, and the OffsetOutOfRange of that read was
    counted as a failed remote fetch. Kafka's RemoteLogReader does not count it."""
    world.fill_segments(4)
    world.rlm.run_copy(world.tp)
    last = max(world.rlmm.list_remote_log_segments(world.tp), key=lambda m: m.end_offset)
    labels = {"topic": "orders", "partition": "0"}

    def sample(name: str) -> float | None:
        return world.rlm.metrics.registry.get_sample_value(
            f"kafka_server_BrokerTopicMetrics_{name}_total", labels
        )

    info = world.rlm.read(RemoteStorageFetchInfo(world.tp, last.start_offset, 1 << 20, True))
    nxt = list(iter_headers(info.records))[-1].last_offset + 1  # what the read ahead asks
    assert nxt == last.end_offset + 1
    with pytest.raises(OffsetOutOfRange):
        world.rlm.read(RemoteStorageFetchInfo(world.tp, nxt, 1 << 20, True))
    assert sample("RemoteFetchRequestsPerSec") == 2
    assert sample("RemoteFetchErrorsPerSec") == 0
    # A real failure still counts: the segment's objects gone from remote storage.
    world.rsm.delete_log_segment_data(last)
    with pytest.raises(RemoteStorageError):
        world.rlm.read(RemoteStorageFetchInfo(world.tp, last.start_offset, 1 << 20, True))
    assert sample("RemoteFetchErrorsPerSec") == 1


# ---------------------------------------------------------------------------------- lineage


def _md(start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(TOPIC_ID, "orders", 0)
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, uuid.uuid4()), start, end, T0, 0, T0, 1, epochs
    )


def test_build_filtered_leader_epoch_map_drops_empty_epochs() -> None:
    epochs = {0: 0, 1: 10, 2: 20, 3: 30, 4: 40, 5: 60, 6: 60, 7: 70}
    assert build_filtered_leader_epoch_map(epochs) == {
        0: 0, 1: 10, 2: 20, 3: 30, 4: 40, 6: 60, 7: 70,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("start", "end", "epochs", "expected"),
    [
        (0, 9, {0: 0}, True),
        (10, 25, {1: 10, 2: 20}, True),
        (5, 15, {0: 5, 1: 10}, True),
        (10, 25, {1: 10, 2: 21}, False),  # epoch 2 starts elsewhere in the lineage
        (10, 35, {1: 10, 2: 20}, False),  # runs into epoch 3
        (10, 25, {1: 10, 5: 20}, False),  # epoch 5 is not in the lineage
        (40, 60, {3: 40}, False),  # past the log end offset
        (0, 9, {9: 0}, False),  # epoch after the lineage
    ],
)
def test_is_remote_segment_within_leader_epochs(start, end, epochs, expected) -> None:
    lineage = {0: 0, 1: 10, 2: 20, 3: 30}
    assert is_remote_segment_within_leader_epochs(_md(start, end, epochs), 50, lineage) is expected


def test_overlapping_segment_after_log_start_moved_is_within_lineage() -> None:
    # Kafka's example: lineage {(5,10),(7,15),(9,100)}; after the first segment went, the
    # lineage is {(7,51),(9,100)} and segment2 (14-150, epochs {5:14, 7:15, 9:100}) is valid.
    lineage = {7: 51, 9: 100}
    assert is_remote_segment_within_leader_epochs(
        _md(14, 150, {5: 14, 7: 15, 9: 100}), 200, lineage
    )


def test_config_from_broker_config_reads_attributes() -> None:
    class Broker:
        remote_log_manager_task_interval_ms = 10
        remote_fetch_max_wait_ms = 7
        unrelated = 1

    c = RemoteLogManagerConfig.from_broker_config(Broker())
    assert c.remote_log_manager_task_interval_ms == 10
    assert c.remote_fetch_max_wait_ms == 7
    assert c.remote_log_reader_threads == 10


# ---------------------------------------------------------------------------------- the Log side


def test_log_gates_local_deletion_on_its_own_and_answers_latest_tiered(tmp_path) -> None:
    from tierlog.log.log import LATEST_TIERED_TIMESTAMP, Log

    lg = Log.open(tmp_path / "t-0", config(local_retention_ms=0), topic_id=TOPIC_ID)
    try:
        for i in range(40):
            lg.append(build_batch([(T0 + i, b"k", b"v" * 50)]))
        lg.update_high_watermark(lg.log_end_offset)
        assert lg.number_of_segments > 2
        # no RemoteLogManager attached, nothing copied: local retention deletes nothing
        assert lg.delete_old_segments(T0 + HOUR) == 0
        found = lg.offset_for_timestamp(LATEST_TIERED_TIMESTAMP)
        assert found is not None and found.offset == -1
        second = lg.segments.values()[1]
        lg.update_highest_offset_in_remote_storage(second.base_offset - 1)
        assert lg.delete_old_segments(T0 + HOUR) == 1
        assert lg.local_log_start_offset == second.base_offset and lg.log_start_offset == 0
        found = lg.offset_for_timestamp(LATEST_TIERED_TIMESTAMP)
        assert found is not None and found.offset == second.base_offset - 1
    finally:
        lg.close()


def test_topic_based_metadata_manager_restart_keeps_remote_data_readable(tmp_path) -> None:
    from tierlog.tiered import InMemoryMetadataPublisher, TopicBasedRemoteLogMetadataManager

    publisher = InMemoryMetadataPublisher()
    rlmm = TopicBasedRemoteLogMetadataManager(publisher, num_metadata_partitions=3)
    w = World(tmp_path, topic_config=config(local_retention_ms=0), rlmm=rlmm)
    w.fill_segments(4)
    before = w.local_bytes()
    w.rlm.run_copy(w.tp)
    w.clock.now = T0 + HOUR
    w.log.delete_old_segments()
    w.rlm.close()
    rlmm2 = TopicBasedRemoteLogMetadataManager(publisher, num_metadata_partitions=3)
    w2 = World(tmp_path, logs=w.logs, rsm=w.base_rsm, rlmm=rlmm2, clock=w.clock)
    try:
        assert w2.rlm.highest_offset_in_remote_storage(w2.tp) == w2.log.local_log_start_offset - 1
        assert w2.remote_bytes(0, w2.log.local_log_start_offset) + w2.local_bytes() == before
    finally:
        w2.close()


def test_scheduled_tasks_with_concurrent_appends_and_retention_lose_nothing(tmp_path) -> None:
    """Copy and expiration on their pools every 20 ms while a producer appends and local
    retention runs: every record comes back, from remote then local storage."""
    import threading
    import time

    w = World(
        tmp_path,
        topic_config=config(local_retention_ms=0, retention_ms=-1),
        rlm_config=RemoteLogManagerConfig(remote_log_manager_task_interval_ms=20),
        start_scheduler=True,
    )
    stop = threading.Event()
    errors: list[BaseException] = []

    def retention() -> None:
        while not stop.is_set():
            try:
                w.log.delete_old_segments(T0 + HOUR)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)
            time.sleep(0.005)

    t = threading.Thread(target=retention)
    t.start()
    try:
        for i in range(200):
            w.produce(1, ts=lambda _j, i=i: T0 + i)
        w.log.roll()
        w.log.update_high_watermark(w.log.log_end_offset)
        leo = w.log.log_end_offset
        # A poll for what must happen (the copies, then local retention, get there); the
        # deadline only bounds a hang, ample for a loaded machine.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and w.log.local_log_start_offset < leo:
            time.sleep(0.02)
    finally:
        stop.set()
        t.join()
    try:
        assert not errors
        # everything tiered, nothing left locally
        assert w.log.local_log_start_offset == leo, (
            w.log.highest_offset_in_remote_storage,
            states(w)[-3:],
        )
        data = w.remote_bytes(0, leo)
        offsets = [r.offset for h in iter_headers(data) for r in read_records(data, h)]
        assert offsets == list(range(leo))
        assert all(
            m.state == S.COPY_SEGMENT_FINISHED for m in w.rlmm.list_remote_log_segments(w.tp)
        )
    finally:
        w.close()


def test_fetches_read_a_file_store_inline_and_any_other_store_on_the_reader_pool(
    world: World,
) -> None:
    from tierlog.tiered.remote_index_cache import RemoteIndexCache
    from tierlog.tiered.remote_log_manager import RemoteLogManager

    # The harness wraps the file:// store in a recording double: not known to be fast.
    assert world.rlm.reads_inline is False
    cache = RemoteIndexCache(world.base_rsm, world.root / "cache2", 1 << 20)
    plain = RemoteLogManager(
        RemoteLogManagerConfig(remote_log_reader_prefetch_max_bytes=64 << 20),
        world.base_rsm,
        world.rlmm,
        cache,
        world.logs.get,
        broker_id=1,
    )
    # In a cluster the metadata manager's lock is held while a publish waits on the event
    # loop: a metadata lookup there would wait for itself, so the reads stay on the pool.
    clustered = RemoteLogManager(
        RemoteLogManagerConfig(remote_log_reader_prefetch_max_bytes=64 << 20),
        world.base_rsm,
        world.rlmm,
        cache,
        world.logs.get,
        broker_id=1,
        metadata_never_waits_on_loop=False,
    )
    try:
        assert plain.reads_inline is True
        assert plain.prefetcher is None  # nothing waits for a pool thread on the event loop
        assert clustered.reads_inline is False
        assert clustered.prefetcher is not None
    finally:
        plain.close()
        clustered.close()
        cache.close()
