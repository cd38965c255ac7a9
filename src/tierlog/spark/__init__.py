"""tierlog.spark: a PySpark Python data source for tierlog (and Kafka) topics.

::

    from tierlog.spark import TierlogDataSource
    spark.dataSource.register(TierlogDataSource)
    spark.read.format("tierlog").option("kafka.bootstrap.servers", ...).option("subscribe", ...)

Needs the ``spark`` extra (``pip install 'tierlog[spark]'``: pyspark, pyarrow, pandas, numpy,
confluent-kafka). Modules:

* :mod:`.datasource` - the DataSource, its readers and the pushdown of filters;
* :mod:`.write` - batch and streaming writers (idempotent producers);
* :mod:`.options` - Spark's Kafka source options, parsed and checked (no Spark needed);
* :mod:`.planning` - partitions, offsets, remote segments -> input partitions (driver);
* :mod:`.read` - one input partition -> Arrow batches, through the broker or from remote storage;
* :mod:`.remote` - remote segments from ``__remote_log_metadata``, read from object storage;
* :mod:`.arrow_decode` - record batches -> Arrow columns (a columnar decoder and its reference);
* :mod:`.fetch_client` - a minimal blocking Kafka client (Metadata, ListOffsets, Fetch).

``TierlogDataSource`` is imported lazily, so the Spark-free modules work without pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierlog.spark.datasource import TierlogDataSource

__all__ = ["TierlogDataSource"]


def __getattr__(name: str) -> Any:
    if name == "TierlogDataSource":
        from tierlog.spark.datasource import TierlogDataSource

        return TierlogDataSource
    raise AttributeError(f"module 'tierlog.spark' has no attribute {name!r}")
