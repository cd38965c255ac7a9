"""The web console of a ZooKeeper-mode cluster: two real ``tierlog serve`` brokers on a real
ZooKeeper, each with its console. The brokers page lists the live brokers and the controller
as a real client (confluent-kafka's AdminClient) sees them; partitions show their leaders and
ISRs; the message browser reads on the leader and, on a follower, says where to go."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.integration.browser import check_screenshot, open_browser
from tests.integration.cluster_support import Cluster, wait_for
from tests.zookeeper_process import ZooKeeperProcess

pytestmark = pytest.mark.cluster

TOPIC = "console-cluster"
RECORDS = 10


def _console_url(b: Any) -> str:
    m = re.search(r"console on http://127\.0\.0\.1:(\d+)/", b.log_since_start())
    assert m is not None, b.tail()
    return f"http://127.0.0.1:{m.group(1)}"


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("console-cluster"),
        f"{zookeeper.connect_string}/console-{uuid.uuid4().hex}",
        2,
        "console.listener=http://127.0.0.1:0",
    )
    c.start()
    try:
        c.create_topic(TOPIC, partitions=2, rf=2)
        c.wait_healthy(TOPIC, 2, 2)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for partition in (0, 1):
            for i in range(RECORDS):
                p.produce(TOPIC, value=f"v{partition}-{i}".encode(), partition=partition)
        assert p.flush(60) == 0
        yield c
    finally:
        c.stop()


def test_brokers_and_controller_as_a_client_sees_them(cluster):
    md = cluster.admin().list_topics(timeout=10)
    assert md.controller_id in (1, 2)
    for broker_id, b in cluster.brokers.items():
        status, c = _get(_console_url(b) + "/api/brokers")
        assert status == 200
        assert c["mode"] == "ZooKeeper" and c["local_broker_id"] == broker_id
        assert c["controller_id"] == md.controller_id
        rows = {x["id"]: x for x in c["brokers"]}
        assert sorted(rows) == sorted(md.brokers) == [1, 2]
        for i, x in rows.items():
            assert f"PLAINTEXT://{cluster.brokers[i].bootstrap}" in x["endpoints"]
            assert x["is_self"] == (i == broker_id)
            assert x["is_controller"] == (i == md.controller_id)


def test_partitions_show_leaders_and_the_browser_reads_on_the_leader(cluster):
    parts = cluster.partitions(TOPIC)
    for broker_id, b in cluster.brokers.items():
        url = _console_url(b)

        def settled(url: str = url) -> list[dict[str, Any]] | None:
            # A broker learns the ISR a moment after the leader wrote it.
            _, topic = _get(f"{url}/api/topics/{TOPIC}")
            got = topic["partitions"]
            ok = all(sorted(p["isr"]) == [1, 2] and p["high_watermark"] == RECORDS for p in got)
            return got if ok else None

        got = wait_for(f"broker {broker_id}'s view of {TOPIC}", settled)
        assert [p["leader"] for p in got] == [parts[i].leader for i in (0, 1)]
        for i in (0, 1):
            status, page = _get(f"{url}/api/topics/{TOPIC}/partitions/{i}/messages?offset=0")
            if parts[i].leader == broker_id:
                assert status == 200
                assert [m["value"]["text"] for m in page["messages"]] == [
                    f"v{i}-{n}" for n in range(RECORDS)
                ]
            else:
                assert status == 503
                assert f"broker {parts[i].leader} leads it" in page["error"]


def test_brokers_page_in_chromium(cluster, tmp_path):
    from selenium.webdriver.common.by import By

    md = cluster.admin().list_topics(timeout=10)
    browser = open_browser()
    try:
        browser.get(_console_url(cluster.brokers[1]) + "/brokers")
        rows = [
            [td.text for td in r.find_elements(By.TAG_NAME, "td")]
            for r in browser.find_elements(By.CSS_SELECTOR, "#brokers tr.broker")
        ]
        assert [int(r[0]) for r in rows] == [1, 2]
        assert [r[3] for r in rows] == [
            "controller" if i == md.controller_id else "" for i in (1, 2)
        ]
        assert [r[4] for r in rows] == ["this broker", ""]
        check_screenshot(browser, tmp_path / "cluster-brokers.png")
    finally:
        browser.quit()


def test_a_topic_hosted_elsewhere_shows_the_clusters_view(cluster):
    name = f"elsewhere-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(name, partitions=1, rf=1, **{"retention.ms": "123456789"})
    leader = cluster.partitions(name)[0].leader
    other = next(i for i in cluster.brokers if i != leader)
    url = _console_url(cluster.brokers[other])

    def listed() -> dict[str, Any] | None:
        _, topics = _get(url + "/api/topics")
        found = [t for t in topics if t["name"] == name]
        return found[0] if found and found[0]["configs"] else None

    t = wait_for(f"{name} with its configs on broker {other}", listed)
    assert t["configs"] == {"retention.ms": "123456789"} and t["partitions"] == 1
    _, topic = _get(f"{url}/api/topics/{name}")
    (p,) = topic["partitions"]
    assert (p["hosted"], p["leader"], p["high_watermark"]) == (False, leader, None)
    status, page = _get(f"{url}/api/topics/{name}/partitions/0/messages?offset=0")
    assert status == 404 and f"not hosted by this broker (leader: {leader})" in page["error"]
