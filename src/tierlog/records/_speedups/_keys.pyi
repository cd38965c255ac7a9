"""Type stubs of the C twin of read_keys (see _keys.c)."""

_Buffer = bytes | bytearray | memoryview

def read_keys(
    data: _Buffer, pos: int, end: int, count: int, base_offset: int, position: int, /
) -> tuple[list[int], list[bytes | None], list[bool]]: ...
