"""The KIP-848 side of the group coordinator, on asyncio: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69), session and rebalance timeouts, persistence of the changes.

The state machine is :class:`~tierlog.coordinator.group.consumer_group.ConsumerGroup`'s
(sans-IO); this module owns the timers and the appends. A heartbeat's changes are applied in
memory at once and answered after the records are appended to ``__consumer_offsets``
(appends of a partition keep call order, so the log replays into the same state). A failed
append answers the error Kafka gives (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE); the
memory keeps the change (Kafka reverts it with its timeline structures; the member retries
with the epoch it knew and is fenced back to a consistent state in the worst case).

Mixed with classic groups as Kafka 4 does: a group id is one or the other. A heartbeat to a
classic group with members gets GROUP_ID_NOT_FOUND ("Group g is not a consumer group."); an
empty classic group (offsets only) becomes a consumer group and keeps its offsets. The
reverse (JoinGroup) is in :class:`~tierlog.coordinator.group.group_coordinator.GroupCoordinator`.
Online migration of a group with members (Kafka's ``group.consumer.migration.policy``) is not
implemented: it behaves as the policy ``disabled``.

Timers: each member has a session timer (``group.consumer.session.timeout.ms``, re-armed by
every heartbeat); a member asked to revoke partitions has a rebalance timer (its rebalance
timeout). Either firing fences the member.

Thread-safety: none; the coordinator's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupMember,
    HeartbeatRequest,
    TopicImage,
    validate_heartbeat,
)
from tierlog.coordinator.group.current_assignment_builder import MemberState
from tierlog.coordinator.group.group_config import effective_config
from tierlog.coordinator.group.group_metadata_manager import GroupMetadataManager
from tierlog.errors import ApiError, GroupIdNotFound, InvalidRequest, UnknownServerError

__all__ = [
    "ConsumerGroupCoordinator",
    "ConsumerGroupDescription",
    "HeartbeatAnswer",
    "MemberDescription",
]

log = logging.getLogger(__name__)

Assignment = Mapping[uuid.UUID, frozenset[int]]
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """ConsumerGroupHeartbeat's response fields."""

    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Assignment
    target_assignment: Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """ConsumerGroupDescribe for one group."""

    error_code: int
    error_message: str | None
    group_id: str
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[MemberDescription, ...] = ()


