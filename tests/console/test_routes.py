"""The console's routes over a fake BrokerView: pages and JSON, and a clear 4xx for every
kind of bad input."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.console.fake_view import RECORDS, TOPIC, FakeView
from tierlog.console.broker_view import FetchedBatches
from tierlog.console.http import HttpRequest
from tierlog.console.routes import ConsoleRoutes


def get(view: FakeView, target: str, method: str = "GET") -> tuple[int, str, str]:
    path, _, query = target.partition("?")
    req = HttpRequest(method, path, query, (), "10.0.0.7")
    resp = asyncio.run(ConsoleRoutes(view).handle(req))
    return resp.status, resp.content_type, resp.body.decode()


def api(view: FakeView, target: str) -> object:
    status, ctype, body = get(view, "/api" + target)
    assert (status, ctype) == (200, "application/json"), body
    return json.loads(body)


def test_every_page_renders_as_html_and_json():
    v = FakeView()
    for target in ("/", "/brokers", "/topics", f"/topics/{TOPIC}", f"/topics/{TOPIC}/partitions/0",
                   f"/topics/{TOPIC}/partitions/1", "/tiering", "/groups", "/groups/g",
                   f"/topics/{TOPIC}/partitions/0/messages"):  # fmt: skip
        status, ctype, body = get(v, target)
        assert (status, ctype) == (200, "text/html; charset=utf-8"), (target, body)
        assert body.startswith("<!DOCTYPE html>")
        api(v, target)


def test_topic_configs_are_an_object():
    (t,) = api(FakeView(), "/topics")
    assert t["configs"] == {"segment.bytes": "1"}
    assert api(FakeView(), f"/topics/{TOPIC}")["topic"]["configs"] == {"segment.bytes": "1"}


def test_messages_from_an_offset_and_a_timestamp():
    v = FakeView()
    page = api(v, f"/topics/{TOPIC}/partitions/0/messages?offset=4&limit=3")
    assert [m["offset"] for m in page["messages"]] == [4, 5, 6]
    assert [m["key"]["text"] for m in page["messages"]] == ["k4", "k5", "k6"]
    assert page["next_offset"] == 7
    page = api(v, f"/topics/{TOPIC}/partitions/0/messages?timestamp=107&limit=1")
    assert [m["offset"] for m in page["messages"]] == [7]
    assert page["asked"] == "first record at or after timestamp 107"
    page = api(v, f"/topics/{TOPIC}/partitions/0/messages")  # default: from the log start
    assert page["messages"][0]["offset"] == 0
    page = api(v, f"/topics/{TOPIC}/partitions/0/messages?offset={RECORDS - 1}")
    assert [m["offset"] for m in page["messages"]] == [RECORDS - 1]
    assert page["next_offset"] is None


def test_an_empty_remote_read_is_tried_again():
    empty = FetchedBatches(b"", RECORDS, 0)
    from tests.console.fake_view import batches

    v = FakeView(reads=[empty, empty, FetchedBatches(batches(0, 3), RECORDS, 0)])
    page = api(v, f"/topics/{TOPIC}/partitions/0/messages?offset=0&limit=1")
    assert [m["offset"] for m in page["messages"]] == [0]
    assert v.read_calls == [0, 0, 0]
    v = FakeView(reads=[empty])
    page = api(v, f"/topics/{TOPIC}/partitions/0/messages?offset=0")
    assert page["messages"] == [] and "reload" in page["notice"]
    assert len(v.read_calls) == 3


M = f"/topics/{TOPIC}/partitions/0/messages"


@pytest.mark.parametrize(
    ("target", "status", "message"),
    [
        ("/topics/nope", 404, "no topic 'nope'"),
        (f"/topics/{TOPIC}/partitions/2", 404, "topic 'orders' has no partition 2 (it has 2)"),
        (f"/topics/{TOPIC}/partitions/01x", 404, "partition must be an integer"),
        (f"/topics/{TOPIC}/partitions/1/messages", 404, "not hosted by this broker (leader: 2)"),
        (
            f"{M}?offset={RECORDS + 1}",
            400,
            "offset 11 is out of range: orders-0 has offsets 0 to 9",
        ),
        (f"{M}?offset=-5", 400, "offset must be between 0"),
        (f"{M}?offset=%20", 400, "offset must be an integer"),
        (f"{M}?offset=٣", 400, "offset must be an integer"),  # a non-ASCII digit
        (f"{M}?limit=501", 400, "limit must be between 1 and 500, got 501"),
        (f"{M}?timestamp=-1", 400, "timestamp must be between 0"),
        (f"{M}?offset=1&timestamp=2", 400, "either offset or timestamp"),
        (f"{M}?limit=1&limit=2", 400, "'limit' given twice"),
        (f"{M}?a=b", 400, "unknown query parameter 'a' (accepted: offset, timestamp, limit)"),
        (f"{M}?=", 400, "unknown query parameter ''"),
        ("/groups?x", 400, "malformed query string"),
        ("/groups/zzz", 404, "no consumer group 'zzz'"),
        ("/topics/a/b/c/d/e/f", 404, "no such page"),
    ],
)
def test_bad_input(target, status, message):
    v = FakeView()
    got, ctype, body = get(v, target)
    assert (got, ctype) == (status, "text/html; charset=utf-8")
    assert message.replace("'", "&#x27;") in body
    got, ctype, body = get(v, "/api" + target)
    assert (got, ctype) == (status, "application/json")
    assert json.loads(body) == {"status": status, "error": json.loads(body)["error"]}
    assert message in json.loads(body)["error"]


def test_methods_other_than_get_and_head():
    status, _, body = get(FakeView(), "/topics", "PUT")
    assert status == 405 and "read-only" in body
    assert get(FakeView(), "/topics", "HEAD")[0] == 200


def test_broker_side_failures_are_503():
    v = FakeView(fail_timestamp=True)
    status, _, body = get(v, f"/api{M}?timestamp=105")
    assert status == 503 and "cannot look up timestamp 105" in json.loads(body)["error"]
    v = FakeView(reads=[FetchedBatches(b"", RECORDS, 0, "NotLeaderOrFollower (error code 6)")])
    status, _, body = get(v, f"/api{M}?offset=0")
    assert status == 503 and "NotLeaderOrFollower" in json.loads(body)["error"]
    from tests.console.fake_view import batches

    corrupt = bytearray(batches(0, 3))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    v = FakeView(reads=[FetchedBatches(bytes(corrupt), RECORDS, 0)])
    status, _, body = get(v, f"/api{M}?offset=0")
    assert status == 503 and "cannot decode the records at offset 0" in json.loads(body)["error"]


def test_acls_hide_what_the_anonymous_user_may_not_describe_or_read():
    v = FakeView(
        denied={("DESCRIBE", "GROUP", "g"), ("READ", "TOPIC", TOPIC), ("DESCRIBE", "TOPIC", "x")}
    )
    assert [t["name"] for t in api(v, "/topics")] == [TOPIC]
    assert api(v, "/groups") == []
    status, _, body = get(v, "/api/groups/g")
    assert status == 403
    assert json.loads(body)["error"] == (
        "not authorized to describe group 'g': the console reads as User:ANONYMOUS from "
        "10.0.0.7 under the broker's ACLs"
    )
    # A topic it may not describe: 403 whether it exists or not (as Kafka answers).
    for target in ("/topics/x", "/topics/x/partitions/0", "/topics/x/partitions/9/messages"):
        assert get(v, "/api" + target)[0] == 403, target
    status, _, body = get(v, f"/api/topics/{TOPIC}/partitions/0/messages?offset=0")
    assert status == 403 and "not authorized to read topic 'orders'" in body
    assert api(v, f"/topics/{TOPIC}/partitions/0")["summary"]["topic"] == TOPIC
    assert v.asked_hosts == {"10.0.0.7"}


def test_acls_leave_out_the_offsets_of_topics_not_described():
    v = FakeView(topic_name="hidden", denied={("DESCRIBE", "TOPIC", "hidden")})
    g = api(v, "/groups/g")
    assert g["offsets"] == [] and g["summary"]["lag"] == 0


def test_a_read_of_only_transaction_markers_links_past_them():
    from tierlog.records import build_batch, end_transaction_marker

    key, value = end_transaction_marker(1, 0)
    markers = build_batch([(5, key, value)], base_offset=0, is_control=True, is_transactional=True)
    v = FakeView(reads=[FetchedBatches(markers, RECORDS, 0)])
    page = api(v, f"/topics/{TOPIC}/partitions/0/messages?offset=0")
    assert page["messages"] == [] and page["notice"] is None
    assert page["next_offset"] == 1
    # Fewer records than the limit in the bytes read: the next page starts past them.
    page = api(FakeView(), f"/topics/{TOPIC}/partitions/0/messages?offset=0&limit=50")
    assert [m["offset"] for m in page["messages"]] == list(range(6))
    assert page["next_offset"] == 6
