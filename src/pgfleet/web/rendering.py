"""HTML from the templates: every value autoescaped, whole pages or just their live part."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from pgfleet.sql.far_times import FarTime
from pgfleet.status.fleet import age, count
from pgfleet.status.terminal_text import escape_controls, has_hidden

FRAGMENT_HEADER = "x-pgfleet-fragment"
# A job's args can be up to 1 MiB (and a hand-inserted row more): show the start only.
PRETTY_LIMIT = 64 * 1024


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("pgfleet.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = age
    env.filters["count"] = count
    env.filters["ts"] = timestamp
    env.filters["pretty"] = pretty
    env.filters["clip"] = clip
    env.filters["visible"] = visible
    env.filters["visible_lines"] = visible_lines
    env.filters["plain"] = plain
    env.tests["hiding"] = has_hidden
    return env


def timestamp(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    if isinstance(moment, FarTime):
        return moment.text
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty(value: Any) -> str:
    return clip(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str))


def clip(text: str) -> str:
    """The start of a long text, saying how much was left out."""
    if len(text) > PRETTY_LIMIT:
        return f"{text[:PRETTY_LIMIT]}\n… ({len(text) - PRETTY_LIMIT} more characters)"
    return text


def visible(value: Any) -> Markup:
    """`value` as HTML text in which every character a reader could not see for what it is
    (a control, a bidi override, a zero-width or look-alike space) shows as its escape in a
    `<span class="ctl">`: a row cannot pass for another, and a literal `\\x1b` typed into a
    name stays plain text beside the styled one. Only what is shown changes: links, form
    fields and filters carry the real value."""
    return Markup(escape_controls(str(escape(value)), _marked))


def visible_lines(value: Any) -> Markup:
    """`visible` for a block shown in a <pre> (pretty-printed args, a traceback): its line
    breaks are its layout, not hidden characters. A carriage return, a line or paragraph
    separator and every other control still show as escapes."""
    return Markup(escape_controls(str(escape(value)), _marked, keep="\n"))


def _marked(escaped: str) -> str:
    return f'<span class="ctl" title="hidden character">{escaped}</span>'


def plain(value: Any) -> str:
    """The same escapes without markup, for where no element may go (the page title)."""
    return escape_controls(str(value))


API_PREFIX = "/api/"
# What each page says as JSON under /api/: the data the template draws, not its markup.
API_FIELDS = {
    "overview.html": ("queues", "limits", "hosts", "progress", "activity"),
    "queue.html": ("q", "limits", "running", "workers", "activity"),
    "jobs.html": ("rows", "filters", "searched", "older"),
    "job.html": ("job", "values", "attempts", "attempts_hidden"),
    "hosts.html": ("hosts", "held"),
    "schedules.html": ("runs", "now"),
}
# Renamed in the JSON: a template's short names are not an API's.
API_NAMES = {"q": "queue", "rows": "jobs", "held": "running_jobs"}


def is_api(request: Request) -> bool:
    return request.url.path.startswith(API_PREFIX)


def _plain_json(value: Any) -> Any:
    """json.dumps' fallback: times as ISO 8601 (a far one as PostgreSQL spells it), and
    dataclasses (an Activity, a schedule's runs) as objects."""
    if isinstance(value, FarTime):
        return value.text
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def json_response(data: Any, status: int = 200) -> Response:
    text = json.dumps(data, default=_plain_json, ensure_ascii=False, allow_nan=False)
    return Response(text, status, media_type="application/json")


def _api_answer(body: str, status: int, context: dict[str, Any]) -> Response:
    if body == "message.html":
        return json_response({"error": str(context["message"]),
                              "title": str(context["title"])}, status)
    fields = API_FIELDS.get(body, ())
    return json_response({API_NAMES.get(k, k): context[k] for k in fields if k in context},
                         status)


def render(request: Request, body: str, status: int = 200, **context: Any) -> Response:
    """The page whose live part is the template `body`; only that part when the live
    refresh asks for it; its data as JSON under /api/."""
    if is_api(request):
        return _api_answer(body, status, context)
    settings = request.app.state.settings
    context.update(
        request=request, csrf=request.state.csrf, read_only=request.state.read_only,
        refresh_seconds=settings.refresh_seconds,
    )
    env = environment()
    if request.headers.get(FRAGMENT_HEADER) == "1":
        return HTMLResponse(env.get_template(body).render(context), status)
    return HTMLResponse(env.get_template("page.html").render(context, body=body), status)


# How long a busy page asks to be left before it is asked again.
RETRY_AFTER_SECONDS = 2


def busy(request: Request, why: str) -> Response:
    """503 with Retry-After: the database is there, the UI has no room for this request
    now. Never "unreachable", which would send the reader after the wrong problem."""
    response = render(request, "message.html", 503, title="Busy", live=True,
                      message=f"The UI is busy, try again in a few seconds. {why}")
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
