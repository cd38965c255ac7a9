"""``tierlog serve``: wiring the broker's parts, startup and clean shutdown.

Startup order: listeners bound (not yet accepting) → metrics endpoint → remote storage
opened and checked (tiered storage on) → log manager (loads and recovers every log) →
``__consumer_offsets`` → tiered storage when ``remote.log.storage.system.enable=true``
(``__remote_log_metadata``, metadata manager, RemoteLogManager taking every tiered
partition, or in a cluster the partitions as their roles arrive; see
:mod:`tierlog.server.tiered_storage`) → replica manager → group coordinator (replays its
partitions) → transaction coordinator (loads ``__transaction_state`` when it exists; see
:mod:`tierlog.server.txn_state_topic`) → listeners accept → (cluster: joining it) → the web
console when ``console.listener`` is set (:mod:`tierlog.console`, over
:mod:`tierlog.server.console_view`). Nothing is written to the log dirs before the listeners
are bound and the remote store checked. A line ``tierlog broker started: node N listening on
host:port`` on stderr says it is ready.

Shutdown (SIGTERM, SIGINT/Ctrl-C): stop the console, stop accepting and close the
connections, stop the group coordinator (parked joins get NOT_COORDINATOR), wake parked
fetches, stop tiered storage (tasks cancelled, metadata file caches written), then the log
manager flushes every log and writes the checkpoints and the clean-shutdown marker, so the
next start finds a clean log.
A second signal during shutdown is ignored: the flush must finish.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlog.console import ConsoleServer
from tierlog.coordinator.group.consumer_group import ConsumerGroupConfig
from tierlog.coordinator.group.group_config import GroupConfigBounds, validate_group_config
from tierlog.coordinator.group.group_coordinator import GroupCoordinator
from tierlog.coordinator.transaction import TRANSACTION_STATE_TOPIC_NAME, TransactionCoordinator
from tierlog.errors import ConfigError, TierlogError
from tierlog.log.cleaner_metrics import register_cleaner_metrics
from tierlog.log.file_handle_cache import file_handle_cache
from tierlog.log.log_config import LONG_MAX
from tierlog.log.log_manager import LogManager
from tierlog.log.meta_properties import new_cluster_id, stored_cluster_id
from tierlog.log.topic_names import GROUP_METADATA_TOPIC_NAME
from tierlog.protocol.api_versions import preload_schemas
from tierlog.quotas.file_quota_store import FILE_NAME as QUOTA_FILE_NAME
from tierlog.quotas.file_quota_store import FileQuotaStore
from tierlog.security.channel_builder import build_channel_builders
from tierlog.security.client_security import PLAINTEXT, ClientSecurity, inter_broker_security
from tierlog.security.credential_store import CredentialStore, ScramCredentialStore
from tierlog.security.principal import ANONYMOUS, KafkaPrincipal
from tierlog.server import cluster_tiering
from tierlog.server.broker_metrics import BrokerMetrics
from tierlog.server.client_quotas import ClientQuotas, ClientQuotaStore
from tierlog.server.console_view import ConsoleView
from tierlog.server.dynamic_broker_config import (
    DEFAULT_ENTITY,
    DynamicBrokerConfig,
    DynamicConfigStore,
    LocalDynamicConfigStore,
    ZkDynamicConfigStore,
)
from tierlog.server.group_config_store import GROUP_CONFIGS_FILE, load_group_configs
from tierlog.server.handlers.consumer_group import current_topics
from tierlog.server.kafka_apis import BrokerEndpoint, KafkaApis
from tierlog.server.kafka_config import KafkaConfig
from tierlog.server.malloc_tuning import keep_fetch_buffers_on_heap
from tierlog.server.network import SocketServer
from tierlog.server.offset_store import (
    TXN_STATE_APPEND_TIMEOUT_MS,
    OffsetStore,
    ensure_offsets_topic,
)
from tierlog.server.producer_id_manager import ProducerIdManager
from tierlog.server.remote_log_metadata_publisher import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    remote_log_metadata_topic_configs,
)
from tierlog.server.replica_alter_log_dirs import ReplicaAlterLogDirsManager
from tierlog.server.replica_manager import ReplicaManager
from tierlog.server.tiered_storage import TieredStorage, open_remote_storage
from tierlog.server.txn_marker_sender import TxnMarkerSender
from tierlog.server.txn_state_topic import coordinator_follows, load_local_transaction_state

if TYPE_CHECKING:
    from tierlog.cluster.cluster_link import PartitionChange
    from tierlog.cluster.controller import KafkaController
    from tierlog.cluster.kafka_zk_client import KafkaZkClient
    from tierlog.cluster.partition import Partition
    from tierlog.cluster.zk_broker import ZkBroker
    from tierlog.security.acl_checks import BrokerAuthorizer
    from tierlog.security.zk_credential_store import ZkCredentialStore
    from tierlog.server.cluster_metadata_publisher import ClusterMetadataPublisher

__all__ = ["Broker", "main", "run"]

log = logging.getLogger("tierlog.broker")


class Broker:
    """One tierlog node: all parts, started and stopped in order. Not thread-safe."""

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.txn_coordinator: TransactionCoordinator | None = None
        self._txn_marker_sender: TxnMarkerSender | None = None
        self.apis: KafkaApis | None = None
        self.server: SocketServer | None = None
        self.tiered: TieredStorage | None = None
        #: The ``/metrics`` endpoint (None without ``metrics.port``).
        self.metrics: BrokerMetrics | None = None
        #: The web console (None without ``console.listener``).
        self.console: ConsoleServer | None = None
        self._tiered_task: asyncio.Task[None] | None = None
        #: Tiered storage in a cluster: the replicated metadata topic's client and its
        #: creation (retried until enough brokers are alive).
        self.metadata_publisher: ClusterMetadataPublisher | None = None
        self._metadata_topic_task: asyncio.Task[None] | None = None
        #: The cluster (None without zookeeper.connect: a single node).
        self.zk: KafkaZkClient | None = None
        self.zk_broker: ZkBroker | None = None
        self.dynamic_config: DynamicBrokerConfig | None = None
        self.controller: KafkaController | None = None
        self._isr_task: asyncio.Task[None] | None = None
        self._hw_task: asyncio.Task[None] | None = None
        self.bound: list[tuple[str, int]] = []
        self._inter_broker_security: ClientSecurity = PLAINTEXT
        self._zk_credentials: ZkCredentialStore | None = None
        self._stopped = asyncio.Event()
        self._shutting_down = False

    async def start(self) -> None:
        """Start every part; returns once the listeners accept connections.

        Raises:
            KafkaStorageError, InconsistentLogDirError: the log dirs cannot be used.
            OSError: a listener cannot bind.
        """
        c = self.config
        t0 = time.monotonic()
        # TLS stores and JAAS first: a bad one stops the broker before any log is touched.
        # SCRAM credentials: a file on one node; ZooKeeper's /config/users in a cluster
        # (read once the session is up, before the listeners open).
        credentials: ScramCredentialStore
        zk_credentials = None
        if c.zookeeper_connect is None:
            credentials = CredentialStore.in_log_dir(c.log_dirs[0])
        else:
            from tierlog.security.zk_credential_store import ZkCredentialStore

            credentials = zk_credentials = ZkCredentialStore()
        channels = build_channel_builders(c, credentials)
        if c.zookeeper_connect is not None:
            # this broker's own login to the others (inter.broker.listener.name)
            self._inter_broker_security = inter_broker_security(c)
        _budget_open_files(c.log_max_open_files)
        # Bind every listener before anything touches the log dirs (a port in use must not
        # leave a half-made log dir behind); they accept connections once all is ready.
        server = SocketServer(
            self._handle,
            max_frame_size=c.socket_request_max_bytes,
            send_buffer_bytes=c.socket_send_buffer_bytes
            if c.is_set("socket.send.buffer.bytes")
            else None,
            receive_buffer_bytes=c.socket_receive_buffer_bytes
            if c.is_set("socket.receive.buffer.bytes")
            else None,
        )
        self.server = server
        for e in c.listeners:
            try:
                bound = await server.bind(e.host, e.port, channels[e.listener_name])
            except OSError as err:
                raise OSError(
                    err.errno,
                    f"listener {e.listener_name}://{e.host}:{e.port} cannot bind: "
                    f"{err.strerror or err}",
                ) from err
            self.bound.append(bound)
        if c.metrics_port:  # unset or 0: no endpoint (as before the broker served it)
            # Before any part registers its collectors; a taken port fails startup here.
            self.metrics = self._start_metrics(c)
            server.request_stats = self.metrics.request_stats
        rsm = None
        if c.remote_log_storage_system_enable:
            # The remote store checked before the log dirs are touched, as the listeners.
            rsm = await asyncio.to_thread(open_remote_storage, c)
        cluster_id = None
        if c.zookeeper_connect is not None:
            cluster_id = await self._connect_zookeeper()
            if zk_credentials is not None and self.zk is not None:
                await asyncio.to_thread(zk_credentials.start, self.zk)
                self._zk_credentials = zk_credentials
        # Dynamic broker configs (AlterConfigs on the broker) apply from the start, as Kafka's.
        store: DynamicConfigStore = (
            ZkDynamicConfigStore(self.zk)
            if self.zk is not None
            else LocalDynamicConfigStore.in_log_dir(c.log_dirs[0])
        )
        dynamic = DynamicBrokerConfig(c, store)
        c = await asyncio.to_thread(dynamic.initialize)
        self.dynamic_config = dynamic
        lm = LogManager(
            c.log_dirs,
            c.log_config(),
            node_id=c.node_id,
            cluster_id=cluster_id,
            retention_check_interval_ms=c.log_retention_check_interval_ms,
            flush_check_interval_ms=c.log_flush_scheduler_interval_ms,
            flush_recovery_offset_checkpoint_interval_ms=c.log_flush_offset_checkpoint_interval_ms,
            flush_start_offset_checkpoint_interval_ms=c.log_flush_start_offset_checkpoint_interval_ms,
            recovery_threads_per_data_dir=c.num_recovery_threads_per_data_dir,
            remote_log_storage_system_enable=c.remote_log_storage_system_enable,
            cleaner_config=c.cleaner_config(),
        )
        # Loading logs is blocking file I/O (recovery after a crash): keep the loop free.
        await asyncio.to_thread(lm.startup)
        self.log_manager = lm
        zk_broker = self._new_zk_broker() if self.zk is not None else None
        num_offsets = c.offsets_topic_num_partitions
        if zk_broker is None:
            for lg in lm.all_logs():
                # A single replica: everything in the log is committed.
                lg.update_high_watermark(lg.log_end_offset)
            num_offsets = ensure_offsets_topic(
                lm, c.offsets_topic_num_partitions, c.offsets_topic_segment_bytes
            )
        tiered: TieredStorage | None = None
        if c.remote_log_storage_system_enable:
            tiered = TieredStorage(
                c,
                lm,
                asyncio.get_running_loop(),
                metrics_registry=self.metrics.registry if self.metrics is not None else None,
                rsm=rsm,
            )
            self.tiered = tiered
            if zk_broker is None:
                await asyncio.to_thread(tiered.start)
            else:
                assert self.zk is not None
                publisher, num = await cluster_tiering.cluster_metadata_publisher(
                    self.zk, zk_broker, c.node_id, c.remote_log_metadata_topic_num_partitions
                )
                self.metadata_publisher = publisher
                await asyncio.to_thread(tiered.start, publisher, num)
                zk_broker.fetchers.tier_state_machine = functools.partial(
                    cluster_tiering.rebuild_from_remote_storage, tiered
                )
        rm = ReplicaManager(
            lm,
            remote_log_manager=tiered.rlm if tiered is not None else None,
            local_broker_id=c.node_id,
            replica_lag_time_max_ms=c.replica_lag_time_max_ms,
            cluster=zk_broker,
        )
        self.replica_manager = rm
        if self.metrics is not None:
            rm.topic_stats = self.metrics.topic_stats
            if zk_broker is not None:
                zk_broker.fetchers.on_replication_bytes_in = (
                    self.metrics.topic_stats.replication_bytes_in
                )
        if zk_broker is not None:
            await asyncio.to_thread(rm.load_high_watermarks)
        rate = c.replica_alter_log_dirs_io_max_bytes_per_second
        rm.alter_log_dirs_manager = ReplicaAlterLogDirsManager(
            rm, max_bytes_per_second=None if rate >= LONG_MAX else rate
        )
        rm.alter_log_dirs_manager.resume()  # moves a restart cut
        if tiered is not None:
            # Events appended to __remote_log_metadata wake the fetches parked on it.
            tiered.on_metadata_append = lambda mp: rm.wake(REMOTE_LOG_METADATA_TOPIC_NAME, mp)
            self._tiered_task = asyncio.create_task(tiered.run(), name="tiered-storage")
        gc = GroupCoordinator(
            OffsetStore(rm),
            initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=c.group_min_session_timeout_ms,
            max_session_timeout_ms=c.group_max_session_timeout_ms,
            offsets_topic_num_partitions=num_offsets,
            consumer_group_config=ConsumerGroupConfig(
                session_timeout_ms=c.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=c.group_consumer_heartbeat_interval_ms,
                max_size=c.group_consumer_max_size,
                assignors=c.group_consumer_assignors,
            ),
            topics=lambda: current_topics(lm, zk_broker.metadata if zk_broker else None),
        )
        if zk_broker is None:
            gc.consumer_groups.group_configs = self._load_group_configs(gc)
        await gc.start(cluster=zk_broker is not None)
        self.group_coordinator = gc
        authorizer = await self._start_authorizer()
        await server.start_serving()
        adv = c.advertised_listeners[0]
        port = adv.port or self.bound[0][1]
        host = adv.host or self.bound[0][0]
        endpoint = BrokerEndpoint(c.node_id, host, port, c.broker_rack)
        endpoints = _listener_endpoints(c, self.bound)
        admin = None
        if zk_broker is not None:
            from tierlog.cluster.zk_admin import ZkAdminManager

            admin = ZkAdminManager(zk_broker, c.log_config())
        client_quotas = await self._start_client_quotas(c)
        producer_ids = ProducerIdManager(
            c.log_dirs[0],
            allocate_block=None
            if self.zk is None
            else functools.partial(self.zk.allocate_producer_id_block, c.node_id),
        )
        producer_ids.prefetch()  # a cluster's first block, claimed before any client asks
        self.apis = KafkaApis(
            config=c,
            log_manager=lm,
            replica_manager=rm,
            group_coordinator=gc,
            producer_id_manager=producer_ids,
            endpoint=endpoint,
            cluster_id=lm.cluster_id,
            tiered=tiered,
            cluster=zk_broker,
            admin=admin,
            credentials=credentials,
            endpoints=endpoints,
            authorizer=authorizer,
            client_quotas=client_quotas,
            dynamic_config=dynamic,
        )
        tc = self._start_transaction_coordinator(self.apis, zk_broker)
        self._register_reconfigurables(dynamic, lm, tiered)
        if zk_broker is not None:
            zk_broker.on_partition_change(functools.partial(coordinator_follows, tc))
            await self._join_cluster(zk_broker, rm, gc)
            self._watch_dynamic_configs(dynamic)
        if c.console_listener is not None:
            await self._start_console(c.console_listener, endpoints, authorizer)
        threading.Thread(target=_preload_schemas, name="preload-schemas", daemon=True).start()
        listening = ", ".join(f"{h}:{p}" for h, p in self.bound)
        log.info(
            "tierlog broker started in %.2fs: node %d, cluster %s, listening on %s, "
            "advertising %s:%d, log dirs %s",
            time.monotonic() - t0,
            c.node_id,
            lm.cluster_id,
            listening,
            host,
            port,
            ",".join(str(d) for d in c.log_dirs),
        )

    async def _start_client_quotas(self, c: KafkaConfig) -> ClientQuotas:
        """Client quotas from ``<first log dir>/client-quotas.json`` (single node) or
        ``/config/users`` and ``/config/clients`` (cluster, reloaded on every change)."""
        store: ClientQuotaStore
        if self.zk is not None:
            from tierlog.cluster.zk_client_quotas import ZkClientQuotaStore

            store = zk_store = ZkClientQuotaStore(self.zk)
        else:
            store = FileQuotaStore(Path(c.log_dirs[0]) / QUOTA_FILE_NAME)
        quotas = ClientQuotas(
            store,
            num_samples=c.quota_window_num,
            window_ms=c.quota_window_size_seconds * 1000.0,
        )
        await asyncio.to_thread(quotas.load)
        if self.zk is not None:
            loop = asyncio.get_running_loop()

            def reload() -> None:  # on ZooKeeper's thread: read here, apply on the loop
                try:
                    loaded = zk_store.load()
                except Exception as e:
                    log.warning("cannot reload client quotas: %s", e)
                    return
                loop.call_soon_threadsafe(quotas.apply, loaded)

            zk_store.watch(reload)
        return quotas

    def _start_transaction_coordinator(
        self, apis: KafkaApis, zk_broker: ZkBroker | None
    ) -> TransactionCoordinator:
        """The transaction coordinator: markers through the replica manager (and
        WriteTxnMarkers in a cluster); transactional offsets reach the group coordinator
        through the replica manager's completion listeners; transactional produces are
        checked against it (KIP-890). A single node loads ``__transaction_state`` now if it
        exists (else it is created on first use)."""
        c = self.config
        rm, gc = apis.replica_manager, apis.group_coordinator
        sender = TxnMarkerSender(rm, apis.log_manager, c.node_id, zk_broker)
        self._txn_marker_sender = sender
        tc = TransactionCoordinator(
            OffsetStore(rm, TRANSACTION_STATE_TOPIC_NAME, TXN_STATE_APPEND_TIMEOUT_MS),
            sender,
            apis.producer_id_manager.generate_producer_id,
            transaction_topic_partition_count=c.transaction_state_log_num_partitions,
            transaction_max_timeout_ms=c.transaction_max_timeout_ms,
            transactional_id_expiration_ms=c.transactional_id_expiration_ms,
            abort_timed_out_interval_ms=c.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            remove_expired_interval_ms=c.transaction_remove_expired_transaction_cleanup_interval_ms,
        )
        tc.start()
        self.txn_coordinator = tc
        apis.txn_coordinator = tc
        if gc is not None:
            rm.txn_completion_listeners.append(gc.on_transaction_completed)
        rm.txn_verifier = tc.verify_transactional_produce
        if zk_broker is None:
            load_local_transaction_state(apis, tc)
        return tc

    def _register_reconfigurables(
        self, dynamic: DynamicBrokerConfig, lm: LogManager, tiered: TieredStorage | None
    ) -> None:
        """What a dynamic config change applies to (Kafka's ``Reconfigurable`` parts)."""

        def log_defaults(old: KafkaConfig, new: KafkaConfig) -> None:
            if new.log_config() != old.log_config():
                lm.reconfigure_default_log_config(new.log_config())

        def cleaner(old: KafkaConfig, new: KafkaConfig) -> None:
            if new.cleaner_config() != old.cleaner_config():
                lm.reconfigure_cleaner(new.cleaner_config())

        def remote_quotas(old: KafkaConfig, new: KafkaConfig) -> None:
            if tiered is None:
                return
            rlm = tiered.rlm
            rlm.copy_quota.update_rate(new.remote_log_manager_copy_max_bytes_per_second)
            rlm.fetch_quota.update_rate(new.remote_log_manager_fetch_max_bytes_per_second)

        def handlers(old: KafkaConfig, new: KafkaConfig) -> None:
            if self.apis is not None:
                self.apis.config = new

        dynamic.add_reconfigurable("the log defaults", log_defaults)
        dynamic.add_reconfigurable("the log cleaner", cleaner)
        dynamic.add_reconfigurable("the remote log quotas", remote_quotas)
        dynamic.add_reconfigurable("the request handlers", handlers)

    def _watch_dynamic_configs(self, dynamic: DynamicBrokerConfig) -> None:
        """Apply what any broker writes to ``/config/brokers/<default>`` and
        ``/config/brokers/<this id>`` (watch callbacks run on kazoo's thread)."""
        from tierlog.cluster.zk_data import config_broker_path, decode_topic_config

        assert self.zk is not None
        loop = asyncio.get_running_loop()
        for entity in (DEFAULT_ENTITY, dynamic.broker_entity):
            path = config_broker_path(entity)

            def changed(
                data: bytes | None, _version: int | None, entity: str = entity, path: str = path
            ) -> None:
                try:
                    config = decode_topic_config(data, path)
                except ValueError as e:
                    log.error("unreadable dynamic broker config: %s", e)
                    return
                loop.call_soon_threadsafe(dynamic.update, entity, config)

            self.zk.watch_data(path, changed)

    def _start_metrics(self, c: KafkaConfig) -> BrokerMetrics:
        """Serve ``/metrics`` on ``metrics.port`` (the first listener's host, else loopback)
        with the broker's own gauges read at scrape time.

        Raises:
            OSError: the port cannot be bound.
        """
        metrics = BrokerMetrics()
        metrics.watch_broker(
            lambda: self.log_manager,
            lambda: self.replica_manager,
            lambda: self.group_coordinator,
            self._controller_active,
            self._offline_partitions,
        )
        # The log cleaner's gauges (none while it does not run), tiered storage on or off.
        register_cleaner_metrics(
            metrics.registry, lambda: self.log_manager.cleaner if self.log_manager else None
        )
        host = c.listeners[0].host if c.listeners and c.listeners[0].host else "127.0.0.1"
        port = metrics.start(c.metrics_port or 0, host)
        log.info("metrics on http://%s:%d/metrics", host, port)
        return metrics

    async def _start_console(
        self,
        listener: tuple[str, int],
        endpoints: dict[str, BrokerEndpoint],
        authorizer: BrokerAuthorizer | None,
    ) -> None:
        """Serve the web console on ``console.listener`` (tierlog.console).

        Raises:
            OSError: the address cannot be bound.
        """
        assert self.log_manager is not None and self.replica_manager is not None
        assert self.group_coordinator is not None
        view = ConsoleView(
            log_manager=self.log_manager,
            replica_manager=self.replica_manager,
            group_coordinator=self.group_coordinator,
            node_id=self.config.node_id,
            rack=self.config.broker_rack,
            endpoints=endpoints,
            zk_broker=self.zk_broker,
            controller_active=self._controller_active,
            authorizer=authorizer,
        )
        console = ConsoleServer(view)
        host, port = await console.start(*listener)
        self.console = console
        shown = f"[{host}]" if ":" in host else host
        log.info("console on http://%s:%d/ (read-only, no authentication)", shown, port)

    def _controller_active(self) -> bool:
        """A single node is its own controller; in a cluster, the winner of ``/controller``."""
        if self.zk is None:
            return True
        return self.controller is not None and self.controller.active

    def _offline_partitions(self) -> int:
        """Partitions without a live leader, as the active controller reports them (0 on
        other brokers, as in Kafka)."""
        if self.zk_broker is None or not self._controller_active():
            return 0
        md = self.zk_broker.metadata
        alive = set(md.alive_broker_ids())
        return sum(
            1
            for t in md.topics()
            for p in t.partitions.values()
            if p.leader < 0 or p.leader not in alive
        )

    def _load_group_configs(self, gc: GroupCoordinator) -> dict[str, dict[str, int]]:
        """Group configs from ``<first log dir>/group-configs.json``, checked again (the
        broker's bounds may have changed).

        Raises:
            ConfigError: the file is unreadable or holds a config out of bounds.
        """
        c = self.config
        path = Path(c.log_dirs[0]) / GROUP_CONFIGS_FILE
        bounds = GroupConfigBounds(*c.group_consumer_bounds)
        out = {}
        for group, overrides in load_group_configs(path).items():
            try:
                out[group] = validate_group_config(overrides, gc.consumer_groups.config, bounds)
            except ConfigError as exc:
                raise ConfigError(str(path), f"group {group}: {exc}") from None
        return out

    async def _start_authorizer(self) -> BrokerAuthorizer | None:
        """The ACLs (authorizer.class.name): a file in the first log dir on a single node,
        ZooKeeper's /kafka-acl in a cluster (watched for other brokers' changes); loaded
        before the listeners open. None without an authorizer."""
        from tierlog.security.acl_checks import BrokerAuthorizer, authorizer_from_config
        from tierlog.security.acl_store import AclStore, LocalAclStore

        rules = authorizer_from_config(self.config)
        if rules is None:
            return None
        store: AclStore
        zk_store = None
        if self.zk is not None:
            from tierlog.security.zk_acl_store import ZkAclStore

            zk_store = ZkAclStore(self.zk)
            await asyncio.to_thread(zk_store.ensure_paths)
            store = zk_store
        else:
            store = LocalAclStore.in_log_dir(self.config.log_dirs[0])
        authorizer = BrokerAuthorizer(rules, store)
        await authorizer.start()
        if zk_store is not None:
            await asyncio.to_thread(zk_store.watch, authorizer.changed)
        return authorizer

    # ----------------------------------------------------------------- the cluster

    async def _connect_zookeeper(self) -> str:
        """Connect to ZooKeeper, create Kafka's top-level znodes; the cluster id (the one in
        ZooKeeper, or the one of this broker's log dirs for a new cluster)."""
        from tierlog.cluster.kafka_zk_client import KafkaZkClient

        c = self.config
        assert c.zookeeper_connect is not None
        zk = KafkaZkClient(
            c.zookeeper_connect,
            session_timeout_ms=c.zookeeper_session_timeout_ms,
            connection_timeout_ms=c.zookeeper_connection_timeout_ms,
        )
        await asyncio.to_thread(zk.start)
        self.zk = zk
        await asyncio.to_thread(zk.create_top_level_paths)
        proposed = stored_cluster_id(c.log_dirs) or new_cluster_id()
        cluster_id: str = await asyncio.to_thread(zk.get_or_create_cluster_id, proposed)
        log.info("connected to ZooKeeper at %s: cluster %s", c.zookeeper_connect, cluster_id)
        return cluster_id

    def _new_zk_broker(self) -> ZkBroker:
        from tierlog.cluster.broker_client import BrokerClient
        from tierlog.cluster.replica_fetcher import FetcherConfig
        from tierlog.cluster.zk_broker import ZkBroker

        c = self.config
        assert self.zk is not None
        node = c.node_id
        fetcher_config = FetcherConfig(
            broker_id=node,
            max_bytes=c.replica_fetch_max_bytes,
            response_max_bytes=c.replica_fetch_response_max_bytes,
            max_wait_ms=c.replica_fetch_wait_max_ms,
            min_bytes=c.replica_fetch_min_bytes,
            backoff_ms=c.replica_fetch_backoff_ms,
            num_fetchers=c.num_replica_fetchers,
        )
        zk_broker = ZkBroker(
            self.zk,
            None,
            node,
            inter_broker_listener=c.inter_broker_listener_name,
            fetcher_config=fetcher_config,
            client_factory=lambda: BrokerClient(
                f"tierlog-broker-{node}-fetcher", security=self._inter_broker_security
            ),
            loop=asyncio.get_running_loop(),
        )
        self.zk_broker = zk_broker
        return zk_broker

    async def _join_cluster(
        self, zk_broker: ZkBroker, rm: ReplicaManager, gc: GroupCoordinator
    ) -> None:
        """Register (with the bound ports), read the cluster's metadata and take this
        broker's replicas, start the controller candidate and the ISR expiration."""
        from tierlog.cluster.controller import ControllerConfig, KafkaController
        from tierlog.cluster.zk_data import BrokerEndPoint, BrokerInfo

        c = self.config
        assert self.zk is not None
        endpoints = []
        for e, (_bound_host, bound_port) in zip(c.advertised_listeners, self.bound, strict=False):
            endpoints.append(
                BrokerEndPoint(
                    e.listener_name,
                    e.host or _bound_host,
                    e.port or bound_port,
                    e.security_protocol,
                )
            )
        zk_broker.info = BrokerInfo(c.node_id, tuple(endpoints), c.broker_rack)
        zk_broker.attach(rm)

        def coordinator_follows(change: PartitionChange, p: Partition | None) -> None:
            if change.topic != GROUP_METADATA_TOPIC_NAME:
                return
            if p is not None and p.is_leader:
                gc.on_election(change.partition)
            else:
                gc.on_resignation(change.partition)

        zk_broker.on_partition_change(coordinator_follows)
        if self.tiered is not None:
            cluster_tiering.follow_roles(
                self.tiered, zk_broker, lambda: self.replica_manager, self._controller_active
            )
        await zk_broker.start()
        if self.tiered is not None and self.apis is not None and self.apis.admin is not None:
            from tierlog.server.cluster_metadata_publisher import (
                create_metadata_topic_when_possible,
            )

            self._metadata_topic_task = asyncio.create_task(
                create_metadata_topic_when_possible(
                    self.apis.admin,
                    zk_broker.metadata,
                    self.tiered.rlmm.num_metadata_partitions,
                    c.remote_log_metadata_topic_replication_factor,
                    remote_log_metadata_topic_configs(),
                ),
                name="remote-log-metadata-topic",
            )
        await asyncio.to_thread(self._delete_topics_gone_from_cluster, zk_broker)
        controller = KafkaController(
            self.zk,
            ControllerConfig(
                broker_id=c.node_id,
                unclean_leader_election_enable=bool(c.log_config().unclean_leader_election_enable),
                auto_leader_rebalance_enable=c.auto_leader_rebalance_enable,
                leader_imbalance_check_interval_s=float(c.leader_imbalance_check_interval_seconds),
                leader_imbalance_per_broker_percentage=c.leader_imbalance_per_broker_percentage,
            ),
        )
        controller.start()
        self.controller = controller
        if self.apis is not None:
            self.apis.controller = controller
        self._isr_task = asyncio.create_task(
            zk_broker.run_isr_expiration(c.replica_lag_time_max_ms / 2000), name="isr-expiration"
        )
        self._hw_task = asyncio.create_task(
            self._checkpoint_high_watermarks(c.replica_high_watermark_checkpoint_interval_ms),
            name="highwatermark-checkpoint",
        )

    async def _checkpoint_high_watermarks(self, interval_ms: int) -> None:
        rm = self.replica_manager
        assert rm is not None
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await asyncio.to_thread(rm.write_high_watermarks, rm.high_watermarks())

    def _delete_topics_gone_from_cluster(self, zk_broker: ZkBroker) -> None:
        """Local topics the cluster no longer has (deleted while this broker was down)."""
        lm = self.log_manager
        assert lm is not None
        for name, info in lm.topics().items():
            t = zk_broker.metadata.topic(name)
            if t is None or (t.topic_id is not None and t.topic_id != info.topic_id):
                log.info("topic %s was deleted while this broker was away: deleting it", name)
                lm.delete_topic(name)

    def _handle(
        self, ev: Any, client_host: str, principal: KafkaPrincipal = ANONYMOUS, listener: str = ""
    ) -> Any:
        apis = self.apis
        if apis is None:  # connections accepted before wiring finished (cannot happen)
            raise RuntimeError("broker not started")
        return apis.handle(ev, client_host, principal, listener)

    def request_stop(self) -> None:
        """Ask :meth:`serve_forever` to shut down (signal handlers call this)."""
        if not self._stopped.is_set():
            log.info("shutdown requested")
        self._stopped.set()

    async def serve_forever(self) -> None:
        """Start, wait for :meth:`request_stop`, shut down."""
        try:
            await self.start()
            await self._stopped.wait()
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        """Stop in reverse order; flush and checkpoint every log. Idempotent."""
        if self._shutting_down:
            return
        self._shutting_down = True
        t0 = time.monotonic()
        if self.zk_broker is not None and self.config.controlled_shutdown_enable:
            try:
                await self.zk_broker.controlled_shutdown(
                    self.config.controlled_shutdown_max_retries,
                    self.config.controlled_shutdown_retry_backoff_ms / 1000,
                )
            except Exception as e:
                log.warning("controlled shutdown failed, shutting down anyway: %s", e)
        if self.console is not None:
            await self.console.stop()
        if self.server is not None:
            await self.server.stop()
        if self.txn_coordinator is not None:
            try:
                await asyncio.wait_for(self.txn_coordinator.stop(), 10)
            except Exception:
                log.exception("transaction coordinator stop failed")
        if self._txn_marker_sender is not None:
            await self._txn_marker_sender.close()
        if self.group_coordinator is not None:
            try:
                await asyncio.wait_for(self.group_coordinator.stop(), 10)
            except Exception:
                log.exception("group coordinator stop failed")
        if self.replica_manager is not None:
            self.replica_manager.wake_all()
        if self.replica_manager is not None and self.replica_manager.alter_log_dirs_manager:
            await self.replica_manager.alter_log_dirs_manager.close()
        if self._tiered_task is not None:
            self._tiered_task.cancel()
            try:
                await self._tiered_task
            except asyncio.CancelledError:
                pass
        if self.tiered is not None:
            try:
                await asyncio.to_thread(self.tiered.close)
            except Exception:
                log.exception("tiered storage stop failed")
        if self.metadata_publisher is not None:
            # After tiered storage stopped: its threads publish through these connections.
            await asyncio.to_thread(self.metadata_publisher.close)
        for task in (self._isr_task, self._hw_task, self._metadata_topic_task):
            if task is not None:
                task.cancel()
        if self.zk_broker is not None and self.replica_manager is not None:
            rm = self.replica_manager
            await asyncio.to_thread(rm.write_high_watermarks, rm.high_watermarks())
        if self.controller is not None:
            await asyncio.to_thread(self.controller.stop)
        if self.zk_broker is not None:
            await self.zk_broker.close()
        if self.log_manager is not None:
            await asyncio.to_thread(self.log_manager.shutdown)
        if self.metrics is not None:
            self.metrics.close()
        if self._zk_credentials is not None:
            self._zk_credentials.close()
        if self.zk is not None:
            # Last: closing the session removes the registration, which tells the controller.
            await asyncio.to_thread(self.zk.close)
        log.info("tierlog broker stopped cleanly in %.2fs", time.monotonic() - t0)


def _listener_endpoints(c: KafkaConfig, bound: list[tuple[str, int]]) -> dict[str, BrokerEndpoint]:
    """Each listener's advertised address (advertised.listeners of the same name, else the
    bound address), so a client of one listener is never sent to another's port."""
    bound_by_name = {e.listener_name: b for e, b in zip(c.listeners, bound, strict=True)}
    out: dict[str, BrokerEndpoint] = {}
    for e in c.listeners:
        adv = next((a for a in c.advertised_listeners if a.listener_name == e.listener_name), e)
        b_host, b_port = bound_by_name[e.listener_name]
        out[e.listener_name] = BrokerEndpoint(
            c.node_id, adv.host or b_host, adv.port or b_port, c.broker_rack
        )
    return out


def _preload_schemas() -> None:
    t0 = time.monotonic()
    try:
        n = preload_schemas()
    except Exception as e:  # a schema loads on first use instead
        log.warning("cannot preload the protocol schemas: %s", e)
        return
    log.info("protocol schemas of %d API versions loaded in %.2fs", n, time.monotonic() - t0)


def _budget_open_files(configured: int) -> None:
    """Raise the soft open-files limit to the hard one, and give segment files their budget
    (``log.max.open.files``, or half the limit: the rest is for sockets, checkpoints, remote
    reads)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised = soft
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            raised = hard
        except (OSError, ValueError) as e:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, hard, e)
    # No limit at all: budget as for Linux's usual hard limit (1,048,576).
    limit = (1 << 20) if raised == resource.RLIM_INFINITY else raised
    budget = configured if configured > 0 else max(16, limit // 2)
    file_handle_cache().set_max_open(budget)
    log.info(
        "open files: soft limit %s (was %s), hard limit %s; segment files keep at most %d open "
        "(log.max.open.files)",
        "unlimited" if raised == resource.RLIM_INFINITY else raised,
        "unlimited" if soft == resource.RLIM_INFINITY else soft,
        "unlimited" if hard == resource.RLIM_INFINITY else hard,
        budget,
    )


def _setup_logging() -> None:
    level = os.environ.get("TIERLOG_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def run(config: KafkaConfig) -> int:
    """Run the broker until SIGTERM or SIGINT; the process exit code."""
    _setup_logging()
    log.info("%s", keep_fetch_buffers_on_heap())
    broker = Broker(config)

    async def main_async() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, broker.request_stop)
        await broker.serve_forever()

    try:
        asyncio.run(main_async())
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 130
    except (OSError, TierlogError) as e:
        # Expected failures (a port in use, an unusable log dir): one clear line.
        log.critical("tierlog broker failed: %s", e)
        return 1
    except Exception as e:
        log.critical("tierlog broker failed: %s", e, exc_info=True)
        return 1
    return 0


def main(config: KafkaConfig) -> int:
    """Entry point of ``tierlog serve`` (cli.py)."""
    return run(config)
