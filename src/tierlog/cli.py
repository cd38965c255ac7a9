"""The ``tierlog`` command line.

Each subcommand is a pair of small functions: ``_add_<name>(subparsers)`` declares its
arguments and ``_run_<name>(args) -> int`` imports its module lazily (so ``tierlog version``
does not pay for the broker's imports) and returns the exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.run(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierlog", description="A Kafka-compatible streaming log with tiered storage."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_version(sub)
    _add_serve(sub)
    from tierlog.tools import local_cluster  # cluster: ZooKeeper and three brokers

    local_cluster.add_subcommand(sub)
    _add_dump_log(sub)
    from tierlog.tools.client_cli import add_subcommands  # topics, produce, consume, groups

    add_subcommands(sub)
    from tierlog.tools import remote_cli  # remote ls, remote verify

    remote_cli.add_subcommands(sub)
    return parser


# --------------------------------------------------------------------------- version


def _add_version(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("version", help="print the version")
    p.set_defaults(run=_run_version)


def _run_version(args: argparse.Namespace) -> int:
    from tierlog import __version__

    print(__version__)
    return 0


# --------------------------------------------------------------------------- serve


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the broker",
        description="Run the broker. Configuration uses Kafka's server.properties names; "
        "--override pairs win over the file, which wins over the built-in defaults.",
    )
    p.add_argument("--config", "-c", type=Path, metavar="FILE", help="a server.properties file")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one config (repeatable), e.g. --override log.dirs=/tmp/tierlog",
    )
    p.set_defaults(run=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from tierlog.errors import ConfigError
    from tierlog.server.kafka_config import KafkaConfig

    try:
        config = KafkaConfig.from_file(args.config, args.override)
    except ConfigError as e:
        print(f"tierlog serve: config error: {e}", file=sys.stderr)
        return 2
    return _start_broker(config)


def _start_broker(config: object) -> int:
    """Hand over to the broker: ``tierlog.server.broker.main(config: KafkaConfig) -> int``."""
    import importlib

    try:
        broker = importlib.import_module("tierlog.server.broker")
    except ModuleNotFoundError as e:
        if e.name != "tierlog.server.broker":
            raise
        print("tierlog serve: the broker is not implemented yet", file=sys.stderr)
        return 1
    return int(broker.main(config))


# --------------------------------------------------------------------------- dump-log


def _add_dump_log(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dump-log",
        help="print and check segment, index and checkpoint files (like kafka-dump-log)",
        description="Print the batches of .log files, the entries of .index/.timeindex files "
        "(flagging entries that do not match the log), producer snapshots, transaction "
        "indexes and checkpoints. Exit code 1 when a file is missing or inconsistent.",
    )
    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p.add_argument(
        "--print-data",
        "--print-data-log",
        action="store_true",
        help="print each record's key, value and headers (implies --deep-iteration)",
    )
    p.add_argument("--deep-iteration", action="store_true", help="print each record's metadata")
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the log without printing them",
    )
    p.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only run the sanity check that decides whether an index is rebuilt at startup",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=2**31 - 1,
        metavar="N",
        help="read at most N bytes of each .log file",
    )
    p.set_defaults(run=_run_dump_log)


def _run_dump_log(args: argparse.Namespace) -> int:
    from tierlog.tools.dump_log import DumpOptions, dump_files

    options = DumpOptions(
        print_data=args.print_data,
        deep_iteration=args.deep_iteration,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        max_bytes=args.max_bytes,
    )
    try:
        return dump_files(args.files, options, sys.stdout, sys.stderr)
    except BrokenPipeError:  # `tierlog dump-log ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
