"""``tierlog remote ls|verify``: what a topic has in remote storage, and whether it is intact.

::

    tierlog remote ls orders            # every partition's remote segments
    tierlog remote ls orders-3          # partition 3 only
    tierlog remote ls orders --all      # with DELETE_SEGMENT_FINISHED segments
    tierlog remote verify orders        # exit 1 when an object is missing or wrong

Both read the broker's files and the remote store directly, like Kafka's
``kafka-dump-log``, with the broker's own configuration (``--config server.properties``,
``--override key=value``, as ``tierlog serve``): the log dirs hold the topic registry and the
``__remote_log_metadata`` partitions, whose events are replayed (they are the truth; the
metadata cache files may lag), and ``rsm.config.*`` locates the remote store. Nothing is
written, so they work while the broker runs (a half-written last event is ignored) and after
it crashed. Run them from the broker's working directory when its config uses relative paths
(the default ``./data/logs`` and ``./data/remote``).

``ls`` prints per partition its deletion state and per segment: offsets, size, state, leader
epochs (``epoch:start offset``), max timestamp, and where its two objects live.

``verify`` checks every COPY_SEGMENT_FINISHED segment: its ``.indexes`` object exists and
parses with every table-of-contents and section CRC-32C right (leader-epoch and offset index
sections included), its ``.log`` object exists and has the size the metadata says (for a
zstd-chunked object: the chunk index's original size, and the compressed length the chunk
index implies). Objects under the topic's prefix that belong to no live segment are reported
as orphans (leaks). Exit code 0 when everything is intact, 1 when anything is missing, wrong
or orphaned, 2 on bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tierlog.server.kafka_config import KafkaConfig
    from tierlog.tiered.remote_log_segment_metadata import (
        RemoteLogSegmentMetadata,
        TopicIdPartition,
    )
    from tierlog.tiered.storage.pyarrow_remote_storage_manager import (
        PyArrowRemoteStorageManager,
    )

    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["PartitionHistory", "add_subcommands", "load_histories", "main_ls", "main_verify"]


# --------------------------------------------------------------------------- arguments


def add_subcommands(sub: SubParsers) -> None:
    """Register ``remote ls`` and ``remote verify``."""
    p = sub.add_parser(
        "remote",
        help="inspect and check a topic's remote (tiered) storage",
        description="Read the broker's log dirs and remote storage (no broker connection), "
        "or with --bootstrap-server the remote log metadata of a running broker or cluster.",
    )
    rsub = p.add_subparsers(dest="remote_command", required=True, metavar="COMMAND")
    ls = rsub.add_parser("ls", help="list a topic's remote segments")
    ls.add_argument("target", metavar="TOPIC[-PARTITION]", help="a topic, or one partition of it")
    ls.add_argument("--all", action="store_true", help="include deleted segments")
    ls.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    _common(ls)
    ls.set_defaults(run=_run_ls)
    verify = rsub.add_parser("verify", help="check that a topic's remote objects are intact")
    verify.add_argument(
        "target", metavar="TOPIC[-PARTITION]", help="a topic, or one partition of it"
    )
    _common(verify)
    verify.set_defaults(run=_run_verify)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", type=Path, metavar="FILE", help="the broker's properties")
    p.add_argument(
        "--bootstrap-server",
        "-b",
        metavar="HOST:PORT[,...]",
        help="read the topic and __remote_log_metadata over the Kafka protocol from a running "
        "broker or cluster instead of the log dirs (the remote store still comes from "
        "--config/--override rsm.config.*)",
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker config as given to `tierlog serve` (repeatable)",
    )


def _load_config(args: argparse.Namespace) -> KafkaConfig:
    from tierlog.server.kafka_config import KafkaConfig

    return KafkaConfig.from_file(args.config, args.override)


def _run_ls(args: argparse.Namespace) -> int:
    try:
        return main_ls(args, sys.stdout, sys.stderr)
    except BrokenPipeError:  # `tierlog remote ls ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _run_verify(args: argparse.Namespace) -> int:
    return main_verify(args, sys.stdout, sys.stderr)


# --------------------------------------------------------------------------- metadata replay


@dataclass
class PartitionHistory:
    """Everything ``__remote_log_metadata`` says about one user partition."""

    tp: TopicIdPartition
    #: Every segment, latest state, in first-seen order.
    segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)
    #: The latest RemotePartitionDeleteState name, or None.
    delete_state: str | None = None


def _registry(log_dirs: Iterable[Path]) -> dict[str, tuple[uuid.UUID, int]]:
    """``{topic: (topic id, partitions)}`` from the newest topic registry copy."""
    from tierlog.log.partition_metadata_file import kafka_str_to_uuid
    from tierlog.log.topic_registry import TOPIC_REGISTRY_FILENAME

    best: dict[str, Any] | None = None
    for d in log_dirs:
        try:
            doc = json.loads((d / TOPIC_REGISTRY_FILENAME).read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and (best is None or doc.get("epoch", 0) > best.get("epoch", 0)):
            best = doc
    out: dict[str, tuple[uuid.UUID, int]] = {}
    for name, t in (best or {}).get("topics", {}).items():
        try:
            out[name] = (kafka_str_to_uuid(t["topic_id"]), int(t["partitions"]))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _metadata_values(log_dirs: Iterable[Path]) -> Iterator[bytes]:
    """Every event value of ``__remote_log_metadata``, in order per partition, read-only."""
    from tierlog.records.default_records import iter_records
    from tierlog.tiered.remote_log_metadata_manager import REMOTE_LOG_METADATA_TOPIC_NAME

    prefix = REMOTE_LOG_METADATA_TOPIC_NAME + "-"
    for d in log_dirs:
        if not d.is_dir():
            continue
        for pdir in sorted(d.iterdir()):
            if not (pdir.is_dir() and pdir.name.startswith(prefix)):
                continue
            if not pdir.name[len(prefix) :].isdigit():
                continue  # e.g. a -delete dir
            next_offset = 0
            for segment in sorted(pdir.glob("*.log")):
                data = segment.read_bytes()
                for header, records in iter_records(data, check_crc=False):
                    for r in records:
                        if r.offset >= next_offset and r.value is not None:
                            yield bytes(r.value)
                    next_offset = max(next_offset, header.last_offset + 1)


def _wire_metadata(
    bootstrap: str, topic: str
) -> tuple[dict[str, tuple[uuid.UUID, int]], list[bytes]]:
    """``({topic: (topic id, partitions)}, every __remote_log_metadata event value)`` read
    from a running broker or cluster: Metadata, then Fetch of each metadata partition from
    its log start to its high watermark (committed events only), through its leader."""
    from tierlog.records.default_records import iter_records
    from tierlog.spark.fetch_client import EARLIEST_TIMESTAMP, READ_UNCOMMITTED, KafkaClient
    from tierlog.tiered.remote_log_metadata_manager import REMOTE_LOG_METADATA_TOPIC_NAME

    name = REMOTE_LOG_METADATA_TOPIC_NAME
    values: list[bytes] = []
    with KafkaClient(bootstrap, client_id="tierlog-remote-cli") as client:
        topics = client.metadata([topic, name])
        registry = {
            t.name: (t.topic_id, len(t.partitions))
            for t in topics.values()
            if t.name == topic and t.topic_id is not None
        }
        meta = topics.get(name)
        for part in meta.partitions if meta is not None else ():
            tp = (name, part.partition)
            pos = client.list_offsets({tp: EARLIEST_TIMESTAMP}, isolation_level=READ_UNCOMMITTED)[
                tp
            ][0]
            while True:
                fetched = client.fetch(
                    name, part.partition, pos, max_wait_ms=0, isolation_level=READ_UNCOMMITTED
                )
                nxt = pos
                for header, records in iter_records(fetched.records):
                    nxt = max(nxt, header.last_offset + 1)
                    values += [bytes(r.value) for r in records if r.offset >= pos and r.value]
                if nxt == pos or nxt >= fetched.high_watermark:
                    break
                pos = nxt
    return registry, values


def load_histories(
    log_dirs: Iterable[Path], topic: str, values: Iterable[bytes] | None = None
) -> dict[TopicIdPartition, PartitionHistory]:
    """Replay the metadata events of ``topic`` (every topic id it ever had), from the log
    dirs' ``__remote_log_metadata`` or from ``values``."""
    from tierlog.errors import CorruptMetadataError
    from tierlog.tiered import metadata_serde
    from tierlog.tiered.remote_log_segment_metadata import (
        RemoteLogSegmentMetadata,
        RemoteLogSegmentMetadataUpdate,
        RemotePartitionDeleteMetadata,
    )

    out: dict[TopicIdPartition, PartitionHistory] = {}
    for value in _metadata_values(list(log_dirs)) if values is None else values:
        try:
            tp = metadata_serde.peek_topic_id_partition(value)
            if tp is None or tp.topic != topic:
                continue
            event = metadata_serde.deserialize(value)
        except (CorruptMetadataError, ValueError):
            continue
        h = out.setdefault(tp, PartitionHistory(tp))
        if isinstance(event, RemoteLogSegmentMetadata):
            h.segments[event.remote_log_segment_id.id] = event
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            md = h.segments.get(event.remote_log_segment_id.id)
            if md is not None:
                h.segments[event.remote_log_segment_id.id] = md.create_with_updates(event)
        elif isinstance(event, RemotePartitionDeleteMetadata):
            h.delete_state = event.state.name
    return out


