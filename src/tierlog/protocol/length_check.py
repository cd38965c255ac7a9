"""A length check of a message body, run before kio's native parser sees it.

kio's parser (Rust) sizes its buffers from the lengths in the frame: an array whose count
says two billion elements makes it allocate count x element size up front, and Rust aborts
the whole process when that allocation fails (seen with a fuzzed frame: "memory allocation of
193239814808 bytes failed"; an abort is not an exception, nothing can catch it). Kafka's own
generated parsers refuse such a frame first ("Tried to allocate a collection of size N, but
there are only M bytes remaining."). This module does that check for kio: it walks the
request's schema (kio's own field introspection) and checks every array count and every
string and bytes length against the bytes that remain in the frame, including inside known
tagged fields, without building anything. Unknown tagged fields are left to kio (it rejects
them before reading their value).

:func:`check_lengths` costs 6.7 µs for a six-partition Produce request (kio parses it in 1.9 µs):
one step per field, a fixed-width run being one step. The Spark data source's Fetch client runs
it on the broker's responses too.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from typing import Any, Final

from kio.serial._introspect import (  # pinned kio==0.6.5
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

__all__ = ["check_lengths"]

_FIXED_SIZE: Final = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "bool": 1,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")

# Step kinds of a plan (tuples, interpreted by _walk).
_FIXED, _STRING, _BYTES, _ARRAY_FIXED, _ARRAY, _ENTITY, _OPTIONAL_ENTITY = range(7)

Plan = tuple[tuple[Any, ...], bool, dict[int, tuple[Any, ...]]]
"""(steps, flexible, tagged field steps by tag)."""

_PLANS: dict[type[Any], Plan] = {}


class FrameLengthError(ValueError):
    """A count or length that the frame cannot hold."""


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise FrameLengthError("varint runs past the end of the frame")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FrameLengthError("varint is longer than 5 bytes")


def _field_step(f: Any, flexible: bool, *, tagged: bool = False) -> tuple[Any, ...]:
    """The step of one field; a tagged field's value has no null marker (absence is null)."""
    fc = classify_field(f)
    if isinstance(fc, PrimitiveField):
        kafka_type = get_schema_field_type(f)
        size = _FIXED_SIZE.get(kafka_type)
        if size is not None:
            return (_FIXED, size)
        if kafka_type == "string":
            return (_STRING, flexible)
        if kafka_type in ("bytes", "records"):
            return (_BYTES, flexible)
        raise NotImplementedError(f"kafka type {kafka_type!r}")
    if isinstance(fc, EntityField):
        optional = is_optional(f) and not tagged
        return (_OPTIONAL_ENTITY if optional else _ENTITY, _plan(fc.type_))
    if isinstance(fc, EntityTupleField):
        return (_ARRAY, flexible, (_ENTITY, _plan(fc.type_)))
    if isinstance(fc, PrimitiveTupleField):
        kafka_type = get_schema_field_type(f)
        size = _FIXED_SIZE.get(kafka_type)
        if size is not None:
            return (_ARRAY_FIXED, flexible, size)
        element = (_STRING, flexible) if kafka_type == "string" else (_BYTES, flexible)
        return (_ARRAY, flexible, element)
    raise TypeError(fc)  # pragma: no cover - classify_field is exhaustive


def _plan(cls: type[Any]) -> Plan:
    plan = _PLANS.get(cls)
    if plan is not None:
        return plan
    flexible: bool = cls.__flexible__
    steps: list[tuple[Any, ...]] = []
    tagged: dict[int, tuple[Any, ...]] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        if tag is not None:
            tagged[tag] = _field_step(f, True, tagged=True)
            continue
        step = _field_step(f, flexible)
        if step[0] == _FIXED and steps and steps[-1][0] == _FIXED:
            steps[-1] = (_FIXED, steps[-1][1] + step[1])  # one step per fixed-width run
        else:
            steps.append(step)
    plan = (tuple(steps), flexible, tagged)
    _PLANS[cls] = plan
    return plan


def _count(buf: bytes, pos: int, end: int, flexible: bool) -> tuple[int, int]:
    """An array count (-1: null) and the position after it."""
    if flexible:
        n, pos = _uvarint(buf, pos, end)
        return n - 1, pos
    if end - pos < 4:
        raise FrameLengthError("array length runs past the end of the frame")
    return _I32.unpack_from(buf, pos)[0], pos + 4


def _step(step: tuple[Any, ...], buf: bytes, pos: int, end: int) -> int:
    kind = step[0]
    if kind == _FIXED:
        pos += step[1]
        if pos > end:
            raise FrameLengthError("a fixed-width field runs past the end of the frame")
        return pos
    if kind in (_STRING, _BYTES):
        if step[1]:
            n, pos = _uvarint(buf, pos, end)
            n -= 1
        elif kind == _STRING:
            if end - pos < 2:
                raise FrameLengthError("a string length runs past the end of the frame")
            n, pos = _I16.unpack_from(buf, pos)[0], pos + 2
        else:
            if end - pos < 4:
                raise FrameLengthError("a bytes length runs past the end of the frame")
            n, pos = _I32.unpack_from(buf, pos)[0], pos + 4
        if n > end - pos:
            raise FrameLengthError(f"a length of {n} bytes, but only {end - pos} bytes remain")
        return pos + max(n, 0)
    if kind == _ARRAY_FIXED:
        n, pos = _count(buf, pos, end, step[1])
        width: int = step[2]
        if n > (end - pos) // width:
            raise FrameLengthError(f"an array of {n} elements, but only {end - pos} bytes remain")
        return pos + max(n, 0) * width
    if kind == _ARRAY:
        n, pos = _count(buf, pos, end, step[1])
        if n > end - pos:
            raise FrameLengthError(f"an array of {n} elements, but only {end - pos} bytes remain")
        element = step[2]
        for _ in range(n):
            pos = _step(element, buf, pos, end)
        return pos
    if kind == _ENTITY:
        return _walk(step[1], buf, pos, end)
    # _OPTIONAL_ENTITY: an int8 marker (-1: null), then the entity
    if pos >= end:
        raise FrameLengthError("an entity marker runs past the end of the frame")
    present = buf[pos] != 0xFF
    return _walk(step[1], buf, pos + 1, end) if present else pos + 1


def _walk(plan: Plan, buf: bytes, pos: int, end: int) -> int:
    steps, flexible, tagged = plan
    for step in steps:
        pos = _step(step, buf, pos, end)
    if flexible:
        count, pos = _uvarint(buf, pos, end)
        if count > end - pos:
            raise FrameLengthError(f"{count} tagged fields, but only {end - pos} bytes remain")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            if size > end - pos:
                raise FrameLengthError(
                    f"a tagged field of {size} bytes, but only {end - pos} remain"
                )
            step = tagged.get(tag)
            if step is not None:
                _step(step, buf, pos, pos + size)
            pos += size
    return pos


def check_lengths(cls: type[Any], buf: bytes, start: int, end: int) -> int:
    """Check that no length in the body ``buf[start:end]`` of class ``cls`` (a kio request or
    response class) promises more bytes or elements than the frame holds; returns where the
    body ends.

    Raises:
        ValueError: a count or length larger than what remains, or a field cut off by the
            end of the frame.
    """
    return _walk(_plan(cls), buf, start, end)
