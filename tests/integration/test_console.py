"""The web console (``console.listener``) of a real ``tierlog serve`` with tiered storage:
its JSON API over plain HTTP, its pages in a real headless Chromium (Debian's, driven by
Selenium; screenshots decoded and checked), and its answers to bad input.

Every number the console shows is compared with another source: ListOffsets through
kafka-python, the segment files on the broker's disk, ``tierlog remote ls`` (which reads the
remote log metadata on its own), and the records as they were produced.
"""

from __future__ import annotations

import contextlib
import html
import itertools
import json
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.browser import check_screenshot, has_color, open_browser, wait_for_page
from tests.integration.clients import cf_create_topic
from tests.integration.conftest import BrokerProcess, running_broker
from tests.integration.tiered_support import (
    SEGMENT_BYTES,
    TIERED_BROKER,
    FileStore,
    Offsets,
    Sent,
    at_rest,
    finished,
    local_segments,
    make_records,
    produce,
    tiered_topic_configs,
    wait_until,
)

RECORDS = 1500
COMMITTED = 700
#: A key and a value that would run, or add elements, if the console did not escape them.
HOSTILE_KEY = b'<b id="bold">bold</b><script>window.pwned = 1</script>'
HOSTILE_VALUE = b'"\'><img src=x onerror="window.pwned=2">&amp;'
HOSTILE_GROUP = '<i id="it">group</i>&"'
REMOTE_COLOR = (0x4A, 0x7B, 0xD0)  # pages.timeline_svg's finished remote segment


@dataclass
class Console:
    broker: BrokerProcess
    url: str
    topic: str
    sent: list[Sent]
    group: str
    hostile_topic: str


