"""A local Apache ZooKeeper server (Debian's ``zookeeper`` package, 3.8) as a child process.

The one way tierlog starts ZooKeeper: ``tierlog cluster`` (``make cluster``), the tests'
``zookeeper`` fixtures (tests/zookeeper_process.py) and bench/bench_cluster.py all use
:class:`ZooKeeperServer`.

How: ``java -cp /usr/share/java/zookeeper.jar:slf4j-simple.jar QuorumPeerMain zoo.cfg``, a
standalone server listening on one address, data in its own directory, the admin HTTP server
off, the ``srvr``/``ruok``/``stat`` four-letter words on. ``srvr`` is the readiness check: it
answers only once the server serves clients. ``zookeeper.jar``'s manifest carries its
Class-Path (netty, jute, commons-*); it ships no slf4j binding, so the simple one is added
(``libslf4j-java``, a dependency of the package).

Sessions: ZooKeeper grants a session timeout between 2 and 20 ``tickTime`` unless
``maxSessionTimeout`` says otherwise; the defaults here (tick 500 ms, at most 60 s) grant a
broker's 18 s default as asked, and any timeout down to 1 s.

Why a 500 ms tick, not ZooKeeper's example 2000: the session is the cluster's failure
detector, and ZooKeeper expires sessions in buckets of one tick, so a SIGKILLed broker's
session ends up to one tick after ``zookeeper.session.timeout.ms``. With 2000 that rounding
alone used up the whole 2 s a failover may take past the timeout (bench/bench_cluster.py:
worst 8.03 s from SIGKILL to the new leader's first acks=all ack at a 6 s timeout, against
6.02 s at 500). The cost is a server-side timer firing 4 times a second.

ZooKeeper cannot listen on port 0: without a port, :meth:`ZooKeeperServer.start` picks a free
one and starts again on another when the JVM exits because it was taken in between. A restart
keeps the port and the data, so sessions survive a short :meth:`~ZooKeeperServer.stop` /
:meth:`~ZooKeeperServer.start` the way they survive a real server restart.

Known server bug (3.8.0): a client connection that arrives while a (re)starting server loads
its database is neither answered nor closed (an NPE in ``NIOServerCnxn.close``), so that client
waits out its handshake timeout and its session may expire meanwhile.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "DEFAULT_TICK_TIME_MS",
    "INSTALL_HINT",
    "MAIN_CLASS",
    "SLF4J_BINDING",
    "ZOOKEEPER_JAR",
    "ZooKeeperExited",
    "ZooKeeperServer",
    "available",
    "ensure_installed",
    "four_letter_word",
    "java",
]

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
SLF4J_BINDING = JAVA_DIR / "slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: ``tickTime`` of the servers started here (see the module's docstring for why not 2000).
DEFAULT_TICK_TIME_MS = 500

#: What to install, in the words of the machine's package manager (Debian, Ubuntu).
INSTALL_HINT = "sudo apt-get install zookeeper  (Debian/Ubuntu; it brings Java with it)"


def java() -> str | None:
    return shutil.which("java")


def available() -> str | None:
    """Why ZooKeeper cannot run here (with what to install), or None when it can."""
    if not ZOOKEEPER_JAR.exists():
        return f"no {ZOOKEEPER_JAR}: install Debian's ZooKeeper 3.8: {INSTALL_HINT}"
    if java() is None:
        return "no java on PATH: sudo apt-get install openjdk-17-jre-headless"
    return None


def ensure_installed(say: Callable[[str], None] = print) -> str | None:
    """Install Debian's ``zookeeper`` (and so Java) with apt-get when it is missing and this
    process can (root, apt-get on PATH). Returns None when ZooKeeper can run now, otherwise
    why not, with exactly what to install."""
    why = available()
    if why is None:
        return None
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        how = "not root" if apt is not None else "no apt-get here"
        return f"{why} ({how}, so not installing it myself)"
    packages = ["zookeeper"] if not ZOOKEEPER_JAR.exists() else ["openjdk-17-jre-headless"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    say(f"installing {' '.join(packages)} with apt-get ...")
    install = [apt, "install", "-y", "-q", *packages]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        # A fresh machine has no package lists yet.
        subprocess.run([apt, "update", "-q"], env=env, check=False)
        subprocess.run(install, env=env, check=False)
    return available()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def four_letter_word(port: int, word: str, host: str = "127.0.0.1", timeout: float = 2.0) -> str:
    """Send a four-letter command to the server and return its answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


