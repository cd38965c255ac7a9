"""Executor side: read one :class:`~.planning.OffsetRange` into Arrow record batches.

* A range inside a remote segment (direct remote reads configured) is read from object
  storage (:func:`~.remote.read_remote_range`); if the segment's objects disappeared meanwhile
  (retention), the rest of the range falls back to the broker, which then answers as for any
  deleted data.
* Any other range is read through the partition leader with Fetch, pipelined: as soon as a
  response arrives its batch headers give the next offset, the next Fetch is sent, and the
  response is decoded while the broker prepares the next one.

Data loss: the broker answers OFFSET_OUT_OF_RANGE when the offsets were deleted after the
driver planned the read; with ``failOnDataLoss`` that fails the task
(:class:`~tierlog.errors.DataLossError`), otherwise the read continues at the new log start.
Offsets that do not exist yet (an ending offset past the last stable offset) are waited for
up to ``kafkaConsumer.pollTimeoutMs``, then the task fails with ``TimeoutError`` (as Spark's
Kafka source does).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Final

import pyarrow as pa

from tierlog.errors import (
    DataLossError,
    NotLeaderOrFollower,
    OffsetOutOfRange,
    RemoteResourceNotFoundError,
    UnknownTopicOrPartition,
)
from tierlog.spark.arrow_decode import PartitionDecoder
from tierlog.spark.fetch_client import (
    EARLIEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BrokerConnection,
    KafkaClient,
    is_retriable,
)
from tierlog.spark.options import SourceOptions, client_security_of
from tierlog.spark.planning import OffsetRange, data_loss_message
from tierlog.spark.remote import read_remote_range, remote_storage

__all__ = ["last_next_offset", "read_range"]

_LENGTH_PREFIX: Final = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA: Final = struct.Struct(">i")
_MAX_FETCH_BYTES: Final = 256 << 20
_RETRIES: Final = 5


def last_next_offset(buf: bytes) -> int:
    """The offset after the last complete batch in ``buf`` (-1 when there is none), from the
    batch headers alone (baseOffset, batchLength, lastOffsetDelta)."""
    pos, end, nxt = 0, len(buf), -1
    while end - pos >= 61:
        base, length = _LENGTH_PREFIX.unpack_from(buf, pos)
        size = length + 12
        if length < 49 or pos + size > end:
            break
        nxt = base + _LAST_OFFSET_DELTA.unpack_from(buf, pos + 23)[0] + 1
        pos += size
    return nxt


def read_range(r: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """Arrow batches (Spark's Kafka schema) of the records of ``r``, in offset order."""
    decoder = PartitionDecoder(
        r.topic,
        r.partition,
        r.start,
        r.end,
        include_headers=options.include_headers,
        read_committed=options.read_committed,
        check_crc=options.check_crcs,
    )
    if r.segment is not None and options.remote is not None:
        decoder.add_aborted_transactions(r.aborted)
        try:
            yield from read_remote_range(remote_storage(options.remote), r.segment, decoder)
            return
        except RemoteResourceNotFoundError:
            pass  # deleted meanwhile: the broker knows what remains
    yield from _read_from_broker(r, options, decoder)


def _read_from_broker(
    r: OffsetRange, options: SourceOptions, decoder: PartitionDecoder
) -> Iterator[pa.RecordBatch]:
    bootstrap = ",".join(x for x in (r.leader, options.bootstrap_servers) if x)
    isolation = READ_COMMITTED if options.read_committed else READ_UNCOMMITTED
    timeout_s = options.request_timeout_ms / 1000
    max_bytes = options.max_partition_fetch_bytes
    with KafkaClient(
        bootstrap,
        client_id=options.client_id,
        timeout_s=timeout_s,
        recv_buffer=options.receive_buffer_bytes,
        security=client_security_of(options.security),
    ) as client:
        offset = decoder.start_offset
        end = decoder.end_offset
        conn: BrokerConnection | None = None
        in_flight = -1  # offset of the fetch in flight on `conn`
        failures = 0
        failing_since = 0.0  # when the current run of failures began
        last_progress = time.monotonic()

        def retry_or_raise(e: BaseException) -> int:
            nonlocal failing_since
            if failures == 0:
                failing_since = time.monotonic()
            return _retry_or_raise(e, failures, time.monotonic() - failing_since, timeout_s)

        def send(at: int) -> None:
            nonlocal in_flight
            assert conn is not None
            conn.send(
                client.fetch_request(
                    r.topic,
                    r.partition,
                    at,
                    partition_max_bytes=max_bytes,
                    max_wait_ms=options.fetch_max_wait_ms,
                    isolation_level=isolation,
                ),
            )
            in_flight = at

        while offset < end:
            try:
                if conn is None:
                    conn = client.leader_connection(r.topic, r.partition)
                    in_flight = -1
                if in_flight != offset:
                    send(offset)
                response = conn.receive()
                in_flight = -1
                fetched = client.fetched_partition(response, r.topic, r.partition)
            except OffsetOutOfRange:
                offset = _after_data_loss(client, r, offset, options, isolation)
                decoder.start_offset = max(decoder.start_offset, offset)
                conn, in_flight = None, -1
                continue
            except (NotLeaderOrFollower, UnknownTopicOrPartition) as e:
                failures = retry_or_raise(e)
                client.forget_leader(r.topic, r.partition)
                conn, in_flight = None, -1
                continue
            except Exception as e:
                if not is_retriable(e):
                    raise
                failures = retry_or_raise(e)
                client.close()
                client.forget_leader(r.topic, r.partition)
                conn, in_flight = None, -1
                continue
            failures = 0
            records = fetched.records
            nxt = last_next_offset(records)
            if offset < nxt < end:
                try:
                    send(nxt)  # the broker works on the next response while we decode this one
                except OSError:
                    # The connection broke after its last response: keep that response, and
                    # let the next turn of the loop reconnect (with its retries).
                    client.close()
                    conn, in_flight = None, -1
            decoder.add_aborted_transactions(fetched.aborted_transactions)
            progressed = False
            for result in decoder.decode_windows(records):
                if result.batch is not None and result.batch.num_rows:
                    yield result.batch
                if result.next_offset > offset:
                    offset = result.next_offset
                    progressed = True
            if progressed:
                last_progress = time.monotonic()
                continue
            # No complete batch: either nothing to read yet, or a batch larger than max_bytes.
            if records and max_bytes < _MAX_FETCH_BYTES:
                max_bytes = min(max_bytes * 4, _MAX_FETCH_BYTES)
            elif time.monotonic() - last_progress > timeout_s:
                stable = (
                    fetched.last_stable_offset
                    if options.read_committed
                    else (fetched.high_watermark)
                )
                raise TimeoutError(
                    f"Cannot fetch records in [{offset}, {end}) of {r.topic}-{r.partition} in "
                    f"{options.request_timeout_ms} ms (readable up to {stable})"
                )


def _retry_or_raise(e: BaseException, failures: int, failing_for_s: float, timeout_s: float) -> int:
    """Back off and count one more failure in a row, or raise ``e``. A retriable failure is
    retried at least ``_RETRIES`` times and for ``request.timeout.ms`` since the first failure
    in a row: a leader's death takes the ZooKeeper session timeout to fail over."""
    if failures >= _RETRIES and failing_for_s >= timeout_s:
        raise e
    time.sleep(min(0.1 * 2**failures, 2.0))
    return failures + 1


def _after_data_loss(
    client: KafkaClient, r: OffsetRange, offset: int, options: SourceOptions, isolation: int
) -> int:
    """Where to continue after OFFSET_OUT_OF_RANGE at ``offset``."""
    tp = (r.topic, r.partition)
    earliest = client.list_offsets({tp: EARLIEST_TIMESTAMP}, isolation_level=isolation)[tp][0]
    if offset >= earliest:
        # Out of range above the end: the log was truncated below what the driver saw.
        raise DataLossError(
            data_loss_message(
                f"Cannot fetch offset {offset} of {r.topic}-{r.partition}: it is beyond the "
                "end of the log"
            )
        )
    if options.fail_on_data_loss:
        raise DataLossError(
            data_loss_message(
                f"Cannot fetch offset {offset} of {r.topic}-{r.partition}: the log now starts "
                f"at {earliest}"
            )
        )
    return earliest