def http_get(url: str, method: str = "GET") -> tuple[int, str, str]:
    """(status, content type, body) of one request, 4xx/5xx included."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        with contextlib.closing(e):
            return e.code, e.headers["Content-Type"], e.read().decode()


def api(c: Console, path: str) -> Any:
    status, ctype, body = http_get(c.url + "/api" + path)
    assert status == 200, (path, status, body)
    assert ctype == "application/json"
    return json.loads(body)


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    workdir = tmp_path_factory.mktemp("console")
    store = FileStore(workdir / "remote")
    listener = "console.listener=http://127.0.0.1:0"
    with running_broker(workdir, *TIERED_BROKER, *store.overrides(), listener) as b:
        b.store = store  # type: ignore[attr-defined]
        m = re.search(r"console on http://127\.0\.0\.1:(\d+)/", b.log_since_start())
        assert m is not None, b.tail()
        suffix = uuid.uuid4().hex[:8]
        topic = f"console-{suffix}"
        cf_create_topic(b.bootstrap, topic, 1, **tiered_topic_configs(local_retention_bytes="1"))
        sent = make_records(RECORDS)
        produce(b.bootstrap, topic, sent)
        # Fully tiered: every rolled segment copied and deleted locally (offset 0 is remote).
        wait_until(lambda: at_rest(b, topic, local_retention_bytes=1), 90, "the topic fully tiered")
        group = f"console-group-{suffix}"
        commit(b.bootstrap, group, topic, COMMITTED)
        hostile = f"hostile-{suffix}"
        cf_create_topic(b.bootstrap, hostile, 1)
        now = int(time.time() * 1000)
        produce(b.bootstrap, hostile, [(HOSTILE_KEY, HOSTILE_VALUE, [("<h>", b"<v>")], now)])
        commit(b.bootstrap, HOSTILE_GROUP, hostile, 1)
        yield Console(b, f"http://127.0.0.1:{m.group(1)}", topic, sent, group, hostile)
        assert b.alive(), b.tail()
        assert "console: " not in b.log_since_start(), "a console page failed (500)"


# --------------------------------------------------------------------------- the JSON API


def test_api_shows_the_tiers_as_the_broker_and_the_disk_do(console):
    c, b = console, console.broker
    cluster = api(c, "/brokers")
    assert cluster["mode"] == "single node"
    assert cluster["controller_id"] == cluster["local_broker_id"] == 0
    (me,) = cluster["brokers"]
    assert me["is_self"] and me["is_controller"]
    assert f"PLAINTEXT://{b.bootstrap}" in me["endpoints"]
    assert cluster["tiered_storage"] is True

    off = Offsets(b.bootstrap, c.topic)
    remote = [(s["start_offset"], s["end_offset"], s["size"]) for s in finished(b, c.topic)]
    on_disk = local_segments(b, c.topic)
    assert off.local > 0 and off.earliest == 0, off  # fully tiered: offset 0 only remote

    (t,) = [t for t in api(c, "/topics") if t["name"] == c.topic]
    assert (t["partitions"], t["remote_storage"], t["internal"]) == (1, True, False)
    assert t["configs"]["remote.storage.enable"] == "true"
    assert t["configs"]["segment.bytes"] == str(SEGMENT_BYTES)
    assert t["remote_bytes"] == sum(size for _, _, size in remote)
    assert t["local_bytes"] == sum(size for _, size in on_disk)

    d = api(c, f"/topics/{c.topic}/partitions/0")
    s = d["summary"]
    assert (s["log_start_offset"], s["local_log_start_offset"], s["highest_tiered_offset"],
            s["high_watermark"]) == (off.earliest, off.local, off.tiered, off.end)  # fmt: skip
    assert s["high_watermark"] == RECORDS
    assert (s["copy_lag_bytes"], s["copy_lag_segments"]) == (0, 0)
    assert s["remote_segments"] == len(remote) and s["remote_bytes"] == t["remote_bytes"]
    segs = d["segments"]
    got_remote = [
        (x["start_offset"], x["end_offset"], x["size_bytes"]) for x in segs if x["tier"] == "remote"
    ]
    assert got_remote == remote
    assert all(x["state"] == "COPY_SEGMENT_FINISHED" and x["leader_epochs"] == [0]
               for x in segs if x["tier"] == "remote")  # fmt: skip
    assert got_remote[0][0] == 0
    for (_, end, _), (start, _, _) in itertools.pairwise(got_remote):
        assert start == end + 1  # contiguous offsets
    local = [x for x in segs if x["tier"] == "local"]
    assert [(x["start_offset"], x["size_bytes"]) for x in local] == on_disk
    assert local[-1]["state"] == "active" and local[-1]["end_offset"] == RECORDS - 1
    assert local[0]["start_offset"] == got_remote[-1][1] + 1 == off.local

    (lag,) = [p for p in api(c, "/tiering") if p["topic"] == c.topic]
    assert (lag["copy_lag_bytes"], lag["copy_lag_segments"]) == (0, 0)


def _assert_record(m: dict[str, Any], offset: int, sent: Sent) -> None:
    key, value, headers, ts = sent
    assert m["offset"] == offset
    assert (m["key"]["text"], m["key"]["encoding"]) == (key.decode(), "utf-8")
    assert (m["value"]["text"], m["value"]["encoding"]) == (value.decode(), "utf-8")
    assert m["timestamp"] == ts and m["timestamp_type"] == "CreateTime"
    shown = [(k, v["text"], v["encoding"]) for k, v in m["headers"]]
    expected = []
    for k, v in headers:
        try:
            expected.append((k, v.decode(), "utf-8"))
        except UnicodeDecodeError:
            expected.append((k, v.hex(), "hex"))
    assert shown == expected


def test_api_message_browser_reads_remote_and_local_records(console):
    c = console
    first = api(c, f"/topics/{c.topic}/partitions/0/messages?offset=0&limit=5")
    assert [m["offset"] for m in first["messages"]] == [0, 1, 2, 3, 4]
    for i, m in enumerate(first["messages"]):
        _assert_record(m, i, c.sent[i])
    assert first["next_offset"] == 5
    # By timestamp: make_records spaces timestamps 1 ms apart, from the first.
    ts = c.sent[1234][3]
    by_time = api(c, f"/topics/{c.topic}/partitions/0/messages?timestamp={ts}&limit=1")
    _assert_record(by_time["messages"][0], 1234, c.sent[1234])
    # The local tail (the active segment).
    last = api(c, f"/topics/{c.topic}/partitions/0/messages?offset={RECORDS - 1}")
    _assert_record(last["messages"][0], RECORDS - 1, c.sent[-1])
    assert last["next_offset"] is None
    # At the high watermark: nothing yet, said so.
    end = api(c, f"/topics/{c.topic}/partitions/0/messages?offset={RECORDS}")
    assert end["messages"] == [] and "no records yet" in end["notice"]
    # A timestamp after every record.
    late = api(c, f"/topics/{c.topic}/partitions/0/messages?timestamp={c.sent[-1][3] + 1}")
    assert late["messages"] == [] and "no record at or after" in late["notice"]


def test_api_groups_show_lag_per_partition(console):
    c = console
    (g,) = [g for g in api(c, "/groups") if g["group_id"] == c.group]
    assert (g["state"], g["members"], g["lag"]) == ("Empty", 0, RECORDS - COMMITTED)
    d = api(c, f"/groups/{c.group}")
    assert d["offsets"] == [
        {
            "topic": c.topic,
            "partition": 0,
            "committed_offset": COMMITTED,
            "high_watermark": RECORDS,
            "lag": RECORDS - COMMITTED,
            "metadata": "",
        }
    ]
    hostile = api(c, "/groups/" + urllib.parse.quote(HOSTILE_GROUP, safe=""))
    assert hostile["summary"]["group_id"] == HOSTILE_GROUP


# --------------------------------------------------------------------------- bad input


def _bad_inputs(c: Console) -> list[tuple[str, str, int, str]]:
    t = f"/topics/{c.topic}/partitions/0"
    return [
        ("GET", "/topics/no-such-topic", 404, "no topic 'no-such-topic'"),
        ("GET", "/topics/no-such-topic/partitions/0", 404, "no topic"),
        ("GET", f"/topics/{c.topic}/partitions/7", 404, "has no partition 7"),
        ("GET", f"/topics/{c.topic}/partitions/x", 404, "partition must be an integer"),
        ("GET", f"/topics/{c.topic}/partitions/-1", 404, "partition must be between"),
        ("GET", f"{t}/messages?offset=99999999", 400, "offset 99999999 is out of range"),
        ("GET", f"{t}/messages?offset=-1", 400, "offset must be between 0"),
        ("GET", f"{t}/messages?offset=abc", 400, "offset must be an integer, got 'abc'"),
        ("GET", f"{t}/messages?offset=1e3", 400, "offset must be an integer"),
        ("GET", f"{t}/messages?offset=" + "9" * 40, 400, "offset must be an integer"),
        ("GET", f"{t}/messages?limit=0", 400, "limit must be between 1 and 500"),
        ("GET", f"{t}/messages?limit=100000", 400, "limit must be between 1 and 500"),
        ("GET", f"{t}/messages?timestamp=yesterday", 400, "timestamp must be an integer"),
        ("GET", f"{t}/messages?offset=1&timestamp=1", 400, "either offset or timestamp"),
        ("GET", f"{t}/messages?offset=1&offset=2", 400, "'offset' given twice"),
        ("GET", f"{t}/messages?from=1", 400, "unknown query parameter 'from'"),
        ("GET", f"{t}/messages?offset", 400, "malformed query string 'offset'"),
        ("GET", f"{t}/messages?offset=", 400, "offset must be an integer, got ''"),
        ("GET", f"{t}/messages?%ff=1", 400, "malformed query string"),
        ("GET", "/topics?x=1", 400, "unknown query parameter 'x'"),
        ("GET", "/topics/%ff", 400, "not UTF-8"),
        ("GET", "/topics/%2e%2e", 400, "relative path segments"),
        ("GET", "/groups/no-such-group", 404, "no consumer group 'no-such-group'"),
        ("GET", "/nowhere", 404, "no such page"),
        ("POST", "/topics", 405, "method POST not allowed: the console is read-only"),
        ("DELETE", f"/topics/{c.topic}", 405, "read-only"),
    ]


def test_bad_input_gets_a_clear_4xx_never_a_500(console):
    c = console
    for method, path, status, message in _bad_inputs(c):
        for prefix in ("", "/api"):
            got, ctype, body = http_get(c.url + prefix + path, method)
            where = f"{method} {prefix}{path}"
            assert got == status, (where, got, body[:300])
            assert "Traceback" not in body and 'File "' not in body, where
            if prefix:
                assert ctype == "application/json", where
                assert json.loads(body) == {"status": status, "error": json.loads(body)["error"]}
                assert message in json.loads(body)["error"], (where, body)
            else:
                assert ctype == "text/html; charset=utf-8", where
                assert message in html.unescape(body), (where, body[-400:])


def test_malformed_http_gets_a_4xx(console):
    host, port = console.url.removeprefix("http://").split(":")
    for raw, status in (
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /topics HTTP/2.0\r\n\r\n", 505),
        (b"GET topics HTTP/1.1\r\n\r\n", 400),
        (b"GET /topics HTTP/1.1\r\nbad header\r\n\r\n", 400),
        (b"GET /topics HTTP/1.1\r\nX: \xff\r\n\r\n", 400),
        (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n", 431),
    ):
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(raw)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), (raw[:40], answer[:200])
        assert b"Traceback" not in answer
    # HEAD: the headers of the page, no body.
    status, ctype, body = http_get(console.url + "/topics", "HEAD")
    assert (status, ctype, body) == (200, "text/html; charset=utf-8", "")


def test_a_bad_console_listener_is_refused_at_startup(tmp_path):
    b = BrokerProcess(tmp_path, "console.listener=127.0.0.1:8080")
    with pytest.raises(RuntimeError, match="broker exited"):
        b.start(timeout=60)
    assert "console.listener: invalid value '127.0.0.1:8080': must be http://host:port" in (
        b.log_since_start()
    )


# --------------------------------------------------------------------------- in Chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    b = open_browser()
    try:
        yield b
    finally:
        b.quit()


def _texts(browser: Any, css: str) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    return [
        [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        for row in browser.find_elements(By.CSS_SELECTOR, css)
    ]


def test_browser_shows_remote_and_local_segments(console, browser, tmp_path):
    from selenium.webdriver.common.by import By

    c, b = console, console.broker
    remote = [(s["start_offset"], s["end_offset"]) for s in finished(b, c.topic)]
    on_disk = local_segments(b, c.topic)
    browser.get(f"{c.url}/topics")
    assert c.topic in [r[0] for r in _texts(browser, "#topics tr.topic")]
    browser.find_element(By.LINK_TEXT, c.topic).click()
    wait_for_page(browser, f"Topic {c.topic}")
    browser.find_element(By.LINK_TEXT, "0").click()
    wait_for_page(browser, f"Partition {c.topic}-0")
    rows = _texts(browser, "#segments tr.segment.remote")
    assert [(int(r[1]), int(r[2])) for r in rows] == remote
    assert all(r[0] == "remote" and r[5] == "COPY_SEGMENT_FINISHED" for r in rows)
    local = _texts(browser, "#segments tr.segment.local")
    assert [int(r[1]) for r in local] == [base for base, _ in on_disk]
    assert local[-1][5] == "active"
    # The timeline: one box per segment, in its lane.
    boxes = browser.find_elements(By.CSS_SELECTOR, "#timeline g.seg-remote")
    assert [(int(g.get_attribute("data-start")), int(g.get_attribute("data-end")))
            for g in boxes] == remote  # fmt: skip
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline g.seg-local")) == len(on_disk)
    image = check_screenshot(browser, tmp_path / "partition.png")
    # The remote lane is drawn: its colour fills boxes of about 900 x 34 pixels in all.
    assert has_color(image, REMOTE_COLOR, 10_000), "no remote segment drawn on the timeline"


def test_browser_message_browser_reads_offset_0_from_remote_storage(console, browser, tmp_path):
    from selenium.webdriver.common.by import By

    c = console
    off = Offsets(c.broker.bootstrap, c.topic)
    assert off.local > 0  # offset 0 is only in remote storage
    browser.get(f"{c.url}/topics/{c.topic}/partitions/0")
    form = browser.find_elements(By.TAG_NAME, "form")[0]
    field = form.find_element(By.NAME, "offset")
    field.clear()
    field.send_keys("0")
    form.find_element(By.TAG_NAME, "button").click()
    wait_for_page(browser, f"Messages of {c.topic}-0")
    rows = browser.find_elements(By.CSS_SELECTOR, "#messages tr.message")
    assert len(rows) == 20
    assert rows[0].get_attribute("data-offset") == "0"
    key, value, _headers, _ts = c.sent[0]
    cells = [td.text for td in rows[0].find_elements(By.TAG_NAME, "td")]
    assert cells[0] == "0"
    assert (cells[4], cells[5]) == (key.decode(), value.decode())
    assert cells[6].splitlines() == ["seq: 0", "h2:"]  # an empty value; the browser trims
    check_screenshot(browser, tmp_path / "messages.png")
    browser.find_element(By.PARTIAL_LINK_TEXT, "next: from offset 20").click()
    wait_until(lambda: _first_offset(browser) == "20", 30, "the next page, from offset 20")


def _first_offset(browser: Any) -> str | None:
    """The offset of the first message row of the page shown (None while loading)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        rows = browser.find_elements(By.CSS_SELECTOR, "#messages tr.message")
        return rows[0].get_attribute("data-offset") if rows else None
    except StaleElementReferenceException:
        return None


