"""``tierlog serve`` as a real child process, for the integration and Spark tests.

Ports: the first start listens on a port chosen free *below the kernel's ephemeral range*
(:func:`listen_port`), and a restart binds that same port again so clients keep their
bootstrap address. Not port 0: the kernel picks that from the ephemeral range, the range it
also gives every outgoing connection its local port from, so while the broker was down a
client reconnecting to it could be given that very port (or connect to itself on it, TCP's
simultaneous open) and hold it, and the restart failed with "address already in use". Below
the range no connection is ever given the port. A start that still finds the port taken
retries: another port on a first start, the same one a little later on a restart. Readiness
is the broker's own "tierlog broker started ... listening on HOST:PORT" line, read from the
log written since *this* start: "something accepts on the port" could be another process,
or the previous broker still closing.

``metrics=True`` gives the broker a ``metrics.port`` chosen free (:func:`listen_port`;
Prometheus' server cannot take port 0: 0 turns it off); when the port was taken in between,
the start is retried with another.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests import real_parts

ROOT = Path(__file__).resolve().parents[1]

_STARTED = re.compile(r"tierlog broker started in [\d.]+s: .* listening on [^,\s]+:(\d+)")
_ADDRESS_IN_USE = "address already in use"


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def listen_port() -> int:
    """A port free right now below the ephemeral range (see the module's docstring), for a
    listener that must keep its port across restarts. Another process may bind it before the
    listener does: callers retry on "address in use"."""
    high = _ephemeral_low() - 1
    low = max(1024, high - 12_000)
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}-{high}")


class BrokerProcess:
    """A ``tierlog serve`` child process with its own log dir; the port is the kernel's pick
    on the first start (or ``port``), kept across restarts."""

    # Overrides every broker of this kind gets, before the caller's (which win).
    defaults: tuple[str, ...] = ()

    def __init__(
        self,
        workdir: Path,
        *overrides: str,
        port: int | None = None,
        module: str = "tierlog.cli",
        env: dict[str, str] | None = None,
        metrics: bool = False,
        nofile: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.module = module
        self.env = dict(env or {})
        self.log_dir = workdir / "logs"
        self.port = port
        self._port_given = port is not None  # the caller's port: never replaced
        self.metrics_port: int | None = None
        self._metrics = metrics
        self.nofile = nofile  # RLIMIT_NOFILE (soft and hard) of the process, when set
        self.extra_overrides = [f"log.dirs={self.log_dir}", *self.defaults, *overrides]
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_overrides: list[str] = []  # what the latest start was given
        self.log_path = workdir / "broker.log"
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        assert self.port is not None, "the broker has not started yet"
        return f"127.0.0.1:{self.port}"

    @property
    def overrides(self) -> list[str]:
        listen = [f"listeners=PLAINTEXT://127.0.0.1:{self.port or 0}"]
        metrics = [f"metrics.port={self.metrics_port}"] if self.metrics_port else []
        return [*listen, *metrics, *self.extra_overrides]

    def start(self, timeout: float = 60.0) -> None:
        """Launch and wait for readiness, retrying a start whose port was taken (a metrics
        port or a first start's listener port: another one; a restart's: the same one, for
        up to ~10 s)."""
        first = self.starts == 0 and not self._port_given
        for attempt in range(10):
            if first and (attempt > 0 or self.port is None):
                self.port = listen_port()
            if self._metrics and (attempt > 0 or self.metrics_port is None):
                self.metrics_port = listen_port()
            since = self._launch()
            try:
                self._wait_started(since, timeout, proposal=first)
                return
            except RuntimeError:
                self.kill()  # reaped whatever happened: no process left running or unwaited
                text = self._log_since(since).lower()
                if _ADDRESS_IN_USE not in text:
                    raise
                if not first:
                    time.sleep(1.0)  # a restart keeps its port: whoever holds it may let go
        raise RuntimeError(f"broker could not bind its ports after 10 tries:\n{self.tail()}")

    def _launch(self) -> int:
        """Start the process; the log file's size before its first line."""
        args = [sys.executable, "-m", self.module, "serve"]
        self.started_overrides = self.overrides
        for o in self.started_overrides:
            args += ["--override", o]
        env = dict(os.environ)
        env.setdefault("TIERLOG_LOG_LEVEL", "INFO")
        if env["TIERLOG_LOG_LEVEL"].upper() not in ("INFO", "DEBUG"):
            raise ValueError("readiness is the INFO line 'tierlog broker started': keep INFO")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.update(self.env)
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts} =====\n".encode())
            log.flush()
            since = log.tell()
            self.proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                preexec_fn=self._limit if self.nofile is not None else None,
            )
        real_parts.used("broker process", f"{self.module} serve ({sys.executable})")
        return since

    def _limit(self) -> None:
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def open_fds(self) -> int:
        """Descriptors the running broker holds now."""
        assert self.proc is not None
        return len(list(Path(f"/proc/{self.proc.pid}/fd").iterdir()))

    def _log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def _wait_started(self, since: int, timeout: float, proposal: bool = False) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exited = self.proc.poll() is not None
            m = _STARTED.search(self._log_since(since))
            if m is not None and not exited:
                bound = int(m.group(1))
                # A first start's chosen port is only a proposal: a subclass whose listeners
                # ignore it (SASL/TLS listeners on port 0) keeps the kernel's pick.
                assert proposal or self.port in (None, bound), (
                    f"asked for port {self.port}, got {bound}"
                )
                self.port = bound
                return
            if exited:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode} during startup:\n{self.tail()}"
                )
            time.sleep(0.05)
        raise RuntimeError(f"broker did not start within {timeout}s:\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the broker and wait; its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"broker did not stop on signal {sig}:\n{self.tail()}") from None
        return int(self.proc.returncode)

    def kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_since_start(self) -> str:
        """The log written since the latest start (each start writes a "===== start #N ====="
        line first): what this run of the broker said, not an earlier one."""
        text = self.log_text()
        marker = f"===== start #{self.starts} ====="
        assert marker in text, f"no {marker!r} in the broker log"
        return text[text.rindex(marker) :]


@contextlib.contextmanager
def running_broker(
    workdir: Path,
    *overrides: str,
    port: int | None = None,
    cls: type[BrokerProcess] = BrokerProcess,
    **kw: Any,
) -> Iterator[BrokerProcess]:
    workdir.mkdir(parents=True, exist_ok=True)
    b = cls(workdir, *overrides, port=port, **kw)
    b.start()
    try:
        yield b
    finally:
        if b.alive():
            with contextlib.suppress(RuntimeError):
                b.stop()
