"""Brokers authenticate to each other (issue 12): three real ``tierlog serve`` processes on a
real ZooKeeper with SASL_SSL + SCRAM-SHA-256 on their only listener, so the replica fetchers
log in over TLS like any client; SCRAM credentials live in ZooKeeper's ``/config/users``
(Kafka's ZooKeeper-mode layout, written by ``tierlog scram add`` before the brokers start and
by AlterUserScramCredentials while they run). A fourth broker with a wrong inter-broker
password never joins an ISR and says why.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.broker_process import ROOT
from tests.integration.clients import cf_consume, cf_produce
from tests.integration.cluster_support import Cluster, ClusterBroker, wait_for
from tests.security.pki import KEYSTORE_PASSWORD, Pki, make_pki
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = pytest.mark.cluster

BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="{user}" password="{password}";'
)


class SaslSslBroker(ClusterBroker):
    """A cluster member whose only listener is SASL_SSL (clients and brokers alike)."""

    @property
    def overrides(self) -> list[str]:
        base = super().overrides
        assert base[0].startswith("listeners=PLAINTEXT://")
        return [f"listeners=SASL_SSL://127.0.0.1:{self.port or 0}", *base[1:]]


def _security_overrides(pki: Pki, password: str = BROKER_PASSWORD) -> list[str]:
    """No secret in the overrides: the key store password comes from a file through Kafka's
    FileConfigProvider, the inter-broker password from a file through the DirectoryConfigProvider
    (KIP-297)."""
    secrets = pki.ca.parent / f"secrets-{zlib.crc32(password.encode())}"
    secrets.mkdir(exist_ok=True)
    (secrets / "broker.properties").write_text(f"keystore.password={KEYSTORE_PASSWORD}\n")
    (secrets / "inter-broker-password").write_text(password)
    provider = "org.apache.kafka.common.config.provider."
    return [
        "config.providers=file,dir",
        f"config.providers.file.class={provider}FileConfigProvider",
        f"config.providers.dir.class={provider}DirectoryConfigProvider",
        "security.inter.broker.protocol=SASL_SSL",  # the listener named SASL_SSL, Kafka's way
        "sasl.enabled.mechanisms=SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config="
        + SCRAM_JAAS.format(user=BROKER_USER, password=f"${{dir:{secrets}:inter-broker-password}}"),
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={pki.server_p12}",
        f"ssl.keystore.password=${{file:{secrets}/broker.properties:keystore.password}}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pki.ca}",
        "connection.failed.authentication.delay.ms=50",
    ]


def _client_conf(pki: Pki, user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password,
    }


def _scram_add_in_zookeeper(workdir: Path, zk_connect: str, user: str, password: str) -> str:
    """``tierlog scram add`` with the cluster's zookeeper.connect (Kafka's
    ``kafka-configs.sh --zookeeper``): before any broker runs. Its stdout."""
    pw = workdir / f"{user}.pw"
    pw.write_text(password + "\n")
    out = subprocess.run(
        [
            sys.executable, "-m", "tierlog.cli", "scram", "add", "--user", user,
            "--mechanism", "SCRAM-SHA-256", "--password-file", str(pw),
            "--override", f"zookeeper.connect={zk_connect}",
            "--override", f"log.dirs={workdir / 'cli-logs'}",
        ],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def _zk_get(zk_connect: str, path: str) -> bytes | None:
    from kazoo.client import KazooClient

    hosts, _, chroot = zk_connect.partition("/")
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    try:
        if not zk.exists(f"/{chroot}{path}"):
            return None
        data, _ = zk.get(f"/{chroot}{path}")
        return bytes(data)
    finally:
        zk.stop()
        zk.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess, pki: Pki
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("secure-cluster")
    zk_connect = f"{zookeeper.connect_string}/secure-{uuid.uuid4().hex}"
    said = _scram_add_in_zookeeper(root, zk_connect, BROKER_USER, BROKER_PASSWORD)
    assert "written to /config/users" in said
    _scram_add_in_zookeeper(root, zk_connect, "alice", "alice-secret")
    c = Cluster(
        root,
        zk_connect,
        3,
        "min.insync.replicas=2",
        "default.replication.factor=3",
        *_security_overrides(pki),
        broker_class=SaslSslBroker,
        client_conf=_client_conf(pki, "alice", "alice-secret"),
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_credentials_are_kafkas_znodes(secure_cluster: Cluster) -> None:
    data = _zk_get(secure_cluster.zk_connect, f"/config/users/{BROKER_USER}")
    assert data is not None
    doc = json.loads(data)
    assert doc["version"] == 1 and list(doc["config"]) == ["SCRAM-SHA-256"]
    cred = doc["config"]["SCRAM-SHA-256"]
    assert cred.startswith("salt=") and ",stored_key=" in cred and ",server_key=" in cred
    assert cred.endswith(",iterations=8192")
    assert BROKER_PASSWORD not in data.decode()


def test_replication_over_sasl_ssl(secure_cluster: Cluster, pki: Pki) -> None:
    """Every ISR fills (the followers fetched over SASL_SSL as ``broker``), acks=all produce
    and a consume over SASL_SSL see every record."""
    c = secure_cluster
    c.create_topic("replicated", partitions=3, rf=3)
    conf = {**_client_conf(pki, "alice", "alice-secret"), "acks": "all"}
    values = [f"v-{i}".encode() for i in range(300)]
    for p in range(3):
        cf_produce(
            c.bootstrap, "replicated", [(None, v) for v in values[p::3]], partition=p, **conf
        )
    c.wait_healthy("replicated", 3, 3)
    got = cf_consume(
        c.bootstrap, "replicated", 300, partitions=range(3),
        **_client_conf(pki, "alice", "alice-secret"),
    )  # fmt: skip
    assert sorted(m.value() for m in got) == sorted(values)
    for b in c.brokers.values():
        # no secret on the command line (config providers), none in the log
        given = " ".join(b.started_overrides)
        assert BROKER_PASSWORD not in given and KEYSTORE_PASSWORD not in given
        log = b.log_since_start()
        assert BROKER_PASSWORD not in log and KEYSTORE_PASSWORD not in log
        assert "authenticated as User:broker (SASL SCRAM-SHA-256)" in log, b.tail()
        assert "authentication as broker" not in log  # no failed inter-broker login


def test_a_user_added_on_one_broker_logs_in_on_every_broker(
    secure_cluster: Cluster, pki: Pki
) -> None:
    c = secure_cluster
    c.create_topic("for-bob", partitions=1, rf=3)
    b1 = c.brokers[1].bootstrap
    admin = c.admin()
    upsert = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret"
    )
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(30)
    data = _zk_get(c.zk_connect, "/config/users/bob")
    assert data is not None and "SCRAM-SHA-256" in json.loads(data)["config"]
    # The change notification reaches every broker through its watch.
    bob = _client_conf(pki, "bob", "bob-secret")
    for b in c.brokers.values():

        def logs_in(b: ClusterBroker = b) -> bool:
            return "authenticated as User:bob" in b.log_since_start() or bool(
                _try_produce(b.bootstrap, bob)
            )

        wait_for(f"bob logs in on broker {b.bootstrap}", logs_in, 30)
    cf_produce(b1, "for-bob", [(None, b"from-bob")], **bob)


def _try_produce(bootstrap: str, conf: dict[str, str]) -> bool:
    try:
        cf_produce(bootstrap, "for-bob", [(None, b"probe")], **conf, message_timeout_ms=5000)
    except AssertionError:
        return False
    return True


def test_a_follower_with_a_wrong_password_stays_out_of_the_isr(
    secure_cluster: Cluster, pki: Pki, tmp_path: Path
) -> None:
    c = secure_cluster
    (tmp_path / "broker-4").mkdir()
    wrong = SaslSslBroker(
        tmp_path / "broker-4",
        *c.broker_overrides(4, *_security_overrides(pki, password="not-the-password")),
    )
    wrong.start()
    try:
        wait_for("broker 4 registered", lambda: 4 in c.live_ids())
        admin = c.admin()
        futures = admin.create_topics(
            [NewTopic("with-4", 2, replica_assignment=[[1, 4], [2, 4]])], operation_timeout=30
        )
        futures["with-4"].result(30)
        conf = {**_client_conf(pki, "alice", "alice-secret"), "acks": "1"}
        cf_produce(c.bootstrap, "with-4", [(None, b"x")], partition=0, **conf)
        cf_produce(c.bootstrap, "with-4", [(None, b"y")], partition=1, **conf)

        def isrs_without_4() -> bool:
            ps = c.partitions("with-4")
            return all(list(p.isrs) == [p.leader] and p.leader in (1, 2) for p in ps.values())

        wait_for("broker 4 out of every ISR", isrs_without_4, 60)
        line = wait_for(
            "the failed login in broker 4's log",
            lambda: next(
                (
                    ln
                    for ln in wrong.log_since_start().splitlines()
                    if "authentication as broker with SCRAM-SHA-256 failed" in ln
                ),
                None,
            ),
        )
        assert "fetch from broker" in line, line
        # ... and it stays out: still no fetch, the ISR unchanged after more lag windows.
        n = wrong.log_since_start().count("authentication as broker with SCRAM-SHA-256 failed")
        wait_for(
            "more failed logins",
            lambda: wrong.log_since_start().count("authentication as broker with SCRAM") > n + 3,
        )
        assert isrs_without_4()
        # the leaders refused those logins (and only those: the others fetch fine)
        leader_logs = c.brokers[1].log_since_start() + c.brokers[2].log_since_start()
        assert "authentication of 127.0.0.1:" in leader_logs
    finally:
        wrong.stop()
