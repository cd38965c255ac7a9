"""tierlog.protocol: the Kafka wire protocol, sans-IO, over kio's generated messages.

No sockets, no asyncio, no files: bytes in, request events out, response bytes back (h11's
shape). See :mod:`tierlog.protocol.connection` for the server loop and
:mod:`tierlog.protocol.client_connection` for the client side.
"""

from tierlog.protocol._events import NEED_DATA, ConnectionClosed, RequestEvent
from tierlog.protocol.api_versions import (
    ADVERTISED,
    ApiKey,
    advertised,
    api_name,
    api_versions_response,
    implemented_min,
    is_advertised,
    request_class,
    response_class,
)
from tierlog.protocol.client_connection import ClientConnection, convert_entity
from tierlog.protocol.connection import DEFAULT_MAX_FRAME_SIZE, ServerConnection
from tierlog.protocol.errors import error_code_of, error_response, error_response_for

__all__ = [
    # connection
    "ServerConnection",
    "RequestEvent",
    "ConnectionClosed",
    "NEED_DATA",
    "DEFAULT_MAX_FRAME_SIZE",
    "ClientConnection",
    "convert_entity",
    # versions
    "ApiKey",
    "ADVERTISED",
    "advertised",
    "api_name",
    "api_versions_response",
    "implemented_min",
    "is_advertised",
    "request_class",
    "response_class",
    # errors
    "error_code_of",
    "error_response",
    "error_response_for",
]
