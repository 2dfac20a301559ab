"""The pages: overview, jobs, one job, schedules. Each reads, none writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from pgfleet.core import payload
from pgfleet.errors import PayloadError
from pgfleet.sql import fleet as fleet_store
from pgfleet.status import fleet as status
from pgfleet.web import forms, lists as queries
from pgfleet.web.paging import Page, scan_windows, served_by_index
from pgfleet.web.rendering import PRETTY_LIMIT, busy, clip, pretty, render

STATES = ("queued", "running", "succeeded", "dead", "cancelled")
RECENT_RUNS = 5
# A job retried without end (or a hand-written row) can carry thousands of errors: the
# page shows the latest ones, each cut to PRETTY_LIMIT, and says how many it left out.
ATTEMPTS_SHOWN = 50


def overview(request: Request) -> Response:
    with request.app.state.pool.connection() as conn:
        data = status.gather(conn)
    return render(request, "overview.html", title="Overview", live=True, **data)


def jobs(request: Request) -> Response:
    params = request.query_params
    problems: list[str] = []
    where = queries.JobFilter(
        state=_checked(problems, forms.choice, params.get("state"), STATES, "state"),
        queue=_checked(problems, forms.name, params.get("queue"), "queue"),
        task=_checked(problems, forms.name, params.get("task"), "task"),
        text=_checked(problems, forms.search, params.get("q")),
    )
    job_id = _checked(problems, forms.whole_number, params.get("id"), "id")
    before = _checked(problems, forms.whole_number, params.get("before"), "before")
    if problems:
        return render(request, "message.html", 400, title="Bad filter", live=False,
                      message="; ".join(problems))
    searches = request.app.state.searches
    if where.text and not searches.acquire(blocking=False):
        return busy(request, "Other text searches are running; each reads whole rows.")
    try:
        return _jobs_page(request, where, job_id, before)
    finally:
        if where.text:
            searches.release()


def _jobs_page(request: Request, where: queries.JobFilter, job_id: int | None,
               before: int | None) -> Response:
    limit = request.app.state.settings.page_size
    with request.app.state.pool.connection() as conn:
        if job_id is not None:
            page = Page(queries.jobs_page(conn, where, before=job_id + 1, floor=job_id,
                                          limit=limit), 0, None)
        elif served_by_index(where):
            page = Page(queries.jobs_page(conn, where, before=before, floor=0,
                                          limit=limit + 1), 0, None)
        else:
            top = before if before is not None else fleet_store.max_job_id(conn) + 1
            page = scan_windows(conn, where, top, limit)
    filters = {"state": where.state or "", "queue": where.queue or "",
               "task": where.task or "", "q": where.text or "",
               "id": str(job_id) if job_id else ""}
    older = page.older_cursor(limit)
    return render(
        request, "jobs.html", title="Jobs", live=before is None, rows=page.rows[:limit],
        filters=filters, states=STATES, searched=page.searched,
        older_url=_jobs_url(filters, older) if older else None,
        newest_url=_jobs_url(filters, None) if before is not None else None,
    )


def _jobs_url(filters: dict[str, str], before: int | None) -> str:
    query = {k: v for k, v in filters.items() if v}
    if before is not None:
        query["before"] = str(before)
    return "/jobs" + (f"?{urlencode(query)}" if query else "")


def _checked(problems: list[str], check: Callable[..., Any], *args: Any) -> Any:
    """check(*args), or None with its complaint added to `problems`: the page names every
    bad field at once."""
    try:
        return check(*args)
    except forms.BadInput as exc:
        problems.append(str(exc))
        return None


def job(request: Request) -> Response:
    try:
        job_id = forms.whole_number(request.path_params["job_id"], "job id")
    except forms.BadInput:
        job_id = None
    if job_id is None:
        return render(request, "message.html", 404, title="No such job", live=False,
                      message="no job has that id: job ids are positive whole numbers")
    with request.app.state.pool.connection() as conn:
        row = queries.job(conn, job_id, clip=PRETTY_LIMIT, attempts=ATTEMPTS_SHOWN)
    if row is None:
        return render(request, "message.html", 404, title="No such job", live=False,
                      message=f"job {job_id} does not exist (it may have been pruned)")
    if row["args_length"] > PRETTY_LIMIT:
        args = f"{row['args']}\n… ({row['args_length'] - PRETTY_LIMIT} more characters)"
    else:
        args = pretty(_decoded(row["args"], "args"))
    errors = _decoded(row["errors"], "errors") if row["errors"] is not None else []
    attempts = attempt_errors(errors)
    return render(request, "job.html", title=f"Job {job_id}", live=True, job=row, args=args,
                  attempts=attempts,
                  attempts_hidden=max(0, (row["error_count"] or 0) - len(attempts)))


def _decoded(text: str, field: str) -> Any:
    """JSON text as its value, or the text itself when it cannot be decoded safely (cut
    short, nested too deep): any row can be shown."""
    try:
        return payload.load_args(text, len(text), len(text), field=field)
    except PayloadError:
        return text


def attempt_errors(errors: Any) -> list[dict[str, Any]]:
    """The `errors` column as rows to show; a hand-written value that is not a list of
    {attempt, at, error} objects is shown whole rather than dropped."""
    if not isinstance(errors, list):
        return [{"attempt": "?", "at": "", "error": pretty(errors)}]
    shown = []
    for entry in errors:
        if isinstance(entry, dict):
            error = entry.get("error", entry)
            shown.append({"attempt": clip(str(entry.get("attempt", "?"))),
                          "at": clip(str(entry.get("at", ""))),
                          "error": clip(error) if isinstance(error, str) else pretty(error)})
        else:
            shown.append({"attempt": "?", "at": "", "error": pretty(entry)})
    return shown


def schedules(request: Request) -> Response:
    with request.app.state.pool.connection() as conn:
        names = queries.schedule_names(conn)
        runs = queries.schedule_recent_runs(conn, names, RECENT_RUNS)
        now = fleet_store.db_now(conn)
    return render(request, "schedules.html", title="Schedules", live=True, runs=runs, now=now)
