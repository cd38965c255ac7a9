"""A tiered partition on disk for the broker's remote paths without a broker process: a
LogManager with a topic whose older segments are copied to a ``file://`` remote store under
tmp_path and deleted locally, a RemoteLogManager over them (no scheduler: nothing runs in the
background) and a ReplicaManager over both."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.log.log_manager import LogManager
from tierlog.records.default_records import build_batch
from tierlog.server.replica_manager import ReplicaManager
from tierlog.tiered import InMemoryRemoteLogMetadataManager, TopicIdPartition
from tierlog.tiered.remote_index_cache import RemoteIndexCache
from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig
from tierlog.tiered.storage import PyArrowRemoteStorageManager

TOPIC = "orders"
BATCHES = 40  # of 2 records each (offsets 2i, 2i + 1, both with timestamp t0 + i)


@dataclass
class TieredPartition:
    lm: LogManager
    lg: Log
    tp: TopicIdPartition
    rsm: PyArrowRemoteStorageManager
    rlm: RemoteLogManager
    rm: ReplicaManager
    remote_dir: Path
    #: the timestamp of the first batch (wall clock: local retention by time never applies)
    t0: int

    def store_down(self) -> None:
        """The remote store fails every read, write and delete (as a dead mount: its root
        becomes a plain file, the data parked aside)."""
        self.remote_dir.rename(self._parked)
        self.remote_dir.write_bytes(b"remote storage is down\n")

    def store_up(self) -> None:
        self.remote_dir.unlink()
        self._parked.rename(self.remote_dir)

    @property
    def _parked(self) -> Path:
        return self.remote_dir.with_name(self.remote_dir.name + ".down")


@contextmanager
def tiered_partition(
    tmp_path: Path,
    *,
    rsm_class: Callable[[str], PyArrowRemoteStorageManager] = PyArrowRemoteStorageManager,
    rlm_config: RemoteLogManagerConfig | None = None,
) -> Iterator[TieredPartition]:
    """Partition 0 of :data:`TOPIC`: :data:`BATCHES` batches in 1 KiB segments, all but the
    last segments remote only (log start 0 < local log start)."""
    lm = LogManager([tmp_path / "logs"], LogConfig(), remote_log_storage_system_enable=True)
    lm.startup()
    info = lm.create_topic(
        TOPIC,
        1,
        {"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1"},
    )
    lg = lm.get_log(TOPIC, 0)
    assert lg is not None
    t0 = int(time.time() * 1000)
    for i in range(BATCHES):
        lg.append(build_batch([(t0 + i, b"k", b"%03d" % i * 30)] * 2), leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)
    tp = TopicIdPartition(info.topic_id, TOPIC, 0)
    remote_dir = tmp_path / "remote"
    rsm = rsm_class(remote_dir.as_uri())
    rlm = RemoteLogManager(
        rlm_config or RemoteLogManagerConfig(),
        rsm,
        InMemoryRemoteLogMetadataManager(),
        RemoteIndexCache(rsm, tmp_path / "index-cache", 1 << 20),
        lambda t: lm.get_log(t.topic, t.partition),
        broker_id=0,
        start_scheduler=False,
    )
    rm = ReplicaManager(lm, remote_log_manager=rlm)
    try:
        rlm.on_leadership_change({tp}, set())
        rlm.run_copy(tp)
        lg.delete_old_segments()
        assert lg.log_start_offset == 0 and lg.local_log_start_offset > BATCHES  # mostly remote
        yield TieredPartition(lm, lg, tp, rsm, rlm, rm, remote_dir, t0)
    finally:
        rm.wake_all()
        rlm.close()
        lm.shutdown()
