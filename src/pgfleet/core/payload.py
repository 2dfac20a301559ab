"""Checks applied to everything an enqueue writes, before any SQL is sent."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from pgfleet.errors import PayloadError

MAX_ARGS_BYTES = 1024 * 1024
MAX_DEPTH = 64
PRIORITY_RANGE = (-1000, 1000)
ATTEMPTS_RANGE = (1, 1000)
MAX_META_BYTES = 64 * 1024
MAX_META_DEPTH = 16
# A task's return value, stored as the job's result (docs/tasks.md), and what it reports
# as progress: JSON text of at most these many bytes.
MAX_RESULT_BYTES = 1024 * 1024
MAX_PROGRESS_BYTES = 4096
NAME_LIMITS = {"task": 255, "queue": 128, "unique_key": 255, "concurrency_key": 255}


def _check_scalar(value: Any, path: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(path, f"{value!r} is not a JSON number")
        return
    if isinstance(value, str):
        _check_text(value, path)
        return
    raise PayloadError(path, f"a {type(value).__name__} is not JSON; pass plain JSON values")


def _check_text(value: str, path: str) -> None:
    # PostgreSQL's jsonb refuses \u0000, and a lone surrogate cannot be encoded as UTF-8.
    if "\x00" in value:
        raise PayloadError(path, "a NUL character cannot be stored")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadError(path, "contains a lone surrogate, which is not valid text") from None


def _walk(value: Any, path: str) -> None:
    """Iterative walk, so a hostile nesting depth cannot blow the Python stack."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise PayloadError(where, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise PayloadError(where, f"key {key!r} is not a string")
                _check_text(key, where)
                stack.append((child, f"{where}.{key}", depth + 1))
        elif isinstance(item, (list, tuple)):
            for index, child in enumerate(item):
                stack.append((child, f"{where}[{index}]", depth + 1))
        else:
            _check_scalar(item, where)


def _keys_are_text(value: dict[str, Any]) -> bool:
    """json.dumps turns int keys into strings silently; check keys (containers only)."""
    # The top level first, without the stack: most args are one flat object.
    nested = False
    for key, child in value.items():
        if type(key) is not str:
            return False
        if isinstance(child, (dict, list, tuple)):
            nested = True
    return not nested or _nested_keys_are_text(value)


