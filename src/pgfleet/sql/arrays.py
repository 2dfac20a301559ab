"""The columns of a bulk enqueue as PostgreSQL binary arrays, built in a few C-level calls.

psycopg's generic list dumper looks each element up and packs it in Python: for the
columns of 50,000 jobs it would be the largest client cost of `enqueue_many` (more than
validating them). The columns here are plain str / int / float lists whose element types
are already checked, so each array is one header, the packed lengths and the elements
interleaved, and one join; a column whose elements are all equal (one task, one queue, no
delay) is one element repeated. A column that is NULL for every row is sent as a NULL
array: unnest() pads it with NULLs, which is what the rows would have held.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from psycopg.adapt import Buffer, Dumper
from psycopg.pq import Format

from pgfleet.sql.rows import NewJobRow

# Array element types and the array types they belong to (pg_type.oid, fixed in core).
TEXT, TEXT_ARRAY = 25, 1009
INT4, INT4_ARRAY = 23, 1007
FLOAT8, FLOAT8_ARRAY = 701, 1022

_LENGTH = struct.Struct("!i")
_NULL = _LENGTH.pack(-1)


class BinaryArray:
    """A one-dimensional array already in PostgreSQL's binary format."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class TextArray(BinaryArray):
    __slots__ = ()


class Int4Array(BinaryArray):
    __slots__ = ()


class Float8Array(BinaryArray):
    __slots__ = ()


class _ArrayDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: BinaryArray) -> Buffer:
        return obj.data


class _TextArrayDumper(_ArrayDumper):
    oid = TEXT_ARRAY


class _Int4ArrayDumper(_ArrayDumper):
    oid = INT4_ARRAY


class _Float8ArrayDumper(_ArrayDumper):
    oid = FLOAT8_ARRAY


def _header(count: int, has_null: bool, element_oid: int) -> bytes:
    # ndim, has-null flag, element type, then (size, lower bound) of the one dimension.
    return struct.pack("!iiIii", 1, int(has_null), element_oid, count, 1)


def _body(elements: Sequence[bytes | None]) -> bytes:
    """Each element as its length and bytes (a NULL: length -1, no bytes)."""
    if elements[0] is not None and elements.count(elements[0]) == len(elements):
        return (_LENGTH.pack(len(elements[0])) + elements[0]) * len(elements)
    parts: list[bytes] = [b""] * (2 * len(elements))
    parts[0::2] = [_NULL if e is None else _LENGTH.pack(len(e)) for e in elements]
    parts[1::2] = [b"" if e is None else e for e in elements]
    return b"".join(parts)


def text_array(values: Sequence[str | None]) -> TextArray | None:
    """A text[] of `values`; None when every value is None (or there are none)."""
    has_null = None in values
    if has_null and values.count(None) == len(values):
        return None
    elements = [None if v is None else v.encode() for v in values]
    return TextArray(_header(len(values), has_null, TEXT) + _body(elements))


_INT4 = struct.Struct("!i")
_FLOAT8 = struct.Struct("!d")


def int4_array(values: Sequence[int | None]) -> Int4Array | None:
    """An integer[] of `values` (each within int4, as validation ensures); None when
    every value is None."""
    has_null = None in values
    if has_null and values.count(None) == len(values):
        return None
    pack = _INT4.pack
    elements = [None if v is None else pack(v) for v in values]
    return Int4Array(_header(len(values), has_null, INT4) + _body(elements))


def float8_array(values: Sequence[float]) -> Float8Array:
    """A float8[] of `values` (no NULLs: a delay is always a number)."""
    pack = _FLOAT8.pack
    elements = [pack(v) for v in values]
    return Float8Array(_header(len(values), False, FLOAT8) + _body(elements))


def _nulls_to_none(values: Sequence[Any]) -> list[Any] | None:
    return None if values.count(None) == len(values) else list(values)


def enqueue_many_params(rows: Sequence[NewJobRow]) -> dict[str, Any]:
    """The parameters of the enqueue_many query for `rows`, as
    binary arrays; a column NULL in every row is sent as a NULL array."""
    (tasks, args, queues, priorities, delays, run_ats, max_attempts, unique_keys, metas,
     concurrency_keys) = zip(*rows, strict=True)
    return {
        "tasks": text_array(tasks), "args": text_array(args),
        "queues": text_array(queues),
        "priorities": int4_array(priorities),
        "run_ats": _nulls_to_none(run_ats), "delays": float8_array(delays),
        "max_attempts": int4_array(max_attempts),
        "unique_keys": text_array(unique_keys),
        "metas": text_array(metas),
        "concurrency_keys": text_array(concurrency_keys),
    }


def register(adapters: Any) -> None:
    """Let a connection's or cursor's AdaptersMap send BinaryArray parameters."""
    adapters.register_dumper(TextArray, _TextArrayDumper)
    adapters.register_dumper(Int4Array, _Int4ArrayDumper)
    adapters.register_dumper(Float8Array, _Float8ArrayDumper)
