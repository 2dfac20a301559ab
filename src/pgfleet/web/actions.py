"""The actions: each a POST with the CSRF token, first answered by a confirmation page,
then carried out by the same store function as the matching `pgfleet` command."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from pgfleet.sql import store
from pgfleet.web import forms, lists
from pgfleet.web.forms import BadInput, whole_number
from pgfleet.web.rendering import json_response, render
from pgfleet.web.security import CSRF_COOKIE, CSRF_FIELD, VIEWER, csrf_valid

PRUNE_BATCH = 10_000
MAX_HOURS = 24 * 365 * 100
MAX_FORM_BYTES = 16 * 1024
# A form of at most MAX_FORM_BYTES arrives within this long once its head has, or is cut.
BODY_DEADLINE = 10.0
# A form names at most this many jobs (a page is 50); "every job matching the filter"
# reaches at most the newest BULK_MATCHING of them, so one action is one bounded statement.
BULK_IDS = 500
BULK_MATCHING = 10_000
BULK_FIELDS = ("ids", "matching", "state", "queue", "task", "q")


class Refused(Exception):
    """The action cannot be done to this row now (a conflict, 409); the text says why.
    A malformed form is forms.BadInput (400) instead."""


@dataclass(frozen=True)
class Done:
    """What an action did, said on a page of its own with a way back."""

    message: str
    back: str
    changed: int = 0
    reached: int = 0


@dataclass(frozen=True)
class Action:
    question: str  # shown on the confirmation page, with the form's fields filled in
    # Returns where to go afterwards, or what was done.
    run: Callable[[store.Conn, dict[str, str]], str | Done]
    fields: tuple[str, ...]
    # Raises forms.BadInput for a malformed form, before even the confirmation page.
    check: Callable[[dict[str, str]], object]
    # A bulk action counts its jobs for the confirmation ({count} in the question).
    bulk: bool = False


def _retry_job(conn: store.Conn, form: dict[str, str]) -> str:
    job_id = _job_id(form)
    if store.retry_job(conn, job_id) is None:
        raise Refused(f"job {job_id} is not dead or cancelled (or does not exist)")
    return f"/jobs/{job_id}"


def _cancel_job(conn: store.Conn, form: dict[str, str]) -> str:
    # As `pgfleet jobs cancel`: a waiting job ends cancelled now, a running one's worker
    # is asked to stop it.
    job_id = _job_id(form)
    if not store.cancel_job(conn, job_id):
        raise Refused(f"job {job_id} has finished (or does not exist); only queued and "
                      "running jobs cancel")
    return f"/jobs/{job_id}"


def _delete_job(conn: store.Conn, form: dict[str, str]) -> str:
    job_id = _job_id(form)
    if not store.delete_jobs(conn, [job_id]):
        raise Refused(f"job {job_id} is running (or does not exist); cancel it first")
    return "/jobs"


def _bulk_ids(form: dict[str, str]) -> list[int]:
    parts = [part for part in form.get("ids", "").split(",") if part]
    if len(parts) > BULK_IDS:
        raise BadInput(f"ids: at most {BULK_IDS} jobs at once (or every job matching the "
                       "filter)")
    ids = []
    for part in parts:
        job_id = whole_number(part, "ids")
        if job_id is not None:
            ids.append(job_id)
    return sorted(set(ids), reverse=True)


def bulk_filter(form: dict[str, str]) -> lists.JobFilter:
    """The jobs list's filter, from the fields a bulk form carries."""
    return lists.JobFilter(
        state=forms.choice(form.get("state"), lists.STATES, "state"),
        queue=forms.name(form.get("queue"), "queue"),
        task=forms.name(form.get("task"), "task"),
        text=forms.search(form.get("q")),
    )


def _bulk_check(form: dict[str, str]) -> object:
    if form.get("matching") == "yes":
        return bulk_filter(form)
    if not _bulk_ids(form):
        raise BadInput("no job selected: tick some jobs, or every job matching the filter")
    return None


