"""Remote log metadata: memory per segment and restart time, against baselines of the same run.

Prints ``name: value unit (ratio vs baseline)``:

* metadata cache bytes per segment at N segments (tracemalloc, after loading the cache file)
  vs a Kafka-shaped cache (a dict of metadata objects per segment id, like Kafka's
  RemoteLogMetadataCache), measured at N/10 segments;
* restart time: loading the file cache of N segments vs re-reading N metadata records from
  the start of ``__remote_log_metadata`` (deserialising every record and applying it, what
  Kafka 3.8+ does). The baseline reads N records = N/2 segments added and finished, so it
  covers half the segments the file load covers.

``BENCH_QUICK=1`` uses N = 100,000 instead of 1,000,000.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tierlog.tiered import metadata_cache_file
from tierlog.tiered.metadata_serde import deserialize, serialize
from tierlog.tiered.remote_log_metadata_cache import (
    CHUNK_ROWS,
    EpochState,
    RemoteLogMetadataCache,
    _Chunk,
)
from tierlog.tiered.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState as S

TP = TopicIdPartition(uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "bench", 0)
T0 = 1_700_000_000_000
RECORDS_PER_SEGMENT = 1000
EPOCH_LEN = 100_000  # a leader change every 100k segments
KAFKA_ESTIMATE = 100  # seed 003: ~100 bytes per segment
T = TypeVar("T")


def segment_fields(i: int) -> tuple[int, int, int, int, int, int, int]:
    """(start, end, max ts, event ts, size, broker, epoch) of synthetic segment i: one segment
    rolled per second, copied 30-60 s later, 1.00-1.07 MB."""
    start = i * RECORDS_PER_SEGMENT
    return (
        start,
        start + RECORDS_PER_SEGMENT - 1,
        T0 + i * 1000 - (i * 7919) % 500,
        T0 + i * 1000 + 30_000 + (i * 104729) % 30_000,
        1_000_000 + (i * 7919) % 70_000,
        1 + i % 3,
        i // EPOCH_LEN,
    )


def build_columnar(n: int) -> RemoteLogMetadataCache:
    """n FINISHED segments straight into the cache's columns (same layout the API builds)."""
    cache = RemoteLogMetadataCache(TP)
    maps: list[tuple[tuple[int, int], ...]] = []
    chunks = []
    epochs: dict[int, EpochState] = {}
    for lo in range(0, n, CHUNK_ROWS):
        rows = [segment_fields(i) for i in range(lo, min(n, lo + CHUNK_ROWS))]
        map_idx = []
        for start, end, *_, epoch in rows:
            rel = ((epoch, 0),)
            if rel not in maps:
                maps.append(rel)
            map_idx.append(maps.index(rel))
            st = epochs.get(epoch)
            if st is None:
                epochs[epoch] = EpochState(end, start, start, 0, 0)
            else:
                st.highest, st.max_start = end, start
        chunks.append(
            _Chunk.build(
                os.urandom(16 * len(rows)),
                [r[0] for r in rows],
                [r[1] - r[0] for r in rows],
                [r[2] for r in rows],
                [r[3] for r in rows],
                [r[4] for r in rows],
                [r[5] for r in rows],
                map_idx,
                [int(S.COPY_SEGMENT_FINISHED) | (1 << 3)] * len(rows),
            )
        )
    cache._restore(chunks, maps, epochs, {})
    return cache


def metadata(i: int) -> RemoteLogSegmentMetadata:
    start, end, max_ts, event_ts, size, broker, epoch = segment_fields(i)
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP, uuid.uuid4()), start, end, max_ts, broker, event_ts, size,
        {epoch: start},
    )  # fmt: skip


def traced(fn: Callable[[], T]) -> tuple[T, int]:
    """fn's result and the bytes it left allocated (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = fn()
        gc.collect()
        return result, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def main() -> None:
    n = 100_000 if os.environ.get("BENCH_QUICK") else 1_000_000

    # ---------------------------------------------------------------- memory
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cache"
        cache = build_columnar(n)
        metadata_cache_file.save(path, cache, {0: 2 * n})
        del cache
        (cache, _), used = traced(lambda: metadata_cache_file.load(path))
        ours = used / n

        base_n = n // 10

        def kafka_shaped() -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
            by_id = {}
            for i in range(base_n):
                md = metadata(i)
                by_id[md.remote_log_segment_id.id] = md
            return by_id

        _, base_used = traced(kafka_shaped)
        baseline = base_used / base_n
        print(
            f"metadata cache bytes per segment at {n:,} segments: {ours:.1f} B "
            f"({ours / baseline:.2f}x vs {baseline:.0f} B of a dict of metadata objects at "
            f"{base_n:,}; {ours / KAFKA_ESTIMATE:.2f}x vs seed 003's ~{KAFKA_ESTIMATE} B)"
        )

        # ------------------------------------------------------------ restart
        t0 = time.perf_counter()
        loaded, offsets = metadata_cache_file.load(path)
        load_s = time.perf_counter() - t0
        assert len(loaded) == n and offsets == {0: 2 * n}
        size_mb = path.stat().st_size / 1e6
        del loaded, cache
        gc.collect()

    values = []
    for i in range(n // 2):
        md = metadata(i)
        values.append(serialize(md))
        upd = RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, md.event_timestamp_ms + 5, None, S.COPY_SEGMENT_FINISHED, 1
        )
        values.append(serialize(upd))
    t0 = time.perf_counter()
    records = [deserialize(v) for v in values]
    deser_s = time.perf_counter() - t0
    rebuilt = RemoteLogMetadataCache(TP)
    t0 = time.perf_counter()
    for rec in records:
        if isinstance(rec, RemoteLogSegmentMetadata):
            rebuilt.add_copy_in_progress_segment(rec)
        else:
            assert isinstance(rec, RemoteLogSegmentMetadataUpdate)
            rebuilt.update_remote_log_segment_metadata(rec)
    apply_s = time.perf_counter() - t0
    reread_s = deser_s + apply_s
    print(
        f"restart, load file cache of {n:,} segments ({size_mb:.0f} MB): {load_s:.3f} s "
        f"({load_s / reread_s:.4f}x vs {reread_s:.1f} s re-reading {len(values):,} records)"
    )
    print(
        f"restart baseline, re-read {len(values):,} metadata records: deserialise "
        f"{deser_s:.1f} s + apply {apply_s:.1f} s = {reread_s:.1f} s "
        f"({deser_s / len(values) * 1e6:.1f} + {apply_s / len(values) * 1e6:.1f} us/record)"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
