"""`pgfleet jobs`: list, show, retry and cancel jobs."""

from __future__ import annotations

import json
from typing import Any

import click

from pgfleet.cli.common import (
    EXIT_USAGE,
    database,
    emit,
    fail,
    friendly,
    global_options,
    json_option,
    warn_unknown_queue,
)
from pgfleet.sql import store
from pgfleet.sql.far_times import accept_far_times


@click.group()
def jobs() -> None:
    """List, show, retry and cancel jobs."""


@jobs.command("list")
@click.option("--queue")
@click.option("--state", type=click.Choice(["queued", "running", "succeeded", "dead",
                                            "cancelled"]))
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@click.option("--meta", "metas", multiple=True, metavar="KEY=VALUE",
              help="Only jobs whose meta has KEY equal to VALUE (compared as text); "
                   "repeat to require several.")
@json_option
@global_options
@friendly
def jobs_list(queue: str | None, state: str | None, limit: int, metas: tuple[str, ...],
              as_json: bool) -> None:
    """The newest jobs, optionally of one queue, state or meta."""
    meta = {}
    for item in metas:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--meta {item!r}: expected KEY=VALUE", EXIT_USAGE)
        meta[key] = value
    with database() as conn:
        accept_far_times(conn)
        rows = store.list_jobs(conn, queue=queue, state=state, limit=limit, meta=meta)

    def table(rows: list[dict[str, Any]]) -> None:
        click.echo(f"{'ID':>10}  {'QUEUE':<14} {'STATE':<10} {'ATTEMPT':>7}  TASK")
        for r in rows:
            click.echo(f"{r['id']:>10}  {r['queue'][:14]:<14} {r['state']:<10} "
                       f"{r['attempt']:>3}/{r['max_attempts']:<3}  {r['task']}")

    emit(rows, as_json, table)


@jobs.command("show")
@click.argument("job_id", type=int)
@json_option
@global_options
@friendly
def jobs_show(job_id: int, as_json: bool) -> None:
    """Everything about one job, errors included."""
    with database() as conn:
        accept_far_times(conn)
        job = store.get_job(conn, job_id)
    if job is None:
        fail(f"no job with id {job_id}")

    def text(job: dict[str, Any]) -> None:
        for key, value in job.items():
            if key == "errors":
                for line in value:
                    click.echo(line)
            elif key == "last_error" and isinstance(value, list):
                click.echo(f"last_error: {value[0] if value else ''}")
                for line in value[1:]:
                    click.echo(f"  | {line}")
            else:
                click.echo(f"{key}: {value}")

    emit(job if as_json else for_terminal(job), as_json, text)


SHOWN_CHARS = 2000
SHOWN_ERRORS = 20
SHOWN_ERROR_LINES = 60
JSON_FIELDS = ("args", "meta", "result", "progress")


def for_terminal(job: dict[str, Any]) -> dict[str, Any]:
    """A job as `jobs show` prints it, before its strings are escaped: JSON fields as
    JSON (not Python's repr), the last error as its own lines, each error entry as one
    line, long values cut. Line breaks are split here, before escaping turns them into
    `\\n`, so a message keeps its lines and still cannot forge a line of pgfleet's own."""
    out: dict[str, Any] = {}
    for key, value in job.items():
        if key == "errors":
            # A hand-written row may hold anything there: one line of JSON, not a list.
            out[key] = (error_lines(value) if isinstance(value, list) else
                        [f"errors: {shortened(json.dumps(value, ensure_ascii=False))}"])
        elif key == "last_error" and isinstance(value, str):
            out[key] = error_block(value)
        elif key in JSON_FIELDS and not isinstance(value, str):
            out[key] = shortened(json.dumps(value, ensure_ascii=False))
        else:
            out[key] = shortened(str(value))
    return out


def shortened(text: str) -> str:
    # A row written by hand may hold megabytes of args; the terminal gets a glimpse.
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… [{len(text)} characters; --json shows all]"