def bulk_targets(conn: store.Conn, form: dict[str, str]) -> list[int]:
    if form.get("matching") == "yes":
        return lists.matching_ids(conn, bulk_filter(form), BULK_MATCHING)
    return _bulk_ids(form)


def _back_to_list(form: dict[str, str]) -> str:
    query = {key: form[key] for key in ("state", "queue", "task", "q") if form.get(key)}
    return "/jobs" + (f"?{urlencode(query)}" if query else "")


def _bulk(verb: str, change: Callable[[store.Conn, list[int]], list[int] | dict[int, str]],
          applies: str) -> Callable[[store.Conn, dict[str, str]], Done]:
    def run(conn: store.Conn, form: dict[str, str]) -> Done:
        targets = bulk_targets(conn, form)
        changed = len(change(conn, targets)) if targets else 0
        left = len(targets) - changed
        message = f"{verb} {changed} of {len(targets)} jobs."
        if left == 1:
            message += f" The other one was not {applies} (or no longer exists)."
        elif left:
            message += f" The other {left} were not {applies} (or no longer exist)."
        return Done(message, _back_to_list(form), changed, len(targets))
    return run


def _cancel_many(conn: store.Conn, ids: list[int]) -> dict[int, str]:
    return store.cancel_jobs(conn, ids=ids)


def _retry_queue(conn: store.Conn, form: dict[str, str]) -> str:
    store.retry_dead_of_queue(conn, _queue(form))
    return "/"


def _pause_queue(conn: store.Conn, form: dict[str, str]) -> str:
    store.set_paused(conn, _queue(form), True)
    return "/"


def _resume_queue(conn: store.Conn, form: dict[str, str]) -> str:
    store.set_paused(conn, _queue(form), False)
    return "/"


def _delete_finished(conn: store.Conn, form: dict[str, str]) -> str:
    hours = _hours(form.get("older_than_hours", ""))
    while store.prune_finished(conn, retention=hours * 3600.0,
                               limit=PRUNE_BATCH) == PRUNE_BATCH:
        pass
    return "/jobs"


def _hours(value: str) -> int:
    # A century is beyond any retention; the bound keeps the interval in range.
    if not (value.isascii() and value.isdigit() and len(value) <= 6
            and int(value) <= MAX_HOURS):
        raise BadInput(f"older_than_hours must be a whole number of hours from 0 to "
                       f"{MAX_HOURS} (0 for all)")
    return int(value)


def _job_id(form: dict[str, str]) -> int:
    job_id = whole_number(form.get("job_id"), "job_id")
    if job_id is None:
        raise BadInput("job_id must be a positive whole number")
    return job_id


def _queue(form: dict[str, str]) -> str:
    queue = form.get("queue", "")
    if not 1 <= len(queue) <= 128:
        raise BadInput("queue must be a name of 1 to 128 characters")
    if "\x00" in queue:
        # No PostgreSQL text holds it; other control characters are a queue's own name
        # (the SQL enqueue accepts them) and act on that queue.
        raise BadInput("queue must not contain a NUL character")
    return queue


