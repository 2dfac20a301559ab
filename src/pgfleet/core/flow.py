"""Flow control of a queue (docs/flow-control.md): its global concurrency, its rate of
starts and the concurrency of each concurrency key, as the config states them and the
database enforces them at claim time."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pgfleet.core.durations import parse_duration

RATE_HINT = 'expected a rate like "100/s", "30/m", "1000/h" or "5/10s"'
# Upper bounds shared with the CHECKs of the pgfleet.queue_limits table.
MAX_RATE = 1_000_000
MAX_RATE_PERIOD = 86400.0
MAX_CONCURRENCY = 100_000

_UNIT_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
# ASCII: without it \d and int() take full-width and other scripts' digits.
_RATE = re.compile(r"(\d{1,7})\s*/\s*(\S{1,16})", re.ASCII)


@dataclass(frozen=True)
class Rate:
    """At most `count` starts in any window of `period` seconds."""

    count: int
    period: float

    def __str__(self) -> str:
        for unit, seconds in _UNIT_PERIODS.items():
            if self.period == seconds:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.period:g}s"


def parse_rate(value: object) -> Rate:
    """`"100/s"` (also /m, /h, or a duration such as /10s) as a Rate."""
    if not isinstance(value, str):
        raise ValueError(RATE_HINT)
    match = _RATE.fullmatch(value.strip())
    if match is None:
        raise ValueError(RATE_HINT)
    count, per = int(match[1]), match[2]
    period = _UNIT_PERIODS.get(per)
    if period is None:
        try:
            period = parse_duration(per)
        except ValueError:
            raise ValueError(RATE_HINT) from None
    if not 1 <= count <= MAX_RATE:
        raise ValueError(f"expected 1 to {MAX_RATE} starts per window, got {count}")
    if not 0 < period <= MAX_RATE_PERIOD:
        raise ValueError("expected a window longer than 0s and at most 1d")
    return Rate(count, period)


@dataclass(frozen=True)
class FlowLimits:
    """The limits one queue's claims obey. key_concurrency applies to jobs enqueued with a
    concurrency_key; it is 1 unless configured."""

    global_concurrency: int | None = None
    rate: Rate | None = None
    key_concurrency: int = 1

    def params(self) -> dict[str, int | float | None]:
        """The claim's and the publication's parameters."""
        return {
            "global_concurrency": self.global_concurrency,
            "rate_limit": self.rate.count if self.rate else None,
            "rate_period": self.rate.period if self.rate else None,
            "key_concurrency": self.key_concurrency,
        }


def describe(limits: FlowLimits) -> str:
    """One line for logs: `global 2, rate 5/s, per key 1`."""
    parts = []
    if limits.global_concurrency is not None:
        parts.append(f"global {limits.global_concurrency}")
    if limits.rate is not None:
        parts.append(f"rate {limits.rate}")
    parts.append(f"per key {limits.key_concurrency}")
    return ", ".join(parts)
