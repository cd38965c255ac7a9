"""Followers fetch from their leaders (Kafka's ``ReplicaFetcherManager``,
``ReplicaFetcherThread`` and ``AbstractFetcherThread``).

One fetcher per (leader broker, fetcher id): partitions are spread over
``num.replica.fetchers`` fetchers per leader by a hash, as Kafka does. A fetcher is an asyncio
task that sends Fetch v12 with ``replica_id`` = this broker's id, for every partition it holds:
the fetch offset is the follower's log end offset, ``current_leader_epoch`` its view of the
epoch (KIP-320) and ``last_fetched_epoch`` the epoch of its last batch (KIP-595).

What comes back, per partition:

* records: appended as they are (offsets, epochs and producer ids kept: the producer state is
  rebuilt here too, so a new leader answers an idempotent retry with the original offset);
  the follower's high watermark = min(the leader's, its own log end offset); its log start
  offset follows the leader's. The bytes received are counted per topic
  (:attr:`ReplicaFetcherManager.on_replication_bytes_in`: the broker's
  ``ReplicationBytesInPerSec``);
* ``diverging_epoch``: the follower's log has a suffix the leader does not; it truncates
  (Kafka's ``getOffsetTruncationState``, KIP-279) and fetches again, so no divergent suffix
  survives;
* FENCED_LEADER_EPOCH (this follower's epoch is older): the partition waits
  ``replica.fetch.backoff.ms``, unless the metadata moves it first (a new state re-adds it,
  at once);
* UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER (the leader has not applied the state this
  follower has: each broker learns it from its own ZooKeeper watch, a few milliseconds apart):
  the partition asks again after :data:`LEADER_CATCH_UP_BACKOFF_MS` (at most
  ``replica.fetch.backoff.ms``). Waiting the whole second there held the first acks=all write
  of a new leader back by a second after a controlled shutdown (its follower asked before
  the leader knew);
* OFFSET_OUT_OF_RANGE: below the leader's log start: start the log over at the leader's log
  start; above its end: truncate to the leader's high watermark.
* OFFSET_MOVED_TO_TIERED_STORAGE (tiered topics): the fetch offset is below the leader's
  local log. The fetcher asks the leader's earliest local offset (ListOffsets -4) and hands
  the partition to the tier state machine (tiered storage's
  ``tier_state_machine.build_remote_log_aux_state``, given by the broker), which rebuilds the
  log from remote metadata, unless the log moved on from the fetch offset meanwhile;
  fetching resumes from the log's end. A follower never fetches tiered data.

A failed connection or request backs every partition of the fetcher off and reconnects.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from tierlog.errors import ApiError

if TYPE_CHECKING:
    from tierlog.cluster.broker_client import BrokerClient
    from tierlog.cluster.partition import Partition

__all__ = [
    "LEADER_CATCH_UP_BACKOFF_MS",
    "FetcherConfig",
    "ReplicaFetcher",
    "ReplicaFetcherManager",
    "ReplicationBytesIn",
    "TierStateMachine",
    "truncation_offset",
    "whole_batches",
]

log = logging.getLogger(__name__)

FETCH_VERSION = 12
_LOG_OVERHEAD = 12  # base offset (int64) and batch length (int32)
_LENGTH = struct.Struct(">i")
_NONE = 0
_OFFSET_OUT_OF_RANGE = 1
_NOT_LEADER_OR_FOLLOWER = 6
_FENCED_LEADER_EPOCH = 74
_UNKNOWN_LEADER_EPOCH = 75
_OFFSET_MOVED_TO_TIERED_STORAGE = 109
_EARLIEST_LOCAL_TIMESTAMP = -4

#: Counts the record bytes received for one partition of a topic: (topic, bytes).
ReplicationBytesIn = Callable[[str, int], None]
#: Rebuilds a follower's log from remote storage: (partition, the leader's local log start
#: offset, the leader's log start offset, the fetch offset the leader answered 109 to);
#: returns once the log is ready to fetch again (left as it is when it no longer ended at
#: that fetch offset).
TierStateMachine = Callable[["Partition", int, int, int], Awaitable[None]]
#: How soon a partition asks again when its leader has not applied the new state yet.
LEADER_CATCH_UP_BACKOFF_MS = 50


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """The ``replica.fetch.*`` settings."""

    broker_id: int
    max_bytes: int = 1_048_576
    response_max_bytes: int = 10_485_760
    max_wait_ms: int = 500
    min_bytes: int = 1
    backoff_ms: int = 1000
    num_fetchers: int = 1
    request_timeout_ms: int = 30_000


def truncation_offset(
    partition_log: Any, leader_epoch: int, leader_end_offset: int
) -> tuple[int, bool]:
    """Where a follower truncates when the leader says its log diverges after
    (``leader_epoch``, ``leader_end_offset``); (offset, whether truncation is complete).

    Kafka's AbstractFetcherThread.getOffsetTruncationState (KIP-279): when the follower has
    the leader's epoch, truncate to the smaller end offset of that epoch; when it does not,
    truncate to the end of its own largest epoch below it and ask again.
    """
    leo = int(partition_log.log_end_offset)
    if leader_epoch < 0 or leader_end_offset < 0:
        return min(int(partition_log.high_watermark), leo), True
    follower_epoch, follower_end = partition_log.leader_epoch_cache.end_offset_for(
        leader_epoch, leo
    )
    if follower_epoch < 0:
        return min(leader_end_offset, leo), True
    if follower_epoch != leader_epoch:
        return min(follower_end, leo), False
    return min(leader_end_offset, follower_end, leo), True


def whole_batches(records: bytes | memoryview | None) -> bytes | memoryview | None:
    """``records`` without a trailing partial batch. A leader's read stops at the fetch's
    byte limits, which may cut the last batch (Kafka's FileRecords.slice): as Kafka's
    fetcher, the follower appends the whole batches and fetches the rest next time."""
    if not records:
        return records
    n = len(records)
    pos = 0
    while pos + _LOG_OVERHEAD <= n:
        (length,) = _LENGTH.unpack_from(records, pos + 8)
        end = pos + _LOG_OVERHEAD + length
        if length < 0 or end > n:
            break
        pos = end
    return records if pos == n else memoryview(records)[:pos]


class ReplicaFetcher:
    """Fetches a set of partitions from one leader broker, in a loop, until stopped."""

    def __init__(
        self,
        leader_id: int,
        fetcher_id: int,
        config: FetcherConfig,
        address: Callable[[int], tuple[str, int] | None],
        client_factory: Callable[[], BrokerClient],
        on_fetched: Callable[[Partition], None],
        tier_state_machine: TierStateMachine | None = None,
        on_replication_bytes_in: ReplicationBytesIn | None = None,
    ) -> None:
        self.leader_id = leader_id
        self._on_replication_bytes_in = on_replication_bytes_in
        self._tier_state_machine = tier_state_machine
        self._tier_tasks: set[asyncio.Task[None]] = set()
        self.fetcher_id = fetcher_id
        self._config = config
        self._address = address
        self._client_factory = client_factory
        self._on_fetched = on_fetched
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._delayed_until: dict[tuple[str, int], float] = {}
        self._changed = asyncio.Event()
        self._client: BrokerClient | None = None
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader {self.leader_id}, fetcher {self.fetcher_id})"

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=repr(self))

    async def stop(self) -> None:
        for t in list(self._tier_tasks):
            t.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self._close_client()

    def add(self, p: Partition) -> None:
        self.partitions[(p.topic, p.index)] = p
        self._delayed_until.pop((p.topic, p.index), None)
        self._changed.set()

    def remove(self, p: Partition) -> None:
        self.partitions.pop((p.topic, p.index), None)
        self._delayed_until.pop((p.topic, p.index), None)

    # ----------------------------------------------------------------- the loop

    async def _run(self) -> None:
        backoff = self._config.backoff_ms / 1000
        while True:
            ready = self._ready_partitions()
            if not ready:
                self._changed.clear()
                wait = self._next_ready_in()
                try:
                    await asyncio.wait_for(self._changed.wait(), wait)
                except TimeoutError:
                    pass
                continue
            try:
                client = await self._connect()
                request = self._fetch_request(ready)
                timeout = (self._config.max_wait_ms + self._config.request_timeout_ms) / 1000
                response = await client.request(
                    request, api_version=FETCH_VERSION, timeout_s=timeout
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:  # connection refused/reset, timeout, protocol error
                log.warning("fetch from broker %d failed: %s", self.leader_id, e)
                await self._close_client()
                self._delay(ready, backoff)
                await asyncio.sleep(backoff)
                continue
            self._process(ready, response)

    def _ready_partitions(self) -> list[Partition]:
        now = time.monotonic()
        return [
            p
            for key, p in self.partitions.items()
            if self._delayed_until.get(key, 0.0) <= now and p.leader_id == self.leader_id
        ]

    def _next_ready_in(self) -> float | None:
        if not self._delayed_until:
            return None
        return max(0.0, min(self._delayed_until.values()) - time.monotonic())

    def _delay(self, partitions: list[Partition], seconds: float) -> None:
        until = time.monotonic() + seconds
        for p in partitions:
            self._delayed_until[(p.topic, p.index)] = until

    async def _connect(self) -> BrokerClient:
        if self._client is not None and self._client.connected:
            return self._client
        await self._close_client()
        address = self._address(self.leader_id)
        if address is None:
            raise ConnectionError(f"broker {self.leader_id} is not alive")
        client = self._client_factory()
        await client.connect(address[0], address[1], timeout_s=10)
        self._client = client
        return client

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # already broken
                pass

    def _fetch_request(self, partitions: list[Partition]) -> FetchRequest:
        c = self._config
        by_topic: dict[str, list[FetchPartition]] = {}
        for p in partitions:
            lg = p.log
            latest = lg.leader_epoch_cache.latest_epoch
            by_topic.setdefault(p.topic, []).append(
                FetchPartition(
                    partition=i32(p.index),
                    current_leader_epoch=i32(p.leader_epoch),
                    fetch_offset=i64(lg.log_end_offset),
                    last_fetched_epoch=i32(latest if latest is not None else -1),
                    log_start_offset=i64(lg.log_start_offset),
                    partition_max_bytes=i32(c.max_bytes),
                )
            )
        return FetchRequest(
            replica_id=BrokerId(c.broker_id),
            max_wait=i32Timedelta.parse(timedelta(milliseconds=c.max_wait_ms)),
            min_bytes=i32(c.min_bytes),
            max_bytes=i32(c.response_max_bytes),
            isolation_level=i8(0),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=tuple(
                FetchTopic(topic=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
            forgotten_topics_data=(),
        )

    def _process(self, sent: list[Partition], response: Any) -> None:
        code = int(getattr(response.error_code, "value", response.error_code))
        backoff = self._config.backoff_ms / 1000
        if code:
            log.warning("fetch from broker %d: error %d", self.leader_id, code)
            self._delay(sent, backoff)
            return
        for t in response.responses:
            for pd in t.partitions:
                p = self.partitions.get((str(t.topic), int(pd.partition_index)))
                if p is None or p.leader_id != self.leader_id:
                    continue  # removed or moved while the fetch was out
                try:
                    self._process_partition(p, pd)
                except (ApiError, OSError, ValueError) as e:
                    log.error("follower %s: cannot apply the fetched data: %s", p, e)
                    self._delay([p], backoff)

    def _process_partition(self, p: Partition, pd: Any) -> None:
        code = int(getattr(pd.error_code, "value", pd.error_code))
        lg = p.log
        if code == _NONE:
            diverging = pd.diverging_epoch
            if diverging is not None and int(diverging.epoch) >= 0:
                offset, _complete = truncation_offset(
                    lg, int(diverging.epoch), int(diverging.end_offset)
                )
                log.info(
                    "follower %s diverges from the leader after epoch %d offset %d: "
                    "truncating to %d",
                    p, int(diverging.epoch), int(diverging.end_offset), offset,
                )  # fmt: skip
                before = (lg.log_end_offset, lg.leader_epoch_cache.latest_epoch)
                lg.truncate_to(offset)
                if (lg.log_end_offset, lg.leader_epoch_cache.latest_epoch) == before:
                    # The next fetch would be the same: back off rather than spin.
                    log.error("follower %s: truncation to %d changed nothing", p, offset)
                    self._delay([p], self._config.backoff_ms / 1000)
                return
            received = pd.records
            if received and self._on_replication_bytes_in is not None:
                self._on_replication_bytes_in(p.topic, len(received))
            records = whole_batches(received)
            if records:
                lg.append(records, assign_offsets=False, origin_client=False)
            leader_hw = int(pd.high_watermark)
            lg.update_high_watermark(min(leader_hw, lg.log_end_offset))
            leader_start = int(pd.log_start_offset)
            if leader_start > lg.log_start_offset:
                lg.maybe_increment_log_start_offset(leader_start)
            if records:
                self._on_fetched(p)
        elif code == _OFFSET_OUT_OF_RANGE:
            leader_start = int(pd.log_start_offset)
            if lg.log_end_offset < leader_start or lg.log_end_offset == 0:
                log.info("follower %s starts its log over at the leader's %d", p, leader_start)
                lg.truncate_fully_and_start_at(max(leader_start, 0))
            else:
                hw = int(pd.high_watermark)
                log.info("follower %s is ahead of the leader: truncating to %d", p, hw)
                lg.truncate_to(max(hw, 0))
        elif code in (_UNKNOWN_LEADER_EPOCH, _NOT_LEADER_OR_FOLLOWER):
            self._delay([p], min(self._config.backoff_ms, LEADER_CATCH_UP_BACKOFF_MS) / 1000)
        elif code == _FENCED_LEADER_EPOCH:
            self._delay([p], self._config.backoff_ms / 1000)
        elif code == _OFFSET_MOVED_TO_TIERED_STORAGE:
            self._start_tier_state_machine(p, int(pd.log_start_offset))
        else:
            log.warning("follower %s: fetch error %d", p, code)
            self._delay([p], self._config.backoff_ms / 1000)

    # ----------------------------------------------------------------- tiered storage

    def _start_tier_state_machine(self, p: Partition, leader_log_start: int) -> None:
        """Take ``p`` out of the fetches until its log is rebuilt from remote storage."""
        if self._tier_state_machine is None:
            log.error(
                "follower %s: the leader moved offset %d to tiered storage, and tiered storage "
                "is off on this broker (remote.log.storage.system.enable)",
                p, p.log.log_end_offset,
            )  # fmt: skip
            self._delay([p], self._config.backoff_ms / 1000)
            return
        self._delayed_until[(p.topic, p.index)] = float("inf")
        task = asyncio.create_task(
            self._build_remote_log_aux_state(p, leader_log_start, p.log.log_end_offset)
        )
        self._tier_tasks.add(task)
        task.add_done_callback(self._tier_tasks.discard)

    async def _build_remote_log_aux_state(
        self, p: Partition, leader_log_start: int, fetch_offset: int
    ) -> None:
        from kio.schema.list_offsets.v8.request import (
            ListOffsetsPartition,
            ListOffsetsRequest,
            ListOffsetsTopic,
        )

        assert self._tier_state_machine is not None
        key = (p.topic, p.index)
        backoff = self._config.backoff_ms / 1000
        try:
            client = await self._connect()
            request = ListOffsetsRequest(
                replica_id=BrokerId(self._config.broker_id),
                isolation_level=i8(0),
                topics=(
                    ListOffsetsTopic(
                        name=TopicName(p.topic),
                        partitions=(
                            ListOffsetsPartition(
                                partition_index=i32(p.index),
                                current_leader_epoch=i32(p.leader_epoch),
                                timestamp=i64(_EARLIEST_LOCAL_TIMESTAMP),
                            ),
                        ),
                    ),
                ),
            )
            response = await client.request(
                request, timeout_s=self._config.request_timeout_ms / 1000
            )
            part = response.topics[0].partitions[0]
            code = int(getattr(part.error_code, "value", part.error_code))
            if code:
                raise ApiError(f"ListOffsets(earliest local) of {p} from the leader: error {code}")
            if self.partitions.get(key) is not p or p.leader_id != self.leader_id:
                return  # moved meanwhile
            await self._tier_state_machine(p, int(part.offset), leader_log_start, fetch_offset)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # remote storage or the metadata not there yet; the leader gone
            log.warning("follower %s: cannot rebuild its log from remote storage yet: %s", p, e)
            if key in self.partitions:
                self._delay([p], backoff)
            self._changed.set()
            return
        if key in self.partitions:
            self._delayed_until.pop(key, None)
        self._changed.set()


class ReplicaFetcherManager:
    """The fetchers of this broker: one per (leader, fetcher id), created on demand, stopped
    when they hold no partition."""

    def __init__(
        self,
        config: FetcherConfig,
        address: Callable[[int], tuple[str, int] | None],
        client_factory: Callable[[], BrokerClient],
        on_fetched: Callable[[Partition], None],
    ) -> None:
        self._config = config
        self._address = address
        self._client_factory = client_factory
        self._on_fetched = on_fetched
        #: Set by the broker when tiered storage is on (before any partition is added).
        self.tier_state_machine: TierStateMachine | None = None
        #: Set by the broker when it has metrics: counts the record bytes its fetchers receive.
        self.on_replication_bytes_in: ReplicationBytesIn | None = None
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._stopping: set[asyncio.Future[None]] = set()
        self._where: dict[tuple[str, int], tuple[int, int]] = {}

    def _fetcher_id(self, p: Partition) -> int:
        key = f"{p.topic}-{p.index}".encode()
        return zlib.crc32(key) % max(1, self._config.num_fetchers)

    def add(self, p: Partition) -> None:
        """Fetch ``p`` from its current leader (moving it from any other fetcher)."""
        self.remove(p)
        if p.leader_id < 0:
            return
        key = (p.leader_id, self._fetcher_id(p))
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                key[0], key[1], self._config, self._address, self._client_factory,
                self._on_fetched, self.tier_state_machine, self._replication_bytes_in,
            )  # fmt: skip
            self._fetchers[key] = fetcher
            fetcher.start()
        fetcher.add(p)
        self._where[(p.topic, p.index)] = key

    def _replication_bytes_in(self, topic: str, size: int) -> None:
        count = self.on_replication_bytes_in
        if count is not None:
            count(topic, size)

    def remove(self, p: Partition) -> None:
        key = self._where.pop((p.topic, p.index), None)
        if key is None:
            return
        fetcher = self._fetchers.get(key)
        if fetcher is not None:
            fetcher.remove(p)
            if not fetcher.partitions:
                del self._fetchers[key]
                stopping = asyncio.ensure_future(fetcher.stop())
                self._stopping.add(stopping)
                stopping.add_done_callback(self._stopping.discard)

    async def shutdown(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._where.clear()
        for f in fetchers:
            await f.stop()