def test_browser_shows_hostile_names_and_bytes_as_text(console, browser, tmp_path):
    from selenium.webdriver.common.by import By

    c = console
    browser.get(f"{c.url}/topics/{c.hostile_topic}/partitions/0/messages?offset=0")
    (row,) = browser.find_elements(By.CSS_SELECTOR, "#messages tr.message")
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert (cells[4], cells[5]) == (HOSTILE_KEY.decode(), HOSTILE_VALUE.decode())
    assert cells[6] == "<h>: <v>"
    assert browser.execute_script("return window.pwned === undefined")
    assert browser.find_elements(By.ID, "bold") == []
    assert browser.find_elements(By.TAG_NAME, "img") == []
    browser.get(f"{c.url}/groups")
    browser.find_element(By.LINK_TEXT, HOSTILE_GROUP).click()
    wait_for_page(browser, f"Group {HOSTILE_GROUP}")
    assert browser.find_elements(By.ID, "it") == []
    check_screenshot(browser, tmp_path / "group.png")


def test_browser_error_page_and_brokers(console, browser, tmp_path):
    from selenium.webdriver.common.by import By

    c = console
    browser.get(f"{c.url}/topics/nope/partitions/0/messages?offset=0")
    assert browser.find_element(By.TAG_NAME, "h1").text == "404 Not Found"
    assert "no topic 'nope'" in browser.find_element(By.ID, "error").text
    browser.get(f"{c.url}/")
    (row,) = _texts(browser, "#brokers tr.broker")
    assert row[0] == "0" and f"PLAINTEXT://{c.broker.bootstrap}" in row[1]
    assert row[3] == "controller" and row[4] == "this broker"
    check_screenshot(browser, tmp_path / "brokers.png")


