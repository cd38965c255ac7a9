"""A fault-injecting TCP proxy for Kafka connections (tests only).

Forwards bytes both ways and follows the frames: it remembers the API key of each request by
correlation id, and can drop the connection right *after* the broker answered a Produce and
*before* the client sees the answer. The client then retries a batch the broker already
appended: exactly the case idempotent producers exist for.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


def recv_exact_or_none(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class FaultyProxy:
    """``127.0.0.1:<port>`` → ``target``; drops every ``drop_every``-th Produce response
    (at most ``max_drops`` times)."""

    def __init__(self, target: tuple[str, int], *, drop_every: int = 3, max_drops: int = 5):
        self.target = target
        self.drop_every = drop_every
        self.max_drops = max_drops
        self.drops = 0
        self.produce_responses = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._socks += [client, upstream]
            api_keys: dict[int, int] = {}
            threading.Thread(
                target=self._up, args=(client, upstream, api_keys), daemon=True
            ).start()
            threading.Thread(
                target=self._down, args=(upstream, client, api_keys), daemon=True
            ).start()

    def _up(self, client: socket.socket, upstream: socket.socket, api_keys: dict[int, int]) -> None:
        while True:
            head = recv_exact_or_none(client, 4)
            if head is None:
                break
            (size,) = struct.unpack(">i", head)
            body = recv_exact_or_none(client, size)
            if body is None:
                break
            api_key, _version, correlation_id = struct.unpack_from(">hhi", body)
            api_keys[correlation_id] = api_key
            try:
                upstream.sendall(head + body)
            except OSError:
                break
        self._close(client, upstream)

    def _down(
        self, upstream: socket.socket, client: socket.socket, api_keys: dict[int, int]
    ) -> None:
        while True:
            head = recv_exact_or_none(upstream, 4)
            if head is None:
                break
            (size,) = struct.unpack(">i", head)
            body = recv_exact_or_none(upstream, size)
            if body is None:
                break
            (correlation_id,) = struct.unpack_from(">i", body)
            if api_keys.pop(correlation_id, None) == 0:
                with self._lock:
                    self.produce_responses += 1
                    drop = (
                        self.drops < self.max_drops
                        and self.produce_responses % self.drop_every == 0
                    )
                    if drop:
                        self.drops += 1
                if drop:
                    break  # the broker appended; the client never hears about it
            try:
                client.sendall(head + body)
            except OSError:
                break
        self._close(client, upstream)

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self._closed = True
        self._close(self._listener, *self._socks)
