"""``tierlog cluster`` (``make cluster``): a local ZooKeeper and three brokers, for development.

Layout under the data dir (``./data/cluster`` by default)::

    zookeeper/            zoo.cfg, data/, zookeeper.log
    broker-<id>/          server.properties (what the broker runs with), broker.log, logs/

Each broker is ``tierlog serve --config broker-<id>/server.properties`` (plus the ``--override``
pairs given here) as a child process: ``broker.id`` 1..n, its own ``log.dirs``, a listener on
127.0.0.1:9092, 9093, 9094, ``zookeeper.connect`` with the chroot ``/tierlog``, replication
factor 3 for new topics and ``__consumer_offsets``, ``min.insync.replicas=2``. The files are
written afresh at each start, so they show what a broker of a real cluster needs.

Stopping (Ctrl-C or SIGTERM to this process): the brokers one after another with SIGTERM, so
each does a controlled shutdown (leadership moves to the brokers still up; stopping them all
at once would leave each waiting for the others), then ZooKeeper. A second Ctrl-C kills the
brokers still running. The children run in sessions of their own, so the terminal's Ctrl-C
reaches only this process, which keeps that order; they get SIGTERM if it dies.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.tools import zookeeper_server
from tierlog.tools.zookeeper_server import ZooKeeperServer

__all__ = ["BrokerChild", "LocalCluster", "add_subcommand", "broker_properties"]

DEFAULT_PORTS = (9092, 9093, 9094)
DEFAULT_ZOOKEEPER_PORT = 2181
CHROOT = "/tierlog"

_STARTED = re.compile(r"tierlog broker started in [\d.]+s: .* listening on [^,\s]+:(\d+)")
_PR_SET_PDEATHSIG = 1


def _child_setup() -> None:
    """In the child, before exec: a session of its own (a terminal's Ctrl-C goes to the
    foreground process group; the launcher decides the order of shutdown), and SIGTERM when
    the launcher dies, so no broker outlives it unnoticed."""
    os.setsid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the children outlive a killed launcher
        pass


def broker_properties(
    broker_id: int,
    *,
    host: str,
    port: int,
    log_dir: Path,
    zookeeper_connect: str,
    brokers: int,
) -> str:
    """``server.properties`` of one broker of the local cluster."""
    rf = min(3, brokers)
    min_isr = 2 if rf >= 3 else 1
    return "\n".join(
        [
            f"# Broker {broker_id} of `tierlog cluster`'s local cluster (written at each start).",
            f"broker.id={broker_id}",
            f"log.dirs={log_dir}",
            f"listeners=PLAINTEXT://{host}:{port}",
            f"advertised.listeners=PLAINTEXT://{host}:{port}",
            f"zookeeper.connect={zookeeper_connect}",
            "# Every new topic (and __consumer_offsets) on three brokers; acks=all needs two.",
            f"default.replication.factor={rf}",
            f"offsets.topic.replication.factor={rf}",
            f"min.insync.replicas={min_isr}",
            "# A consumer group starts at once (Kafka waits 3 s for more members by default).",
            "group.initial.rebalance.delay.ms=0",
            "",
        ]
    )


@dataclass
class BrokerChild:
    """One ``tierlog serve`` child of the launcher."""

    broker_id: int
    workdir: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    bound_port: int | None = None
    _since: int = 0
    reported: bool = field(default=False, repr=False)

    @property
    def config_path(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    def launch(self, overrides: list[str]) -> None:
        args = [sys.executable, "-m", "tierlog.cli", "serve", "--config", str(self.config_path)]
        for o in overrides:
            args += ["--override", o]
        env = dict(os.environ)
        env.setdefault("TIERLOG_LOG_LEVEL", "INFO")
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} start =====\n".encode())
            log.flush()
            self._since = log.tell()
            self.proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env=env,
                preexec_fn=_child_setup,
            )

    def log_since_start(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._since)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def started(self) -> bool:
        """Whether the broker said it is ready (and notes the port it bound)."""
        m = _STARTED.search(self.log_since_start())
        if m is None:
            return False
        self.bound_port = int(m.group(1))
        return True

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 25) -> str:
        return "\n".join(self.log_since_start().splitlines()[-n:])


class LocalCluster:
    """ZooKeeper and ``len(ports)`` brokers under ``data_dir``; messages go to ``say``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        ports: tuple[int, ...] = DEFAULT_PORTS,
        zookeeper_port: int = DEFAULT_ZOOKEEPER_PORT,
        overrides: list[str] | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.host = host
        self.overrides = list(overrides or [])
        self.say = say or (lambda line: print(f"tierlog cluster: {line}", flush=True))
        self.zookeeper = ZooKeeperServer(
            self.data_dir / "zookeeper",
            zookeeper_port or None,  # 0: a free port
            host=host,
            preexec_fn=_child_setup,
        )
        self.brokers = [
            BrokerChild(i, self.data_dir / f"broker-{i}", port)
            for i, port in enumerate(ports, start=1)
        ]
        self._stop = threading.Event()
        self._hurry = threading.Event()

    @property
    def zookeeper_connect(self) -> str:
        return f"{self.zookeeper.connect_string}{CHROOT}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{b.bound_port or b.port}" for b in self.brokers)

    # ----------------------------------------------------------------- signals

    def install_signal_handlers(self) -> None:
        def on_signal(signum: int, _frame: object) -> None:
            if self._stop.is_set():
                if not self._hurry.is_set():
                    self.say("stopping already; killing the brokers still running")
                self._hurry.set()
            self._stop.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

    def request_stop(self) -> None:
        self._stop.set()

    # ----------------------------------------------------------------- start

    def start(self, timeout: float = 120.0) -> bool:
        """Start ZooKeeper, then every broker; True once all serve, False when a stop was
        requested meanwhile. Raises RuntimeError when a part does not come up."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.say(f"starting ZooKeeper ({self.zookeeper.root}) ...")
        self.zookeeper.start()
        self.say(
            f"ZooKeeper {self.zookeeper.version} serving on {self.zookeeper.connect_string} "
            f"(pid {self.zookeeper.pid})"
        )
        for b in self.brokers:
            (b.workdir / "logs").mkdir(parents=True, exist_ok=True)
            b.config_path.write_text(
                broker_properties(
                    b.broker_id,
                    host=self.host,
                    port=b.port,
                    log_dir=b.workdir / "logs",
                    zookeeper_connect=self.zookeeper_connect,
                    brokers=len(self.brokers),
                )
            )
            b.launch(self.overrides)
        self.say(
            f"starting {len(self.brokers)} brokers (logs: {self.data_dir}/broker-*/broker.log) ..."
        )
        deadline = time.monotonic() + timeout
        waiting = list(self.brokers)
        while waiting:
            if self._stop.is_set():
                return False
            for b in list(waiting):
                if b.started():
                    waiting.remove(b)
                    assert b.proc is not None
                    self.say(
                        f"broker {b.broker_id} up on {self.host}:{b.bound_port} (pid {b.proc.pid})"
                    )
                elif not b.alive():
                    assert b.proc is not None
                    raise RuntimeError(
                        f"broker {b.broker_id} exited with {b.proc.returncode} during startup; "
                        f"the end of {b.log_path}:\n{b.tail()}"
                    )
            if time.monotonic() > deadline:
                names = ", ".join(str(b.broker_id) for b in waiting)
                raise RuntimeError(f"brokers {names} did not start within {timeout:.0f} s")
            self._stop.wait(0.1)
        return True

    def announce(self) -> None:
        self.say("ready")
        print(f"  bootstrap.servers={self.bootstrap}", flush=True)
        print(f"  zookeeper.connect={self.zookeeper_connect}", flush=True)
        print(f"  data and logs: {self.data_dir}", flush=True)
        first = f"{self.host}:{self.brokers[0].bound_port}"
        print(f"  try: tierlog topics create demo -b {first} --partitions 3", flush=True)
        print(f"       tierlog topics describe demo -b {first}", flush=True)
        print("  Ctrl-C stops the brokers (controlled shutdown), then ZooKeeper", flush=True)

    # ----------------------------------------------------------------- run

    def watch(self) -> None:
        """Until a stop is requested: say when a child exits by itself (a crash, a kill -9 to
        try failover); the others keep running."""
        while not self._stop.wait(0.5):
            for b in self.brokers:
                if not b.alive() and not b.reported:
                    b.reported = True
                    assert b.proc is not None
                    self.say(
                        f"broker {b.broker_id} exited with {b.proc.returncode} "
                        f"(log: {b.log_path}); the others keep running"
                    )
            if not self.zookeeper.alive():
                self.say(f"ZooKeeper exited (log: {self.zookeeper.log_path}); stopping")
                self._stop.set()

    def stop(self, broker_timeout: float = 60.0) -> int:
        """Brokers one by one (SIGTERM, then SIGKILL after ``broker_timeout`` or a second
        Ctrl-C), then ZooKeeper. The number of brokers that did not stop cleanly."""
        unclean = 0
        for b in self.brokers:
            proc = b.proc
            if proc is None:
                continue
            if proc.poll() is None:
                self.say(f"stopping broker {b.broker_id} (controlled shutdown) ...")
                t0 = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                while proc.poll() is None:
                    if self._hurry.is_set() or time.monotonic() - t0 > broker_timeout:
                        proc.kill()
                    try:
                        proc.wait(0.1)
                    except subprocess.TimeoutExpired:
                        pass
                rc = proc.returncode
                self.say(
                    f"broker {b.broker_id} stopped in {time.monotonic() - t0:.1f} s (exit {rc})"
                )
            else:
                rc = proc.returncode
            if rc != 0:
                unclean += 1
        if self.zookeeper.alive():
            self.say("stopping ZooKeeper ...")
        self.zookeeper.stop()
        self.say("stopped")
        return unclean


def _ports(text: str) -> tuple[int, ...]:
    try:
        ports = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ports: {text!r}") from None
    if not ports or any(not 0 <= p <= 65535 for p in ports):
        raise argparse.ArgumentTypeError(f"ports must be 0..65535: {text!r}")
    if len({p for p in ports if p}) != len([p for p in ports if p]):
        raise argparse.ArgumentTypeError(f"a port is repeated: {text!r}")
    return ports


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "cluster",
        help="run a local ZooKeeper and three brokers (make cluster)",
        description="Start a local ZooKeeper and a broker per port (ids 1, 2, 3, ...) with "
        "replication factor 3, each with its own log dir under --data-dir; Ctrl-C stops the "
        "brokers one by one (controlled shutdown), then ZooKeeper. Installs Debian's "
        "zookeeper package when it is missing and this runs as root.",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path("data/cluster"),
        metavar="DIR",
        help="where ZooKeeper and the brokers keep everything (default: ./data/cluster)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument(
        "--ports",
        type=_ports,
        default=DEFAULT_PORTS,
        metavar="P1,P2,...",
        help="one broker per port (default: 9092,9093,9094; 0: a free port)",
    )
    p.add_argument(
        "--zookeeper-port",
        type=int,
        default=DEFAULT_ZOOKEEPER_PORT,
        metavar="PORT",
        help=f"ZooKeeper's client port (default: {DEFAULT_ZOOKEEPER_PORT}; 0: a free port)",
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting for every broker (repeatable), as for tierlog serve",
    )
    p.add_argument(
        "--no-install",
        action="store_true",
        help="never install ZooKeeper; say what to install instead",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(f"tierlog cluster: {line}", flush=True)

    if args.no_install:
        why = zookeeper_server.available()
    else:
        why = zookeeper_server.ensure_installed(say)
    if why is not None:
        print(f"tierlog cluster: cannot run ZooKeeper: {why}", file=sys.stderr)
        return 1
    cluster = LocalCluster(
        args.data_dir,
        host=args.host,
        ports=args.ports,
        zookeeper_port=args.zookeeper_port,
        overrides=args.override,
        say=say,
    )
    cluster.install_signal_handlers()
    try:
        if cluster.start():
            cluster.announce()
            cluster.watch()
    except RuntimeError as e:
        print(f"tierlog cluster: {e}", file=sys.stderr)
        cluster.stop()
        return 1
    finally:
        if not cluster._stop.is_set():
            cluster.request_stop()
    unclean = cluster.stop()
    return 0 if unclean == 0 else 1
