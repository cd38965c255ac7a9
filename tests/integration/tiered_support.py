"""Helpers for the tiered storage integration tests: the remote stores (a local directory or
a SeaweedFS S3 bucket) with a way to take them down, broker settings, produce/consume with
exact record comparison, and waits on what the broker reports through real clients.

* :class:`FileStore` -- ``file://<dir>``. ``down()`` moves the directory away and puts a
  plain file in its place: every write, read or delete under it fails, as a dead mount would.
* :class:`S3Store` -- ``s3://tierlog/<unique prefix>`` on the session's SeaweedFS, reached
  by the broker through a :class:`ToggleProxy`. ``down()`` makes the proxy reset every
  connection (new and open ones): a dead endpoint. The test reads and writes the bucket
  directly (not through the proxy).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.structs import TopicPartition as KTP

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.integration.clients import kp_admin

ROOT = Path(__file__).resolve().parents[2]

#: Broker settings of every tiered test broker (fast tasks, few internal partitions).
TIERED_BROKER = (
    "remote.log.storage.system.enable=true",
    "remote.log.manager.task.interval.ms=200",
    "remote.log.manager.task.retry.backoff.ms=200",
    "remote.log.manager.task.retry.backoff.max.ms=1000",
    "log.retention.check.interval.ms=200",
    "remote.log.metadata.topic.num.partitions=3",
    "offsets.topic.num.partitions=3",
    "remote.fetch.max.wait.ms=3000",
)

#: Topic configs: small segments, remote storage on.
SEGMENT_BYTES = 32768


def tiered_topic_configs(**extra: str) -> dict[str, str]:
    configs = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)}
    configs.update({k.replace("_", "."): v for k, v in extra.items()})
    return configs


def wait_until(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


# --------------------------------------------------------------------------- stores


class ToggleProxy:
    """A loopback TCP proxy to ``target_port`` that can be switched off (connections reset)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._up = True
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.1)
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if not self._up:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        self._up = False
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            _reset(s)

    def up(self) -> None:
        self._up = True

    def close(self) -> None:
        self._closed = True
        self.down()
        self._listener.close()


