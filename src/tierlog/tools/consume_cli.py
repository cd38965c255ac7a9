"""``tierlog consume``: print a topic's records, in the spirit of kcat and Kafka's
kafka-console-consumer.

::

    tierlog consume orders --from-beginning --max-messages 10
    tierlog consume orders --partition 2 --offset 1500 --print-timestamp --print-headers
    tierlog consume orders --offset -5 --timeout-ms 2000 --format json
    tierlog consume orders --group g1

Without ``--group`` it assigns the partitions itself (no commits). It stops by itself after
``--max-messages`` records, or when no record came for ``--timeout-ms``; otherwise at Ctrl-C.
A record-level error (a failed remote read: UNKNOWN_SERVER_ERROR) is printed and exits 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from tierlog.tools.client_common import (
    UsageError,
    add_common,
    client_conf,
    guard,
    timeout_s,
)

if TYPE_CHECKING:
    from tierlog.tools.client_common import SubParsers

__all__ = ["add_subcommand", "consume", "parse_offset"]

#: CreateTime / LogAppendTime as Kafka's console consumer prints them.
_TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def add_subcommand(sub: SubParsers) -> None:
    p = sub.add_parser(
        "consume",
        help="print records of a topic, one per line",
        description="Print records of a topic, one per line (value, or the fields asked for, "
        "separated by --key-separator), or one JSON object per record with --format json.",
    )
    add_common(p)
    p.add_argument("topic", help="the topic to read")
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (same as --offset earliest)",
    )
    p.add_argument(
        "--offset",
        "-o",
        metavar="OFFSET",
        help="where to start in each partition read: earliest, latest, an offset N, or -N "
        "(N records before the end); not with --group",
    )
    p.add_argument("--group", "-g", help="consume as a member of this group (commits offsets)")
    p.add_argument(
        "--partition", "-p", type=int, help="read only this partition (default: all; no group)"
    )
    p.add_argument("--max-messages", "-n", type=int, metavar="N", help="exit after N records")
    p.add_argument(
        "--timeout-ms",
        type=int,
        metavar="MS",
        help="exit when no record arrived for MS milliseconds (default: wait forever)",
    )
    p.add_argument("--print-key", action="store_true", help="print each record's key")
    p.add_argument(
        "--print-offset", action="store_true", help="print partition:offset before each record"
    )
    p.add_argument(
        "--print-timestamp",
        action="store_true",
        help="print the timestamp as Kafka does: CreateTime:<ms> or LogAppendTime:<ms>",
    )
    p.add_argument(
        "--print-headers",
        action="store_true",
        help="print the headers as key:value,key:value (NO_HEADERS when there are none)",
    )
    p.add_argument(
        "--key-separator",
        default="\t",
        metavar="SEP",
        help="between the printed fields (default: a tab)",
    )
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text (default) or json: one object per line with topic, partition, offset, "
        "timestamp, timestamp_type, key, value, headers (strings when valid UTF-8, else "
        '{"base64": ...})',
    )
    p.set_defaults(run=guard(_run))


def parse_offset(text: str) -> tuple[str, int]:
    """``earliest``/``beginning`` -> ("earliest", 0); ``latest``/``end`` -> ("latest", 0);
    ``N`` -> ("absolute", N); ``-N`` -> ("from_end", N).

    Raises:
        UsageError: anything else.
    """
    t = text.strip().lower()
    if t in ("earliest", "beginning", "smallest"):
        return "earliest", 0
    if t in ("latest", "end", "largest"):
        return "latest", 0
    try:
        n = int(t)
    except ValueError:
        raise UsageError(
            f"--offset must be earliest, latest, an offset N or -N (N before the end), got {text!r}"
        ) from None
    return ("from_end", -n) if n < 0 else ("absolute", n)


def _bytes_json(b: bytes | None) -> Any:
    if b is None:
        return None
    try:
        return b.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


def _text(b: bytes | None) -> str:
    return "null" if b is None else b.decode(errors="replace")


def format_record(msg: Any, args: argparse.Namespace) -> str:
    """One output line for a record."""
    ts_type, ts = msg.timestamp()
    headers = msg.headers() or []
    if args.format == "json":
        return json.dumps(
            {
                "topic": msg.topic(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "timestamp": ts if ts_type else None,
                "timestamp_type": _TIMESTAMP_TYPES.get(ts_type),
                "key": _bytes_json(msg.key()),
                "value": _bytes_json(msg.value()),
                "headers": [[k, _bytes_json(v)] for k, v in headers],
            }
        )
    fields = []
    if args.print_offset:
        fields.append(f"{msg.partition()}:{msg.offset()}")
    if args.print_timestamp:
        fields.append(f"{_TIMESTAMP_TYPES[ts_type]}:{ts}" if ts_type else "NO_TIMESTAMP")
    if args.print_headers:
        fields.append(",".join(f"{k}:{_text(v)}" for k, v in headers) or "NO_HEADERS")
    if args.print_key:
        fields.append(_text(msg.key()))
    fields.append(_text(msg.value()))
    return str(args.key_separator.join(fields))


def _start_positions(
    consumer: Any, topic: str, parts: list[int], offset: tuple[str, int]
) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    kind, n = offset
    out = []
    for p in parts:
        if kind == "earliest":
            start = OFFSET_BEGINNING
        elif kind == "latest":
            start = OFFSET_END
        elif kind == "absolute":
            start = n
        else:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s()
            )
            start = max(low, high - n)
        out.append(TopicPartition(topic, p, start))
    return out


def _run(args: argparse.Namespace) -> int:
    return consume(args, sys.stdout)


def consume(args: argparse.Namespace, out: TextIO) -> int:
    """The ``consume`` command; the exit code (see :mod:`tierlog.tools.client_common`)."""
    from confluent_kafka import Consumer, KafkaException

    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError(f"--max-messages must be at least 1, got {args.max_messages}")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError(f"--timeout-ms must not be negative, got {args.timeout_ms}")
    if args.group and (args.offset is not None or args.partition is not None):
        raise UsageError("--offset and --partition read without a group; drop --group")
    if args.offset is not None and args.from_beginning:
        raise UsageError("give --offset or --from-beginning, not both")
    offset = (
        parse_offset(args.offset)
        if args.offset is not None
        else ("earliest", 0)
        if args.from_beginning
        else ("latest", 0)
    )
    conf = client_conf(
        args,
        **{
            "group.id": args.group or f"tierlog-console-{int(time.time() * 1000)}",
            "auto.offset.reset": "earliest" if offset[0] == "earliest" else "latest",
            "enable.auto.commit": bool(args.group),
            "enable.partition.eof": False,
        },
    )
    consumer = Consumer(conf)
    try:
        # Metadata first: an unknown topic or a dead broker ends here with its exit code.
        md = consumer.list_topics(args.topic, timeout=timeout_s()).topics.get(args.topic)
        if md is None or md.error is not None:
            print(f"tierlog consume: unknown topic {args.topic}", file=sys.stderr)
            return 1
        if args.group:
            consumer.subscribe([args.topic])
        else:
            if args.partition is not None and args.partition not in md.partitions:
                print(
                    f"tierlog consume: {args.topic} has no partition {args.partition} "
                    f"(it has {len(md.partitions)})",
                    file=sys.stderr,
                )
                return 1
            parts = [args.partition] if args.partition is not None else sorted(md.partitions)
            consumer.assign(_start_positions(consumer, args.topic, parts, offset))
        seen = 0
        last = time.monotonic()
        while args.max_messages is None or seen < args.max_messages:
            msg = consumer.poll(0.2)
            if msg is None:
                idle_ms = (time.monotonic() - last) * 1000
                if args.timeout_ms is not None and idle_ms >= args.timeout_ms:
                    break
                continue
            if msg.error():
                raise KafkaException(msg.error())
            last = time.monotonic()
            seen += 1
            print(format_record(msg, args), file=out, flush=True)
        return 0
    finally:
        consumer.close()
