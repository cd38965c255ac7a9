"""The console's HTML pages, rendered on the server: no script, one inline style sheet.

Everything that comes from the broker or the request (topic and group names, keys, values,
headers, client ids, error messages) goes through :func:`esc` (``html.escape`` with quotes)
or, inside a URL, :func:`quote` first; numbers are formatted from ints. So a topic named
``<script>`` is shown as text, never run.

Pure functions from values to ``str``; thread-safe.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Iterable, Sequence
from urllib.parse import quote as _quote

from tierlog.console.broker_view import (
    ClusterSummary,
    GroupDetail,
    GroupSummary,
    PartitionDetail,
    PartitionSummary,
    SegmentInfo,
    TopicSummary,
)
from tierlog.console.records_view import MessageRow, Shown

__all__ = [
    "brokers_page",
    "error_page",
    "group_page",
    "groups_page",
    "messages_page",
    "partition_page",
    "tiering_page",
    "topic_page",
    "topics_page",
]

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2a44;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:center}
header a{color:#cfe0ff;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .brand{font-weight:700;font-size:16px;color:#fff}
main{padding:16px 20px}h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:18px 0 8px}
table{border-collapse:collapse;background:#fff;margin-bottom:12px}
th,td{border:1px solid #d7dbe2;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eceff4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.remote{color:#24508f}.local{color:#1f6f3a}.muted{color:#6b7280}
pre{margin:0;white-space:pre-wrap;word-break:break-all;max-width:60em}
.err{background:#fde8e8;border:1px solid #e0a1a1;padding:10px 14px;display:inline-block}
.note{background:#fff7e0;border:1px solid #e5cf8a;padding:6px 10px;display:inline-block}
form{margin:8px 0 12px}input{width:12em}svg{background:#fff;border:1px solid #d7dbe2}
"""

_NAV = (
    ("brokers", "/brokers", "Brokers"),
    ("topics", "/topics", "Topics"),
    ("tiering", "/tiering", "Tiering lag"),
    ("groups", "/groups", "Consumer groups"),
)


def esc(v: object) -> str:
    """``v`` as HTML text (``&``, ``<``, ``>``, quotes escaped)."""
    return html.escape(str(v), quote=True)


def quote(v: object) -> str:
    """``v`` as one URL path segment or query value (every reserved character encoded)."""
    return _quote(str(v), safe="")


def _num(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _bytes(v: int | None) -> str:
    if v is None:
        return "-"
    size = float(v)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{v:,} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{v} B"  # pragma: no cover - the loop always returns


def _time(ms: int) -> str:
    if ms < 0:
        return "-"
    try:
        t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def _table(headers: Sequence[str], rows: Iterable[str], table_id: str) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(rows)
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>'
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _td(v: object, cls: str = "") -> str:
    return f'<td class="{cls}">{esc(v)}</td>' if cls else f"<td>{esc(v)}</td>"


def _link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def topic_href(topic: str) -> str:
    return f"/topics/{quote(topic)}"


def partition_href(topic: str, partition: int) -> str:
    return f"/topics/{quote(topic)}/partitions/{partition}"


def layout(title: str, active: str, body: str) -> str:
    nav = "".join(
        f'<a href="{href}"{" class=on" if key == active else ""}>{label}</a>'
        for key, href, label in _NAV
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} - tierlog console</title><style>{_STYLE}</style></head>"
        f'<body><header><span class="brand">tierlog</span>{nav}</header>'
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )


def error_page(status: int, reason: str, message: str) -> str:
    body = f'<p class="err" id="error"><b>{status} {esc(reason)}</b>: {esc(message)}</p>'
    return layout(f"{status} {reason}", "", body)


# --------------------------------------------------------------------------- brokers


