"""The console's listener on a loopback socket, and ``console.listener`` parsing."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.console.fake_view import FakeView
from tierlog.console import ConsoleServer, parse_console_listener
from tierlog.errors import ConfigError
from tierlog.server.kafka_config import KafkaConfig


async def _exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data


class _Broken(FakeView):
    def topics(self):
        raise RuntimeError("secret internals")


def test_serves_pages_and_hides_a_bug_behind_a_plain_500(caplog):
    async def run() -> tuple[bytes, bytes, bytes]:
        server = ConsoleServer(_Broken())
        host, port = await server.start("127.0.0.1", 0)
        assert host == "127.0.0.1"
        try:
            ok = await _exchange(port, b"GET /brokers HTTP/1.1\r\nHost: x\r\n\r\n")
            broken = await _exchange(port, b"GET /topics HTTP/1.1\r\n\r\n")
            head = await _exchange(port, b"HEAD /brokers HTTP/1.1\r\n\r\n")
        finally:
            await server.stop()
            await server.stop()  # idempotent
        return ok, broken, head

    with caplog.at_level(logging.ERROR, logger="tierlog.console"):
        ok, broken, head = asyncio.run(run())
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and b"<h1>Brokers</h1>" in ok
    assert broken.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert b"secret internals" not in broken and b"Traceback" not in broken
    assert "console: GET /topics failed" in caplog.text and "secret internals" in caplog.text
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")


def test_a_taken_port_is_a_clear_error():
    async def run() -> None:
        first = ConsoleServer(FakeView())
        _, port = await first.start("127.0.0.1", 0)
        try:
            with pytest.raises(OSError, match=f"console.listener http://127.0.0.1:{port}"):
                await ConsoleServer(FakeView()).start("127.0.0.1", port)
        finally:
            await first.stop()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("http://localhost:0/", ("localhost", 0)),
        ("http://[::1]:9000", ("::1", 9000)),
    ],
)
def test_listener(value, expected):
    assert parse_console_listener(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("127.0.0.1:8080", "must be http://host:port"),
        ("https://127.0.0.1:8080", "must be http://host:port"),
        ("http://127.0.0.1", "give a host and a port"),
        ("http://127.0.0.1:99999", "not an http://host:port URL"),
        ("http://127.0.0.1:80/console", "without a path"),
        ("http://u:p@127.0.0.1:80", "credentials"),
    ],
)
def test_bad_listener(value, message):
    with pytest.raises(ValueError, match=message):
        parse_console_listener(value)
    with pytest.raises(ConfigError, match=f"console.listener: invalid value.*{message}"):
        KafkaConfig({"console.listener": value})


def test_off_by_default():
    assert KafkaConfig({}).console_listener is None
    assert KafkaConfig({"console.listener": "http://127.0.0.1:0"}).console_listener == (
        "127.0.0.1",
        0,
    )


def test_the_acls_see_the_peer_address():
    view = FakeView()

    async def run() -> bytes:
        server = ConsoleServer(view)
        _, port = await server.start("127.0.0.1", 0)
        try:
            return await _exchange(port, b"GET /api/topics HTTP/1.1\r\n\r\n")
        finally:
            await server.stop()

    assert asyncio.run(run()).startswith(b"HTTP/1.1 200 OK\r\n")
    assert view.asked_hosts == {"127.0.0.1"}
