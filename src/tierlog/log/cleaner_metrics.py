"""The log cleaner's metrics under Kafka's names, as a Prometheus collector.

Kafka's gauges of ``kafka.log:type=LogCleaner`` and ``kafka.log:type=LogCleanerManager``
(dashes become underscores, as Prometheus names need; the prefix says which MBean)::

    kafka_log_LogCleaner_max_buffer_utilization_percent   largest offset map fill of the
                                                          threads' last rounds, in %
    kafka_log_LogCleaner_cleaner_recopy_percent           bytes written / bytes read of the
                                                          threads' last rounds, averaged, in %
    kafka_log_LogCleaner_max_clean_time_secs              longest last round of a thread
    kafka_log_LogCleaner_DeadThreadCount                  cleaner threads that died
    kafka_log_LogCleanerManager_max_dirty_percent         cleanable ratio of the dirtiest log
                                                          at the last look for work, in %
    kafka_log_LogCleanerManager_time_since_last_run_ms    since the cleaner last looked for work
    kafka_log_LogCleanerManager_uncleanable_partitions_count  per ``logDirectory``
    kafka_log_LogCleanerManager_uncleanable_bytes         per ``logDirectory``

Values are read at each scrape from the running :class:`~tierlog.log.log_cleaner.LogCleaner`
(none while the cleaner is not running). :func:`register_cleaner_metrics` adds the collector
to a registry -- today the one the tiered storage metrics endpoint serves (``metrics.port``).
Thread-safe (reads only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from tierlog.log.log_cleaner import LogCleaner

__all__ = ["CLEANER_PREFIX", "MANAGER_PREFIX", "LogCleanerCollector", "register_cleaner_metrics"]

CLEANER_PREFIX = "kafka_log_LogCleaner_"
MANAGER_PREFIX = "kafka_log_LogCleanerManager_"


class LogCleanerCollector(Collector):
    """Kafka's cleaner gauges of whatever cleaner ``cleaner()`` returns at scrape time."""

    def __init__(self, cleaner: Callable[[], LogCleaner | None]) -> None:
        self._cleaner = cleaner

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked collector: names are known only at collect time

    def collect(self) -> Iterator[Metric]:
        c = self._cleaner()
        if c is None:
            return
        stats = [s for s in c.last_stats() if s is not None]
        yield _gauge(
            CLEANER_PREFIX + "max_buffer_utilization_percent",
            "Largest offset map utilization of the cleaner threads' last rounds, in percent.",
            int(100 * max((s.buffer_utilization for s in stats), default=0.0)),
        )
        recopy = sum(s.bytes_written / max(s.bytes_read, 1) for s in stats)
        yield _gauge(
            CLEANER_PREFIX + "cleaner_recopy_percent",
            "Bytes written per byte read by the threads' last rounds, averaged, in percent.",
            int(100 * recopy / max(c.config.num_threads, 1)),
        )
        yield _gauge(
            CLEANER_PREFIX + "max_clean_time_secs",
            "Longest last round of a cleaner thread, in seconds.",
            int(max((s.elapsed_seconds for s in stats), default=0.0)),
        )
        yield _gauge(
            CLEANER_PREFIX + "DeadThreadCount",
            "Cleaner threads that died.",
            c.dead_thread_count(),
        )
        manager = c.cleaner_manager
        yield _gauge(
            MANAGER_PREFIX + "max_dirty_percent",
            "Cleanable ratio of the dirtiest compacted log at the last look for work, percent.",
            int(100 * manager.dirtiest_log_cleanable_ratio),
        )
        yield _gauge(
            MANAGER_PREFIX + "time_since_last_run_ms",
            "Milliseconds since the cleaner last looked for a log to clean.",
            manager.time_since_last_run_ms(),
        )
        count = GaugeMetricFamily(
            MANAGER_PREFIX + "uncleanable_partitions_count",
            "Partitions the cleaner gave up on (an unexpected error), per log directory.",
            labels=["logDirectory"],
        )
        size = GaugeMetricFamily(
            MANAGER_PREFIX + "uncleanable_bytes",
            "Bytes of the partitions the cleaner gave up on, per log directory.",
            labels=["logDirectory"],
        )
        for log_dir, (n, b) in sorted(manager.uncleanable_by_log_dir().items()):
            count.add_metric([str(log_dir)], n)
            size.add_metric([str(log_dir)], b)
        yield count
        yield size


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def register_cleaner_metrics(
    registry: CollectorRegistry, cleaner: Callable[[], LogCleaner | None]
) -> LogCleanerCollector:
    """Add the cleaner's gauges to ``registry``; returns the collector (unregister it with
    ``registry.unregister``)."""
    collector = LogCleanerCollector(cleaner)
    registry.register(collector)
    return collector
