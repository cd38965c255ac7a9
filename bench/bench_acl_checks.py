"""What the ACL check costs a Produce or Fetch: :func:`tierlog.security.acl_checks.topic_error`
per topic, in process (no broker).

Figures (``name: value unit``):

* no authorizer (``authorizer.class.name`` empty): the cost of the attribute read;
* an authorizer with ``--acls`` bindings (default 1,000; literal and prefixed, several
  principals), the decision cached (every call after the first for a topic);
* the same decision uncached (the sans-IO rules over the bindings of the resource type), what
  the first request for a (principal, host, operation, topic) pays and what every call would
  pay without the cache.

Knobs: ``--calls N`` (default 1,000,000; ``BENCH_QUICK=1`` → 100,000), ``--acls N``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from types import SimpleNamespace

from tierlog.security.acl_checks import BrokerAuthorizer, topic_error
from tierlog.security.authorizer import (
    AccessControlEntry,
    AclAuthorizer,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tierlog.security.principal import KafkaPrincipal


class _Store:
    def __init__(self, bindings: list[AclBinding]) -> None:
        self.bindings = bindings

    def load(self) -> list[AclBinding]:
        return list(self.bindings)

    def add(self, bindings: object) -> None:
        pass

    def remove(self, bindings: object) -> None:
        pass


def _bindings(n: int) -> list[AclBinding]:
    out = []
    for i in range(n):
        pattern = PatternType.PREFIXED if i % 3 == 0 else PatternType.LITERAL
        out.append(
            AclBinding(
                ResourcePattern(ResourceType.TOPIC, f"topic-{i}", pattern),
                AccessControlEntry(
                    f"User:u{i % 50}", "*", AclOperation.WRITE, AclPermissionType.ALLOW
                ),
            )
        )
    return out


def _per_call_ns(fn: object, calls: int) -> float:
    f = fn  # local for the loop
    t0 = time.perf_counter()
    for _ in range(calls):
        f()  # type: ignore[operator]
    return (time.perf_counter() - t0) / calls * 1e9


def main(argv: list[str] | None = None) -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100_000 if quick else 1_000_000)
    ap.add_argument("--acls", type=int, default=1_000)
    args = ap.parse_args(argv)
    principal = KafkaPrincipal("User", "u7")
    topic = "topic-7"
    off = SimpleNamespace(authorizer=None, principal=principal, client_host="10.0.0.1")
    rules = AclAuthorizer()
    authorizer = BrokerAuthorizer(rules, _Store(_bindings(args.acls)))
    asyncio.run(authorizer.start())
    on = SimpleNamespace(authorizer=authorizer, principal=principal, client_host="10.0.0.1")
    assert topic_error(on, AclOperation.WRITE, topic) == 0

    none_ns = _per_call_ns(lambda: topic_error(off, AclOperation.WRITE, topic), args.calls)
    cached_ns = _per_call_ns(lambda: topic_error(on, AclOperation.WRITE, topic), args.calls)
    uncached_calls = max(1_000, args.calls // 100)
    uncached_ns = _per_call_ns(
        lambda: rules.authorize("User:u7", "10.0.0.1", AclOperation.WRITE, ResourceType.TOPIC,
                                topic),
        uncached_calls,
    )  # fmt: skip
    print(f"no authorizer: {none_ns:.0f} ns per topic check")
    print(f"authorizer, {args.acls} ACLs, cached: {cached_ns:.0f} ns per topic check")
    print(f"authorizer, {args.acls} ACLs, uncached: {uncached_ns:.0f} ns per topic check")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
