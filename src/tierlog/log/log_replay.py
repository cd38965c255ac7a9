"""Every record of a range of a :class:`~tierlog.log.log.Log`, read from the broker's own log.

For the internal topics the broker reads back itself (``__consumer_offsets`` at startup,
``__remote_log_metadata`` for the remote log metadata manager): it wrote them, so CRCs are not
checked again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tierlog.errors import ApiError
from tierlog.records import Record
from tierlog.records.default_records import iter_records

if TYPE_CHECKING:
    from tierlog.log.log import Log

__all__ = ["iter_log_records"]


def iter_log_records(
    lg: Log,
    start: int,
    end: int,
    on_read_error: Callable[[int, ApiError], None],
    *,
    chunk_bytes: int = 1 << 20,
) -> Iterator[Record]:
    """The records of ``lg`` with offsets in ``[start, end)``, oldest first, read
    ``chunk_bytes`` at a time (a batch larger than that in one read).

    A read that fails (e.g. the offsets were deleted meanwhile) calls ``on_read_error`` with
    the offset and the error, which raises or returns (then the iteration ends). Errors
    decoding what was read propagate.
    """
    offset = start
    while offset < end:
        try:
            buf = lg.read(offset, chunk_bytes, max_offset=end, min_one_message=True).records
        except ApiError as e:
            on_read_error(offset, e)
            return
        if not buf:
            return
        progressed = False
        for header, records in iter_records(buf, check_crc=False):
            for r in records:
                if r.offset >= offset:
                    yield r
            nxt = header.last_offset + 1
            if nxt > offset:
                offset = nxt
                progressed = True
        if not progressed:
            return
