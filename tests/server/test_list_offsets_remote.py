"""ListOffsets by timestamp on a tiered partition (the remote segments are searched first)
when remote storage fails: KAFKA_STORAGE_ERROR (56, retriable) for that partition, offset
and timestamp -1 -- never the local log's answer -- while the other partitions of the request
are served; the same request answers right once the store is back.

Real parts (tests/server/tiered_parts.py): a tiered partition on disk, a RemoteLogManager over
a ``file://`` remote store under tmp_path (taken down as a dead mount would be), the
ReplicaManager, and the ListOffsets handler with real kio request and response classes."""

from __future__ import annotations

import asyncio
import inspect
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_request_schema

from tierlog.records.default_records import build_batch
from tierlog.server.handlers.list_offsets import handle_list_offsets

from .tiered_parts import TOPIC, TieredPartition, tiered_partition

LOCAL = "local"
KAFKA_STORAGE_ERROR = 56
VERSION = 8  # -4 EARLIEST_LOCAL and up


def _list_offsets(t: TieredPartition, wanted: list[tuple[str, int]]) -> list[tuple[int, int, int]]:
    """One ListOffsets request for ``(topic, timestamp)`` (partition 0 of each), through the
    handler; per entry (error code, offset, timestamp), in order."""
    cls = load_request_schema(2, VERSION)
    m = __import__(cls.__module__, fromlist=["x"])
    request = cls(
        replica_id=-1,
        isolation_level=0,
        topics=tuple(
            m.ListOffsetsTopic(
                name=name, partitions=(m.ListOffsetsPartition(partition_index=0, timestamp=ts),)
            )
            for name, ts in wanted
        ),
    )
    apis = SimpleNamespace(replica_manager=t.rm)
    ev = SimpleNamespace(api_key=2, api_version=VERSION, request=request)
    response: Any = handle_list_offsets(apis, ev)  # type: ignore[arg-type]
    if inspect.iscoroutine(response):
        response = asyncio.run(response)
    out = []
    for topic in response.topics:
        (p,) = topic.partitions
        out.append((p.error_code, p.offset, p.timestamp))
    return out


def test_remote_timestamp_search_failure_is_a_storage_error_for_that_partition_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tierlog.server.handlers.list_offsets")
    with tiered_partition(tmp_path) as t:
        t.lm.create_topic(LOCAL, 1, {})
        local = t.lm.get_log(LOCAL, 0)
        assert local is not None
        local.append(build_batch([(t.t0 + 5, b"k", b"v")] * 3), leader_epoch=0)
        local.update_high_watermark(local.log_end_offset)
        # Batch 5 (offsets 10, 11; timestamp t0 + 5) is only in remote storage.
        assert t.lg.local_log_start_offset > 11
        wanted = [(TOPIC, t.t0 + 5), (LOCAL, t.t0 + 5), (TOPIC, -2), (TOPIC, -4)]
        served = [(0, 0, t.t0 + 5), (0, 0, -1), (0, t.lg.local_log_start_offset, -1)]
        failed = (KAFKA_STORAGE_ERROR, -1, -1)
        right = (0, 10, t.t0 + 5)

        t.store_down()  # a cold index cache: fetching the indexes fails
        assert _list_offsets(t, wanted) == [failed, *served]
        assert "fetch indexes" in caplog.text
        t.store_up()
        assert _list_offsets(t, wanted) == [right, *served]
        caplog.clear()
        t.store_down()  # the indexes are cached now: reading the segment fails
        assert _list_offsets(t, wanted) == [failed, *served]
        assert "fetch segment" in caplog.text and "fetch indexes" not in caplog.text
        t.store_up()
        assert _list_offsets(t, wanted) == [right, *served]
