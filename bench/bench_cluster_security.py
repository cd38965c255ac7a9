"""Replication over a secure inter-broker listener: three ``tierlog serve`` processes on a real
ZooKeeper whose followers fetch over SASL_SSL with SCRAM-SHA-256 (``inter.broker.listener.name``,
credentials in ZooKeeper's ``/config/users``), against the same three brokers replicating over
PLAINTEXT, same run, same producer (a PLAINTEXT client listener on both, so only replication
differs).

Figure (``name: value unit (ratio vs baseline)``): acks=all produce of ``--records`` records of
``--record-size`` bytes over 3 partitions of a replication-factor-3 topic
(``min.insync.replicas=2``), MB/s; the two clusters take turns for ``--repeat`` rounds (the
machine is shared), best run of each and the median of the per-round ratios.

    .venv/bin/python bench/bench_cluster_security.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_cluster import (  # noqa: E402
    SESSION_TIMEOUT_MS,
    create_topic,
    live_brokers,
    produce,
    wait_for,
)
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.security.pki import KEYSTORE_PASSWORD, make_pki  # noqa: E402

from tierlog.tools.zookeeper_server import ZooKeeperServer, available  # noqa: E402

MB = 1e6


class TwoListenerBroker(BrokerProcess):
    """PLAINTEXT for clients (the first, advertised), REPLICATION for the other brokers."""

    def __init__(self, workdir: Path, replication: str, *overrides: str) -> None:
        super().__init__(workdir, *overrides)
        self.replication = replication

    @property
    def overrides(self) -> list[str]:
        base = super().overrides
        return [
            f"listeners=PLAINTEXT://127.0.0.1:{self.port or 0},REPLICATION://127.0.0.1:0",
            f"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,REPLICATION:{self.replication}",
            "inter.broker.listener.name=REPLICATION",
            *base[1:],
        ]


def start(
    work: Path, zk_connect: str, replication: str, security: list[str]
) -> list[BrokerProcess]:
    brokers: list[BrokerProcess] = []
    for i in range(1, 4):
        d = work / f"broker-{i}"
        d.mkdir(parents=True)
        brokers.append(
            TwoListenerBroker(
                d,
                replication,
                f"zookeeper.connect={zk_connect}",
                f"broker.id={i}",
                f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
                "default.replication.factor=3",
                "offsets.topic.replication.factor=3",
                "min.insync.replicas=2",
                "auto.leader.rebalance.enable=false",
                *security,
            )
        )
    for b in brokers:
        b.start()
    wait_for("3 live brokers", lambda: len(live_brokers(brokers)) == 3)
    return brokers


def main(argv: list[str] | None = None) -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000 if quick else 100_000)
    ap.add_argument("--record-size", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=1 if quick else 3)
    args = ap.parse_args(argv)
    why = available()
    if why is not None:
        print(f"# bench_cluster_security: skipped: {why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-cluster-security-") as tmp:
        work = Path(tmp)
        zk = ZooKeeperServer(work / "zookeeper")
        zk.start()
        try:
            pki = make_pki(work / "pki")
            secure_zk = f"{zk.connect_string}/secure-{uuid.uuid4().hex}"
            pw = work / "broker.pw"
            pw.write_text("broker-secret\n")
            subprocess.run(
                [sys.executable, "-m", "tierlog.cli", "scram", "add", "--user", "broker",
                 "--password-file", str(pw), "--override", f"zookeeper.connect={secure_zk}",
                 "--override", f"log.dirs={work / 'cli'}"],
                check=True, capture_output=True, cwd=ROOT,
            )  # fmt: skip
            security = [
                "sasl.enabled.mechanisms=SCRAM-SHA-256",
                "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256",
                "listener.name.replication.scram-sha-256.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="broker" password="broker-secret";',
                "ssl.keystore.type=PKCS12",
                f"ssl.keystore.location={pki.server_p12}",
                f"ssl.keystore.password={KEYSTORE_PASSWORD}",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={pki.ca}",
            ]
            plain = start(work / "plain", f"{zk.connect_string}/plain-{uuid.uuid4().hex}",
                          "PLAINTEXT", [])  # fmt: skip
            secure = start(work / "secure", secure_zk, "SASL_SSL", security)
            clusters = {"PLAINTEXT": plain, "SASL_SSL": secure}
            try:
                for brokers in clusters.values():
                    create_topic(brokers, "bench", 3, 3)
                total = args.records * args.record_size / MB
                rates: dict[str, list[float]] = {n: [] for n in clusters}
                for r in range(args.repeat):
                    for name, brokers in clusters.items():
                        os.sync()
                        boot = ",".join(b.bootstrap for b in brokers)
                        dt = produce(boot, "bench", args.records, args.record_size, 3, "all")
                        rates[name].append(total / dt)
                        print(f"# round {r + 1} {name}: {total / dt:.1f} MB/s", flush=True)
                ratios = [s / p for s, p in zip(rates["SASL_SSL"], rates["PLAINTEXT"], strict=True)]
                best_s, best_p = max(rates["SASL_SSL"]), max(rates["PLAINTEXT"])
                print(
                    f"replicated produce acks=all RF3, inter-broker SASL_SSL SCRAM-SHA-256: "
                    f"{best_s:.1f} MB/s ({best_s / best_p:.2f} vs PLAINTEXT {best_p:.1f} MB/s; "
                    f"median of per-round ratios {statistics.median(ratios):.2f})",
                    flush=True,
                )
                secure_log = secure[0].log_since_start()
                assert "authenticated as User:broker (SASL SCRAM-SHA-256)" in secure_log
            finally:
                for brokers in clusters.values():
                    for b in brokers:
                        if b.alive():
                            b.stop(timeout=60)
        finally:
            zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
