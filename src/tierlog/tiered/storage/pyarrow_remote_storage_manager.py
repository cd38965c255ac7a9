"""One RemoteStorageManager for every pyarrow.fs scheme: file://, s3://, gs://, hdfs://, ...

Per segment it writes two objects (formats in :mod:`segment_objects`): the ``.log`` data
object first, the ``.indexes`` object LAST. A segment is complete iff its ``.indexes`` object
exists, so a crash mid-upload leaves at most a ``.log`` without ``.indexes`` (found by
``remote verify``, removed by the delete that follows the dangling COPY_SEGMENT_STARTED).
Deletion removes ``.indexes`` first for the same reason.

No partial object is ever visible under a final name: on S3 and GCS an object appears only
when its (multipart) upload completes; on every other filesystem (local, HDFS) we write
``<name>.tmp``, fsync it (local), then rename it into place, then fsync the directory.

Remote requests: :meth:`fetch_indexes` reads the whole ``.indexes`` object with one GET;
:meth:`fetch_log_segment` reads one byte range of the ``.log`` object with one ranged GET.
pyarrow's S3 client would send a HEAD before every object read (its Python API cannot be
given a known size), so on ``s3://`` with static credentials (from the standard AWS chain,
:mod:`aws_credentials`: the config, the environment, the shared credentials and config files
with a profile) reads go through :class:`S3RangedGetClient` -- one signed GET each -- and
pyarrow keeps writes, deletes and listings, with the same credentials. Without static
credentials (instance roles) pyarrow's own chain is used and reads are HEAD + GET.

Encryption at rest (``rsm.config.encryption.enabled=true`` with ``encryption.key.file`` or
``encryption.key``; :mod:`object_encryption`): both objects are AES-256-GCM encrypted with a
data key per segment, the data object in chunks (compressed first with ``compression=zstd``),
so a ranged read is still one ranged GET; a wrong or missing key is a
:class:`~tierlog.errors.RemoteDecryptionError`, never garbage.

Thread-safe: pyarrow filesystems are; the chunk-index cache has a lock.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import cramjam
import pyarrow
import pyarrow.fs as pafs

from tierlog.errors import ConfigError, RemoteDecryptionError, RemoteStorageError
from tierlog.tiered.remote_log_segment_metadata import RemoteLogSegmentMetadata
from tierlog.tiered.storage.aws_credentials import resolve_aws_credentials
from tierlog.tiered.storage.object_encryption import (
    MasterKey,
    SegmentKey,
    is_encrypted_indexes,
    master_key_from_config,
)
from tierlog.tiered.storage.remote_storage_manager import (
    ALL_INDEX_TYPES,
    IndexType,
    LogSegmentData,
    RemoteStorageManager,
    map_exceptions,
)
from tierlog.tiered.storage.s3_ranged_get import S3Credentials, S3RangedGetClient
from tierlog.tiered.storage.segment_objects import (
    INDEXES_SUFFIX,
    LOG_SUFFIX,
    ChunkIndex,
    IndexesObject,
    segment_is_compressed,
    segment_object_prefix,
)

COMPRESSIONS = ("none", "zstd")
#: Where :meth:`PyArrowRemoteStorageManager.check_writable` writes (and deletes) its object.
PROBE_DIR = ".tierlog-startup-check"
DEFAULT_CHUNK_SIZE = 1 << 20
_COPY_BLOCK = 8 << 20
_NO_COPY_FILE_RANGE = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP})


def _pread_range(path: str, start: int, end: int | None) -> bytes:
    """Bytes [start, end] (inclusive; None: to the end) of a local object with one pread: no
    pyarrow file object per fetch and one copy, not two."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        last = size - 1 if end is None else min(end, size - 1)
        if start > last:
            return b""
        want = last - start + 1
        data = os.pread(fd, want, start)
        if len(data) < want:  # a short read of a regular file: finish it
            parts = [data]
            got = len(data)
            while got < want and (more := os.pread(fd, want - got, start + got)):
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        return data
    finally:
        os.close(fd)


def _copy_range(src: int, dst: int, size: int) -> None:
    """``size`` bytes from the start of ``src`` to ``dst`` in the kernel: copy_file_range (a
    reflink or an in-kernel copy), else sendfile where the filesystems refuse it.

    Raises:
        OSError: the copy failed, or ``src`` is shorter than ``size`` (truncated under us).
    """
    done = 0
    use_cfr = hasattr(os, "copy_file_range")
    while done < size:
        n = 0
        if use_cfr:
            try:
                n = os.copy_file_range(src, dst, size - done, done, done)
            except OSError as e:
                if e.errno not in _NO_COPY_FILE_RANGE or done:
                    raise
                use_cfr = False
        if not use_cfr:
            os.lseek(dst, done, os.SEEK_SET)
            n = os.sendfile(dst, src, done, size - done)
        if n == 0:
            raise OSError(errno.EIO, f"source ended after {done} of {size} bytes")
        done += n


