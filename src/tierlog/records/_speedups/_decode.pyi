"""Type stubs of the C record decoder (see _decode.c)."""

_Buffer = bytes | bytearray | memoryview

def decode_records(
    data: _Buffer,
    batches: _Buffer,
    start_offset: int,
    end_offset: int,
    include_headers: bool,
    /,
) -> tuple[
    int,  # n: rows in range
    bytes,  # offsets: int64[n]
    bytes,  # timestamps in microseconds: int64[n]
    bytes,  # timestampType: int32[n]
    bytes,  # key offsets: int32[n + 1]
    bytes,  # key data
    bytes | None,  # key validity bitmap (LSB first), None when no nulls
    int,  # key null count
    bytes,  # value offsets: int32[n + 1]
    bytes,  # value data
    bytes | None,  # value validity bitmap
    int,  # value null count
    bytes,  # headers: int64 triples (row, headerCount position, record end), rows with headers
]: ...
