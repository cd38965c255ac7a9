"""A small world for remote log manager tests: real Logs in a tmp dir, a file:// pyarrow
RemoteStorageManager behind the recording double, an in-memory metadata manager, a remote
index cache and a RemoteLogManager without its scheduler (tests drive the tasks)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.records.default_records import build_batch
from tierlog.records.record_batch import iter_headers
from tierlog.tiered import (
    InMemoryRemoteLogMetadataManager,
    RemoteLogMetadataManager,
    TopicIdPartition,
)
from tierlog.tiered.remote_index_cache import DIR_NAME, RemoteIndexCache
from tierlog.tiered.remote_log_manager import (
    RemoteLogManager,
    RemoteLogManagerConfig,
    RemoteStorageFetchInfo,
)
from tierlog.tiered.storage import (
    PyArrowRemoteStorageManager,
    RecordingRemoteStorageManager,
    RemoteStorageManager,
)

#: 2024-01-01T00:00:00Z
T0 = 1_704_067_200_000
HOUR = 3_600_000
TOPIC_ID = uuid.UUID("2d6c8e4a-51a5-4d55-9a3c-0f3a6f1c9b11")


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def config(**overrides: Any) -> LogConfig:
    """Topic config with remote storage on; keys with underscores for dots."""
    values: dict[str, Any] = {
        "segment.bytes": 1024,
        "remote.storage.enable": True,
        "message.timestamp.after.max.ms": 10**12,
        "message.timestamp.before.max.ms": 10**13,
    }
    values.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig().with_overrides(values)


class World:
    """Logs + remote storage + RemoteLogManager for one broker."""

    def __init__(
        self,
        root: Path,
        *,
        partitions: int = 1,
        topic_config: LogConfig | None = None,
        rlm_config: RemoteLogManagerConfig | None = None,
        rsm: RemoteStorageManager | None = None,
        rlmm: RemoteLogMetadataManager | None = None,
        clock: Clock | None = None,
        cache_bytes: int = 1 << 20,
        start_scheduler: bool = False,
        logs: dict[TopicIdPartition, Log] | None = None,
    ) -> None:
        self.root = root
        self.clock = clock or Clock()
        self.log_dir = root / "logs"
        self.remote_dir = root / "remote"
        self.topic_config = topic_config or config()
        if logs is None:
            logs = {}
            for p in range(partitions):
                tp = TopicIdPartition(TOPIC_ID, "orders", p)
                logs[tp] = Log.open(
                    self.log_dir / f"orders-{p}",
                    self.topic_config,
                    topic_id=TOPIC_ID,
                    time_ms=self.clock,
                )
        self.logs = logs
        self.tps = list(logs)
        self.tp = self.tps[0]
        self.base_rsm = rsm or PyArrowRemoteStorageManager(f"file://{self.remote_dir}")
        self.rsm = RecordingRemoteStorageManager(self.base_rsm)
        self.rlmm = rlmm or InMemoryRemoteLogMetadataManager()
        self.cache = RemoteIndexCache(self.rsm, self.log_dir / DIR_NAME, cache_bytes)
        self.rlm = RemoteLogManager(
            rlm_config or RemoteLogManagerConfig(),
            self.rsm,
            self.rlmm,
            self.cache,
            self.logs.get,
            broker_id=1,
            time_ms=self.clock,
            start_scheduler=start_scheduler,
        )
        self.rlm.on_leadership_change(set(self.tps), set())

    @property
    def log(self) -> Log:
        return self.logs[self.tp]

    # ------------------------------------------------------------------ data

    def produce(
        self,
        n_batches: int,
        *,
        tp: TopicIdPartition | None = None,
        records: int = 3,
        value_size: int = 40,
        ts: Callable[[int], int] | None = None,
        leader_epoch: int = 0,
    ) -> None:
        """Append ``n_batches`` batches; batch i gets timestamps ``ts(i)`` (default T0 + i)."""
        lg = self.logs[tp or self.tp]
        for i in range(n_batches):
            t = ts(i) if ts is not None else T0 + i
            batch = build_batch(
                [(t + j, b"k", bytes([65 + (i + j) % 26]) * value_size) for j in range(records)]
            )
            lg.append(batch, leader_epoch=leader_epoch)
        lg.update_high_watermark(lg.log_end_offset)

    def fill_segments(self, n: int, tp: TopicIdPartition | None = None, **kw: Any) -> None:
        """Produce until the log has ``n`` segments (the last one non-empty)."""
        lg = self.logs[tp or self.tp]
        i = 0
        while lg.number_of_segments < n or lg.active_segment.size == 0:
            self.produce(1, tp=tp, ts=lambda _j, i=i: T0 + i * 10, **kw)
            i += 1

    def local_bytes(self, tp: TopicIdPartition | None = None) -> bytes:
        """Every complete batch of the local log, from its first local offset."""
        lg = self.logs[tp or self.tp]
        out = bytearray()
        offset = lg.local_log_start_offset
        while offset < lg.log_end_offset:
            info = lg.read(offset, 1 << 20)
            headers = list(iter_headers(info.records))
            if not headers:
                break
            out += info.records[: headers[-1].position + headers[-1].size_in_bytes]
            offset = headers[-1].next_offset
        return bytes(out)

    def remote_bytes(
        self, start: int, end: int, tp: TopicIdPartition | None = None, max_bytes: int = 4096
    ) -> bytes:
        """Complete batches read through the RemoteLogManager from ``start`` up to ``end``."""
        tp = tp or self.tp
        out = bytearray()
        offset = start
        while offset < end:
            info = self.rlm.read(RemoteStorageFetchInfo(tp, offset, max_bytes, True))
            headers = list(iter_headers(info.records))
            assert headers, f"no complete batch at {offset}"
            out += info.records[: headers[-1].position + headers[-1].size_in_bytes]
            offset = headers[-1].next_offset
        return bytes(out)

    def copy_all(self) -> None:
        for tp in self.tps:
            self.rlm.run_copy(tp)

    def close(self) -> None:
        self.rlm.close()
        for lg in self.logs.values():
            lg.close()
