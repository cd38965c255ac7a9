"""Batch and streaming writes: each Spark task produces its rows with an idempotent producer.

Columns, as Spark's Kafka sink takes them (``KafkaWriter.validateQuery``): ``value`` (string or
binary, required), ``key`` (string or binary), ``topic`` (string; the ``topic`` option, when
set, wins over it), ``partition`` (int; null or absent = the producer's partitioner, Java's
murmur2 like Spark's Kafka sink), ``headers`` (array<struct<key string, value binary>>). Other
columns are ignored.

Each task runs one librdkafka producer (confluent-kafka) with ``enable.idempotence=true`` and
``acks=all``: within the task no record is lost, duplicated or reordered by retries, and any
delivery error (or a fatal idempotence error) fails the task after the producer is flushed,
so Spark retries the whole task — at-least-once like Spark's own Kafka sink, with no silent
gaps. A task's commit message reports the rows it wrote; ``commit`` logs the total.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from tierlog.errors import ConfigError, DeliveryError, for_code
from tierlog.spark.options import SinkOptions

__all__ = [
    "ProducerTask",
    "TierlogBatchWriter",
    "TierlogCommitMessage",
    "TierlogStreamWriter",
    "producer_config",
    "validate_write_schema",
]

log = logging.getLogger(__name__)

_FLUSH_TIMEOUT_S: Final = 300.0


@dataclass
class TierlogCommitMessage(WriterCommitMessage):
    """What one write task did: rows produced, per topic."""

    rows: int = 0
    topics: dict[str, int] = field(default_factory=dict)


def producer_config(options: SinkOptions) -> dict[str, Any]:
    """librdkafka settings of the sink's producers (user ``kafka.*`` settings included)."""
    config: dict[str, Any] = {
        "client.id": "tierlog-spark-writer",
        "partitioner": "murmur2_random",  # Java's default partitioner, as Spark's Kafka sink
        "linger.ms": 5,
        **options.producer_config,
        "bootstrap.servers": options.bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
    }
    return config


def _is_string_or_binary(t: DataType) -> bool:
    return isinstance(t, StringType | BinaryType)


def validate_write_schema(schema: StructType, options: SinkOptions) -> None:
    """Spark's Kafka sink checks, with its messages.

    Raises:
        ConfigError: a missing or mistyped column (named).
    """
    fields = {f.name: f.dataType for f in schema.fields}
    if "topic" in fields:
        if not isinstance(fields["topic"], StringType):
            raise ConfigError("topic", "Topic type must be a string")
    elif options.topic is None:
        raise ConfigError(
            "topic",
            "topic option required when no 'topic' attribute is present. Use the topic option "
            "for setting a topic.",
        )
    if "key" in fields and not _is_string_or_binary(fields["key"]):
        raise ConfigError("key", "Key attribute type must be a string or binary")
    if "value" not in fields:
        raise ConfigError("value", "Required attribute 'value' not found")
    if not _is_string_or_binary(fields["value"]):
        raise ConfigError("value", "Value attribute type must be a string or binary")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ConfigError("partition", "Partition attribute type must be an int")
    if "headers" in fields:
        t = fields["headers"]
        ok = (
            isinstance(t, ArrayType)
            and isinstance(t.elementType, StructType)
            and [(f.name, type(f.dataType)) for f in t.elementType.fields]
            == [("key", StringType), ("value", BinaryType)]
        )
        if not ok:
            raise ConfigError(
                "headers",
                "Headers attribute type must be an array<struct<key:string,value:binary>>",
            )


def _check_producer_config(config: dict[str, Any]) -> None:
    """Build (and drop) a producer, so librdkafka rejects bad ``kafka.*`` settings in the
    driver, naming them."""
    from confluent_kafka import KafkaException, Producer

    try:
        Producer(config).flush(0)
    except (KafkaException, ValueError, TypeError) as e:
        raise ConfigError("kafka.*", f"the producer refused its configuration: {e}") from None