_ZSTD_LEVEL = 3

#: ``rsm.config.*`` keys (prefix stripped) that ``from_config`` takes.
CONFIG_KEYS = (
    "uri",
    "s3.endpoint",
    "s3.region",
    "s3.access.key",
    "s3.secret.key",
    "s3.profile",
    "compression",
    "compression.chunk.size",
    "connect.timeout.ms",
    "request.timeout.ms",
    "retry.max.attempts",
    "encryption.enabled",
    "encryption.key",
    "encryption.key.file",
)

_PYARROW_ERRORS: tuple[type[BaseException], ...] = (pyarrow.ArrowException,)


@dataclass(frozen=True, slots=True)
class _Layout:
    """How a chunked data object is laid out: the chunk index, whether chunks are
    compressed, and the segment key when they are encrypted."""

    chunks: ChunkIndex
    zstd: bool
    key: SegmentKey | None


def _s3_filesystem(
    *,
    endpoint: str | None,
    region: str | None,
    credentials: S3Credentials | None,
    connect_timeout: float,
    request_timeout: float,
    retry_attempts: int,
) -> pafs.S3FileSystem:
    kwargs: dict[str, Any] = {
        "connect_timeout": connect_timeout,
        "request_timeout": request_timeout,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=retry_attempts),
    }
    if region:
        kwargs["region"] = region
    if credentials is not None:
        kwargs["access_key"] = credentials.access_key
        kwargs["secret_key"] = credentials.secret_key
        if credentials.session_token:
            kwargs["session_token"] = credentials.session_token
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError("s3.endpoint", f"expected http(s)://host:port, got {endpoint!r}")
        kwargs["endpoint_override"] = parsed.netloc
        kwargs["scheme"] = parsed.scheme
    return pafs.S3FileSystem(**kwargs)


