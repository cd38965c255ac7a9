"""``__remote_log_metadata`` of a cluster, as the :class:`~tierlog.tiered.MetadataPublisher` of
the topic-based RemoteLogMetadataManager (Kafka's ``ProducerManager`` / ``ConsumerManager`` of
``TopicBasedRemoteLogMetadataManager``).

In a cluster the topic is replicated like any other (``remote.log.metadata.topic.replication
.factor`` replicas, led anywhere), so a broker reaches a metadata partition through its leader,
as Kafka's metadata manager does with its own producer and consumer:

* **publish**: Produce with acks=all to the partition's leader, over the inter-broker listener
  (this broker included: one path whoever leads). The call returns once the event is in every
  in-sync replica, so the remote log manager may delete a local segment once
  COPY_SEGMENT_FINISHED is published, whichever broker dies next. NOT_LEADER_OR_FOLLOWER, no
  leader yet, NOT_ENOUGH_REPLICAS and timeouts are retried with backoff until
  ``timeout_s``; then :class:`~tierlog.errors.RemoteStorageError` (the copy task retries). A
  retried publish may leave the event twice in the topic: the metadata manager skips an event
  that does not apply (a repeated state transition), as it skips any record it cannot apply.
* **read_from**: Fetch as a consumer (replica id -1) from the leader: committed events only
  (up to the high watermark), so no broker ever applies an event a failover could take back.

The methods block: they are called from the remote log manager's threads and the
``tiered-admin`` thread, and run the requests on the broker's event loop. Calling them on the
event loop is a bug (it would wait for itself) and raises RuntimeError.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from tierlog.errors import ApiError, RemoteStorageError
from tierlog.records.default_records import build_batch, iter_records
from tierlog.tiered.remote_log_metadata_manager import REMOTE_LOG_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from tierlog.cluster.broker_client import BrokerClient
    from tierlog.cluster.metadata_cache import MetadataCache
    from tierlog.cluster.zk_admin import ZkAdminManager

__all__ = ["ClusterMetadataPublisher", "create_metadata_topic_when_possible"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Errors after which the same request may succeed later (a leader moving, an ISR healing).
_RETRIABLE = frozenset({
    3,  # UNKNOWN_TOPIC_OR_PARTITION (the topic is being created)
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    7,  # REQUEST_TIMED_OUT
    19,  # NOT_ENOUGH_REPLICAS
    20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
})  # fmt: skip
_FETCH_PARTITION_BYTES = 1 << 20


def _code(value: Any) -> int:
    return int(getattr(value, "value", value))


class ClusterMetadataPublisher:
    """Publishes to and reads ``__remote_log_metadata`` through each partition's leader.

    Args:
        leader_of: the current leader of a metadata partition (-1: none), read on the loop.
        address_of: a live broker's inter-broker ``(host, port)``, read on the loop.
        client_factory: a new, unconnected broker client.
        loop: the broker's event loop, where the requests run.
        timeout_s: how long one publish or one read keeps retrying.
        time_ms: the clock for record timestamps.
    """

    def __init__(
        self,
        leader_of: Callable[[int], int],
        address_of: Callable[[int], tuple[str, int] | None],
        client_factory: Callable[[], BrokerClient],
        loop: asyncio.AbstractEventLoop,
        *,
        timeout_s: float = 30.0,
        retry_backoff_s: float = 0.1,
        time_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._leader_of = leader_of
        self._address_of = address_of
        self._client_factory = client_factory
        self._loop = loop
        self._timeout_s = timeout_s
        self._backoff_s = retry_backoff_s
        self._time_ms = time_ms
        #: One connection per leader (requests pipeline on it), made on the loop.
        self._clients: dict[int, BrokerClient] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._closed = False

    # ----------------------------------------------------------------- MetadataPublisher

    def publish(self, metadata_partition: int, value: bytes) -> int:
        """Append one event to the metadata partition, acknowledged by its ISR; its offset.

        Raises:
            RemoteStorageError: no leader accepted it within the timeout.
        """
        batch = build_batch([(self._time_ms(), None, value)])
        return self._call(self._publish(metadata_partition, batch))

    def read_from(self, metadata_partition: int, offset: int) -> Iterator[tuple[int, bytes]]:
        """``(offset, value)`` of every committed event from ``offset`` to the leader's high
        watermark at the time of the last read.

        Raises:
            RemoteStorageError: the leader could not be read within the timeout.
        """
        position = offset
        while True:
            records, high_watermark, log_start = self._call(
                self._fetch(metadata_partition, position)
            )
            if position < log_start:  # deleted below us (the topic never expires: a bug)
                raise RemoteStorageError(
                    f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition} starts at "
                    f"{log_start}, after the requested offset {position}"
                )
            advanced = False
            for header, batch_records in iter_records(records):
                for r in batch_records:
                    if r.offset < position:
                        continue
                    advanced = True
                    position = r.offset + 1
                    if r.value is not None:
                        yield r.offset, bytes(r.value)
                position = max(position, header.last_offset + 1)
            if position >= high_watermark or not advanced:
                return

    def close(self) -> None:
        """Close the connections (blocking; idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close_clients(), self._loop).result(10)
        except Exception as e:  # the loop stopped meanwhile
            log.debug("closing the metadata publisher's connections: %s", e)

    # ----------------------------------------------------------------- on the loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coro.close()
            raise RuntimeError("ClusterMetadataPublisher blocks: call it from a thread")
        if self._closed:
            coro.close()
            raise RemoteStorageError("the remote log metadata publisher is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(self._timeout_s + 5)
        except TimeoutError as e:
            future.cancel()
            raise RemoteStorageError(
                f"{REMOTE_LOG_METADATA_TOPIC_NAME}: no answer within {self._timeout_s:.0f}s"
            ) from e

    async def _client(self, broker_id: int) -> BrokerClient:
        client = self._clients.get(broker_id)
        if client is not None and client.connected:
            return client
        lock = self._connecting.setdefault(broker_id, asyncio.Lock())
        async with lock:
            client = self._clients.get(broker_id)
            if client is not None and client.connected:
                return client
            address = self._address_of(broker_id)
            if address is None:
                raise ConnectionError(f"broker {broker_id} is not alive")
            client = self._client_factory()
            await client.connect(address[0], address[1], timeout_s=10)
            self._clients[broker_id] = client
            return client

    async def _close_clients(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            try:
                await c.close()
            except Exception:  # already broken
                pass

    async def _with_leader(
        self, metadata_partition: int, what: str, attempt: Callable[[BrokerClient], Any]
    ) -> Any:
        """Run ``attempt`` against the partition's leader until it returns a result (not
        None) or the deadline passes; retriable failures back off and try again."""
        where = f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition}"
        deadline = time.monotonic() + self._timeout_s
        last = "no leader"
        while True:
            leader = self._leader_of(metadata_partition)
            if leader >= 0:
                try:
                    client = await self._client(leader)
                    result = await attempt(client)
                    if result is not None:
                        return result
                    last = f"retriable error from broker {leader}"
                except ApiError as e:
                    if e.error_code not in _RETRIABLE:
                        raise RemoteStorageError(f"{what} {where}: {e}") from e
                    last = f"broker {leader}: {e}"
                except (ConnectionError, OSError) as e:
                    last = f"broker {leader}: {e}"
                    stale = self._clients.pop(leader, None)
                    if stale is not None:
                        await stale.close()
            if time.monotonic() >= deadline:
                raise RemoteStorageError(f"{what} {where} failed within the timeout: {last}")
            await asyncio.sleep(self._backoff_s)

    async def _publish(self, metadata_partition: int, batch: bytes) -> int:
        request = ProduceRequest(
            acks=i16(-1),
            timeout=i32Timedelta.parse(timedelta(seconds=min(self._timeout_s, 30))),
            topic_data=(
                TopicProduceData(
                    name=TopicName(REMOTE_LOG_METADATA_TOPIC_NAME),
                    partition_data=(
                        PartitionProduceData(
                            index=i32(metadata_partition), records=Records.parse(batch)
                        ),
                    ),
                ),
            ),
        )

        async def attempt(client: BrokerClient) -> int | None:
            response = await client.request(request, timeout_s=self._timeout_s)
            p = response.responses[0].partition_responses[0]
            code = _code(p.error_code)
            if code in _RETRIABLE:
                return None
            if code:
                raise RemoteStorageError(
                    f"publishing to {REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition}: "
                    f"error {code} {getattr(p, 'error_message', None) or ''}".rstrip()
                )
            return int(p.base_offset)

        result: int = await self._with_leader(metadata_partition, "publishing to", attempt)
        return result

    async def _fetch(self, metadata_partition: int, offset: int) -> tuple[bytes, int, int]:
        request = FetchRequest(
            replica_id=BrokerId(-1),
            max_wait=i32Timedelta.parse(timedelta(0)),
            min_bytes=i32(0),
            max_bytes=i32(_FETCH_PARTITION_BYTES),
            isolation_level=i8(0),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(
                FetchTopic(
                    topic=TopicName(REMOTE_LOG_METADATA_TOPIC_NAME),
                    partitions=(
                        FetchPartition(
                            partition=i32(metadata_partition),
                            current_leader_epoch=i32(-1),
                            fetch_offset=i64(offset),
                            last_fetched_epoch=i32(-1),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(_FETCH_PARTITION_BYTES),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )

        async def attempt(client: BrokerClient) -> tuple[bytes, int, int] | None:
            response = await client.request(request, api_version=12, timeout_s=self._timeout_s)
            if _code(response.error_code) in _RETRIABLE:
                return None
            p = response.responses[0].partitions[0]
            code = _code(p.error_code)
            if code in _RETRIABLE:
                return None
            if code:
                raise RemoteStorageError(
                    f"reading {REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition} at "
                    f"{offset}: error {code}"
                )
            return bytes(p.records or b""), int(p.high_watermark), int(p.log_start_offset)

        result: tuple[bytes, int, int] = await self._with_leader(
            metadata_partition, "reading", attempt
        )
        return result


async def create_metadata_topic_when_possible(
    admin: ZkAdminManager,
    metadata: MetadataCache,
    num_partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    *,
    interval_s: float = 1.0,
) -> None:
    """Create ``__remote_log_metadata`` in the cluster once ``replication_factor`` brokers
    are alive (Kafka's metadata manager retries its creation the same way); returns when the
    topic exists (created here or by another broker)."""
    from tierlog.cluster.zk_admin import NewClusterTopic

    name = REMOTE_LOG_METADATA_TOPIC_NAME
    waiting_logged = False
    while metadata.topic(name) is None:
        alive = len(metadata.alive_broker_ids())
        if alive >= replication_factor:
            topic = NewClusterTopic(name, num_partitions, replication_factor, configs)
            (result,) = await admin.create_topics([topic], validate_only=False, timeout_ms=0)
            if isinstance(result, ApiError):
                log.info("creating %s: %s", name, result)
            else:
                log.info(
                    "created %s: %d partitions of %d replicas",
                    name, num_partitions, replication_factor,
                )  # fmt: skip
        elif not waiting_logged:
            log.warning(
                "tiered storage waits for %s: remote.log.metadata.topic.replication.factor is "
                "%d and %d brokers are alive",
                name, replication_factor, alive,
            )  # fmt: skip
            waiting_logged = True
        await asyncio.sleep(interval_s)
