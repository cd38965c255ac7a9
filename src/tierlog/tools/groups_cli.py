"""``tierlog groups list|describe|delete|reset-offsets``: consumer groups, in the spirit of
Kafka's kafka-consumer-groups.

::

    tierlog groups list
    tierlog groups describe g1
    tierlog groups delete g1 g2
    tierlog groups reset-offsets g1 --topic orders --to-earliest --dry-run
    tierlog groups reset-offsets g1 --topic orders:0,1 --shift-by -100 --execute
    tierlog groups reset-offsets g1 --all-topics --to-datetime 2026-11-23T12:00:00Z --execute

``describe`` of a group that does not exist exits 1, as ``delete`` of one that has members
(Kafka's NON_EMPTY_GROUP). ``reset-offsets`` needs ``--dry-run`` (print the new offsets) or
``--execute`` (commit them), and a group without members (Empty, or not existing yet): its
consumers would overwrite the reset with their next commit.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from tierlog.tools.client_common import (
    EXIT_FAILED,
    UsageError,
    add_common,
    admin_client,
    client_conf,
    guard,
    timeout_s,
    unreachable,
)

if TYPE_CHECKING:
    from tierlog.tools.client_common import SubParsers

__all__ = ["add_subcommand", "parse_topic_partitions", "reset_target"]


def add_subcommand(sub: SubParsers) -> None:
    p = sub.add_parser(
        "groups", help="list, describe, delete consumer groups and reset their offsets"
    )
    gsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = gsub.add_parser("list", help="list groups and their states")
    add_common(ls)
    ls.set_defaults(run=guard(_groups_list))

    d = gsub.add_parser("describe", help="members, assignments, committed offsets and lag")
    add_common(d)
    d.add_argument("groups", nargs="+", metavar="GROUP", help="the groups to describe")
    d.set_defaults(run=guard(_groups_describe))

    rm = gsub.add_parser(
        "delete", help="delete groups without members, with their committed offsets"
    )
    add_common(rm)
    rm.add_argument("groups", nargs="+", metavar="GROUP", help="the groups to delete")
    rm.set_defaults(run=guard(_groups_delete))

    r = gsub.add_parser(
        "reset-offsets",
        help="move a group's committed offsets (the group must have no members)",
        description="Compute new committed offsets for a group's partitions and print them "
        "(--dry-run) or commit them (--execute). The group must be Empty or not exist yet.",
    )
    add_common(r)
    r.add_argument("group", help="the group whose offsets move")
    scope = r.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,P]",
        help="a topic, all its partitions or the listed ones (repeatable)",
    )
    scope.add_argument(
        "--all-topics",
        action="store_true",
        help="every partition the group has a committed offset for",
    )
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="to each partition's log start")
    how.add_argument("--to-latest", action="store_true", help="to each partition's end")
    how.add_argument(
        "--to-datetime",
        metavar="ISO8601",
        help="to the first record at or after this time, e.g. 2026-11-23T12:00:00Z (no zone: "
        "local time, as Kafka); the end when there is none",
    )
    how.add_argument(
        "--shift-by",
        type=int,
        metavar="N",
        help="move the committed offset by N (negative: back), kept within the log",
    )
    how.add_argument("--to-offset", type=int, metavar="N", help="to offset N, kept within the log")
    mode = r.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="print the new offsets only")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    r.set_defaults(run=guard(_groups_reset_offsets))


# --------------------------------------------------------------------------- list, describe


def _state(d: Any) -> str:
    return str(getattr(d.state, "name", d.state))


def _groups_list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    result = admin.list_consumer_groups(request_timeout=timeout_s()).result(timeout_s())
    for g in sorted(result.valid, key=lambda g: g.group_id):
        print(f"{g.group_id}\t{getattr(g.state, 'name', g.state)}")
    for e in result.errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if result.errors else 0


def _groups_describe(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from confluent_kafka import (
        Consumer,
        ConsumerGroupTopicPartitions,
        KafkaException,
        TopicPartition,
    )

    admin = admin_client(args)
    described = admin.describe_consumer_groups(args.groups, request_timeout=timeout_s())
    failed = 0
    probe = Consumer(client_conf(args, **{"group.id": "tierlog-groups-describe"}))
    try:
        for group in args.groups:
            try:
                d = described[group].result(timeout_s())
            except KafkaException as e:
                if unreachable(e):
                    raise
                print(f"tierlog groups describe: {group}: {e.args[0].str()}", file=sys.stderr)
                failed = EXIT_FAILED
                continue
            if _state(d) in ("DEAD", "UNKNOWN"):
                print(f"Consumer group '{group}' does not exist.", file=sys.stderr)
                failed = EXIT_FAILED
                continue
            print(f"Group: {group}\tState: {_state(d)}\tMembers: {len(d.members)}", file=out)
            for m in d.members:
                assigned = ",".join(
                    f"{tp.topic}-{tp.partition}"
                    for tp in (m.assignment.topic_partitions if m.assignment else [])
                )
                print(
                    f"\tMember: {m.member_id}\tClient: {m.client_id}\tHost: {m.host}\t"
                    f"Assigned: {assigned or '-'}",
                    file=out,
                )
            offsets = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s()
            )[group].result(timeout_s())
            for tp in sorted(offsets.topic_partitions, key=lambda t: (t.topic, t.partition)):
                _, high = probe.get_watermark_offsets(
                    TopicPartition(tp.topic, tp.partition), timeout=timeout_s()
                )
                lag = high - tp.offset if tp.offset >= 0 else "-"
                print(
                    f"\tTopic: {tp.topic}\tPartition: {tp.partition}\tCommitted: {tp.offset}\t"
                    f"End: {high}\tLag: {lag}",
                    file=out,
                )
    finally:
        probe.close()
    return failed


# --------------------------------------------------------------------------- delete


def _groups_delete(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    admin = admin_client(args)
    futures = admin.delete_consumer_groups(args.groups, request_timeout=timeout_s())
    failed = 0
    for group in args.groups:
        try:
            futures[group].result(timeout_s())
        except KafkaException as e:
            if unreachable(e):
                raise
            err = e.args[0]
            print(f"tierlog groups delete: {group}: {err.str()}", file=sys.stderr)
            failed = EXIT_FAILED
            continue
        print(f"group {group} deleted")
    return failed


# --------------------------------------------------------------------------- reset-offsets


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """``topic`` -> (topic, None: every partition); ``topic:0,2`` -> (topic, [0, 2]).

    Raises:
        UsageError: an empty topic or a partition that is not a number.
    """
    topic, sep, rest = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not topic:
        raise UsageError(f"--topic expects TOPIC or TOPIC:P,P, got {spec!r}")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(x) for x in rest.split(",")})
    except ValueError:
        raise UsageError(f"--topic expects TOPIC or TOPIC:P,P, got {spec!r}") from None


def reset_target(
    args: argparse.Namespace, current: int, low: int, high: int, at_time: int | None
) -> int:
    """The new offset of one partition: ``current`` committed (-1: none), the log's
    ``[low, high]``, ``at_time`` the offset for --to-datetime (-1: no record after it).

    Raises:
        UsageError: --shift-by of a partition without a committed offset.
    """
    if args.to_earliest:
        return low
    if args.to_latest:
        return high
    if args.to_datetime is not None:
        return high if at_time is None or at_time < 0 else at_time
    if args.to_offset is not None:
        return min(max(int(args.to_offset), low), high)
    if current < 0:
        raise UsageError("--shift-by needs a committed offset to shift")
    return int(min(max(current + args.shift_by, low), high))


def _parse_datetime(text: str) -> int:
    """Milliseconds since the epoch; a time without a zone is local time (as Kafka).

    Raises:
        UsageError: not ISO 8601.
    """
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--to-datetime expects ISO 8601, e.g. 2026-11-23T12:00:00Z, got {text!r}"
        ) from None
    return int(dt.timestamp() * 1000)


def _groups_reset_offsets(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    group = args.group
    at_ms = _parse_datetime(args.to_datetime) if args.to_datetime is not None else None
    specs = [parse_topic_partitions(s) for s in args.topic or []]
    admin = admin_client(args)
    d = admin.describe_consumer_groups([group], request_timeout=timeout_s())[group].result(
        timeout_s()
    )
    if _state(d) not in ("EMPTY", "DEAD", "UNKNOWN"):
        print(
            f"tierlog groups reset-offsets: group {group} is {_state(d)} with "
            f"{len(d.members)} members; stop its consumers first (they would overwrite "
            "the reset with their next commit)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    committed_all = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s()
    )[group].result(timeout_s())
    committed = {(tp.topic, tp.partition): tp.offset for tp in committed_all.topic_partitions}
    probe = Consumer(client_conf(args, **{"group.id": "tierlog-groups-reset-offsets"}))
    try:
        wanted: list[tuple[str, int]] = []
        if args.all_topics:
            wanted = sorted(committed)
            if not wanted:
                print(
                    f"tierlog groups reset-offsets: group {group} has no committed offsets; "
                    "name the partitions with --topic",
                    file=sys.stderr,
                )
                return EXIT_FAILED
        for topic, parts in specs:
            md = probe.list_topics(topic, timeout=timeout_s()).topics.get(topic)
            if md is None or md.error is not None:
                print(f"tierlog groups reset-offsets: unknown topic {topic}", file=sys.stderr)
                return EXIT_FAILED
            missing = [p for p in parts or [] if p not in md.partitions]
            if missing:
                print(
                    f"tierlog groups reset-offsets: {topic} has no partition "
                    f"{','.join(map(str, missing))} (it has {len(md.partitions)})",
                    file=sys.stderr,
                )
                return EXIT_FAILED
            wanted += [(topic, p) for p in (parts if parts is not None else sorted(md.partitions))]
        times: dict[tuple[str, int], int] = {}
        if at_ms is not None:
            found = probe.offsets_for_times(
                [TopicPartition(t, p, at_ms) for t, p in wanted], timeout=timeout_s()
            )
            times = {(tp.topic, tp.partition): tp.offset for tp in found}
        plan: list[tuple[str, int, int, int]] = []
        for t, p in wanted:
            low, high = probe.get_watermark_offsets(TopicPartition(t, p), timeout=timeout_s())
            current = committed.get((t, p), -1)
            try:
                new = reset_target(args, current, low, high, times.get((t, p)))
            except UsageError as e:
                raise UsageError(f"{t}-{p}: {e}") from None
            plan.append((t, p, current, new))
    finally:
        probe.close()
    if args.execute:
        done = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, n) for t, p, _, n in plan])],
            request_timeout=timeout_s(),
        )[group].result(timeout_s())
        errors = [tp for tp in done.topic_partitions if tp.error is not None]
        for tp in errors:
            print(f"{tp.topic}-{tp.partition}: {tp.error.str()}", file=sys.stderr)
        if errors:
            return EXIT_FAILED
    print(
        f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'CURRENT-OFFSET':>15} NEW-OFFSET", file=out
    )
    for t, p, current, new in plan:
        cur = str(current) if current >= 0 else "-"
        print(f"{group:<20} {t:<20} {p:>9} {cur:>15} {new}", file=out)
    if args.dry_run:
        print("(dry run: nothing committed; --execute commits these offsets)", file=out)
    return 0
