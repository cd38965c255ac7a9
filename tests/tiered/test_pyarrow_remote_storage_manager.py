from __future__ import annotations

import errno
import os
import random
import struct
import time
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.tiered.strategies import segment
from tierlog.errors import ConfigError, RemoteResourceNotFoundError, RemoteStorageError
from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition, kafka_uuid_str
from tierlog.tiered.storage import (
    ALL_INDEX_TYPES,
    EventType,
    IndexType,
    LogSegmentData,
    PyArrowRemoteStorageManager,
    RecordingRemoteStorageManager,
    map_exceptions,
)
from tierlog.tiered.storage.segment_objects import IndexesObject, segment_is_compressed

TP = TopicIdPartition(uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "orders", 3)


def fake_batches(
    n_batches: int, *, codec: int = 0, payload: bytes | None = None, seed: int = 0
) -> bytes:
    """Record batches whose headers are valid enough for the RSM (it reads length + attributes)."""
    rnd = random.Random(seed)
    out = bytearray()
    for i in range(n_batches):
        body = payload if payload is not None else bytes(rnd.getrandbits(8) for _ in range(200))
        rest = bytearray(49) + body  # header after baseOffset/batchLength is 49 bytes
        struct.pack_into(">ibih", rest, 0, 0, 2, 0, codec)  # leaderEpoch, magic, crc, attributes
        out += struct.pack(">qi", i * 10, len(rest)) + rest
    return bytes(out)


