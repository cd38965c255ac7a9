"""Kafka's ZooKeeper-mode metadata operations (Kafka's ``KafkaZkClient``): broker
registration, the controller election, topics, partition state, admin requests.

The znodes and their JSON are in :mod:`tierlog.cluster.zk_data`; the session, the pipelined
requests, retries and watches in :mod:`tierlog.cluster.zookeeper_client`. Batch reads and
writes (all brokers, all assignments, the state of 10,000 partitions) are one pipeline each.

Fencing (cluster-reference.md §2 and §6, KAFKA-6082): every controller write is a ZooKeeper
multi whose first operation is ``check(/controller_epoch, controller_epoch_zk_version)``.
When that check fails another controller was elected since this one was, and the call raises
:class:`ControllerMovedError`: the caller must resign. A write of one partition's state is a
compare-and-set on the znode's version (the partition epoch); losing it is a result
(``kazoo.exceptions.BadVersionError``), not an exception, since the caller re-reads and
retries that partition. A compare-and-set that was sent again after a connection loss and
then finds the znode exactly one version further holding its own data counts as done (the
first attempt was applied; Kafka's ``checkLeaderAndIsrZkData``).

Thread-safe, as :class:`~tierlog.cluster.zookeeper_client.ZooKeeperClient`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Mapping

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from tierlog.cluster import zk_data as zd
from tierlog.cluster.zk_data import BrokerInfo, ControllerInfo, PartitionState, TopicAssignment
from tierlog.cluster.zookeeper_client import (
    ControllerMovedError,
    ZooKeeperClient,
    checked_call,
    checked_outcome,
    create_call,
    delete_call,
    exists_call,
    get_call,
    multi_call,
    set_call,
    tx_create,
    tx_delete,
    tx_set,
)
from tierlog.errors import TopicAlreadyExists, ZooKeeperClientError

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def _require_version(tp: TopicPartition, state: PartitionState) -> None:
    # -1 would make ZooKeeper write whatever the version: no compare-and-set at all
    if state.zk_version < 0:
        raise ValueError(f"{tp}: a compare-and-set needs the zk_version the state was read at")


class KafkaZkClient(ZooKeeperClient):
    """A broker's ZooKeeper session with Kafka's znode operations."""

    # ------------------------------------------------------------------ cluster

    def create_top_level_paths(self) -> None:
        """Create Kafka's persistent top-level znodes that are absent (``/brokers/ids``,
        ``/brokers/topics``, ``/config/topics``, ``/admin/delete_topics``, ...)."""
        self.ensure_paths(zd.PERSISTENT_ZK_PATHS)

    def get_or_create_cluster_id(self, proposed: str) -> str:
        """The cluster id at ``/cluster/id``; writes ``proposed`` when there is none."""
        for _ in range(10):
            try:
                self._one(create_call(zd.CLUSTER_ID_PATH, zd.encode_cluster_id(proposed)))
                return proposed
            except NodeExistsError:
                got = self.get_data(zd.CLUSTER_ID_PATH)
                if got is not None:
                    return zd.decode_cluster_id(got[0])
        raise ZooKeeperClientError(f"{zd.CLUSTER_ID_PATH} kept appearing and disappearing")

    # ------------------------------------------------------------------ brokers

    def register_broker(self, info: BrokerInfo, stale_wait_s: float | None = None) -> int:
        """Create ``/brokers/ids/<id>`` (ephemeral) and return the broker epoch (its czxid).

        Kafka's multi {create with empty data, set data at version 0}. When the node exists:
        owned by this session, it is ours (a create retried after a connection loss); owned
        by an expired session of this client, it is a leftover (ZOOKEEPER-2985, KAFKA-7165),
        deleted and created again. Owned by another session, it may be this broker's previous
        process, killed less than a session timeout ago: ZooKeeper deletes it when that
        session expires, so the registration waits up to ``stale_wait_s`` (default: twice
        this client's session timeout) for the node to go before giving up (Kafka fails at
        once, and a broker restarted right after a crash then fails to start).

        Raises:
            ZooKeeperClientError: another live session holds the id (after the wait).
        """
        path = zd.broker_path(info.id)
        create = multi_call(tx_create(path, b"", ephemeral=True), tx_set(path, info.encode(), 0))
        if stale_wait_s is None:
            stale_wait_s = 2 * self.session_timeout_ms / 1000
        deadline = time.monotonic() + stale_wait_s
        waited_for: int | None = None
        attempts = 0
        while attempts < 10:
            attempts += 1
            results = self._one(create)
            if not isinstance(results[0], Exception):
                epoch = int(results[1].czxid)
                log.info(
                    "registered broker %d at %s, broker epoch (czxid) %d", info.id, path, epoch
                )
                return epoch
            if not isinstance(results[0], NodeExistsError):
                raise results[0]
            got = self.get_data(path)
            if got is None:
                continue  # went away while we looked: create again
            stat = got[1]
            owner = stat.ephemeralOwner
            # the latest session, even if the connection just dropped: not a leftover
            if owner == self._session_id:
                return int(stat.czxid)
            if owner in self._own_sessions:
                log.info("deleting %s left by our expired session 0x%x", path, owner)
                try:
                    self._one(delete_call(path, stat.version))
                except (NoNodeError, BadVersionError):
                    pass
                continue
            if time.monotonic() < deadline:
                if waited_for != owner:
                    log.warning(
                        "%s belongs to another session (0x%x): waiting up to %.0fs for it to "
                        "expire (a previous process of this broker?)",
                        path, owner, deadline - time.monotonic(),
                    )  # fmt: skip
                    waited_for = owner
                time.sleep(0.2)
                attempts -= 1  # waiting is not a conflict
                continue
            raise ZooKeeperClientError(
                f"broker id {info.id} is already registered: {path} belongs to another live "
                f"session (0x{owner:x}; this one is 0x{self.session_id or 0:x})"
            )
        raise ZooKeeperClientError(f"{path} kept changing while registering broker {info.id}")

    def get_all_brokers(self) -> dict[int, BrokerInfo]:
        """Every registered broker, with its epoch; one pipeline."""
        ids = sorted(int(c) for c in self.get_children(zd.BROKER_IDS_PATH) if c.isdigit())
        results = self._each([get_call(zd.broker_path(i)) for i in ids], (NoNodeError,))
        return {
            i: BrokerInfo.decode(i, r[0], r[1].czxid)
            for i, r in zip(ids, results, strict=True)
            if r is not None  # gone since listed
        }

    def get_broker(self, broker_id: int) -> BrokerInfo | None:
        got = self.get_data(zd.broker_path(broker_id))
        return None if got is None else BrokerInfo.decode(broker_id, got[0], got[1].czxid)

    # ------------------------------------------------------------------ controller

    def get_controller_id(self) -> int | None:
        got = self.get_data(zd.CONTROLLER_PATH)
        return None if got is None else ControllerInfo.decode(got[0]).broker_id

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """(controller epoch, version of ``/controller_epoch``: the fencing token), None before
        any election."""
        got = self.get_data(zd.CONTROLLER_EPOCH_PATH)
        return None if got is None else (zd.decode_controller_epoch(got[0]), got[1].version)

    def elect_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Try to become controller: multi {create ``/controller`` ephemeral, set
        ``/controller_epoch`` to epoch + 1 at the version read} (Kafka's
        ``registerControllerAndIncrementControllerEpoch``). Returns (the new epoch, its znode
        version) when this broker won, None when another broker is controller -- or this one
        already is, from an earlier election."""
        current = self.get_controller_epoch()
        if current is None:
            try:
                initial = zd.encode_controller_epoch(zd.INITIAL_CONTROLLER_EPOCH)
                self._one(create_call(zd.CONTROLLER_EPOCH_PATH, initial))
                current = (zd.INITIAL_CONTROLLER_EPOCH, zd.INITIAL_CONTROLLER_EPOCH_ZK_VERSION)
            except NodeExistsError:
                current = self.get_controller_epoch()
                if current is None:
                    return None  # deleted by hand in between; the caller's watch retries
        epoch, version = current
        new_epoch = epoch + 1
        info = ControllerInfo(broker_id, int(time.time() * 1000))
        results = self._one(
            multi_call(
                tx_create(zd.CONTROLLER_PATH, info.encode(), ephemeral=True),
                tx_set(zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(new_epoch), version),
            )
        )
        if not any(isinstance(r, Exception) for r in results):
            log.info("broker %d elected controller, epoch %d", broker_id, new_epoch)
            return new_epoch, int(results[1].version)
        failed = next(r for r in results if not isinstance(r, RolledBackError))
        if not isinstance(failed, (NodeExistsError, BadVersionError)):
            raise failed
        # Lost -- or won with an attempt that a connection loss hid: it is ours only if
        # /controller names us and the epoch is the one we wrote.
        if self.get_controller_id() == broker_id:
            now = self.get_controller_epoch()
            if now is not None and now[0] == new_epoch:
                return now
        return None

    def resign_controller(self, broker_id: int) -> None:
        """Delete ``/controller`` if this session holds it for ``broker_id``."""
        got = self.get_data(zd.CONTROLLER_PATH)
        if got is None:
            return
        data, stat = got
        if ControllerInfo.decode(data).broker_id != broker_id:
            return
        if stat.ephemeralOwner != self.session_id:
            return
        try:
            self._one(delete_call(zd.CONTROLLER_PATH, stat.version))
        except (NoNodeError, BadVersionError):
            pass

    # ------------------------------------------------------------------ topics

    def get_all_topics(self) -> set[str]:
        return set(self.get_children(zd.BROKER_TOPICS_PATH))

    def topic_exists(self, topic: str) -> bool:
        return self._one(exists_call(zd.topic_path(topic))) is not None

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """The assignment of each topic that exists; one pipeline."""
        names = list(topics)
        results = self._each([get_call(zd.topic_path(t)) for t in names], (NoNodeError,))
        return {
            t: TopicAssignment.decode(t, r[0], r[1].version)
            for t, r in zip(names, results, strict=True)
            if r is not None
        }

    def create_topic(self, assignment: TopicAssignment, config: Mapping[str, str]) -> None:
        """Write ``/config/topics/<t>`` then ``/brokers/topics/<t>`` (Kafka's
        ``AdminZkClient.createTopicWithAssignment``: the controller acts on the topic znode,
        so its config must be there first).

        Raises:
            TopicAlreadyExists: the topic znode exists, or the topic is marked for deletion.
        """
        name = assignment.name
        if self.topic_exists(name):
            raise TopicAlreadyExists(f"Topic '{name}' already exists.")
        if self.get_data(zd.delete_topic_path(name)) is not None:
            raise TopicAlreadyExists(f"Topic '{name}' is marked for deletion.")
        self.set_or_create(zd.config_topic_path(name), zd.encode_topic_config(config))
        try:
            self._one(create_call(zd.topic_path(name), assignment.encode()))
        except NodeExistsError:
            raise TopicAlreadyExists(f"Topic '{name}' already exists.") from None

    def set_topic_assignment(
        self,
        assignment: TopicAssignment,
        expected_version: int,
        controller_epoch_zk_version: int,
    ) -> int:
        """Compare-and-set ``/brokers/topics/<t>`` (partitions added, a reassignment, a topic
        id); returns the new znode version. -1 as either version skips that check (-1 as the
        controller epoch's: an admin write, such as Kafka's CreatePartitions path).

        Raises:
            ControllerMovedError: the controller-epoch check failed.
            kazoo.exceptions.BadVersionError: the topic znode changed since it was read.
            kazoo.exceptions.NoNodeError: the topic does not exist.
        """
        path, data = zd.topic_path(assignment.name), assignment.encode()
        if controller_epoch_zk_version < 0:
            return int(self._one(set_call(path, data, expected_version)).version)
        write = tx_set(path, data, expected_version)
        outcome = checked_outcome(self._one(checked_call(controller_epoch_zk_version, write)))
        if isinstance(outcome, Exception):
            raise outcome
        return int(outcome[0].version)

    def get_topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """The config overrides of each topic (``{}`` without any); one pipeline."""
        names = list(topics)
        results = self._each([get_call(zd.config_topic_path(t)) for t in names], (NoNodeError,))
        return {
            t: {} if r is None else zd.decode_topic_config(r[0], zd.config_topic_path(t))
            for t, r in zip(names, results, strict=True)
        }

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Replace a topic's overrides and announce it with a
        ``/config/changes/config_change_<seq>`` notification (Kafka's ``changeTopicConfig``;
        every broker watches those)."""
        self.set_or_create(zd.config_topic_path(topic), zd.encode_topic_config(config))
        notification = zd.encode_config_change_notification(f"topics/{topic}")
        change = f"{zd.CONFIG_CHANGES_PATH}/{zd.CONFIG_CHANGE_PREFIX}"
        self._one(create_call(change, notification, sequence=True))

    def get_broker_configs(self, entities: Iterable[str]) -> dict[str, dict[str, str]]:
        """The dynamic configs of each broker entity (``<default>`` or an id; ``{}`` without
        any); one pipeline."""
        names = list(entities)
        paths = [zd.config_broker_path(e) for e in names]
        results = self._each([get_call(p) for p in paths], (NoNodeError,))
        return {
            e: {} if r is None else zd.decode_topic_config(r[0], path)
            for e, path, r in zip(names, paths, results, strict=True)
        }

    def set_broker_config(self, entity: str, config: Mapping[str, str]) -> None:
        """Replace a broker entity's dynamic configs and announce it with a
        ``/config/changes`` notification (Kafka's ``changeBrokerConfig``); brokers watch the
        config znodes themselves."""
        path = zd.config_broker_path(entity)
        self.set_or_create(path, zd.encode_topic_config(config))
        notification = zd.encode_config_change_notification(f"brokers/{entity}")
        change = f"{zd.CONFIG_CHANGES_PATH}/{zd.CONFIG_CHANGE_PREFIX}"
        self._one(create_call(change, notification, sequence=True))

    # ------------------------------------------------------------------ partition state

    def get_partition_states(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionState]:
        """The state znode of each partition that has one; one pipeline."""
        keys = list(tps)
        paths = [zd.partition_state_path(t, p) for t, p in keys]
        results = self._each([get_call(path) for path in paths], (NoNodeError,))
        return {
            tp: PartitionState.decode(r[0], r[1].version, path)
            for tp, path, r in zip(keys, paths, results, strict=True)
            if r is not None
        }

    def create_partition_states(
        self,
        states: Mapping[TopicPartition, PartitionState],
        controller_epoch_zk_version: int,
    ) -> dict[TopicPartition, PartitionState | Exception]:
        """Create the state znodes of new partitions (and their parents), each create
        checked against the controller epoch (Kafka's ``createTopicPartitionStatesRaw``).
        Each result is the state at zk_version 0, or the kazoo exception (``NodeExistsError``:
        it was there already).

        Raises:
            ControllerMovedError: the controller-epoch check failed.
            kazoo.exceptions.NoNodeError: a topic znode does not exist.
        """
        cev = controller_epoch_zk_version
        keys = list(states)
        topics = sorted({t for t, _ in keys})
        for parents in (
            [zd.partitions_path(t) for t in topics],
            [zd.partition_path(t, p) for t, p in sorted(set(keys))],
        ):
            results, _ = self._pipeline([checked_call(cev, tx_create(p)) for p in parents])
            for r in results:
                outcome = checked_outcome(r)
                if isinstance(outcome, Exception) and not isinstance(outcome, NodeExistsError):
                    raise outcome
        results, retried = self._pipeline(
            [
                checked_call(cev, tx_create(zd.partition_state_path(t, p), states[t, p].encode()))
                for t, p in keys
            ]
        )
        out: dict[TopicPartition, PartitionState | Exception] = {}
        for i, (tp, r) in enumerate(zip(keys, results, strict=True)):
            outcome = checked_outcome(r)
            created = dataclasses.replace(states[tp], zk_version=zd.INITIAL_PARTITION_EPOCH)
            if (
                isinstance(outcome, NodeExistsError)
                and i in retried
                # the first attempt may have created it before the connection dropped
                and self.get_partition_states([tp]).get(tp) == created
            ):
                outcome = None
            out[tp] = outcome if isinstance(outcome, Exception) else created
        return out

    def update_partition_states(
        self,
        states: Mapping[TopicPartition, PartitionState],
        controller_epoch_zk_version: int,
    ) -> dict[TopicPartition, PartitionState | Exception]:
        """Compare-and-set each state znode at its ``zk_version``, checked against the
        controller epoch, all in one pipeline (Kafka's ``updateLeaderAndIsr``). Each result is
        the state with its new zk_version, or ``BadVersionError`` (changed since read: re-read
        and retry) or ``NoNodeError``.

        Raises:
            ControllerMovedError: the controller-epoch check failed.
            ValueError: a state without a zk_version (not read from ZooKeeper).
        """
        keys = list(states)
        for tp in keys:
            _require_version(tp, states[tp])
        results, retried = self._pipeline(
            [
                checked_call(
                    controller_epoch_zk_version,
                    tx_set(
                        zd.partition_state_path(*tp), states[tp].encode(), states[tp].zk_version
                    ),
                )
                for tp in keys
            ]
        )
        out: dict[TopicPartition, PartitionState | Exception] = {}
        for i, (tp, r) in enumerate(zip(keys, results, strict=True)):
            outcome = checked_outcome(r)
            if isinstance(outcome, Exception):
                out[tp] = self._maybe_applied(tp, states[tp], outcome, i in retried)
            else:
                out[tp] = dataclasses.replace(states[tp], zk_version=int(outcome[0].version))
        return out

    def update_leader_and_isr(
        self, tp: TopicPartition, state: PartitionState
    ) -> PartitionState | None:
        """The partition leader's own ISR write (Kafka's ZooKeeper-mode AlterIsr path, IBP <
        2.7): compare-and-set at ``state.zk_version``, no controller check. Returns the state
        with its new zk_version, or None when the znode changed since read (re-read it).

        Raises:
            kazoo.exceptions.NoNodeError: the partition has no state znode (deleted).
            ValueError: a state without a zk_version (not read from ZooKeeper).
        """
        _require_version(tp, state)
        path = zd.partition_state_path(*tp)
        results, retried = self._pipeline([set_call(path, state.encode(), state.zk_version)])
        r = results[0]
        if not isinstance(r, Exception):
            return dataclasses.replace(state, zk_version=int(r.version))
        outcome = self._maybe_applied(tp, state, r, bool(retried))
        if isinstance(outcome, BadVersionError):
            return None
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _maybe_applied(
        self, tp: TopicPartition, state: PartitionState, error: Exception, retried: bool
    ) -> PartitionState | Exception:
        """A BADVERSION after a resend is success if the znode is one version past ours and
        holds our data (Kafka's ``checkLeaderAndIsrZkData``)."""
        if not (retried and isinstance(error, BadVersionError)):
            return error
        now = self.get_partition_states([tp]).get(tp)
        expected = dataclasses.replace(state, zk_version=state.zk_version + 1)
        return expected if now == expected else error

    # ------------------------------------------------------------------ producer ids

    def allocate_producer_id_block(self, broker_id: int, block_size: int) -> int:
        """Claim the next block of producer ids for ``broker_id``; its first id (Kafka's
        ``ZkProducerIdManager.getNewProducerIdBlock``): ``/latest_producer_id_block`` holds
        the last block given out, and moving it on is a compare-and-set on its version, so
        two brokers never get the same block."""
        path = zd.LATEST_PRODUCER_ID_BLOCK_PATH
        for _ in range(100):
            got = self.get_data(path)
            if got is None:
                self.ensure_paths([path])
                continue
            data, stat = got
            start = 0
            if data:
                obj = json.loads(data)
                start = int(obj["block_end"]) + 1
            new = json.dumps(
                {
                    "version": 1,
                    "broker": broker_id,
                    "block_start": str(start),
                    "block_end": str(start + block_size - 1),
                }
            ).encode()
            try:
                self._one(set_call(path, new, stat.version))
            except BadVersionError:
                continue  # another broker took a block meanwhile
            return start
        raise ZooKeeperClientError(f"cannot claim a producer id block in {path}")

    # ------------------------------------------------------------------ ISR change notifications

    def propagate_isr_changes(self, tps: Iterable[TopicPartition]) -> str:
        """Tell the controller that these partitions' ISR changed (a leader after its own
        ISR writes, Kafka's ``propagateIsrChanges``): a sequential
        ``/isr_change_notification/isr_change_<seq>``. Returns the notification's name."""
        prefix = f"{zd.ISR_CHANGE_NOTIFICATION_PATH}/{zd.ISR_CHANGE_PREFIX}"
        path = self._one(create_call(prefix, zd.encode_isr_change_notification(tps), sequence=True))
        return str(path).rsplit("/", 1)[-1]

    def get_isr_change_notifications(self) -> dict[str, set[TopicPartition]]:
        """notification name -> its partitions, for every pending one; one pipeline."""
        names = sorted(self.get_children(zd.ISR_CHANGE_NOTIFICATION_PATH))
        paths = [f"{zd.ISR_CHANGE_NOTIFICATION_PATH}/{n}" for n in names]
        results = self._each([get_call(p) for p in paths], (NoNodeError,))
        return {
            n: zd.decode_isr_change_notification(r[0])
            for n, r in zip(names, results, strict=True)
            if r is not None
        }

    def delete_isr_change_notifications(
        self, names: Iterable[str], controller_epoch_zk_version: int
    ) -> None:
        """Delete processed notifications (already gone: fine), fenced by the controller
        epoch.

        Raises:
            ControllerMovedError: the controller-epoch check failed.
        """
        calls = [
            checked_call(
                controller_epoch_zk_version, tx_delete(f"{zd.ISR_CHANGE_NOTIFICATION_PATH}/{n}")
            )
            for n in names
        ]
        for r in self._pipeline(calls)[0]:
            outcome = checked_outcome(r)
            if isinstance(outcome, Exception) and not isinstance(outcome, NoNodeError):
                raise outcome

    # ------------------------------------------------------------------ deletion

    def mark_topics_for_deletion(self, topics: Iterable[str]) -> None:
        """Create ``/admin/delete_topics/<t>`` for each (one already marked stays so)."""
        self.ensure_paths([zd.delete_topic_path(t) for t in topics])

    def get_topics_marked_for_deletion(self) -> set[str]:
        return set(self.get_children(zd.DELETE_TOPICS_PATH))

    def delete_topic_znodes(self, topic: str, controller_epoch_zk_version: int) -> None:
        """Delete a topic's state znodes, partition znodes, topic znode, config, and last its
        ``/admin/delete_topics`` mark, every delete checked against the controller epoch.
        Absent nodes are skipped, so a controller that failed over half-way can run it again.

        Raises:
            ControllerMovedError: the controller-epoch check failed.
        """
        partitions = zd.partitions_path(topic)
        children = self.get_children(partitions)
        levels: list[list[str]] = [
            [f"{partitions}/{p}/state" for p in children],
            [f"{partitions}/{p}" for p in children],
            [partitions],
            [zd.topic_path(topic)],
            [zd.config_topic_path(topic)],
            [zd.delete_topic_path(topic)],
        ]
        for level in levels:
            calls = [checked_call(controller_epoch_zk_version, tx_delete(p)) for p in level]
            for r in self._pipeline(calls)[0]:
                outcome = checked_outcome(r)
                if isinstance(outcome, Exception) and not isinstance(outcome, NoNodeError):
                    raise outcome

    # ------------------------------------------------------------------ admin requests

    def request_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> None:
        """Ask the controller to move leadership away from ``broker_id``: tierlog's
        ``/admin/controlled_shutdown/<id>``, in place of Kafka's ControlledShutdown request."""
        self.set_or_create(
            zd.controlled_shutdown_path(broker_id), zd.encode_controlled_shutdown(broker_epoch)
        )

    def get_controlled_shutdown_requests(self) -> dict[int, int]:
        """broker id -> broker epoch of every pending controlled-shutdown request."""
        children = self.get_children(zd.CONTROLLED_SHUTDOWN_PATH)
        ids = sorted(int(c) for c in children if c.isdigit())
        paths = [zd.controlled_shutdown_path(i) for i in ids]
        results = self._each([get_call(p) for p in paths], (NoNodeError,))
        return {
            i: zd.decode_controlled_shutdown(r[0], p)
            for i, p, r in zip(ids, paths, results, strict=True)
            if r is not None
        }

    def delete_controlled_shutdown_request(self, broker_id: int) -> None:
        self.delete_if_exists(zd.controlled_shutdown_path(broker_id))

    def get_preferred_replica_election(self) -> set[TopicPartition]:
        """The partitions of a pending ``/admin/preferred_replica_election`` (empty: none)."""
        got = self.get_data(zd.PREFERRED_REPLICA_ELECTION_PATH)
        return set() if got is None else zd.decode_preferred_replica_election(got[0])

    def delete_preferred_replica_election(self) -> None:
        self.delete_if_exists(zd.PREFERRED_REPLICA_ELECTION_PATH)


__all__ = ["ControllerMovedError", "KafkaZkClient", "TopicPartition"]
