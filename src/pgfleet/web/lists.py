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
    return {
        "through": BIGINT_MAX if before is None else before - 1, "floor": floor,
        "limit": limit, "state": where.state, "queue": where.queue, "task": where.task,
        "pattern": like_pattern(where.text) if where.text else None,
    }


def newest_id_below(conn: Conn, below: int) -> int | None:
    row = conn.execute(_statements()["newest_id_below"], {"below": below}).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def job(conn: Conn, job_id: int, *, clip: int, attempts: int) -> dict[str, Any] | None:
    """One job for its page, its big fields clipped to `clip` characters in the database
    and its errors cut to the latest `attempts` (see sql/web.sql)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_statements()["job"], {"id": job_id, "clip": clip,
                                                  "attempts": attempts}).fetchone()


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