def make_segment_files(tmp_path, data: bytes, *, txn: bool = True) -> LogSegmentData:
    d = tmp_path / f"seg-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    (d / "00000000000000000100.log").write_bytes(data)
    (d / "00000000000000000100.index").write_bytes(os.urandom(80))
    (d / "00000000000000000100.timeindex").write_bytes(os.urandom(120))
    (d / "00000000000000000100.snapshot").write_bytes(b"snapshot")
    if txn:
        (d / "00000000000000000100.txnindex").write_bytes(b"aborted-txns")
    return LogSegmentData(
        d / "00000000000000000100.log",
        d / "00000000000000000100.index",
        d / "00000000000000000100.timeindex",
        d / "00000000000000000100.txnindex" if txn else None,
        d / "00000000000000000100.snapshot",
        b"0\n1\n0 100\n",
    )


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request, tmp_path):
    """A factory of RSMs on a fresh root of the given backend."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    if request.param == "file":

        def make(**kw):
            return PyArrowRemoteStorageManager(f"file://{tmp_path}/remote/{prefix}", **kw)

        return make
    sw = request.getfixturevalue("seaweedfs")

    def make_s3(endpoint=None, **kw):
        return PyArrowRemoteStorageManager(
            f"s3://{sw.bucket}/{prefix}",
            endpoint=endpoint or sw.endpoint,
            region="us-east-1",
            access_key=sw.access_key,
            secret_key=sw.secret_key,
            **kw,
        )

    return make_s3


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_round_trip(backend, tmp_path, compression):
    rsm = backend(compression=compression, chunk_size=4096)
    data = fake_batches(100, payload=b"abc" * 100)  # compressible, ~35 KB, many chunks
    seg = make_segment_files(tmp_path, data)
    md = segment(100, 199, tp=TP, size=len(data))
    assert rsm.copy_log_segment_data(md, seg) is None
    indexes = rsm.fetch_indexes(md)
    assert indexes == {
        IndexType.OFFSET: seg.offset_index.read_bytes(),
        IndexType.TIMESTAMP: seg.time_index.read_bytes(),
        IndexType.TRANSACTION: b"aborted-txns",
        IndexType.PRODUCER_SNAPSHOT: b"snapshot",
        IndexType.LEADER_EPOCH: b"0\n1\n0 100\n",
    }
    assert rsm.fetch_indexes(md, [IndexType.OFFSET]) == {
        IndexType.OFFSET: indexes[IndexType.OFFSET]
    }
    assert rsm.fetch_index(md, IndexType.TIMESTAMP) == indexes[IndexType.TIMESTAMP]
    assert rsm.fetch_log_segment(md, 0) == data
    rnd = random.Random(1)
    fresh = backend(compression=compression, chunk_size=4096)  # no cached chunk index
    for _ in range(20):
        a = rnd.randrange(len(data))
        b = rnd.randrange(a, len(data) + 100)
        assert rsm.fetch_log_segment(md, a, b) == data[a : b + 1]
        assert fresh.fetch_log_segment(md, a, b) == data[a : b + 1]
    assert rsm.fetch_log_segment(md, len(data) + 5) == b""


def test_zstd_compresses_only_uncompressed_segments(tmp_path):
    root = tmp_path / "remote"
    rsm = PyArrowRemoteStorageManager(f"file://{root}", compression="zstd")
    plain = fake_batches(50, payload=b"x" * 500)
    already = fake_batches(50, payload=b"x" * 500, codec=4)  # zstd batches
    assert not segment_is_compressed(make_segment_files(tmp_path, plain).log_segment)
    assert segment_is_compressed(make_segment_files(tmp_path, already).log_segment)
    md1, md2 = segment(0, 9, tp=TP), segment(10, 19, tp=TP)
    rsm.copy_log_segment_data(md1, make_segment_files(tmp_path, plain))
    rsm.copy_log_segment_data(md2, make_segment_files(tmp_path, already))
    size1 = Path(rsm.object_path(md1, ".log")).stat().st_size
    size2 = Path(rsm.object_path(md2, ".log")).stat().st_size
    assert size1 < len(plain) // 10
    assert size2 == len(already)
    assert rsm.fetch_log_segment(md1, 0) == plain
    assert rsm.fetch_log_segment(md2, 7, 99) == already[7:100]


def test_layout_and_no_temp_files(tmp_path):
    root = tmp_path / "remote"
    rsm = PyArrowRemoteStorageManager(f"file://{root}")
    md = segment(123, 456, tp=TP)
    written = []
    real_write, real_copy = rsm._write, rsm._copy
    rsm._write = lambda path, parts: (written.append(path), real_write(path, parts))[1]
    rsm._copy = lambda source, path: (written.append(path), real_copy(source, path))[1]
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, fake_batches(3)))
    prefix = (
        f"orders-{kafka_uuid_str(TP.topic_id)}/3/00000000000000000123-"
        f"{kafka_uuid_str(md.remote_log_segment_id.id)}"
    )
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        prefix + ".indexes",
        prefix + ".log",
    ]
    assert [p.rsplit(".", 1)[1] for p in written] == ["log", "indexes"]  # indexes LAST


def test_missing_transaction_index_is_left_out(backend, tmp_path):
    rsm = backend()
    md = segment(0, 9, tp=TP)
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, fake_batches(2), txn=False))
    assert IndexType.TRANSACTION not in rsm.fetch_indexes(md)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(md, IndexType.TRANSACTION)


def test_copy_is_idempotent_and_overwrites(backend, tmp_path):
    rsm = backend()
    md = segment(0, 9, tp=TP)
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, fake_batches(2, seed=1)))
    second = fake_batches(3, seed=2)
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, second))
    assert rsm.fetch_log_segment(md, 0) == second


def test_delete_is_idempotent_and_missing_fetches_raise_not_found(backend, tmp_path):
    rsm = backend()
    md = segment(0, 9, tp=TP)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_indexes(md)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(md, 0, 10)
    rsm.delete_log_segment_data(md)  # nothing there: fine
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, fake_batches(2)))
    rsm.delete_log_segment_data(md)
    rsm.delete_log_segment_data(md)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_indexes(md)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(md, 0)


def test_delete_removes_a_crashed_upload_leftover(tmp_path):
    rsm = PyArrowRemoteStorageManager(f"file://{tmp_path}/remote")
    md = segment(0, 9, tp=TP)
    path = rsm.object_path(md, ".log")
    Path(path).parent.mkdir(parents=True)
    with open(f"{path}.tmp", "wb") as f:  # a copy killed mid-write
        f.write(b"partial")
    with open(path, "wb") as f:  # a .log without .indexes: incomplete segment
        f.write(b"data")
    rsm.delete_log_segment_data(md)
    assert list(Path(path).parent.iterdir()) == []


def test_corrupt_indexes_object_is_a_storage_error_not_not_found(tmp_path):
    rsm = PyArrowRemoteStorageManager(f"file://{tmp_path}/remote")
    md = segment(0, 9, tp=TP)
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, fake_batches(2)))
    path = Path(rsm.object_path(md, ".indexes"))
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RemoteStorageError, match="CRC") as info:
        rsm.fetch_indexes(md)
    assert not isinstance(info.value, RemoteResourceNotFoundError)


def test_indexes_object_rejects_any_flipped_byte():
    obj = IndexesObject({IndexType.OFFSET: b"12345678", IndexType.LEADER_EPOCH: b"0\n0\n"}, None)
    data = obj.encode()
    assert IndexesObject.decode(data) == obj
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x10
        with pytest.raises(RemoteStorageError):
            IndexesObject.decode(bytes(bad))


def test_recording_double_records_and_injects(tmp_path):
    rsm = RecordingRemoteStorageManager(PyArrowRemoteStorageManager(f"file://{tmp_path}/r"))
    md = segment(0, 9, tp=TP)
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, fake_batches(2)))
    rsm.fetch_indexes(md)
    rsm.fetch_log_segment(md, 5, 10)
    rsm.fetch_index(md, IndexType.OFFSET)
    rsm.fail(EventType.FETCH_SEGMENT)
    with pytest.raises(RemoteStorageError, match="injected"):
        rsm.fetch_log_segment(md, 0)
    assert rsm.fetch_log_segment(md, 0, 0)  # only the next call failed
    rsm.delete_log_segment_data(md)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_indexes(md)
    types = [e.type for e in rsm.events]
    assert types == [
        EventType.COPY_SEGMENT,
        EventType.FETCH_INDEXES,
        EventType.FETCH_SEGMENT,
        EventType.FETCH_OFFSET_INDEX,
        EventType.FETCH_SEGMENT,
        EventType.FETCH_SEGMENT,
        EventType.DELETE_SEGMENT,
        EventType.FETCH_INDEXES,
    ]
    assert rsm.events[1].index_types == ALL_INDEX_TYPES
    assert (rsm.events[2].start_position, rsm.events[2].end_position) == (5, 10)
    assert rsm.events[4].error is not None and rsm.events[5].error is None
    assert isinstance(rsm.events[-1].error, RemoteResourceNotFoundError)
    assert len(rsm.events_of(EventType.FETCH_INDEXES)) == 2


class CountingHandler(pafs.FileSystemHandler):
    """Counts object opens for reading on a local filesystem (the file:// 'requests')."""

    def __init__(self):
        self.fs = pafs.LocalFileSystem()
        self.reads: list[str] = []

    def get_type_name(self):
        return "counting"

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def normalize_path(self, path):
        return path

    def get_file_info(self, paths):
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.fs.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise NotImplementedError

    def delete_file(self, path):
        self.fs.delete_file(path)

    def move(self, src, dest):
        self.fs.move(src, dest)

    def copy_file(self, src, dest):
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path):
        self.reads.append(path)
        return self.fs.open_input_stream(path)

    def open_input_file(self, path):
        self.reads.append(path)
        return self.fs.open_input_file(path)

    def open_output_stream(self, path, metadata):
        return self.fs.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path, metadata):
        return self.fs.open_append_stream(path, metadata=metadata)


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_one_object_read_per_fetch_on_a_generic_filesystem(tmp_path, compression):
    handler = CountingHandler()
    rsm = PyArrowRemoteStorageManager(
        f"file://{tmp_path}/r", filesystem=pafs.PyFileSystem(handler), compression=compression
    )
    md = segment(0, 9, tp=TP)
    data = fake_batches(20, payload=b"z" * 300)
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, data))
    handler.reads.clear()
    rsm.fetch_indexes(md)
    assert [p.rsplit(".", 1)[1] for p in handler.reads] == ["indexes"]
    handler.reads.clear()
    assert rsm.fetch_log_segment(md, 100, 2000) == data[100:2001]
    assert [p.rsplit(".", 1)[1] for p in handler.reads] == ["log"]


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_s3_cold_read_is_one_get_for_indexes_and_one_ranged_get_for_data(
    seaweedfs, s3_request_counter, tmp_path, compression
):
    rsm = PyArrowRemoteStorageManager(
        f"s3://{seaweedfs.bucket}/count-{uuid.uuid4().hex[:6]}",
        endpoint=s3_request_counter.endpoint,
        region="us-east-1",
        access_key=seaweedfs.access_key,
        secret_key=seaweedfs.secret_key,
        compression=compression,
        chunk_size=4096,
    )
    md = segment(0, 9, tp=TP)
    data = fake_batches(100, payload=b"q" * 300)
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, data))
    reader = PyArrowRemoteStorageManager(  # a fresh broker: nothing cached
        rsm.uri,
        endpoint=s3_request_counter.endpoint,
        region="us-east-1",
        access_key=seaweedfs.access_key,
        secret_key=seaweedfs.secret_key,
    )
    s3_request_counter.clear()
    reader.fetch_indexes(md)
    assert s3_request_counter.methods().count("GET") == 1
    s3_request_counter.clear()
    assert reader.fetch_log_segment(md, 5000, 9000) == data[5000:9001]
    assert s3_request_counter.methods().count("GET") == 1
    # pyarrow adds one HEAD per object open, nothing else
    assert set(s3_request_counter.methods()) <= {"GET", "HEAD"}


