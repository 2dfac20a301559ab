"""The web UI's read-only queries, one function each, from sql/web.sql."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

from psycopg.rows import dict_row

from pgfleet.sql.store import Conn

_NAMED = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
BIGINT_MAX = 2**63 - 1
# The states a page shows and filters on: the table's, with "scheduled" (queued, run_at
# ahead) apart from "queued" (due now), as on the overview and in `pgfleet status`.
STATES = ("queued", "scheduled", "running", "succeeded", "dead", "cancelled")
# A shown state as the table's state and whether run_at has come (None: either).
STATE_FILTERS: dict[str, tuple[str, bool | None]] = {
    "queued": ("queued", True), "scheduled": ("queued", False)}


@cache
def _statements() -> dict[str, bytes]:
    text = (resources.files("pgfleet") / "sql" / "web.sql").read_text("utf-8")
    _header, *pairs = _NAMED.split(text)
    return {pairs[i]: pairs[i + 1].strip().encode() for i in range(0, len(pairs), 2)}


@dataclass(frozen=True)
class JobFilter:
    state: str | None = None
    queue: str | None = None
    task: str | None = None
    text: str | None = None


def like_pattern(text: str) -> str:
    """A substring match for ILIKE, with the user's % _ and \\ taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def jobs_page(conn: Conn, where: JobFilter, *, before: int | None, floor: int,
              limit: int) -> list[dict[str, Any]]:
    """Jobs with floor <= id < before matching `where`, newest first, at most `limit`."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_statements()["jobs_page"],
                           jobs_page_params(where, before, floor, limit)).fetchall()


def jobs_page_params(where: JobFilter, before: int | None, floor: int,
                     limit: int) -> dict[str, Any]:
    """The statement's parameters; `before` None is past the newest job."""
    state, due = STATE_FILTERS.get(where.state or "", (where.state, None))
    return {
        "through": BIGINT_MAX if before is None else before - 1, "floor": floor,
        "limit": limit, "state": state, "due": due, "queue": where.queue, "task": where.task,
        "pattern": like_pattern(where.text) if where.text else None,
    }


def matching_ids(conn: Conn, where: JobFilter, limit: int) -> list[int]:
    """The newest `limit` ids of jobs matching `where`, over the whole table."""
    params = jobs_page_params(where, None, 0, limit)
    return [int(row[0]) for row in conn.execute(_statements()["matching_ids"],
                                                params).fetchall()]


def newest_id_below(conn: Conn, below: int) -> int | None:
    row = conn.execute(_statements()["newest_id_below"], {"below": below}).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def job(conn: Conn, job_id: int, *, clip: int, attempts: int) -> dict[str, Any] | None:
    """One job for its page, its big fields clipped to `clip` characters in the database
    and its errors cut to the latest `attempts` (see sql/web.sql)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_statements()["job"], {"id": job_id, "clip": clip,
                                                  "attempts": attempts}).fetchone()


def job_result(conn: Conn, job_id: int, limit: int) -> str | None:
    """The result's JSON text, at most limit + 1 characters of it (None: no result)."""
    row = conn.execute(_statements()["job_result"], {"id": job_id, "limit": limit}).fetchone()
    return None if row is None else row[0]


def jobs_page_sql() -> bytes:
    """The statement itself, for EXPLAIN in the tests and the benchmark."""
    return _statements()["jobs_page"]


def schedule_names(conn: Conn) -> list[str]:
    return [row[0] for row in conn.execute(_statements()["schedule_names"]).fetchall()]


@dataclass(frozen=True)
class ScheduleRun:
    fire_time: datetime
    job_id: int | None
    state: str | None


def schedule_recent_runs(conn: Conn, names: Sequence[str],
                         per_schedule: int) -> dict[str, list[ScheduleRun]]:
    rows = conn.execute(_statements()["schedule_recent_runs"],
                        {"names": list(names), "per_schedule": per_schedule}).fetchall()
    runs: dict[str, list[ScheduleRun]] = {name: [] for name in names}
    for name, fire_time, job_id, state in rows:
        runs[name].append(ScheduleRun(fire_time, job_id, state))
    return runs


# A busy hour is charted from at most this many of its newest finished jobs.
ACTIVITY_ROWS = 20_000
MINUTES = 60


@dataclass(frozen=True)
class Minute:
    minutes_ago: int
    succeeded: int
    died: int
    wait_p50: float | None
    wait_p95: float | None
    run_p50: float | None
    run_p95: float | None


@dataclass(frozen=True)
class Activity:
    """The last hour, one Minute per minute (oldest first, empty minutes included)."""

    minutes: list[Minute]
    rows_read: int
    # Seconds back the rows reach; less than an hour when the row bound cut the read.
    reach: float | None

    @property
    def cut_short(self) -> bool:
        return self.rows_read >= ACTIVITY_ROWS


def activity(conn: Conn, queue: str | None) -> Activity:
    rows = conn.execute(_statements()["activity"],
                        {"queue": queue, "rows": ACTIVITY_ROWS}).fetchall()
    found = {int(r[0]): r for r in rows}
    minutes = []
    for ago in range(MINUTES - 1, -1, -1):
        r = found.get(ago)
        minutes.append(Minute(ago, 0, 0, None, None, None, None) if r is None else
                       Minute(ago, int(r[1]), int(r[2]), r[3], r[4], r[5], r[6]))
    rows_read = int(rows[0][7]) if rows else 0
    reach = float(rows[0][8]) if rows and rows[0][8] is not None else None
    return Activity(minutes, rows_read, reach)


def running_jobs(conn: Conn, queue: str | None, limit: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_statements()["running_jobs"],
                           {"queue": queue, "limit": limit}).fetchall()


def held_jobs(conn: Conn, holders: Sequence[str],
              per_worker: int) -> dict[str, list[dict[str, Any]]]:
    held: dict[str, list[dict[str, Any]]] = {}
    with conn.cursor(row_factory=dict_row) as cur:
        for row in cur.execute(_statements()["held_jobs"],
                               {"holders": list(holders), "per_worker": per_worker}):
            held.setdefault(row.pop("holder"), []).append(row)
    return held
