"""DescribeClientQuotas (48), AlterClientQuotas (49) and byte-rate throttling against a real
broker (issue 15): quotas persist across a restart, each bad input gets its message, and one
client throttled to 1 MB/s does not slow another (rates measured with real producers)."""

from __future__ import annotations

import importlib
import json
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.clients import cf_create_topic, cf_produce
from tests.integration.conftest import running_broker
from tests.integration.wire import WireClient, request_class

MB = 1 << 20


def _alter(bootstrap: str, entries: list, validate_only: bool = False) -> list:
    cls = request_class(49, 1)
    m = importlib.import_module(cls.__module__)
    req = cls(
        entries=tuple(
            m.EntryData(
                entity=tuple(m.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                ops=tuple(m.OpData(key=k, value=float(v), remove=r) for k, v, r in ops),
            )
            for entity, ops in entries
        ),
        validate_only=validate_only,
    )
    c = WireClient(bootstrap)
    try:
        resp = c.call(req)
    finally:
        c.sock.close()
    return [(int(e.error_code.value), e.error_message) for e in resp.entries]


def _describe(bootstrap: str, components: list, strict: bool = False) -> tuple:
    cls = request_class(48, 1)
    m = importlib.import_module(cls.__module__)
    req = cls(
        components=tuple(
            m.ComponentData(entity_type=t, match_type=mt, match=n) for t, mt, n in components
        ),
        strict=strict,
    )
    c = WireClient(bootstrap)
    try:
        resp = c.call(req)
    finally:
        c.sock.close()
    entries = sorted(
        (
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            {v.key: v.value for v in entry.values},
        )
        for entry in resp.entries or ()
    )
    return int(resp.error_code.value), resp.error_message, entries


SLOW = [("client-id", "slow")]
DEFAULT_USER = [("user", None)]


def test_alter_describe_persist_and_bad_inputs(tmp_path):
    with running_broker(tmp_path / "b") as b:
        assert _alter(
            b.bootstrap,
            [
                (SLOW, [("producer_byte_rate", MB, False)]),
                (DEFAULT_USER, [("consumer_byte_rate", 2 * MB, False)]),
            ],
        ) == [(0, None), (0, None)]
        everything = [
            ((("client-id", "slow"),), {"producer_byte_rate": MB}),
            ((("user", None),), {"consumer_byte_rate": 2 * MB}),
        ]
        assert _describe(b.bootstrap, []) == (0, None, everything)
        assert _describe(b.bootstrap, [("client-id", 0, "slow")]) == (0, None, everything[:1])
        assert _describe(b.bootstrap, [("user", 1, None)], strict=True) == (
            0, None, everything[1:],
        )  # fmt: skip
        # Bad inputs: each entry fails alone, with its reason; nothing else changes.
        assert _alter(
            b.bootstrap,
            [
                (SLOW, [("request_percentage", 50, False)]),
                ([("ip", "127.0.0.1")], [("connection_creation_rate", 5, False)]),
                ([("client-id", "x"), ("client-id", "y")], [("producer_byte_rate", 1, False)]),
                ([("client-id", "x")], [("producer_byte_rate", -5, False)]),
                ([("client-id", "ok")], [("producer_byte_rate", 1000, False)]),
            ],
            validate_only=True,
        ) == [
            (42, "request_percentage is not supported (tierlog enforces producer_byte_rate "
                 "and consumer_byte_rate)"),
            (42, "ip quotas (connection_creation_rate) are not supported"),
            (42, "duplicate entity type 'client-id'"),
            (42, "producer_byte_rate must be a positive whole number of bytes per second, "
                 "got -5.0"),
            (0, None),
        ]  # fmt: skip
        assert _describe(b.bootstrap, []) == (0, None, everything)  # validate_only: no change
        assert _describe(b.bootstrap, [("user", 0, "a"), ("user", 1, None)]) == (
            42, "duplicate filter component entity type 'user'", [],
        )  # fmt: skip
        b.restart()
        assert _describe(b.bootstrap, []) == (0, None, everything)  # persisted
        quota_file = json.loads((b.log_dir / "client-quotas.json").read_text())
        assert quota_file["quotas"]["clients/slow"] == {"producer_byte_rate": str(MB)}
        assert _alter(b.bootstrap, [(DEFAULT_USER, [("consumer_byte_rate", 0, True)])]) == [
            (0, None)
        ]
        assert _describe(b.bootstrap, []) == (0, None, everything[:1])


def _produce_for(bootstrap: str, topic: str, client_id: str, seconds: float, out: dict) -> None:
    """Produce 64 KB records as fast as the broker takes them for ``seconds``; ``out``
    gets (delivery time, bytes) pairs and the throttle times librdkafka reported."""
    delivered: list[tuple[float, int]] = []
    throttles: list[float] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": 1,
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 4096,
            "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
        }
    )
    value = b"x" * (64 * 1024)

    def done(err, msg) -> None:
        if err is None:
            delivered.append((time.monotonic(), len(msg.value())))

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, value=value, on_delivery=done)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.flush(60)
    out["delivered"], out["throttles"] = delivered, throttles