class ProducerTask:
    """Produces the rows of one Spark task and waits until all are acknowledged.

    Not thread-safe (one per task). Raises :class:`~tierlog.errors.DeliveryError` (or the
    Kafka error class of a broker error code) when any record could not be delivered.
    """

    def __init__(self, options: SinkOptions) -> None:
        from confluent_kafka import Producer

        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        config = producer_config(options)
        config["error_cb"] = self._on_error
        self._producer = Producer(config)
        self._topic = options.topic
        self.rows = 0
        self.topics: dict[str, int] = {}

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            with self._lock:
                self._errors.append(DeliveryError(f"fatal producer error: {err.str()}"))

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            with self._lock:
                self._errors.append(_delivery_error(err, msg))

    def _raise_if_failed(self) -> None:
        with self._lock:
            if self._errors:
                raise self._errors[0]

    def produce_batch(self, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        n = batch.num_rows
        if n == 0:
            return

        def column(name: str) -> Sequence[Any]:
            if name not in names:
                return [None] * n
            values: list[Any] = batch.column(names.index(name)).to_pylist()
            return values

        values = column("value")
        keys = column("key")
        partitions = column("partition")
        headers = column("headers")
        topics: Sequence[Any] = [self._topic] * n if self._topic else column("topic")
        produce = self._producer.produce
        poll = self._producer.poll
        callback = self._on_delivery
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ConfigError(
                    "topic",
                    "Null topic present in the data. Use the topic option for setting a topic.",
                )
            kwargs: dict[str, Any] = {"value": values[i], "key": keys[i], "on_delivery": callback}
            if partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    produce(topic, **kwargs)
                    break
                except BufferError:
                    poll(0.1)  # the local queue is full: let deliveries drain
            self.topics[topic] = self.topics.get(topic, 0) + 1
        self.rows += n
        poll(0)
        self._raise_if_failed()

    def finish(self) -> TierlogCommitMessage:
        """Wait for every record's acknowledgement; raise the first failure."""
        remaining = self._producer.flush(_FLUSH_TIMEOUT_S)
        self._raise_if_failed()
        if remaining:
            raise DeliveryError(
                f"{remaining} records were not acknowledged within {_FLUSH_TIMEOUT_S:.0f} s"
            )
        return TierlogCommitMessage(rows=self.rows, topics=dict(self.topics))


def _delivery_error(err: Any, msg: Any) -> BaseException:
    where = f"{msg.topic()}-{msg.partition()}" if msg is not None else "?"
    code = err.code()
    text = f"delivery to {where} failed: {err.str()}"
    if isinstance(code, int) and code > 0:
        return for_code(code)(text)
    return DeliveryError(text)


def _write(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> TierlogCommitMessage:
    task = ProducerTask(options)
    for batch in batches:
        task.produce_batch(batch)
    return task.finish()


def _total(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, dict[str, int]]:
    rows = 0
    topics: dict[str, int] = {}
    for m in messages:
        if isinstance(m, TierlogCommitMessage):
            rows += m.rows
            for t, k in m.topics.items():
                topics[t] = topics.get(t, 0) + k
    return rows, topics


class _ProducingWriter:
    """What the batch and the streaming writer share: checked options, a task's write."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        validate_write_schema(schema, options)
        _check_producer_config(producer_config(options))
        self.options = options
        self.rows_written = 0

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TierlogCommitMessage:
        return _write(self.options, iterator)


class TierlogBatchWriter(_ProducingWriter, DataSourceArrowWriter):
    """``df.write.format("tierlog")``: one idempotent producer per task."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, topics = _total(messages)
        self.rows_written = rows
        log.info("tierlog sink: wrote %d records (%s)", rows, topics)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, _ = _total(messages)
        log.warning(
            "tierlog sink: write aborted after %d records were produced by tasks that "
            "finished (Kafka has no rollback without transactions)",
            rows,
        )


class TierlogStreamWriter(_ProducingWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("tierlog")``: one idempotent producer per task and micro-batch."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, topics = _total(messages)
        self.rows_written += rows
        log.info("tierlog sink: micro-batch %d wrote %d records (%s)", batchId, rows, topics)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, _ = _total(messages)
        log.warning("tierlog sink: micro-batch %d aborted after %d records", batchId, rows)
