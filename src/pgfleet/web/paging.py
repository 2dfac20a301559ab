"""Which jobs a page of /jobs reads, newest first, keyset-paged on the id.

An index read in id order serves the unfiltered page, running jobs, and dead or cancelled
jobs (of one queue or all; the jobs_ended_badly indexes): page 1,000 costs what page 1
does. Any other filter (queue, task, text, a common state) reads the primary key one window
of ids at a time, sized to the time left, until the page is full, the oldest job is reached
or the time budget is spent: a rare match costs more clicks on "older", never an unbounded
scan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pgfleet.sql.store import Conn
from pgfleet.web import lists as queries

# The windows of one page together take about this long.
WINDOW_BUDGET = 0.1
# The first window is small, so a page on a cold cache or a loaded host cannot overshoot
# by much; later ones are as wide as the pace of the first says fits. A text search turns
# each row's args into text, so it starts smaller.
FIRST_WINDOW = 10_000
TEXT_FIRST_WINDOW = 2_000
MIN_WINDOW = 1_000
MAX_WINDOW = 2_000_000
# Each window at most this many times the last: a pace read on cached rows is optimistic.
GROWTH = 10
# Of the time left, plan to use this share: the next window's rows may be colder.
SAFETY = 0.8
# States rare enough to have their own partial indexes (dead, cancelled: 0012).
INDEXED_STATES = ("running", "dead", "cancelled")


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    floor: int  # the lowest id searched; 0 when the search reached the oldest job
    searched: tuple[int, int] | None  # the id range read, when it was windowed

    def older_cursor(self, limit: int) -> int | None:
        if len(self.rows) > limit:
            return int(self.rows[limit - 1]["id"])
        return self.floor if self.floor > 0 else None


def served_by_index(where: queries.JobFilter) -> bool:
    """No filter (the primary key in order), or a state with an index of its own
    (optionally of one queue) that keeps the page in id order."""
    if where.task or where.text:
        return False
    if where.state is None:
        return where.queue is None
    return where.state in INDEXED_STATES


def scan_windows(conn: Conn, where: queries.JobFilter, top: int, limit: int) -> Page:
    """Matches below `top`, newest first, one window of ids at a time."""
    size = TEXT_FIRST_WINDOW if where.text else FIRST_WINDOW
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    before = top
    while True:
        floor = max(before - size, 0)
        rows += queries.jobs_page(conn, where, before=before, floor=floor,
                                  limit=limit + 1 - len(rows))
        if len(rows) > limit or floor == 0:
            break
        size = next_window(top - floor, time.monotonic() - started, size)
        if size < MIN_WINDOW:
            break
        newest = queries.newest_id_below(conn, floor)
        if newest is None:  # nothing older: the search reached the oldest job
            floor = 0
            break
        before = newest + 1
    # A full page covers down to its last row only: "older" starts right below it, so
    # the ids under it are the next page's to search and to name.
    low = int(rows[limit - 1]["id"]) if len(rows) > limit else floor
    return Page(rows, floor, (low, top))


def next_window(ids_read: int, spent: float, last: int) -> int:
    """The ids the time left can read at the pace so far (0 once the budget is spent)."""
    left = WINDOW_BUDGET - spent
    if left <= 0:
        return 0
    pace = ids_read / max(spent, 1e-4)
    return int(min(pace * left * SAFETY, last * GROWTH, MAX_WINDOW))
