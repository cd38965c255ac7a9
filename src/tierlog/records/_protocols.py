"""The interface a record codec implements (aiokafka's ``_protocols.py``).

The pure-Python reference in :mod:`.default_records` implements it; a compiled twin in
``_speedups/`` would implement the same, and the one test suite runs against both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from tierlog.records.default_records import Header, Record
from tierlog.records.record_batch import RecordBatchHeader

Buffer = bytes | bytearray | memoryview


class RecordBatchBuilderProtocol(Protocol):
    """Accumulates records, then writes one complete magic-2 batch."""

    def __len__(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
        *,
        offset_delta: int | None = None,
    ) -> int: ...

    def build(self) -> bytes: ...


class ReadRecords(Protocol):
    """``read_records(buf, header)``: the records of one already-validated batch."""

    def __call__(self, buf: Buffer, header: RecordBatchHeader, /) -> list[Record]: ...


class DecodeRecords(Protocol):
    """``decode_records(batch, position=0, *, check_crc=True)``."""

    def __call__(
        self, batch: Buffer, position: int = 0, /, *, check_crc: bool = True
    ) -> list[Record]: ...


class IterRecords(Protocol):
    """``iter_records(buf, start=0, end=None, *, check_crc=True)``."""

    def __call__(
        self, buf: Buffer, start: int = 0, end: int | None = None, /, *, check_crc: bool = True
    ) -> Iterator[tuple[RecordBatchHeader, list[Record]]]: ...


if TYPE_CHECKING:
    # mypy checks that the reference implementation conforms.
    from tierlog.records import default_records as _reference

    _builder: type[RecordBatchBuilderProtocol] = _reference.RecordBatchBuilder
    _read: ReadRecords = _reference.read_records
    _decode: DecodeRecords = _reference.decode_records
    _iter: IterRecords = _reference.iter_records
