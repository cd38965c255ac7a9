"""A KIP-848 consumer group member and the values of a heartbeat (Kafka's
``ConsumerGroupMember``, ``ConsumerGroupHeartbeatRequestData``), plus the topics as the
coordinator sees them and the ``group.consumer.*`` settings. Pure values; see
:mod:`~tierlog.coordinator.group.consumer_group` for the state machine that uses them.

Subscriptions by regex use Python's :mod:`re` with ``fullmatch`` (Kafka uses RE2/J, also a
full match; the syntaxes agree on the common subset).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from tierlog.coordinator.group.consumer_group_records import ConsumerGroupMemberMetadataValue
from tierlog.coordinator.group.current_assignment_builder import MemberAssignment, MemberState
from tierlog.errors import InvalidRegularExpression

__all__ = [
    "ConsumerGroupConfig",
    "ConsumerGroupMember",
    "HeartbeatRequest",
    "HeartbeatResult",
    "TopicImage",
    "compile_regex",
    "is_subset",
]

Assignment = Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic as the coordinator sees it now."""

    topic_id: uuid.UUID
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """Kafka's ``group.consumer.*`` settings (broker-wide, or a group's own overrides)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat's fields; None means "unchanged since the last heartbeat"."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned_topic_partitions: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """The answer: ``assignment`` is None when the member need not be told it again."""

    member_id: str
    member_epoch: int
    assignment: Assignment | None


@dataclass(slots=True)
class ConsumerGroupMember:
    """One member (Kafka's ``ConsumerGroupMember``)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    assignment: MemberAssignment = field(default_factory=MemberAssignment)

    @property
    def member_epoch(self) -> int:
        return self.assignment.member_epoch

    @property
    def state(self) -> MemberState:
        return self.assignment.state

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
        )

    def subscribes_to(self, topic: str) -> bool:
        if topic in self.subscribed_topic_names:
            return True
        regex = self.subscribed_topic_regex
        return regex is not None and compile_regex(regex).fullmatch(topic) is not None


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def compile_regex(regex: str) -> re.Pattern[str]:
    """Raises:
    InvalidRegularExpression: not a valid expression."""
    pattern = _REGEX_CACHE.get(regex)
    if pattern is None:
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            raise InvalidRegularExpression(f"Invalid regular expression {regex!r}: {exc}") from None
        if len(_REGEX_CACHE) > 1024:
            _REGEX_CACHE.clear()
        _REGEX_CACHE[regex] = pattern
    return pattern


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    """Whether the partitions a heartbeat reports are all in ``assigned``; a heartbeat that
    reports none (None) is not (Kafka's ``isSubset``)."""
    if owned is None:
        return False
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())
