"""``TierlogDataSource``: the PySpark Python data source ``tierlog``.

::

    from tierlog.spark import TierlogDataSource
    spark.dataSource.register(TierlogDataSource)
    df = (spark.read.format("tierlog")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())

Options and schema are those of Spark's Kafka source (:mod:`.options`); reads yield Arrow
record batches (:mod:`.arrow_decode`), planned by :mod:`.planning` and read by :mod:`.read`;
writes produce with an idempotent producer (:mod:`.write`).

Filter pushdown (``spark.sql.python.filterPushdown.enabled=true``): predicates on
``partition``, ``offset`` and ``timestamp`` narrow the partitions and offset ranges read.
``partition`` and ``offset`` predicates are applied exactly (rows outside them are never
produced); ``timestamp >= / >`` predicates move each partition's start to the first offset
with such a timestamp (ListOffsets, i.e. the time indexes) and are still evaluated by Spark.
PySpark refuses a reader that implements ``pushFilters`` while the setting is off, so
:meth:`TierlogDataSource.reader` hands out the pushdown-capable reader only to Spark's
pushdown planner (it looks at who calls it) and the plain reader otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tierlog.errors import ConfigError, DataLossError
from tierlog.spark.options import (
    SourceOptions,
    TopicPartition,
    parse_sink_options,
    parse_source_options,
)
from tierlog.spark.planning import (
    OffsetRange,
    Planner,
    RangeConstraints,
    data_loss_message,
    pack_ranges,
)
from tierlog.spark.read import read_range
from tierlog.spark.write import TierlogBatchWriter, TierlogStreamWriter

__all__ = [
    "KAFKA_SCHEMA",
    "KAFKA_SCHEMA_WITH_HEADERS",
    "OffsetRangePartition",
    "TierlogBatchReader",
    "TierlogDataSource",
    "TierlogFilteringBatchReader",
    "TierlogStreamReader",
    "offsets_from_json",
    "offsets_to_json",
    "push_filter",
]

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
KAFKA_SCHEMA_WITH_HEADERS = KAFKA_SCHEMA + ", headers array<struct<key: string, value: binary>>"


class OffsetRangePartition(InputPartition):
    """One Spark input partition: consecutive :class:`~.planning.OffsetRange` s of one
    partition (several when small ones are packed, see :func:`~.planning.pack_ranges`),
    read one after the other."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)

    def __repr__(self) -> str:
        parts = [
            f"[{r.start}, {r.end}) {'remote' if r.segment is not None else 'broker'}"
            for r in self.ranges
        ]
        first = self.ranges[0]
        return f"OffsetRangePartition({first.topic}-{first.partition} {', '.join(parts)})"


def input_partitions(ranges: Sequence[OffsetRange], options: SourceOptions) -> list[InputPartition]:
    """The Spark input partitions of planned ranges: packed up to ``tierlog.maxPartitionBytes``
    unless the user asked for a split (``minPartitions`` / ``maxRecordsPerPartition``)."""
    if options.min_partitions or options.max_records_per_partition:
        return [OffsetRangePartition((r,)) for r in ranges]
    return [OffsetRangePartition(g) for g in pack_ranges(ranges, options.max_partition_bytes)]


def _read(partition: InputPartition, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, OffsetRangePartition):
        for r in partition.ranges:
            yield from read_range(r, options)


