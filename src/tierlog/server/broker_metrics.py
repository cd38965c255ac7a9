"""The broker's Prometheus endpoint (``metrics.port``) and Kafka's broker metrics.

:class:`BrokerMetrics` owns the :class:`~prometheus_client.CollectorRegistry` and the HTTP
server; the broker starts it when ``metrics.port`` is set, whether tiered storage is on or
not. Tiered storage (:class:`tierlog.tiered.metrics.RemoteStorageMetrics`) and the log
cleaner register their collectors on :attr:`BrokerMetrics.registry`.

Naming: Kafka's JMX names mapped as the Prometheus JMX exporter's usual rules do. The MBean
``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t`` becomes
``kafka_server_BrokerTopicMetrics_BytesInPerSec`` (domain, ``type`` and ``name`` joined by
``_``, Kafka's spelling kept) and the remaining key properties become labels
(``topic="t"``). A Kafka meter (``...PerSec``) is a Prometheus counter, exposed as
``..._total``: the per-second rate is ``rate(...[1m])``, Prometheus' job. Kafka's all-topics
meter (the MBean without ``topic``) is the same family without the ``topic`` label, so in
PromQL ``{topic=""}`` selects the broker-wide series and ``{topic!=""}`` the per-topic ones
(summing both would count twice). A Kafka timer histogram (``TotalTimeMs``) is a Prometheus
histogram in milliseconds; gauges keep their names.

=====================================================  =========  =======================
series                                                 type       labels
=====================================================  =========  =======================
kafka_server_BrokerTopicMetrics_BytesInPerSec          counter    topic (absent: all)
kafka_server_BrokerTopicMetrics_BytesOutPerSec         counter    topic (absent: all)
kafka_server_BrokerTopicMetrics_MessagesInPerSec       counter    topic (absent: all)
kafka_server_BrokerTopicMetrics_TotalProduceRequestsPerSec  counter  topic (absent: all)
kafka_server_BrokerTopicMetrics_FailedProduceRequestsPerSec counter  topic (absent: all)
kafka_server_BrokerTopicMetrics_TotalFetchRequestsPerSec    counter  topic (absent: all)
kafka_server_BrokerTopicMetrics_FailedFetchRequestsPerSec   counter  topic (absent: all)
kafka_server_BrokerTopicMetrics_ReplicationBytesInPerSec    counter  topic (absent: all)
kafka_server_BrokerTopicMetrics_ReplicationBytesOutPerSec   counter  topic (absent: all)
kafka_network_RequestMetrics_RequestsPerSec            counter    request, version
kafka_network_RequestMetrics_TotalTimeMs               histogram  request
kafka_log_Log_Size                                     gauge      topic, partition
kafka_log_Log_LogStartOffset                           gauge      topic, partition
kafka_log_Log_LogEndOffset                             gauge      topic, partition
kafka_log_Log_NumLogSegments                           gauge      topic, partition
kafka_server_ReplicaManager_PartitionCount             gauge
kafka_server_ReplicaManager_LeaderCount                gauge
kafka_server_ReplicaManager_UnderReplicatedPartitions  gauge
kafka_controller_KafkaController_ActiveControllerCount gauge
kafka_controller_KafkaController_OfflinePartitionsCount gauge
kafka_consumergroup_lag                                gauge      group, topic, partition
kafka_consumergroup_current_offset                     gauge      group, topic, partition
=====================================================  =========  =======================

What is counted, as Kafka counts it: a produce or fetch request counts once per partition
it names (Kafka marks its meters per partition in ``appendToLocalLog``/``readFromLocalLog``);
a partition answered with an error counts in ``Failed...`` too, and a topic the broker does
not have is not counted at all (a client cannot grow the series with made-up names).
``BytesInPerSec`` and ``MessagesInPerSec`` count what was appended to leader logs, the group
coordinator's own writes to ``__consumer_offsets`` included, as Kafka's do (a producer's retry
of a batch already written is not appended again, and not counted); ``BytesOutPerSec`` counts
record bytes sent to consumers (not to follower replicas, as Kafka's). Replication has its own
pair, as Kafka's: ``ReplicationBytesOutPerSec`` counts the record bytes a leader sends in answer
to replica fetches (``replica_id`` >= 0), ``ReplicationBytesInPerSec`` the record bytes a
follower's fetcher receives from its leaders (Kafka's ``ReplicaFetcherThread``, data of
partitions answered without error, a trailing partial batch included; what it appends is
those bytes up to the last whole batch). Kafka keeps these two as all-topics meters only; here
they also have per-topic series, like the others, so that the bytes one partition's new or
rebuilt replica fetched can be read (the all-topics series is Kafka's). ``RequestsPerSec``
and ``TotalTimeMs`` are measured where requests are dispatched (:mod:`tierlog.server.network`):
from the request leaving the codec to its response being queued for the socket. Consumer lag
is Burrow's and kafka-lag-exporter's ``kafka_consumergroup_lag``: the high watermark minus the
committed offset, for the groups this broker coordinates.

Cost on the request path: plain ``int`` increments in :class:`BrokerTopicStats` and
:class:`RequestStats` (no lock, no prometheus_client call); collectors read them, and the
hosted logs, replicas and groups, only when Prometheus scrapes. The increments happen on the
event loop thread; a scrape (on the HTTP server's thread) reads ints and copies of dicts, which
the GIL keeps consistent enough for monotonic counters and point-in-time gauges.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tierlog.protocol.api_versions import api_name

if TYPE_CHECKING:
    from tierlog.coordinator.group.group_coordinator import GroupCoordinator
    from tierlog.log.log_manager import LogManager
    from tierlog.server.replica_manager import ReplicaManager

__all__ = [
    "BrokerMetrics",
    "BrokerTopicStats",
    "RequestStats",
]

log = logging.getLogger(__name__)

TOPIC_PREFIX = "kafka_server_BrokerTopicMetrics_"
REQUEST_PREFIX = "kafka_network_RequestMetrics_"
LOG_PREFIX = "kafka_log_Log_"
REPLICA_MANAGER_PREFIX = "kafka_server_ReplicaManager_"
CONTROLLER_PREFIX = "kafka_controller_KafkaController_"
LAG_PREFIX = "kafka_consumergroup_"

# Slots of a topic's counter list (BrokerTopicStats): plain list indexing on the hot path.
(
    BYTES_IN,
    BYTES_OUT,
    MESSAGES_IN,
    TOTAL_PRODUCE,
    FAILED_PRODUCE,
    TOTAL_FETCH,
    FAILED_FETCH,
    REPLICATION_BYTES_IN,
    REPLICATION_BYTES_OUT,
) = range(9)
_TOPIC_METERS = (
    ("BytesInPerSec", "Bytes appended for clients."),
    ("BytesOutPerSec", "Record bytes sent to consumers."),
    ("MessagesInPerSec", "Records appended for clients."),
    ("TotalProduceRequestsPerSec", "Produce requests, counted per partition."),
    ("FailedProduceRequestsPerSec", "Produce requests answered with an error, per partition."),
    ("TotalFetchRequestsPerSec", "Fetch requests, counted per partition."),
    ("FailedFetchRequestsPerSec", "Fetch requests answered with an error, per partition."),
    ("ReplicationBytesInPerSec", "Record bytes this broker's replica fetchers received."),
    ("ReplicationBytesOutPerSec", "Record bytes sent to follower replicas."),
)

#: TotalTimeMs bucket bounds (ms); the last bucket is +Inf.
TOTAL_TIME_MS_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
                         2500.0, 5000.0, 10000.0, 30000.0)  # fmt: skip


_bisect = bisect.bisect_left


class BrokerTopicStats:
    """Kafka's ``BrokerTopicStats``: per-topic counters as plain ints (one list per topic,
    indexed by the slot constants). Not thread-safe for writers: the event loop thread
    increments; a scrape reads a copy."""

    __slots__ = ("topics",)

    def __init__(self) -> None:
        self.topics: dict[str, list[int]] = {}

    def topic(self, name: str) -> list[int]:
        """The counters of one topic (created on first use)."""
        c = self.topics.get(name)
        if c is None:
            c = self.topics[name] = [0] * len(_TOPIC_METERS)
        return c

    def produced(self, topic: str, size: int, records: int, error: bool) -> None:
        """One partition of a Produce: appended ``records`` in ``size`` bytes, or failed."""
        c = self.topics.get(topic)
        if c is None:
            c = self.topic(topic)
        c[TOTAL_PRODUCE] += 1
        if error:
            c[FAILED_PRODUCE] += 1
        else:
            c[BYTES_IN] += size
            c[MESSAGES_IN] += records

    def fetched(self, topic: str, size: int, error: bool, consumer: bool) -> None:
        """One partition of a Fetch: ``size`` record bytes answered to a consumer or, when
        not ``consumer``, to a follower replica; or an error."""
        c = self.topics.get(topic)
        if c is None:
            c = self.topic(topic)
        c[TOTAL_FETCH] += 1
        if error:
            c[FAILED_FETCH] += 1
        elif consumer:
            c[BYTES_OUT] += size
        else:
            c[REPLICATION_BYTES_OUT] += size

    def replication_bytes_in(self, topic: str, size: int) -> None:
        """One partition of a replica fetch's answer: ``size`` record bytes received from the
        leader (Kafka's ``updateReplicationBytesIn``)."""
        c = self.topics.get(topic)
        if c is None:
            c = self.topic(topic)
        c[REPLICATION_BYTES_IN] += size

    def remove_topic(self, name: str) -> None:
        """Forget a deleted topic's series (Kafka's ``removeMetrics``); the all-topics
        totals keep what it counted."""
        c = self.topics.pop(name, None)
        if c is not None:
            gone = self.topics.setdefault("", [0] * len(_TOPIC_METERS))
            for i, v in enumerate(c):
                gone[i] += v

    def snapshot(self) -> dict[str, list[int]]:
        return {name: list(c) for name, c in self.topics.copy().items()}


class _ApiStats:
    """One API's TotalTimeMs histogram (bucket counts, not cumulative; the count is their
    sum) and its requests per version."""

    __slots__ = ("buckets", "sum_ms", "versions")

    def __init__(self) -> None:
        self.buckets = [0] * (len(TOTAL_TIME_MS_BUCKETS) + 1)
        self.sum_ms = 0.0
        self.versions: dict[int, int] = {}


class RequestStats:
    """Kafka's ``RequestMetrics``: requests per (API, version) and a TotalTimeMs histogram per
    API, in plain ints. Written on the event loop thread only."""

    __slots__ = ("apis",)

    def __init__(self) -> None:
        self.apis: dict[int, _ApiStats] = {}

    def record(self, api_key: int, api_version: int, elapsed_ms: float) -> None:
        s = self.apis.get(api_key)
        if s is None:
            s = self.apis[api_key] = _ApiStats()
        s.buckets[_bisect(TOTAL_TIME_MS_BUCKETS, elapsed_ms)] += 1
        s.sum_ms += elapsed_ms
        v = s.versions
        if api_version in v:
            v[api_version] += 1
        else:
            v[api_version] = 1


# --------------------------------------------------------------------------- collectors


class _StatsCollector(Collector):
    """BrokerTopicMetrics and RequestMetrics from the plain-int stats."""

    def __init__(self, topics: BrokerTopicStats, requests: RequestStats) -> None:
        self._topics = topics
        self._requests = requests

    def describe(self) -> Iterable[Metric]:
        return ()  # no collect() at registration

    def collect(self) -> Iterator[Metric]:
        snap = self._topics.snapshot()
        totals = [0] * len(_TOPIC_METERS)
        for c in snap.values():
            for i, v in enumerate(c):
                totals[i] += v
        for i, (name, doc) in enumerate(_TOPIC_METERS):
            fam = CounterMetricFamily(TOPIC_PREFIX + name, doc, labels=["topic"])
            fam.add_sample(fam.name + "_total", {}, float(totals[i]))
            for topic, c in sorted(snap.items()):
                if topic:  # "" holds deleted topics' counts: only in the totals
                    fam.add_metric([topic], float(c[i]))
            yield fam
        per_sec = CounterMetricFamily(
            REQUEST_PREFIX + "RequestsPerSec", "Requests received.", labels=["request", "version"]
        )
        total_time = HistogramMetricFamily(
            REQUEST_PREFIX + "TotalTimeMs",
            "Time from a request's arrival to its response, in milliseconds.",
            labels=["request"],
        )
        for key, s in sorted(self._requests.apis.copy().items()):
            name = api_name(key)
            for version, n in sorted(s.versions.copy().items()):
                per_sec.add_metric([name, str(version)], float(n))
            cumulative, acc = [], 0
            for bound, n in zip(
                (*TOTAL_TIME_MS_BUCKETS, float("inf")), list(s.buckets), strict=True
            ):
                acc += n
                cumulative.append((_le(bound), float(acc)))
            total_time.add_metric([name], cumulative, sum_value=s.sum_ms)
        yield per_sec
        yield total_time


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class _BrokerStateCollector(Collector):
    """Log, ReplicaManager, KafkaController and consumer lag gauges, read at scrape time from
    the broker's parts (callables: parts may start after registration)."""

    def __init__(
        self,
        log_manager: Callable[[], LogManager | None],
        replica_manager: Callable[[], ReplicaManager | None],
        group_coordinator: Callable[[], GroupCoordinator | None],
        controller_active: Callable[[], bool],
        offline_partitions: Callable[[], int],
    ) -> None:
        self._lm = log_manager
        self._rm = replica_manager
        self._gc = group_coordinator
        self._controller_active = controller_active
        self._offline_partitions = offline_partitions

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        lm = self._lm()
        logs = lm.all_logs() if lm is not None else []
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(LOG_PREFIX + "Size", "Bytes of the local log.", labels=labels)
        start = GaugeMetricFamily(
            LOG_PREFIX + "LogStartOffset", "First offset of the log.", labels=labels
        )
        end = GaugeMetricFamily(LOG_PREFIX + "LogEndOffset", "Log end offset.", labels=labels)
        segments = GaugeMetricFamily(
            LOG_PREFIX + "NumLogSegments", "Local segments of the log.", labels=labels
        )
        hw: dict[tuple[str, int], int] = {}
        for lg in logs:
            try:
                tp = [lg.topic, str(lg.partition)]
                size.add_metric(tp, float(lg.size_in_bytes))
                start.add_metric(tp, float(lg.log_start_offset))
                end.add_metric(tp, float(lg.log_end_offset))
                segments.add_metric(tp, float(lg.number_of_segments))
                hw[(lg.topic, lg.partition)] = lg.high_watermark
            except Exception as e:  # a log closed under the scrape (deleted topic)
                log.debug("metrics: skipping a log: %s", e)
        yield from (size, start, end, segments)
        yield from self._replica_manager(lm)
        yield GaugeMetricFamily(
            CONTROLLER_PREFIX + "ActiveControllerCount",
            "1 on the active controller, else 0.",
            value=1.0 if self._controller_active() else 0.0,
        )
        yield GaugeMetricFamily(
            CONTROLLER_PREFIX + "OfflinePartitionsCount",
            "Partitions without a live leader (reported by the active controller).",
            value=float(self._offline_partitions()),
        )
        yield from self._lag(hw)

    def _replica_manager(self, lm: LogManager | None) -> Iterator[Metric]:
        rm = self._rm()
        count = leaders = under = 0
        if rm is not None and rm.cluster is not None:
            for p in rm.partitions():
                count += 1
                if p.is_leader:
                    leaders += 1
                    if len(p.isr) < len(p.assigned_replicas):
                        under += 1
        elif lm is not None:  # a single node leads every partition it has
            count = leaders = sum(t.num_partitions for t in lm.topics().values())
        for name, doc, v in (
            ("PartitionCount", "Partitions hosted by this broker.", count),
            ("LeaderCount", "Partitions this broker leads.", leaders),
            ("UnderReplicatedPartitions", "Led partitions whose ISR is short.", under),
        ):
            yield GaugeMetricFamily(REPLICA_MANAGER_PREFIX + name, doc, value=float(v))

    def _lag(self, hw: dict[tuple[str, int], int]) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        lag = GaugeMetricFamily(
            LAG_PREFIX + "lag",
            "High watermark minus the committed offset (groups this broker coordinates).",
            labels=labels,
        )
        current = GaugeMetricFamily(
            LAG_PREFIX + "current_offset", "The group's committed offset.", labels=labels
        )
        gc = self._gc()
        groups: list[Any] = []
        if gc is not None:  # classic and KIP-848 consumer groups alike
            groups = [
                *gc.group_manager.current_groups(),
                *gc.group_manager.consumer_groups.values(),
            ]
        for g in groups:
            for (topic, partition), committed in sorted(g.offsets.copy().items()):
                values = [g.group_id, topic, str(partition)]
                current.add_metric(values, float(committed.offset))
                end = hw.get((topic, partition))
                if end is not None:
                    lag.add_metric(values, float(max(end - committed.offset, 0)))
        yield lag
        yield current


# --------------------------------------------------------------------------- the endpoint


class BrokerMetrics:
    """The broker's registry, hot-path stats and ``/metrics`` server. Thread-safe for
    scrapes; the stats are written on the event loop thread only."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.topic_stats = BrokerTopicStats()
        self.request_stats = RequestStats()
        self.registry.register(_StatsCollector(self.topic_stats, self.request_stats))
        self._server: WSGIServer | None = None

    def register(self, collector: Collector) -> None:
        """Add a part's collector (the log cleaner's, ...)."""
        self.registry.register(collector)

    def watch_broker(
        self,
        log_manager: Callable[[], LogManager | None],
        replica_manager: Callable[[], ReplicaManager | None],
        group_coordinator: Callable[[], GroupCoordinator | None],
        controller_active: Callable[[], bool],
        offline_partitions: Callable[[], int],
    ) -> None:
        """Serve the gauges read from the broker's parts at scrape time."""
        self.registry.register(
            _BrokerStateCollector(
                log_manager,
                replica_manager,
                group_coordinator,
                controller_active,
                offline_partitions,
            )
        )

    def start(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``host:port`` (0: a free port) from a daemon thread; the port.

        Raises:
            OSError: the address cannot be bound (the message names it).
        """
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as e:
            raise OSError(e.errno, f"metrics.port {host}:{port}: {e.strerror}") from e
        self._server = server
        return int(server.server_address[1])

    @property
    def port(self) -> int | None:
        return None if self._server is None else int(self._server.server_address[1])

    def close(self) -> None:
        """Stop serving. Idempotent."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