ACTIONS = {
    "retry-job": Action("Retry job {job_id}: run it again with a fresh set of attempts?",
                        _retry_job, ("job_id",), _job_id),
    "cancel-job": Action("Cancel job {job_id}? A waiting job will not run; a running one is "
                         "stopped by its worker.", _cancel_job, ("job_id",), _job_id),
    "delete-job": Action("Delete job {job_id}? Its row and history go; this cannot be undone.",
                         _delete_job, ("job_id",), _job_id),
    "bulk-retry": Action("Retry {count} jobs{which}? Those dead or cancelled run again with a "
                         "fresh set of attempts.",
                         _bulk("Retried", store.retry_jobs, "dead or cancelled with a free "
                               "unique key"), BULK_FIELDS, _bulk_check, bulk=True),
    "bulk-cancel": Action("Cancel {count} jobs{which}? Those waiting will not run; running "
                          "ones are stopped by their workers.",
                          _bulk("Cancelled or asked to stop", _cancel_many,
                                "queued or running"), BULK_FIELDS, _bulk_check, bulk=True),
    "bulk-delete": Action("Delete {count} jobs{which}? All but running ones go, with their "
                          "history; this cannot be undone.",
                          _bulk("Deleted", store.delete_jobs, "deletable (running jobs are "
                                "not)"), BULK_FIELDS, _bulk_check, bulk=True),
    "retry-queue": Action("Retry every dead job of queue {queue}?", _retry_queue, ("queue",),
                          _queue),
    "pause-queue": Action("Pause queue {queue} on every host? Running jobs finish; no new "
                          "job starts.", _pause_queue, ("queue",), _queue),
    "resume-queue": Action("Resume queue {queue}?", _resume_queue, ("queue",),
                           _queue),
    "delete-finished": Action("Delete every succeeded, dead and cancelled job finished more "
                              "than {older_than_hours} hours ago? This cannot be undone.",
                              _delete_finished, ("older_than_hours",),
                              lambda form: _hours(form.get("older_than_hours", ""))),
}


async def act(request: Request) -> Response:
    if request.state.read_only:
        return PlainTextResponse("this UI is read-only\n" if request.state.role != VIEWER
                                 else "the viewer token may look, not act\n", 403)
    try:
        body = await asyncio.wait_for(_form_bytes(request), BODY_DEADLINE)
    except TimeoutError:
        # A client trickling its form holds a connection and a task: cut it.
        return PlainTextResponse(f"the form did not arrive within {BODY_DEADLINE:.0f} s\n",
                                 408, headers={"Connection": "close"})
    except ClientDisconnect:
        return PlainTextResponse("the client went away before its form arrived\n", 400)
    if body is None:
        return PlainTextResponse("form too large\n", 413)
    parsed = parse_qs(body.decode("utf-8", "replace"))
    form = {k: v[0] for k, v in parsed.items()}
    # A bulk form sends one `ids` per ticked row; its confirmation, one list of them.
    form["ids"] = ",".join(parsed.get("ids", []))
    if not csrf_valid(request.app.state.settings, request.cookies.get(CSRF_COOKIE),
                      form.get(CSRF_FIELD)):
        return PlainTextResponse("missing or wrong CSRF token: reload the page and try again\n",
                                 403)
    action = ACTIONS.get(request.path_params["name"])
    if action is None:
        return _bad_form(request, f"there is no action {request.path_params['name']!r}; "
                                  f"the actions are {', '.join(ACTIONS)}")
    values = {name: form.get(name, "") for name in action.fields}
    try:
        action.check(values)
    except BadInput as exc:
        return _bad_form(request, str(exc))
    if form.get("confirmed") != "yes":
        if action.bulk:
            question = await run_in_threadpool(_bulk_question, request, action, values)
        else:
            question = action.question.format(**values)
        return render(request, "confirm.html", title="Confirm", live=False,
                      question=question, values=values, action=request.path_params["name"],
                      back=_back_to_list(values) if action.bulk else "/")
    try:
        target = await run_in_threadpool(_run, request, action, values)
    except Refused as exc:
        return render(request, "message.html", 409, title="Not done", live=False,
                      message=str(exc))
    if isinstance(target, Done):
        return render(request, "message.html", 200, title="Done", live=False,
                      message=target.message, back=target.back)
    return RedirectResponse(target, 303)


def _bulk_question(request: Request, action: Action, values: dict[str, str]) -> str:
    """The question of a bulk action, with how many jobs it reaches now."""
    with request.app.state.pool.connection() as conn:
        count = len(bulk_targets(conn, values))
    if values.get("matching") == "yes":
        shown = [f"{key} = {values[key]}" for key in ("state", "queue", "task", "q")
                 if values.get(key)]
        which = (" matching " + ", ".join(shown) if shown else " (every job)")
        if count == BULK_MATCHING:
            which += f", the newest {BULK_MATCHING:,} of them"
    else:
        which = " selected"
    return action.question.format(count=count, which=which)


