"""A broker's side of the ZooKeeper cluster: registration, the metadata watches, replica fetchers
and ISR writes (Kafka's ``KafkaServer`` ZooKeeper startup, ``ZkMetadataCache`` fed by
UpdateMetadata, ``ReplicaManager.becomeLeaderOrFollower`` fed by LeaderAndIsr, and
``ZkIsrManager``).

**Watches instead of LeaderAndIsr/UpdateMetadata.** Kafka's ZooKeeper-mode controller pushes
partition state to brokers with LeaderAndIsr and UpdateMetadata requests; kio (generated from
Kafka 4's schemas) no longer has those APIs, and ZooKeeper already delivers every change to
whoever watches it. So each broker watches:

* ``/brokers/ids`` (children): the live brokers and their endpoints;
* ``/controller`` (data): the controller id for Metadata;
* ``/brokers/topics`` (children), each ``/brokers/topics/<t>`` (data: added partitions,
  reassignments) and each ``/brokers/topics/<t>/partitions/<p>/state`` (data: leader, epoch,
  ISR).

A state change reaches every broker in one ZooKeeper notification plus one read, in order per
znode, and a broker that restarts or reconnects reads everything again. The cost is one watch
per partition per broker: 10,000 partitions on 3 brokers is 30,000 watches and, at startup,
10,000 reads per broker (pipelined by kazoo), against Kafka's one LeaderAndIsr and one
UpdateMetadata per broker that carry the same 10,000 states.

Every watch callback runs on kazoo's thread and only posts to the event loop; the metadata
cache and the replica manager are touched on the loop thread only. ZooKeeper writes run in
worker threads (kazoo's synchronous API).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tierlog.cluster.cluster_link import PartitionChange
from tierlog.cluster.metadata_cache import MetadataCache, TopicMetadata
from tierlog.cluster.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from tierlog.cluster.zk_data import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONTROLLER_PATH,
    BrokerInfo,
    ControllerInfo,
    PartitionState,
    TopicAssignment,
    config_topic_path,
    decode_topic_config,
    partition_state_path,
    topic_path,
)

if TYPE_CHECKING:
    from tierlog.cluster.broker_client import BrokerClient
    from tierlog.cluster.kafka_zk_client import KafkaZkClient
    from tierlog.cluster.partition import Partition

__all__ = ["ZkBroker"]

log = logging.getLogger(__name__)


class ZkBroker:
    """This broker in the cluster: implements :class:`~tierlog.cluster.cluster_link.ClusterLink`
    for the replica manager and keeps the :class:`MetadataCache` current."""

    def __init__(
        self,
        zk: KafkaZkClient,
        info: BrokerInfo | None,
        broker_id: int,
        *,
        inter_broker_listener: str,
        fetcher_config: FetcherConfig,
        client_factory: Callable[[], BrokerClient],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.zk = zk
        #: The registration (endpoints known once the listeners are bound).
        self.info = info
        self.broker_id = broker_id
        self.broker_epoch = -1
        self.metadata = MetadataCache()
        self._inter_broker_listener = inter_broker_listener
        self._loop = loop
        self._replica_manager: Any = None
        self._on_partition_change: list[Callable[[PartitionChange, Partition | None], None]] = []
        self._on_topic_change: list[Callable[[TopicMetadata, bool], None]] = []
        self._on_topic_configs: list[Callable[[TopicMetadata, dict[str, str]], None]] = []
        self.fetchers = ReplicaFetcherManager(
            fetcher_config, self.broker_address, client_factory, self._fetched
        )
        self._watched_topics: set[str] = set()
        #: Serialises topic-list changes: each reads ZooKeeper in threads, in order.
        self._topics_lock = asyncio.Lock()
        #: Serializes broker-list refreshes: two reads of /brokers/ids in flight at once
        #: could apply in the wrong order and leave a dead broker listed as live.
        self._brokers_lock = asyncio.Lock()
        self._closed = False
        self._shutting_down = False
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Set once every topic known at startup has been read (and applied).
        self.metadata_loaded = asyncio.Event()
        self._changed = asyncio.Condition()

    # ----------------------------------------------------------------- wiring

    def attach(self, replica_manager: Any) -> None:
        """The replica manager that hosts partitions (its ``cluster`` is this object)."""
        self._replica_manager = replica_manager

    def on_partition_change(self, cb: Callable[[PartitionChange, Partition | None], None]) -> None:
        """Call ``cb`` (on the loop) after each applied partition state (coordinators
        follow leadership of their topics' partitions)."""
        self._on_partition_change.append(cb)

    def on_topic_change(self, cb: Callable[[TopicMetadata, bool], None]) -> None:
        """Call ``cb(topic, deleted)`` (on the loop) after a topic's configs changed
        (``deleted`` False) or after it was deleted (True; its replicas here are gone)."""
        self._on_topic_change.append(cb)

    def on_topic_configs_changed(self, cb: Callable[[TopicMetadata, dict[str, str]], None]) -> None:
        """Call ``cb(topic, old overrides)`` (on the loop) after a topic's configs changed in
        ZooKeeper, whether this broker hosts it or not (after its logs took them)."""
        self._on_topic_configs.append(cb)

    def _notify_topic(self, t: TopicMetadata, deleted: bool) -> None:
        for cb in self._on_topic_change:
            try:
                cb(t, deleted)
            except Exception:
                log.exception("topic change listener failed for %s", t.name)

    async def start(self) -> None:
        """Register this broker and start the watches; returns once the metadata of every
        existing topic was read and applied."""
        zk = self.zk
        assert self.info is not None, "the registration is set before start()"
        self.broker_epoch = await asyncio.to_thread(zk.register_broker, self.info)
        log.info("registered broker %d in ZooKeeper (epoch %d)", self.broker_id, self.broker_epoch)
        zk.add_session_listener(self._session_event)
        initial_topics: asyncio.Future[list[str]] = self._loop.create_future()

        def brokers_changed(children: list[str]) -> None:
            self._post(self._refresh_brokers)

        def controller_changed(data: bytes | None, _version: int | None) -> None:
            self._post(self._set_controller, data)

        def topics_changed(children: list[str]) -> None:
            if not initial_topics.done():
                self._loop.call_soon_threadsafe(_set_once, initial_topics, list(children))
            self._post(self._topics_changed, list(children))

        await asyncio.to_thread(zk.watch_children, BROKER_IDS_PATH, brokers_changed)
        await asyncio.to_thread(zk.watch_data, CONTROLLER_PATH, controller_changed)
        await self._refresh_brokers()
        await asyncio.to_thread(zk.watch_children, BROKER_TOPICS_PATH, topics_changed)
        await initial_topics
        # Apply every existing topic before serving (a restarted broker knows its role).
        await self._topics_changed(initial_topics.result())
        self.metadata_loaded.set()

    async def controlled_shutdown(self, max_retries: int, backoff_s: float) -> None:
        """Kafka's controlled shutdown: ask the controller to move leadership away and take
        this broker out of every ISR; stop fetching (a follower that keeps fetching would be
        added back to the ISR); return once this broker leads no partition another live
        replica could take, or after ``max_retries`` waits of ``backoff_s`` (then the
        remaining partitions fail over when the session goes)."""
        self._shutting_down = True
        await self.fetchers.shutdown()
        await asyncio.to_thread(
            self.zk.request_controlled_shutdown, self.broker_id, self.broker_epoch
        )
        deadline = time.monotonic() + max(1, max_retries) * max(backoff_s, 1.0)
        while time.monotonic() < deadline:
            movable = self._movable_leaderships()
            if not movable:
                log.info("controlled shutdown of broker %d: leadership moved", self.broker_id)
                break
            await asyncio.sleep(0.05)
        else:
            log.warning(
                "controlled shutdown of broker %d: still leading %d partitions",
                self.broker_id, len(self._movable_leaderships()),
            )  # fmt: skip
        await asyncio.to_thread(self.zk.delete_controlled_shutdown_request, self.broker_id)

    def _movable_leaderships(self) -> list[tuple[str, int]]:
        """Partitions this broker leads that another live broker in the ISR could lead."""
        rm = self._replica_manager
        if rm is None:
            return []
        live = set(self.metadata.brokers) - {self.broker_id}
        return [(p.topic, p.index) for p in rm.partitions() if p.is_leader and live & set(p.isr)]

    async def close(self) -> None:
        self._closed = True
        await self.fetchers.shutdown()
        for t in list(self._tasks):
            t.cancel()

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        """From kazoo's thread: run ``fn(*args)`` (a coroutine function or a plain one) on the
        event loop."""
        if self._closed:
            return

        def run() -> None:
            if self._closed:
                return
            result = fn(*args)
            if asyncio.iscoroutine(result):
                self._spawn(result)

        try:
            self._loop.call_soon_threadsafe(run)
        except RuntimeError:  # the loop is closed: shutting down
            pass

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster metadata update failed", exc_info=task.exception())

    def _session_event(self, state: str) -> None:
        if state == "LOST":
            log.warning("ZooKeeper session of broker %d expired", self.broker_id)
        elif state == "CONNECTED":
            self._post(self._reregister)

    async def _reregister(self) -> None:
        """After a new session: the ephemeral registration is gone; register again (a new
        broker epoch, KIP-380)."""
        if self._closed or self.info is None:
            return
        try:
            epoch = await asyncio.to_thread(self.zk.register_broker, self.info)
        except Exception as e:
            log.error("cannot re-register broker %d: %s", self.broker_id, e)
            return
        if epoch != self.broker_epoch:
            log.info("broker %d re-registered (epoch %d)", self.broker_id, epoch)
            self.broker_epoch = epoch

    # ----------------------------------------------------------------- brokers, controller

    async def _refresh_brokers(self) -> None:
        """Read /brokers/ids and apply it. One refresh at a time, each reading after the
        previous one applied, so the last applied list is the newest read."""
        async with self._brokers_lock:
            brokers = await asyncio.to_thread(self.zk.get_all_brokers)
            before = set(self.metadata.brokers)
            self.metadata.set_brokers(brokers)
        if set(brokers) != before:
            log.info("live brokers: %s", sorted(brokers))

    def _set_controller(self, data: bytes | None) -> None:
        if data is None:
            self.metadata.controller_id = None
            return
        try:
            self.metadata.controller_id = ControllerInfo.decode(data).broker_id
        except ValueError as e:
            log.warning("unreadable %s: %s", CONTROLLER_PATH, e)

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """The inter-broker endpoint of a live broker."""
        info = self.metadata.brokers.get(broker_id)
        if info is None:
            return None
        ep = info.endpoint(self._inter_broker_listener)
        if ep is None and info.endpoints:
            ep = info.endpoints[0]
        return (ep.host, ep.port) if ep is not None else None

    # ----------------------------------------------------------------- topics

    async def _topics_changed(self, children: list[str]) -> None:
        async with self._topics_lock:
            await self._apply_topic_list(children)

    async def _apply_topic_list(self, children: list[str]) -> None:
        current = set(children)
        new = sorted(current - self._watched_topics)
        gone = sorted(self._watched_topics - current)
        for name in gone:
            self._watched_topics.discard(name)
            self._topic_deleted(name)
        if not new:
            return
        self._watched_topics.update(new)
        assignments = await asyncio.to_thread(self.zk.get_topic_assignments, new)
        configs = await asyncio.to_thread(self.zk.get_topic_configs, list(assignments))
        tps = [(t, p) for t, a in assignments.items() for p in a.partitions]
        states = await asyncio.to_thread(self.zk.get_partition_states, tps)
        for name, a in assignments.items():
            per_partition = {p: s for (t, p), s in states.items() if t == name}
            self.metadata.put_topic(a, per_partition, configs.get(name, {}))
            self._host_replicas(a, configs.get(name, {}))
            for p in sorted(a.partitions):
                state = per_partition.get(p)
                if state is not None:
                    self._apply(name, p, state)
        # Each watch is armed with a read: topics in parallel worker threads, so the round
        # trips overlap (a topic's partitions are armed one after another).
        await asyncio.gather(*(asyncio.to_thread(self._watch_topic, n) for n in assignments))

    def _host_replicas(self, a: TopicAssignment, configs: dict[str, str]) -> None:
        """Create this broker's replicas of a newly seen topic with one registry write (the
        per-partition states then find them), rather than one write per partition."""
        rm = self._replica_manager
        mine = [p for p, replicas in a.partitions.items() if self.broker_id in replicas]
        if rm is None or not mine:
            return
        try:
            rm.log_manager.ensure_replicas(a.name, a.topic_id, mine, configs)
        except Exception as e:  # each partition's state retries and reports it
            log.error("cannot host the replicas of %s: %s", a.name, e)

    def _watch_topic(self, name: str) -> None:
        """(Worker thread) watch the topic znode; its partitions' state znodes are watched
        as the assignment names them."""
        watched: set[int] = set()

        def topic_changed(data: bytes | None, version: int | None) -> None:
            if data is None:
                return  # deleted: the children watch of /brokers/topics handles it
            try:
                a = TopicAssignment.decode(name, data, version if version is not None else -1)
            except ValueError as e:
                log.error("unreadable %s: %s", topic_path(name), e)
                return
            self._post(self._assignment_changed, a)
            for p in a.partitions:
                if p not in watched:
                    watched.add(p)
                    self._watch_state(name, p)

        self.zk.watch_data(topic_path(name), topic_changed)

        def config_changed(data: bytes | None, _version: int | None) -> None:
            if data is None:
                return
            try:
                configs = decode_topic_config(data, config_topic_path(name))
            except ValueError as e:
                log.error("unreadable topic config: %s", e)
                return
            self._post(self._config_changed, name, configs)

        self.zk.watch_data(config_topic_path(name), config_changed)

    def _config_changed(self, name: str, configs: dict[str, str]) -> None:
        """A topic's overrides changed in ZooKeeper (AlterConfigs on any broker): the
        metadata and this broker's logs of the topic take them."""
        t = self.metadata.topic(name)
        if t is None or dict(t.configs) == configs:
            return
        old = dict(t.configs)
        self.metadata.set_topic_configs(name, configs)
        rm = self._replica_manager
        if rm is not None and rm.log_manager.topic(name) is not None:
            try:
                rm.log_manager.alter_topic_config(name, configs, incremental=False)
                log.info("topic %s configs now %s", name, configs)
            except Exception as e:
                log.error("cannot apply the configs of topic %s: %s", name, e)
                return
            t = self.metadata.topic(name)
            if t is not None:
                self._notify_topic(t, False)
        t = self.metadata.topic(name)
        if t is None:
            return
        for cb in self._on_topic_configs:
            try:
                cb(t, old)
            except Exception:
                log.exception("topic config listener failed for %s", name)

    def _watch_state(self, name: str, partition: int) -> None:
        def state_changed(data: bytes | None, version: int | None) -> None:
            if data is None or version is None:
                return
            try:
                state = PartitionState.decode(data, version)
            except ValueError as e:
                log.error("unreadable %s: %s", partition_state_path(name, partition), e)
                return
            self._post(self._apply, name, partition, state)

        self.zk.watch_data(partition_state_path(name, partition), state_changed)

    def _assignment_changed(self, a: TopicAssignment) -> None:
        """A topic znode changed (partitions added, a reassignment started or finished): the
        partitions whose replicas changed are acted on again with their known state, so a
        new replica starts hosting and a removed one deletes its copy."""
        old = self.metadata.topic(a.name)
        self.metadata.put_topic(a, {})
        if old is None:
            return
        for p, replicas in a.partitions.items():
            before = old.partitions.get(p)
            if before is not None and before.replicas != tuple(replicas):
                self._act(a.name, p)

    def _apply(self, topic: str, partition: int, state: PartitionState) -> None:
        """A partition's state from ZooKeeper: record it, and host/lead/follow it when this
        broker is a replica."""
        if topic not in self._watched_topics:
            return
        if not self.metadata.put_partition_state(topic, partition, state):
            return
        self._act(topic, partition)

    def _act(self, topic: str, partition: int) -> None:
        t = self.metadata.topic(topic)
        if t is None:
            return
        pm = t.partitions[partition]
        state = pm.state
        if state is None:
            return
        change = PartitionChange(
            topic,
            partition,
            t.topic_id,
            pm.replicas,
            state.leader,
            state.leader_epoch,
            state.isr,
            state.zk_version,
            t.configs,
        )
        rm = self._replica_manager
        p = None
        if rm is not None:
            hosted = rm.get_partition(topic, partition)
            if self.broker_id in pm.replicas or hosted is not None:
                p = rm.become_leader_or_follower(change)
        for cb in self._on_partition_change:
            try:
                cb(change, p)
            except Exception:
                log.exception("partition change listener failed for %s-%d", topic, partition)
        self._spawn(self._notify_changed())

    async def _notify_changed(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for_metadata(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` holds, re-checked after every applied partition state;
        False when ``timeout_s`` passed first."""
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout_s)
        except TimeoutError:
            return predicate()
        return True

    def _topic_deleted(self, name: str) -> None:
        t = self.metadata.remove_topic(name)
        rm = self._replica_manager
        if t is not None and rm is not None:
            for p in t.partitions:
                if rm.get_partition(name, p) is not None:
                    rm.stop_replica(name, p, delete=True)
        if t is not None:
            self._notify_topic(t, True)
        log.info("topic %s deleted", name)

    # ----------------------------------------------------------------- ClusterLink

    def has_partition(self, topic: str, partition: int) -> bool:
        return self.metadata.has_partition(topic, partition)

    def add_fetcher(self, partition: Partition) -> None:
        if not self._shutting_down:
            self.fetchers.add(partition)

    def remove_fetcher(self, partition: Partition) -> None:
        self.fetchers.remove(partition)

    def _fetched(self, partition: Partition) -> None:
        """A follower appended data (nothing to do: consumers read the leader)."""

    async def alter_isr(self, partition: Partition, isr: frozenset[int]) -> bool:
        """Kafka's ZK-mode AlterIsr: the leader writes its ISR with a compare-and-set on the
        state znode's version; on a conflict it re-reads and adopts what won (a new leader
        epoch from the controller makes it a follower through the watch)."""
        p = partition
        state = PartitionState(
            leader=p.local_broker_id,
            leader_epoch=p.leader_epoch,
            isr=tuple(sorted(isr)),
            controller_epoch=self._controller_epoch_of(p),
            zk_version=p.partition_epoch,
        )
        p.propose_isr(isr)
        try:
            written = await asyncio.to_thread(
                self.zk.update_leader_and_isr, (p.topic, p.index), state
            )
        except Exception as e:
            log.warning("cannot write the ISR of %s: %s", p, e)
            p.isr_change_failed()
            return False
        if written is None:
            states = await asyncio.to_thread(self.zk.get_partition_states, [(p.topic, p.index)])
            current = states.get((p.topic, p.index))
            p.isr_change_failed()
            if current is not None:
                self._apply(p.topic, p.index, current)
            return False
        p.update_isr(written.isr, written.zk_version)
        self.metadata.put_partition_state(p.topic, p.index, written)
        log.info("ISR of %s is now %s", p, sorted(written.isr))
        return True

    def _controller_epoch_of(self, p: Partition) -> int:
        pm = self.metadata.partition(p.topic, p.index)
        return pm.state.controller_epoch if pm is not None and pm.state is not None else 0

    def expand_isr(self, partition: Partition, replica_id: int) -> None:
        t = self.metadata.topic(partition.topic)
        pm = t.partitions.get(partition.index) if t is not None else None
        if t is not None and (
            replica_id in t.removing.get(partition.index, ())
            or (pm is not None and replica_id not in pm.replicas)
        ):
            # KIP-455: a replica a reassignment removes (or has removed) never rejoins the ISR
            # (its fetcher may still fetch until it learns it is gone); else the ISR would
            # hold a replica that is not one.
            partition.isr_change_pending = False
            return
        log.info("follower %d caught up with %s: adding it to the ISR", replica_id, partition)
        isr = partition.isr | {replica_id}
        partition.propose_isr(isr)  # counted for the high watermark from now on (KIP-497)
        self._spawn(self.alter_isr(partition, isr))

    async def run_isr_expiration(self, interval_s: float) -> None:
        """Kafka's isr-expiration task: shrink ISRs every half ``replica.lag.time.max.ms``."""
        rm = self._replica_manager
        while not self._closed:
            await asyncio.sleep(interval_s)
            if rm is not None:
                try:
                    await rm.shrink_isrs()
                except Exception:
                    log.exception("ISR expiration failed")


def _set_once(fut: asyncio.Future[list[str]], value: list[str]) -> None:
    if not fut.done():
        fut.set_result(value)
