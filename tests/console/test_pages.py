"""The pages escape whatever comes from the broker or the request: for any name, key or
value, the page has the same elements as for a plain one and shows the text as it is."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.console.fake_view import TOPIC, FakeView
from tierlog.console import pages
from tierlog.console.broker_view import PartitionDetail, SegmentInfo
from tierlog.console.http import HttpRequest
from tierlog.console.records_view import MessageRow, Shown, show_bytes
from tierlog.console.routes import ConsoleRoutes


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(k, None if k == "href" else v) for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def parse(html_text: str) -> _Page:
    p = _Page()
    p.feed(html_text)
    p.close()
    return p


def render(target: str, view: FakeView) -> str:
    path, _, query = target.partition("?")
    resp = asyncio.run(ConsoleRoutes(view).handle(HttpRequest("GET", path, query, ())))
    assert resp.status == 200
    return resp.body.decode()


names = st.text(min_size=1, max_size=40).filter(lambda s: s.strip() == s and "\r" not in s)


# A group named "." or ".." has no path of its own: browsers resolve such segments (even as
# %2E) before sending the request (WHATWG URL), and the console refuses them.
group_ids = names.filter(lambda s: s not in (".", ".."))


@settings(max_examples=60, deadline=None)
@given(group_ids)
def test_group_pages_escape_group_and_client_ids(name):
    from urllib.parse import quote

    view = FakeView(group_id=name, client_id=name)
    for target, reference_target in (
        ("/groups", "/groups"),
        ("/groups/" + quote(name, safe=""), "/groups/g"),
    ):
        page = parse(render(target, view))
        reference = parse(render(reference_target, FakeView()))
        assert page.tags == reference.tags
        assert name in "".join(page.text)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=60), st.binary(max_size=60), names)
def test_messages_page_escapes_keys_values_and_headers(key, value, header):
    def page_of(k: Shown, v: Shown, h: str) -> str:
        row = MessageRow(5, 1000, "CreateTime", 0, "none", k, v, ((h, v),))
        return pages.messages_page(TOPIC, 0, [row], asked="x", next_offset=6, limit=1, notice=None)

    k, v = show_bytes(key), show_bytes(value)
    page = parse(page_of(k, v, header))
    # The same kinds of values (text, hex, null), plain.
    reference = parse(page_of(replace(k, text="k"), replace(v, text="v"), "h"))
    assert page.tags == reference.tags
    assert page.attrs == reference.attrs
    text = "".join(page.text)
    for b in (key, value):
        s = show_bytes(b)
        assert s.text in text
    assert header in text


def test_timeline_draws_each_segment_in_its_lane():
    view = FakeView()
    d = asyncio.run(view.partition(TOPIC, 0))
    assert d is not None
    svg = pages.timeline_svg(d.segments, 10)
    p = parse(svg)
    assert p.tags.count("rect") == 3
    groups = [dict(a) for a in _groups(svg)]
    assert [(g["class"], g["data-start"], g["data-end"]) for g in groups] == [
        ("seg seg-remote", "0", "2"), ("seg seg-remote", "3", "5"), ("seg seg-local", "6", "9"),
    ]  # fmt: skip
    assert pages.timeline_svg((), None) == '<p class="muted" id="timeline">no segments</p>'


def _groups(svg: str) -> list[list[tuple[str, str | None]]]:
    out: list[list[tuple[str, str | None]]] = []

    class G(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "g":
                out.append(attrs)

    G().feed(svg)
    return out


def _segments(n: int) -> list[SegmentInfo]:
    return [
        SegmentInfo("remote", i * 10, i * 10 + 9, 100, (i // 1000,), "COPY_SEGMENT_FINISHED", i)
        for i in range(n)
    ]


@given(st.integers(1, 3000), st.integers(1, 700))
def test_merged_boxes_cover_the_same_offsets_and_bytes(n, max_boxes):
    segs = _segments(n)
    boxes = pages.merge_segments(segs, max_boxes)
    assert len(boxes) <= max_boxes
    assert boxes[0].start_offset == 0 and boxes[-1].end_offset == n * 10 - 1
    for a, b in itertools.pairwise(boxes):
        assert b.start_offset == a.end_offset + 1
    assert sum(b.size_bytes for b in boxes) == 100 * n
    assert {e for b in boxes for e in b.leader_epochs} == {i // 1000 for i in range(n)}
    if n <= max_boxes:
        assert boxes == segs


def test_a_partition_of_many_segments_lists_the_oldest_and_newest():
    d = PartitionDetail(asyncio.run(FakeView().partition(TOPIC, 0)).summary, tuple(_segments(5000)))
    page = pages.partition_page(d)
    assert page.count('<tr class="segment remote">') == pages.MAX_ROWS
    assert page.count('<tr class="elided">') == 1
    assert "4,000 segments not listed here" in "".join(parse(page).text)
    assert pages.MAX_BOXES // 2 < page.count('class="seg seg-remote"') <= pages.MAX_BOXES
    assert 'data-start="0" ' in page and 'data-end="49999"' in page
