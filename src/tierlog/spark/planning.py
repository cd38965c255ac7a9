"""Driver-side planning: partitions, offset ranges and input partitions (no Spark imports).

A read is planned in four steps, all over the Kafka protocol (:mod:`.fetch_client`):

1. **Partitions**: ``subscribe`` / ``subscribePattern`` / ``assign`` against Metadata
   (leaders, topic ids).
2. **Offsets**: :func:`resolve_offsets` turns an :class:`~.options.OffsetSpec` into one offset
   per partition with ListOffsets (earliest = the log start offset, remote data included;
   latest = the high watermark, or the last stable offset with read_committed; a timestamp =
   the first offset whose timestamp is at least it).
3. **Ranges** (:func:`plan_ranges`): ``[start, end)`` per partition; with direct remote reads
   each is cut at the boundaries of the readable remote segments (one :class:`OffsetRange`
   per remote segment in range, then the rest — the local tail — read through the broker).
4. **Splitting** (:func:`split_ranges`): ``minPartitions`` and ``maxRecordsPerPartition`` cut
   ranges further, so one huge partition still reads in parallel (Spark's
   ``KafkaOffsetRangeCalculator``: pieces proportional to each range's size).

Each :class:`OffsetRange` becomes one Spark input partition.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from tierlog.errors import ConfigError, DataLossError
from tierlog.spark.fetch_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    KafkaClient,
    TopicInfo,
    is_retriable,
)
from tierlog.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SourceOptions,
    TopicPartition,
    client_security_of,
)
from tierlog.spark.remote import (
    RemoteSegmentLister,
    aborted_transactions_in,
    parse_transaction_index,
    remote_storage,
)
from tierlog.tiered import RemoteLogSegmentMetadata
from tierlog.tiered.storage import IndexType

__all__ = [
    "OffsetRange",
    "RangeConstraints",
    "PartitionLayout",
    "Planner",
    "data_loss_message",
    "pack_ranges",
    "plan_ranges",
    "split_ranges",
]

T = TypeVar("T")


def data_loss_message(what: str) -> str:
    return (
        f"{what}. Some data may have been lost because they are not available in Kafka any "
        "more; either the data was aged out by Kafka or the topic may have been deleted before "
        "all the data in the topic was processed. If you don't want your query to fail on such "
        'cases, set the source option "failOnDataLoss" to "false".'
    )


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition: one Spark input partition.

    ``segment`` is set when the range lies in that remote segment and is read straight from
    remote storage; ``aborted`` lists the aborted transactions overlapping it (remote reads;
    broker reads get them from Fetch).
    """

    topic: str
    partition: int
    start: int
    end: int
    leader: str = ""
    """``host:port`` of the partition leader at planning time (a hint; "" = unknown)."""
    segment: RemoteLogSegmentMetadata | None = None
    aborted: tuple[tuple[int, int], ...] = ()

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class PartitionLayout:
    """What the driver knows of one partition when it plans."""

    log_start: int
    latest: int
    leader: str
    remote_segments: tuple[RemoteLogSegmentMetadata, ...] = ()


# ------------------------------------------------------------------------------ constraints


class RangeConstraints:
    """What pushed-down filters say about ``partition``, ``offset`` and ``timestamp``.

    ``partitions`` None = any; offsets within ``[min_offset, max_offset]`` (inclusive);
    timestamps at least ``min_timestamp`` (ms, None = any). Picklable value object.
    """

    def __init__(self) -> None:
        self.partitions: frozenset[int] | None = None
        self.min_offset = 0
        self.max_offset = 2**63 - 1
        self.min_timestamp: int | None = None

    def only_partitions(self, values: Sequence[int]) -> None:
        chosen = frozenset(values)
        self.partitions = chosen if self.partitions is None else self.partitions & chosen

    def offsets_between(self, lo: int | None, hi: int | None) -> None:
        if lo is not None:
            self.min_offset = max(self.min_offset, lo)
        if hi is not None:
            self.max_offset = min(self.max_offset, hi)

    def at_least_timestamp(self, ms: int) -> None:
        self.min_timestamp = ms if self.min_timestamp is None else max(self.min_timestamp, ms)

    def keep(self, tp: TopicPartition) -> bool:
        return self.partitions is None or tp[1] in self.partitions

    def narrow(self, start: int, end: int) -> tuple[int, int]:
        """``[start, end)`` intersected with the offset constraints (possibly empty)."""
        s = max(start, self.min_offset)
        e = min(end, self.max_offset + 1)
        return (s, max(s, e))

    def __repr__(self) -> str:
        return (
            f"RangeConstraints(partitions={sorted(self.partitions) if self.partitions else None}, "
            f"offsets=[{self.min_offset}, {self.max_offset}], min_timestamp={self.min_timestamp})"
        )


