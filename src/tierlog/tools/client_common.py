"""What the client commands (``topics``, ``produce``, ``consume``, ``groups``) share: the
connection options, exit codes, and librdkafka's logs routed through :mod:`logging`.

Exit codes (also in ``tierlog --help``):

====  =====================================================================================
0     success
1     the operation failed: Kafka answered with an error (an unknown topic or group, a
      non-empty group, a failed remote read), or a check found a problem
2     bad arguments or configuration
3     no broker answered (unreachable, or the request timed out)
130   interrupted (Ctrl-C)
====  =====================================================================================

librdkafka logs through the ``logger`` setting (confluent-kafka) into the ``tierlog.client``
logger: by default each distinct message (numbers aside) is shown at most once a minute, so a
dead broker is one line ("Connect to ... failed: Connection refused"), not one per retry;
``--verbose`` shows every line, librdkafka's debug ones too with ``--command-config
debug=broker``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

from tierlog.tiered.log_limiter import LogLimiter

if TYPE_CHECKING:
    SubParsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "TIMEOUT_S",
    "UsageError",
    "add_common",
    "admin_client",
    "client_conf",
    "guard",
    "pairs",
    "timeout_s",
    "unreachable",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
TIMEOUT_S = 30.0
#: This process's request timeout (``--request-timeout-ms``; one command per process).
_timeout = {"s": TIMEOUT_S}


def timeout_s() -> float:
    """Seconds a request may take before the command gives up (exit code 3)."""
    return _timeout["s"]


EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = (
    "exit codes: 0 success; 1 the operation failed (Kafka answered with an error, or a check "
    "found a problem); 2 bad arguments or configuration; 3 no broker answered; "
    "130 interrupted"
)

#: librdkafka errors that mean no broker answered (exit code 3).
_UNREACHABLE = ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_TIMED_OUT")

log = logging.getLogger("tierlog.client")


class UsageError(Exception):
    """Bad arguments found after parsing (exit code 2)."""


def add_common(p: argparse.ArgumentParser) -> None:
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
    p.add_argument(
        "--request-timeout-ms",
        type=int,
        default=int(TIMEOUT_S * 1000),
        metavar="MS",
        help=f"give up on a request after MS milliseconds (default {int(TIMEOUT_S * 1000)}); "
        "no answer at all exits 3",
    )
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="show every librdkafka log line (default: each distinct one once a minute)",
    )


class _OncePerMinute(logging.Filter):
    """Passes a librdkafka line when its text, numbers aside, was not shown in a minute."""

    def __init__(self) -> None:
        super().__init__()
        self._limiter = LogLimiter(60.0)

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "N", record.getMessage())
        return self._limiter.admit(key) is not None


def _librdkafka_logger(verbose: bool) -> logging.Logger:
    """``tierlog.client.librdkafka``, set up once per process: stderr, ``tierlog: `` prefix."""
    lg = logging.getLogger("tierlog.client.librdkafka")
    if not lg.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("tierlog: librdkafka %(levelname)s %(message)s"))
        lg.addHandler(handler)
        lg.propagate = False
    for f in list(lg.filters):
        lg.removeFilter(f)
    if verbose:
        lg.setLevel(logging.DEBUG)
    else:
        lg.setLevel(logging.WARNING)
        lg.addFilter(_OncePerMinute())
    return lg


def client_conf(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """librdkafka settings: the bootstrap server, the logger, ``extra``, then each
    ``--command-config`` (which wins): a ``KEY=VALUE``, or a properties file as Kafka's tools
    take it (so no secret need be on the command line). Security keys may be the Java
    client's (``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``,
    ``ssl.truststore.*``, ``ssl.keystore.*``, as Spark's Kafka source takes them) or
    librdkafka's.

    Raises:
        UsageError: a ``--command-config`` item is neither KEY=VALUE nor a readable file, or
            its security settings are invalid.
    """
    from tierlog.errors import ConfigError
    from tierlog.security.client_security import librdkafka_config

    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server}
    conf.update(extra)
    for item in args.command_config:
        key, sep, value = item.partition("=")
        if not sep:
            conf.update(_properties_file(item))
        elif not key.strip():
            raise UsageError(f"--command-config expects KEY=VALUE, got {item!r}")
        else:
            conf[key.strip()] = value
    try:
        out: dict[str, Any] = dict(librdkafka_config(conf))
    except ConfigError as e:
        raise UsageError(f"--command-config {e}") from None
    out["logger"] = _librdkafka_logger(getattr(args, "verbose", False))
    return out


def _properties_file(path: str) -> dict[str, str]:
    from pathlib import Path

    from tierlog.server.config.properties import parse_properties

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(
            f"--command-config expects KEY=VALUE or a properties file; cannot read {path!r}: "
            f"{e.strerror}"
        ) from None
    return parse_properties(text, source=path)


def pairs(items: Iterable[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` items as a dict.

    Raises:
        UsageError: an item without ``=`` or without a key.
    """
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{what} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def admin_client(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_conf(args))


def unreachable(e: BaseException) -> bool:
    """A librdkafka error that means no broker answered (exit code 3)."""
    from confluent_kafka import KafkaError, KafkaException

    err = e.args[0] if isinstance(e, KafkaException) and e.args else e
    return isinstance(err, KafkaError) and err.name() in _UNREACHABLE


def command_name(args: argparse.Namespace) -> str:
    action = getattr(args, "action", None)
    return f"tierlog {args.command}" + (f" {action}" if action else "")


def guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a command: a Kafka error becomes one line on stderr and exit code 1 (3 when no
    broker answered), bad arguments exit 2, Ctrl-C 130."""

    def run(args: argparse.Namespace) -> int:
        from confluent_kafka import KafkaError, KafkaException

        name = command_name(args)
        _timeout["s"] = getattr(args, "request_timeout_ms", TIMEOUT_S * 1000) / 1000
        try:
            if _timeout["s"] <= 0:
                raise UsageError(
                    f"--request-timeout-ms must be positive, got {args.request_timeout_ms}"
                )
            return fn(args)
        except UsageError as e:
            print(f"{name}: {e}", file=sys.stderr)
            return EXIT_USAGE
        except KafkaException as e:
            err = e.args[0] if e.args else e
            if unreachable(e) and isinstance(err, KafkaError):
                print(
                    f"{name}: no broker answered at {args.bootstrap_server}: {err.str()}",
                    file=sys.stderr,
                )
                return EXIT_UNREACHABLE
            text = err.str() if isinstance(err, KafkaError) else str(err)
            print(f"{name}: {text}", file=sys.stderr)
            return EXIT_FAILED
        except TimeoutError:
            # A request future not answered within --request-timeout-ms (librdkafka had not
            # yet given up on the connection itself): no broker answered either.
            print(
                f"{name}: no broker answered at {args.bootstrap_server}: no answer within "
                f"{int(_timeout['s'] * 1000)} ms",
                file=sys.stderr,
            )
            return EXIT_UNREACHABLE
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED

    return run
