"""The log cleaner's keys (Kafka's ``CleanerConfig``): ``log.cleaner.*``, and the
:class:`~tierlog.log.log_cleaner.CleanerConfig` built from them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tierlog.server.config_def import BrokerConfigDef
from tierlog.server.config_def import at_least as _min
from tierlog.server.config_def import define as _d

if TYPE_CHECKING:
    from tierlog.log.log_cleaner import CleanerConfig

__all__ = ["CLEANER_CONFIGS", "build_cleaner_config"]

# fmt: off
CLEANER_CONFIGS: tuple[BrokerConfigDef, ...] = (
    _d("log.cleaner.enable", "boolean", True, None,
       "Run the log cleaner; without it compacted topics are not compacted."),
    _d("log.cleaner.threads", "int", 1, _min(0), "Threads of the log cleaner."),
    _d("log.cleaner.dedupe.buffer.size", "long", 134_217_728, _min(1),
       "Offset map memory over all cleaner threads (24 bytes a key, as Kafka counts it)."),
    _d("log.cleaner.io.buffer.size", "int", 524_288, _min(0),
       "I/O buffer memory over all cleaner threads."),
    _d("log.cleaner.io.buffer.load.factor", "double", 0.9, None,
       "Fill factor of the offset map before a round stops mapping."),
    _d("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, None,
       "Throttle on the cleaner's read plus write bytes per second."),
    _d("log.cleaner.backoff.ms", "long", 15_000, _min(0),
       "How long an idle cleaner thread waits before looking for dirty logs again."),
)
# fmt: on


def build_cleaner_config(get: Callable[[str], Any]) -> CleanerConfig:
    """The ``log.cleaner.*`` settings (Kafka's ``LogCleaner.cleanerConfig``); ``get`` reads a
    broker key's typed value."""
    from tierlog.log.log_cleaner import CleanerConfig

    threads = int(get("log.cleaner.threads"))
    return CleanerConfig(
        num_threads=max(threads, 1),
        dedupe_buffer_size=int(get("log.cleaner.dedupe.buffer.size")),
        dedupe_buffer_load_factor=float(get("log.cleaner.io.buffer.load.factor")),
        io_buffer_size=int(get("log.cleaner.io.buffer.size")),
        max_message_size=int(get("message.max.bytes")),
        max_io_bytes_per_second=float(get("log.cleaner.io.max.bytes.per.second")),
        backoff_ms=int(get("log.cleaner.backoff.ms")),
        enable_cleaner=bool(get("log.cleaner.enable")) and threads > 0,
    )
