"""The listener and socket keys (Kafka's ``SocketServerConfigs``), and the parsing of
``listeners`` / ``advertised.listeners`` into :class:`Endpoint` values.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tierlog.errors import ConfigError
from tierlog.security.security_config import SECURITY_PROTOCOLS
from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import define as _d
from tierlog.server.config_def import ignored as _ignored

__all__ = [
    "DEFAULT_SECURITY_PROTOCOL_MAP",
    "SOCKET_SERVER_CONFIGS",
    "Endpoint",
    "advertised_host",
    "parse_endpoints",
    "parse_protocol_map",
]

DEFAULT_SECURITY_PROTOCOL_MAP = (
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
)

# fmt: off
SOCKET_SERVER_CONFIGS: tuple[BrokerConfigDef, ...] = (
    _d("listeners", "list", ("PLAINTEXT://127.0.0.1:9092",), None,
       "Listeners NAME://host:port (empty host: every interface, port 0: any free port)."),
    _d("advertised.listeners", "list", None, None,
       "Addresses given to clients in Metadata; defaults to listeners."),
    _d("listener.security.protocol.map", "list", tuple(DEFAULT_SECURITY_PROTOCOL_MAP.split(",")),
       None, "Listener name -> security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."),
    _d("socket.request.max.bytes", "int", 104_857_600, _min(1),
       "Largest request frame; a bigger one closes its connection."),
    _d("socket.send.buffer.bytes", "int", 102_400, None, "SO_SNDBUF; -1 keeps the OS default."),
    _d("socket.receive.buffer.bytes", "int", 102_400, None, "SO_RCVBUF; -1: the OS default."),
    _ignored("num.network.threads", "int", 3, _min(1), "one asyncio loop serves all sockets"),
)
# fmt: on

_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://\[?([0-9A-Za-z\-%._:]*?)\]?:(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: ``listener_name://host:port`` and its security protocol.

    An empty host binds every interface (Kafka's ``PLAINTEXT://:9092``); port 0 binds an
    ephemeral port (the server reports the real one).
    """

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


def parse_endpoints(
    key: str, specs: Iterable[str], protocol_map: Mapping[str, str]
) -> tuple[Endpoint, ...]:
    """The ``NAME://host:port`` specs of ``key`` as endpoints, each with its protocol.

    Raises:
        ConfigError: a malformed spec, a port out of range, a listener name without a
            security protocol, or a name used twice (keyed by ``key``).
    """
    out: list[Endpoint] = []
    for spec in specs:
        m = _LISTENER_RE.match(spec)
        if m is None:
            raise ConfigError(key, f"invalid listener {spec!r}: expected NAME://host:port")
        name, host, port_s = m.group(1).upper(), m.group(2), m.group(3)
        port = int(port_s)
        if not 0 <= port <= 65535:
            raise ConfigError(key, f"invalid listener {spec!r}: port must be 0..65535")
        protocol = protocol_map.get(name, name if name in SECURITY_PROTOCOLS else "")
        if not protocol:
            raise ConfigError(
                key,
                f"listener {spec!r}: no security protocol for listener name {name}; "
                "map it in listener.security.protocol.map",
            )
        if any(e.listener_name == name for e in out):
            raise ConfigError(key, f"listener name {name} is used more than once")
        out.append(Endpoint(name, host, port, protocol))
    return tuple(out)


def parse_protocol_map(items: Iterable[str]) -> dict[str, str]:
    """``listener.security.protocol.map`` entries ``NAME:PROTOCOL`` as a dict.

    Raises:
        ConfigError: an entry without ``:`` or with an unknown protocol.
    """
    out: dict[str, str] = {}
    for item in items:
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or proto not in SECURITY_PROTOCOLS:
            raise ConfigError(
                "listener.security.protocol.map",
                f"invalid entry {item!r}: expected NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(SECURITY_PROTOCOLS)}",
            )
        out[name] = proto
    return out


def advertised_host(host: str) -> str:
    """Kafka advertises the canonical host name for a listener bound to every interface."""
    if host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return host