def _reset(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        s.close()


class RemoteStore:
    """A remote store for one broker: its ``rsm.config.*`` and direct access for checks."""

    kind = "?"

    def overrides(self) -> list[str]:
        raise NotImplementedError

    def list_keys(self) -> list[str]:
        """Every object key (relative to the storage root), sorted."""
        raise NotImplementedError

    def read(self, key: str) -> bytes:
        raise NotImplementedError

    def write(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def down(self) -> None:
        raise NotImplementedError

    def up(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def topic_keys(self, topic: str, topic_id: str) -> list[str]:
        """Keys under ``<topic>-<topic id>/``."""
        return [k for k in self.list_keys() if k.startswith(f"{topic}-{topic_id}/")]


def _exchange(a: Path, b: Path) -> None:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``): the broker never
    sees the root missing, half-swapped or recreated in between."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


class FileStore(RemoteStore):
    kind = "file"

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._parked = root.with_name(root.name + ".down")

    def overrides(self) -> list[str]:
        return [f"rsm.config.uri={self.root.as_uri()}"]

    def list_keys(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def write(self, key: str, data: bytes) -> None:
        (self.root / key).write_bytes(data)

    def delete(self, key: str) -> None:
        (self.root / key).unlink()

    def down(self) -> None:
        self._parked.write_bytes(b"remote storage is down\n")
        _exchange(self.root, self._parked)  # root: a plain file; the data parked aside

    def up(self) -> None:
        _exchange(self.root, self._parked)
        self._parked.unlink()


class S3Store(RemoteStore):
    kind = "s3"

    def __init__(self, seaweedfs: Any, prefix: str) -> None:
        import pyarrow.fs as pafs

        self.sw = seaweedfs
        self.prefix = prefix
        self.proxy = ToggleProxy(seaweedfs.port)
        self.fs = pafs.S3FileSystem(
            access_key=seaweedfs.access_key,
            secret_key=seaweedfs.secret_key,
            endpoint_override=f"127.0.0.1:{seaweedfs.port}",
            scheme="http",
            region="us-east-1",
        )
        self.base = f"{seaweedfs.bucket}/{prefix}"

    def overrides(self) -> list[str]:
        return [
            f"rsm.config.uri=s3://{self.base}",
            f"rsm.config.s3.endpoint={self.proxy.endpoint}",
            "rsm.config.s3.region=us-east-1",
            f"rsm.config.s3.access.key={self.sw.access_key}",
            f"rsm.config.s3.secret.key={self.sw.secret_key}",
            "rsm.config.connect.timeout.ms=1000",
            "rsm.config.request.timeout.ms=5000",
            "rsm.config.retry.max.attempts=2",
        ]

    def list_keys(self) -> list[str]:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(
            pafs.FileSelector(self.base, recursive=True, allow_not_found=True)
        )
        return sorted(i.path[len(self.base) + 1 :] for i in infos if i.type == pafs.FileType.File)

    def read(self, key: str) -> bytes:
        with self.fs.open_input_stream(f"{self.base}/{key}") as f:
            return bytes(f.read())

    def write(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(f"{self.base}/{key}") as f:
            f.write(data)

    def delete(self, key: str) -> None:
        self.fs.delete_file(f"{self.base}/{key}")

    def down(self) -> None:
        self.proxy.down()

    def up(self) -> None:
        self.proxy.up()

    def close(self) -> None:
        self.proxy.close()


def make_store(kind: str, workdir: Path, seaweedfs: Any | None) -> RemoteStore:
    if kind == "file":
        return FileStore(workdir / "remote")
    assert seaweedfs is not None
    return S3Store(seaweedfs, f"it-{uuid.uuid4().hex[:10]}")


# --------------------------------------------------------------------------- records


Sent = tuple[bytes, bytes, list[tuple[str, bytes]], int]  # key, value, headers, timestamp


def make_records(n: int, *, start: int = 0, ts0: int | None = None, ts_step: int = 1) -> list[Sent]:
    """``n`` distinct records of ~150 bytes with headers and explicit timestamps."""
    ts0 = int(time.time() * 1000) if ts0 is None else ts0
    out: list[Sent] = []
    for i in range(start, start + n):
        value = (f"value-{i:08d}-".encode() + os.urandom(40).hex().encode())[:100]
        headers = [("seq", str(i).encode()), ("h2", b"\x00\xff" * (i % 3))]
        out.append((f"key-{i:08d}".encode(), value, headers, ts0 + (i - start) * ts_step))
    return out


def produce(bootstrap: str, topic: str, records: Iterable[Sent], partition: int = 0) -> list[int]:
    """Produce (acks=all, no compression, small batches) and flush; the offsets."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 8192,
            "compression.type": "none",
            "acks": "all",
        }
    )
    offsets: list[int] = []
    errors: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for key, value, headers, ts in records:
        while True:
            try:
                p.produce(
                    topic,
                    key=key,
                    value=value,
                    headers=headers,
                    timestamp=ts,
                    partition=partition,
                    on_delivery=cb,
                )
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0
    assert not errors, errors[:3]
    return sorted(offsets)


def consume(
    bootstrap: str, topic: str, count: int, *, partition: int = 0, offset: int = 0,
    timeout: float = 30.0,
) -> list[Any]:  # fmt: skip
    """``count`` messages from ``offset`` with confluent-kafka (librdkafka), no group."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for m in c.consume(min(5000, count - len(out)), 0.5):
                if m.error():
                    raise KafkaException(m.error())
                out.append(m)
        return out
    finally:
        c.close()


def assert_same(sent: list[Sent], got: list[Any], first_offset: int = 0) -> None:
    """confluent-kafka messages equal the produced records, byte for byte, in order."""
    assert len(got) == len(sent), (len(got), len(sent))
    for i, ((key, value, headers, ts), m) in enumerate(zip(sent, got, strict=True)):
        assert m.offset() == first_offset + i
        assert m.key() == key, i
        assert m.value() == value, i
        assert [(k, bytes(v)) for k, v in (m.headers() or [])] == headers, i
        assert m.timestamp() == (1, ts), i  # (TIMESTAMP_CREATE_TIME, ts)


def kp_consume(bootstrap: str, topic: str, count: int, partition: int = 0) -> list[Any]:
    """``count`` records from offset 0 with kafka-python (assign + seek, no group)."""
    from tests.integration.clients import kp_consumer

    c = kp_consumer(bootstrap, consumer_timeout_ms=20_000, fetch_max_bytes=1 << 20)
    try:
        tp = KTP(topic, partition)
        c.assign([tp])
        c.seek(tp, 0)
        out: list[Any] = []
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500, max_records=5000).values():
                out += recs
        return out
    finally:
        c.close()


def assert_same_kp(sent: list[Sent], got: list[Any]) -> None:
    assert len(got) == len(sent), (len(got), len(sent))
    for i, ((key, value, headers, ts), r) in enumerate(zip(sent, got, strict=True)):
        assert (r.offset, r.key, r.value, r.timestamp) == (i, key, value, ts), i
        assert [(k, bytes(v)) for k, v in r.headers] == headers, i


# --------------------------------------------------------------------------- broker views


def list_offsets(bootstrap: str, topic: str, spec: int, partition: int = 0) -> int:
    """ListOffsets through kafka-python (v9+: -2 earliest, -4 earliest local, -5 latest
    tiered, or a timestamp); the offset (-1 when none)."""
    admin = kp_admin(bootstrap)
    try:
        r = admin.list_partition_offsets({KTP(topic, partition): spec})
        return int(r[KTP(topic, partition)].offset)
    finally:
        admin.close()


class Offsets:
    """The log start (-2), local log start (-4), highest tiered (-5) and end (-1) offsets."""

    def __init__(self, bootstrap: str, topic: str, partition: int = 0) -> None:
        admin = kp_admin(bootstrap)
        try:
            tp = KTP(topic, partition)
            got = {
                s: int(admin.list_partition_offsets({tp: s})[tp].offset) for s in (-2, -4, -5, -1)
            }
        finally:
            admin.close()
        self.earliest, self.local, self.tiered, self.end = got[-2], got[-4], got[-5], got[-1]

    def __repr__(self) -> str:
        return (
            f"Offsets(earliest={self.earliest}, local={self.local}, tiered={self.tiered}, "
            f"end={self.end})"
        )

    def as_tuple(self) -> tuple[int, int, int, int]:
        return self.earliest, self.local, self.tiered, self.end


def local_segments(broker: Any, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    """``(base offset, bytes)`` of the partition's segments on the broker's disk, oldest
    first; the last one is the active segment. No request tells where the active segment
    starts (the copy task takes every segment before it) or how big the local segments are
    (what local retention counts), so :func:`at_rest` reads the log dir."""
    found: dict[int, int] = {}
    for path in (Path(broker.log_dir) / f"{topic}-{partition}").glob("*.log"):
        with contextlib.suppress(FileNotFoundError, ValueError):  # deleted meanwhile
            found[int(path.name[: -len(".log")])] = path.stat().st_size
    return sorted(found.items())


def at_rest(
    broker: Any, topic: str, partition: int = 0, *, local_retention_bytes: int
) -> Offsets | None:
    """The partition's offsets once copying and local retention have nothing left to do,
    else None (use with :func:`wait_until`, after the last record was produced):

    * every rolled segment is in remote storage: the highest tiered offset (-5) is the one
      before the active segment;
    * local retention is done: deleting the oldest local segment would leave less than
      ``local_retention_bytes`` (Kafka's rule), and the local log start (-4) says so.

    The offsets are read before and after the log dir and must agree, so nothing moved in
    between. Remote expiration (retention.ms / retention.bytes) is not covered: a test of it
    waits for its own end state on top of this one.
    """
    before = Offsets(broker.bootstrap, topic, partition)
    segs = local_segments(broker, topic, partition)
    after = Offsets(broker.bootstrap, topic, partition)
    if not segs or before.as_tuple() != after.as_tuple():
        return None
    active_base = segs[-1][0]
    if after.tiered != active_base - 1:
        return None  # a rolled segment is still to be copied
    total = sum(size for _, size in segs)
    if len(segs) > 1 and total - segs[0][1] >= local_retention_bytes:
        return None  # local retention still has a copied segment to delete
    if after.local != max(segs[0][0], after.earliest):
        return None
    return after


def remote_ls(broker: Any, topic: str, *, all_segments: bool = False) -> list[dict[str, Any]]:
    """``tierlog remote ls --json`` in process, with the broker's own overrides."""
    import argparse

    from tierlog.tools.remote_cli import main_ls

    args = argparse.Namespace(
        target=topic, all=all_segments, json=True, config=None, override=list(broker.overrides)
    )
    out, err = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    os.chdir(broker.workdir)  # relative paths in the config resolve as in the broker
    try:
        rc = main_ls(args, out, err)
    finally:
        os.chdir(cwd)
    assert rc == 0, err.getvalue()
    return list(json.loads(out.getvalue()))


def segments(broker: Any, topic: str, partition: int = 0, **kw: Any) -> list[dict[str, Any]]:
    for p in remote_ls(broker, topic, **kw):
        if p["partition"] == partition and p["current"]:
            return list(p["segments"])
    return []


def finished(broker: Any, topic: str, partition: int = 0) -> list[dict[str, Any]]:
    return [s for s in segments(broker, topic, partition) if s["state"] == "COPY_SEGMENT_FINISHED"]


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def all_gone(broker: Any, topic: str, below: int) -> bool:
    """Every remote segment ending below ``below`` is deleted: metadata and objects."""
    keys = set(broker.store.list_keys())
    for s in segments(broker, topic, all_segments=True):
        if s["end_offset"] < below:
            if s["state"] != "DELETE_SEGMENT_FINISHED":
                return False
            for obj in (s["log_object"], s["indexes_object"]):
                if any(obj.endswith("/" + k) for k in keys):
                    return False
    return True


def object_key(store: RemoteStore, uri: str) -> str:
    """The store key of an object URI printed by ``remote ls``."""
    for key in store.list_keys():
        if uri.endswith("/" + key):
            return key
    raise AssertionError(f"{uri} is not in the store")


def verify(broker: Any, topic: str) -> tuple[int, str]:
    """``tierlog remote verify`` in process: (exit code, output)."""
    import argparse

    from tierlog.tools.remote_cli import main_verify

    args = argparse.Namespace(target=topic, config=None, override=list(broker.overrides))
    out, err = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    os.chdir(broker.workdir)
    try:
        rc = main_verify(args, out, err)
    finally:
        os.chdir(cwd)
    return rc, out.getvalue() + err.getvalue()


FetchResult = tuple[int, bytes, int, int]  # error code, records, high watermark, log start


def fetch(
    bootstrap: str,
    parts: list[tuple[str, int, int]],
    *,
    replica_id: int = -1,
    max_wait_ms: int = 100,
    partition_max_bytes: int = 1 << 20,
) -> dict[tuple[str, int], FetchResult]:
    """One Fetch v12 over a raw connection (kio): per (topic, partition) its outcome."""
    import datetime
    import importlib

    from tests.integration.wire import WireClient, request_class

    cls = request_class(1, 12)
    m = importlib.import_module(cls.__module__)
    topics: dict[str, list[Any]] = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append(
            m.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes
            )
        )
    req = cls(
        replica_id=replica_id,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        topics=tuple(m.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
        forgotten_topics_data=(),
    )
    c = WireClient(bootstrap, timeout=30)
    try:
        resp = c.call(req)
    finally:
        c.close()
    out: dict[tuple[str, int], FetchResult] = {}
    for t in resp.responses:
        for p in t.partitions:
            out[(t.topic, p.partition_index)] = (
                p.error_code,
                bytes(p.records or b""),
                p.high_watermark,
                p.log_start_offset,
            )
    return out


def decode(records: bytes) -> list[Any]:
    """Every record of the complete batches in ``records`` (CRCs checked)."""
    from tierlog.records.default_records import iter_records

    return [r for _, recs in iter_records(records, check_crc=True) for r in recs]
