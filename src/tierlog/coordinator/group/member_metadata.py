"""One member of a classic consumer group and the answers it awaits.

Kafka's ``MemberMetadata`` (``ClassicGroupMember`` in Kafka 4) and the ``JoinGroupResult`` /
``SyncGroupResult`` of Kafka's ``GroupCoordinator``. A member *awaits join* while its
JoinGroup response is parked and *awaits sync* while its SyncGroup response is parked: the two
callbacks stored on :class:`MemberMetadata`. The group
(:mod:`tierlog.coordinator.group.group_metadata`) and the coordinator
(:mod:`tierlog.coordinator.group.group_coordinator`) drive it; no I/O, no timing of its own.

Not thread-safe: one asyncio event loop owns every member.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "JoinCallback",
    "JoinResult",
    "MemberMetadata",
    "SyncCallback",
    "SyncResult",
    "dedupe_protocols",
]


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class JoinResult:
    """Answer to JoinGroup. ``members`` (member id, group instance id, metadata) is filled for
    the leader only. ``protocol_type``/``protocol_name`` are ``None`` on errors (JoinGroup v7+
    sends null; older versions want ""), ``leader_id`` is "" then."""

    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    """Answer to SyncGroup: this member's assignment from the leader."""

    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


# --------------------------------------------------------------------------- member


class MemberMetadata:
    """One member of a classic group (Kafka's ``MemberMetadata``).

    ``protocols`` is the member's preference-ordered list of (protocol name, metadata).
    ``heartbeat_deadline``/``heartbeat_timer`` belong to the coordinator's session timer.
    Not thread-safe.
    """

    __slots__ = (
        "assignment",
        "awaiting_join",
        "awaiting_sync",
        "client_host",
        "client_id",
        "group_instance_id",
        "heartbeat_deadline",
        "heartbeat_timer",
        "is_new",
        "member_id",
        "protocol_type",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = b""
        self.awaiting_join: JoinCallback | None = None
        self.awaiting_sync: SyncCallback | None = None
        self.is_new = False
        self.heartbeat_deadline = 0.0
        self.heartbeat_timer: asyncio.TimerHandle | None = None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        """This member's metadata (subscription) for ``protocol``.

        Raises:
            KeyError: the member does not support ``protocol`` (a coordinator bug).
        """
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The first protocol of this member's preference list that is among ``candidates``.

        Raises:
            KeyError: none of them is (a coordinator bug: candidates are common to all).
        """
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise KeyError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def __repr__(self) -> str:
        return (
            f"MemberMetadata({self.member_id!r}, instance={self.group_instance_id!r}, "
            f"client={self.client_id!r}, protocols={[p for p, _ in self.protocols]})"
        )


def dedupe_protocols(protocols: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """Keep the first entry of each protocol name (Kafka's request keys them by name)."""
    seen: set[str] = set()
    out = []
    for name, data in protocols:
        if name not in seen:
            seen.add(name)
            out.append((name, bytes(data)))
    return out
