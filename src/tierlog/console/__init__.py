"""tierlog.console: the broker's read-only web console (``console.listener``).

Server-rendered HTML pages and a JSON API (``/api/...``) over the broker's state: brokers,
topics, each partition's local and remote segments on an offset timeline, tiering lag,
consumer groups with their lag, and a message browser by offset or timestamp that reads
remote segments through the broker's own fetch path.

The console reaches the broker only through :class:`BrokerView` (implemented in
``tierlog.server.console_view``) and never imports ``tierlog.server``. It has no
authentication: listen on loopback, or behind a proxy that authenticates.
"""

from tierlog.console.broker_view import BrokerView
from tierlog.console.console_server import ConsoleServer, parse_console_listener

__all__ = ["BrokerView", "ConsoleServer", "parse_console_listener"]
