"""tierlog.records: the sans-IO Kafka record-batch codec (magic 2).

* :mod:`.record_batch` - the zero-copy 61-byte header view, CRC-32C, in-place patches;
* :mod:`.default_records` - records: build batches, decode them;
* :mod:`.control_records` - COMMIT / ABORT markers (control batches);
* :mod:`.compression` - gzip / snappy / lz4 / zstd as Kafka clients write them;
* :mod:`.varint` - Kafka's ZigZag varints.
"""

from tierlog.records.compression import compress, compression_name, decompress
from tierlog.records.control_records import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    control_record_type,
    end_transaction_marker,
    read_end_txn_marker,
)
from tierlog.records.default_records import (
    Header,
    Record,
    RecordBatchBuilder,
    build_batch,
    build_empty_batch,
    decode_records,
    iter_records,
    read_records,
)
from tierlog.records.record_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    RecordBatchHeader,
    compute_crc,
    crc32c,
    iter_headers,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from tierlog.records.varint import (
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
)

__all__ = [
    # batch header (record_batch)
    "RecordBatchHeader",
    "read_header",
    "validate_batch",
    "iter_headers",
    "compute_crc",
    "crc32c",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
    "CURRENT_MAGIC",
    "RECORD_BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "NO_PARTITION_LEADER_EPOCH",
    "TIMESTAMP_TYPE_CREATE_TIME",
    "TIMESTAMP_TYPE_LOG_APPEND_TIME",
    # compression
    "COMPRESSION_NONE",
    "COMPRESSION_GZIP",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD",
    "COMPRESSION_NAMES",
    "compress",
    "decompress",
    "compression_name",
    # records (default_records)
    "Record",
    "Header",
    "RecordBatchBuilder",
    "build_batch",
    "build_empty_batch",
    "decode_records",
    "read_records",
    "iter_records",
    "CONTROL_TYPE_ABORT",
    "CONTROL_TYPE_COMMIT",
    "control_record_type",
    "end_transaction_marker",
    "EndTransactionMarker",
    "build_end_txn_marker_batch",
    "read_end_txn_marker",
    # varints
    "encode_varint",
    "encode_varlong",
    "encode_unsigned_varint",
    "decode_varint",
    "decode_varlong",
    "decode_unsigned_varint",
    "size_of_varint",
    "size_of_varlong",
    "size_of_unsigned_varint",
]
