"""A real Apache ZooKeeper server (Debian's ``zookeeper`` package, 3.8) for the tests.

Standalone, on 127.0.0.1, data in its own directory, ``tickTime`` 250 ms so sessions can be
short (ZooKeeper grants at least 2 ticks, 500 ms; at most 60 s, set so a broker's default 18 s
is granted as asked), the admin HTTP server off, and the ``srvr``/``ruok``/``stat``
four-letter words on (``srvr`` is the readiness check: it answers only once the server
serves clients).

Known server bug (3.8.0): a client connection that arrives while a (re)starting server
loads its database is neither answered nor closed (an NPE in ``NIOServerCnxn.close``), so
that client waits out its handshake timeout (kazoo: the session timeout) and its session may
expire meanwhile. Tests that restart the server allow for it.

ZooKeeper cannot listen on port 0, so :meth:`ZooKeeperProcess.start` picks a free port and
starts again on another when the JVM exits because the port was taken in between
(tests/README.md, "Ports"). A restart keeps the port and the data, so sessions survive a
short :meth:`stop`/:meth:`start` the way they survive a real server restart.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
# zookeeper.jar's manifest carries its Class-Path (netty, jute, commons-*); it ships no
# slf4j binding, so add the simple one (libslf4j-java, a dependency of the package).
SLF4J_BINDING = JAVA_DIR / "slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
TICK_TIME_MS = 250


def java() -> str | None:
    return shutil.which("java")


def available() -> str | None:
    """Why ZooKeeper cannot run here, or None when it can."""
    if java() is None:
        return "no java on PATH (apt-get install openjdk-17-jre-headless)"
    if not ZOOKEEPER_JAR.exists():
        return f"no {ZOOKEEPER_JAR} (apt-get install zookeeper)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter_word(port: int, word: str, timeout: float = 2.0) -> str:
    """Send a four-letter command to the server and return its answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def expire_session(connect_string: str, client_id: tuple[int, bytes]) -> None:
    """Make the server expire the session ``client_id`` (kazoo's ``client_id``: session id and
    password) for real: another connection takes the session over and closes it, as a session
    whose owner paused past its timeout ends. The owner then sees its session expired (kazoo:
    LOST, then CONNECTED with a new session)."""
    from kazoo.client import KazooClient

    other = KazooClient(hosts=connect_string, client_id=client_id, timeout=10)
    other.start(timeout=30)
    other.stop()
    other.close()


class ZooKeeperExited(RuntimeError):
    """The JVM exited while starting (the port was taken, a bad config)."""


class ZooKeeperProcess:
    """One standalone ZooKeeper server under ``root``. Not thread-safe."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.log_path = root / "zookeeper.log"
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.version = ""

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:<port>``, Kafka's ``zookeeper.connect`` without a chroot."""
        if self.port is None:
            raise RuntimeError("ZooKeeper was never started")
        return f"127.0.0.1:{self.port}"

    def _write_config(self, port: int) -> Path:
        cfg = self.root / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={TICK_TIME_MS}",
                    "maxSessionTimeout=60000",
                    f"dataDir={self.data_dir}",
                    f"clientPort={port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr,ruok,stat",
                    "maxClientCnxns=0",
                    # keep the test's data dir small: purge snapshots as it goes
                    "autopurge.purgeInterval=1",
                    "",
                ]
            )
        )
        return cfg

    def start(self, timeout: float = 60.0) -> None:
        """Start the server (on its old port when restarted) and wait until it serves.

        Raises:
            RuntimeError: it did not come up in 3 attempts (the log's tail is in the message).
        """
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("ZooKeeper is already running")
        self.root.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        restart = self.port is not None
        for attempt in range(3):
            port = self.port if restart and self.port is not None else _free_port()
            cfg = self._write_config(port)
            with open(self.log_path, "ab") as out:
                out.write(f"\n===== start #{attempt + 1} on port {port} =====\n".encode())
                out.flush()
                self.process = subprocess.Popen(
                    [
                        java() or "java",
                        "-Xmx256m",
                        "-XX:+UseSerialGC",
                        "-cp",
                        f"{ZOOKEEPER_JAR}:{SLF4J_BINDING}",
                        "-Dzookeeper.jmx.log4j.disable=true",
                        MAIN_CLASS,
                        str(cfg),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.root,
                )
            self.port = port
            try:
                self._wait_serving(time.monotonic() + timeout)
                return
            except ZooKeeperExited:
                self.process = None
                if restart:
                    time.sleep(0.5)  # our old port, still in TIME_WAIT or taken: try it again
                    continue
                self.port = None  # the port was taken in between: choose another
        tail = self.log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"ZooKeeper did not start in 3 attempts:\n{tail}")

    def _wait_serving(self, deadline: float) -> None:
        last: Exception | None = None
        assert self.process is not None and self.port is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperExited(f"ZooKeeper exited with {self.process.returncode}")
            try:
                answer = four_letter_word(self.port, "srvr")
                if answer.startswith("Zookeeper version:"):
                    self.version = answer.splitlines()[0].split(":", 1)[1].split("-")[0].strip()
                    return
            except OSError as e:
                last = e
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper did not serve on port {self.port} in time: {last}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; sessions stay in the data dir (a restart)."""
        proc = self.process
        if proc is None:
            return
        self.resume()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL: a crash."""
        proc = self.process
        if proc is None:
            return
        proc.kill()
        proc.wait()
        self.process = None

    def pause(self) -> None:
        """SIGSTOP: the server hangs with its connections open (a GC pause, a partition)."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)

    def __enter__(self) -> ZooKeeperProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
