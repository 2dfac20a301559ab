"""Cron expressions: strict validation and fire-time arithmetic in a schedule's time zone.

Syntax. Five fields, ``minute hour day-of-month month day-of-week``, or six fields with
SECONDS FIRST: ``second minute hour day-of-month month day-of-week``. Each field is a
comma list (at most 100 items) of ``*``, ``N`` or ``N-M`` (N <= M), each optionally
followed by ``/STEP``. Months may be written ``jan``-``dec`` and weekdays ``sun``-``sat``;
weekday 0 and 7 both mean Sunday. The aliases ``@yearly @annually @monthly @weekly
@daily @midnight @hourly`` are accepted. Extensions of other cron dialects (``L``, ``W``,
``#``, ``?``, ``H``, ``@reboot``, wrap-around ranges like ``22-2``) are rejected. When both
day-of-month and day-of-week are restricted, a day matches if EITHER matches (Vixie cron).

Validation never expands a field: every number is checked against its field's bounds
before croniter sees the expression, so ``0-99999999 * * * *`` costs microseconds.

Daylight saving time. Fire times are computed on the schedule's wall clock and then mapped
to real instants:

* Expressions whose hour field is restricted (``30 2 * * *``, ``0 */6 * * *``) fire once
  per matching wall-clock time. A wall-clock time that does not exist because the clocks
  jump forward fires ONCE at the first real instant after the gap (02:30 in Berlin on
  2026-03-29 runs at 03:00 CEST = 01:00 UTC): the run is shifted, never skipped. A
  wall-clock time that occurs twice because the clocks go back fires ONCE, at its first
  occurrence (02:30 on 2026-10-25 in Berlin runs at 02:30 CEST = 00:30 UTC). Several
  times inside one gap collapse into that single shifted run.
* Expressions whose hour field is ``*`` (``*/15 * * * *``) follow real elapsed time: they
  fire at every real instant whose local time matches, so the repeated hour is not
  skipped and the missing hour produces nothing, and the interval between runs stays
  15 real minutes across both transitions.

croniter 7 on its own shifts gap times forward the same way but fires a fixed-hour
schedule TWICE in the repeated hour; the wrapper below corrects that by asking croniter
only for naive wall-clock times and doing the zone mapping itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

MAX_EXPRESSION_LENGTH = 200
MAX_LIST_ITEMS = 100

ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
# February counts 29 days: an expression for Feb 29 is rare but does fire in leap years.
_DAYS_IN_MONTH = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


class CronError(ValueError):
    """A cron expression or time zone that pgfleet refuses, with the reason."""


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] stands for low + i


_SECOND = _FieldSpec("second", 0, 59)
_MINUTE = _FieldSpec("minute", 0, 59)
_HOUR = _FieldSpec("hour", 0, 23)
_DAY_OF_MONTH = _FieldSpec("day-of-month", 1, 31)
_MONTH = _FieldSpec("month", 1, 12, tuple(_MONTH_NAMES))
_DAY_OF_WEEK = _FieldSpec("day-of-week", 0, 7, tuple(_DAY_NAMES))
_FIVE_FIELDS = (_MINUTE, _HOUR, _DAY_OF_MONTH, _MONTH, _DAY_OF_WEEK)

_ITEM = re.compile(r"(?P<base>\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(?P<step>[0-9]+))?")


@dataclass(frozen=True)
class _Parsed:
    """A validated expression: croniter's spelling plus the facts the DST logic needs."""

    croniter_expr: str
    has_seconds: bool
    every_hour: bool


# --------------------------------------------------------------------------- validation


def validate_cron(expr: str) -> None:
    """Raise CronError unless `expr` is a cron expression pgfleet accepts (see module doc)."""
    _parse(expr)