@dataclass
class _Context:
    config: KafkaConfig
    rsm: PyArrowRemoteStorageManager
    histories: list[PartitionHistory]
    current_id: uuid.UUID | None


def _context(args: argparse.Namespace, err: TextIO, *, reads_store: bool) -> _Context | int:
    """Config, remote storage and the selected partitions' histories, or an exit code.
    ``reads_store``: a missing local store is an error when there are segments to check
    (verify), else a note (ls, or nothing tiered yet)."""
    from tierlog.errors import ConfigError
    from tierlog.server.tiered_storage import default_rsm_config
    from tierlog.tiered.storage.pyarrow_remote_storage_manager import (
        PyArrowRemoteStorageManager,
    )

    try:
        config = _load_config(args)
        rsm = PyArrowRemoteStorageManager.from_config(
            default_rsm_config(config.rsm_config), create_root=False
        )
    except ConfigError as e:
        print(f"tierlog remote: config error: {e}", file=err)
        return 2
    bootstrap = getattr(args, "bootstrap_server", None)
    log_dirs = [] if bootstrap else [Path(d).resolve() for d in config.log_dirs]
    unset = "rsm.config.uri" not in {f"rsm.config.{k}" for k in config.rsm_config}
    how = (
        " (rsm.config.uri unset: the default ./data/remote of the current directory)"
        if unset
        else ""
    )
    where = f"broker {bootstrap}" if bootstrap else f"log dirs {', '.join(map(str, log_dirs))}"
    print(f"tierlog remote: reading {where} and remote storage {rsm.uri}{how}", file=err)
    missing_dirs = [d for d in log_dirs if not d.is_dir()]
    if missing_dirs:
        print(
            f"tierlog remote: log dir {missing_dirs[0]} does not exist; give the broker's "
            "--config or --override log.dirs=..., or run from its working directory",
            file=err,
        )
        return 2
    store_missing = rsm.is_local and not Path(rsm.root).is_dir()
    target: str = args.target
    topic, partition = target, None
    wire_values: list[bytes] | None = None
    if bootstrap:
        from tierlog.errors import ApiError

        try:
            registry, wire_values = _wire_metadata(bootstrap, target)
            if target not in registry:
                head, sep, tail = target.rpartition("-")
                if sep and tail.isdigit():
                    topic, partition = head, int(tail)
                    registry, wire_values = _wire_metadata(bootstrap, head)
        except (ApiError, OSError) as e:
            print(f"tierlog remote: cannot read from {bootstrap}: {e}", file=err)
            return 3
    else:
        registry = _registry(log_dirs)
        if target not in registry:
            head, sep, tail = target.rpartition("-")
            if sep and tail.isdigit() and (head in registry or _seen(log_dirs, head)):
                topic, partition = head, int(tail)
    histories = load_histories(log_dirs, topic, wire_values)
    current = registry.get(topic)
    if not histories and current is None:
        print(f"tierlog remote: unknown topic {topic}", file=err)
        return 2
    if current is not None:  # partitions without any event yet are listed too
        from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition

        for p in range(current[1]):
            tp = TopicIdPartition(current[0], topic, p)
            histories.setdefault(tp, PartitionHistory(tp))
    current_id = current[0] if current is not None else None

    def order(tp: TopicIdPartition) -> tuple[bool, str, int]:
        return tp.topic_id != current_id, str(tp.topic_id), tp.partition  # current id first

    selected = [
        histories[tp]
        for tp in sorted(histories, key=order)
        if partition is None or tp.partition == partition
    ]
    if store_missing:
        # verify needs the store once there is a segment to check; ls only names objects.
        refuse = reads_store and any(h.segments for h in selected)
        print(
            f"tierlog remote: remote storage {rsm.uri} does not exist; "
            + (
                "set rsm.config.uri (--config or --override rsm.config.uri=file:///...)"
                if unset
                else "is rsm.config.uri right?"
            )
            + ("" if refuse else " (listing the metadata only)"),
            file=err,
        )
        if refuse:
            return 2
    return _Context(config, rsm, selected, current_id)


