"""The controller (Kafka's ZooKeeper-mode ``KafkaController``): one broker, elected through
``/controller``, decides every partition's leader and ISR and writes them to ZooKeeper.

Brokers learn the decisions from their watches on the state znodes
(:mod:`tierlog.cluster.zk_broker`), so the controller sends no requests.

**One thread, one queue** (Kafka's ControllerEventManager): ZooKeeper watch callbacks and
timers only enqueue events; the controller thread processes them in order with kazoo's
synchronous calls. A new controller reads all of ZooKeeper (brokers, topics, states) and then
repairs what it finds: partitions with no state are created, partitions without a live leader
are elected, dead brokers leave ISRs.

**Fencing.** Winning the election bumps ``/controller_epoch``; every controller write is a
ZooKeeper transaction that checks that znode's version, so a controller that lost its session
(a GC pause, SIGSTOP) cannot overwrite the decisions of its successor
(:class:`~tierlog.cluster.kafka_zk_client.ControllerMovedError`, KAFKA-6082): it resigns.

Events handled: broker join/leave/bounce (``/brokers/ids``), topic creation and partition
addition (``/brokers/topics`` and each topic znode), topic deletion (``/admin/delete_topics``),
controlled shutdown (``/admin/controlled_shutdown/<id>``, tierlog's node: Kafka's
ControlledShutdown request is not in Kafka 4's schemas), preferred-leader election
(``/admin/preferred_replica_election``, ElectLeaders) and the periodic leader rebalance
(``auto.leader.rebalance.enable``).
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError

from tierlog.cluster.kafka_zk_client import ControllerMovedError
from tierlog.cluster.leader_election import (
    auto_leader_rebalance_candidates,
    controlled_shutdown_leader,
    elected,
    new_partition_leader,
    offline_partition_leader,
    preferred_replica_leader,
    reassign_partition_leader,
    remove_replica_from_isr,
)
from tierlog.cluster.zk_data import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONTROLLED_SHUTDOWN_PATH,
    CONTROLLER_PATH,
    DELETE_TOPICS_PATH,
    PREFERRED_REPLICA_ELECTION_PATH,
    BrokerInfo,
    PartitionState,
    TopicAssignment,
    partition_state_path,
    topic_path,
)

if TYPE_CHECKING:
    from tierlog.cluster.kafka_zk_client import KafkaZkClient
    from tierlog.cluster.zk_watches import WatchHandle

__all__ = ["ControllerConfig", "KafkaController"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_RETRIES = 5


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    broker_id: int
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10


class KafkaController:
    """Runs on every broker; active on the one that wins ``/controller``."""

    def __init__(self, zk: KafkaZkClient, config: ControllerConfig) -> None:
        self.zk = zk
        self.config = config
        self.broker_id = config.broker_id
        self._events: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, name=f"controller-{self.broker_id}", daemon=True
        )
        self._stopped = threading.Event()
        self._watches: list[WatchHandle] = []
        # Active controller state (cleared on resignation).
        self.active = False
        self.epoch = -1
        self.epoch_zk_version = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.shutting_down: set[int] = set()
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[TopicPartition, PartitionState] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self._reassigning: set[TopicPartition] = set()
        self._next_rebalance = 0.0

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the event thread and take part in the election."""
        self._thread.start()
        self.zk.watch_data(CONTROLLER_PATH, self._controller_changed)
        self.zk.add_session_listener(self._session_event)

    def stop(self) -> None:
        """Resign (if active) and stop the thread."""
        self._stopped.set()
        self._events.put(None)
        # Without ZooKeeper the thread may be waiting for it (an event's read), not for long
        # once the client closes: do not wait here for the whole of it.
        self._thread.join(timeout=10 if self.zk.connected else 1)
        if self.active and not self.zk.connected:
            # Nothing to wait for: /controller goes with the session, which ZooKeeper ends
            # (or the broker's close does, if the connection comes back first).
            log.warning("not resigning as controller: no connection to ZooKeeper")
        elif self.active:
            try:
                self.zk.resign_controller(self.broker_id)
            except Exception as e:
                log.warning("resigning as controller: %s", e)

    def _enqueue(self, event: Callable[[], None]) -> None:
        if not self._stopped.is_set():
            self._events.put(event)

    def _run(self) -> None:
        while True:
            timeout = None
            if self.active and self.config.auto_leader_rebalance_enable:
                timeout = max(0.0, self._next_rebalance - time.monotonic())
            try:
                event = self._events.get(timeout=timeout)
            except queue.Empty:
                event = self._auto_rebalance
            if event is None:
                return
            try:
                event()
            except ControllerMovedError as e:
                log.warning("controller %d moved: %s; resigning", self.broker_id, e)
                self._resign()
            except Exception:
                log.exception("controller event failed")

    # ----------------------------------------------------------------- election

    def _controller_changed(self, data: bytes | None, _version: int | None) -> None:
        if data is None:
            self._enqueue(self._elect)
        else:
            self._enqueue(self._check_still_active)

    def _session_event(self, state: str) -> None:
        if state == "LOST":
            self._enqueue(self._resign)
        elif state == "CONNECTED":
            self._enqueue(self._elect)

    def _check_still_active(self) -> None:
        if self.active and self.zk.get_controller_id() != self.broker_id:
            self._resign()

    def _elect(self) -> None:
        if self.active and self.zk.get_controller_id() == self.broker_id:
            return
        won = self.zk.elect_controller(self.broker_id)
        if won is None:
            if self.active:
                self._resign()
            return
        self.epoch, self.epoch_zk_version = won
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        self.active = True
        self._on_controller_failover()

    def _resign(self) -> None:
        if not self.active:
            return
        log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.epoch)
        self.active = False
        for w in self._watches:
            w.cancel()
        self._watches = []
        self.brokers = {}
        self.shutting_down = set()
        self.assignments = {}
        self.states = {}
        self.configs = {}
        self._reassigning = set()

    def _watch_children(self, path: str, event: Callable[[list[str]], None]) -> None:
        def cb(children: list[str]) -> None:
            if self.active:
                self._enqueue(lambda: event(children))

        self._watches.append(self.zk.watch_children(path, cb))

    def _watch_data(self, path: str, event: Callable[[bytes | None], None]) -> None:
        def cb(data: bytes | None, _version: int | None) -> None:
            if self.active:
                self._enqueue(lambda: event(data))

        self._watches.append(self.zk.watch_data(path, cb))

    def _on_controller_failover(self) -> None:
        """Kafka's onControllerFailover: watch, read everything, repair."""
        zk = self.zk
        self.brokers = zk.get_all_brokers()
        topics = zk.get_all_topics()
        self.assignments = zk.get_topic_assignments(topics)
        self.configs = zk.get_topic_configs(topics)
        tps = [(t, p) for t, a in self.assignments.items() for p in a.partitions]
        self.states = zk.get_partition_states(tps)
        log.info(
            "controller %d read %d brokers, %d topics, %d partitions",
            self.broker_id, len(self.brokers), len(self.assignments), len(tps),
        )  # fmt: skip
        # The callbacks fire once when armed: each event below re-reads and acts.
        self._watch_children(BROKER_IDS_PATH, lambda _c: self._brokers_changed())
        self._watch_children(BROKER_TOPICS_PATH, self._topics_changed)
        self._watch_children(DELETE_TOPICS_PATH, lambda _c: self._delete_topics())
        self._watch_children(CONTROLLED_SHUTDOWN_PATH, lambda _c: self._controlled_shutdowns())
        self._watch_data(PREFERRED_REPLICA_ELECTION_PATH, self._preferred_election_requested)
        for t in self.assignments:
            self._watch_topic(t)
        self._create_missing_states(tps)
        self._elect_offline(tps)
        self._remove_dead_from_isr(tps)
        self._next_rebalance = time.monotonic() + min(
            5.0, self.config.leader_imbalance_check_interval_s
        )

    # ----------------------------------------------------------------- brokers

    def _live(self) -> set[int]:
        """Brokers that may lead: registered and not shutting down."""
        return set(self.brokers) - self.shutting_down

    def _brokers_changed(self) -> None:
        current = self.zk.get_all_brokers()
        old = self.brokers
        dead = {b for b in old if b not in current or current[b].epoch != old[b].epoch}
        joined = {b for b in current if b not in old or current[b].epoch != old[b].epoch}
        self.brokers = current
        if dead:
            log.info("controller: brokers %s left (or bounced)", sorted(dead))
            self.shutting_down -= dead
            tps = list(self.states)
            # Partitions they led need a new leader; they leave every other ISR.
            self._elect_offline([tp for tp in tps if self.states[tp].leader in dead])
            self._remove_from_isr(tps, dead)
        if joined:
            log.info("controller: brokers %s joined", sorted(joined))
            tps = [tp for tp, a in self._partition_replicas() if joined & set(a)]
            self._create_missing_states(tps)
            self._elect_offline(tps)

    def _partition_replicas(self) -> Iterable[tuple[TopicPartition, tuple[int, ...]]]:
        for t, a in self.assignments.items():
            for p, replicas in a.partitions.items():
                yield (t, p), replicas

    def _replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        a = self.assignments.get(tp[0])
        return a.partitions.get(tp[1], ()) if a is not None else ()

    def _unclean_enabled(self, topic: str) -> bool:
        v = self.configs.get(topic, {}).get("unclean.leader.election.enable")
        return self.config.unclean_leader_election_enable if v is None else v == "true"

    # ----------------------------------------------------------------- partition states

    def _create_missing_states(self, tps: Iterable[TopicPartition]) -> None:
        """New partitions: the first live replica leads, the live replicas are the ISR."""
        live = self._live()
        new: dict[TopicPartition, PartitionState] = {}
        for tp in tps:
            if tp in self.states:
                continue
            result = new_partition_leader(self._replicas(tp), live)
            if result is None:
                continue  # no replica alive: created when one joins
            new[tp] = PartitionState(result.leader, 0, result.isr, self.epoch)
        if not new:
            return
        outcome = self.zk.create_partition_states(new, self.epoch_zk_version)
        for tp, r in outcome.items():
            if isinstance(r, PartitionState):
                self.states[tp] = r
            else:  # NodeExists: another controller (or our previous life) created it
                self._reload([tp])
        log.info("controller: created %d partition states", len(new))

    def _reload(self, tps: Iterable[TopicPartition]) -> None:
        for tp, s in self.zk.get_partition_states(list(tps)).items():
            self.states[tp] = s

    def _elect_offline(self, tps: Iterable[TopicPartition]) -> None:
        live = self._live()

        def decide(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            if state.leader in live:
                return None
            result = offline_partition_leader(
                self._replicas(tp), state.isr, live, self._unclean_enabled(tp[0])
            )
            if result is None:
                if state.leader == -1:
                    return None
                # No live ISR member: offline; the ISR keeps its last members.
                return replace(state, leader=-1, leader_epoch=state.leader_epoch + 1)
            if result.unclean:
                log.warning(
                    "controller: unclean leader election of %s-%d: broker %d (ISR was %s)",
                    tp[0], tp[1], result.leader, list(state.isr),
                )  # fmt: skip
            return elected(state, result, self.epoch)

        self._update(tps, decide, "offline")

    def _remove_dead_from_isr(self, tps: Iterable[TopicPartition]) -> None:
        dead = {b for tp in tps if tp in self.states for b in self.states[tp].isr} - set(
            self.brokers
        )
        if dead:
            self._remove_from_isr(tps, dead)

    def _remove_from_isr(self, tps: Iterable[TopicPartition], brokers: set[int]) -> None:
        """Kafka's removal of dead (or shutting-down) replicas from the ISR: a sole member
        stays (an ISR is never empty), a removed leader leaves leader -1."""

        def decide(_tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            new: PartitionState | None = None
            for broker in sorted(brokers):
                removed = remove_replica_from_isr(new or state, broker, self.epoch)
                if removed is not None:
                    # One epoch bump for the whole removal, however many brokers left.
                    new = replace(removed, leader_epoch=state.leader_epoch + 1)
            return new

        self._update(tps, decide, "isr removal")

    def _update(
        self,
        tps: Iterable[TopicPartition],
        decide: Callable[[TopicPartition, PartitionState], PartitionState | None],
        why: str,
    ) -> None:
        """Write the states ``decide`` returns, each a compare-and-set on the version read;
        a conflict (the leader changed the ISR meanwhile) re-reads and decides again.

        The states are read first: leaders write their ISR changes themselves (Kafka's
        ZK-mode AlterIsr), so the controller's copy may be stale, and a decision on a stale
        ISR (say, electing a follower that already left it) would be wrong even when no write
        conflicts (a preferred election that decides "nothing to do")."""
        pending = [tp for tp in tps if tp in self.states]
        self._reload(pending)
        for _ in range(_RETRIES):
            writes: dict[TopicPartition, PartitionState] = {}
            for tp in pending:
                new = decide(tp, self.states[tp])
                if new is not None:
                    writes[tp] = new
            if not writes:
                return
            outcome = self.zk.update_partition_states(writes, self.epoch_zk_version)
            conflicts = []
            for tp, r in outcome.items():
                if isinstance(r, PartitionState):
                    self.states[tp] = r
                    log.info(
                        "controller (%s): %s-%d leader %d epoch %d isr %s",
                        why, tp[0], tp[1], r.leader, r.leader_epoch, list(r.isr),
                    )  # fmt: skip
                elif isinstance(r, BadVersionError):
                    conflicts.append(tp)
                else:
                    log.error("controller: cannot write %s-%d: %s", tp[0], tp[1], r)
            if not conflicts:
                return
            self._reload(conflicts)
            pending = conflicts
        log.error("controller: gave up on %d partitions after conflicts (%s)", len(pending), why)

    # ----------------------------------------------------------------- topics

    def _topics_changed(self, children: list[str]) -> None:
        current = set(children)
        new = current - set(self.assignments)
        for t in set(self.assignments) - current:
            self._forget_topic(t)
        if not new:
            return
        assignments = self.zk.get_topic_assignments(new)
        self.configs.update(self.zk.get_topic_configs(assignments))
        self.assignments.update(assignments)
        tps = [(t, p) for t, a in assignments.items() for p in a.partitions]
        self._reload(tps)
        for t in assignments:
            self._watch_topic(t)
        self._create_missing_states(tps)
        self._elect_offline(tps)

    def _forget_topic(self, topic: str) -> None:
        self.assignments.pop(topic, None)
        self.configs.pop(topic, None)
        for tp in [tp for tp in self.states if tp[0] == topic]:
            del self.states[tp]

    def _watch_topic(self, topic: str) -> None:
        def changed(data: bytes | None) -> None:
            if data is None or topic not in self.assignments:
                return
            a = self.zk.get_topic_assignments([topic]).get(topic)
            if a is None:
                return
            self.assignments[topic] = a
            tps = [(topic, p) for p in a.partitions]
            self._create_missing_states(tps)
            for p in sorted(set(a.adding) | set(a.removing)):
                self._on_reassignment((topic, p))

        self._watch_data(topic_path(topic), changed)
        a = self.assignments.get(topic)
        if a is not None:
            for p in sorted(set(a.adding) | set(a.removing)):
                self._enqueue(functools.partial(self._on_reassignment, (topic, p)))

    # ----------------------------------------------------------------- reassignment

    def _on_reassignment(self, tp: TopicPartition) -> None:
        """Kafka's onPartitionReassignment (KIP-455), for a partition whose topic znode has
        replicas being added or removed: RS = target + original, written by AlterPartition-
        Reassignments. The first time, the leader epoch is bumped so that every replica in RS
        (the new ones included) hosts the partition and the leader fetches for them; once the
        ISR holds every target replica, a target replica leads (a new election when the leader
        is leaving), the ISR drops the removed ones, and RS = target is written last (it is the
        only durable copy of the original set until then)."""
        a = self.assignments.get(tp[0])
        if a is None or (tp[1] not in a.adding and tp[1] not in a.removing):
            self._reassigning.discard(tp)
            return
        self._reload([tp])
        state = self.states.get(tp)
        if state is None:
            return
        replicas = a.partitions.get(tp[1], ())
        removing = set(a.removing.get(tp[1], ()))
        target = tuple(r for r in replicas if r not in removing)
        if tp not in self._reassigning:
            self._reassigning.add(tp)

            def isr_changed(_data: bytes | None) -> None:
                self._on_reassignment(tp)

            self._watch_data(partition_state_path(*tp), isr_changed)
            log.info(
                "controller: reassigning %s-%d to %s (replicas now %s)",
                tp[0], tp[1], list(target), list(replicas),
            )  # fmt: skip

            def bump(_tp: TopicPartition, st: PartitionState) -> PartitionState:
                return replace(st, leader_epoch=st.leader_epoch + 1, controller_epoch=self.epoch)

            self._update([tp], bump, "reassignment started")
            return
        if not set(target) <= set(state.isr):
            return  # the new replicas are catching up
        live = self._live()

        def finish(_tp: TopicPartition, st: PartitionState) -> PartitionState | None:
            isr = tuple(r for r in st.isr if r in target)
            if st.leader in target and st.leader in live:
                return replace(
                    st, leader_epoch=st.leader_epoch + 1, isr=isr, controller_epoch=self.epoch
                )
            result = reassign_partition_leader(target, st.isr, live)
            if result is None:
                return None
            return replace(
                st,
                leader=result.leader,
                leader_epoch=st.leader_epoch + 1,
                isr=isr,
                controller_epoch=self.epoch,
            )

        self._update([tp], finish, "reassignment")
        a = self.zk.get_topic_assignments([tp[0]]).get(tp[0], a)
        done = TopicAssignment(
            a.name,
            a.topic_id,
            {**a.partitions, tp[1]: target},
            {p: r for p, r in a.adding.items() if p != tp[1]},
            {p: r for p, r in a.removing.items() if p != tp[1]},
        )
        self.zk.set_topic_assignment(done, a.zk_version, self.epoch_zk_version)
        self.assignments[tp[0]] = replace(done, zk_version=a.zk_version + 1)
        self._reassigning.discard(tp)
        log.info("controller: reassignment of %s-%d done: %s", tp[0], tp[1], list(target))

    def _delete_topics(self) -> None:
        """Kafka's TopicDeletionManager, without StopReplica: the state znodes and topic
        znodes go; brokers see the topic disappear and delete their replicas (a broker that
        is down deletes them when it starts and finds the topic gone)."""
        for topic in sorted(self.zk.get_topics_marked_for_deletion()):
            log.info("controller: deleting topic %s", topic)
            self.zk.delete_topic_znodes(topic, self.epoch_zk_version)
            self._forget_topic(topic)

    # ----------------------------------------------------------------- shutdown, rebalance

    def _controlled_shutdowns(self) -> None:
        """Brokers asking to shut down: move leadership away from them and take them out of
        every ISR, so their clients see at most a retriable NOT_LEADER_OR_FOLLOWER."""
        requests = self.zk.get_controlled_shutdown_requests()
        for broker, epoch in sorted(requests.items()):
            info = self.brokers.get(broker)
            if info is None or info.epoch != epoch:
                self.zk.delete_controlled_shutdown_request(broker)  # a past incarnation's
                continue
            if broker in self.shutting_down:
                continue
            log.info("controller: controlled shutdown of broker %d", broker)
            self.shutting_down.add(broker)
        if not self.shutting_down:
            return
        going = set(self.shutting_down)
        live = set(self.brokers)

        def decide(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            if not going & set(state.isr) and state.leader not in going:
                return None
            leader, isr = controlled_shutdown_leader(self._replicas(tp), state.isr, live, going)
            if state.leader in going:
                if leader is None:
                    return None  # nobody else can lead: it stays until it stops
                new_isr = isr or (leader,)
                return replace(
                    state,
                    leader=leader,
                    leader_epoch=state.leader_epoch + 1,
                    isr=new_isr,
                    controller_epoch=self.epoch,
                )
            if not isr:
                return None
            return replace(
                state, leader_epoch=state.leader_epoch + 1, isr=isr, controller_epoch=self.epoch
            )

        self._update(list(self.states), decide, "controlled shutdown")

    def _preferred_election_requested(self, data: bytes | None) -> None:
        if data is None:
            return
        tps = self.zk.get_preferred_replica_election()
        self._elect_preferred(tps)
        self.zk.delete_preferred_replica_election()

    def _elect_preferred(self, tps: Iterable[TopicPartition]) -> None:
        live = self._live()

        def decide(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            replicas = self._replicas(tp)
            if not replicas or state.leader == replicas[0]:
                return None
            result = preferred_replica_leader(replicas, state.isr, live)
            return elected(state, result, self.epoch) if result is not None else None

        self._update(tps, decide, "preferred")

    def _auto_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per broker, when more than
        ``leader.imbalance.per.broker.percentage`` of the partitions it prefers are led
        elsewhere, elect it back where it is in the ISR."""
        self._next_rebalance = time.monotonic() + self.config.leader_imbalance_check_interval_s
        if not self.active:
            return
        self._reload(list(self.states))
        chosen = sorted(
            auto_leader_rebalance_candidates(
                dict(self._partition_replicas()),
                self.states,
                self._live(),
                self.config.leader_imbalance_per_broker_percentage,
            )
        )
        if chosen:
            log.info("controller: rebalancing %d partition leaders", len(chosen))
            self._elect_preferred(chosen)