def test_store_down_fails_fast_with_storage_error(tmp_path):
    with socket_closed_port() as port:
        rsm = PyArrowRemoteStorageManager(
            "s3://bucket/prefix",
            endpoint=f"http://127.0.0.1:{port}",
            region="us-east-1",
            access_key="K",
            secret_key="S",
            connect_timeout=0.5,
            request_timeout=1,
            retry_attempts=1,
        )
        md = segment(0, 9, tp=TP)
        t0 = time.monotonic()
        with pytest.raises(RemoteStorageError) as info:
            rsm.fetch_indexes(md)
        assert not isinstance(info.value, RemoteResourceNotFoundError)
        assert "s3://bucket/prefix/orders-" in str(info.value)
        with pytest.raises(RemoteStorageError):
            rsm.copy_log_segment_data(md, make_segment_files(tmp_path, fake_batches(1)))
        assert time.monotonic() - t0 < 5


class socket_closed_port:
    def __enter__(self):
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        return self.port

    def __exit__(self, *exc):
        return False


def test_from_config():
    with pytest.raises(ConfigError, match=r"rsm\.config\.nope"):
        PyArrowRemoteStorageManager.from_config({"uri": "file:///tmp/x", "nope": "1"})
    with pytest.raises(ConfigError, match="uri"):
        PyArrowRemoteStorageManager.from_config({})
    with pytest.raises(ConfigError, match="compression"):
        PyArrowRemoteStorageManager.from_config({"uri": "file:///tmp/x", "compression": "lz4"})
    with pytest.raises(ConfigError, match=r"s3\.access\.key"):
        PyArrowRemoteStorageManager.from_config(
            {"uri": "s3://b/p", "s3.endpoint": "http://127.0.0.1:1", "s3.access.key": "k"}
        )
    with pytest.raises(ConfigError, match=r"s3\.endpoint"):
        PyArrowRemoteStorageManager.from_config({"uri": "s3://b/p", "s3.endpoint": "ftp://x"})
    rsm = PyArrowRemoteStorageManager.from_config(
        {
            "uri": "s3://bucket/prefix",
            "s3.endpoint": "http://127.0.0.1:1",
            "s3.region": "us-east-1",
            "s3.access.key": "K",
            "s3.secret.key": "S",
            "compression": "zstd",
            "connect.timeout.ms": "100",
        }
    )
    assert rsm.compression == "zstd"
    assert rsm.object_path(segment(0, 1, tp=TP), ".log").startswith("bucket/prefix/orders-")


