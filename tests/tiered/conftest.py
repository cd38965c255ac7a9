"""Fixtures for tiered storage tests (the S3 server itself, ``seaweedfs``, is in
tests/conftest.py): ``s3_request_counter``, a proxy in front of it that records requests."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.conftest import SeaweedFS


class RequestCounter:
    """A loopback TCP proxy in front of the S3 server that records HTTP request lines."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen()
        self._server.settimeout(0.05)  # lets the accept loop notice close()
        self.port = self._server.getsockname()[1]
        self._closed = False
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def methods(self) -> list[str]:
        with self._lock:
            return [r.split(" ", 1)[0] for r in self.requests]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._conns += [client, upstream]
            for args in ((client, upstream, True), (upstream, client, False)):
                t = threading.Thread(target=self._pipe, args=args, daemon=True)
                t.start()
                with self._lock:
                    self._threads.append(t)

    def _pipe(self, src: socket.socket, dst: socket.socket, log: bool) -> None:
        try:
            while data := src.recv(65536):
                if log:
                    for method in (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE "):
                        i = data.find(method)
                        if i == 0 or (i > 0 and data[i - 2 : i] == b"\r\n"):
                            with self._lock:
                                self.requests.append(data[i : data.find(b"\r\n", i)].decode())
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            src.close()

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in threads:
            t.join(timeout=5)


@pytest.fixture
def s3_request_counter(seaweedfs: SeaweedFS) -> Iterator[RequestCounter]:
    counter = RequestCounter(seaweedfs.port)
    yield counter
    counter.close()
