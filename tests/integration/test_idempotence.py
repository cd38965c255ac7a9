"""Idempotent producers with forced retries: a proxy drops the connection after the broker
appended a Produce and before the client saw the answer. The client resends the same batch
(same producer id, epoch, sequence); the broker must answer it with the ORIGINAL offsets and
write nothing, so the log holds every record exactly once, in order.
"""

from __future__ import annotations

import time

from tests.integration.clients import cf_consume, kp_producer
from tests.integration.conftest import running_broker
from tests.integration.proxy import FaultyProxy


def _check_log(bootstrap: str, topic: str, values: list[bytes], delivered: list[int]) -> None:
    got = cf_consume(bootstrap, topic, len(values) + 10, timeout=8)
    assert [m.value() for m in got] == values, "duplicates or losses in the log"
    assert [m.offset() for m in got] == list(range(len(values)))
    assert delivered == list(range(len(values))), "acknowledged offsets are not the log's"


def test_confluent_idempotent_producer_retries_get_original_offsets(tmp_path):
    # The broker's port is known once it started; the proxy forwards there from then on.
    proxy = FaultyProxy(("127.0.0.1", 0), drop_every=4, max_drops=5)
    try:
        with running_broker(
            tmp_path / "b", f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}"
        ) as b:
            proxy.target = ("127.0.0.1", b.port)
            from confluent_kafka import Producer

            bootstrap = f"127.0.0.1:{proxy.port}"
            topic = "idem-cf"
            p = Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "enable.idempotence": True,
                    "linger.ms": 2,
                    "batch.num.messages": 40,
                    "retry.backoff.ms": 50,
                    "compression.type": "lz4",
                }
            )
            delivered: dict[bytes, int] = {}
            errors = []

            def cb(err, msg):
                if err:
                    errors.append(err)
                else:
                    delivered[msg.value()] = msg.offset()

            values = [f"v{i:05d}".encode() for i in range(2000)]
            for i, v in enumerate(values):
                p.produce(topic, value=v, on_delivery=cb)
                if i % 100 == 99:
                    p.poll(0)
                    time.sleep(0.01)
            assert p.flush(60) == 0
            assert not errors, errors[:3]
            assert proxy.drops >= 3, f"the proxy dropped only {proxy.drops} produce responses"
            _check_log(bootstrap, topic, values, [delivered[v] for v in values])
            assert b.alive()
    finally:
        proxy.close()


def test_kafka_python_idempotent_producer_retries(tmp_path):
    # The broker's port is known once it started; the proxy forwards there from then on.
    proxy = FaultyProxy(("127.0.0.1", 0), drop_every=3, max_drops=4)
    try:
        with running_broker(
            tmp_path / "b", f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}"
        ) as b:
            proxy.target = ("127.0.0.1", b.port)
            bootstrap = f"127.0.0.1:{proxy.port}"
            topic = "idem-kp"
            p = kp_producer(
                bootstrap,
                enable_idempotence=True,
                acks="all",
                linger_ms=2,
                batch_size=400,
                retry_backoff_ms=50,
                request_timeout_ms=5000,
            )
            values = [f"w{i:05d}".encode() for i in range(600)]
            futures = []
            for i, v in enumerate(values):
                futures.append(p.send(topic, value=v))
                if i % 50 == 49:
                    time.sleep(0.01)
            p.flush(60)
            offsets = [f.get(30).offset for f in futures]
            p.close()
            assert proxy.drops >= 2, f"the proxy dropped only {proxy.drops} produce responses"
            _check_log(bootstrap, topic, values, offsets)
    finally:
        proxy.close()