def _called_by_pushdown_planner() -> bool:
    """Whether Spark's filter pushdown planner is asking for the reader (see module doc)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith("data_source_pushdown_filters.py"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


# ------------------------------------------------------------------------------ data source


class TierlogDataSource(DataSource):
    """The ``tierlog`` format: batch and streaming reads and writes of tierlog/Kafka topics."""

    @classmethod
    def name(cls) -> str:
        return "tierlog"

    def schema(self) -> str:
        """Spark's Kafka source schema. Checks the options that do not depend on whether the
        read is a batch or a stream, so mistakes surface at ``load()``."""
        opts = parse_source_options(self.options, streaming=None)
        return KAFKA_SCHEMA_WITH_HEADERS if opts.include_headers else KAFKA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_source_options(self.options, streaming=False)
        if _called_by_pushdown_planner():
            return TierlogFilteringBatchReader(opts)
        return TierlogBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TierlogStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> TierlogBatchWriter:
        """Batch writes append (use ``.mode("append")``: PySpark's data sources know only
        append and overwrite, and a log cannot be overwritten)."""
        if overwrite:
            raise ConfigError(
                "mode",
                "Save mode Overwrite not allowed for tierlog. Allowed save mode is Append.",
            )
        return TierlogBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TierlogStreamWriter:
        """Streaming writes append; ``complete`` output mode writes the whole result again
        each micro-batch (as Spark's Kafka sink does)."""
        return TierlogStreamWriter(parse_sink_options(self.options), schema)


# ------------------------------------------------------------------------------ batch read


class TierlogBatchReader(DataSourceReader):
    """Batch read: plans in the driver (:meth:`partitions`), reads in executors (:meth:`read`).

    Picklable (holds only the parsed options and pushed constraints).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.constraints = RangeConstraints()

    def partitions(self) -> list[InputPartition]:
        with Planner(self.options) as planner:
            ranges = planner.plan_batch(self.constraints)
        return input_partitions(ranges, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)


class TierlogFilteringBatchReader(TierlogBatchReader):
    """:class:`TierlogBatchReader` with filter pushdown (see the module docstring)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            if not push_filter(self.constraints, f):
                yield f


def push_filter(c: RangeConstraints, f: Filter) -> bool:
    """Fold one pushed filter into ``c``; True when it is applied exactly (Spark need not
    evaluate it again), False when it only narrows the read or is not understood."""
    column = getattr(f, "attribute", None)
    if column not in (("partition",), ("offset",), ("timestamp",)):
        return False
    name = column[0]
    value: Any = getattr(f, "value", None)
    if name == "timestamp":
        ms = _timestamp_ms(value)
        if ms is not None:
            if isinstance(f, GreaterThanOrEqual | EqualTo):
                c.at_least_timestamp(ms)
            elif isinstance(f, GreaterThan):
                c.at_least_timestamp(ms + 1)
        return False  # narrowing only: Spark still evaluates it
    if isinstance(f, In):
        values = list(value)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return False
        if name == "partition":
            c.only_partitions(values)
            return True
        if not values:
            c.offsets_between(0, -1)
            return True
        c.offsets_between(min(values), max(values))
        return False  # narrowed to [min, max]; Spark drops the offsets in between
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    if name == "partition":
        if isinstance(f, EqualTo):
            c.only_partitions([value])
            return True
        return False
    if isinstance(f, EqualTo):
        c.offsets_between(value, value)
    elif isinstance(f, GreaterThan):
        c.offsets_between(value + 1, None)
    elif isinstance(f, GreaterThanOrEqual):
        c.offsets_between(value, None)
    elif isinstance(f, LessThan):
        c.offsets_between(None, value - 1)
    elif isinstance(f, LessThanOrEqual):
        c.offsets_between(None, value)
    else:
        return False
    return True


def _timestamp_ms(value: Any) -> int | None:
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    # Round down to the millisecond: records only have milliseconds.
    return int(value.timestamp() * 1_000_000) // 1000


# ------------------------------------------------------------------------------ stream read


def offsets_from_json(offsets: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """Spark's Kafka offsets ``{"topic": {"0": 23}}`` as ``{(topic, 0): 23}``."""
    out: dict[TopicPartition, int] = {}
    for topic, parts in offsets.items():
        for p, offset in parts.items():
            out[(str(topic), int(p))] = int(offset)
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


class TierlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads: offsets per partition in the checkpoint, as Spark's Kafka source.

    * :meth:`initialOffset`: ``startingOffsets`` (default ``latest``) / timestamps, resolved
      for the partitions that exist when the query first starts.
    * :meth:`latestOffset`: the latest offsets (last stable offsets with read_committed),
      capped by the read limit — ``maxOffsetsPerTrigger`` split over the partitions in
      proportion to what each has to read (Spark's ``rateLimit``) — and, after
      :meth:`prepareForTriggerAvailableNow`, by the offsets recorded then.
    * Partitions that appear later (new topics matching the subscription, added partitions)
      start at their earliest offset.
    * :meth:`partitions` plans ``[start, end)`` per partition like a batch read (remote
      segments, ``minPartitions``). Data loss — a start below the log start (retention), a
      partition that disappeared, an offset that went backwards — fails the query with
      ``failOnDataLoss=true`` and is skipped otherwise.

    The driver-side instance keeps one :class:`~.planning.Planner` (a connection) between
    calls; pickled copies (executors) drop it.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner: Planner | None = None
        self._target: dict[TopicPartition, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        p = self.planner
        tps = p.partitions()
        spec = self.options.starting
        option = {
            "timestamp": "startingTimestamp",
            "timestamps": "startingOffsetsByTimestamp",
        }.get(spec.kind, "startingOffsets")
        return offsets_to_json(p.resolve_offsets(spec, tps, starting=True, option=option))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        p = self.planner
        self._target = p.latest(p.partitions())

    def reportLatestOffset(self) -> dict[str, Any] | None:
        p = self.planner
        return offsets_to_json(p.latest(p.partitions()))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        p = self.planner
        begin = offsets_from_json(start)
        tps = p.partitions()
        latest = p.latest(tps)
        new = [tp for tp in tps if tp not in begin]
        if new:
            begin.update(p.earliest(new))
        if self._target is not None:
            latest = {
                tp: min(o, self._target[tp]) for tp, o in latest.items() if tp in self._target
            }
            for tp in tps:
                latest.setdefault(tp, begin[tp])
        end = {tp: max(latest[tp], begin[tp]) for tp in tps}
        if isinstance(limit, ReadMaxRows):
            end = _rate_limit(begin, end, limit.max_rows)
        # Partitions that disappeared keep their offset (partitions() reports the loss).
        for tp, offset in offsets_from_json(start).items():
            end.setdefault(tp, offset)
        return offsets_to_json(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        p = self.planner
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        existing = set(p.partitions())
        fail = self.options.fail_on_data_loss
        gone = sorted(tp for tp in until if tp not in existing)
        if gone and fail:
            raise DataLossError(
                data_loss_message(
                    "These partitions were deleted: " + ", ".join(f"{t}-{n}" for t, n in gone)
                )
            )
        tps = [tp for tp in sorted(until) if tp in existing]
        new = [tp for tp in tps if tp not in begin]
        if new:
            begin.update(p.earliest(new))
        layouts = p.layouts(tps, with_remote=self.options.remote is not None)
        bounds: dict[TopicPartition, tuple[int, int]] = {}
        for tp in tps:
            s, e = begin[tp], until[tp]
            if e < s:
                if fail:
                    raise DataLossError(
                        data_loss_message(
                            f"Partition {tp[0]}-{tp[1]}'s offset was changed from {s} to {e}"
                        )
                    )
                continue
            bounds[tp] = (s, e)
        bounds = p.check_bounds(bounds, layouts, ending_given=False)
        return input_partitions(p.plan(bounds, layouts), self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


def _rate_limit(
    begin: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """Spark's ``KafkaMicroBatchStream.rateLimit``: ``limit`` records split in proportion to
    each partition's backlog, never starving a partition with some data completely."""
    sizes = {tp: end[tp] - begin[tp] for tp in end if end[tp] > begin[tp]}
    total = sum(sizes.values())
    if total <= limit:
        return dict(end)
    out = dict(end)
    for tp, size in sizes.items():
        prorate = limit * (size / total)
        prorate_long = int(-(-prorate // 1)) if prorate < 1 else int(prorate // 1)
        out[tp] = min(end[tp], begin[tp] + prorate_long)
    return out