def _seen(log_dirs: list[Path], topic: str) -> bool:
    return bool(load_histories(log_dirs, topic))


# --------------------------------------------------------------------------- ls


def _uri(rsm: PyArrowRemoteStorageManager, md: RemoteLogSegmentMetadata, suffix: str) -> str:
    from urllib.parse import urlparse

    scheme = urlparse(rsm.uri).scheme or "file"
    path = rsm.object_path(md, suffix)
    return f"{scheme}://{path}" if scheme != "file" else Path(path).as_uri()


def _segment_row(rsm: PyArrowRemoteStorageManager, md: RemoteLogSegmentMetadata) -> dict[str, Any]:
    from tierlog.tiered.remote_log_segment_metadata import kafka_uuid_str
    from tierlog.tiered.storage.segment_objects import INDEXES_SUFFIX, LOG_SUFFIX

    return {
        "segment_id": kafka_uuid_str(md.remote_log_segment_id.id),
        "start_offset": md.start_offset,
        "end_offset": md.end_offset,
        "size": md.segment_size_in_bytes,
        "state": md.state.name,
        "leader_epochs": {str(e): o for e, o in md.segment_leader_epochs.items()},
        "max_timestamp_ms": md.max_timestamp_ms,
        "broker_id": md.broker_id,
        "log_object": _uri(rsm, md, LOG_SUFFIX),
        "indexes_object": _uri(rsm, md, INDEXES_SUFFIX),
    }