def test_map_exceptions():
    with pytest.raises(RemoteResourceNotFoundError, match="op x"), map_exceptions("op x"):
        raise FileNotFoundError("gone")
    with pytest.raises(RemoteStorageError, match="op y: PermissionError"), map_exceptions("op y"):
        raise PermissionError("no")
    with pytest.raises(RemoteStorageError, match="KeyError"), map_exceptions("op z", (KeyError,)):
        raise KeyError("k")
    with pytest.raises(ZeroDivisionError), map_exceptions("op"):
        raise ZeroDivisionError


def test_segment_copy_takes_the_kernel_path_and_its_fallback(tmp_path, monkeypatch):
    """A local store copies the segment with copy_file_range (no bytes through Python); where
    the filesystems refuse it (EXDEV across mounts, say) sendfile takes over; a source that
    ends early is an error, never a short object."""
    from tierlog.tiered.storage import pyarrow_remote_storage_manager as mod

    data = fake_batches(3000, seed=7)  # ~750 KB: several kernel calls' worth is not needed
    calls: list[str] = []
    real_cfr = os.copy_file_range

    def cfr(*args):
        calls.append("copy_file_range")
        return real_cfr(*args)

    monkeypatch.setattr(os, "copy_file_range", cfr)
    rsm = PyArrowRemoteStorageManager(f"file://{tmp_path}/remote")
    md = segment(100, 199, tp=TP, size=len(data))
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, data))
    assert calls and rsm.fetch_log_segment(md, 0) == data

    def refuse(*args):
        raise OSError(errno.EXDEV, "cross-device")

    real_sendfile = os.sendfile

    def sendfile(*args):
        calls.append("sendfile")
        return real_sendfile(*args)

    monkeypatch.setattr(os, "copy_file_range", refuse)
    monkeypatch.setattr(os, "sendfile", sendfile)
    md2 = segment(200, 299, tp=TP, size=len(data))
    rsm.copy_log_segment_data(md2, make_segment_files(tmp_path, data))
    assert "sendfile" in calls and rsm.fetch_log_segment(md2, 0) == data

    src = tmp_path / "short.log"
    src.write_bytes(data[:100])
    with (
        open(tmp_path / "out", "wb") as out,
        open(src, "rb") as f,
        pytest.raises(OSError, match="ended after 100"),
    ):
        mod._copy_range(f.fileno(), out.fileno(), len(data))


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (
            "file://relative/remote",
            "rsm.config.uri: 'file://relative/remote' is not an absolute file URI: 'relative' "
            "would be read as a host and the objects written to '/remote' at the filesystem "
            "root; write file:///absolute/dir (three slashes; relative paths are refused)",
        ),
        (
            "file:remote",
            "rsm.config.uri: 'file:remote' is not an absolute file URI: write "
            "file:///absolute/dir (three slashes; relative paths are refused)",
        ),
    ],
)
def test_a_relative_file_uri_is_refused(uri, message, tmp_path):
    with pytest.raises(ConfigError) as e:
        PyArrowRemoteStorageManager.from_config({"uri": uri})
    assert str(e.value) == message
    # file://localhost/abs is the absolute form with a host part RFC 8089 allows.
    ok = PyArrowRemoteStorageManager.from_config({"uri": f"file://localhost{tmp_path}/r"})
    ok.check_writable()
    assert (tmp_path / "r").is_dir()


def test_check_writable_names_the_object_it_could_not_write(tmp_path):
    root = tmp_path / "store"
    rsm = PyArrowRemoteStorageManager.from_config({"uri": root.as_uri()})
    rsm.check_writable()
    assert list(root.iterdir()) == []  # nothing left behind
    (root / ".tierlog-startup-check").write_bytes(b"")  # a file where its directory goes
    with pytest.raises(RemoteStorageError, match=r"^write a probe object to file://"):
        rsm.check_writable()
