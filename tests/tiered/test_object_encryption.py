"""Remote objects encrypted at rest (AES-256-GCM, a data key per segment wrapped by the master
key): the stored bytes are not the segment's, they read back exactly with the key (any range,
compressed or not, a cold reader with nothing cached), and a wrong key, no key, a changed byte
or a moved object is a RemoteDecryptionError naming what failed, never garbage. On a local
directory and on SeaweedFS; a cold S3 read of a range is still one GET for the indexes and one
ranged GET for the data. The key settings' errors name the key."""

from __future__ import annotations

import base64
import os
import random
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.tiered.strategies import segment
from tests.tiered.test_pyarrow_remote_storage_manager import TP, fake_batches, make_segment_files
from tierlog.errors import ConfigError, RemoteDecryptionError
from tierlog.tiered.storage import IndexType, PyArrowRemoteStorageManager
from tierlog.tiered.storage.object_encryption import MasterKey, master_key_from_config

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
MARKER = b"PLAINTEXT-RECORD-MARKER-"


def _data() -> bytes:
    return fake_batches(60, payload=MARKER * 12)  # ~17 KB, compressible, recognizable


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A factory of RSMs on one fresh root (every call: a new broker, nothing cached)."""
    prefix = f"enc-{uuid.uuid4().hex[:8]}"
    if request.param == "file":

        def make(**kw):  # type: ignore[no-untyped-def]
            return PyArrowRemoteStorageManager(f"file://{tmp_path}/remote/{prefix}", **kw)

        return make
    sw = request.getfixturevalue("seaweedfs")

    def make_s3(**kw):  # type: ignore[no-untyped-def]
        return PyArrowRemoteStorageManager(
            f"s3://{sw.bucket}/{prefix}",
            endpoint=sw.endpoint,
            region="us-east-1",
            access_key=sw.access_key,
            secret_key=sw.secret_key,
            **kw,
        )

    return make_s3


def _raw(rsm: PyArrowRemoteStorageManager, path: str) -> bytes:
    with rsm.filesystem.open_input_stream(path, compression=None) as f:
        return bytes(f.read())


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_unreadable_without_the_key_exact_with_it(store, tmp_path: Path, compression: str) -> None:  # type: ignore[no-untyped-def]
    data = _data()
    seg = make_segment_files(tmp_path, data)
    md = segment(100, 199, tp=TP, size=len(data))
    writer = store(master_key=MasterKey(KEY), compression=compression, chunk_size=4096)
    writer.copy_log_segment_data(md, seg)

    # the bytes in the store are not the segment's, nor its indexes'
    log_obj = _raw(writer, writer.object_path(md, ".log"))
    idx_obj = _raw(writer, writer.object_path(md, ".indexes"))
    assert MARKER not in log_obj and log_obj != data
    assert seg.offset_index.read_bytes() not in idx_obj
    assert b"snapshot" not in idx_obj and b"aborted-txns" not in idx_obj

    reader = store(master_key=MasterKey(KEY))  # cold: nothing cached, compression unknown
    assert reader.fetch_log_segment(md, 0) == data
    assert reader.fetch_indexes(md)[IndexType.OFFSET] == seg.offset_index.read_bytes()
    assert reader.fetch_index(md, IndexType.TRANSACTION) == b"aborted-txns"
    rnd = random.Random(7)
    for _ in range(15):
        a = rnd.randrange(len(data))
        b = rnd.randrange(a, len(data) + 50)
        assert reader.fetch_log_segment(md, a, b) == data[a : b + 1]
        assert writer.fetch_log_segment(md, a, b) == data[a : b + 1]

    wrong = store(master_key=MasterKey(OTHER_KEY))
    with pytest.raises(RemoteDecryptionError, match="encrypted with another key"):
        wrong.fetch_indexes(md)
    with pytest.raises(RemoteDecryptionError, match="encrypted with another key"):
        wrong.fetch_log_segment(md, 0, 100)
    none = store()
    with pytest.raises(RemoteDecryptionError, match=r"is encrypted: set rsm\.config\.encryption"):
        none.fetch_log_segment(md, 0, 100)


def test_a_changed_byte_or_a_moved_object_fails_its_tag(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    rsm = PyArrowRemoteStorageManager(f"file://{root}", master_key=MasterKey(KEY), chunk_size=4096)
    data = _data()
    md = segment(100, 199, tp=TP, size=len(data))
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, data))
    log_path = Path(rsm.object_path(md, ".log"))
    idx_path = Path(rsm.object_path(md, ".indexes"))

    # one flipped bit in chunk 2 of the data: chunks 0-1 still read, chunk 2 fails
    blob = bytearray(log_path.read_bytes())
    blob[2 * (4096 + 16) + 10] ^= 1
    log_path.write_bytes(bytes(blob))
    cold = PyArrowRemoteStorageManager(f"file://{root}", master_key=MasterKey(KEY))
    assert cold.fetch_log_segment(md, 0, 8000) == data[:8001]
    with pytest.raises(RemoteDecryptionError, match="chunk 2 fails its AES-GCM authentication"):
        cold.fetch_log_segment(md, 8192, 9000)

    # a flipped bit in the indexes body
    idx = bytearray(idx_path.read_bytes())
    idx[-3] ^= 1
    idx_path.write_bytes(bytes(idx))
    with pytest.raises(RemoteDecryptionError, match="indexes fail their AES-GCM"):
        PyArrowRemoteStorageManager(f"file://{root}", master_key=MasterKey(KEY)).fetch_indexes(md)

    # another segment's (intact) objects copied under this segment's name
    md2 = segment(200, 299, tp=TP, size=len(data))
    rsm.copy_log_segment_data(md2, make_segment_files(tmp_path, data))
    idx_path.write_bytes(Path(rsm.object_path(md2, ".indexes")).read_bytes())
    with pytest.raises(RemoteDecryptionError, match="wrapped data key fails"):
        PyArrowRemoteStorageManager(f"file://{root}", master_key=MasterKey(KEY)).fetch_indexes(md)


def test_unencrypted_objects_stay_readable_once_encryption_is_on(tmp_path: Path) -> None:
    root = f"file://{tmp_path}/remote"
    data = _data()
    md = segment(100, 199, tp=TP, size=len(data))
    PyArrowRemoteStorageManager(root).copy_log_segment_data(md, make_segment_files(tmp_path, data))
    assert (
        PyArrowRemoteStorageManager(root, master_key=MasterKey(KEY)).fetch_log_segment(md, 10, 5000)
        == data[10:5001]
    )


def test_s3_cold_read_of_an_encrypted_range_is_still_two_requests(
    seaweedfs, s3_request_counter, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    def make(**kw):  # type: ignore[no-untyped-def]
        return PyArrowRemoteStorageManager(
            f"s3://{seaweedfs.bucket}/enc-count-{uuid.uuid4().hex[:6]}",
            endpoint=s3_request_counter.endpoint,
            region="us-east-1",
            access_key=seaweedfs.access_key,
            secret_key=seaweedfs.secret_key,
            master_key=MasterKey(KEY),
            **kw,
        )

    rsm = make(compression="zstd", chunk_size=4096)
    md = segment(0, 9, tp=TP)
    data = fake_batches(100, payload=b"q" * 300)
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, data))
    reader = PyArrowRemoteStorageManager(  # a fresh broker: nothing cached
        rsm.uri,
        endpoint=s3_request_counter.endpoint,
        region="us-east-1",
        access_key=seaweedfs.access_key,
        secret_key=seaweedfs.secret_key,
        master_key=MasterKey(KEY),
    )
    s3_request_counter.clear()
    reader.fetch_indexes(md)
    assert s3_request_counter.methods() == ["GET"]
    s3_request_counter.clear()
    assert reader.fetch_log_segment(md, 5000, 9000) == data[5000:9001]
    assert s3_request_counter.methods() == ["GET"]


def test_the_generic_filesystem_path_decrypts_too(tmp_path: Path) -> None:
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    rsm = PyArrowRemoteStorageManager(
        f"file://{tmp_path}/x", filesystem=fs, master_key=MasterKey(KEY), chunk_size=1000
    )
    data = _data()
    md = segment(0, 9, tp=TP, size=len(data))
    rsm.copy_log_segment_data(md, make_segment_files(tmp_path, data))
    assert rsm.fetch_log_segment(md, 999, 3001) == data[999:3002]


# ------------------------------------------------------------------ key settings


def test_key_from_a_file_or_a_value(tmp_path: Path) -> None:
    raw = tmp_path / "raw.key"
    raw.write_bytes(KEY)
    b64 = tmp_path / "b64.key"
    b64.write_text(base64.b64encode(KEY).decode() + "\n")
    for configs in (
        {"encryption.enabled": "true", "encryption.key.file": str(raw)},
        {"encryption.enabled": "true", "encryption.key.file": str(b64)},
        {"encryption.enabled": "TRUE", "encryption.key": base64.b64encode(KEY).decode()},
    ):
        key = master_key_from_config(configs)
        assert key is not None and key.key == KEY
    assert master_key_from_config({}) is None
    assert repr(MasterKey(KEY)) == "MasterKey()"  # never the key
    rsm = PyArrowRemoteStorageManager.from_config(
        {"uri": f"file://{tmp_path}/r", "encryption.enabled": "true",
         "encryption.key.file": str(raw)}
    )  # fmt: skip
    assert rsm.master_key is not None and rsm.master_key.key == KEY


@pytest.mark.parametrize(
    ("configs", "key", "message"),
    [
        ({"encryption.enabled": "true"}, "rsm.config.encryption.key.file",
         "encryption is enabled: set encryption.key.file"),
        ({"encryption.enabled": "yes"}, "rsm.config.encryption.enabled", "not true or false"),
        ({"encryption.key.file": "/k"}, "rsm.config.encryption.enabled",
         "encryption is not enabled"),
        ({"encryption.enabled": "true", "encryption.key.file": "/k", "encryption.key": "x"},
         "rsm.config.encryption.key", "not both"),
        ({"encryption.enabled": "true", "encryption.key.file": "/nonexistent/k"},
         "rsm.config.encryption.key.file", "cannot read /nonexistent/k"),
        ({"encryption.enabled": "true", "encryption.key": "c2hvcnQ="},
         "rsm.config.encryption.key", "expected 32 bytes in base64"),
        ({"encryption.enabled": "true", "encryption.key": "0123456789abcdef0123456789abcdef"},
         "rsm.config.encryption.key", "expected 32 bytes in base64"),
    ],
)  # fmt: skip
def test_key_errors_name_the_key(configs: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        master_key_from_config(configs)
    assert e.value.key == key


def test_a_key_file_of_the_wrong_size(tmp_path: Path) -> None:
    f = tmp_path / "k"
    f.write_bytes(os.urandom(16))
    with pytest.raises(ConfigError, match="expected 32 bytes, raw or base64"):
        master_key_from_config({"encryption.enabled": "true", "encryption.key.file": str(f)})
