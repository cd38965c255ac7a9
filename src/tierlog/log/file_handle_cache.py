"""A bounded set of open file descriptors for every segment file of the broker.

Kafka keeps one descriptor per segment file open for as long as the segment exists, and maps
every index (Kafka's ``LazyIndex`` only delays the first open). A broker with 100,000
partitions would then need 300,000 descriptors; this machine allows 20,000. Here each
``.log`` descriptor (:class:`~tierlog.log.file_records.FileRecords`) and each index mapping
(:class:`~tierlog.log.abstract_index.AbstractIndex`; CPython's ``mmap`` keeps a descriptor of
its own) is a :class:`CachedHandle` in one cache of at most
``log.max.open.files`` entries. A handle past the budget is closed and reopened transparently
on its next use, from the file's current path.

Recency is tracked without a lock on the hot path (CLOCK: a use sets a flag, eviction gives a
flagged handle a second chance). Handles in use are never closed: a user holds the handle's
``lock`` (indexes: their remap lock) or counts itself in ``users`` (file records) for as long
as it touches the descriptor, and eviction only *tries* those (``acquire(blocking=False)``),
skipping a busy handle. Lock order: a handle's lock, then the cache's; eviction takes the
cache's lock and then only tries handle locks, so the two never wait on each other.

The budget is a soft one: when every handle is busy the cache grows past it rather than fail a
read, and shrinks back as handles are released.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict

log = logging.getLogger(__name__)

#: The budget until the broker configures one (tests, tools).
DEFAULT_MAX_OPEN_FILES = 10_000


class CachedHandle(ABC):
    """An open OS resource (a descriptor, a mapping) the cache may close when idle.

    A use sets ``referenced`` (a plain store, no lock: the hot path of every read and append);
    eviction gives a referenced handle a second chance (the CLOCK approximation of LRU)."""

    __slots__ = ("__weakref__", "referenced")

    def __init__(self) -> None:
        self.referenced = False

    @abstractmethod
    def try_release(self) -> bool:
        """Close the resource unless it is in use right now; True when it was closed (or was
        already). Must not block."""


class FileHandleCache:
    """The process's open segment files, oldest first. Thread-safe."""

    def __init__(self, max_open: int = DEFAULT_MAX_OPEN_FILES) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be positive, got {max_open}")
        self._max_open = max_open
        self._lock = threading.Lock()
        self._lru: OrderedDict[int, CachedHandle] = OrderedDict()
        self.evictions = 0

    @property
    def max_open(self) -> int:
        return self._max_open

    def set_max_open(self, max_open: int) -> None:
        """Change the budget (the broker sets ``log.max.open.files`` at startup)."""
        if max_open < 1:
            raise ValueError(f"max_open must be positive, got {max_open}")
        with self._lock:
            self._max_open = max_open
            self._evict_over_budget(None)

    def __len__(self) -> int:
        return len(self._lru)

    def opened(self, handle: CachedHandle) -> None:
        """``handle`` was just opened (most recently used); closes idle ones over budget.
        Call with the handle's own lock held: it is skipped by eviction then."""
        with self._lock:
            lru = self._lru
            lru[id(handle)] = handle
            lru.move_to_end(id(handle))
            if len(lru) > self._max_open:
                self._evict_over_budget(handle)

    def closed(self, handle: CachedHandle) -> None:
        """``handle`` was closed by its owner (or must never be evicted again)."""
        with self._lock:
            self._lru.pop(id(handle), None)

    def forget(self, handle: CachedHandle) -> None:
        """:meth:`closed` for a finalizer, which the garbage collector may run on a thread
        that holds this cache's lock (in the middle of an eviction): it never waits. Left
        behind, the entry of an already closed handle is dropped by the next eviction
        (``try_release`` of a closed handle succeeds)."""
        if self._lock.acquire(blocking=False):
            try:
                self._lru.pop(id(handle), None)
            finally:
                self._lock.release()

    def _evict_over_budget(self, keep: CachedHandle | None) -> None:
        """Close idle handles from the oldest on until within budget: a handle used since the
        last sweep is moved to the young end instead (second chance), a busy one is skipped.
        At most two passes: when everything is busy the cache stays over budget for now."""
        lru = self._lru
        excess = len(lru) - self._max_open
        for _ in range(2):
            if excess <= 0:
                return
            victims: list[int] = []
            spared: list[int] = []
            for key, handle in lru.items():  # oldest first; try_release never calls back here
                if len(victims) >= excess:
                    break
                if handle is keep:
                    continue
                if handle.referenced:
                    handle.referenced = False
                    spared.append(key)
                elif handle.try_release():
                    victims.append(key)
            for key in victims:
                del lru[key]
            for key in spared:
                lru.move_to_end(key)
            self.evictions += len(victims)
            excess -= len(victims)


_default = FileHandleCache()


def file_handle_cache() -> FileHandleCache:
    """The process-wide cache every segment file registers with."""
    return _default
