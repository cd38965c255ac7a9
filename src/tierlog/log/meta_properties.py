"""Kafka's ``meta.properties``: which node and cluster a log dir belongs to (Kafka's
``MetaProperties``, read and written as its ``BrokerMetadataCheckpoint`` does).

One per log dir, written atomically (Kafka's ``key=value`` properties format)::

    #
    #Written by tierlog
    cluster.id=<Kafka base64 id>
    directory.id=<Kafka base64 id>
    node.id=0
    version=1

Version 0 files (``broker.id`` instead of ``node.id``, no ``directory.id``) are read and
rewritten as version 1. Every log dir of a node must name the same cluster and that node;
each gets its own directory id.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tierlog.errors import InconsistentLogDirError, KafkaStorageError
from tierlog.log import log_file_utils as lfu
from tierlog.log.partition_metadata_file import (
    kafka_str_to_uuid,
    random_kafka_uuid,
    uuid_to_kafka_str,
)

__all__ = [
    "META_PROPERTIES_FILENAME",
    "check_meta_properties",
    "new_cluster_id",
    "stored_cluster_id",
]

META_PROPERTIES_FILENAME = "meta.properties"


def new_cluster_id() -> str:
    """A new cluster id: a random UUID in Kafka's base64 form (``kafka-storage random-uuid``)."""
    return uuid_to_kafka_str(random_kafka_uuid())


def stored_cluster_id(log_dirs: Iterable[Path]) -> str | None:
    """The cluster id in the first readable ``meta.properties`` of ``log_dirs``, if any (a
    broker proposes it when it finds no cluster in ZooKeeper)."""
    for d in log_dirs:
        try:
            props = _parse_simple_properties((Path(d) / META_PROPERTIES_FILENAME).read_text())
        except OSError:
            continue
        if props.get("cluster.id"):
            return props["cluster.id"]
    return None


def check_meta_properties(
    log_dirs: Sequence[Path],
    *,
    node_id: int,
    cluster_id: str | None,
    storage_error: Callable[[OSError, Path, str], KafkaStorageError],
) -> tuple[str, dict[Path, uuid.UUID]]:
    """Check the ``meta.properties`` of every log dir against this node and cluster, and
    write those missing or not in the current form.

    Args:
        log_dirs: the log dirs, which exist.
        node_id: this node's id, which each stored ``node.id`` (``broker.id``) must match.
        cluster_id: the expected cluster id; None adopts the stored one or generates one.
        storage_error: wraps an I/O error on a path (the LogManager's ``_storage_error``).

    Returns:
        The cluster id, and each log dir's ``directory.id`` (kept, or a new one when missing
        or the same as another dir's).

    Raises:
        KafkaStorageError: a file cannot be read or written.
        InconsistentLogDirError: a dir belongs to another node or cluster, or its file has an
            unknown version or a bad directory id.
    """
    stored: dict[Path, dict[str, str]] = {}
    for d in log_dirs:
        path = d / META_PROPERTIES_FILENAME
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            continue
        except OSError as e:
            raise storage_error(e, path, "read") from e
        stored[d] = _parse_simple_properties(text)
    cluster_ids = {p["cluster.id"] for p in stored.values() if p.get("cluster.id")}
    if cluster_id is not None:
        cluster_ids.add(cluster_id)
    if len(cluster_ids) > 1:
        raise InconsistentLogDirError(
            f"the log dirs belong to different clusters: {', '.join(sorted(cluster_ids))}"
        )
    cluster_id = cluster_ids.pop() if cluster_ids else new_cluster_id()
    directory_ids: dict[Path, uuid.UUID] = {}
    seen_dir_ids: set[uuid.UUID] = set()
    for d in log_dirs:
        props = stored.get(d, {})
        path = d / META_PROPERTIES_FILENAME
        version = props.get("version", "1")
        if version not in ("0", "1"):
            raise InconsistentLogDirError(f"{path}: unknown meta.properties version {version}")
        node = props.get("node.id", props.get("broker.id"))
        if node is not None and node.strip() != str(node_id):
            raise InconsistentLogDirError(
                f"{path}: stored node id {node} does not match this node's id {node_id} (node.id)"
            )
        dir_id: uuid.UUID | None = None
        if props.get("directory.id"):
            try:
                dir_id = kafka_str_to_uuid(props["directory.id"])
            except ValueError as e:
                raise InconsistentLogDirError(f"{path}: bad directory.id: {e}") from None
        if dir_id is None or dir_id in seen_dir_ids:
            dir_id = random_kafka_uuid()
        seen_dir_ids.add(dir_id)
        directory_ids[d] = dir_id
        wanted = {
            "cluster.id": cluster_id,
            "directory.id": uuid_to_kafka_str(dir_id),
            "node.id": str(node_id),
            "version": "1",
        }
        if props != wanted:
            body = "#\n#Written by tierlog\n" + "".join(f"{k}={v}\n" for k, v in wanted.items())
            try:
                lfu.write_atomically(path, body.encode())
            except OSError as e:
                raise storage_error(e, path, "write") from e
    return cluster_id, directory_ids


def _parse_simple_properties(text: str) -> dict[str, str]:
    """``key=value`` lines of a meta.properties file (comments skipped)."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props
