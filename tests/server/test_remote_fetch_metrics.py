"""issue 15: ``RemoteFetchErrorsPerSec`` counted 1 after a clean read.

Cause: after each remote read the broker reads ahead from the next offset
(:mod:`tierlog.server.remote_read_ahead`). After the last remote segment that offset is only in
the local log, so the read ahead's ``RemoteLogManager.read`` raised OffsetOutOfRange, which was
counted as a failed remote fetch. Kafka's RemoteLogReader does not count OffsetOutOfRange.

Real parts (tests/server/tiered_parts.py): a tiered partition on disk, a RemoteLogManager over a
``file://`` store, the ReplicaManager's fetch path, as a consumer reads it from 0 to the end."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tierlog.server.fetch_path import FetchPartitionRequest
from tierlog.server.remote_read_ahead import next_fetch_offset

from .tiered_parts import TOPIC, TieredPartition, tiered_partition

RLM = "kafka_log_remote_RemoteLogManager_"
BTM = "kafka_server_BrokerTopicMetrics_"


def _sample(t: TieredPartition, name: str, **labels: str) -> float:
    value = t.rlm.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def _read_everything(t: TieredPartition, partition_max_bytes: int) -> None:
    """Fetch as a consumer does, from 0 to the log end."""

    async def run() -> None:
        offset = 0
        while offset < t.lg.log_end_offset:
            (r,) = await t.rm.fetch(
                [FetchPartitionRequest(TOPIC, 0, offset, partition_max_bytes)],
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
            )
            assert r.error_code == 0
            nxt = next_fetch_offset(r.records)
            assert nxt is not None and nxt > offset
            offset = nxt

    asyncio.run(run())


@pytest.mark.parametrize("partition_max_bytes", [400, 1 << 20])
def test_reading_a_tiered_partition_to_its_end_counts_no_remote_fetch_error(
    tmp_path: Path, partition_max_bytes: int
) -> None:
    with tiered_partition(tmp_path) as t:
        assert t.lg.local_log_start_offset > 0  # most of it is remote
        _read_everything(t, partition_max_bytes)
        # The read aheads run on the reader pool: wait until none is pending, then read the
        # counters (an error is counted before its read stops being pending).
        deadline = time.monotonic() + 30
        while _sample(t, RLM + "RemoteLogReaderTaskQueueSize") != 0:
            assert time.monotonic() < deadline, "remote reads still pending"
            time.sleep(0.01)
        labels = {"topic": t.tp.topic, "partition": str(t.tp.partition)}
        assert _sample(t, BTM + "RemoteFetchRequestsPerSec_total", **labels) >= 2
        assert _sample(t, BTM + "RemoteFetchErrorsPerSec_total", **labels) == 0
