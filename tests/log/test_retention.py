"""Retention (time, size, log start offset), DeleteRecords, and reads running concurrently
with deletes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tierlog.errors import OffsetOutOfRange
from tierlog.log.log import Log
from tierlog.records.record_batch import iter_headers, read_header

from .conftest import T0, Clock, build_batch, make_config, read_all

OpenLog = Callable[..., Log]
HOUR = 3_600_000


def earliest(log: Log) -> int:
    found = log.offset_for_timestamp(-2)
    assert found is not None
    return found.offset


def fill_segments(log: Log, segments: int, *, ts_step: int = 0, start_ts: int = T0) -> None:
    """Append until the log has ``segments`` segments; batch i gets timestamp start + i*step."""
    i = 0
    while log.number_of_segments < segments or log.active_segment.size == 0:
        log.append(build_batch(2, timestamp=start_ts + i * ts_step, value_size=40))
        i += 1
    log.update_high_watermark(log.log_end_offset)


def test_retention_by_time(open_log: OpenLog, clock: Clock, log_dir: Path) -> None:
    log = open_log(
        make_config(
            segment_bytes=500, retention_ms=10 * HOUR, message_timestamp_after_max_ms=10**12
        )
    )
    fill_segments(log, 6, ts_step=HOUR)
    segments = log.segments.values()
    # segment i holds timestamps up to its largest; delete those older than now - 10h
    clock.now = segments[2].largest_timestamp + 10 * HOUR + 1
    deleted = log.delete_old_segments()
    assert deleted == 3
    assert log.segments.values() == segments[3:]
    assert log.log_start_offset == log.local_log_start_offset == segments[3].base_offset
    assert not any(s.log.path.exists() for s in segments[:3])
    assert read_all(log)[:61] == log.read(log.log_start_offset, 1).records[:61]
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert earliest(log) == segments[3].base_offset
    assert log.delete_old_segments() == 0


def test_expired_active_segment_is_rolled_then_deleted(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(make_config(segment_bytes=500, retention_ms=HOUR))
    fill_segments(log, 3)
    end = log.log_end_offset
    clock.advance(2 * HOUR)
    assert log.delete_old_segments() == 3
    assert log.segments.base_offsets() == [end]
    assert log.active_segment.size == 0
    assert (log.log_start_offset, log.log_end_offset) == (end, end)
    assert log.append(build_batch(1, timestamp=clock.now)).first_offset == end


def test_retention_disabled(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(make_config(segment_bytes=500, retention_ms=-1, retention_bytes=-1))
    fill_segments(log, 4)
    clock.advance(10**12)
    assert log.delete_old_segments() == 0


def test_retention_by_size(open_log: OpenLog) -> None:
    log = open_log(make_config(segment_bytes=500, retention_ms=-1))
    fill_segments(log, 6)
    sizes = [s.size for s in log.segments.values()]
    total = sum(sizes)
    keep = sizes[-1] + sizes[-2] + sizes[-3]
    # Kafka's rule: delete the oldest while the rest stays >= retention.bytes
    log.update_config(make_config(segment_bytes=500, retention_ms=-1, retention_bytes=keep + 5))
    assert log.delete_old_segments() == 2
    log.update_config(make_config(segment_bytes=500, retention_ms=-1, retention_bytes=keep))
    assert log.delete_old_segments() == 1
    assert log.size_in_bytes == keep
    log.update_config(make_config(segment_bytes=500, retention_ms=-1, retention_bytes=total))
    assert log.delete_old_segments() == 0


def test_only_below_the_high_watermark(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(make_config(segment_bytes=500, retention_ms=HOUR))
    fill_segments(log, 5)
    log.update_high_watermark(log.segments.values()[2].base_offset)
    clock.advance(2 * HOUR)
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == log.high_watermark


def test_compact_policy_keeps_segments(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(make_config(segment_bytes=500, retention_ms=HOUR, cleanup_policy="compact"))
    fill_segments(log, 4)
    clock.advance(2 * HOUR)
    assert log.delete_old_segments() == 0


def test_delete_hook_gates_local_deletion(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(make_config(segment_bytes=500, retention_ms=HOUR))
    fill_segments(log, 5)
    allowed = {log.segments.values()[0].base_offset, log.segments.values()[1].base_offset}
    log.can_delete_local_segment = lambda segment: segment.base_offset in allowed
    clock.advance(2 * HOUR)
    assert log.delete_old_segments() == 2
    assert log.number_of_segments == 3


def test_delete_records_before(open_log: OpenLog) -> None:
    log = open_log(make_config(segment_bytes=500))
    fill_segments(log, 5)
    second = log.segments.values()[2].base_offset
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(log.high_watermark + 1)
    assert log.delete_records_before(second + 1) == second + 1
    assert log.log_start_offset == second + 1
    assert log.local_log_start_offset == second + 1
    # reads below the new start fail; the batch holding it is still served
    with pytest.raises(OffsetOutOfRange):
        log.read(second, 100)
    assert read_header(log.read(second + 1, 100).records).base_offset == second
    assert earliest(log) == second + 1
    assert log.delete_records_before(3) == second + 1  # never moves back
    assert log.delete_old_segments() == 2  # the segments entirely below it
    assert log.segments.values()[0].base_offset == second
    assert log.delete_records_before(-1) == log.high_watermark


def test_retention_deletes_producer_snapshots(
    open_log: OpenLog, clock: Clock, log_dir: Path
) -> None:
    log = open_log(make_config(segment_bytes=500, retention_ms=HOUR))
    for seq in range(0, 40, 2):
        log.append(build_batch(2, producer_id=7, producer_epoch=0, base_sequence=seq))
    log.update_high_watermark(log.log_end_offset)
    clock.advance(2 * HOUR)
    log.delete_old_segments()
    first = log.segments.values()[0].base_offset
    assert all(int(p.name[:20]) >= first for p in log_dir.glob("*.snapshot"))


def test_reads_concurrent_with_deletes(open_log: OpenLog, clock: Clock) -> None:
    """A reader looping over the whole log while another thread appends and deletes never
    fails, except with OffsetOutOfRange for offsets retention removed under it."""
    log = open_log(make_config(segment_bytes=2000, retention_ms=HOUR, index_interval_bytes=100))
    fill_segments(log, 4)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0, 0]  # successful reads, OffsetOutOfRange

    def reader() -> None:
        while not stop.is_set():
            offset = log.log_start_offset
            try:
                while offset < log.log_end_offset:
                    info = log.read(offset, 700)
                    headers = list(iter_headers(info.records))
                    if not headers:
                        break
                    assert headers[0].base_offset <= offset <= headers[0].last_offset
                    offset = headers[-1].next_offset
                    reads[0] += 1
            except OffsetOutOfRange:
                reads[1] += 1
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(60):
            for _ in range(5):
                log.append(build_batch(2, timestamp=clock.now, value_size=40))
            log.update_high_watermark(log.log_end_offset)
            clock.advance(HOUR // 4)
            log.delete_old_segments()
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    assert reads[0] > 0
    assert log.log_start_offset > 0


def test_tiered_deletion_moves_the_local_start_before_the_segments_go(
    open_log: OpenLog, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While local retention deletes tiered segments, every offset in [log start, log end)
    stays either below the local log start offset (a fetch reads it from remote storage) or
    readable locally: a fetch in between never finds it in neither (it answered
    OFFSET_OUT_OF_RANGE, and consumers reset to the earliest offset)."""
    log = open_log(
        make_config(segment_bytes=500, remote_storage_enable="true", local_retention_bytes=1000)
    )
    fill_segments(log, 6)
    log.update_highest_offset_in_remote_storage(log.log_end_offset - 1)  # all tiered
    doomed = log.segments.values()[:-2]
    seen: list[tuple[int, int]] = []  # (offset, local log start) found in neither
    checked = []

    def check_then_delete(delete: Callable[[], None]) -> None:
        checked.append(log.local_log_start_offset)
        for offset in range(log.log_start_offset, log.log_end_offset):
            if offset >= log.local_log_start_offset:
                try:
                    log.read(offset, 100)
                except OffsetOutOfRange:
                    seen.append((offset, log.local_log_start_offset))
        delete()

    for s in doomed:
        monkeypatch.setattr(
            s, "delete_if_exists", lambda d=s.delete_if_exists: check_then_delete(d)
        )
    deleted = log.delete_old_segments()
    assert deleted >= 1 and len(checked) == deleted
    assert not seen, seen[:3]
    assert log.log_start_offset == 0
    assert log.local_log_start_offset == log.segments.values()[0].base_offset > 0