def test_console_is_off_by_default(broker):
    # The shared broker of the integration tests sets no console.listener.
    assert "console on http://" not in broker.log_since_start()


def test_pages_open_the_logs_a_restart_left_unopened(tmp_path):
    # A single node opens a log on its first use after a restart; the console's pages open
    # the ones they show (in a thread) and read them as a consumer would.
    listener = "console.listener=http://127.0.0.1:0"
    with running_broker(tmp_path / "b", listener) as b:
        topic = "reopened"
        cf_create_topic(b.bootstrap, topic, 3)
        for partition in range(3):
            produce(b.bootstrap, topic, make_records(5 + partition), partition=partition)
        commit(b.bootstrap, "reopened-group", topic, 2)
        b.restart()
        m = re.search(r"console on http://127\.0\.0\.1:(\d+)/", b.log_since_start())
        assert m is not None, b.tail()
        url = f"http://127.0.0.1:{m.group(1)}/api"
        status, _, body = http_get(f"{url}/topics/{topic}")
        assert status == 200, body
        parts = json.loads(body)["partitions"]
        assert [(p["hosted"], p["high_watermark"]) for p in parts] == [
            (True, 5), (True, 6), (True, 7)
        ]  # fmt: skip
        status, _, body = http_get(f"{url}/groups/reopened-group")
        assert status == 200, body
        (o,) = json.loads(body)["offsets"]
        assert (o["committed_offset"], o["high_watermark"], o["lag"]) == (2, 5, 3)