# ------------------------------------------------------------------------------ planning


def plan_ranges(
    bounds: Mapping[TopicPartition, tuple[int, int]],
    layouts: Mapping[TopicPartition, PartitionLayout],
    *,
    aborted: Mapping[TopicPartition, Sequence[tuple[int, int, int]]] | None = None,
) -> list[OffsetRange]:
    """One range per partition ``[start, end)``, cut at remote segment boundaries.

    ``aborted`` holds ``(producer_id, first, last)`` of the aborted transactions known from
    remote transaction indexes, per partition.
    """
    out: list[OffsetRange] = []
    for tp in sorted(bounds):
        start, end = bounds[tp]
        if end <= start:
            continue
        layout = layouts[tp]
        txns = aborted.get(tp, ()) if aborted else ()
        pos = start
        for seg in layout.remote_segments:
            if seg.end_offset < pos:
                continue
            if seg.start_offset >= end:
                break
            if seg.start_offset > pos:
                # A hole before this segment (never tiered, or still local): the broker.
                out.append(OffsetRange(tp[0], tp[1], pos, seg.start_offset, layout.leader))
                pos = seg.start_offset
            stop = min(end, seg.end_offset + 1)
            out.append(
                OffsetRange(
                    tp[0],
                    tp[1],
                    pos,
                    stop,
                    layout.leader,
                    segment=seg,
                    aborted=tuple(aborted_transactions_in(txns, pos, stop)),
                )
            )
            pos = stop
        if pos < end:
            out.append(OffsetRange(tp[0], tp[1], pos, end, layout.leader))
    return out


