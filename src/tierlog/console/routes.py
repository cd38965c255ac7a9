"""The console's routes: each URL, its query parameters checked, answered as an HTML page or
(under ``/api/``) as JSON from the same values.

=========================================================  ===================================
``/`` , ``/brokers``                                       the cluster's live brokers
``/topics``                                                topics
``/topics/<topic>``                                        a topic's partitions
``/topics/<topic>/partitions/<p>``                         segments (local, remote) on a
                                                           timeline, tiering lag
``/topics/<topic>/partitions/<p>/messages?offset=N``       the message browser (also
``&limit=K`` or ``?timestamp=T&limit=K``                   ``timestamp``: ms since the epoch)
``/tiering``                                               tiering lag of every tiered partition
``/groups``, ``/groups/<group>``                           consumer groups, lag per partition
``/api/...``                                               the same as JSON
=========================================================  ===================================

Names in paths are percent-encoded path segments. Bad input gets a 4xx that says what was
wrong: 404 for an unknown path, topic, partition or group; 400 for a malformed, repeated or
unknown query parameter, or an offset outside the partition; 403 for what the broker's ACLs
refuse (the console is ``User:ANONYMOUS`` from the browser's address: it lists the topics and
groups that principal may DESCRIBE, and browses topics it may READ); 405 for a method other
than GET or HEAD. A broker-side failure of a read (not the leader, remote storage down) is a
503.

Runs on the broker's event loop thread (the :class:`~tierlog.console.broker_view.BrokerView`
requires it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

from tierlog.console import pages
from tierlog.console.broker_view import BrokerView, FetchedBatches, GroupDetail, TopicSummary
from tierlog.console.http import HttpError, HttpRequest, HttpResponse, split_path
from tierlog.console.records_view import batches_end, decode_messages
from tierlog.errors import ApiError, TierlogError

__all__ = ["ConsoleRoutes"]

log = logging.getLogger(__name__)

#: The largest ``limit`` of the message browser.
MAX_LIMIT = 500
DEFAULT_LIMIT = 20
#: Bytes read per browser page (whole batches; the first is always returned whole).
READ_BYTES = 1 << 20
#: Reads tried when a remote read answers nothing in time (the fetch path's expiry).
READ_ATTEMPTS = 3

_HTML = "text/html; charset=utf-8"
_JSON = "application/json"


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass value's fields, for json.dumps (nested values are converted as they are
    met: cheaper than ``dataclasses.asdict``, which deep-copies everything)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _json(value: Any, status: int = 200) -> HttpResponse:
    """``value`` (plain values and the view's dataclasses) as compact JSON (the C encoder:
    an indent would switch json to its pure-Python one)."""
    body = json.dumps(value, default=_fields, separators=(",", ":")).encode()
    return HttpResponse(status, _JSON, body)


def _html(text: str, status: int = 200) -> HttpResponse:
    return HttpResponse(status, _HTML, text.encode("utf-8"))


def error_response(e: HttpError, *, api: bool) -> HttpResponse:
    """The 4xx/5xx answer for ``e``: JSON ``{"error": ..., "status": ...}`` under ``/api``,
    else a page."""
    reason = HTTPStatus(e.status).phrase
    extra = (("Allow", "GET, HEAD"),) if e.status == 405 else ()
    if api:
        resp = _json({"status": e.status, "error": e.message}, e.status)
    else:
        resp = _html(pages.error_page(e.status, reason, e.message), e.status)
    return dataclasses.replace(resp, extra_headers=extra)


def _topic_json(t: TopicSummary) -> dict[str, Any]:
    """A topic as JSON, its config overrides an object."""
    out = _fields(t)
    out["configs"] = dict(t.configs)
    return out


def _query(raw: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """The query parameters, each at most once and named in ``allowed``.

    Raises:
        HttpError: 400 naming the first bad parameter.
    """
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, strict_parsing=bool(raw), errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise HttpError(400, f"malformed query string {raw[:200]!r}") from None
    out: dict[str, str] = {}
    for k, v in pairs:
        if k not in allowed:
            accepted = ", ".join(allowed) if allowed else "none"
            raise HttpError(400, f"unknown query parameter {k!r} (accepted: {accepted})")
        if k in out:
            raise HttpError(400, f"query parameter {k!r} given twice")
        out[k] = v
    return out


def _int(name: str, raw: str, lo: int, hi: int) -> int:
    """``raw`` as a decimal int in [lo, hi].

    Raises:
        HttpError: 400 saying what was expected.
    """
    s = raw.strip()
    if not (s.isascii() and s.lstrip("-").isdigit()) or len(s) > 20:
        raise HttpError(400, f"{name} must be an integer, got {raw!r}")
    v = int(s)
    if not lo <= v <= hi:
        raise HttpError(400, f"{name} must be between {lo} and {hi}, got {v}")
    return v


def _partition_index(raw: str) -> int:
    try:
        return _int("partition", raw, 0, 2**31 - 1)
    except HttpError as e:
        raise HttpError(404, f"no such partition: {e.message}") from None


class ConsoleRoutes:
    """Request -> response over a :class:`BrokerView`. Not thread-safe (event loop)."""

    def __init__(self, view: BrokerView) -> None:
        self.view = view

    async def handle(self, req: HttpRequest) -> HttpResponse:
        """Answer ``req``; every refusal is a 4xx/503 response, never an exception."""
        api = req.path == "/api" or req.path.startswith("/api/")
        try:
            if req.method not in ("GET", "HEAD"):
                raise HttpError(405, f"method {req.method} not allowed: the console is read-only")
            segs = split_path(req.path)
            if api:
                segs = segs[1:]
            return await self._route(segs, req.query, api, req.client_host)
        except HttpError as e:
            return error_response(e, api=api)

    def _may(self, who: str, operation: str, resource_type: str, name: str) -> bool:
        return self.view.authorized(who, operation, resource_type, name)

    def _require(self, who: str, operation: str, resource_type: str, name: str) -> None:
        """Raises: HttpError 403 when the ACLs refuse it (before any lookup: a topic or group
        the user may not describe is not said to exist or not, as Kafka answers)."""
        if not self._may(who, operation, resource_type, name):
            raise HttpError(
                403,
                f"not authorized to {operation.lower()} {resource_type.lower()} {name!r}: the "
                f"console reads as User:ANONYMOUS from {who or 'its client'} under the "
                "broker's ACLs",
            )

    def _topics(self, who: str) -> list[TopicSummary]:
        return [t for t in self.view.topics() if self._may(who, "DESCRIBE", "TOPIC", t.name)]

    async def _route(self, segs: list[str], query: str, api: bool, who: str) -> HttpResponse:
        match segs:
            case [] | ["brokers"]:
                _query(query, ())
                c = self.view.cluster()
                return _json(c) if api else _html(pages.brokers_page(c))
            case ["topics"]:
                _query(query, ())
                ts = self._topics(who)
                if api:
                    return _json([_topic_json(t) for t in ts])
                return _html(pages.topics_page(ts))
            case ["topics", topic]:
                _query(query, ())
                self._require(who, "DESCRIBE", "TOPIC", topic)
                return await self._topic(topic, api)
            case ["topics", topic, "partitions", p]:
                _query(query, ())
                self._require(who, "DESCRIBE", "TOPIC", topic)
                d = await self.view.partition(topic, _partition_index(p))
                if d is None:
                    raise HttpError(404, await self._missing_partition(topic, p))
                return _json(d) if api else _html(pages.partition_page(d))
            case ["topics", topic, "partitions", p, "messages"]:
                self._require(who, "DESCRIBE", "TOPIC", topic)
                self._require(who, "READ", "TOPIC", topic)
                return await self._messages(topic, _partition_index(p), query, api)
            case ["tiering"]:
                _query(query, ())
                parts = []
                for t in self._topics(who):
                    if t.remote_storage:
                        found = await self.view.topic_partitions(t.name) or []
                        parts += [p for p in found if p.copy_lag_bytes is not None]
                if api:
                    return _json(parts)
                return _html(pages.tiering_page(parts))
            case ["groups"]:
                _query(query, ())
                gs = [
                    g
                    for g in await self.view.groups()
                    if self._may(who, "DESCRIBE", "GROUP", g.group_id)
                ]
                return _json(gs) if api else _html(pages.groups_page(gs))
            case ["groups", group_id]:
                _query(query, ())
                self._require(who, "DESCRIBE", "GROUP", group_id)
                g = await self.view.group(group_id)
                if g is None:
                    raise HttpError(404, f"no consumer group {group_id!r} on this broker")
                g = self._visible_offsets(g, who)
                return _json(g) if api else _html(pages.group_page(g))
        raise HttpError(404, "no such page")

    def _visible_offsets(self, g: GroupDetail, who: str) -> GroupDetail:
        """The group's offsets of topics the user may describe (Kafka's OffsetFetch leaves
        the others out), its lag summed over those."""
        shown = tuple(o for o in g.offsets if self._may(who, "DESCRIBE", "TOPIC", o.topic))
        if len(shown) == len(g.offsets):
            return g
        lag = sum(o.lag for o in shown if o.lag is not None)
        return dataclasses.replace(
            g, offsets=shown, summary=dataclasses.replace(g.summary, lag=lag)
        )

    async def _topic(self, topic: str, api: bool) -> HttpResponse:
        t = next((t for t in self.view.topics() if t.name == topic), None)
        parts = await self.view.topic_partitions(topic)
        if t is None or parts is None:
            raise HttpError(404, f"no topic {topic!r}")
        if api:
            return _json(
                {
                    "topic": _topic_json(t),
                    "partitions": parts,
                }
            )
        return _html(pages.topic_page(t, parts))

    async def _missing_partition(self, topic: str, p: object) -> str:
        parts = await self.view.topic_partitions(topic)
        if parts is None:
            return f"no topic {topic!r}"
        return f"topic {topic!r} has no partition {p} (it has {len(parts)})"

    async def _messages(self, topic: str, partition: int, query: str, api: bool) -> HttpResponse:
        q = _query(query, ("offset", "timestamp", "limit"))
        limit = _int("limit", q["limit"], 1, MAX_LIMIT) if "limit" in q else DEFAULT_LIMIT
        if "offset" in q and "timestamp" in q:
            raise HttpError(400, "give either offset or timestamp, not both")
        d = await self.view.partition(topic, partition)
        if d is None:
            raise HttpError(404, await self._missing_partition(topic, partition))
        s = d.summary
        if s.log_start_offset is None or s.high_watermark is None:
            raise HttpError(
                404, f"{topic}-{partition} is not hosted by this broker (leader: {s.leader})"
            )
        start, hw = s.log_start_offset, s.high_watermark
        notice = None
        if "timestamp" in q:
            ts = _int("timestamp", q["timestamp"], 0, 2**63 - 1)
            try:
                offset = await self.view.offset_for_timestamp(topic, partition, ts)
            except (ApiError, TierlogError, OSError) as e:
                raise HttpError(503, f"cannot look up timestamp {ts}: {e}") from None
            asked = f"first record at or after timestamp {ts}"
            if offset < 0:
                return self._messages_answer(
                    topic, partition, [], asked, None, limit, api,
                    f"no record at or after timestamp {ts}",
                )  # fmt: skip
        else:
            offset = _int("offset", q.get("offset", str(start)), 0, 2**63 - 1)
            asked = f"from offset {offset}"
            if not start <= offset <= hw:
                held = f"offsets {start} to {hw - 1}" if hw > start else "no records yet"
                raise HttpError(
                    400,
                    f"offset {offset} is out of range: {topic}-{partition} has {held} "
                    f"(next offset {hw})",
                )
        if offset >= hw:
            return self._messages_answer(
                topic, partition, [], asked, None, limit, api, f"no records yet at offset {hw}"
            )
        fetched = await self._read(topic, partition, offset)
        if fetched.error is not None:
            raise HttpError(503, f"the broker could not read {topic}-{partition}: {fetched.error}")
        try:
            rows = decode_messages(fetched.records, offset, limit)
        except TierlogError as e:
            raise HttpError(503, f"cannot decode the records at offset {offset}: {e}") from None
        if not rows and not fetched.records:
            notice = "the read returned nothing in time (remote storage slow?): reload"
        # Past the last row shown; or, when the read held fewer records than asked (transaction
        # markers, compacted gaps), past what it read.
        last = rows[-1].offset + 1 if len(rows) == limit else batches_end(fetched.records)
        nxt = last if last is not None and last < fetched.high_watermark else None
        return self._messages_answer(topic, partition, rows, asked, nxt, limit, api, notice)

    async def _read(self, topic: str, partition: int, offset: int) -> FetchedBatches:
        fetched = await self.view.read(topic, partition, offset, READ_BYTES)
        for _ in range(READ_ATTEMPTS - 1):
            if fetched.records or fetched.error is not None:
                break
            # A remote read not done within remote.fetch.max.wait.ms answers empty (as a
            # consumer's fetch would); the read went on meanwhile: ask again.
            fetched = await self.view.read(topic, partition, offset, READ_BYTES)
        return fetched

    def _messages_answer(
        self,
        topic: str,
        partition: int,
        rows: list[Any],
        asked: str,
        nxt: int | None,
        limit: int,
        api: bool,
        notice: str | None,
    ) -> HttpResponse:
        if api:
            return _json(
                {
                    "topic": topic,
                    "partition": partition,
                    "asked": asked,
                    "notice": notice,
                    "next_offset": nxt,
                    "messages": rows,
                }
            )
        page = pages.messages_page(
            topic, partition, rows, asked=asked, next_offset=nxt, limit=limit, notice=notice
        )
        return _html(page)
