"""``tierlog topics|produce|consume|groups``: a small command line for people, speaking the
Kafka protocol to a running broker through confluent-kafka (librdkafka) — no codec of our own.

::

    tierlog topics create orders --partitions 3 --config retention.ms=3600000
    tierlog topics list
    tierlog topics describe orders
    tierlog topics alter orders --config segment.bytes=1048576 --delete-config retention.ms
    tierlog topics alter orders --partitions 6
    tierlog topics delete orders
    printf 'k1:hello\\nworld\\n' | tierlog produce orders --key-separator :
    tierlog consume orders --from-beginning --max-messages 10
    tierlog consume orders --group g1
    tierlog groups list
    tierlog groups describe g1

Every command takes ``--bootstrap-server`` (default ``127.0.0.1:9092``, the embedded
listener) and ``--command-config KEY=VALUE`` (or a properties file, as Kafka's tools) for extra
client settings: librdkafka's, or the Java client's security keys as Spark's Kafka source takes
them (``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.*``).
Exit code 0 on success, 1 on a Kafka error, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TextIO, TypeAlias

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
TIMEOUT_S = 30.0

if TYPE_CHECKING:
    SubParsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def add_subcommands(sub: SubParsers) -> None:
    """Register ``topics``, ``produce``, ``consume`` and ``groups`` on the main parser."""
    _add_topics(sub)
    _add_produce(sub)
    _add_consume(sub)
    _add_groups(sub)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-server",
        "-b",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"the broker to talk to (default {DEFAULT_BOOTSTRAP})",
    )
    p.add_argument(
        "--command-config",
        action="append",
        default=[],
        metavar="KEY=VALUE|FILE",
        help="an extra client setting, or a properties file of them (repeatable): "
        "librdkafka's, or the Java client's security keys (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.truststore.*, ssl.keystore.*)",
    )


def _client_conf(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """librdkafka's config: the bootstrap, ``extra``, then each ``--command-config``: a
    ``KEY=VALUE``, or a properties file as Kafka's tools take it (so no secret need be on the
    command line). Security keys may be the Java client's (``security.protocol``,
    ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.*``, ``ssl.keystore.*``, as
    Spark's Kafka source takes them) or librdkafka's."""
    from tierlog.errors import ConfigError
    from tierlog.security.client_security import librdkafka_config

    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server}
    conf.update(extra)
    for item in args.command_config:
        key, sep, value = item.partition("=")
        if not sep:
            conf.update(_properties_file(item))
            continue
        conf[key.strip()] = value
    try:
        return librdkafka_config(conf)
    except ConfigError as e:
        raise SystemExit(f"--command-config {e}") from None


def _properties_file(path: str) -> dict[str, str]:
    from pathlib import Path

    from tierlog.server.kafka_config import parse_properties

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise SystemExit(
            f"--command-config expects KEY=VALUE or a properties file; cannot read {path!r}: "
            f"{e.strerror}"
        ) from None
    return parse_properties(text, source=path)


def _pairs(items: Iterable[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn Kafka errors into one line on stderr and exit code 1."""

    def run(args: argparse.Namespace) -> int:
        from confluent_kafka import KafkaException

        try:
            return fn(args)
        except KafkaException as e:
            err = e.args[0] if e.args else e
            print(f"tierlog {args.command}: {err}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130

    return run


# --------------------------------------------------------------------------- topics


def _add_topics(sub: SubParsers) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    tsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    c = tsub.add_parser("create", help="create a topic")
    _common(c)
    c.add_argument("topic")
    c.add_argument("--partitions", "-p", type=int, default=-1, help="default: num.partitions")
    c.add_argument("--replication-factor", type=int, default=-1)
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    c.add_argument("--if-not-exists", action="store_true")
    c.add_argument("--validate-only", action="store_true")
    c.set_defaults(run=_guard(_topics_create))

    ls = tsub.add_parser("list", help="list topics")
    _common(ls)
    ls.add_argument("--exclude-internal", action="store_true")
    ls.set_defaults(run=_guard(_topics_list))

    d = tsub.add_parser("describe", help="partitions and non-default configs of topics")
    _common(d)
    d.add_argument("topics", nargs="*", help="default: every topic")
    d.add_argument("--all-configs", action="store_true", help="defaults too")
    d.set_defaults(run=_guard(_topics_describe))

    a = tsub.add_parser("alter", help="change configs or grow the partition count")
    _common(a)
    a.add_argument("topic")
    a.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    a.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    a.add_argument("--partitions", type=int, help="new total partition count")
    a.set_defaults(run=_guard(_topics_alter))

    rm = tsub.add_parser("delete", help="delete topics")
    _common(rm)
    rm.add_argument("topics", nargs="+")
    rm.set_defaults(run=_guard(_topics_delete))


def _admin(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(_client_conf(args))


def _wait_all(futures: dict[Any, Any]) -> int:
    """Wait for every future; print one line per failure; 1 when any failed."""
    from confluent_kafka import KafkaException

    failed = 0
    for key, f in futures.items():
        try:
            f.result(TIMEOUT_S)
        except KafkaException as e:
            err = e.args[0] if e.args else e
            print(f"{getattr(key, 'name', key)}: {err}", file=sys.stderr)
            failed = 1
    return failed


def _topics_create(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.cimpl import NewTopic

    topic = NewTopic(
        args.topic,
        args.partitions,
        args.replication_factor,
        config=_pairs(args.config, "--config"),
    )
    admin = _admin(args)  # keep a reference: futures fail once the client is collected
    futures = admin.create_topics(
        [topic], validate_only=args.validate_only, operation_timeout=TIMEOUT_S
    )
    try:
        futures[args.topic].result(TIMEOUT_S)
    except KafkaException as e:
        err = e.args[0]
        if args.if_not_exists and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return 0
        print(f"tierlog topics create: {err.str()}", file=sys.stderr)
        return 1
    verb = "would be created" if args.validate_only else "created"
    print(f"topic {args.topic} {verb}")
    return 0


def _topics_list(args: argparse.Namespace) -> int:
    admin = _admin(args)
    md = admin.list_topics(timeout=TIMEOUT_S)
    for name in sorted(md.topics):
        if args.exclude_internal and name.startswith("__"):
            continue
        print(name)
    return 0


def _topics_describe(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from confluent_kafka.admin._config import ConfigResource

    admin = _admin(args)
    md = admin.list_topics(timeout=TIMEOUT_S)
    names = args.topics or sorted(t for t in md.topics if not t.startswith("__"))
    missing = [n for n in names if n not in md.topics]
    for n in missing:
        print(f"{n}: unknown topic", file=sys.stderr)
    names = [n for n in names if n in md.topics]
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
    configs = admin.describe_configs(resources) if resources else {}
    for res in resources:
        t = md.topics[res.name]
        rf = max((len(p.replicas) for p in t.partitions.values()), default=0)
        print(
            f"Topic: {res.name}\tPartitionCount: {len(t.partitions)}\tReplicationFactor: {rf}",
            file=out,
        )
        entries = configs[res].result(TIMEOUT_S)
        shown = [
            f"{k}={v.value}"
            for k, v in sorted(entries.items())
            if args.all_configs or not v.is_default
        ]
        print(f"\tConfigs: {','.join(shown)}", file=out)
        for pid in sorted(t.partitions):
            p = t.partitions[pid]
            print(
                f"\tTopic: {res.name}\tPartition: {pid}\tLeader: {p.leader}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}",
                file=out,
            )
    return 1 if missing else 0


def _topics_alter(args: argparse.Namespace) -> int:
    from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
    from confluent_kafka.cimpl import NewPartitions

    admin = _admin(args)
    failed = 0
    sets = _pairs(args.config, "--config")
    if sets or args.delete_config:
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()
        ] + [
            ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
            for k in args.delete_config
        ]
        res = ConfigResource(ConfigResource.Type.TOPIC, args.topic, incremental_configs=entries)
        failed |= _wait_all(admin.incremental_alter_configs([res]))
    if args.partitions is not None:
        failed |= _wait_all(admin.create_partitions([NewPartitions(args.topic, args.partitions)]))
    if not (sets or args.delete_config or args.partitions is not None):
        print("nothing to alter: give --config, --delete-config or --partitions", file=sys.stderr)
        return 2
    if not failed:
        print(f"topic {args.topic} altered")
    return failed


def _topics_delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    failed = _wait_all(admin.delete_topics(args.topics, operation_timeout=TIMEOUT_S))
    if not failed:
        for t in args.topics:
            print(f"topic {t} deleted")
    return failed


# --------------------------------------------------------------------------- produce


def _add_produce(sub: SubParsers) -> None:
    p = sub.add_parser("produce", help="produce the lines of stdin as records")
    _common(p)
    p.add_argument("topic")
    p.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line into key SEP value (lines without SEP have no key)",
    )
    p.add_argument("--partition", type=int, default=-1)
    p.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    p.add_argument(
        "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"]
    )
    p.set_defaults(run=_guard(_produce))


def _produce(args: argparse.Namespace, lines: Iterable[str] | None = None) -> int:
    from confluent_kafka import Producer

    conf = _client_conf(
        args,
        **{"acks": args.acks, "compression.type": args.compression, "linger.ms": 5},
    )
    if args.acks in ("0", "1"):
        conf["enable.idempotence"] = False
    producer = Producer(conf)
    errors: list[str] = []
    count = 0

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for line in lines if lines is not None else sys.stdin:
        line = line.rstrip("\n")
        key: bytes | None = None
        value = line
        if args.key_separator and args.key_separator in line:
            k, _, value = line.partition(args.key_separator)
            key = k.encode()
        while True:
            try:
                producer.produce(
                    args.topic,
                    value=value.encode(),
                    key=key,
                    partition=args.partition,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        count += 1
    remaining = producer.flush(TIMEOUT_S)
    if remaining or errors:
        print(
            f"tierlog produce: {remaining} undelivered, {len(errors)} failed"
            + (f": {errors[0]}" if errors else ""),
            file=sys.stderr,
        )
        return 1
    print(f"{count} records produced to {args.topic}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- consume


def _add_consume(sub: SubParsers) -> None:
    p = sub.add_parser("consume", help="print records of a topic, one per line")
    _common(p)
    p.add_argument("topic")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    p.add_argument("--group", "-g", help="consume as a member of this group (commits offsets)")
    p.add_argument("--partition", type=int, help="read only this partition (no group)")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument(
        "--timeout-ms", type=int, help="stop when no record arrived for this long (default: never)"
    )
    p.add_argument("--print-key", action="store_true")
    p.add_argument("--print-offset", action="store_true", help="prefix partition:offset")
    p.add_argument("--key-separator", default="\t")
    p.set_defaults(run=_guard(_consume))


def _consume(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from confluent_kafka import (
        OFFSET_BEGINNING,
        OFFSET_END,
        Consumer,
        KafkaException,
        TopicPartition,
    )

    reset = "earliest" if args.from_beginning else "latest"
    conf = _client_conf(
        args,
        **{
            "group.id": args.group or f"tierlog-console-{int(time.time() * 1000)}",
            "auto.offset.reset": reset,
            "enable.auto.commit": bool(args.group),
            "enable.partition.eof": False,
        },
    )
    consumer = Consumer(conf)
    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            md = consumer.list_topics(args.topic, timeout=TIMEOUT_S).topics.get(args.topic)
            if md is None or md.error is not None:
                print(f"tierlog consume: unknown topic {args.topic}", file=sys.stderr)
                return 1
            start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
            parts = [args.partition] if args.partition is not None else sorted(md.partitions)
            consumer.assign([TopicPartition(args.topic, p, start) for p in parts])
        seen = 0
        last = time.monotonic()
        while args.max_messages is None or seen < args.max_messages:
            msg = consumer.poll(0.2)
            if msg is None:
                if args.timeout_ms is not None and (time.monotonic() - last) * 1000 >= (
                    args.timeout_ms
                ):
                    break
                continue
            if msg.error():
                raise KafkaException(msg.error())
            last = time.monotonic()
            seen += 1
            parts_out = []
            if args.print_offset:
                parts_out.append(f"{msg.partition()}:{msg.offset()}")
            if args.print_key:
                key = msg.key()
                parts_out.append("null" if key is None else key.decode(errors="replace"))
            value = msg.value()
            parts_out.append("null" if value is None else value.decode(errors="replace"))
            print(args.key_separator.join(parts_out), file=out, flush=True)
        return 0
    finally:
        consumer.close()


# --------------------------------------------------------------------------- groups


def _add_groups(sub: SubParsers) -> None:
    p = sub.add_parser("groups", help="list and describe consumer groups")
    gsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = gsub.add_parser("list", help="list groups and their states")
    _common(ls)
    ls.set_defaults(run=_guard(_groups_list))
    d = gsub.add_parser("describe", help="members, assignments, committed offsets and lag")
    _common(d)
    d.add_argument("groups", nargs="+")
    d.set_defaults(run=_guard(_groups_describe))


def _groups_list(args: argparse.Namespace) -> int:
    admin = _admin(args)
    result = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    for g in sorted(result.valid, key=lambda g: g.group_id):
        print(f"{g.group_id}\t{getattr(g.state, 'name', g.state)}")
    for e in result.errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if result.errors else 0


def _groups_describe(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    admin = _admin(args)
    described = admin.describe_consumer_groups(args.groups, request_timeout=TIMEOUT_S)
    failed = 0
    probe = Consumer(_client_conf(args, **{"group.id": "tierlog-groups-describe"}))
    try:
        for group in args.groups:
            try:
                d = described[group].result(TIMEOUT_S)
            except Exception as e:
                print(f"{group}: {e}", file=sys.stderr)
                failed = 1
                continue
            state = getattr(d.state, "name", d.state)
            print(f"Group: {group}\tState: {state}\tMembers: {len(d.members)}", file=out)
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
                [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S
            )[group].result(TIMEOUT_S)
            for tp in sorted(offsets.topic_partitions, key=lambda t: (t.topic, t.partition)):
                _, high = probe.get_watermark_offsets(
                    TopicPartition(tp.topic, tp.partition), timeout=TIMEOUT_S
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