class ZooKeeperExited(RuntimeError):
    """The JVM exited while starting (the port was taken, a bad config)."""


class ZooKeeperServer:
    """One standalone ZooKeeper server with its config, data and log under ``root``.

    ``port`` None picks a free one on the first start (kept across restarts). Not
    thread-safe."""

    def __init__(
        self,
        root: Path,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        tick_time_ms: int = DEFAULT_TICK_TIME_MS,
        max_session_timeout_ms: int = 60000,
        heap: str = "256m",
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.data_dir = self.root / "data"
        self.log_path = self.root / "zookeeper.log"
        self.config_path = self.root / "zoo.cfg"
        self.host = host
        self.port = port
        self._fixed_port = port is not None
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heap = heap
        #: Run in the child before exec (``tierlog cluster``: a session of its own, so a
        #: terminal's Ctrl-C reaches only the launcher, which stops ZooKeeper last).
        self.preexec_fn = preexec_fn
        self.process: subprocess.Popen[bytes] | None = None
        self.version = ""

    @property
    def connect_string(self) -> str:
        """``host:port``, Kafka's ``zookeeper.connect`` without a chroot."""
        if self.port is None:
            raise RuntimeError("ZooKeeper was never started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def config_text(self, port: int) -> str:
        return "\n".join(
            [
                f"tickTime={self.tick_time_ms}",
                f"maxSessionTimeout={self.max_session_timeout_ms}",
                f"dataDir={self.data_dir}",
                f"clientPort={port}",
                f"clientPortAddress={self.host}",
                "admin.enableServer=false",
                "4lw.commands.whitelist=srvr,ruok,stat,mntr",
                "maxClientCnxns=0",
                # keep the data dir small: purge old snapshots and transaction logs hourly
                "autopurge.purgeInterval=1",
                "",
            ]
        )

    def command(self) -> list[str]:
        return [
            java() or "java",
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-cp",
            f"{ZOOKEEPER_JAR}:{SLF4J_BINDING}",
            "-Dzookeeper.jmx.log4j.disable=true",
            MAIN_CLASS,
            str(self.config_path),
        ]

    def start(self, timeout: float = 60.0) -> None:
        """Start the server (on its old port when restarted) and wait until it serves.

        Raises:
            RuntimeError: it did not come up (the log's tail is in the message); with a port
                given by the caller, at the first failure (a port taken is the caller's to fix).
        """
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("ZooKeeper is already running")
        why = available()
        if why is not None:
            raise RuntimeError(why)
        self.root.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        keep_port = self.port is not None
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            port = self.port if keep_port and self.port is not None else free_port(self.host)
            self.config_path.write_text(self.config_text(port))
            with open(self.log_path, "ab") as out:
                out.write(f"\n===== start #{attempt + 1} on port {port} =====\n".encode())
                out.flush()
                self.process = subprocess.Popen(
                    self.command(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.root,
                    preexec_fn=self.preexec_fn,
                )
            self.port = port
            try:
                self._wait_serving(time.monotonic() + timeout)
                return
            except ZooKeeperExited:
                self.process = None
                if keep_port:
                    time.sleep(0.5)  # our old port, still in TIME_WAIT or taken: try it again
                    continue
                self.port = None  # the port was taken in between: choose another
        raise RuntimeError(
            f"ZooKeeper did not start on {self.host}:{self.port or '(a free port)'} "
            f"(is the port taken?); the end of {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _wait_serving(self, deadline: float) -> None:
        last: Exception | None = None
        assert self.process is not None and self.port is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperExited(f"ZooKeeper exited with {self.process.returncode}")
            try:
                answer = four_letter_word(self.port, "srvr", self.host)
                if answer.startswith("Zookeeper version:"):
                    self.version = answer.splitlines()[0].split(":", 1)[1].split("-")[0].strip()
                    return
            except OSError as e:
                last = e
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper did not serve on port {self.port} in time: {last}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; sessions stay in the data dir."""
        proc = self.process
        if proc is None:
            return
        self.resume()
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
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
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