def brokers_page(c: ClusterSummary) -> str:
    rows = []
    for b in c.brokers:
        role = "controller" if b.is_controller else ""
        rows.append(
            f'<tr class="broker" data-id="{b.id}"><td class="n">{b.id}</td>'
            f"{_td(', '.join(b.endpoints))}{_td(b.rack or '-')}{_td(role)}"
            f"{_td('this broker' if b.is_self else '')}</tr>"
        )
    controller = "-" if c.controller_id is None else str(c.controller_id)
    facts = (
        f'<table id="cluster"><tbody><tr><th>mode</th>{_td(c.mode)}</tr>'
        f"<tr><th>cluster id</th>{_td(c.cluster_id)}</tr>"
        f"<tr><th>controller</th>{_td(controller)}</tr>"
        f"<tr><th>this broker</th>{_td(c.local_broker_id)}</tr>"
        f"<tr><th>tiered storage</th>{_td('on' if c.tiered_storage else 'off')}</tr>"
        f"<tr><th>log dirs</th>{_td(', '.join(c.log_dirs))}</tr></tbody></table>"
    )
    table = _table(["id", "endpoints", "rack", "role", ""], rows, "brokers")
    return layout("Brokers", "brokers", facts + "<h2>Live brokers</h2>" + table)


# --------------------------------------------------------------------------- topics


def topics_page(topics: list[TopicSummary]) -> str:
    rows = []
    for t in topics:
        rows.append(
            f'<tr class="topic">{"<td>" + _link(topic_href(t.name), t.name) + "</td>"}'
            f'<td class="n">{t.partitions}</td>{_td("yes" if t.remote_storage else "no")}'
            f'<td class="n">{_bytes(t.local_bytes)}</td><td class="n">{_bytes(t.remote_bytes)}</td>'
            f"{_td('internal' if t.internal else '')}</tr>"
        )
    table = _table(
        ["topic", "partitions", "remote storage", "local bytes", "remote bytes", ""],
        rows,
        "topics",
    )
    return layout("Topics", "topics", table)


def _partition_rows(parts: Iterable[PartitionSummary], *, with_topic: bool) -> list[str]:
    rows = []
    for p in parts:
        name = f"{p.topic}-{p.partition}" if with_topic else str(p.partition)
        lag = (
            "-"
            if p.copy_lag_bytes is None
            else f"{_bytes(p.copy_lag_bytes)} / {_num(p.copy_lag_segments)} seg"
        )
        rows.append(
            f'<tr class="partition"><td>{_link(partition_href(p.topic, p.partition), name)}</td>'
            f'<td class="n">{p.leader}</td><td class="n">{p.leader_epoch}</td>'
            f"{_td(','.join(map(str, p.isr)) or '-')}"
            f'<td class="n">{_num(p.log_start_offset)}</td>'
            f'<td class="n">{_num(p.local_log_start_offset)}</td>'
            f'<td class="n">{_num(p.high_watermark)}</td>'
            f'<td class="n">{_num(p.highest_tiered_offset)}</td>'
            f'<td class="n local">{_bytes(p.local_bytes)}</td>'
            f'<td class="n remote">{_bytes(p.remote_bytes)}</td><td class="n">{esc(lag)}</td></tr>'
        )
    return rows


_PARTITION_HEADERS = [
    "partition", "leader", "epoch", "isr", "log start", "local log start", "high watermark",
    "highest tiered", "local bytes", "remote bytes", "copy lag",
]  # fmt: skip


def topic_page(t: TopicSummary, parts: list[PartitionSummary]) -> str:
    facts = (
        f'<table id="topic"><tbody><tr><th>topic id</th>{_td(t.topic_id)}</tr>'
        f"<tr><th>partitions</th>{_td(t.partitions)}</tr>"
        f"<tr><th>remote storage</th>{_td('on' if t.remote_storage else 'off')}</tr>"
        + "".join(f"<tr><th>{esc(k)}</th>{_td(v)}</tr>" for k, v in t.configs)
        + "</tbody></table>"
    )
    table = _table(_PARTITION_HEADERS, _partition_rows(parts, with_topic=False), "partitions")
    return layout(f"Topic {t.name}", "topics", facts + "<h2>Partitions</h2>" + table)


# --------------------------------------------------------------------------- a partition

_W, _LANE, _GAP = 1000, 34, 8


#: Boxes per lane of the timeline, and rows of the segment table, at most (a partition with
#: long retention may have tens of thousands of segments).
MAX_BOXES = 600
MAX_ROWS = 1000