def _parse(expr: str) -> _Parsed:
    if not isinstance(expr, str):
        raise CronError("expected a cron expression as a string")
    if len(expr) > MAX_EXPRESSION_LENGTH:
        raise CronError(f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    text = expr.strip().lower()
    if text.startswith("@"):
        if text not in ALIASES:
            known = " ".join(ALIASES)
            raise CronError(f"unknown alias {text!r}; expected one of {known}")
        text = ALIASES[text]
    fields = text.split()
    specs = _specs_for(len(fields))
    values = [_field_values(field, spec) for field, spec in zip(fields, specs, strict=True)]
    by_name = dict(zip((spec.name for spec in specs), values, strict=True))
    _check_can_fire(fields[-1], by_name["day-of-month"], by_name["month"])
    has_seconds = len(fields) == 6
    # croniter wants seconds LAST; pgfleet documents them FIRST (like Quartz and Spring).
    ordered = " ".join([*fields[1:], fields[0]] if has_seconds else fields)
    # Only now, with every number in bounds, may croniter expand the fields; it is the
    # engine that computes fire times, so it must agree the expression is valid.
    if not croniter.is_valid(ordered):
        raise CronError("croniter does not accept this expression")
    return _Parsed(ordered, has_seconds, len(by_name["hour"]) == 24)


def _specs_for(count: int) -> tuple[_FieldSpec, ...]:
    if count == 5:
        return _FIVE_FIELDS
    if count == 6:
        return (_SECOND, *_FIVE_FIELDS)
    raise CronError(
        f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds "
        f"first, got {count}"
    )


def _field_values(field: str, spec: _FieldSpec) -> set[int]:
    """Check one field and return the values it allows (bounded: at most 60 of them)."""
    items = field.split(",")
    if len(items) > MAX_LIST_ITEMS:
        raise CronError(f"{spec.name} has more than {MAX_LIST_ITEMS} list items")
    allowed: set[int] = set()
    for item in items:
        allowed |= _item_values(item, spec)
    return allowed


def _item_values(item: str, spec: _FieldSpec) -> set[int]:
    match = _ITEM.fullmatch(item)
    if match is None:
        raise CronError(_bad_item_message(item, spec))
    low, high = _item_range(match.group("base"), spec)
    step = 1
    if match.group("step") is not None:
        step = _bounded(match.group("step"), spec, f"{spec.name} step", 1, spec.high)
        # "5/15" means "from 5 to the end of the field, every 15" as in Vixie cron.
        if match.group("base") != "*" and "-" not in match.group("base"):
            high = spec.high
    return set(range(low, high + 1, step))


def _item_range(base: str, spec: _FieldSpec) -> tuple[int, int]:
    if base == "*":
        return spec.low, spec.high
    first, _, last = base.partition("-")
    low = _value(first, spec)
    high = _value(last, spec) if last else low
    if low > high:
        raise CronError(f"{spec.name} range {base} runs backwards; write the low end first")
    return low, high


def _value(token: str, spec: _FieldSpec) -> int:
    if token.isdigit():
        return _bounded(token, spec, spec.name, spec.low, spec.high)
    if token in spec.names:
        return spec.low + spec.names.index(token)
    symbol = _unsupported_symbol(token)
    if symbol:
        raise CronError(f"{spec.name} uses {symbol!r}, which pgfleet does not support")
    raise CronError(f"{spec.name} value {token!r} is not a number or a known name")


def _bounded(token: str, spec: _FieldSpec, what: str, low: int, high: int) -> int:
    # Compare the digit count first so a 150-digit number is never even converted.
    number = int(token) if len(token) <= 4 else high + 1
    if not low <= number <= high:
        raise CronError(f"{what} {_short(token)} is out of range {low}-{high}")
    return number


def _bad_item_message(item: str, spec: _FieldSpec) -> str:
    symbol = _unsupported_symbol(item)
    if symbol:
        return (
            f"{spec.name} uses {symbol!r}, which pgfleet does not support "
            "(only numbers, names, '*', '-', '/' and ',')"
        )
    if item.startswith("*/") or "/" in item:
        return f"{spec.name} step in {_short(item)!r} must be a whole number of at least 1"
    return f"{spec.name} item {_short(item)!r} is not valid cron syntax"


def _unsupported_symbol(item: str) -> str | None:
    """Name the extension of another cron dialect that `item` uses, if any."""
    for symbol in ("#", "?"):
        if symbol in item:
            return symbol
    if re.fullmatch(r"l|lw|\d+l|\d+w|[a-z]{3}l|l-\d+", item):
        return "L" if "l" in item else "W"
    if item.startswith("h"):
        return "H"
    return None


def _short(text: str) -> str:
    return text if len(text) <= 12 else text[:12] + "..."


def _check_can_fire(dow_field: str, days: set[int], months: set[int]) -> None:
    # With a restricted weekday the day matches by weekday as well (OR), so it always fires.
    # As in Vixie cron, a weekday field starting with "*" counts as unrestricted.
    if not dow_field.startswith("*"):
        return
    if any(day <= _DAYS_IN_MONTH[month - 1] for day in days for month in months):
        return
    month_list = ",".join(str(m) for m in sorted(months))
    day_list = ",".join(str(d) for d in sorted(days))
    raise CronError(
        f"day-of-month {day_list} never occurs in month {month_list}, so it would never fire"
    )


def validate_timezone(name: str) -> ZoneInfo:
    """Return the IANA zone `name`, or raise CronError("unknown time zone 'X'")."""
    if not isinstance(name, str) or not name or len(name) > 64 or name != name.strip():
        raise CronError(f"unknown time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        # ValueError/OSError: paths like "../x" or names the tz database cannot open.
        raise CronError(f"unknown time zone {name!r}") from exc


# ------------------------------------------------------------------------- fire times


def fire_times_after(expr: str, tz_name: str, after: datetime, count: int) -> list[datetime]:
    """Return the next `count` fire instants strictly after `after`, as UTC datetimes."""
    _require_aware(after)
    parsed = _parse(expr)
    if count <= 0:
        return []
    zone = validate_timezone(tz_name)
    local = after.astimezone(zone)
    start = local.replace(tzinfo=None, fold=0)
    if local.fold == 0 and _fold_size(start, zone):
        # Inside the first pass of a repeated hour: the second pass of EARLIER wall times
        # still lies ahead in real time, so begin the wall-clock walk one fold earlier.
        start -= _fold_size(start, zone)
    found: list[datetime] = []
    for wall in _walls(parsed, start, forward=True):
        candidates = _instants(wall, zone, parsed.every_hour)
        found.extend(t for t in candidates if t > after and t not in found)
        found.sort()
        # Later wall times never map before this one's first instant, so the walk may stop.
        if len(found) >= count and candidates and candidates[0] > found[count - 1]:
            break
    return found[:count]


def previous_fire_time(expr: str, tz_name: str, at: datetime) -> datetime | None:
    """Return the latest fire instant at or before `at` (UTC), or None if there is none."""
    _require_aware(at)
    parsed = _parse(expr)
    zone = validate_timezone(tz_name)
    local = at.astimezone(zone)
    wall_at = local.replace(tzinfo=None, fold=0)
    # croniter steps back strictly before its start; start one second later to include `at`.
    start = wall_at.replace(microsecond=0) + timedelta(seconds=1)
    if local.fold == 1:
        # In the second pass of a repeated hour, first-pass instants of LATER wall times
        # already happened, so the walk must begin one fold later.
        start += _fold_size(wall_at, zone)
    best: datetime | None = None
    for wall in _walls(parsed, start, forward=False):
        candidates = _instants(wall, zone, parsed.every_hour)
        for instant in candidates:
            if instant <= at and (best is None or instant > best):
                best = instant
        if best is not None and candidates and candidates[-1] <= best:
            return best
    return best


def _require_aware(moment: datetime) -> None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("expected a time-zone-aware datetime")


def _walls(parsed: _Parsed, start: datetime, forward: bool) -> Iterator[datetime]:
    """Yield naive wall-clock matches; naive input keeps croniter out of DST handling."""
    iterator = croniter(parsed.croniter_expr, start)
    # A valid expression fires at least once in 8 years (Feb 29 across 2100), so a walk
    # this long only ends early on the far edge of the calendar.
    for _ in range(10_000_000):
        try:
            wall = iterator.get_next(datetime) if forward else iterator.get_prev(datetime)
        except (ValueError, OverflowError):
            return
        yield wall


def _fold_size(wall: datetime, zone: ZoneInfo) -> timedelta:
    """How much earlier the second pass of `wall` is, or zero if `wall` is not repeated."""
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    if first is None or second is None or first <= second:
        return timedelta(0)
    return first - second


def _instants(wall: datetime, zone: ZoneInfo, every_hour: bool) -> list[datetime]:
    """Map one wall-clock match to the real instants (UTC, ascending) at which it fires."""
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return [first.astimezone(UTC)]
    if _exists(first):
        if every_hour:
            return [first.astimezone(UTC), second.astimezone(UTC)]
        return [first.astimezone(UTC)]
    if every_hour:
        return []
    return [_end_of_gap(second.astimezone(UTC), first.astimezone(UTC), zone)]


def _exists(aware: datetime) -> bool:
    round_trip = aware.astimezone(UTC).astimezone(aware.tzinfo)
    return round_trip.replace(tzinfo=None, fold=0) == aware.replace(tzinfo=None, fold=0)


def _end_of_gap(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """Binary-search the transition instant (whole seconds) between two UTC instants."""
    before = low.astimezone(zone).utcoffset()
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) // 2
        middle = middle.replace(microsecond=0)
        if middle.astimezone(zone).utcoffset() == before:
            low = middle
        else:
            high = middle
    return high