def split_ranges(
    ranges: Sequence[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Cut ranges so there are at least ``min_partitions`` of them (pieces proportional to
    each range's size, as Spark's ``KafkaOffsetRangeCalculator``, but rounded up so the
    minimum really is one) and none holds more than ``max_records_per_partition`` offsets.
    Order is kept; pieces of one range stay adjacent.
    """
    out = list(ranges)
    if max_records_per_partition:
        cut: list[OffsetRange] = []
        for r in out:
            cut += _split(r, math.ceil(r.size / max_records_per_partition))
        out = cut
    if min_partitions and len(out) < min_partitions:
        total = sum(r.size for r in out)
        if total > 0:
            cut = []
            for r in out:
                cut += _split(r, max(1, math.ceil(r.size * min_partitions / total)))
            out = cut
    return out


def pack_ranges(ranges: Sequence[OffsetRange], max_bytes: int) -> list[tuple[OffsetRange, ...]]:
    """Consecutive ranges of one partition packed into groups of at most ``max_bytes``
    (estimated), one group per Spark input partition; order is kept.

    Why: each Spark task of a Python data source costs about 0.1 s of a task slot on top of
    its reading (measured with an empty reader), so many small remote segments read one per
    task waste most of it (Spark's file sources pack small files the same way, up to
    ``spark.sql.files.maxPartitionBytes``). A range's size is its remote segment's bytes in
    proportion to the offsets read; a range read through the broker is estimated at its
    partition's average bytes per offset in remote storage, and stays alone when the partition
    has no remote range. A range larger than ``max_bytes`` is a group of its own;
    ``max_bytes <= 0`` packs nothing.
    """
    per_offset: dict[TopicPartition, float] = {}
    totals: dict[TopicPartition, list[int]] = {}
    for r in ranges:
        if r.segment is not None:
            t = totals.setdefault(r.topic_partition, [0, 0])
            t[0] += r.segment.segment_size_in_bytes
            t[1] += r.segment.end_offset - r.segment.start_offset + 1
    for tp, (size, offsets) in totals.items():
        per_offset[tp] = size / max(1, offsets)

    def estimate(r: OffsetRange) -> float:
        if r.segment is not None:
            seg = r.segment
            return seg.segment_size_in_bytes * r.size / (seg.end_offset - seg.start_offset + 1)
        rate = per_offset.get(r.topic_partition)
        return math.inf if rate is None else rate * r.size

    groups: list[tuple[OffsetRange, ...]] = []
    current: list[OffsetRange] = []
    current_bytes = 0.0
    for r in ranges:
        estimated = estimate(r)
        if (
            current
            and current[-1].topic_partition == r.topic_partition
            and current_bytes + estimated <= max_bytes
        ):
            current.append(r)
            current_bytes += estimated
            continue
        if current:
            groups.append(tuple(current))
        current, current_bytes = [r], estimated
    if current:
        groups.append(tuple(current))
    return groups


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = max(1, min(parts, r.size))
    if parts == 1:
        return [r]
    step = r.size / parts
    bounds = [r.start + round(i * step) for i in range(parts)] + [r.end]
    return [replace(r, start=a, end=b) for a, b in itertools.pairwise(bounds) if b > a]


# ------------------------------------------------------------------------------ the driver


class Planner:
    """The driver's view of the cluster for one query: partitions, offsets, remote segments.

    Holds a :class:`KafkaClient`; :meth:`close` it. Not thread-safe.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.client = KafkaClient(
            options.bootstrap_servers,
            client_id=options.client_id,
            timeout_s=options.request_timeout_ms / 1000,
            recv_buffer=options.receive_buffer_bytes,
            security=client_security_of(options.security),
        )
        self.isolation = READ_COMMITTED if options.read_committed else READ_UNCOMMITTED
        self.topics: dict[str, TopicInfo] = {}
        self._remote: RemoteSegmentLister | None = None

    def close(self) -> None:
        if self._remote is not None:
            self._remote.close()
        self.client.close()

    def __enter__(self) -> Planner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        """Spark's ``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs`` around the
        driver's requests (on connection errors and retriable Kafka errors). As Spark's Kafka
        consumer retries inside each of those attempts until its API timeout, a retriable
        error is also retried for ``request.timeout.ms`` since the first failure: a leader's
        death takes the ZooKeeper session timeout to fail over."""
        attempts = self.options.fetch_offset_num_retries + 1
        give_up_at = None
        attempt = 0
        while True:
            try:
                return fn()
            except Exception as e:
                now = time.monotonic()
                if give_up_at is None:
                    give_up_at = now + self.options.request_timeout_ms / 1000
                attempt += 1
                if not is_retriable(e) or (attempt >= attempts and now >= give_up_at):
                    raise
                self.client.close()
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)

    # -------------------------------------------------------------- partitions

    def partitions(self) -> list[TopicPartition]:
        """The partitions the query reads, now (sorted)."""
        o = self.options
        if o.strategy == "subscribePattern":
            self.topics = self._retry("metadata", lambda: self.client.metadata(None))
        else:
            names = (
                sorted(o.topics)
                if o.strategy == "subscribe"
                else sorted({t for t, _ in o.assigned})
            )
            self.topics = self._retry("metadata", lambda: self.client.metadata(names))
        if o.strategy == "assign":
            missing = [
                f"{t}-{p}"
                for t, p in o.assigned
                if t not in self.topics or p not in {x.partition for x in self.topics[t].partitions}
            ]
            if missing:
                raise ConfigError("assign", f"these partitions do not exist: {missing}")
            return list(o.assigned)
        out = []
        for name, info in self.topics.items():
            if o.matches(name, info.is_internal or name.startswith("__")):
                out += [(name, p.partition) for p in info.partitions]
        return sorted(out)

    def leader_address(self, tp: TopicPartition) -> str:
        info = self.topics.get(tp[0])
        if info is not None:
            for p in info.partitions:
                if p.partition == tp[1]:
                    address = self.client.broker_address(p.leader)
                    if address is not None:
                        return str(address)
        return ""

    # -------------------------------------------------------------- offsets

    def list_offsets(
        self, tps: Sequence[TopicPartition], timestamp: int | Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        if not tps:
            return {}
        if isinstance(timestamp, int):
            request = {tp: timestamp for tp in tps}
        else:
            request = {tp: timestamp[tp] for tp in tps}
        return self._retry(
            "list offsets",
            lambda: self.client.list_offsets(request, isolation_level=self.isolation),
        )

    def earliest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: o for tp, (o, _) in self.list_offsets(tps, EARLIEST_TIMESTAMP).items()}

    def latest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: o for tp, (o, _) in self.list_offsets(tps, LATEST_TIMESTAMP).items()}

    def resolve_offsets(
        self,
        spec: OffsetSpec,
        tps: Sequence[TopicPartition],
        *,
        starting: bool,
        option: str,
        require_all: bool = True,
    ) -> dict[TopicPartition, int]:
        """One offset per partition for ``spec`` (see the module docstring).

        Raises:
            ConfigError: per-partition JSON that does not name exactly the read partitions,
                or a starting timestamp past every record with strategy ``error``.
        """
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind in ("offsets", "timestamps") and require_all:
            named, have = set(spec.offsets), set(tps)
            if named != have:
                raise ConfigError(
                    option,
                    f"If {option} contains specific offsets, you must specify all "
                    "TopicPartitions. Use -1 for latest, -2 for earliest. "
                    f"Specified: {sorted(named)} Assigned: {sorted(have)}",
                )
        if spec.kind == "offsets":
            out = {tp: spec.offsets.get(tp, EARLIEST) for tp in tps}
            special_earliest = [tp for tp, o in out.items() if o == EARLIEST]
            special_latest = [tp for tp, o in out.items() if o == LATEST]
            out.update(self.earliest(special_earliest))
            out.update(self.latest(special_latest))
            return out
        # by timestamp
        if spec.kind == "timestamp":
            stamps = {tp: spec.timestamp for tp in tps}
        else:
            stamps = {tp: spec.offsets[tp] for tp in tps if tp in spec.offsets}
        found = self.list_offsets(list(stamps), stamps)
        out = {}
        no_match = []
        for tp in stamps:
            offset = found[tp][0]
            if offset < 0:
                no_match.append(tp)
            else:
                out[tp] = offset
        if no_match:
            if starting and spec.strategy == "error":
                raise ConfigError(
                    option,
                    "no record has a timestamp at or after the starting timestamp in "
                    + ", ".join(f"{t}-{p} ({stamps[(t, p)]})" for t, p in no_match)
                    + '; set startingOffsetsByTimestampStrategy to "latest" to start at the '
                    "end instead",
                )
            out.update(self.latest(no_match))
        return out

    # -------------------------------------------------------------- layouts

    def layouts(
        self, tps: Sequence[TopicPartition], *, with_remote: bool
    ) -> dict[TopicPartition, PartitionLayout]:
        """Log start, latest offset, leader and (optionally) remote segments per partition."""
        earliest = self.earliest(tps)
        latest = self.latest(tps)
        remote: dict[TopicPartition, list[RemoteLogSegmentMetadata]] = {}
        if with_remote and tps:
            if self._remote is None:
                self._remote = RemoteSegmentLister(self.client)
            lister = self._remote
            remote = self._retry(
                "remote log metadata", lambda: lister.segments(self.topics, list(tps))
            )
        return {
            tp: PartitionLayout(
                log_start=earliest[tp],
                latest=latest[tp],
                leader=self.leader_address(tp),
                remote_segments=tuple(remote.get(tp, ())),
            )
            for tp in tps
        }

    def check_bounds(
        self,
        bounds: dict[TopicPartition, tuple[int, int]],
        layouts: Mapping[TopicPartition, PartitionLayout],
        *,
        ending_given: bool,
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Data loss (a start below the log start) and impossible ends.

        Raises:
            DataLossError: with ``failOnDataLoss``, a start offset that was deleted.
            ConfigError: an ending offset beyond the latest offset, or below the start.
        """
        out = {}
        for tp, (start, end) in bounds.items():
            layout = layouts[tp]
            if start < layout.log_start:
                if self.options.fail_on_data_loss:
                    raise DataLossError(
                        data_loss_message(
                            f"Cannot fetch offset {start} of {tp[0]}-{tp[1]}: the log starts at "
                            f"{layout.log_start}"
                        )
                    )
                start = layout.log_start
            if ending_given and end > layout.latest:
                raise ConfigError(
                    "endingOffsets",
                    f"ending offset {end} of {tp[0]}-{tp[1]} is beyond its latest offset "
                    f"{layout.latest}",
                )
            if end < start:
                if ending_given and self.options.fail_on_data_loss:
                    raise ConfigError(
                        "endingOffsets",
                        f"the ending offset {end} of {tp[0]}-{tp[1]} is before its starting "
                        f"offset {start}",
                    )
                end = start
            out[tp] = (start, end)
        return out

    def aborted_transactions(
        self, layouts: Mapping[TopicPartition, PartitionLayout]
    ) -> dict[TopicPartition, list[tuple[int, int, int]]]:
        """``(producer_id, first, last)`` of the aborted transactions that overlap the remote
        segments, for their direct reads: those of the segments' transaction indexes (a
        segment whose metadata says ``txn_idx_empty`` costs no request), and those that start
        in remote storage but whose ABORT marker is in the local log -- only the broker knows
        them: a read_committed Fetch of one batch at the first offset after the remote
        segments returns every aborted transaction overlapping it (its ``last`` is unknown
        and given as that offset, which is all a remote range needs to know)."""
        if not self.options.read_committed or not self.options.remote:
            return {}
        rsm = remote_storage(self.options.remote)
        out: dict[TopicPartition, list[tuple[int, int, int]]] = {}
        for tp, layout in layouts.items():
            if not layout.remote_segments:
                continue
            txns = out.setdefault(tp, [])
            for seg in layout.remote_segments:
                if seg.txn_idx_empty:
                    continue
                data = rsm.fetch_indexes(seg, (IndexType.TRANSACTION,)).get(
                    IndexType.TRANSACTION, b""
                )
                txns.extend(parse_transaction_index(data))
            after = max(seg.end_offset for seg in layout.remote_segments) + 1
            if after < layout.latest:
                fetched = self._retry(
                    "fetch aborted transactions",
                    lambda tp=tp, after=after: self.client.fetch(  # type: ignore[misc]
                        tp[0],
                        tp[1],
                        after,
                        partition_max_bytes=1,
                        max_wait_ms=0,
                        isolation_level=READ_COMMITTED,
                    ),
                )
                txns.extend(
                    (pid, first, after)
                    for pid, first in fetched.aborted_transactions
                    if first < after
                )
        return out

    def plan(
        self,
        bounds: dict[TopicPartition, tuple[int, int]],
        layouts: Mapping[TopicPartition, PartitionLayout],
    ) -> list[OffsetRange]:
        ranges = plan_ranges(bounds, layouts, aborted=self.aborted_transactions(layouts))
        return split_ranges(
            ranges,
            min_partitions=self.options.min_partitions,
            max_records_per_partition=self.options.max_records_per_partition,
        )

    def plan_batch(self, constraints: RangeConstraints | None = None) -> list[OffsetRange]:
        """The input partitions of a batch read (startingX .. endingX), narrowed by pushed
        filters."""
        o = self.options
        c = constraints or RangeConstraints()
        tps = [tp for tp in self.partitions() if c.keep(tp)]
        if not tps:
            return []
        starts = self.resolve_offsets(
            o.starting, tps, starting=True, option=_option_name(o.starting, starting=True)
        )
        ends = self.resolve_offsets(
            o.ending, tps, starting=False, option=_option_name(o.ending, starting=False)
        )
        layouts = self.layouts(tps, with_remote=o.remote is not None)
        bounds = self.check_bounds(
            {tp: (starts[tp], ends[tp]) for tp in tps},
            layouts,
            ending_given=o.ending.kind == "offsets",
        )
        bounds = {tp: c.narrow(*b) for tp, b in bounds.items()}
        if c.min_timestamp is not None:
            # No record before the first offset with timestamp >= T has a timestamp >= T.
            live = [tp for tp, (s, e) in bounds.items() if e > s]
            found = self.list_offsets(live, c.min_timestamp)
            for tp in live:
                s, e = bounds[tp]
                first = found[tp][0]
                bounds[tp] = (e, e) if first < 0 else (min(max(s, first), e), e)
        return self.plan(bounds, layouts)


def _option_name(spec: OffsetSpec, *, starting: bool) -> str:
    prefix = "starting" if starting else "ending"
    if spec.kind == "timestamp":
        return f"{prefix}Timestamp"
    if spec.kind == "timestamps":
        return f"{prefix}OffsetsByTimestamp"
    return f"{prefix}Offsets"
