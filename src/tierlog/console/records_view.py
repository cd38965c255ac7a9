"""The message browser's decoding: the few records a page shows, out of whole batches the
broker's fetch path returned.

This is the only place the console decodes records (the broker itself never does on its hot
path): at most ``limit`` records, from batches read for this page. Keys, values and header
values are shown as text when they are printable UTF-8, else as hex; either way the page
escapes them (:mod:`tierlog.console.pages`). Control records (transaction markers) are
skipped, as consumers skip them.

Pure functions; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.records import (
    COMPRESSION_NAMES,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    iter_headers,
    iter_records,
)

__all__ = ["MessageRow", "Shown", "batches_end", "decode_messages", "show_bytes"]

#: Bytes shown of a key, value or header value; the rest is cut (the length says how much).
MAX_SHOWN_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Shown:
    """Bytes for display: ``text`` as UTF-8 text or hex (``encoding`` says which), the full
    length, and whether ``text`` was cut to :data:`MAX_SHOWN_BYTES`. ``None`` bytes (a null
    key or value) have ``encoding`` "null"."""

    text: str
    encoding: str  # "utf-8" | "hex" | "null"
    length: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class MessageRow:
    offset: int
    timestamp: int
    timestamp_type: str  # "CreateTime" | "LogAppendTime"
    leader_epoch: int
    compression: str
    key: Shown
    value: Shown
    headers: tuple[tuple[str, Shown], ...]


def show_bytes(data: bytes | None) -> Shown:
    """``data`` as printable UTF-8 text when it is, else hex."""
    if data is None:
        return Shown("", "null", 0, False)
    cut = data[:MAX_SHOWN_BYTES]
    truncated = len(cut) < len(data)
    try:
        text = cut.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
        if truncated:  # a multi-byte character cut in two: drop its start
            for trim in (1, 2, 3):
                try:
                    text = cut[:-trim].decode("utf-8")
                    break
                except UnicodeDecodeError:
                    continue
        if not text:
            return Shown(cut.hex(), "hex", len(data), truncated)
    if text.isprintable() or all(c.isprintable() or c in "\t\n\r" for c in text):
        return Shown(text, "utf-8", len(data), truncated)
    return Shown(cut.hex(), "hex", len(data), truncated)


def decode_messages(records: bytes, from_offset: int, limit: int) -> list[MessageRow]:
    """Up to ``limit`` records at or after ``from_offset`` in ``records`` (whole batches,
    a trailing partial batch ignored).

    Raises:
        TierlogError: a batch is corrupt (CorruptRecordError) or its compression is unknown.
    """
    out: list[MessageRow] = []
    for header, recs in iter_records(records, check_crc=True):
        if header.is_control_batch or header.last_offset < from_offset:
            continue
        ts_type = (
            "LogAppendTime"
            if header.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME
            else "CreateTime"
        )
        ct = header.compression_type
        compression = COMPRESSION_NAMES[ct] if 0 <= ct < len(COMPRESSION_NAMES) else str(ct)
        for r in recs:
            if r.offset < from_offset:
                continue
            out.append(
                MessageRow(
                    offset=r.offset,
                    timestamp=r.timestamp,
                    timestamp_type=ts_type,
                    leader_epoch=header.partition_leader_epoch,
                    compression=compression,
                    key=show_bytes(r.key),
                    value=show_bytes(r.value),
                    headers=tuple((k, show_bytes(v)) for k, v in r.headers),
                )
            )
            if len(out) >= limit:
                return out
    return out


def batches_end(records: bytes) -> int | None:
    """The offset after the last complete batch in ``records`` (None: no complete batch): where
    the next page starts when this one ended before its limit (control batches, compacted
    gaps)."""
    end = None
    for header in iter_headers(records):
        end = header.next_offset
    return end
