"""AlterReplicaLogDirs (API 34): move replicas between the log dirs of this broker
(:mod:`tierlog.server.replica_alter_log_dirs`); DescribeLogDirs (API 35): each log dir and the
replicas in it (Kafka's ``ReplicaManager.describeLogDirs``).

AlterReplicaLogDirs needs ALTER on the cluster (else every partition answers
CLUSTER_AUTHORIZATION_FAILED). Per partition, as Kafka: LOG_DIR_NOT_FOUND (57) for a path not
in ``log.dirs``, KAFKA_STORAGE_ERROR (56) when that dir (or any dir) is offline,
REPLICA_NOT_AVAILABLE (9) for a partition of the cluster this broker does not host (the dir
is remembered: a replica a reassignment creates here later goes there, Kafka's preferred log
dir),
UNKNOWN_TOPIC_OR_PARTITION (3) for one that does not exist; NONE once the move started (it
goes on in the background; DescribeLogDirs shows its future replica until it is done).

Per log dir: its absolute path, an error (KAFKA_STORAGE_ERROR when the dir is offline), the
volume's total and usable bytes (v4+), and per partition the local size in bytes, the offset
lag (log end offset minus high watermark) and ``is_future_key``: a partition moving to another
log dir (AlterReplicaLogDirs) is also listed in the target dir, ``is_future_key`` true, its lag
the future replica's distance to the current one's log end offset. As in Kafka the size is the
local log's only: Kafka's schema has no field for the remote tier, so how much of a partition
is in remote storage is not here -- ``tierlog remote`` and the
``kafka_server_BrokerTopicMetrics_RemoteLogSizeBytes`` gauge report it.

``topics`` null asks for every partition; a named topic with no partitions listed gets none
(as Kafka). Opening logs and statting the volume is blocking I/O: it runs in a thread.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlog.errors import KafkaStorageError
from tierlog.security.acl_checks import CLUSTER_AUTHORIZATION_FAILED, cluster_error
from tierlog.security.authorizer import AclOperation
from tierlog.server.handlers._build import build
from tierlog.server.kafka_apis import response_class

if TYPE_CHECKING:
    from tierlog.log.log_manager import LogManager
    from tierlog.server.kafka_apis import KafkaApis, Request

__all__ = ["handle_alter_replica_log_dirs", "handle_describe_log_dirs"]

ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35


def handle_alter_replica_log_dirs(apis: KafkaApis, ev: Request) -> Any:
    cls = response_class(ALTER_REPLICA_LOG_DIRS, ev.api_version)
    wanted = [
        (str(d.path), str(t.name), int(p))
        for d in ev.request.dirs
        for t in d.topics
        for p in t.partitions
    ]
    denied = cluster_error(apis, AclOperation.ALTER) == CLUSTER_AUTHORIZATION_FAILED
    mover = apis.replica_manager.alter_log_dirs_manager

    async def respond() -> Any:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for path, topic, partition in wanted:
            if denied:
                code = CLUSTER_AUTHORIZATION_FAILED
            elif mover is None:
                code = KafkaStorageError.error_code  # the broker is still starting
            else:
                code = await mover.alter(topic, partition, path)
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": code}
            )
        results = [{"topic_name": n, "partitions": ps} for n, ps in by_topic.items()]
        return build(cls, {"throttle_time": 0, "results": results})

    return respond()


def handle_describe_log_dirs(apis: KafkaApis, ev: Request) -> Any:
    wanted: dict[str, set[int]] | None = None
    if ev.request.topics is not None:
        wanted = {}
        for t in ev.request.topics:
            wanted.setdefault(str(t.topic), set()).update(int(p) for p in t.partitions)
    lm = apis.log_manager
    cls = response_class(DESCRIBE_LOG_DIRS, ev.api_version)

    async def respond() -> Any:
        results = await asyncio.to_thread(describe_log_dirs, lm, wanted)
        return build(cls, {"throttle_time": 0, "error_code": 0, "results": results})

    return respond()


def describe_log_dirs(lm: LogManager, wanted: dict[str, set[int]] | None) -> list[dict[str, Any]]:
    """The ``results`` of a DescribeLogDirs response, as plain values (blocking)."""
    offline = lm.offline_log_dirs
    by_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {d: {} for d in lm.log_dirs}
    for name, info in sorted(lm.topics().items()):
        if wanted is not None and name not in wanted:
            continue
        parts: Iterable[int] = (
            range(info.num_partitions) if wanted is None else sorted(wanted[name])
        )
        for index in parts:
            if not info.hosts(index):
                continue
            try:
                lg = lm.get_log(name, index)
            except KafkaStorageError:
                continue  # its dir is offline: reported as such below
            if lg is None:
                continue
            d = lg.dir.parent
            by_dir.setdefault(d, {}).setdefault(name, []).append(
                {
                    "partition_index": index,
                    "partition_size": lg.size_in_bytes,
                    "offset_lag": max(lg.log_end_offset - lg.high_watermark, 0),
                    "is_future_key": False,
                }
            )
            future = lm.future_logs.get(name, index)
            if future is not None:
                by_dir.setdefault(future.dir.parent, {}).setdefault(name, []).append(
                    {
                        "partition_index": index,
                        "partition_size": future.size_in_bytes,
                        # Kafka: how far the future replica is behind the current one.
                        "offset_lag": max(lg.log_end_offset - future.log_end_offset, 0),
                        "is_future_key": True,
                    }
                )
    results = []
    for d, topics in by_dir.items():
        if d in offline:
            results.append(
                {"error_code": KafkaStorageError.error_code, "log_dir": str(d), "topics": []}
            )
            continue
        try:
            usage = shutil.disk_usage(d)
            total, usable = usage.total, usage.free
        except OSError:
            total = usable = -1
        results.append(
            {
                "error_code": 0,
                "log_dir": str(d.absolute()),
                "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    return results
