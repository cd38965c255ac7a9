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
    tierlog consume orders --from-beginning --max-messages 10   (tools/consume_cli.py)
    tierlog groups describe g1                                 (tools/groups_cli.py)

Every command takes ``--bootstrap-server`` (default ``127.0.0.1:9092``, the embedded
listener), ``--command-config KEY=VALUE`` (or a properties file, as Kafka's tools) for extra
client settings — librdkafka's, or the Java client's security keys as Spark's Kafka source
takes them (``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``,
``ssl.truststore.*``) — and ``--verbose``; exit codes and librdkafka's logs are in
:mod:`tierlog.tools.client_common`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TextIO

from tierlog.tools.client_common import (
    add_common,
    admin_client,
    client_conf,
    guard,
    pairs,
    timeout_s,
)

if TYPE_CHECKING:
    from tierlog.tools.client_common import SubParsers


def add_subcommands(sub: SubParsers) -> None:
    """Register ``topics``, ``produce``, ``consume`` and ``groups`` on the main parser."""
    from tierlog.tools import consume_cli, groups_cli

    _add_topics(sub)
    _add_produce(sub)
    consume_cli.add_subcommand(sub)
    groups_cli.add_subcommand(sub)


# --------------------------------------------------------------------------- topics


def _add_topics(sub: SubParsers) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    tsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    c = tsub.add_parser("create", help="create a topic")
    add_common(c)
    c.add_argument("topic", help="the topic to create")
    c.add_argument(
        "--partitions",
        "-p",
        type=int,
        default=-1,
        help="partition count (default: the broker's num.partitions)",
    )
    c.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replicas per partition (default: the broker's default.replication.factor)",
    )
    c.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config, e.g. retention.ms=3600000 (repeatable)",
    )
    c.add_argument(
        "--if-not-exists", action="store_true", help="succeed when the topic exists already"
    )
    c.add_argument("--validate-only", action="store_true", help="check the request, create nothing")
    c.set_defaults(run=guard(_topics_create))

    ls = tsub.add_parser("list", help="list topics")
    add_common(ls)
    ls.add_argument(
        "--exclude-internal",
        action="store_true",
        help="leave out internal topics (__consumer_offsets, __remote_log_metadata)",
    )
    ls.set_defaults(run=guard(_topics_list))

    d = tsub.add_parser("describe", help="partitions and non-default configs of topics")
    add_common(d)
    d.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    d.add_argument(
        "--all-configs", action="store_true", help="show default configs too, not only overrides"
    )
    d.set_defaults(run=guard(_topics_describe))

    a = tsub.add_parser("alter", help="change configs or grow the partition count")
    add_common(a)
    a.add_argument("topic", help="the topic to alter")
    a.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a topic config (repeatable)",
    )
    a.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove a topic config override, back to the default (repeatable)",
    )
    a.add_argument("--partitions", type=int, help="new total partition count")
    a.set_defaults(run=guard(_topics_alter))

    rm = tsub.add_parser("delete", help="delete topics")
    add_common(rm)
    rm.add_argument("topics", nargs="+", metavar="TOPIC", help="the topics to delete")
    rm.set_defaults(run=guard(_topics_delete))


def _wait_all(futures: dict[Any, Any]) -> int:
    """Wait for every future; print one line per failure; 1 when any failed."""
    from confluent_kafka import KafkaException

    failed = 0
    for key, f in futures.items():
        try:
            f.result(timeout_s())
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
        config=pairs(args.config, "--config"),
    )
    admin = admin_client(args)  # keep a reference: futures fail once the client is collected
    futures = admin.create_topics(
        [topic], validate_only=args.validate_only, operation_timeout=timeout_s()
    )
    try:
        futures[args.topic].result(timeout_s())
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
    admin = admin_client(args)
    md = admin.list_topics(timeout=timeout_s())
    for name in sorted(md.topics):
        if args.exclude_internal and name.startswith("__"):
            continue
        print(name)
    return 0


def _topics_describe(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from confluent_kafka.admin._config import ConfigResource

    admin = admin_client(args)
    md = admin.list_topics(timeout=timeout_s())
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
        entries = configs[res].result(timeout_s())
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

    admin = admin_client(args)
    failed = 0
    sets = pairs(args.config, "--config")
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
    admin = admin_client(args)
    failed = _wait_all(admin.delete_topics(args.topics, operation_timeout=timeout_s()))
    if not failed:
        for t in args.topics:
            print(f"topic {t} deleted")
    return failed


# --------------------------------------------------------------------------- produce


def _add_produce(sub: SubParsers) -> None:
    p = sub.add_parser("produce", help="produce the lines of stdin as records")
    add_common(p)
    p.add_argument("topic", help="the topic to write to")
    p.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line into key SEP value (lines without SEP have no key)",
    )
    p.add_argument(
        "--partition",
        type=int,
        default=-1,
        help="write every record to this partition (default: by key, else spread)",
    )
    p.add_argument(
        "--acks",
        default="all",
        choices=["0", "1", "all", "-1"],
        help="acknowledgements the broker waits for (default: all)",
    )
    p.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="batch compression (default: none)",
    )
    p.set_defaults(run=guard(_produce))


def _produce(args: argparse.Namespace, lines: Iterable[str] | None = None) -> int:
    from confluent_kafka import Producer

    conf = client_conf(
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

    from tierlog.tools.progress import progress

    source = lines if lines is not None else sys.stdin
    # A bulk produce (a file piped in) shows its records going out on a terminal's stderr.
    for line in progress(source, total=None, desc=f"producing to {args.topic}", unit="records"):
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
    remaining = producer.flush(timeout_s())
    if remaining or errors:
        print(
            f"tierlog produce: {remaining} undelivered, {len(errors)} failed"
            + (f": {errors[0]}" if errors else ""),
            file=sys.stderr,
        )
        return 1
    print(f"{count} records produced to {args.topic}", file=sys.stderr)
    return 0