def _bad_form(request: Request, message: str) -> Response:
    return render(request, "message.html", 400, title="Bad request", live=False,
                  message=message)


async def _form_bytes(request: Request) -> bytes | None:
    """The body, or None once it passes MAX_FORM_BYTES: read no further than that, so a
    client sending a gigabyte costs what a form does."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _run(request: Request, action: Action, values: dict[str, str]) -> str | Done:
    with request.app.state.pool.connection() as conn:
        return action.run(conn, values)


async def act_api(request: Request) -> Response:
    """An action as JSON (docs/web.md, "JSON API"): the call is its own confirmation.
    A bearer token proves a script sent it (no browser adds one by itself); anything else,
    a cookie or basic auth a browser replays, needs the CSRF token in X-CSRF-Token."""
    if request.state.read_only:
        return json_response({"error": "this UI is read-only" if request.state.role != VIEWER
                              else "the viewer token may look, not act"}, 403)
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return json_response({"error": "send the fields as application/json"}, 415)
    settings = request.app.state.settings
    scheme = request.headers.get("authorization", "").partition(" ")[0].lower()
    # The guard has checked the token when one is set; without one, any Bearer passes it.
    bearer = scheme == "bearer" and settings.token is not None
    if not bearer and not csrf_valid(request.app.state.settings,
                                             request.cookies.get(CSRF_COOKIE),
                                             request.headers.get("x-csrf-token")):
        return json_response({"error": "missing or wrong X-CSRF-Token (GET /api/ gives "
                                       "one), or send the token as Authorization: Bearer"},
                             403)
    try:
        body = await asyncio.wait_for(_form_bytes(request), BODY_DEADLINE)
    except TimeoutError:
        return json_response({"error": f"the body did not arrive within "
                                       f"{BODY_DEADLINE:.0f} s"}, 408)
    except ClientDisconnect:
        return json_response({"error": "the client went away"}, 400)
    if body is None:
        return json_response({"error": f"the body is larger than {MAX_FORM_BYTES} bytes"}, 413)
    action = ACTIONS.get(request.path_params["name"])
    if action is None:
        return json_response({"error": f"there is no action {request.path_params['name']!r}; "
                                       f"the actions are {', '.join(ACTIONS)}"}, 400)
    try:
        values = _api_fields(body, action.fields)
        action.check(values)
    except BadInput as exc:
        return json_response({"error": str(exc)}, 400)
    try:
        target = await run_in_threadpool(_run, request, action, values)
    except Refused as exc:
        return json_response({"error": str(exc)}, 409)
    if isinstance(target, Done):
        return json_response({"done": target.message, "changed": target.changed,
                              "reached": target.reached})
    return json_response({"done": request.path_params["name"], "see": target})


def _api_fields(body: bytes, fields: tuple[str, ...]) -> dict[str, str]:
    """The JSON object as the form fields an action reads."""
    try:
        data = json.loads(body.decode("utf-8")) if body.strip() else {}
    except (UnicodeDecodeError, ValueError):
        raise BadInput("the body is not JSON") from None
    if not isinstance(data, dict):
        raise BadInput("the body must be a JSON object")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise BadInput(f"unknown field {unknown[0]!r}; this action takes "
                       f"{', '.join(fields)}")
    values = {}
    for name in fields:
        value = data.get(name)
        if value is None:
            values[name] = ""
        elif isinstance(value, bool):
            if name != "matching":
                raise BadInput(f"{name} must not be true or false")
            values[name] = "yes" if value else ""
        elif isinstance(value, list):
            if name != "ids" or not all(isinstance(v, int) and not isinstance(v, bool)
                                        for v in value):
                raise BadInput(f"{name}: only ids is a list, of job ids")
            values[name] = ",".join(str(v) for v in value)
        elif isinstance(value, int | str):
            values[name] = str(value)
        else:
            raise BadInput(f"{name} must be a number or a string")
    return values
