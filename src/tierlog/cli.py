"""The ``tierlog`` command line.

Each subcommand is a pair of small functions: ``_add_<name>(subparsers)`` declares its
arguments and ``_run_<name>(args) -> int`` imports its module lazily (so ``tierlog version``
does not pay for the broker's imports) and returns the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    _without_kio_test_strategies()
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.run(args))


EXIT_CODES = """exit codes:
  0    success
  1    the operation failed: Kafka answered with an error (an unknown topic or group, a
       group with members, a failed remote read), or a check found a problem (dump-log,
       remote verify)
  2    bad arguments or configuration
  3    no broker answered (client commands: unreachable, or the request timed out)
  130  interrupted (Ctrl-C)"""


def build_parser() -> argparse.ArgumentParser:
    from tierlog import __version__

    parser = argparse.ArgumentParser(
        prog="tierlog",
        description="A Kafka-compatible streaming log with tiered storage.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"tierlog {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_version(sub)
    _add_serve(sub)
    from tierlog.tools import local_cluster  # cluster: ZooKeeper and three brokers

    local_cluster.add_subcommand(sub)
    _add_dump_log(sub)
    _add_scram(sub)
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


def _without_kio_test_strategies() -> None:
    """Keep hypothesis out of a tierlog process (a broker, a command).

    kio registers a hypothesis strategy for each of its types whenever hypothesis can be
    imported (a test dependency, installed wherever the tests run). One of them builds
    hypothesis's table of the characters of a codec, which it caches under
    ``.hypothesis/`` in the working directory: a broker started in a new directory (every
    broker of the tests, of ``make cluster``, of the benchmarks) spent 2.5 s of CPU and
    200 MB of memory on it at each start (measured: importing the broker in an empty
    directory, 3.6 s of CPU and 256 MB peak RSS with hypothesis, 1.2 s and 41 MB without;
    a broker process ready in 4.5-5.3 s, 6.3-7.1 s of CPU until idle, against 1.5-1.7 s
    and 3.2-3.4 s).
    A None in ``sys.modules`` makes that import fail, as if hypothesis were not installed,
    which is how kio is meant to run in production. Nothing changes in a process that has
    imported hypothesis already (a test calling :func:`main` in-process).
    """
    if "kio" not in sys.modules:
        sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- dump-log


def _add_dump_log(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dump-log",
        help="print and check segment, index and checkpoint files (like kafka-dump-log)",
        description="Print the batches of .log files, the entries of .index/.timeindex files "
        "(flagging entries that do not match the log), producer snapshots, transaction "
        "indexes and checkpoints. Exit code 1 when a file is missing or inconsistent.",
    )
    p.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help=".log, .index, .timeindex, .txnindex, .snapshot, checkpoint files, or a remote "
        "segment's .indexes object",
    )
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


# --------------------------------------------------------------------------- scram


def _add_scram(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "scram",
        help="manage SCRAM credentials offline (the first user, before the broker runs)",
        description="SCRAM credentials in <first log dir>/scram-credentials, or with "
        "zookeeper.connect in the broker's config in ZooKeeper's /config/users (as Kafka's "
        "kafka-configs.sh --zookeeper writes them; every broker sees the change at once). "
        "Only the salted, iterated keys are stored, never the password. A running broker reads "
        "the change at its next authentication; once it runs, AlterUserScramCredentials does "
        "the same.",
    )
    ssub = p.add_subparsers(dest="scram_command", required=True, metavar="ACTION")
    add = ssub.add_parser("add", help="add or replace a user's credential")
    add.add_argument("--user", required=True, help="the user name")
    add.add_argument(
        "--mechanism",
        default="SCRAM-SHA-256",
        choices=("SCRAM-SHA-256", "SCRAM-SHA-512"),
        help="the SCRAM mechanism (default: SCRAM-SHA-256)",
    )
    add.add_argument(
        "--iterations",
        type=int,
        default=8192,
        metavar="N",
        help="PBKDF2 iterations of the salted password (default: 8192)",
    )
    add.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        help="read the password from FILE (first line); without it, prompt for it",
    )
    _add_log_dir_arguments(add)
    add.set_defaults(run=_run_scram_add)
    rm = ssub.add_parser("delete", help="delete a user's credential")
    rm.add_argument("--user", required=True, help="the user name")
    rm.add_argument(
        "--mechanism",
        default="SCRAM-SHA-256",
        choices=("SCRAM-SHA-256", "SCRAM-SHA-512"),
        help="the SCRAM mechanism (default: SCRAM-SHA-256)",
    )
    _add_log_dir_arguments(rm)
    rm.set_defaults(run=_run_scram_delete)
    ls = ssub.add_parser("list", help="list users, mechanisms and iterations")
    _add_log_dir_arguments(ls)
    ls.set_defaults(run=_run_scram_list)


def _add_log_dir_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", type=Path, metavar="FILE", help="the broker's properties")
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="as for serve"
    )


@contextlib.contextmanager
def _credential_store(args: argparse.Namespace) -> Iterator[Any]:
    """The broker's credential store: its file, or ZooKeeper's ``/config/users`` when the
    config has ``zookeeper.connect`` (the session closed when the block ends)."""
    from tierlog.security.credential_store import CredentialStore
    from tierlog.server.kafka_config import KafkaConfig

    config = KafkaConfig.from_file(args.config, args.override)
    if config.zookeeper_connect is None:
        yield CredentialStore.in_log_dir(config.log_dirs[0])
        return
    from tierlog.cluster.kafka_zk_client import KafkaZkClient
    from tierlog.security.zk_credential_store import ZkCredentialStore

    zk = KafkaZkClient(
        config.zookeeper_connect,
        session_timeout_ms=config.zookeeper_session_timeout_ms,
        connection_timeout_ms=config.zookeeper_connection_timeout_ms,
    )
    zk.start()
    try:
        store = ZkCredentialStore()
        store.start(zk, watch=False)
        yield store
    finally:
        zk.close()


def _read_password(args: argparse.Namespace) -> str:
    if args.password_file is not None:
        lines = args.password_file.read_text(encoding="utf-8").splitlines()
        return lines[0] if lines else ""
    import getpass

    first = getpass.getpass(f"password for {args.user}: ")
    if getpass.getpass("again: ") != first:
        raise ValueError("the passwords differ")
    return first


def _run_scram_add(args: argparse.Namespace) -> int:
    from tierlog.errors import ConfigError, ZooKeeperClientError
    from tierlog.security.scram import ScramMechanism, credential_from_password

    try:
        password = _read_password(args)
        if not password:
            raise ValueError("the password is empty")
        mechanism = ScramMechanism.for_name(args.mechanism)
        assert mechanism is not None
        credential = credential_from_password(mechanism, password, args.iterations)
        with _credential_store(args) as store:
            store.upsert(args.user, mechanism, credential)
            where = store.path
    except (ConfigError, ValueError, OSError, ZooKeeperClientError) as e:
        print(f"tierlog scram add: {e}", file=sys.stderr)
        return 2
    print(f"{args.mechanism} credential of {args.user} written to {where}")
    return 0


def _run_scram_delete(args: argparse.Namespace) -> int:
    from tierlog.errors import ConfigError, ZooKeeperClientError
    from tierlog.security.scram import ScramMechanism

    try:
        mechanism = ScramMechanism.for_name(args.mechanism)
        assert mechanism is not None
        with _credential_store(args) as store:
            if mechanism not in store.users().get(args.user, {}):
                print(f"tierlog scram delete: no {args.mechanism} credential for {args.user}")
                return 1
            store.delete(args.user, mechanism)
    except (ConfigError, ValueError, OSError, ZooKeeperClientError) as e:
        print(f"tierlog scram delete: {e}", file=sys.stderr)
        return 2
    return 0


def _run_scram_list(args: argparse.Namespace) -> int:
    from tierlog.errors import ConfigError, ZooKeeperClientError

    try:
        with _credential_store(args) as store:
            users = store.users()
    except (ConfigError, ValueError, OSError, ZooKeeperClientError) as e:
        print(f"tierlog scram list: {e}", file=sys.stderr)
        return 2
    for user, creds in sorted(users.items()):
        for m, iterations in sorted(creds.items(), key=lambda kv: kv[0].code):
            print(f"{user}\t{m.mechanism_name}\titerations={iterations}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