def _nested_keys_are_text(value: dict[str, Any]) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(item, dict):
            for key, child in item.items():
                if type(key) is not str:
                    return False
                if isinstance(child, (dict, list, tuple)):
                    stack.append((child, depth + 1))
        else:
            stack.extend((child, depth + 1) for child in item
                         if isinstance(child, (dict, list, tuple)))
    return True


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _c_encoder() -> Callable[[Any], str]:
    """`_ENCODER.encode` without its per-call Python layer (~1 us of a 2.5 us row in a
    bulk enqueue): CPython's C encoder with the same settings, called directly. No
    circular-reference markers: `_keys_are_text` has already refused anything nested
    deeper than MAX_DEPTH, which includes every cycle."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # another Python implementation: the public path
        return _ENCODER.encode
    encode = make(None, _ENCODER.default, json.encoder.encode_basestring, None,
                  _ENCODER.key_separator, _ENCODER.item_separator, False, False, False)
    join = "".join

    def fast(value: Any) -> str:
        return join(encode(value, 0))

    return fast


_encode = _c_encoder()


def _fast_json(args: dict[str, Any]) -> str | None:
    """JSON text of args, or None if anything looks wrong; then the slow walk finds what.

    json.dumps itself refuses NaN and non-JSON types; what it lets through is checked here:
    non-string keys, NUL characters (escaped as \\u0000, which jsonb refuses) and lone
    surrogates (which cannot be encoded as UTF-8). Bulk enqueues spend most of their
    Python time in this function, so the common case is one C-level dumps call.
    """
    try:
        if not _keys_are_text(args):
            return None
        text = _encode(args)
        if not text.isascii():  # ASCII text (a flag of the str, no scan) has no surrogate
            text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        return None
    return None if "\\u0000" in text else text


def args_json(args: Any, limit: int = MAX_ARGS_BYTES) -> str:
    """Validate `args` and return it as JSON text; raises PayloadError naming the field."""
    return _object_json("args", {} if args is None else args, limit)


def meta_json(meta: Any) -> str:
    """Validate a job's `meta` (a JSON object of at most 64 KiB, 16 levels deep, as the
    0009 trigger requires) and return it as JSON text."""
    text = _object_json("meta", meta, MAX_META_BYTES)
    if not _within_depth(json.loads(text), MAX_META_DEPTH):
        raise PayloadError("meta", f"nested deeper than {MAX_META_DEPTH} levels")
    return text


def _object_json(field: str, value: Any, limit: int) -> str:
    if not isinstance(value, dict):
        raise PayloadError(field, f"must be a JSON object (a dict), got {type(value).__name__}")
    text = _fast_json(value)
    if text is None:
        _walk(value, field)  # names the field at fault
        # Nothing was wrong: the suspicion came from a literal backslash-u0000 in a string.
        text = _ENCODER.encode(value)
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > limit:
        raise PayloadError(field, f"is {size} bytes, over the limit of {limit} bytes")
    return text


def value_json(field: str, value: Any, limit: int) -> str:
    """Any JSON value (a result, a progress report) as JSON text: refuses what is not
    JSON (naming the type), nested deeper than MAX_DEPTH, or over `limit` bytes."""
    if not _within_depth(value):
        raise PayloadError(field, f"nested deeper than {MAX_DEPTH} levels")
    try:
        text = _ENCODER.encode(value)
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise PayloadError(field, f"is not JSON-serialisable ({exc})") from None
    if "\\u0000" in text:
        raise PayloadError(field, "holds a NUL character, which PostgreSQL's jsonb refuses")
    if size > limit:
        raise PayloadError(field, f"is {size} bytes of JSON text, over the limit of {limit} "
                                  "bytes")
    return text


def load_args(text: str | None, size: int, limit: int = MAX_ARGS_BYTES,
              field: str = "args") -> Any:
    """Decode a job's args from their JSON text, as a worker's executor thread does.

    Refuses (PayloadError) text that is missing or over `limit` bytes (the claim does not
    even load it), undecodable, or nested deeper than MAX_DEPTH: Python's decoder raises
    RecursionError near 1,000 levels, and deep values break the code that walks them."""
    if text is None or size > limit:
        raise PayloadError(field, f"{size} bytes of JSON text, over the limit of {limit} "
                                  "bytes (not loaded)")
    try:
        value = json.loads(text)
    except RecursionError:
        raise PayloadError(field, f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise PayloadError(field, f"not valid JSON ({exc})") from None
    if not _within_depth(value):
        raise PayloadError(field, f"nested deeper than {MAX_DEPTH} levels")
    return value


def _within_depth(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Iterative, like _walk: a decoded value of any depth cannot blow the stack."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth >= limit and item:
            return False
        stack.extend((child, depth + 1) for child in item)
    return True


# C0 and C1 controls and DEL: names are printed by the CLI and the web UI.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def name(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise PayloadError(field, f"must be a string, got {type(value).__name__}")
    return _checked_name(field, value)


# A bulk enqueue repeats the same few task and queue names thousands of times.
@functools.lru_cache(maxsize=1024)
def _checked_name(field: str, value: str) -> str:
    limit = NAME_LIMITS[field]
    if not value or not value.strip():
        raise PayloadError(field, "must not be empty")
    if len(value) > limit:
        raise PayloadError(field, f"is {len(value)} characters, over the limit of {limit}")
    if _CONTROL.search(value):
        raise PayloadError(field, "must not contain control characters")
    _check_text(value, field)
    return value


def bounded_int(field: str, value: Any, bounds: tuple[int, int]) -> int:
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadError(field, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise PayloadError(field, f"{value} is out of range {low}..{high}")
    return value


# A run_at far outside any real schedule is a typo (or 9999-12-31T23:59:59-14:00, which is
# year 10000 in UTC: a row no Python client could read back). Earlier than now runs now.
RUN_AT_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
RUN_AT_LATEST = datetime(3000, 1, 1, tzinfo=UTC)


def run_at(value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise PayloadError("run_at", f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise PayloadError("run_at", "must be timezone-aware (a naive time is ambiguous)")
    if not RUN_AT_EARLIEST <= value < RUN_AT_LATEST:
        raise PayloadError("run_at", f"{value.isoformat()} is outside the accepted range "
                                     f"{RUN_AT_EARLIEST:%Y-%m-%d} to {RUN_AT_LATEST:%Y-%m-%d} UTC")
    return value


def delay_seconds(value: Any) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PayloadError("delay", "must be a number of seconds or a timedelta")
    if value < 0:
        raise PayloadError("delay", "must not be negative")
    # The same bound as run_at: a delay past it is a typo, and PostgreSQL would refuse the
    # time it makes without saying which argument was wrong.
    if value > (RUN_AT_LATEST - datetime.now(UTC)).total_seconds():
        raise PayloadError("delay", f"{value:g} seconds ends after {RUN_AT_LATEST:%Y-%m-%d} "
                                    "UTC, the latest run_at accepted")
    return float(value)
