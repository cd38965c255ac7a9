"""copy_step, one round of a move between log dirs (tierlog.server.replica_alter_log_dirs), on
real logs: the future replica follows the current one through appends, truncations, a
divergence by leader epoch and retention passing the copy."""

from __future__ import annotations

import time
from pathlib import Path

from tierlog.log.future_logs import start_future
from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.records.default_records import build_batch
from tierlog.server.replica_alter_log_dirs import copy_step

T0 = int(time.time() * 1000)  # recent: retention by time deletes nothing
CONFIG = LogConfig().with_overrides({"segment.bytes": "1024"})


def batch(n: int, tag: str = "v") -> bytes:
    return build_batch([(T0 + i, b"k", f"{tag}{i}".encode()) for i in range(n)])


def content(lg: Log) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every local batch."""
    out = []
    offset = lg.local_log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 20)
        buf = bytes(data.records)
        assert buf, f"nothing at {offset} below the log end offset {lg.log_end_offset}"
        pos = 0
        while pos + 12 <= len(buf):
            base = int.from_bytes(buf[pos : pos + 8], "big")
            size = 12 + int.from_bytes(buf[pos + 8 : pos + 12], "big")
            out.append((base, buf[pos : pos + size]))
            pos += size
        offset = _next(buf)  # reads stop at a segment's end: read the next one
    return out


def _next(buf: bytes) -> int:
    """The offset after the last whole batch of ``buf``."""
    pos, nxt = 0, 0
    while pos + 61 <= len(buf):
        base = int.from_bytes(buf[pos : pos + 8], "big")
        size = 12 + int.from_bytes(buf[pos + 8 : pos + 12], "big")
        last_delta = int.from_bytes(buf[pos + 23 : pos + 27], "big")
        nxt = base + last_delta + 1
        pos += size
    return nxt


def pair(tmp_path: Path) -> tuple[Log, Log]:
    current = Log.open(tmp_path / "a" / "t-0", CONFIG)
    future = Log.open(tmp_path / "b" / "t-0.0123-future", CONFIG)
    start_future(current, future)
    return current, future


def copy_all(current: Log, future: Log) -> int:
    rounds = 0
    while copy_step(current, future, 300) > 0:
        rounds += 1
    return rounds


def test_the_future_follows_appends_with_the_same_offsets_and_epochs(tmp_path):
    current, future = pair(tmp_path)
    for i in range(20):
        current.append(batch(3, f"a{i}-"), leader_epoch=0)
    assert copy_all(current, future) > 1  # several rounds of 300 bytes
    current.assign_epoch_start_offset(3, current.log_end_offset)
    current.append(batch(2, "b"), leader_epoch=3)
    copy_all(current, future)
    assert future.log_end_offset == current.log_end_offset == 62
    assert content(future) == content(current)
    assert future.leader_epoch_cache.epoch_entries() == current.leader_epoch_cache.epoch_entries()
    assert copy_step(current, future) == 0  # caught up


def test_a_truncated_current_truncates_the_future(tmp_path):
    current, future = pair(tmp_path)
    for _ in range(10):
        current.append(batch(3), leader_epoch=0)
    copy_all(current, future)
    current.truncate_to(12)  # a follower truncating to its leader
    copy_step(current, future)
    assert future.log_end_offset == 12
    assert content(future) == content(current)


def test_a_divergence_by_leader_epoch_is_truncated_and_copied_again(tmp_path):
    current, future = pair(tmp_path)
    for _ in range(10):
        current.append(batch(3, "old"), leader_epoch=1)
    copy_all(current, future)
    # The current replica (a follower) lost its tail and took another leader's, as long.
    current.truncate_to(15)
    current.assign_epoch_start_offset(2, 15)
    for _ in range(5):
        current.append(batch(3, "new"), leader_epoch=2)
    assert current.log_end_offset == future.log_end_offset == 30
    copy_all(current, future)
    assert content(future) == content(current)
    assert future.leader_epoch_cache.epoch_entries() == current.leader_epoch_cache.epoch_entries()


def test_retention_passing_the_copy_restarts_it_at_the_local_start(tmp_path):
    current, future = pair(tmp_path)
    for _ in range(30):
        current.append(batch(3), leader_epoch=0)
    copy_step(current, future, 100)  # one batch copied
    current.update_high_watermark(current.log_end_offset)
    current.maybe_increment_log_start_offset(60)
    current.delete_old_segments()
    start = current.local_log_start_offset
    assert 3 < start <= 60
    copy_all(current, future)
    assert future.local_log_start_offset == start
    assert future.log_start_offset == current.log_start_offset == 60
    assert content(future) == content(current)
