"""The console's sans-IO HTTP: request heads in, 4xx errors for anything malformed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.console.http import (
    MAX_HEAD_BYTES,
    HttpError,
    HttpResponse,
    parse_request_head,
    split_path,
)


def test_parse_a_browser_request():
    req = parse_request_head(
        b"GET /topics/a%2Fb/partitions/0/messages?offset=3&limit=2 HTTP/1.1\r\n"
        b"Host: 127.0.0.1:8080\r\nAccept: text/html\r\n\r\n"
    )
    assert req.method == "GET"
    assert req.path == "/topics/a%2Fb/partitions/0/messages"
    assert req.query == "offset=3&limit=2"
    assert req.headers == (("host", "127.0.0.1:8080"), ("accept", "text/html"))
    assert split_path(req.path) == ["topics", "a/b", "partitions", "0", "messages"]


@pytest.mark.parametrize(
    ("head", "status", "message"),
    [
        (b"GARBAGE\r\n\r\n", 400, "malformed request line"),
        (b"GET  / HTTP/1.1\r\n\r\n", 400, "malformed request line"),
        (b"GET / HTTP/2\r\n\r\n", 505, "unsupported protocol"),
        (b"GET http://x/ HTTP/1.1\r\n\r\n", 400, "must be a path"),
        (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400, "malformed header line"),
        (b"GET / HTTP/1.1\r\n : v\r\n\r\n", 400, "malformed header line"),
        (b"GET /\xff HTTP/1.1\r\n\r\n", 400, "not ASCII"),
        (b"GET /" + b"a" * MAX_HEAD_BYTES + b" HTTP/1.1\r\n\r\n", 431, "longer than"),
    ],
)
def test_malformed_heads_are_4xx(head, status, message):
    with pytest.raises(HttpError, match=message) as e:
        parse_request_head(head)
    assert e.value.status == status


@pytest.mark.parametrize(
    ("path", "message"),
    [("/topics/%ff", "not UTF-8"), ("/topics/..", "relative"), ("/a/%2e", "relative")],
)
def test_bad_paths_are_400(path, message):
    with pytest.raises(HttpError, match=message) as e:
        split_path(path)
    assert e.value.status == 400


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_raise_a_4xx_or_505(head):
    try:
        req = parse_request_head(head)
    except HttpError as e:
        assert 400 <= e.status < 500 or e.status == 505
    else:
        assert req.path.startswith("/")


def test_response_encoding():
    r = HttpResponse(404, "text/html; charset=utf-8", b"<p>x</p>", (("Allow", "GET"),))
    full = r.encode()
    head, body = full.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 404 Not Found\r\n")
    assert b"Content-Length: 8\r\n" in head + b"\r\n" and b"Allow: GET" in head
    assert b"Connection: close" in head and b"X-Content-Type-Options: nosniff" in head
    assert body == b"<p>x</p>"
    assert r.encode(head_only=True) == head + b"\r\n\r\n"
