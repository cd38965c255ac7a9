"""Consumer group restore from ``__consumer_offsets``, before and after the log cleaner.

A broker's group coordinator rebuilds every group and committed offset at startup by
replaying ``__consumer_offsets`` (:meth:`GroupCoordinator.start`); the log cleaner compacts
the topic so that replay reads little more than the live keys. This bench writes 1,000,000
offset commits of 1,000 groups (each group commits its 5 partitions together, 200 times:
5,000 live keys) to one partition of ``__consumer_offsets`` in 1 MiB segments of 100-commit
batches, then times, on the same log:

* restore before compaction: ``GroupCoordinator.start`` replaying the whole log through
  the broker's own reader (``iter_log_records``, 1 MiB reads);
* the clean: one ``Cleaner`` round (offset map of the log, every segment rewritten);
* restore after compaction, the same way, with the restored state checked equal.

Prints ``name: value unit``. ``BENCH_QUICK=1`` writes 100,000 commits on 100 groups.

    .venv/bin/python bench/bench_offsets_restore.py
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tierlog.coordinator.group.group_coordinator import GroupCoordinator
from tierlog.coordinator.group.group_records import OffsetCommitKey, OffsetCommitValue
from tierlog.coordinator.offset_store import StoredBatch
from tierlog.log.cleaner import Cleaner
from tierlog.log.log import Log
from tierlog.log.log_cleaner_manager import LogCleanerManager
from tierlog.log.log_config import LogConfig
from tierlog.log.log_replay import iter_log_records
from tierlog.log.offset_map import SkimpyOffsetMap
from tierlog.records.default_records import build_batch
from tierlog.server.offset_store import offsets_topic_configs

QUICK = bool(os.environ.get("BENCH_QUICK"))
GROUPS = 100 if QUICK else 1000
COMMITS = 100_000 if QUICK else 1_000_000
PARTITIONS_PER_GROUP = 5
BATCH = 100
TP = ("__consumer_offsets", 0)


def report(name: str, value: float, unit: str) -> None:
    print(f"{name}: {value:,.3f} {unit}", flush=True)


class LogStore:
    """The broker's OffsetStore replay (offset_store.OffsetStore._iter) over one Log."""

    def __init__(self, lg: Log) -> None:
        self.lg = lg

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        raise NotImplementedError

    def replay(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        return self._iter()

    def replay_batches(self, partition: int) -> Iterable[StoredBatch]:
        # the bench writes no transactional or control batches: one batch per record
        return (StoredBatch([record]) for record in self._iter())

    def _iter(self) -> Iterator[tuple[bytes, bytes | None]]:
        def stop(offset: int, e: Exception) -> None:
            raise e

        lg = self.lg
        for r in iter_log_records(lg, lg.log_start_offset, lg.log_end_offset, stop):
            if r.key is not None:
                yield r.key, r.value


def write_log(dir: Path) -> int:
    config = LogConfig().with_overrides(
        {**offsets_topic_configs(1 << 20), "min.cleanable.dirty.ratio": "0.01"}
    )
    lg = Log.open(dir, config)
    keys = [
        OffsetCommitKey(f"group-{g:04d}", "orders", p).encode()
        for g in range(GROUPS)
        for p in range(PARTITIONS_PER_GROUP)
    ]
    now = int(time.time() * 1000)
    records: list[tuple[int, bytes, bytes]] = []
    for i in range(COMMITS):
        value = OffsetCommitValue(i, 0, "", now).encode()
        records.append((now, keys[i % len(keys)], value))
        if len(records) == BATCH:
            lg.append(build_batch(records))
            records = []
    if records:
        lg.append(build_batch(records))
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    size = lg.size_in_bytes
    lg.close()
    return size


def restore(dir: Path) -> tuple[float, Any]:
    """Seconds of ``GroupCoordinator.start`` over the log; the restored offsets."""
    lg = Log.open(dir, LogConfig().with_overrides(offsets_topic_configs(1 << 20)))
    lg.update_high_watermark(lg.log_end_offset)
    coordinator = GroupCoordinator(LogStore(lg), offsets_topic_num_partitions=1)
    t0 = time.perf_counter()
    asyncio.run(coordinator.start())
    elapsed = time.perf_counter() - t0
    state = {g.group_id: dict(g.offsets) for g in coordinator.group_manager.current_groups()}
    lg.close()
    return elapsed, state


def clean(dir: Path) -> float:
    config = LogConfig().with_overrides(
        {**offsets_topic_configs(1 << 20), "min.cleanable.dirty.ratio": "0.01"}
    )
    lg = Log.open(dir, config)
    lg.update_high_watermark(lg.log_end_offset)
    manager = LogCleanerManager([dir.parent], lambda: {TP: lg})
    t0 = time.perf_counter()
    cleanable = manager.grab_filthiest_compacted_log()
    assert cleanable is not None
    end, _ = Cleaner(SkimpyOffsetMap(128 << 20)).clean(cleanable)
    manager.done_cleaning(TP, dir.parent, end)
    elapsed = time.perf_counter() - t0
    lg.close()
    return elapsed


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-offsets-"))
    try:
        dir = tmp / "__consumer_offsets-0"
        before_bytes = write_log(dir)
        print(f"commits: {COMMITS:,} on {GROUPS} groups ({GROUPS * PARTITIONS_PER_GROUP} keys)")
        report("log before compaction", before_bytes / 1e6, "MB")
        t_before, state_before = restore(dir)
        report("restore before compaction", t_before, "s")
        report("clean", clean(dir), "s")
        after_bytes = sum(p.stat().st_size for p in dir.glob("*.log"))
        report("log after compaction", after_bytes / 1e6, "MB")
        t_after, state_after = restore(dir)
        assert state_after == state_before, "compaction changed the restored offsets"
        report("restore after compaction", t_after, "s")
        report("restore speedup", t_before / t_after, "x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
