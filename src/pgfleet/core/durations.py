"""Human-friendly durations ("1h30m") and sizes ("512MiB") for the configuration file.

Both parsers are pure functions. They accept plain numbers too, because an interpolated
`${VAR}` always arrives as a string and a YAML number arrives as int or float.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

DURATION_HINT = "expected a duration like 30s, 5m, 1h"
SIZE_HINT = "expected a size like 512MiB, 1GiB, 100MB or a number of bytes"

# Longer inputs are never legitimate; the cap keeps regex work trivially bounded.
_MAX_TEXT = 64

_DURATION_UNITS: dict[str, float] = {
    "w": 7 * 86400.0,
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 0.001,
}
# Units must appear largest first ("1h30m", not "30m1h"), each at most once, so every
# accepted string has exactly one obvious reading.
_UNIT_ORDER = ["w", "d", "h", "m", "s", "ms"]
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|w|d|h|m|s)", re.ASCII)
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?", re.ASCII)

_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)", re.ASCII)


def parse_duration(value: object) -> float:
    """Return `value` as seconds: a number of seconds, or text like "500ms", "1h30m"."""
    # bool is an int subclass; `timeout: yes` is a mistake, not one second.
    if isinstance(value, bool):
        raise ValueError(DURATION_HINT)
    if isinstance(value, int | float):
        return _checked_seconds(float(value))
    if isinstance(value, str):
        return _checked_seconds(_parse_duration_text(value.strip()))
    raise ValueError(DURATION_HINT)


def _checked_seconds(seconds: float) -> float:
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(DURATION_HINT)
    return seconds


def _parse_duration_text(text: str) -> float:
    if not text or len(text) > _MAX_TEXT:
        raise ValueError(DURATION_HINT)
    if _PLAIN_NUMBER.fullmatch(text):
        return float(text)
    total = 0.0
    position = 0
    next_allowed = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            raise ValueError(DURATION_HINT)
        rank = _UNIT_ORDER.index(match.group(2))
        if rank < next_allowed:
            raise ValueError(DURATION_HINT)
        next_allowed = rank + 1
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(text):
        raise ValueError(DURATION_HINT)
    return total


def parse_size(value: object) -> int:
    """Return `value` as bytes: an integer, or text like "512MiB", "100MB", "1024"."""
    if isinstance(value, bool):
        raise ValueError(SIZE_HINT)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(SIZE_HINT)
        return value
    if isinstance(value, str):
        return _parse_size_text(value.strip())
    raise ValueError(SIZE_HINT)


def _parse_size_text(text: str) -> int:
    match = _SIZE.fullmatch(text.lower()) if len(text) <= _MAX_TEXT else None
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise ValueError(SIZE_HINT)
    # Decimal keeps "1.5GiB" exact instead of inheriting float rounding.
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
        raise ValueError(SIZE_HINT) from exc
    return int(number * _SIZE_UNITS[match.group(2)])


def format_duration(seconds: float) -> str:
    """Render seconds the way a person would write them in the config ("1h30m", "500ms")."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(DURATION_HINT)
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    parts: list[str] = []
    for unit in ("d", "h", "m", "s"):
        unit_millis = round(_DURATION_UNITS[unit] * 1000)
        count, millis = divmod(millis, unit_millis)
        if count:
            parts.append(f"{count}{unit}")
    if millis:
        parts.append(f"{millis}ms")
    return "".join(parts)
