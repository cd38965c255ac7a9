"""Throughput of tierlog.protocol's ServerConnection: frames in, events out, responses back.

Prints ``name: value unit (ratio vs baseline)``. The baseline is the least any framing loop
does: ``struct.unpack_from`` of each frame's length and a slice past it. Runs in < 20 s.

    .venv/bin/python bench/bench_protocol.py
"""

from __future__ import annotations

import datetime
import io
import os
import struct
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from tierlog.protocol import NEED_DATA, RequestEvent, ServerConnection
from tierlog.protocol._writer import compile_writer

BATCH = 256  # frames per receive_data call (a pipelining client)
QUICK = os.environ.get("BENCH_QUICK") == "1"
SECONDS = 0.2 if QUICK else 1.5


def frame(req: Any, correlation_id: int) -> bytes:
    req.with_header(correlation_id=correlation_id, client_id="bench")
    return bytes(req.encode(framed=True, header=True))


def metadata_frames() -> list[bytes]:
    r = MetadataRequest[12](
        topics=[MetadataRequest.MetadataRequestTopic(name="bench", topic_id=uuid.UUID(int=0))],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    return [frame(r, i) for i in range(BATCH)]


def record_batch(size: int) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=size * 2)
    value = os.urandom(100)
    while b.size_in_bytes() < size - 150:
        b.append(timestamp=1_700_000_000_000, key=None, value=value)
    b.close()
    return bytes(b.buffer())


def produce_frames(batch: bytes) -> list[bytes]:
    p = ProduceRequest[9]
    r = p(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            p.TopicProduceData(
                name="bench",
                partition_data=[p.TopicProduceData.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )
    return [frame(r, i) for i in range(BATCH)]


def fetch_frames() -> list[bytes]:
    f = FetchRequest[12]
    r = f(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            f.FetchTopic(
                topic="bench",
                partitions=[
                    f.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1048576,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return [frame(r, i) for i in range(BATCH)]


def metadata_response() -> Any:
    import kio.schema.metadata.v12.response as m

    return m.MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(m.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092, rack=None),),
        cluster_id="bench-cluster",
        controller_id=1,
        topics=(
            m.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name="bench",
                topic_id=uuid.uuid4(),
                is_internal=False,
                partitions=(
                    m.MetadataResponsePartition(
                        error_code=ErrorCode.none,
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=0,
                        replica_nodes=(1,),
                        isr_nodes=(1,),
                        offline_replicas=(),
                    ),
                ),
                topic_authorized_operations=-(2**31),
            ),
        ),
    )


def produce_response() -> Any:
    import kio.schema.produce.v9.response as p

    return p.ProduceResponse(
        responses=(
            p.TopicProduceResponse(
                name="bench",
                partition_responses=(
                    p.PartitionProduceResponse(
                        index=0,
                        error_code=ErrorCode.none,
                        base_offset=42,
                        log_start_offset=0,
                        record_errors=(),
                        error_message=None,
                    ),
                ),
            ),
        ),
        throttle_time=datetime.timedelta(0),
    )


def fetch_response(records: bytes) -> Any:
    import kio.schema.fetch.v12.response as f

    return f.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            f.FetchableTopicResponse(
                topic="bench",
                partitions=(
                    f.PartitionData(
                        partition_index=0,
                        error_code=ErrorCode.none,
                        high_watermark=1000,
                        last_stable_offset=1000,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=records,
                    ),
                ),
            ),
        ),
    )


def run_codec(data: bytes, response: Any, *, join: bool = True) -> int:
    """One connection: feed the frames in one chunk, answer each, return requests handled."""
    conn = ServerConnection()
    conn.receive_data(data)
    n = 0
    send = conn.send if join else conn.send_buffers
    while (ev := conn.next_event()) is not NEED_DATA:
        assert isinstance(ev, RequestEvent)
        send(ev, response)
        n += 1
    return n


def run_one_per_chunk(frames: list[bytes], response: Any) -> int:
    """One connection, a client that waits for each response: one frame per receive_data."""
    conn = ServerConnection()
    for f in frames:
        conn.receive_data(f)
        ev = conn.next_event()
        assert isinstance(ev, RequestEvent)
        conn.send(ev, response)
        assert conn.next_event() is NEED_DATA
    return len(frames)


def run_baseline(data: bytes) -> int:
    """Framing alone: unpack each length, slice past the frame."""
    unpack = struct.Struct(">i").unpack_from
    pos = n = 0
    while pos < len(data):
        (size,) = unpack(data, pos)
        _ = data[pos + 4 : pos + 4 + 16]  # a header peek
        pos += 4 + size
        n += 1
    return n


def rate(fn: Callable[[], int], seconds: float = SECONDS) -> float:
    fn()  # warm up (spec caches, writer compilation)
    n = 0
    t0 = time.perf_counter()
    while (dt := time.perf_counter() - t0) < seconds:
        n += fn()
    return n / dt


def per_call_us(fn: Callable[[], Any], n: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def encode_us(writer: Callable[[Any], Any], response: Any) -> float:
    return per_call_us(lambda: writer(response), 2000 if QUICK else 20000)


def main() -> None:
    md_frames = metadata_frames()
    md = b"".join(md_frames)
    batch16 = record_batch(16384)
    pr = b"".join(produce_frames(batch16))
    fe = fetch_frames()[0]
    md_resp, pr_resp = metadata_response(), produce_response()
    base_md = rate(lambda: run_baseline(md))
    base_pr = rate(lambda: run_baseline(pr))
    for name, value, base in [
        ("metadata_v12_roundtrip", rate(lambda: run_codec(md, md_resp)), base_md),
        (
            "metadata_v12_roundtrip_unpipelined",
            rate(lambda: run_one_per_chunk(md_frames, md_resp)),
            base_md,
        ),
        ("produce_v9_16KiB_roundtrip", rate(lambda: run_codec(pr, pr_resp)), base_pr),
    ]:
        print(f"{name}: {value:,.0f} requests/s ({value / base:.3f}x vs struct-unpack framing)")

    # the response writer against kio's own entity_writer (the reference it replaces)
    for name, resp in [("metadata_v12", md_resp), ("produce_v9", pr_resp)]:
        kio_write = entity_writer(type(resp))
        fast_write = compile_writer(type(resp))

        def with_kio(r: Any, w: Any = kio_write) -> bytes:
            b = io.BytesIO()
            w(b, r)
            return b.getvalue()

        def with_fast(r: Any, w: Any = fast_write) -> bytearray:
            return w(r, bytearray(), [])  # type: ignore[no-any-return]

        t_kio, t_fast = encode_us(with_kio, resp), encode_us(with_fast, resp)
        print(
            f"{name}_encode: {t_fast:.2f} us/response ({t_fast / t_kio:.3f}x vs kio entity_writer)"
        )

    mib = bytes(1 << 20)
    fr = fetch_response(mib)
    n = 200 if QUICK else 2000
    t_copy = per_call_us(lambda: mib[1:], n)  # one memcpy of 1 MiB
    t_join = per_call_us(lambda: run_codec(fe, fr), n)
    t_bufs = per_call_us(lambda: run_codec(fe, fr, join=False), n)
    for name, t in [("fetch_v12_1MiB_send", t_join), ("fetch_v12_1MiB_send_buffers", t_bufs)]:
        print(f"{name}: {t:.1f} us/response ({t / t_copy:.2f}x vs one 1 MiB memcpy)")
    print(f"# python {sys.version.split()[0]}; {BATCH} pipelined frames per receive_data")


if __name__ == "__main__":
    main()
