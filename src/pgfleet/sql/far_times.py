"""Reading timestamps Python's datetime cannot hold.

PostgreSQL stores 'infinity', '-infinity', years past 9999 and years BC; psycopg refuses to
load them, so one such value written straight into a row would fail every listing that
reads it. A connection that shows rows to a person (`pgfleet jobs`, the web UI) loads them
as a FarTime instead: a datetime clamped to the nearest one Python has (so comparisons and
arithmetic still work) that prints as PostgreSQL wrote it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader

EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


class FarTime(datetime):
    """A timestamp beyond datetime's range; `text` is PostgreSQL's own spelling of it."""

    text: str

    @classmethod
    def beyond(cls, text: str, past: bool) -> FarTime:
        edge = EARLIEST if past else LATEST
        moment = cls(edge.year, edge.month, edge.day, edge.hour, edge.minute, edge.second,
                     edge.microsecond, tzinfo=UTC)
        moment.text = text
        return moment

    def __str__(self) -> str:
        return self.text

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return self.text


def _is_past(text: str) -> bool:
    return text.startswith("-") or text.endswith(" BC") or " BC" in text


class FarTimestamptzLoader(TimestamptzLoader):
    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:
            text = bytes(data).decode("ascii", "replace")
            return FarTime.beyond(text, _is_past(text))


class FarTimestamptzBinaryLoader(TimestamptzBinaryLoader):
    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:
            # The binary form is microseconds since 2000-01-01; infinities are int64 bounds.
            micros = int.from_bytes(bytes(data), "big", signed=True)
            past = micros < 0
            text = ("-infinity" if micros == -2**63 else "infinity" if micros == 2**63 - 1
                    else "before year 1" if past else "after year 9999")
            return FarTime.beyond(text, past)


def accept_far_times(conn: psycopg.Connection[Any]) -> None:
    """Load every timestamptz of this connection, far ones as FarTime."""
    conn.adapters.register_loader("timestamptz", FarTimestamptzLoader)
    conn.adapters.register_loader("timestamptz", FarTimestamptzBinaryLoader)
