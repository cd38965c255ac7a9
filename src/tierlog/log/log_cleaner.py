"""Kafka's ``LogCleaner``: the threads that compact ``cleanup.policy=compact`` logs.

Each thread asks :class:`~tierlog.log.log_cleaner_manager.LogCleanerManager` for the dirtiest
log, runs one :class:`~tierlog.log.cleaner.Cleaner` round over it (see :mod:`.cleaner` for what
a round does and how its swap is crash-safe) and checkpoints where it stopped.

Threads: ``log.cleaner.threads`` daemon threads, each with its own offset map (the dedupe
buffer divided among them) and its own I/O buffers; ``log.cleaner.io.max.bytes.per.second``
throttles them all together; an idle thread waits ``log.cleaner.backoff.ms``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tierlog.errors import LogCleaningAbortedError
from tierlog.log.cleaner import Cleaner, CleanerStats
from tierlog.log.log import Log
from tierlog.log.log_cleaner_manager import LogCleanerManager
from tierlog.log.log_segment import wall_clock_ms
from tierlog.log.offset_map import SkimpyOffsetMap
from tierlog.log.throttler import Throttler

__all__ = ["Cleaner", "CleanerConfig", "CleanerStats", "LogCleaner", "Throttler"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (Kafka's ``CleanerConfig``), Kafka's defaults."""

    num_threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    max_message_size: int = 32 * 1024 * 1024
    max_io_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000
    enable_cleaner: bool = True


class LogCleaner:
    """The cleaner threads of a broker (Kafka's ``LogCleaner``). Thread-safe; call
    :meth:`startup` then :meth:`shutdown` (idempotent)."""

    def __init__(
        self,
        config: CleanerConfig,
        log_dirs: Iterable[Path],
        logs: Callable[[], Mapping[TopicPartition, Log]],
        *,
        time_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.cleaner_manager = LogCleanerManager(log_dirs, logs, time_ms=time_ms)
        self._time_ms = time_ms
        self._stopping = threading.Event()
        self._wakeup = threading.Event()
        self._threads: list[threading.Thread] = []
        self.throttler = Throttler(config.max_io_bytes_per_second, sleep=self._stopping.wait)
        self._rounds = 0
        self._rounds_cond = threading.Condition()
        #: Per thread, the statistics of its last finished round (Kafka's ``lastStats``).
        self._last_stats: list[CleanerStats | None] = []
        self._dead_threads = 0

    def startup(self) -> None:
        log.info("starting the log cleaner with %d threads", self.config.num_threads)
        self._stopping.clear()
        self._last_stats = [None] * self.config.num_threads
        for i in range(self.config.num_threads):
            t = threading.Thread(
                target=self._run,
                args=(self._new_cleaner(), i),
                name=f"kafka-log-cleaner-thread-{i}",
                daemon=True,
            )
            self._threads.append(t)
            t.start()

    def shutdown(self) -> None:
        """Stop the threads; a clean in progress is aborted (its log stays as it was)."""
        self._stopping.set()
        self._wakeup.set()
        for t in self._threads:
            t.join()
        self._threads = []

    def reconfigure(self, config: CleanerConfig) -> None:
        """Take new settings (Kafka's ``reconfigure``, a dynamic broker config changed): the
        running threads stop (a clean in progress is aborted; its log stays as it was) and
        the new number of threads starts with the new buffers, throttle and backoff."""
        running = bool(self._threads)
        if running:
            self.shutdown()
        self.config = config
        self.throttler = Throttler(config.max_io_bytes_per_second, sleep=self._stopping.wait)
        log.info("log cleaner reconfigured: %s", config)
        if running:
            self.startup()

    def wakeup(self) -> None:
        """Look for work now instead of after the backoff (tests, config changes)."""
        self._wakeup.set()

    @property
    def rounds(self) -> int:
        """Grab attempts finished by all threads (tests wait for it to pass a value)."""
        return self._rounds

    def await_rounds(self, n: int, timeout: float) -> bool:
        """Wait until :attr:`rounds` reaches ``n``; False on timeout."""
        with self._rounds_cond:
            return self._rounds_cond.wait_for(lambda: self._rounds >= n, timeout)

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Stop a clean of ``tp`` in progress and wait for it (topic deletion)."""
        self.cleaner_manager.abort_cleaning(tp)

    def _new_cleaner(self) -> Cleaner:
        c = self.config
        memory = min(c.dedupe_buffer_size // c.num_threads, _INT32_MAX)
        return Cleaner(
            SkimpyOffsetMap(memory),
            io_buffer_size=max(c.io_buffer_size // c.num_threads // 2, 64 * 1024),
            max_io_buffer_size=c.max_message_size,
            dup_buffer_load_factor=c.dedupe_buffer_load_factor,
            throttler=self.throttler,
            check_done=self._check_done,
            time_ms=self._time_ms,
        )

    def _check_done(self, tp: TopicPartition) -> None:
        if self._stopping.is_set():
            raise LogCleaningAbortedError("the log cleaner is shutting down")
        self.cleaner_manager.check_cleaning_aborted(tp)

    def last_stats(self) -> list[CleanerStats | None]:
        """Each thread's last finished round (None: none yet); for the metrics."""
        return list(self._last_stats)

    def dead_thread_count(self) -> int:
        """Cleaner threads that died (Kafka's ``DeadThreadCount``)."""
        return self._dead_threads

    def _run(self, cleaner: Cleaner, index: int = 0) -> None:
        try:
            self._loop(cleaner, index)
        except BaseException:
            self._dead_threads += 1
            raise

    def _loop(self, cleaner: Cleaner, index: int) -> None:
        while not self._stopping.is_set():
            try:
                cleaned = self.try_clean_filthiest_log(cleaner)
            except Exception:  # keep the thread alive; the next round retries
                log.exception("log cleaner round failed")
                cleaned = False
            if cleaner.last_stats is not None and index < len(self._last_stats):
                self._last_stats[index] = cleaner.last_stats
            with self._rounds_cond:
                self._rounds += 1
                self._rounds_cond.notify_all()
            if not cleaned:
                self._wakeup.wait(self.config.backoff_ms / 1000)
                self._wakeup.clear()

    def try_clean_filthiest_log(self, cleaner: Cleaner) -> bool:
        """Clean the dirtiest log, if any is due; True when one was cleaned."""
        manager = self.cleaner_manager
        cleanable = manager.grab_filthiest_compacted_log()
        if cleanable is None:
            return False
        tp = cleanable.topic_partition
        end_offset = cleanable.first_dirty_offset
        try:
            end_offset, cleaner.last_stats = cleaner.clean(cleanable)
        except LogCleaningAbortedError as e:
            log.info("cleaning of %s-%d aborted: %s", tp[0], tp[1], e)
        except OSError as e:
            log.error("cleaning of %s-%d failed: %s", tp[0], tp[1], e)
        except Exception:
            log.exception("cleaning of %s-%d failed; it is now uncleanable", tp[0], tp[1])
            manager.mark_partition_uncleanable(tp)
        finally:
            manager.done_cleaning(tp, cleanable.log.dir.parent, end_offset)
        return True
