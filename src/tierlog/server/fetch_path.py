"""The fetch path of the ReplicaManager (Kafka's ``ReplicaManager.fetchMessages`` and
``readFromLog``, and ``DelayedFetch``): the read of one partition (consumers up to the high
watermark or the last stable offset, followers up to the log end offset), leadership, epoch
fencing (KIP-320) and divergence (KIP-595) checks, a follower's fetch state, the aborted
transactions of a read_committed read, and the long-poll.

Fetch long-poll (Kafka's ``DelayedFetch``): a fetch that does not reach ``min_bytes`` parks
one future on every partition it reads; the next append to any of them completes the future
and the fetch reads again, until ``min_bytes`` is reached or ``max_wait_ms`` expires. Appends
pay one list check per partition for this. Remote reads (tiered storage) are
:mod:`tierlog.server.delayed_remote_fetch`'s.

The public functions are the bodies of the ReplicaManager's methods of the same names, which
say what they do. Runs on the event loop thread only (not thread-safe), as the ReplicaManager.

Friend of :class:`~tierlog.server.replica_manager.ReplicaManager` (its partitions, clock,
metrics and remote reads): one job, kept out of that module's size.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierlog.cluster.partition import Partition
from tierlog.errors import (
    ApiError,
    KafkaStorageError,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    UnknownTopicOrPartition,
)
from tierlog.log.transaction_index import AbortedTxn

if TYPE_CHECKING:
    from tierlog.server.replica_manager import ReplicaManager
    from tierlog.tiered.remote_log_reader import RemoteStorageFetchInfo

__all__ = [
    "READ_UNCOMMITTED",
    "READ_COMMITTED",
    "FetchPartitionResult",
    "FetchPartitionRequest",
    "read_partition",
    "fetch_once",
    "fetch_at_once",
    "fetch",
]

log = logging.getLogger(__name__)


#: Fetch isolation levels (FetchRequest.isolation_level).
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@dataclass(slots=True)
class FetchPartitionResult:
    """What a Fetch response says about one partition."""

    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | None = None
    #: Set while the records must still be read from remote storage.
    remote: RemoteStorageFetchInfo | None = None
    #: For a follower whose log diverged: (epoch, end offset) of the leader's log (KIP-595).
    diverging_epoch: tuple[int, int] | None = None
    #: read_committed: the aborted transactions of the range read (None: read_uncommitted).
    aborted_transactions: list[AbortedTxn] | None = None

    @property
    def size(self) -> int:
        return len(self.records) if self.records is not None else 0


@dataclass(slots=True)
class FetchPartitionRequest:
    """One partition of a Fetch, resolved to a topic name."""

    topic: str | None  # None: unknown topic id
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    error_code: int = 0  # set when the topic could not be resolved (UNKNOWN_TOPIC_ID)
    #: The fetcher's view of the leader epoch (KIP-320); -1: not checked.
    current_leader_epoch: int = -1
    #: A follower's epoch of its last batch (KIP-595); -1: no divergence check.
    last_fetched_epoch: int = -1


#: What :meth:`ReplicaManager.fetch_once` returns.
_FetchRead = tuple[list[FetchPartitionResult], int, bool, list[Partition]]


def read_partition(
    rm: ReplicaManager,
    p: Partition,
    fetch_offset: int,
    max_bytes: int,
    *,
    min_one_message: bool,
    isolation_level: int,
    replica_id: int = -1,
) -> FetchPartitionResult:
    """The body of :meth:`ReplicaManager.read_partition`."""
    lg = p.log
    hw = lg.high_watermark
    if replica_id >= 0:
        upper = lg.log_end_offset
    else:
        upper = lg.last_stable_offset if isolation_level == READ_COMMITTED else hw
    result = FetchPartitionResult(0, hw, lg.last_stable_offset, lg.log_start_offset)
    if upper <= fetch_offset <= lg.log_end_offset:
        result.records = b""
        return result
    if _plan_remote_read(
        rm, p, result, fetch_offset, max_bytes, min_one_message, replica_id, isolation_level
    ):
        return result
    try:
        data = lg.read(
            fetch_offset,
            max_bytes,
            max_offset=upper,
            min_one_message=min_one_message,
            # A follower keeps whole batches only (Kafka's fetcher too): a cut one would be
            # sent now and again on its next fetch.
            whole_batches=replica_id >= 0,
        )
    except OffsetOutOfRange:
        # The local segment may have been deleted (tiered) since the check above.
        if _plan_remote_read(
            rm, p, result, fetch_offset, max_bytes, min_one_message, replica_id, isolation_level
        ):
            return result
        result.error_code = OffsetOutOfRange.error_code
        result.records = b""
        return result
    except ApiError as e:
        # Never OFFSET_MOVED_TO_TIERED_STORAGE (109) to consumers: it is for followers,
        # and kafkajs treats unknown codes as fatal.
        code = e.error_code
        if code == OffsetMovedToTieredStorage.error_code:
            code = KafkaStorageError.error_code
        result.error_code = code
        result.records = b""
        return result
    except OSError as e:
        log.error("read of %s-%d failed: %s", p.topic, p.index, e)
        result.error_code = KafkaStorageError.error_code
        result.records = b""
        return result
    result.records = data.records
    if isolation_level == READ_COMMITTED and replica_id < 0:
        try:
            result.aborted_transactions = (
                _aborted_transactions(lg, fetch_offset, data.records, upper) if data.records else []
            )
        except (ApiError, OSError) as e:
            log.error("reading the transaction index of %s-%d failed: %s", p.topic, p.index, e)
            result.error_code = KafkaStorageError.error_code
            result.records = b""
    return result


def _check_fetch(
    rm: ReplicaManager, p: Partition, r: FetchPartitionRequest, replica_id: int
) -> FetchPartitionResult | None:
    """Leadership, epoch fencing (KIP-320) and, for a follower, divergence (KIP-595) and
    its fetch state; a result to answer at once, or None to read."""
    code = p.leader_epoch_error(r.current_leader_epoch)
    if code:
        return FetchPartitionResult(code)
    if replica_id < 0:
        return None
    lg = p.log
    if r.last_fetched_epoch >= 0:
        end_epoch, end_offset = lg.leader_epoch_cache.end_offset_for(
            r.last_fetched_epoch, lg.log_end_offset
        )
        diverged = end_epoch < r.last_fetched_epoch or end_offset < r.fetch_offset
        if end_epoch >= 0 and diverged:
            result = FetchPartitionResult(
                0, lg.high_watermark, lg.last_stable_offset, lg.log_start_offset, b""
            )
            result.diverging_epoch = (end_epoch, end_offset)
            return result
    joins = p.update_follower_fetch_state(replica_id, r.fetch_offset, rm._time_ms())
    if joins and rm.cluster is not None:
        p.isr_change_pending = True
        rm.cluster.expand_isr(p, replica_id)
    return None


def _plan_remote_read(
    rm: ReplicaManager,
    p: Partition,
    result: FetchPartitionResult,
    fetch_offset: int,
    max_bytes: int,
    min_one_message: bool,
    replica_id: int,
    isolation_level: int = 0,
) -> bool:
    remote = rm._remote
    return remote is not None and remote.plan(
        p, result, fetch_offset, max_bytes, min_one_message, replica_id, isolation_level
    )


async def _answer_remote(
    rm: ReplicaManager, results: list[FetchPartitionResult], max_wait_ms: int
) -> list[FetchPartitionResult]:
    assert rm._remote is not None  # only partitions with remote data get here
    return await rm._remote.answer(results, max_wait_ms)


def fetch_once(
    rm: ReplicaManager,
    requests: list[FetchPartitionRequest],
    *,
    max_bytes: int,
    isolation_level: int,
    replica_id: int = -1,
) -> tuple[list[FetchPartitionResult], int, bool, list[Partition]]:
    """The body of :meth:`ReplicaManager.fetch_once`."""
    results: list[FetchPartitionResult] = []
    partitions: list[Partition] = []
    remaining = max_bytes
    total = 0
    min_one = True
    error = False
    for r in requests:
        if r.topic is None:
            results.append(FetchPartitionResult(r.error_code or 100))
            error = True
            continue
        try:
            p = rm.get_partition(r.topic, r.partition)
        except KafkaStorageError as e:
            results.append(FetchPartitionResult(e.error_code))
            error = True
            continue
        if p is None:
            results.append(FetchPartitionResult(rm.not_here_error(r.topic, r.partition)))
            error = True
            continue
        answer = _check_fetch(rm, p, r, replica_id)
        if answer is not None:
            results.append(answer)
            error = True
            continue
        limit = min(r.partition_max_bytes, remaining)
        partitions.append(p)
        if limit <= 0 and not min_one:
            res = read_partition(
                rm,
                p,
                r.fetch_offset,
                0,
                min_one_message=False,
                isolation_level=isolation_level,
                replica_id=replica_id,
            )
            res.records = b""
            res.remote = None
        else:
            res = read_partition(
                rm,
                p,
                r.fetch_offset,
                max(limit, 0),
                min_one_message=min_one,
                isolation_level=isolation_level,
                replica_id=replica_id,
            )
        size = res.size
        if size:
            min_one = False
            remaining -= size
            total += size
        if res.error_code:
            error = True
        results.append(res)
    return results, total, error, partitions


def fetch_at_once(
    rm: ReplicaManager,
    requests: list[FetchPartitionRequest],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    replica_id: int = -1,
) -> list[FetchPartitionResult] | Awaitable[list[FetchPartitionResult]]:
    """The body of :meth:`ReplicaManager.fetch_at_once`."""
    first = fetch_once(
        rm, requests, max_bytes=max_bytes, isolation_level=isolation_level, replica_id=replica_id
    )
    results, total, error, _parts = first
    if not any(r.remote is not None for r in results) and (
        max_wait_ms <= 0 or total >= max(min_bytes, 1) or error or not requests
    ):
        _count_fetched(rm, requests, results, replica_id)
        return results
    return fetch(
        rm,
        requests,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        replica_id=replica_id,
        first=first,
    )


async def fetch(
    rm: ReplicaManager,
    requests: list[FetchPartitionRequest],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    replica_id: int = -1,
    first: _FetchRead | None = None,
) -> list[FetchPartitionResult]:
    """The body of :meth:`ReplicaManager.fetch`."""
    results = await _fetch(
        rm,
        requests,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        replica_id=replica_id,
        first=first,
    )
    _count_fetched(rm, requests, results, replica_id)
    return results


def _count_fetched(
    rm: ReplicaManager,
    requests: list[FetchPartitionRequest],
    results: list[FetchPartitionResult],
    replica_id: int,
) -> None:
    stats = rm.topic_stats
    if stats is not None:
        unknown = UnknownTopicOrPartition.error_code
        for r, res in zip(requests, results, strict=False):
            if r.topic is not None and res.error_code != unknown:
                stats.fetched(r.topic, res.size, bool(res.error_code), replica_id < 0)


async def _fetch(
    rm: ReplicaManager,
    requests: list[FetchPartitionRequest],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    replica_id: int = -1,
    first: _FetchRead | None = None,
) -> list[FetchPartitionResult]:
    """Kafka's fetchMessages: answer at once when ``min_bytes`` are there (or on an
    error, or after remote reads), else wait for appends to the requested partitions up
    to ``max_wait_ms``."""
    if first is not None and any(r.remote is not None for r in first[0]):
        return await _answer_remote(rm, first[0], max_wait_ms)
    # Read (again, after fetch_at_once's first read): the read and the parking on the
    # partitions below must be one step of this task, or an append in between (another
    # connection's produce, before this task first ran) would wake nobody.
    results, total, error, parts = fetch_once(
        rm, requests, max_bytes=max_bytes, isolation_level=isolation_level, replica_id=replica_id
    )
    if any(r.remote is not None for r in results):
        return await _answer_remote(rm, results, max_wait_ms)
    if max_wait_ms <= 0 or total >= max(min_bytes, 1) or error or not requests:
        return results
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + max_wait_ms / 1000.0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return results
        fut: asyncio.Future[None] = loop.create_future()
        for p in parts:
            p.add_waiter(fut)
        try:
            await asyncio.wait_for(fut, remaining)
        except TimeoutError:
            pass
        finally:
            for p in parts:
                p.remove_waiter(fut)
        results, total, error, parts = fetch_once(
            rm,
            requests,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            replica_id=replica_id,
        )
        if any(r.remote is not None for r in results):
            return await _answer_remote(rm, results, max_wait_ms)
        if total >= max(min_bytes, 1) or error:
            return results


def _aborted_transactions(
    lg: Any, fetch_offset: int, records: bytes | memoryview, upper: int
) -> list[AbortedTxn]:
    """The aborted transactions of a read_committed read that returned ``records``: those
    overlapping [fetch offset, end of the segment read) (a read skips segments left with
    only empty batches by the cleaner, so the segment is the first batch's)."""
    first = int.from_bytes(records[:8], "big", signed=True) if len(records) >= 8 else -1
    read_offset = max(fetch_offset, first)
    bound = lg.fetch_upper_bound_offset(read_offset, upper)
    return list(lg.collect_aborted_transactions(fetch_offset, bound))
