"""Helpers for the local log tests: batches built by kafka-python (an independent
implementation of the record format), configs, an injectable clock."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tierlog.log.log import Log
from tierlog.log.log_config import LogConfig
from tierlog.records.default_records import build_batch as tierlog_build_batch
from tierlog.records.record_batch import iter_headers, set_base_offset

with warnings.catch_warnings():
    # kafka-python 3.0 uses importlib.resources.read_text at import time.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

#: A fixed "now" for tests with an injected clock (2024-01-01T00:00:00Z).
T0 = 1_704_067_200_000

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class Clock:
    """A manual clock in ms, usable as ``time_ms``."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def build_batch(
    values: Sequence[bytes] | int = 1,
    *,
    timestamp: int | None = None,
    timestamps: Sequence[int] | None = None,
    key: bytes | None = b"k",
    value_size: int = 10,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: str = "none",
    base_offset: int = 0,
) -> bytes:
    """One magic-2 batch from kafka-python's builder. ``values`` is a list of values or a
    record count (values of ``value_size`` bytes).

    kafka-python has no snappy/lz4/zstd codec installed here; those batches come from
    tierlog's own builder.
    """
    if isinstance(values, int):
        values = [bytes([65 + i % 26]) * value_size for i in range(values)]
    if timestamps is None:
        ts = T0 if timestamp is None else timestamp
        timestamps = [ts + i for i in range(len(values))]
    if compression not in ("none", "gzip"):
        return tierlog_build_batch(
            [(t, key, v) for t, v in zip(timestamps, values, strict=True)],
            CODECS[compression],
            base_offset=base_offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[compression],
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for i, (value, ts) in enumerate(zip(values, timestamps, strict=True)):
        builder.append(i, timestamp=ts, key=key, value=value, headers=[])
    data = bytearray(builder.build())
    if base_offset:
        set_base_offset(data, 0, base_offset)
    return bytes(data)


def make_config(**overrides: object) -> LogConfig:
    """A LogConfig with topic overrides given as ``segment_bytes=...`` (dots as underscores)."""
    return LogConfig().with_overrides({k.replace("_", "."): v for k, v in overrides.items()})


def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20) -> bytes:
    """Every whole batch from ``start`` (default: log start) to the log end, concatenated."""
    offset = log.log_start_offset if start is None else start
    out = bytearray()
    while offset < log.log_end_offset:
        info = log.read(offset, max_bytes)
        headers = list(iter_headers(info.records))
        if not headers:
            break
        end = headers[-1].position + headers[-1].size_in_bytes
        out += info.records[:end]
        offset = headers[-1].next_offset
    return bytes(out)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "my-topic-0"


@pytest.fixture
def open_log(log_dir: Path, clock: Clock) -> Iterator[Callable[..., Log]]:
    """``open_log(config=None, **kwargs)`` opens the log in ``log_dir`` with the test clock;
    every log opened is closed at the end."""
    opened: list[Log] = []

    def _open(config: LogConfig | None = None, **kwargs: object) -> Log:
        kwargs.setdefault("time_ms", clock)
        log = Log.open(log_dir, config or make_config(), **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield _open
    for log in opened:
        if not log.closed:
            log.close()
