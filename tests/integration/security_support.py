"""Brokers with secure listeners (certificates: tests/security/pki.py).

:class:`SecureBroker` is a ``tierlog serve`` process with the listeners it is given (name and
protocol), each on a port of the kernel's choosing; :meth:`SecureBroker.bootstrap_of` gives a
listener's address, read from the "listening on" line of this start.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.conftest import BrokerProcess
from tests.security.pki import CLIENT_DN, KEY_PASSWORD, KEYSTORE_PASSWORD, Pki, make_pki

__all__ = ["CLIENT_DN", "KEYSTORE_PASSWORD", "KEY_PASSWORD", "Pki", "SecureBroker", "make_pki"]


_LISTENING = re.compile(r"tierlog broker started in [\d.]+s: .* listening on (.*?), advertising")


class SecureBroker(BrokerProcess):
    """A broker with the given listeners (``{"SASL_SSL": "SASL_SSL", "EXTERNAL": "SSL"}``:
    name → protocol), each on a port the kernel picks at the first start and kept after."""

    def __init__(self, workdir: Path, listeners: dict[str, str], *overrides: str) -> None:
        self.listener_protocols = dict(listeners)
        self.ports: dict[str, int] = {}
        mapping = ",".join(f"{n}:{p}" for n, p in listeners.items())
        super().__init__(workdir, f"listener.security.protocol.map={mapping}", *overrides)

    @property
    def overrides(self) -> list[str]:
        spec = ",".join(f"{n}://127.0.0.1:{self.ports.get(n, 0)}" for n in self.listener_protocols)
        return [f"listeners={spec}", *self.extra_overrides]

    def start(self, timeout: float = 60.0) -> None:
        super().start(timeout)
        m = _LISTENING.search(self.log_since_start())
        assert m is not None, self.tail()
        addresses = [a.strip() for a in m.group(1).split(",")]
        self.ports = {
            n: int(a.rsplit(":", 1)[1])
            for n, a in zip(self.listener_protocols, addresses, strict=True)
        }

    def bootstrap_of(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"
