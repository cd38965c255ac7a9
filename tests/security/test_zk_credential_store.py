"""SCRAM credentials in a real ZooKeeper (the session's ``zookeeper`` fixture): Kafka's znodes
and JSON, other configs of the user kept, a change on one broker seen by another through
``/config/changes``, Kafka's name sanitizing, and ``tierlog scram`` against ZooKeeper."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.cli import main
from tierlog.cluster.kafka_zk_client import KafkaZkClient
from tierlog.security.scram import ScramMechanism, credential_from_password
from tierlog.security.zk_credential_store import ZkCredentialStore, desanitize, sanitize

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


@pytest.fixture
def clients(zk_connect: str) -> Iterator[list[KafkaZkClient]]:
    made = []
    for _ in range(2):
        c = KafkaZkClient(zk_connect, session_timeout_ms=6000, connection_timeout_ms=15000)
        c.start()
        made.append(c)
    try:
        yield made
    finally:
        for c in made:
            c.close()


def _wait(what: str, probe, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_sanitize_is_kafkas() -> None:
    # Kafka's SanitizerTest: URL encoding, "*" as %2A, space as %20
    assert sanitize("alice") == "alice"
    assert sanitize("user@example.com") == "user%40example.com"
    assert sanitize("a b*c/d~e") == "a%20b%2Ac%2Fd%7Ee"
    assert sanitize("CN=x,O=y") == "CN%3Dx%2CO%3Dy"
    for name in ("alice", "a b*c/d~e", "ünï", "CN=x,O=y"):
        assert desanitize(sanitize(name)) == name


def test_znodes_and_a_change_seen_by_another_broker(clients: list[KafkaZkClient]) -> None:
    zk1, zk2 = clients
    one, two = ZkCredentialStore(), ZkCredentialStore()
    one.start(zk1)
    two.start(zk2)
    try:
        # another config of the user (a quota) is kept by credential writes
        zk1.set_or_create(
            "/config/users/user%40example.com",
            b'{"version":1,"config":{"producer_byte_rate":"1024"}}',
        )
        cred = credential_from_password(SHA256, "pw", 4096)
        one.upsert("user@example.com", SHA256, cred)
        got = zk1.get_data("/config/users/user%40example.com")
        assert got is not None
        doc = json.loads(got[0])
        assert doc == {
            "version": 1,
            "config": {"producer_byte_rate": "1024", "SCRAM-SHA-256": cred.to_kafka_string()},
        }
        changes = zk1.get_children("/config/changes")
        notes = [json.loads(zk1.get_data(f"/config/changes/{c}")[0]) for c in changes]  # type: ignore[index]
        assert {"version": 2, "entity_path": "users/user%40example.com"} in notes
        assert one.get("user@example.com", SHA256) == cred  # its own write, at once
        _wait("the other broker sees the user", lambda: two.get("user@example.com", SHA256))
        assert two.get("user@example.com", SHA256) == cred
        assert two.users() == {"user@example.com": {SHA256: 4096}}

        two.alter([("bob", SHA512, credential_from_password(SHA512, "b", 8192))],
                  [("user@example.com", SHA256)])  # fmt: skip
        _wait(
            "the deletion and bob reach the first", lambda: one.users() == {"bob": {SHA512: 8192}}
        )
        got = zk1.get_data("/config/users/user%40example.com")
        assert got is not None
        assert json.loads(got[0])["config"] == {"producer_byte_rate": "1024"}
    finally:
        one.close()
        two.close()


def test_a_restarted_store_reads_what_is_there(clients: list[KafkaZkClient]) -> None:
    zk1, _ = clients
    first = ZkCredentialStore()
    first.start(zk1, watch=False)
    first.upsert("carol", SHA256, credential_from_password(SHA256, "c", 4096))
    later = ZkCredentialStore()
    later.start(zk1, watch=False)
    assert later.users() == {"carol": {SHA256: 4096}}
    # an unreadable user znode is skipped, not fatal
    zk1.set_or_create("/config/users/broken", b"not json")
    again = ZkCredentialStore()
    again.start(zk1, watch=False)
    assert again.users() == {"carol": {SHA256: 4096}}


def test_scram_cli_against_zookeeper(
    zk_connect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    common = ["--override", f"zookeeper.connect={zk_connect}",
              "--override", f"log.dirs={tmp_path / 'logs'}"]  # fmt: skip
    assert main(["scram", "add", "--user", "alice", "--password-file", str(pw), *common]) == 0
    assert "written to /config/users" in capsys.readouterr().out
    assert main(["scram", "list", *common]) == 0
    assert capsys.readouterr().out.splitlines() == ["alice\tSCRAM-SHA-256\titerations=8192"]
    assert main(["scram", "delete", "--user", "alice", *common]) == 0
    assert main(["scram", "delete", "--user", "alice", *common]) == 1
    assert not (tmp_path / "logs" / "scram-credentials").exists()  # nothing local


def test_scram_cli_without_zookeeper_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    code = main(["scram", "add", "--user", "a", "--password-file", str(pw),
                 "--override", "zookeeper.connect=127.0.0.1:1",
                 "--override", "zookeeper.connection.timeout.ms=1000",
                 "--override", f"log.dirs={tmp_path / 'logs'}"])  # fmt: skip
    assert code == 2
    assert "cannot connect to ZooKeeper at 127.0.0.1:1" in capsys.readouterr().err
