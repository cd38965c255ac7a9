"""Listener security benchmark: one ``tierlog serve`` with a PLAINTEXT and a SASL_SSL
(SCRAM-SHA-256) listener, confluent-kafka on each, same run.

Figures (``name: value unit (ratio vs baseline)``), 100-byte records, one partition:

* produce and consume records/s over SASL_SSL, against the same over PLAINTEXT (the issue's
  goal: a ratio of at least 0.7);
* SCRAM connection setup rate: new connections per second, each a TLS handshake, ApiVersions,
  SaslHandshake and the two SaslAuthenticate round trips (8192 iterations, the default of
  ``tierlog scram add``), one after another from one client thread, against plain TCP
  connections doing ApiVersions only.

Knobs: ``--records N`` (default 1,000,000; ``BENCH_QUICK=1`` → 100,000), ``--connections N``
(default 200; quick: 40), ``--rounds N`` (produces, then consumes, of each topic, taking turns,
best of each; default 3, quick: 1). A producer's throughput is timed from its first delivered
record: connection setup is the third figure, not part of the first.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import secrets
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration import wire  # noqa: E402
from tests.integration.security_support import KEYSTORE_PASSWORD, SecureBroker, make_pki  # noqa: E402

RECORD_SIZE = 100
USER, PASSWORD = "bench", "bench-secret"


def produce(bootstrap: str, topic: str, n: int, conf: dict[str, str]) -> float:
    """Records/s of one producer once it is connected: its first record is delivered
    before the clock starts, so the TLS handshake and the SCRAM login (measured on their
    own by :func:`connection_rate`) are not part of the throughput."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000, **conf})
    value = b"x" * RECORD_SIZE
    p.produce(topic, value, partition=0)
    assert p.flush(30) == 0
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return n / (time.perf_counter() - t0)


def consume(bootstrap: str, topic: str, n: int, conf: dict[str, str]) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
            **conf,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    t0 = time.perf_counter()
    while got < n:
        got += len(c.consume(10_000, 5))
    rate = n / (time.perf_counter() - t0)
    c.close()
    return rate


def _api_versions() -> object:
    return wire.request_class(18, 3)(client_software_name="bench", client_software_version="1")


def _scram_login(sock: socket.socket) -> None:
    """ApiVersions, SaslHandshake, SCRAM-SHA-256 client (RFC 5802) over ``sock``."""

    def call(req: object, key: int, version: int) -> object:
        sock.sendall(wire.encode(req, 1))
        return wire.decode(wire.read_frame(sock), key, version)[1]

    call(_api_versions(), 18, 3)
    assert call(wire.request_class(17, 1)(mechanism="SCRAM-SHA-256"), 17, 1).error_code == 0
    nonce = secrets.token_urlsafe(18)
    bare = f"n={USER},r={nonce}"
    auth = wire.request_class(36, 2)
    first = call(auth(auth_bytes=("n,," + bare).encode()), 36, 2).auth_bytes.decode()
    attrs = dict(p.split("=", 1) for p in first.split(","))
    salted = hashlib.pbkdf2_hmac(
        "sha256", PASSWORD.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client_key).digest()
    without = f"c=biws,r={attrs['r']}"
    sig = hmac.new(stored, f"{bare},{first},{without}".encode(), "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig, strict=True)))
    final = call(auth(auth_bytes=f"{without},p={proof.decode()}".encode()), 36, 2)
    assert final.error_code == 0, final.error_message


def connection_rate(port: int, n: int, tls: ssl.SSLContext | None) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
            if tls is None:
                raw.sendall(wire.encode(_api_versions(), 1))
                wire.read_frame(raw)
            else:
                with tls.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    _scram_login(s)
    return n / (time.perf_counter() - t0)


def line(name: str, value: float, unit: str, ratio: float, base: str) -> None:
    print(f"{name}: {value:,.0f} {unit} ({ratio:.2f} vs {base})", flush=True)


def main(argv: list[str] | None = None) -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000 if quick else 1_000_000)
    ap.add_argument("--connections", type=int, default=40 if quick else 200)
    ap.add_argument(
        "--rounds", type=int, default=1 if quick else 3, help="produce and consume rounds"
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-security-") as d:
        work = Path(d)
        pki = make_pki(work / "pki")
        b = SecureBroker(
            work / "broker",
            {"PLAIN": "PLAINTEXT", "SECURE": "SASL_SSL"},
            "sasl.enabled.mechanisms=SCRAM-SHA-256",
            "ssl.keystore.type=PKCS12",
            f"ssl.keystore.location={pki.server_p12}",
            f"ssl.keystore.password={KEYSTORE_PASSWORD}",
        )
        (work / "broker").mkdir()
        b.start()
        try:
            plain, secure = b.bootstrap_of("PLAIN"), b.bootstrap_of("SECURE")
            admin = AdminClient({"bootstrap.servers": plain})
            from confluent_kafka.admin import (
                ScramCredentialInfo,
                ScramMechanism,
                UserScramCredentialUpsertion,
            )

            up = UserScramCredentialUpsertion(
                USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), PASSWORD.encode()
            )
            for f in admin.alter_user_scram_credentials([up]).values():
                f.result(30)
            for f in admin.create_topics(
                [NewTopic("bench-plain", 1, 1), NewTopic("bench-secure", 1, 1)]
            ).values():
                f.result(30)
            sasl = {
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(pki.ca),
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": USER,
                "sasl.password": PASSWORD,
            }
            n = args.records
            # Produces and consumes take turns (the machine is shared and its load drifts;
            # the first read of a topic may also meet a colder page cache): best of each.
            p_plain = p_sec = 0.0
            for _ in range(args.rounds):
                p_plain = max(p_plain, produce(plain, "bench-plain", n, {}))
                p_sec = max(p_sec, produce(secure, "bench-secure", n, sasl))
            c_plain = c_sec = 0.0
            for _ in range(args.rounds):
                c_plain = max(c_plain, consume(plain, "bench-plain", n, {}))
                c_sec = max(c_sec, consume(secure, "bench-secure", n, sasl))
            line("produce SASL_SSL", p_sec, "records/s", p_sec / p_plain, "PLAINTEXT")
            line("consume SASL_SSL", c_sec, "records/s", c_sec / c_plain, "PLAINTEXT")
            tls = ssl.create_default_context(cafile=str(pki.ca))
            k = args.connections
            plain_rate = connection_rate(b.ports["PLAIN"], k, None)
            scram_rate = connection_rate(b.ports["SECURE"], k, tls)
            line(
                "connection setup SASL_SSL SCRAM-SHA-256",
                scram_rate,
                "connections/s",
                scram_rate / plain_rate,
                "PLAINTEXT ApiVersions",
            )
        finally:
            b.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