class PyArrowRemoteStorageManager(RemoteStorageManager):
    """Remote storage on any pyarrow filesystem (see the module docstring).

    ``uri`` is ``file:///abs/dir``, ``s3://bucket/prefix`` or any URI pyarrow understands.
    S3 options apply to ``s3://`` only; ``filesystem`` overrides the filesystem pyarrow
    would pick (the URI's path is still the root). ``compression='zstd'`` compresses data
    objects whose batches are not compressed yet, in ``chunk_size`` chunks.

    Copy and delete are idempotent. Thread-safe.

    Raises:
        ConfigError: unknown compression, bad endpoint, half the credentials, bad URI.
    """

    def __init__(
        self,
        uri: str,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        profile: str | None = None,
        compression: str = "none",
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        retry_attempts: int = 3,
        filesystem: pafs.FileSystem | None = None,
        chunk_index_cache_entries: int = 4096,
        create_root: bool = True,
        master_key: MasterKey | None = None,
    ) -> None:
        if compression not in COMPRESSIONS:
            raise ConfigError("compression", f"must be one of {COMPRESSIONS}, got {compression!r}")
        if chunk_size <= 0 or chunk_size >= 1 << 32:
            raise ConfigError("compression.chunk.size", f"out of range: {chunk_size}")
        self.uri = uri
        self.compression = compression
        #: The encryption master key (None: objects are written in clear).
        self.master_key = master_key
        self.chunk_size = chunk_size
        parsed = urlparse(uri)
        fs: pafs.FileSystem
        #: One signed GET per read on s3:// (None: pyarrow reads, HEAD + GET).
        self.s3_reader: S3RangedGetClient | None = None
        #: Where the S3 credentials came from (None: not S3, or pyarrow's own chain).
        self.credentials_source: str | None = None
        if filesystem is not None:
            fs, root = (
                filesystem,
                (parsed.netloc + parsed.path if parsed.scheme != "file" else parsed.path),
            )
        elif parsed.scheme == "file":
            if parsed.netloc not in ("", "localhost"):
                # file://relative/dir: "relative" is the URI's host and /dir its path, so the
                # objects would land in /dir at the filesystem root.
                raise ConfigError(
                    "uri",
                    f"{uri!r} is not an absolute file URI: {parsed.netloc!r} would be read as a "
                    f"host and the objects written to {parsed.path or '/'!r} at the filesystem "
                    "root; write file:///absolute/dir (three slashes; relative paths are refused)",
                )
            if not parsed.path.startswith("/"):
                raise ConfigError(
                    "uri",
                    f"{uri!r} is not an absolute file URI: write file:///absolute/dir "
                    "(three slashes; relative paths are refused)",
                )
            fs, root = pafs.LocalFileSystem(), parsed.path
        elif parsed.scheme == "s3":
            if not parsed.netloc:
                raise ConfigError("uri", f"s3 URI needs a bucket: {uri!r}")
            resolved = resolve_aws_credentials(
                access_key=access_key, secret_key=secret_key, profile=profile
            )
            region = (
                region
                or os.environ.get("AWS_REGION")
                or os.environ.get("AWS_DEFAULT_REGION")
                or (resolved.region if resolved is not None else None)
            )
            self.credentials_source = resolved.source if resolved is not None else None
            fs = _s3_filesystem(
                endpoint=endpoint,
                region=region,
                credentials=resolved.credentials if resolved is not None else None,
                connect_timeout=connect_timeout,
                request_timeout=request_timeout,
                retry_attempts=retry_attempts,
            )
            root = parsed.netloc + parsed.path
            if resolved is not None:
                self.s3_reader = S3RangedGetClient(
                    endpoint=endpoint,
                    region=region or "us-east-1",
                    credentials=resolved.credentials,
                    connect_timeout=connect_timeout,
                    request_timeout=request_timeout,
                    retry_attempts=retry_attempts,
                )
        else:
            try:
                fs, root = pafs.FileSystem.from_uri(uri)
            except (pyarrow.ArrowException, ValueError) as e:
                raise ConfigError("uri", f"{uri!r}: {e}") from e
        self._fs = fs
        self._root = root.rstrip("/")
        self._local = isinstance(fs, pafs.LocalFileSystem)
        # object stores publish an object atomically when its upload completes
        self._atomic_put = fs.type_name in ("s3", "gcs")
        if self._local and create_root:
            Path(self._root).mkdir(parents=True, exist_ok=True)
        self._chunk_lock = threading.Lock()
        self._chunk_cache: OrderedDict[Any, _Layout | None] = OrderedDict()
        self._chunk_cache_entries = chunk_index_cache_entries

    @classmethod
    def from_config(
        cls, configs: Mapping[str, str], *, create_root: bool = True
    ) -> PyArrowRemoteStorageManager:
        """Build from ``rsm.config.*`` values (prefix stripped); ``create_root=False`` for
        read-only tools (a local root is not created).

        Raises:
            ConfigError: an unknown key, a missing ``uri`` or a bad value.
        """
        for key in configs:
            if key not in CONFIG_KEYS:
                raise ConfigError(
                    f"rsm.config.{key}", f"unknown key (known: {', '.join(CONFIG_KEYS)})"
                )
        if "uri" not in configs:
            raise ConfigError("rsm.config.uri", "required")
        try:
            return cls._from_config(configs, create_root)
        except ConfigError as e:  # name the broker's key, not the plugin's
            if e.key.startswith("rsm.config."):
                raise
            raise ConfigError(f"rsm.config.{e.key}", e.message) from None

    @classmethod
    def _from_config(
        cls, configs: Mapping[str, str], create_root: bool
    ) -> PyArrowRemoteStorageManager:
        def num(key: str, default: float) -> float:
            try:
                return float(configs[key]) if key in configs else default
            except ValueError:
                raise ConfigError(f"rsm.config.{key}", f"not a number: {configs[key]!r}") from None

        return cls(
            configs["uri"],
            endpoint=configs.get("s3.endpoint"),
            region=configs.get("s3.region"),
            access_key=configs.get("s3.access.key"),
            secret_key=configs.get("s3.secret.key"),
            profile=configs.get("s3.profile"),
            compression=configs.get("compression", "none"),
            chunk_size=int(num("compression.chunk.size", DEFAULT_CHUNK_SIZE)),
            connect_timeout=num("connect.timeout.ms", 5000) / 1000,
            request_timeout=num("request.timeout.ms", 30000) / 1000,
            retry_attempts=int(num("retry.max.attempts", 3)),
            create_root=create_root,
            master_key=master_key_from_config(configs),
        )

    def check_writable(self) -> None:
        """Write, read back and delete a small object under the root (the broker's startup
        check: a wrong endpoint, bucket or permission shows here, not as copy warnings).

        Raises:
            RemoteStorageError: the store cannot be reached, written, read or cleaned.
        """
        import uuid

        path = f"{self._root}/{PROBE_DIR}/{uuid.uuid4().hex}"
        payload = b"tierlog startup check " + path.encode()
        errors = (pyarrow.ArrowException,)
        with map_exceptions(self._what("write a probe object to", path), errors):
            self._write(path, [payload])
        with (
            map_exceptions(self._what("read the probe object", path), errors),
            self._fs.open_input_stream(path) as f,
        ):
            back = f.read()
        with map_exceptions(self._what("delete the probe object", path), errors):
            self._fs.delete_file(path)
        if self._local:
            with contextlib.suppress(OSError):
                Path(path).parent.rmdir()
        if back != payload:
            raise RemoteStorageError(
                f"{self._what('read the probe object', path)}: got other bytes than written"
            )

    # ------------------------------------------------------------------ names

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs

    @property
    def root(self) -> str:
        """The root path on :attr:`filesystem` (a directory, or ``bucket/prefix``)."""
        return self._root

    @property
    def is_local(self) -> bool:
        """The store is a local directory (``file://``)."""
        return self._local

    def object_path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """Filesystem path of a segment object (``suffix``: ``.log`` or ``.indexes``)."""
        return f"{self._root}/{segment_object_prefix(metadata)}{suffix}"

    def _what(self, op: str, path: str) -> str:
        scheme = urlparse(self.uri).scheme or "file"
        return f"{op} {scheme}://{path}"

    # ------------------------------------------------------------------ writing

    def _write(self, path: str, parts: Any) -> None:
        """Write an object from an iterable of byte blocks, never exposing a partial one."""
        if self._atomic_put:
            with self._fs.open_output_stream(path) as out:
                for block in parts:
                    out.write(block)
            return
        if self._local:

            def fill(fd: int) -> None:
                for block in parts:
                    view = memoryview(block)
                    while view:
                        view = view[os.write(fd, view) :]

            self._publish_local(path, fill)
            return
        tmp = f"{path}.tmp"
        self._fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self._fs.open_output_stream(tmp) as out:
            for block in parts:
                out.write(block)
        self._fs.move(tmp, path)

    def _copy(self, source: Path, path: str) -> None:
        """Copy a local file to an object without its bytes passing through Python: the
        kernel's ``copy_file_range`` into a local store, pyarrow's C++ ``copy_files`` (its
        own buffers, the GIL released) into any other. Never exposes a partial object."""
        if self._local:
            size = source.stat().st_size

            def fill(fd: int) -> None:
                src = os.open(source, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                try:
                    _copy_range(src, fd, size)
                finally:
                    os.close(src)

            self._publish_local(path, fill)
            return
        local = pafs.LocalFileSystem()
        target = path if self._atomic_put else f"{path}.tmp"
        if not self._atomic_put:
            self._fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        pafs.copy_files(
            str(source),
            target,
            source_filesystem=local,
            destination_filesystem=self._fs,
            chunk_size=_COPY_BLOCK,
            use_threads=False,
        )
        if not self._atomic_put:
            self._fs.move(target, path)

    @staticmethod
    def _publish_local(path: str, fill: Any) -> None:
        """Write ``path`` through ``fill(fd)`` into a temporary file, fsync, rename, fsync
        the directory: a reader sees the whole object or none."""
        parent = path.rsplit("/", 1)[0]
        Path(parent).mkdir(parents=True, exist_ok=True)
        tmp = f"{path}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fill(fd)
            os.fsync(fd)
        finally:
            os.close(fd)
        Path(tmp).replace(path)
        dfd = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _chunk_blocks(
        self,
        path: Path,
        positions: list[int],
        zstd: bool,
        key: SegmentKey | None,
        prefix: str,
    ) -> Iterator[bytes]:
        with open(path, "rb") as f:
            i = 0
            while chunk := f.read(self.chunk_size):
                out = bytes(cramjam.zstd.compress(chunk, level=_ZSTD_LEVEL)) if zstd else chunk
                if key is not None:
                    out = key.encrypt_chunk(prefix, i, out)
                positions.append(positions[-1] + len(out))
                i += 1
                yield out

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        log_path = self.object_path(metadata, LOG_SUFFIX)
        idx_path = self.object_path(metadata, INDEXES_SUFFIX)
        prefix = segment_object_prefix(metadata)
        key = self.master_key.new_segment_key() if self.master_key is not None else None
        zstd = False
        with map_exceptions(self._what("copy segment to", log_path), _PYARROW_ERRORS):
            chunk_index = None
            zstd = self.compression == "zstd" and not segment_is_compressed(
                segment_data.log_segment
            )
            if zstd or key is not None:
                positions = [0]
                self._write(
                    log_path,
                    self._chunk_blocks(segment_data.log_segment, positions, zstd, key, prefix),
                )
                size = segment_data.log_segment.stat().st_size
                chunk_index = ChunkIndex(size, self.chunk_size, array("Q", positions))
            else:
                self._copy(segment_data.log_segment, log_path)
        with map_exceptions(self._what("copy indexes to", idx_path), _PYARROW_ERRORS):
            indexes = {
                IndexType.OFFSET: segment_data.offset_index.read_bytes(),
                IndexType.TIMESTAMP: segment_data.time_index.read_bytes(),
                IndexType.PRODUCER_SNAPSHOT: segment_data.producer_snapshot_index.read_bytes(),
                IndexType.LEADER_EPOCH: bytes(segment_data.leader_epoch_index),
            }
            if segment_data.transaction_index is not None:
                indexes[IndexType.TRANSACTION] = segment_data.transaction_index.read_bytes()
            obj = IndexesObject(indexes, chunk_index, compressed=zstd, encrypted=key is not None)
            data = obj.encode()
            if key is not None and self.master_key is not None:
                data = self.master_key.seal_indexes(prefix, key, data)
            self._write(idx_path, [data])
        self._remember_chunks(
            metadata, None if chunk_index is None else _Layout(chunk_index, zstd, key)
        )
        return None

    # ------------------------------------------------------------------ reading

    def _remember_chunks(self, metadata: RemoteLogSegmentMetadata, ci: _Layout | None) -> None:
        key = metadata.remote_log_segment_id
        with self._chunk_lock:
            self._chunk_cache[key] = ci
            self._chunk_cache.move_to_end(key)
            while len(self._chunk_cache) > self._chunk_cache_entries:
                self._chunk_cache.popitem(last=False)

    def _s3_get(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """ONE signed GET of ``path`` (``bucket/key``), bytes [start, end] when given."""
        assert self.s3_reader is not None
        bucket, _, key = path.partition("/")
        return self.s3_reader.get(bucket, key, start, end)

    def _read_indexes_object(self, metadata: RemoteLogSegmentMetadata) -> IndexesObject:
        path = self.object_path(metadata, INDEXES_SUFFIX)
        with map_exceptions(self._what("fetch indexes from", path), _PYARROW_ERRORS):
            if self.s3_reader is not None:
                data = self._s3_get(path)
            else:
                with self._fs.open_input_stream(path, compression=None) as f:
                    data = f.read()
        obj, key = self.decode_indexes_object(metadata, data)
        layout = None
        if obj.chunk_index is not None:
            layout = _Layout(obj.chunk_index, obj.zstd, key)
        self._remember_chunks(metadata, layout)
        return obj

    def decode_indexes_object(
        self, metadata: RemoteLogSegmentMetadata, data: bytes
    ) -> tuple[IndexesObject, SegmentKey | None]:
        """Parse a ``.indexes`` object as stored, decrypting it when it is encrypted.

        Raises:
            RemoteDecryptionError: encrypted and no key is configured, another key, a failed
                tag; or it claims encrypted chunks without being encrypted.
            RemoteStorageError: a corrupt object.
        """
        prefix = segment_object_prefix(metadata)
        key = None
        if is_encrypted_indexes(data):
            if self.master_key is None:
                raise RemoteDecryptionError(
                    f"{prefix}.indexes is encrypted: set rsm.config.encryption.enabled=true "
                    "and the key (rsm.config.encryption.key.file or rsm.config.encryption.key)"
                )
            key, data = self.master_key.open_indexes(prefix, data)
        obj = IndexesObject.decode(data)
        if obj.encrypted and key is None:
            raise RemoteDecryptionError(
                f"{prefix}.indexes: says its data is encrypted but is not itself encrypted"
            )
        return obj, key

    def fetch_indexes(
        self,
        metadata: RemoteLogSegmentMetadata,
        index_types: Collection[IndexType] = ALL_INDEX_TYPES,
    ) -> dict[IndexType, bytes]:
        obj = self._read_indexes_object(metadata)
        return {t: obj.indexes[t] for t in index_types if t in obj.indexes}

    def _chunk_index(self, metadata: RemoteLogSegmentMetadata) -> _Layout | None:
        key = metadata.remote_log_segment_id
        with self._chunk_lock:
            if key in self._chunk_cache:
                self._chunk_cache.move_to_end(key)
                return self._chunk_cache[key]
        # Unknown layout (first read of this segment since start, without fetch_indexes):
        # the indexes object says whether the data is chunked. The read path fetches indexes
        # first, so this extra GET is rare.
        self._read_indexes_object(metadata)
        with self._chunk_lock:
            return self._chunk_cache.get(key)

    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> bytes:
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise ValueError(f"bad segment range [{start_position}, {end_position}]")
        layout = self._chunk_index(metadata)
        chunks = layout.chunks if layout is not None else None
        path = self.object_path(metadata, LOG_SUFFIX)
        if self.s3_reader is not None:
            with map_exceptions(self._what("fetch segment from", path)):
                if layout is None or chunks is None:
                    return self._s3_get(path, start_position, end_position)
                size = chunks.original_size
                end = size - 1 if end_position is None else min(end_position, size - 1)
                if start_position > end:
                    return b""
                first, lo, hi = chunks.object_range(start_position, end)
                raw: bytes | memoryview = self._s3_get(path, lo, hi - 1)
            return self._decode_range(metadata, raw, layout, first, lo, start_position, end)
        if self._local and chunks is None:
            with map_exceptions(self._what("fetch segment from", path), _PYARROW_ERRORS):
                return _pread_range(path, start_position, end_position)
        with (
            map_exceptions(self._what("fetch segment from", path), _PYARROW_ERRORS),
            self._fs.open_input_file(path) as f,
        ):
            if chunks is None:
                size = f.size()
                end = size - 1 if end_position is None else min(end_position, size - 1)
                if start_position > end:
                    return b""
                return bytes(f.read_at(end - start_position + 1, start_position))
            size = chunks.original_size
            end = size - 1 if end_position is None else min(end_position, size - 1)
            if start_position > end:
                return b""
            first, lo, hi = chunks.object_range(start_position, end)
            raw = memoryview(f.read_at(hi - lo, lo))  # pyarrow's buffer, not copied
        assert layout is not None
        return self._decode_range(metadata, raw, layout, first, lo, start_position, end)

    @staticmethod
    def _decode_range(
        metadata: RemoteLogSegmentMetadata,
        raw: bytes | memoryview,
        layout: _Layout,
        first: int,
        lo: int,
        start: int,
        end: int,
    ) -> bytes:
        """Original bytes [start, end] from the chunks ``raw`` (read at ``lo``): each chunk
        decrypted (its tag checked) and decompressed as the layout says.

        Raises:
            RemoteDecryptionError: a chunk fails its tag.
        """
        chunks = layout.chunks
        prefix = segment_object_prefix(metadata) if layout.key is not None else ""
        view = memoryview(raw)
        pos = chunks.positions
        last = end // chunks.chunk_size
        pieces: list[memoryview] = []
        for c in range(first, last + 1):
            piece: Any = view[pos[c] - lo : pos[c + 1] - lo]  # no copy
            if layout.key is not None:
                piece = layout.key.decrypt_chunk(prefix, c, piece)
            if layout.zstd:
                piece = cramjam.zstd.decompress(piece)
            pieces.append(memoryview(piece))
        # trim the first and last chunks in place, then one copy into the result
        size = chunks.chunk_size
        pieces[-1] = pieces[-1][: end - last * size + 1]
        pieces[0] = pieces[0][start - first * size :]
        return b"".join(pieces)

    # ------------------------------------------------------------------ deleting

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        for suffix in (INDEXES_SUFFIX, LOG_SUFFIX):  # indexes first: marks it incomplete
            path = self.object_path(metadata, suffix)
            targets = [path] if self._atomic_put else [path, f"{path}.tmp"]
            for target in targets:
                with map_exceptions(self._what("delete", target), _PYARROW_ERRORS):
                    try:
                        self._fs.delete_file(target)
                    except FileNotFoundError:
                        pass
        with self._chunk_lock:
            self._chunk_cache.pop(metadata.remote_log_segment_id, None)

    def close(self) -> None:
        with self._chunk_lock:
            self._chunk_cache.clear()
        if self.s3_reader is not None:
            self.s3_reader.close()


__all__ = ["COMPRESSIONS", "CONFIG_KEYS", "DEFAULT_CHUNK_SIZE", "PyArrowRemoteStorageManager"]
