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
from pgfleet.web import charts, forms, lists as queries
from pgfleet.web.actions import BULK_MATCHING
from pgfleet.web.paging import Page, scan_windows, served_by_index
from pgfleet.web.rendering import PRETTY_LIMIT, busy, clip, pretty, render

STATES = queries.STATES
RECENT_RUNS = 5
# A job retried without end (or a hand-written row) can carry thousands of errors: the
# page shows the latest ones, each cut to PRETTY_LIMIT, and says how many it left out.
ATTEMPTS_SHOWN = 50


# The running jobs a queue page lists, and those each worker of the hosts page shows.
RUNNING_SHOWN = 20
HELD_SHOWN = 10


def _charts(activity: queries.Activity, prefix: str) -> dict[str, Any]:
    return {"throughput": charts.throughput(activity, f"{prefix}-throughput"),
            "wait": charts.durations(activity, "wait", f"{prefix}-wait"),
            "run": charts.durations(activity, "run", f"{prefix}-run"),
            "activity": activity}


def overview(request: Request) -> Response:
    with request.app.state.pool.connection() as conn:
        data = status.gather(conn)
        activity = queries.activity(conn, None)
    processes = sum(len(s["children"]) + 1 for h in data["hosts"] for s in h["supervisors"])
    processes += sum(len(h["unattached"]) for h in data["hosts"])
    return render(request, "overview.html", title="Overview", live=True, **data,
                  charts=_charts(activity, "fleet"), process_count=processes,
                  activity=activity)


def queue(request: Request) -> Response:
    name = request.path_params["name"]
    try:
        forms.name(name, "queue")
    except forms.BadInput as exc:
        return render(request, "message.html", 400, title="Bad queue name", live=False,
                      message=str(exc))
    with request.app.state.pool.connection() as conn:
        data = status.gather(conn)
        activity = queries.activity(conn, name)
        running = queries.running_jobs(conn, name, RUNNING_SHOWN)
    found = [q for q in data["queues"] if q["queue"] == name]
    if not found and not activity.rows_read:
        return render(request, "message.html", 404, title="No such queue", live=False,
                      message=f"no job or worker of queue {name!r} is known (it may have "
                              "been pruned)")
    counts = found[0] if found else {
        "queue": name, "waiting": 0, "scheduled": 0, "running": 0, "dead": 0,
        "oldest_waiting_age": None, "finished_last_minute": 0, "paused": False,
        "failed_on": []}
    limits = next((f for f in data["limits"] if f["queue"] == name), None)
    workers = [{**child, "host": h["host"]} for h in data["hosts"] for sup in h["supervisors"]
               for child in sup["children"] if child["queue"] == name]
    workers += [{**p, "host": h["host"]} for h in data["hosts"] for p in h["unattached"]
                if p["queue"] == name]
    return render(request, "queue.html", title=f"Queue {name}", live=True, q=counts,
                  limits=limits, running=running, running_shown=RUNNING_SHOWN,
                  workers=workers, charts=_charts(activity, "queue"), activity=activity)


def hosts(request: Request) -> Response:
    with request.app.state.pool.connection() as conn, conn.transaction():
        rows = fleet_store.processes(conn)
        workers = [r["id"] for r in rows if r["kind"] == "worker"]
        held = queries.held_jobs(conn, workers, HELD_SHOWN)
    return render(request, "hosts.html", title="Hosts", live=True,
                  hosts=status.hosts_of(rows), held=held, held_shown=HELD_SHOWN)


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
        bulk_matching=BULK_MATCHING, older=older,
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
    errors = _decoded(row["errors"], "errors") if row["errors"] is not None else []
    attempts = attempt_errors(errors)
    # For /api/: each JSON field as its value, or its clipped text when too long.
    values = {field: (row[field] if row[f"{field}_length"] > PRETTY_LIMIT
                      else _decoded(row[field], field)) if row[field] is not None else None
              for field in ("args", "meta", "result", "progress")}
    return render(request, "job.html", title=f"Job {job_id}", live=True, job=row,
                  values=values,
                  args=_shown(row, "args"), meta=_shown(row, "meta"),
                  result=_shown(row, "result"), progress=_shown(row, "progress"),
                  result_clipped=(row["result_length"] or 0) > PRETTY_LIMIT,
                  attempts=attempts,
                  attempts_hidden=max(0, (row["error_count"] or 0) - len(attempts)))


def _shown(row: dict[str, Any], field: str) -> str | None:
    """A JSON column as the page shows it: pretty when whole, the start of its text with
    how much was left out when the database clipped it; None for SQL NULL."""
    text, length = row[field], row[f"{field}_length"]
    if text is None:
        return None
    if length > PRETTY_LIMIT:
        return f"{text}\n… ({length - PRETTY_LIMIT} more characters)"
    return pretty(_decoded(text, field))


# A result is at most 1 MiB as the worker stores it; a larger hand-written one is not sent.
DOWNLOAD_LIMIT = 16 * 1024 * 1024


def job_result(request: Request) -> Response:
    """The whole result as a JSON file, for one too long for the page."""
    try:
        job_id = forms.whole_number(request.path_params["job_id"], "job id")
    except forms.BadInput:
        job_id = None
    if job_id is None:
        return render(request, "message.html", 404, title="No such job", live=False,
                      message="no job has that id: job ids are positive whole numbers")
    with request.app.state.pool.connection() as conn:
        text = queries.job_result(conn, job_id, DOWNLOAD_LIMIT)
    if text is None:
        return render(request, "message.html", 404, title="No result", live=False,
                      message=f"job {job_id} has no result (or does not exist)")
    if len(text) > DOWNLOAD_LIMIT:
        return render(request, "message.html", 413, title="Result too large", live=False,
                      message=f"the result of job {job_id} is longer than "
                              f"{DOWNLOAD_LIMIT // (1024 * 1024)} MiB; read it with SQL")
    return Response(text, media_type="application/json", headers={
        "Content-Disposition": f'attachment; filename="job-{job_id}-result.json"'})


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
