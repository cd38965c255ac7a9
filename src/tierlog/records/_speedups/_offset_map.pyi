"""Type stubs of the C twin of tierlog.log.offset_map.DictTable (see _offset_map.c)."""

_Buffer = bytes | bytearray | memoryview

class OffsetMap:
    def __init__(self, slots: int) -> None: ...
    def put(self, key: bytes, offset: int, /) -> None: ...
    def get(self, key: bytes, /) -> int: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...
    def map_batch(
        self,
        data: _Buffer,
        pos: int,
        end: int,
        count: int,
        base_offset: int,
        position: int,
        start: int,
        /,
    ) -> int: ...
    def filter_batch(
        self,
        data: _Buffer,
        pos: int,
        end: int,
        count: int,
        base_offset: int,
        position: int,
        latest_offset: int,
        /,
    ) -> tuple[list[int] | None, list[int], bool, int]: ...
    def map_run(
        self, chunk: _Buffer, off: int, start: int, stop_offset: int, max_entries: int, /
    ) -> tuple[int, int, int]: ...
    def filter_run(
        self,
        chunk: _Buffer,
        off: int,
        latest_offset: int,
        upper_bound: int,
        active_producers: dict[int, tuple[int, int]],
        /,
    ) -> tuple[int, int, int, int, int]: ...

def md5(data: _Buffer, /) -> bytes: ...
def rebuild_records(
    data: _Buffer,
    pos: int,
    end: int,
    count: int,
    position: int,
    kept: list[int],
    base_timestamp: int,
    horizon: int,
    log_append_time: int,
    /,
) -> tuple[bytes, int, int]: ...