def merge_segments(segments: Sequence[SegmentInfo], max_boxes: int) -> list[SegmentInfo]:
    """At most ``max_boxes`` boxes for one lane: runs of consecutive segments merged (offsets
    from the first start to the last end, bytes summed, epochs joined, the state when they
    share it, ``segment_id`` saying how many), or the segments themselves when few."""
    if len(segments) <= max_boxes:
        return list(segments)
    k = -(-len(segments) // max_boxes)
    out = []
    for i in range(0, len(segments), k):
        run = segments[i : i + k]
        states = {s.state for s in run}
        out.append(
            SegmentInfo(
                run[0].tier,
                run[0].start_offset,
                run[-1].end_offset,
                sum(s.size_bytes for s in run),
                tuple(sorted({e for s in run for e in s.leader_epochs})),
                states.pop() if len(states) == 1 else "mixed",
                max(s.max_timestamp_ms for s in run),
                f"{len(run)} segments",
            )
        )
    return out


def timeline_svg(segments: Sequence[SegmentInfo], log_end_offset: int | None) -> str:
    """Remote and local segments on one offset axis: a lane per tier, each segment a box as
    wide as its offset range, labelled with its bytes; the tooltip gives offsets, bytes,
    leader epochs and state. Past :data:`MAX_BOXES` segments in a lane, consecutive ones
    share a box."""
    if not segments:
        return '<p class="muted" id="timeline">no segments</p>'
    lo = min(s.start_offset for s in segments)
    hi = max(max(s.end_offset + 1 for s in segments), log_end_offset or 0)
    span = max(hi - lo, 1)
    parts = []
    for lane, tier in enumerate(("remote", "local")):
        y = 20 + lane * (_LANE + _GAP)
        parts.append(f'<text x="4" y="{y + 21}" font-size="12">{tier}</text>')
        for s in merge_segments([s for s in segments if s.tier == tier], MAX_BOXES):
            x = 60 + (s.start_offset - lo) * (_W - 70) / span
            w = max((s.end_offset + 1 - s.start_offset) * (_W - 70) / span, 2.0)
            color = {"remote": "#4a7bd0", "local": "#3aa363"}[tier]
            if s.state == "active":
                color = "#9fd8ae"
            elif tier == "remote" and s.state != "COPY_SEGMENT_FINISHED":
                color = "#b9c6dd"
            merged = (
                f", {s.segment_id}" if s.segment_id and s.segment_id.endswith(" segments") else ""
            )
            tip = (
                f"{tier} {s.start_offset}-{s.end_offset}{merged}, {_bytes(s.size_bytes)}, "
                f"epochs {','.join(map(str, s.leader_epochs)) or '-'}, {s.state}"
            )
            label = (
                f'<text x="{x + 3:.1f}" y="{y + 21}" font-size="11" fill="#fff">'
                f"{esc(_bytes(s.size_bytes))}</text>"
                if w > 70
                else ""
            )
            parts.append(
                f'<g class="seg seg-{tier}" data-start="{s.start_offset}" '
                f'data-end="{s.end_offset}"><rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
                f'height="{_LANE}" fill="{color}" stroke="#fff"><title>{esc(tip)}</title>'
                f"</rect>{label}</g>"
            )
    axis_y = 20 + 2 * (_LANE + _GAP)
    parts.append(
        f'<text x="60" y="{axis_y + 4}" font-size="11">offset {lo:,}</text>'
        f'<text x="{_W - 10}" y="{axis_y + 4}" font-size="11" text-anchor="end">'
        f"offset {hi:,}</text>"
    )
    return (
        f'<svg id="timeline" width="{_W}" height="{axis_y + 12}" '
        f'viewBox="0 0 {_W} {axis_y + 12}" role="img">{"".join(parts)}</svg>'
    )


def partition_page(d: PartitionDetail) -> str:
    p = d.summary
    lag = _table(
        ["copy lag bytes", "copy lag segments", "delete lag bytes", "delete lag segments"],
        [
            f'<tr><td class="n">{_num(p.copy_lag_bytes)}</td>'
            f'<td class="n">{_num(p.copy_lag_segments)}</td>'
            f'<td class="n">{_num(p.delete_lag_bytes)}</td>'
            f'<td class="n">{_num(p.delete_lag_segments)}</td></tr>'
        ],
        "lag",
    )
    summary = _table(_PARTITION_HEADERS, _partition_rows([p], with_topic=True), "summary")
    rows = []
    shown = d.segments
    elided = len(shown) - MAX_ROWS
    if elided > 0:  # the oldest and the newest; the JSON API lists every one
        shown = (*shown[: MAX_ROWS // 2], *shown[-MAX_ROWS // 2 :])
    for s in shown:
        rows.append(
            f'<tr class="segment {s.tier}"><td class="{s.tier}">{s.tier}</td>'
            f'<td class="n">{s.start_offset}</td><td class="n">{s.end_offset}</td>'
            f'<td class="n">{_bytes(s.size_bytes)}</td>'
            f"{_td(','.join(map(str, s.leader_epochs)) or '-')}{_td(s.state)}"
            f"{_td(_time(s.max_timestamp_ms))}{_td(s.segment_id or '')}</tr>"
        )
    if elided > 0:
        rows.insert(
            MAX_ROWS // 2,
            f'<tr class="elided"><td colspan="8" class="muted">{elided:,} segments not listed '
            "here (the JSON API, /api/topics/&lt;topic&gt;/partitions/&lt;p&gt;, lists them all)"
            "</td></tr>",
        )
    segments = _table(
        ["tier", "start offset", "end offset", "bytes", "leader epochs", "state",
         "max timestamp", "remote segment id"],
        rows,
        "segments",
    )  # fmt: skip
    browse = (
        f'<form method="get" action="{esc(partition_href(p.topic, p.partition))}/messages">'
        f'<label>offset <input name="offset" value="{_num_attr(p.log_start_offset)}"></label> '
        '<label>limit <input name="limit" value="20"></label> <button>Browse</button></form>'
        f'<form method="get" action="{esc(partition_href(p.topic, p.partition))}/messages">'
        '<label>timestamp (ms) <input name="timestamp"></label> '
        '<label>limit <input name="limit" value="20"></label> <button>Browse</button></form>'
    )
    body = (
        f"{summary}<h2>Segments</h2>{timeline_svg(d.segments, p.log_end_offset)}"
        f"{segments}<h2>Tiering lag</h2>{lag}<h2>Messages</h2>{browse}"
    )
    return layout(f"Partition {p.topic}-{p.partition}", "topics", body)


def _num_attr(v: int | None) -> str:
    return "0" if v is None else str(v)


def tiering_page(parts: list[PartitionSummary]) -> str:
    rows = []
    for p in parts:
        rows.append(
            f'<tr class="tiered"><td>{_link(partition_href(p.topic, p.partition), f"{p.topic}-{p.partition}")}</td>'  # noqa: E501
            f'<td class="n">{_num(p.high_watermark)}</td>'
            f'<td class="n">{_num(p.highest_tiered_offset)}</td>'
            f'<td class="n">{_num(p.copy_lag_bytes)}</td>'
            f'<td class="n">{_num(p.copy_lag_segments)}</td>'
            f'<td class="n">{_num(p.delete_lag_bytes)}</td>'
            f'<td class="n">{_num(p.delete_lag_segments)}</td>'
            f'<td class="n remote">{_bytes(p.remote_bytes)}</td>'
            f'<td class="n remote">{_num(p.remote_segments)}</td></tr>'
        )
    table = _table(
        ["partition", "high watermark", "highest tiered", "copy lag bytes", "copy lag segments",
         "delete lag bytes", "delete lag segments", "remote bytes", "remote segments"],
        rows,
        "tiering",
    )  # fmt: skip
    note = (
        '<p class="muted">The RemoteLogManager\'s gauges for the partitions this broker tiers: '
        "copy lag is what rolled local segments still wait to be copied.</p>"
    )
    return layout("Tiering lag", "tiering", note + table)


# --------------------------------------------------------------------------- groups


def _group_href(group_id: str) -> str:
    return f"/groups/{quote(group_id)}"


def groups_page(groups: list[GroupSummary]) -> str:
    rows = [
        f'<tr class="group"><td>{_link(_group_href(g.group_id), g.group_id)}</td>'
        f"{_td(g.state)}{_td(g.protocol_type)}{_td(g.protocol)}"
        f'<td class="n">{g.members}</td><td class="n">{_num(g.lag)}</td></tr>'
        for g in groups
    ]
    note = '<p class="muted">Groups coordinated by this broker.</p>'
    table = _table(["group", "state", "type", "assignor", "members", "lag"], rows, "groups")
    return layout("Consumer groups", "groups", note + table)


def group_page(g: GroupDetail) -> str:
    s = g.summary
    facts = (
        f'<table id="group"><tbody><tr><th>state</th>{_td(s.state)}</tr>'
        f"<tr><th>protocol type</th>{_td(s.protocol_type)}</tr>"
        f"<tr><th>assignor</th>{_td(s.protocol)}</tr>"
        f'<tr><th>total lag</th><td class="n">{_num(s.lag)}</td></tr></tbody></table>'
    )
    offsets = _table(
        ["partition", "committed offset", "high watermark", "lag", "metadata"],
        [
            f'<tr class="offset"><td>{_link(partition_href(o.topic, o.partition), f"{o.topic}-{o.partition}")}</td>'  # noqa: E501
            f'<td class="n">{o.committed_offset}</td><td class="n">{_num(o.high_watermark)}</td>'
            f'<td class="n">{_num(o.lag)}</td>{_td(o.metadata)}</tr>'
            for o in g.offsets
        ],
        "offsets",
    )
    members = _table(
        ["member id", "instance id", "client id", "host"],
        [
            f'<tr class="member">{_td(m.member_id)}{_td(m.group_instance_id or "-")}'
            f"{_td(m.client_id)}{_td(m.client_host)}</tr>"
            for m in g.members
        ],
        "members",
    )
    body = f"{facts}<h2>Lag per partition</h2>{offsets}<h2>Members</h2>{members}"
    return layout(f"Group {s.group_id}", "groups", body)


# --------------------------------------------------------------------------- messages


def _shown(v: Shown) -> str:
    if v.encoding == "null":
        return '<td class="muted">null</td>'
    tag = "" if v.encoding == "utf-8" else '<span class="muted">hex </span>'
    more = f' <span class="muted">({v.length:,} bytes, cut)</span>' if v.truncated else ""
    return f"<td>{tag}<pre>{esc(v.text)}</pre>{more}</td>"


def messages_page(
    topic: str,
    partition: int,
    rows: list[MessageRow],
    *,
    asked: str,
    next_offset: int | None,
    limit: int,
    notice: str | None,
) -> str:
    out = []
    for r in rows:
        headers = "".join(
            f"<div>{esc(k)}: {esc(v.text) if v.encoding != 'null' else 'null'}"
            f"{' (hex)' if v.encoding == 'hex' else ''}</div>"
            for k, v in r.headers
        )
        out.append(
            f'<tr class="message" data-offset="{r.offset}"><td class="n">{r.offset}</td>'
            f"{_td(_time(r.timestamp))}{_td(r.timestamp_type)}"
            f'<td class="n">{r.leader_epoch}</td>{_shown(r.key)}{_shown(r.value)}'
            f"<td>{headers}</td></tr>"
        )
    table = _table(
        ["offset", "timestamp", "type", "epoch", "key", "value", "headers"], out, "messages"
    )
    back = f"<p>{_link(partition_href(topic, partition), 'back to the partition')}</p>"
    info = f'<p class="muted" id="asked">{esc(asked)}</p>'
    if notice:
        info += f'<p class="note" id="notice">{esc(notice)}</p>'
    more = ""
    if next_offset is not None:
        href = f"{partition_href(topic, partition)}/messages?offset={next_offset}&limit={limit}"
        more = f'<p id="next">{_link(href, f"next: from offset {next_offset:,}")}</p>'
    return layout(f"Messages of {topic}-{partition}", "topics", back + info + table + more)
