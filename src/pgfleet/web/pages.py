"""The pages: overview, jobs, one job, schedules. Each reads, none writes."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from pgfleet import status, store
from pgfleet.web import queries
from pgfleet.web.rendering import pretty, render

STATES = ("queued", "running", "succeeded", "dead", "cancelled")
# States whose partial index (with or without a queue) finds their rows; any other filter
# is served by the primary key alone, so it gets a bounded window of ids per page.
INDEXED_STATES = ("queued", "running", "dead")
SEARCH_WINDOW = 100_000
RECENT_RUNS = 5


def overview(request: Request) -> Response:
    with request.app.state.pool.connection() as conn:
        data = status.gather(conn)
    return render(request, "overview.html", title="Overview", live=True, **data)


def jobs(request: Request) -> Response:
    params = request.query_params
    problems: list[str] = []
    where = queries.JobFilter(
        state=_choice(params.get("state"), STATES, "state", problems),
        queue=params.get("queue") or None,
        task=params.get("task") or None,
        text=params.get("q") or None,
    )
    job_id = _positive(params.get("id"), "id", problems)
    before = _positive(params.get("before"), "before", problems)
    if problems:
        return render(request, "message.html", 400, title="Bad filter", live=False,
                      message="; ".join(problems))
    limit = request.app.state.settings.page_size
    with request.app.state.pool.connection() as conn:
        window = _window(conn, where, job_id, before)
        rows = queries.jobs_page(conn, where, before=window[1], floor=window[0],
                                 limit=limit + 1)
    older = _older_cursor(rows, limit, window)
    filters = {"state": where.state or "", "queue": where.queue or "",
               "task": where.task or "", "q": where.text or "",
               "id": str(job_id) if job_id else ""}
    return render(
        request, "jobs.html", title="Jobs", live=before is None, rows=rows[:limit],
        filters=filters, states=STATES, window=window if window[0] > 0 else None,
        older_url=_jobs_url(filters, older) if older else None,
        newest_url=_jobs_url(filters, None) if before is not None else None,
    )


def _window(conn: store.Conn, where: queries.JobFilter, job_id: int | None,
            before: int | None) -> tuple[int, int | None]:
    """The ids [floor, before) this page may read."""
    if job_id is not None:
        return job_id, job_id + 1
    unindexed = (where.task or where.text or where.state not in (None, *INDEXED_STATES)
                 or (where.queue and where.state is None))
    if not unindexed:
        return 0, before
    top = before if before is not None else store.max_job_id(conn) + 1
    return max(top - SEARCH_WINDOW, 0), top


def _older_cursor(rows: list[dict[str, Any]], limit: int,
                  window: tuple[int, int | None]) -> int | None:
    if len(rows) > limit:
        return int(rows[limit - 1]["id"])
    floor = window[0]
    # A windowed page that ran out of matches: the next page searches the ids below it.
    return floor if floor > 1 and window[1] != floor + 1 else None


def _jobs_url(filters: dict[str, str], before: int | None) -> str:
    query = {k: v for k, v in filters.items() if v}
    if before is not None:
        query["before"] = str(before)
    return "/jobs" + (f"?{urlencode(query)}" if query else "")


def _choice(value: str | None, allowed: tuple[str, ...], name: str,
            problems: list[str]) -> str | None:
    if not value:
        return None
    if value not in allowed:
        problems.append(f"{name} must be one of {', '.join(allowed)}")
        return None
    return value


def _positive(value: str | None, name: str, problems: list[str]) -> int | None:
    if not value:
        return None
    if not value.isdigit() or not 0 < int(value) <= queries.BIGINT_MAX:
        problems.append(f"{name} must be a positive whole number")
        return None
    return int(value)


def job(request: Request) -> Response:
    job_id: int = request.path_params["job_id"]
    with request.app.state.pool.connection() as conn:
        row = store.get_job(conn, job_id) if job_id <= queries.BIGINT_MAX else None
    if row is None:
        return render(request, "message.html", 404, title="No such job", live=False,
                      message=f"job {job_id} does not exist (it may have been pruned)")
    return render(request, "job.html", title=f"Job {job_id}", live=True, job=row,
                  attempts=attempt_errors(row["errors"]))


def attempt_errors(errors: Any) -> list[dict[str, Any]]:
    """The `errors` column as rows to show; a hand-written value that is not a list of
    {attempt, at, error} objects is shown whole rather than dropped."""
    if not isinstance(errors, list):
        return [{"attempt": "?", "at": "", "error": pretty(errors)}]
    shown = []
    for entry in errors:
        if isinstance(entry, dict):
            shown.append({"attempt": entry.get("attempt", "?"), "at": entry.get("at", ""),
                          "error": entry.get("error", pretty(entry))})
        else:
            shown.append({"attempt": "?", "at": "", "error": pretty(entry)})
    return shown


def schedules(request: Request) -> Response:
    with request.app.state.pool.connection() as conn:
        names = queries.schedule_names(conn)
        runs = queries.schedule_recent_runs(conn, names, RECENT_RUNS)
        now = store.db_now(conn)
    return render(request, "schedules.html", title="Schedules", live=True, runs=runs, now=now)
