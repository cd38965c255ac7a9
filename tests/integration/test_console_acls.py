"""The web console under the broker's ACLs: a real ``tierlog serve`` with an authorizer and a
SASL_PLAINTEXT listener (SCRAM users), its ACLs written by a real client (confluent-kafka's
AdminClient as a super user). The console does not authenticate: it reads as
``User:ANONYMOUS`` from the browser's address, so it lists and browses only what ACLs grant
that principal."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.broker_process import ROOT
from tests.integration.security_support import SecureBroker

MECHANISM = "SCRAM-SHA-256"
PASSWORD = "admin-pw"
OPEN, CLOSED, LISTED = "open-topic", "closed-topic", "listed-topic"
OPEN_GROUP, CLOSED_GROUP = "open-group", "closed-group"


def _conf(b: SecureBroker) -> dict[str, Any]:
    return {
        "bootstrap.servers": b.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.username": "admin",
        "sasl.password": PASSWORD,
    }


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


def _allow(rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        rtype, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "127.0.0.1", op,
        AclPermissionType.ALLOW,
    )  # fmt: skip


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureBroker, str]]:
    work = tmp_path_factory.mktemp("console-acls")
    b = SecureBroker(
        work,
        {"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        f"sasl.enabled.mechanisms={MECHANISM}",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
        "super.users=User:admin",
        "console.listener=http://127.0.0.1:0",
    )
    pw: Path = work / "admin.pw"
    pw.write_text(PASSWORD + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "tierlog.cli", "scram", "add", "--user", "admin",
         "--mechanism", MECHANISM, "--iterations", "4096", "--password-file", str(pw),
         "--override", f"log.dirs={b.log_dir}"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    b.start()
    try:
        m = re.search(r"console on http://127\.0\.0\.1:(\d+)/", b.log_since_start())
        assert m is not None, b.tail()
        admin = AdminClient(_conf(b))
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in (OPEN, CLOSED, LISTED)]).values():
            f.result(30)
        p = Producer(_conf(b))
        for t in (OPEN, CLOSED, LISTED):
            p.produce(t, key=b"k", value=f"secret of {t}".encode(), partition=0)
        assert p.flush(30) == 0
        for group in (OPEN_GROUP, CLOSED_GROUP):
            c = Consumer({**_conf(b), "group.id": group, "enable.auto.commit": False})
            try:
                c.commit(
                    offsets=[TopicPartition(OPEN, 0, 1), TopicPartition(CLOSED, 0, 1)],
                    asynchronous=False,
                )
            finally:
                c.close()
        grants = [
            _allow(ResourceType.TOPIC, OPEN, AclOperation.READ),  # READ implies DESCRIBE
            _allow(ResourceType.TOPIC, LISTED, AclOperation.DESCRIBE),
            _allow(ResourceType.GROUP, OPEN_GROUP, AclOperation.DESCRIBE),
        ]
        for f in admin.create_acls(grants).values():
            f.result(30)
        yield b, f"http://127.0.0.1:{m.group(1)}"
    finally:
        if b.alive():
            with contextlib.suppress(RuntimeError):
                b.stop()


def test_the_console_shows_only_what_the_acls_grant_anonymous(secured):
    _, url = secured
    status, topics = _get(url + "/api/topics")
    assert status == 200
    assert sorted(t["name"] for t in topics) == [LISTED, OPEN]
    # Browsing needs READ: granted on one topic, DESCRIBE only on another, nothing on a third.
    status, page = _get(f"{url}/api/topics/{OPEN}/partitions/0/messages?offset=0")
    assert status == 200 and page["messages"][0]["value"]["text"] == f"secret of {OPEN}"
    status, page = _get(f"{url}/api/topics/{LISTED}/partitions/0/messages?offset=0")
    assert status == 403 and f"not authorized to read topic '{LISTED}'" in page["error"]
    assert _get(f"{url}/api/topics/{LISTED}/partitions/0")[0] == 200
    refused = (
        f"/topics/{CLOSED}",
        f"/topics/{CLOSED}/partitions/0",
        f"/topics/{CLOSED}/partitions/0/messages?offset=0",
        "/topics/no-such-topic",
    )
    for path in refused:
        status, page = _get(url + "/api" + path)
        assert status == 403, path
        assert "User:ANONYMOUS from 127.0.0.1" in page["error"]
    # Groups: the described one only, with the offsets of topics it may describe.
    status, groups = _get(url + "/api/groups")
    assert [g["group_id"] for g in groups] == [OPEN_GROUP]
    status, group = _get(f"{url}/api/groups/{OPEN_GROUP}")
    assert [(o["topic"], o["committed_offset"]) for o in group["offsets"]] == [(OPEN, 1)]
    assert _get(f"{url}/api/groups/{CLOSED_GROUP}")[0] == 403
