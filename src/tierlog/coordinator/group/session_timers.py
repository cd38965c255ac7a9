"""Members' session timers (Kafka's ``DelayedHeartbeat``): one timer per classic member.

A member that does not heartbeat within its session timeout is removed (members awaiting a
join or sync response are exempt; new members get 5 minutes to finish their first join). Each
member has one timer and a deadline: a heartbeat only moves the deadline (O(1)), the timer
re-arms itself when it finds the deadline moved. Timers are ``loop.call_at``.

Thread-safety: none; the coordinator's one asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tierlog.coordinator.group.group_metadata import GroupMetadata, GroupState
from tierlog.coordinator.group.member_metadata import MemberMetadata

__all__ = ["SessionTimers"]

log = logging.getLogger(__name__)

_DEAD = GroupState.DEAD


class SessionTimers:
    """Arms, moves and cancels members' session timers; ``on_expired`` is told of a member
    whose session expired (it removes the member)."""

    def __init__(
        self,
        running_loop: Callable[[], asyncio.AbstractEventLoop],
        on_expired: Callable[[GroupMetadata, MemberMetadata], None],
    ) -> None:
        self._running_loop = running_loop
        self._on_expired = on_expired

    def schedule(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        """Kafka's ``completeAndScheduleNextHeartbeatExpiration``: O(1) unless the deadline
        moves earlier than the armed timer (then one cancel + one schedule)."""
        loop = self._running_loop()
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        deadline = loop.time() + timeout / 1000
        member.heartbeat_deadline = deadline
        timer = member.heartbeat_timer
        if timer is not None:
            if timer.when() <= deadline:
                return  # it will fire first and re-arm itself for the new deadline
            timer.cancel()
        member.heartbeat_timer = loop.call_at(deadline, self._on_timer, group, member)

    def _on_timer(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_timer = None
        if group.is_(_DEAD) or group.members.get(member.member_id) is not member:
            return
        loop = self._running_loop()
        if loop.time() + 0.001 < member.heartbeat_deadline:
            member.heartbeat_timer = loop.call_at(
                member.heartbeat_deadline, self._on_timer, group, member
            )
            return
        # Members parked in JoinGroup or SyncGroup cannot heartbeat: their session restarts
        # when the response is sent. New members are the exception (first join timeout).
        if member.is_new or not (member.is_awaiting_join or member.is_awaiting_sync):
            log.info("group %s: member %s session expired", group.group_id, member.member_id)
            self._on_expired(group, member)

    def cancel(self, member: MemberMetadata) -> None:
        """No more session timer for ``member`` (it left, or its group was unloaded)."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
