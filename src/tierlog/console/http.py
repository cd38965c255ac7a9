"""The little HTTP/1.1 the console speaks, sans-IO: parse a request head, build a response.

Only what a browser and ``curl`` need for read-only pages: ``GET`` and ``HEAD``, no request
body, one request per connection (``Connection: close``). A request head is at most
:data:`MAX_HEAD_BYTES`; anything malformed raises :class:`HttpError` with the 4xx status to
answer. The asyncio loop around it is :mod:`tierlog.console.console_server`.

Pure functions over bytes; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import unquote

from tierlog.errors import TierlogError

__all__ = [
    "MAX_HEAD_BYTES",
    "HttpError",
    "HttpRequest",
    "HttpResponse",
    "parse_request_head",
    "split_path",
]

#: The largest request line plus headers accepted (431 beyond).
MAX_HEAD_BYTES = 16 * 1024


class HttpError(TierlogError):
    """A request the console refuses: ``status`` (4xx, or 503) and a message for the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    #: The raw path, still percent-encoded (split it with :func:`split_path`).
    path: str
    #: The raw query string (after ``?``), undecoded.
    query: str
    headers: tuple[tuple[str, str], ...]
    #: The peer's address (the ACLs' host), set by the listener.
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    content_type: str
    body: bytes
    extra_headers: tuple[tuple[str, str], ...] = ()

    def encode(self, *, head_only: bool = False) -> bytes:
        """The response's bytes (the headers only for a HEAD request)."""
        reason = HTTPStatus(self.status).phrase
        lines = [
            f"HTTP/1.1 {self.status} {reason}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            "Connection: close",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
            # Pages have no script; nothing else may load into them or frame them.
            "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; "
            "img-src 'self' data:; frame-ancestors 'none'",
            *(f"{k}: {v}" for k, v in self.extra_headers),
        ]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


def parse_request_head(head: bytes) -> HttpRequest:
    """Parse a request line and headers (``head`` ends with the blank line, or not).

    Raises:
        HttpError: 400 for a malformed head, 431 for one too long, 505 for another HTTP
            version.
    """
    if len(head) > MAX_HEAD_BYTES:
        raise HttpError(431, f"request head longer than {MAX_HEAD_BYTES} bytes")
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise HttpError(400, "request head is not ASCII") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not all(parts):
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if not version.startswith("HTTP/1."):
        raise HttpError(505, f"unsupported protocol {version!r}")
    if not target.startswith("/"):
        raise HttpError(400, "the request target must be a path")
    path, _, query = target.partition("?")
    path, _, _fragment = path.partition("#")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "malformed header line")
        headers.append((name.lower(), value.strip()))
    return HttpRequest(method, path, query, tuple(headers))


def split_path(path: str) -> list[str]:
    """The path's segments, each percent-decoded (``/topics/a%2Fb`` -> ``["topics", "a/b"]``).

    Raises:
        HttpError: 400 for a segment that is not UTF-8 once decoded, or ``..``.
    """
    out = []
    for raw in path.split("/"):
        if not raw:
            continue
        try:
            seg = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            raise HttpError(400, "a path segment is not UTF-8") from None
        if seg in (".", ".."):
            raise HttpError(400, "relative path segments are not allowed")
        out.append(seg)
    return out
