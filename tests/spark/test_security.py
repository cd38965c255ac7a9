"""Spark writes and reads a topic over SASL_SSL with SCRAM-SHA-256, with the options Spark's
Kafka source and sink take (``kafka.security.protocol``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``); a wrong password fails the query with
the broker's reason."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.broker_process import ROOT
from tests.integration.security_support import KEYSTORE_PASSWORD, Pki, SecureBroker, make_pki

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="{password}";'
)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureBroker, Pki]]:
    root = tmp_path_factory.mktemp("spark-sasl-ssl")
    pki = make_pki(root / "pki")
    (root / "b").mkdir()
    b = SecureBroker(
        root / "b",
        {"SASL_SSL": "SASL_SSL"},
        "sasl.enabled.mechanisms=SCRAM-SHA-256",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={pki.server_p12}",
        f"ssl.keystore.password={KEYSTORE_PASSWORD}",
        "connection.failed.authentication.delay.ms=50",
        "log.retention.ms=-1",
    )
    pw = root / "alice.pw"
    pw.write_text("alice-secret\n")
    out = subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "scram", "add", "--user", "alice",
         "--password-file", str(pw), "--override", f"log.dirs={b.log_dir}"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    b.start()
    try:
        yield b, pki
    finally:
        b.stop()


def _options(b: SecureBroker, pki: Pki, password: str = "alice-secret") -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": b.bootstrap_of("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": JAAS.format(password=password),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(pki.ca),
    }


def test_write_and_read_over_sasl_ssl(spark: Any, secure: tuple[SecureBroker, Pki]) -> None:
    b, pki = secure
    df = spark.sql("select concat('v-', id) as value from range(0, 200, 1, 2)")
    w = df.write.format("tierlog").option("topic", "secure").mode("append")
    for k, v in _options(b, pki).items():
        w = w.option(k, v)
    w.save()
    r = spark.read.format("tierlog").option("subscribe", "secure")
    for k, v in _options(b, pki).items():
        r = r.option(k, v)
    rows = r.load().collect()
    assert sorted(bytes(x["value"]) for x in rows) == sorted(b"v-%d" % i for i in range(200))
    log = b.log_since_start()
    assert "authenticated as User:alice (SASL SCRAM-SHA-256)" in log

    r = spark.read.format("tierlog").option("subscribe", "secure")
    for k, v in _options(b, pki, password="wrong").items():
        r = r.option(k, v)
    with pytest.raises(Exception, match=r"authentication to .* as alice with SCRAM-SHA-256 failed"):
        r.load().collect()


def test_a_wrong_truststore_is_named(spark: Any, secure: tuple[SecureBroker, Pki]) -> None:
    b, pki = secure
    r = spark.read.format("tierlog").option("subscribe", "secure")
    for k, v in {**_options(b, pki), "kafka.ssl.truststore.location": "/nonexistent"}.items():
        r = r.option(k, v)
    with pytest.raises(Exception, match=r"kafka\.ssl\.truststore\.location: cannot read"):
        r.load().collect()
