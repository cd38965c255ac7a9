"""The node's own keys (Kafka's ``ServerConfigs`` and ``KRaftConfigs``): identity and roles,
the I/O pool, the rack, topic deletion, controlled shutdown, and tierlog's observability
endpoints (``metrics.port``, ``console.listener``).
"""

from __future__ import annotations

from typing import Any

from tierlog.console.console_server import parse_console_listener
from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import between as _between
from tierlog.server.config_def import define as _d
from tierlog.server.config_def import ignored as _ignored

__all__ = ["SERVER_CONFIGS", "SINGLE_NODE"]

#: Why a multi-node KRaft key is ignored.
SINGLE_NODE = "tierlog is a single node"


def _roles(v: Any) -> str | None:
    bad = [r for r in v if r not in ("broker", "controller")]
    return f"unknown role {', '.join(bad)}; use broker and/or controller" if bad else None


def _console_listener(v: Any) -> str | None:
    if v is None:
        return None
    try:
        parse_console_listener(v)
    except ValueError as e:
        return str(e)
    return None


# fmt: off
SERVER_CONFIGS: tuple[BrokerConfigDef, ...] = (
    # --- identity and roles (single node: broker and controller at once)
    _d("node.id", "int", None, None, "This node's id (KRaft name of broker.id). Default 0."),
    _d("broker.id", "int", None, None, "Synonym of node.id; both must agree when both are set."),
    _ignored("process.roles", "list", (), _roles, "a tierlog node is broker and controller"),
    _ignored("controller.quorum.voters", "list", (), None, SINGLE_NODE),
    _ignored("controller.quorum.bootstrap.servers", "list", (), None, SINGLE_NODE),
    _d("controller.listener.names", "list", (), None,
       "Listeners of the KRaft controller; not served (tierlog has no separate controller)."),
    _d("num.io.threads", "int", 8, _min(1), "Threads of the pool that runs blocking log I/O."),
    _d("broker.rack", "string", None, None, "Rack of this broker (rack-aware assignment)."),
    _d("controlled.shutdown.enable", "boolean", True, None,
       "On SIGTERM, move leadership away before stopping."),
    _d("controlled.shutdown.max.retries", "int", 3, _min(0),
       "Attempts of a controlled shutdown before shutting down anyway."),
    _d("controlled.shutdown.retry.backoff.ms", "long", 5000, _min(0),
       "Wait between controlled shutdown attempts."),
    _d("delete.topic.enable", "boolean", True, None, "Allow DeleteTopics."),
    _d("metrics.port", "int", None, _between(0, 65535),
       "tierlog: port of the Prometheus /metrics endpoint (unset: no endpoint)."),
    _d("console.listener", "string", None, _console_listener,
       "tierlog: http://host:port of the read-only web console (unset: no console). It has "
       "no authentication: keep it on loopback or behind an authenticating proxy."),
)
# fmt: on