def error_block(text: str) -> list[str]:
    """The last error's lines (a traceback's last frames matter most: the tail is kept)."""
    lines = [shortened(line) for line in text.splitlines()] or [""]
    if len(lines) <= SHOWN_ERROR_LINES:
        return lines
    cut = len(lines) - SHOWN_ERROR_LINES + 1
    return [lines[0], f"… {cut} lines not shown; --json shows all",
            *lines[-(SHOWN_ERROR_LINES - 2):]]


def error_lines(entries: list[Any]) -> list[str]:
    # A row written by hand may hold any number of entries: the last few.
    out = []
    if len(entries) > SHOWN_ERRORS:
        out.append(f"errors: {len(entries) - SHOWN_ERRORS} earlier entries not shown; "
                   "--json shows all")
    return out + [error_line(entry) for entry in entries[-SHOWN_ERRORS:]]


def error_line(entry: object) -> str:
    """One recorded failure (its first line); an entry not shaped like pgfleet's own is
    printed as JSON."""
    if isinstance(entry, dict) and isinstance(entry.get("error"), str):
        first = entry["error"].splitlines()[0] if entry["error"] else ""
        return f"error (attempt {entry.get('attempt')}): {shortened(first)}"
    return f"error: {shortened(json.dumps(entry, ensure_ascii=False, default=str))}"


@jobs.command("retry")
@click.argument("job_id", type=int, required=False)
@click.option("--queue", help="Retry every dead job of this queue.")
@global_options
@friendly
def jobs_retry(job_id: int | None, queue: str | None) -> None:
    """Run a dead (or cancelled) job again, or every dead job of --queue."""
    if job_id is None and queue is None:
        fail("missing what to retry: give a JOB_ID or --queue QUEUE", EXIT_USAGE)
    if job_id is not None and queue is not None:
        fail("give a JOB_ID or --queue QUEUE, not both", EXIT_USAGE)
    with database() as conn:
        if job_id is not None:
            if store.retry_job(conn, job_id) is None:
                fail(f"job {job_id} is not dead or cancelled (or does not exist)")
            click.echo(f"job {job_id} queued again")
        else:
            assert queue is not None
            warn_unknown_queue(conn, queue)
            ids = store.retry_dead_of_queue(conn, queue)
            held = store.dead_keys_held(conn, queue)
            click.echo(f"{len(ids)} dead job(s) of queue {queue!r} queued again")
            for job in held:
                click.echo(f"job {job.id} not retried: unique key {job.unique_key!r} of task "
                           f"{job.task!r} is held by job {job.holder}", err=True)
            if held and not ids:
                fail(f"no dead job of queue {queue!r} could be retried")


@jobs.command("cancel")
@click.argument("job_ids", metavar="[JOB_ID]...", type=int, nargs=-1)
@click.option("--queue", help="Cancel the unfinished jobs of this queue.")
@click.option("--task", help="Cancel the unfinished jobs of this task.")
@json_option
@global_options
@friendly
def jobs_cancel(job_ids: tuple[int, ...], queue: str | None, task: str | None,
                as_json: bool) -> None:
    """Cancel jobs: waiting ones will not run; running ones are stopped by their worker
    within about a second and end cancelled. With --queue and/or --task, every unfinished
    job that matches (and, with JOB_IDs, is one of them)."""
    if not job_ids and queue is None and task is None:
        fail("missing what to cancel: give JOB_IDs, --queue or --task", EXIT_USAGE)
    with database() as conn:
        found = store.cancel_jobs(conn, ids=list(job_ids) or None, queue=queue, task=task)
    missed = [job_id for job_id in job_ids if job_id not in found]
    rows = [{"id": job_id, "state": "cancelled" if state == "cancelled" else "cancelling"}
            for job_id, state in sorted(found.items())]

    def text(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            click.echo(f"job {row['id']} cancelled" if row["state"] == "cancelled" else
                       f"job {row['id']} is running: its worker stops it (cancelling)")
        if not job_ids:
            click.echo(f"{len(rows)} job(s) cancelled or cancelling")

    emit(rows, as_json, text)
    if missed:
        fail(f"job(s) {', '.join(map(str, missed))} not cancelled: finished, not matching "
             "the filters, or unknown; only queued and running jobs cancel")