class ConsumerGroupCoordinator:
    """Consumer groups (KIP-848) over the shared :class:`GroupMetadataManager`. Not
    thread-safe: the event loop of :meth:`start`."""

    def __init__(
        self, manager: GroupMetadataManager, config: ConsumerGroupConfig, spawn: Spawn
    ) -> None:
        self._manager = manager
        self.config = config
        self._spawn = spawn
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._rebalance_timers: dict[tuple[str, str], tuple[int, asyncio.TimerHandle]] = {}
        #: Group configs (resource type 32): per group overrides, by Kafka's names.
        self.group_configs: dict[str, dict[str, int]] = {}
        manager.on_consumer_group_loaded = self._on_loaded
        manager.on_consumer_group_unloaded = self._on_unloaded

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for group in self._manager.consumer_groups.values():
            self._on_loaded(group)

    def stop(self) -> None:
        for group in list(self._manager.consumer_groups.values()):
            self._on_unloaded(group)

    def config_for(self, group_id: str) -> ConsumerGroupConfig:
        """The broker's settings with the group's configs on top."""
        overrides = self.group_configs.get(group_id)
        return self.config if not overrides else effective_config(self.config, overrides)

    # ================================================================== heartbeat

    async def heartbeat(self, group_id: str, req: HeartbeatRequest) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat: the answer after the changes are stored."""
        manager = self._manager
        if not group_id:
            return HeartbeatAnswer(InvalidRequest.error_code, "GroupId can't be empty.")
        if err := manager.validate_group_status(group_id, allow_empty=False):
            return HeartbeatAnswer(err)
        config = self.config_for(group_id)
        try:
            validate_heartbeat(req, config)  # before a group is created or converted
            group = self._group_for_heartbeat(group_id, req)
            topics = manager.topics()
            result = group.heartbeat(req, topics, config)
        except ApiError as exc:
            return HeartbeatAnswer(exc.error_code, exc.message)
        except AssertionError:  # an ownership invariant broke: a bug, not the client's
            log.exception("group %s: heartbeat of %s", group_id, req.member_id)
            return HeartbeatAnswer(UnknownServerError.error_code)
        member = group.members.get(result.member_id)
        if member is not None and result.member_epoch >= 0:
            self._arm_session(group, member.member_id, config)
            self._maybe_arm_rebalance(group, member)
        else:
            self._cancel_timers(group_id, req.member_id)
        if result.member_epoch == -2 and member is not None:
            self._arm_session(group, member.member_id, config)  # gone until it expires
        error = await self._store(group)
        if error:
            return HeartbeatAnswer(error)
        return HeartbeatAnswer(
            0,
            None,
            result.member_id,
            result.member_epoch,
            config.heartbeat_interval_ms,
            result.assignment,
        )

    def _group_for_heartbeat(self, group_id: str, req: HeartbeatRequest) -> ConsumerGroup:
        """The consumer group, created (or converted from an empty classic group) on a join.

        Raises:
            GroupIdNotFound: a classic group with members, or no group and not a join.
        """
        manager = self._manager
        group = manager.consumer_groups.get(group_id)
        if group is not None:
            return group
        classic = manager.get_group(group_id)
        if classic is not None and (classic.members or classic.pending_members):
            raise GroupIdNotFound(f"Group {group_id} is not a consumer group.")
        if req.member_epoch != 0:
            raise GroupIdNotFound(f"Group {group_id} not found.")
        return manager.convert_to_consumer_group(group_id)

    async def _store(self, group: ConsumerGroup) -> int:
        records, group.records = group.records, []
        if not records:
            return 0
        try:
            await self._manager.append_group_records(group.group_id, records)
        except Exception as exc:
            return self._manager.storage_error(exc, commit=False)
        return 0

    # ================================================================== timers

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("ConsumerGroupCoordinator.start() was not called")
        return self._loop

    def _arm_session(
        self, group: ConsumerGroup, member_id: str, config: ConsumerGroupConfig
    ) -> None:
        key = (group.group_id, member_id)
        old = self._session_timers.pop(key, None)
        if old is not None:
            old.cancel()
        self._session_timers[key] = self._running_loop().call_later(
            config.session_timeout_ms / 1000, self._expire, group, member_id, "session expired"
        )

    def _maybe_arm_rebalance(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        key = (group.group_id, member.member_id)
        current = self._rebalance_timers.get(key)
        if member.state is not MemberState.UNREVOKED_PARTITIONS:
            if current is not None:
                current[1].cancel()
                del self._rebalance_timers[key]
            return
        if current is not None and current[0] == member.member_epoch:
            return
        if current is not None:
            current[1].cancel()
        timeout_ms = max(member.rebalance_timeout_ms, 0)
        handle = self._running_loop().call_later(
            timeout_ms / 1000,
            self._expire_revocation,
            group,
            member.member_id,
            member.member_epoch,
        )
        self._rebalance_timers[key] = (member.member_epoch, handle)

    def _expire_revocation(self, group: ConsumerGroup, member_id: str, epoch: int) -> None:
        self._rebalance_timers.pop((group.group_id, member_id), None)
        member = group.members.get(member_id)
        if (
            member is not None
            and member.state is MemberState.UNREVOKED_PARTITIONS
            and member.member_epoch == epoch
        ):
            self._expire(
                group, member_id, "did not revoke its partitions within its rebalance timeout"
            )

    def _expire(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        self._session_timers.pop((group.group_id, member_id), None)
        if self._manager.consumer_groups.get(group.group_id) is not group:
            return
        log.info("group %s: member %s fenced: %s", group.group_id, member_id, why)
        self._cancel_timers(group.group_id, member_id)
        if group.fence_member(member_id, self._manager.topics(), self.config_for(group.group_id)):
            self._spawn(self._store_quietly(group))

    async def _store_quietly(self, group: ConsumerGroup) -> None:
        await self._store(group)

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        key = (group_id, member_id)
        session = self._session_timers.pop(key, None)
        if session is not None:
            session.cancel()
        rebalance = self._rebalance_timers.pop(key, None)
        if rebalance is not None:
            rebalance[1].cancel()

    def _on_loaded(self, group: ConsumerGroup) -> None:
        if self._loop is None:
            return  # start() arms them
        config = self.config_for(group.group_id)
        for member_id in group.members:
            self._arm_session(group, member_id, config)

    def _on_unloaded(self, group: ConsumerGroup) -> None:
        for member_id in list(group.members):
            self._cancel_timers(group.group_id, member_id)

    # ================================================================== describe

    def describe(self, group_id: str) -> ConsumerGroupDescription:
        """ConsumerGroupDescribe for one group: GROUP_ID_NOT_FOUND for an unknown or a
        classic group, as Kafka's."""
        manager = self._manager
        if err := manager.validate_group_status(group_id, allow_empty=False):
            return ConsumerGroupDescription(err, None, group_id)
        group = manager.consumer_groups.get(group_id)
        if group is None or group.dead:
            message = (
                f"Group {group_id} is not a consumer group."
                if manager.get_group(group_id) is not None
                else f"Group {group_id} not found."
            )
            return ConsumerGroupDescription(GroupIdNotFound.error_code, message, group_id)
        return ConsumerGroupDescription(
            0,
            None,
            group_id,
            group.state.value,
            group.group_epoch,
            group.assignment_epoch,
            group.preferred_assignor(self.config_for(group_id)),
            tuple(
                MemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.rack_id,
                    m.member_epoch,
                    m.client_id,
                    m.client_host,
                    m.subscribed_topic_names,
                    m.subscribed_topic_regex,
                    m.assignment.assigned,
                    group.target_assignment.get(m.member_id, {}),
                )
                for m in group.members.values()
            ),
        )

    def topic_names(self) -> dict[uuid.UUID, str]:
        """Topic id -> name, for answers that name topics."""
        return {image.topic_id: name for name, image in self._manager.topics().items()}


def topic_images(entries: Mapping[str, tuple[uuid.UUID | None, int]]) -> dict[str, TopicImage]:
    """Name -> (id, partitions) pairs as :class:`TopicImage`; topics without an id are left
    out (a consumer group names topics by id)."""
    return {
        name: TopicImage(topic_id, n)
        for name, (topic_id, n) in entries.items()
        if topic_id is not None and topic_id.int != 0
    }