def _iso(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def main_ls(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tierlog.tiered.remote_log_segment_metadata import kafka_uuid_str
    from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState

    ctx = _context(args, err, reads_store=False)
    if isinstance(ctx, int):
        return ctx
    doc: list[dict[str, Any]] = []
    for h in ctx.histories:
        segments = sorted(h.segments.values(), key=lambda m: (m.start_offset, m.event_timestamp_ms))
        if not args.all:
            segments = [
                m for m in segments if m.state != RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
            ]
        finished = [m for m in segments if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        doc.append(
            {
                "topic": h.tp.topic,
                "topic_id": kafka_uuid_str(h.tp.topic_id),
                "partition": h.tp.partition,
                "current": h.tp.topic_id == ctx.current_id,
                "delete_state": h.delete_state,
                "remote_bytes": sum(m.segment_size_in_bytes for m in finished),
                "segments": [_segment_row(ctx.rsm, m) for m in segments],
            }
        )
    if args.json:
        json.dump(doc, out, indent=1)
        out.write("\n")
        return 0
    for p in doc:
        note = "" if p["current"] else " (deleted topic id)"
        state = f", partition state {p['delete_state']}" if p["delete_state"] else ""
        n_finished = sum(1 for s in p["segments"] if s["state"] == "COPY_SEGMENT_FINISHED")
        out.write(
            f"{p['topic']}-{p['partition']} (topic id {p['topic_id']}){note}: "
            f"{n_finished} finished segments, {p['remote_bytes']} bytes{state}\n"
        )
        if p["segments"]:
            out.write(
                f"  {'START':>12} {'END':>12} {'SIZE':>10}  {'STATE':<22} {'EPOCHS':<10} "
                f"{'MAX TIMESTAMP':<24} OBJECTS\n"
            )
        for s in p["segments"]:
            epochs = ",".join(f"{e}:{o}" for e, o in s["leader_epochs"].items())
            out.write(
                f"  {s['start_offset']:>12} {s['end_offset']:>12} {s['size']:>10}  "
                f"{s['state']:<22} {epochs:<10} {_iso(s['max_timestamp_ms']):<24} "
                f"{s['log_object']} {s['indexes_object']}\n"
            )
    return 0


# --------------------------------------------------------------------------- verify


def _check_segment(
    rsm: PyArrowRemoteStorageManager, md: RemoteLogSegmentMetadata
) -> list[tuple[str, str]]:
    """``(kind, message)`` problems of one COPY_SEGMENT_FINISHED segment."""
    import pyarrow.fs as pafs

    from tierlog.errors import RemoteDecryptionError, RemoteStorageError
    from tierlog.tiered.storage.remote_storage_manager import IndexType
    from tierlog.tiered.storage.segment_objects import INDEXES_SUFFIX, LOG_SUFFIX

    problems: list[tuple[str, str]] = []
    fs = rsm.filesystem
    idx_path, log_path = rsm.object_path(md, INDEXES_SUFFIX), rsm.object_path(md, LOG_SUFFIX)
    chunk_index = None
    try:
        with fs.open_input_stream(idx_path, compression=None) as f:
            data = f.read()
    except FileNotFoundError:
        problems.append(("MISSING", _uri(rsm, md, INDEXES_SUFFIX)))
    except OSError as e:
        problems.append(("UNREADABLE", f"{_uri(rsm, md, INDEXES_SUFFIX)}: {e}"))
    else:
        try:
            obj, _ = rsm.decode_indexes_object(md, data)  # decrypted with the broker's key
            chunk_index = obj.chunk_index
            missing = [
                t.name
                for t in (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.LEADER_EPOCH)
                if t not in obj.indexes
            ]
            if missing:
                problems.append(
                    ("MISMATCH", f"{_uri(rsm, md, INDEXES_SUFFIX)}: no {', '.join(missing)} index")
                )
        except RemoteDecryptionError as e:
            problems.append(("UNDECRYPTABLE", f"{_uri(rsm, md, INDEXES_SUFFIX)}: {e}"))
        except RemoteStorageError as e:
            problems.append(("CORRUPT", f"{_uri(rsm, md, INDEXES_SUFFIX)}: {e}"))
    try:
        info = fs.get_file_info(log_path)
    except OSError as e:
        problems.append(("UNREADABLE", f"{_uri(rsm, md, LOG_SUFFIX)}: {e}"))
        return problems
    if info.type == pafs.FileType.NotFound:
        problems.append(("MISSING", _uri(rsm, md, LOG_SUFFIX)))
    else:
        size = info.size
        if chunk_index is not None:
            expected = int(chunk_index.positions[-1])
            if chunk_index.original_size != md.segment_size_in_bytes:
                problems.append(
                    (
                        "MISMATCH",
                        f"{_uri(rsm, md, LOG_SUFFIX)}: holds {chunk_index.original_size} bytes "
                        f"uncompressed, metadata says {md.segment_size_in_bytes}",
                    )
                )
        else:
            expected = md.segment_size_in_bytes
        if size != expected:
            problems.append(
                (
                    "MISMATCH",
                    f"{_uri(rsm, md, LOG_SUFFIX)}: {size} bytes, expected {expected}",
                )
            )
    return problems


def main_verify(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tierlog.tiered.remote_log_segment_metadata import kafka_uuid_str
    from tierlog.tiered.remote_log_segment_state import RemoteLogSegmentState as S
    from tierlog.tiered.storage.segment_objects import INDEXES_SUFFIX, LOG_SUFFIX
    from tierlog.tools.progress import progress

    ctx = _context(args, err, reads_store=True)
    if isinstance(ctx, int):
        return ctx
    rsm = ctx.rsm
    problems = 0
    checked = 0
    for h in ctx.histories:
        where = f"{h.tp.topic}-{h.tp.partition} ({kafka_uuid_str(h.tp.topic_id)})"
        live: set[str] = set()
        ordered = sorted(h.segments.values(), key=lambda m: m.start_offset)
        for md in progress(ordered, total=len(ordered), desc=where, unit="segment"):
            if md.state in (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED):
                # in progress (or dangling until the broker's next expiration run)
                live.add(rsm.object_path(md, LOG_SUFFIX))
                live.add(rsm.object_path(md, INDEXES_SUFFIX))
                continue
            if md.state != S.COPY_SEGMENT_FINISHED:
                continue
            checked += 1
            live.add(rsm.object_path(md, LOG_SUFFIX))
            live.add(rsm.object_path(md, INDEXES_SUFFIX))
            for kind, message in _check_segment(rsm, md):
                problems += 1
                out.write(
                    f"{kind} {where} segment [{md.start_offset}, {md.end_offset}] "
                    f"{kafka_uuid_str(md.remote_log_segment_id.id)}: {message}\n"
                )
        # Orphans: objects of this partition that no live segment owns.
        sample = next(iter(h.segments.values()), None)
        if sample is not None:
            directory = rsm.object_path(sample, LOG_SUFFIX).rsplit("/", 1)[0]
            for path in _objects_under(rsm, directory):
                if path not in live and path.removesuffix(".tmp") not in live:
                    problems += 1
                    out.write(f"ORPHAN {where}: {_scheme_path(rsm, path)}\n")
    verdict = "OK" if problems == 0 else "FAILED"
    out.write(
        f"{verdict}: {checked} finished segments of {args.target} checked, "
        f"{problems} problem{'s' if problems != 1 else ''}\n"
    )
    return 0 if problems == 0 else 1


def _objects_under(rsm: PyArrowRemoteStorageManager, directory: str) -> list[str]:
    import pyarrow.fs as pafs

    try:
        infos = rsm.filesystem.get_file_info(
            pafs.FileSelector(directory, recursive=True, allow_not_found=True)
        )
    except OSError:
        return []
    return [i.path for i in infos if i.type == pafs.FileType.File]


def _scheme_path(rsm: PyArrowRemoteStorageManager, path: str) -> str:
    from urllib.parse import urlparse

    scheme = urlparse(rsm.uri).scheme or "file"
    return Path(path).as_uri() if scheme == "file" else f"{scheme}://{path}"
