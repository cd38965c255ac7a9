"""Tiered storage metrics under Kafka's names, in a Prometheus registry.

Kafka exposes these as JMX meters and gauges of ``kafka.server:type=BrokerTopicMetrics``
(tagged ``topic``/``partition``) and ``kafka.log.remote:type=RemoteLogManager``. Here each
Kafka meter ``XPerSec`` is a Prometheus counter named ``kafka_server_BrokerTopicMetrics_XPerSec``
(exposed as ``..._total``; the per-second rate is ``rate(...[1m])``) and each gauge keeps its
Kafka name. Every series carries ``topic`` and ``partition`` labels; sum over them for Kafka's
all-topics view.

=================================  =======  ==============================================
name                               type     meaning
=================================  =======  ==============================================
RemoteCopyBytesPerSec              counter  bytes of segments copied (COPY_SEGMENT_FINISHED)
RemoteFetchBytesPerSec             counter  bytes returned by remote reads
RemoteCopyRequestsPerSec           counter  segment copies attempted
RemoteFetchRequestsPerSec          counter  remote reads attempted
RemoteDeleteRequestsPerSec         counter  remote segment deletions attempted
RemoteCopyErrorsPerSec             counter  failed copies
RemoteFetchErrorsPerSec            counter  failed remote reads
RemoteDeleteErrorsPerSec           counter  failed deletions
RemoteLogMetadataCount             gauge    remote segments known (any state but deleted)
RemoteLogSizeBytes                 gauge    bytes of COPY_SEGMENT_FINISHED segments
RemoteCopyLagBytes                 gauge    bytes of rolled local segments not yet copied
RemoteCopyLagSegments              gauge    number of those segments
RemoteDeleteLagBytes               gauge    bytes of remote segments waiting to be deleted
RemoteDeleteLagSegments            gauge    number of those segments
=================================  =======  ==============================================

Plus, without partition labels (``kafka_log_remote_RemoteLogManager_*``):
``RemoteLogReaderTaskQueueSize`` (gauge) and ``RemoteLogReaderFetchRateAndTimeMs`` (histogram
of remote read latency in ms).

The broker registers these on its own registry, served on ``metrics.port`` with its other
metrics (``tierlog.server.broker_metrics``); :func:`start_metrics_server` serves a registry on
its own (tests, tools). Thread-safe (prometheus_client is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from tierlog.tiered.remote_log_segment_metadata import TopicIdPartition

TOPIC_PREFIX = "kafka_server_BrokerTopicMetrics_"
RLM_PREFIX = "kafka_log_remote_RemoteLogManager_"
_LABELS = ("topic", "partition")

_COUNTERS = {
    "copy_bytes": ("RemoteCopyBytesPerSec", "Bytes copied to remote storage."),
    "fetch_bytes": ("RemoteFetchBytesPerSec", "Bytes read from remote storage."),
    "copy_requests": ("RemoteCopyRequestsPerSec", "Segment copies to remote storage."),
    "fetch_requests": ("RemoteFetchRequestsPerSec", "Reads from remote storage."),
    "delete_requests": ("RemoteDeleteRequestsPerSec", "Remote segment deletions."),
    "copy_errors": ("RemoteCopyErrorsPerSec", "Failed segment copies."),
    "fetch_errors": ("RemoteFetchErrorsPerSec", "Failed remote reads."),
    "delete_errors": ("RemoteDeleteErrorsPerSec", "Failed remote segment deletions."),
}
_GAUGES = {
    "metadata_count": ("RemoteLogMetadataCount", "Remote segments known for the partition."),
    "remote_log_size": ("RemoteLogSizeBytes", "Bytes of the partition in remote storage."),
    "copy_lag_bytes": ("RemoteCopyLagBytes", "Bytes of rolled segments not yet copied."),
    "copy_lag_segments": ("RemoteCopyLagSegments", "Rolled segments not yet copied."),
    "delete_lag_bytes": ("RemoteDeleteLagBytes", "Bytes of remote segments to delete."),
    "delete_lag_segments": ("RemoteDeleteLagSegments", "Remote segments to delete."),
}
_FETCH_MS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


@dataclass(frozen=True, slots=True)
class PartitionMetrics:
    """The label-bound series of one partition (cheap to use on hot paths)."""

    copy_bytes: Counter
    fetch_bytes: Counter
    copy_requests: Counter
    fetch_requests: Counter
    delete_requests: Counter
    copy_errors: Counter
    fetch_errors: Counter
    delete_errors: Counter
    metadata_count: Gauge
    remote_log_size: Gauge
    copy_lag_bytes: Gauge
    copy_lag_segments: Gauge
    delete_lag_bytes: Gauge
    delete_lag_segments: Gauge


class RemoteStorageMetrics:
    """Kafka's tiered storage metrics in a :class:`CollectorRegistry` (a new one by default,
    so several brokers in one process -- tests -- do not collide)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._counters = {
            key: Counter(TOPIC_PREFIX + name, doc, _LABELS, registry=self.registry)
            for key, (name, doc) in _COUNTERS.items()
        }
        self._gauges = {
            key: Gauge(TOPIC_PREFIX + name, doc, _LABELS, registry=self.registry)
            for key, (name, doc) in _GAUGES.items()
        }
        self.reader_task_queue_size = Gauge(
            RLM_PREFIX + "RemoteLogReaderTaskQueueSize",
            "Remote reads queued or running.",
            registry=self.registry,
        )
        self.reader_fetch_time_ms = Histogram(
            RLM_PREFIX + "RemoteLogReaderFetchRateAndTimeMs",
            "Latency of remote reads in milliseconds.",
            buckets=_FETCH_MS_BUCKETS,
            registry=self.registry,
        )

    @staticmethod
    def _labels(tp: TopicIdPartition) -> tuple[str, str]:
        return tp.topic, str(tp.partition)

    def partition(self, tp: TopicIdPartition) -> PartitionMetrics:
        """The series of one partition (created on first use)."""
        labels = self._labels(tp)
        children: dict[str, Any] = {key: c.labels(*labels) for key, c in self._counters.items()}
        children.update({key: g.labels(*labels) for key, g in self._gauges.items()})
        return PartitionMetrics(**children)

    def remove_partition(self, tp: TopicIdPartition) -> None:
        """Drop every series of a partition (it moved away or was deleted)."""
        labels = self._labels(tp)
        for metric in (*self._counters.values(), *self._gauges.values()):
            try:
                metric.remove(*labels)
            except KeyError:
                pass


class MetricsServer:
    """A running ``/metrics`` HTTP endpoint; :meth:`close` stops it."""

    def __init__(self, server: WSGIServer) -> None:
        self._server = server

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start_metrics_server(
    port: int, host: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Serve ``registry`` (e.g. ``RemoteStorageMetrics().registry``) in Prometheus' text format
    on ``http://host:port/metrics`` from a daemon thread. ``port`` 0 picks a free port.

    Raises:
        OSError: the address cannot be bound.
    """
    server, _thread = start_http_server(
        port, addr=host, registry=registry if registry is not None else CollectorRegistry()
    )
    return MetricsServer(server)


__all__ = [
    "MetricsServer",
    "PartitionMetrics",
    "RemoteStorageMetrics",
    "start_metrics_server",
]