def _rate(delivered: list[tuple[float, int]], start: float, end: float) -> float:
    return sum(n for t, n in delivered if start <= t < end) / (end - start)


def test_a_throttled_producer_does_not_slow_another(tmp_path):
    # Short windows (3 samples of 1 s) so the rate settles within the test's seconds.
    with running_broker(tmp_path / "b", "quota.window.num=3") as b:
        cf_create_topic(b.bootstrap, "quota-slow", 1)
        cf_create_topic(b.bootstrap, "quota-fast", 1)
        assert _alter(b.bootstrap, [(SLOW, [("producer_byte_rate", MB, False)])]) == [(0, None)]
        slow: dict = {}
        fast: dict = {}
        t0 = time.monotonic()
        threads = [
            threading.Thread(target=_produce_for, args=(b.bootstrap, f"quota-{n}", n, 10, out))
            for n, out in (("slow", slow), ("fast", fast))
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        # Measured after the first windows (a new client's first bytes are not throttled);
        # requests of up to 1 MB each make the measure coarse: within 60% of the quota.
        slow_rate = _rate(slow["delivered"], t0 + 4, t0 + 10)
        fast_rate = _rate(fast["delivered"], t0 + 4, t0 + 10)
        print(f"slow (1 MB/s quota): {slow_rate / MB:.2f} MB/s; fast: {fast_rate / MB:.2f} MB/s")
        assert 0.4 * MB < slow_rate < 1.6 * MB, slow_rate / MB
        assert fast_rate > 3 * slow_rate, (fast_rate / MB, slow_rate / MB)
        assert slow["throttles"] and max(slow["throttles"]) > 0  # told, as Kafka tells it
        assert not any(fast["throttles"])


def test_a_consumer_is_throttled_to_its_fetch_quota(tmp_path):
    with running_broker(tmp_path / "b", "quota.window.num=3") as b:
        cf_create_topic(b.bootstrap, "quota-read", 1)
        cf_produce(b.bootstrap, "quota-read", [(None, b"y" * 65536)] * 96)  # 6 MB
        assert _alter(b.bootstrap, [(SLOW, [("consumer_byte_rate", MB, False)])]) == [(0, None)]

        def read_all(client_id: str) -> float:
            c = Consumer(
                {
                    "bootstrap.servers": b.bootstrap,
                    "group.id": f"g-{client_id}",
                    "client.id": client_id,
                    "enable.auto.commit": False,
                }
            )
            try:
                c.assign([TopicPartition("quota-read", 0, 0)])
                n = 0
                t0 = time.monotonic()
                deadline = t0 + 90
                while n < 96 and time.monotonic() < deadline:
                    for m in c.consume(100, 0.5):
                        assert m.error() is None, m.error()
                        n += 1
                assert n == 96
                return time.monotonic() - t0
            finally:
                c.close()

        fast_s = read_all("fast")
        slow_s = read_all("slow")
        print(f"6 MB read in {fast_s:.2f}s without a quota, {slow_s:.2f}s at 1 MB/s")
        # 6 MB at 1 MB/s: at most a whole window's bytes (3 s, 3 MB) at once, the rest at the
        # quota: 3 s at least.
        assert slow_s > 3.0, slow_s
        assert slow_s > 2 * fast_s, (slow_s, fast_s)
