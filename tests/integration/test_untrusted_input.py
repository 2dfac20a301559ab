"""Input anyone with a database role can choose: NOTIFY floods, task names that become
metric labels, control characters in names."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg.types.json import Jsonb

import pgfleet
from pgfleet import PayloadError, metrics
from pgfleet.worker.loop import NOTIFY_GAP
from tests.integration.test_maintenance import maintenance
from tests.support.workers import scalar, states, wait_for, worker_thread


def test_a_notify_flood_costs_a_bounded_number_of_claims(dsn: str) -> None:
    # A minute between polls: every claim here is one a notification asked for.
    with worker_thread(dsn, poll_interval=60.0) as worker:
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.processes") == 1)
        wait_for(lambda: worker.listener is not None and worker.listener.conn is not None)
        wait_for(lambda: worker.events.polls >= 1 and not worker.notified)
        before = worker.events.polls
        started = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(3000):  # separate transactions: PostgreSQL folds repeats in one
                conn.execute("NOTIFY pgfleet_jobs, 'default'")
        wait_for(lambda: not worker.notified)
        claims = worker.events.polls - before
        elapsed = time.monotonic() - started
    # At most one claim per NOTIFY_GAP while the flood lasted, plus the one it ends with.
    assert 1 <= claims <= elapsed / NOTIFY_GAP + 2, (claims, elapsed)


def test_six_hundred_chosen_task_names_on_the_rescue_path_stay_bounded(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.jobs (queue, task, state, attempt, lease_holder,"
                     " lease_expires_at) SELECT 'chosen', 'chosen-' || g, 'running', 1,"
                     " 'host-a:77:aa', now() + interval '1h' FROM generate_series(1, 600) g")
    m = maintenance(dsn)
    os.write(m.write_end, b"host-a:77:aa\tdied\tworker died: SIGKILL\n")  # type: ignore[attr-defined]
    m.read_requests(1.0)
    try:
        m.pass_once()
        labels = {s.labels["task"] for family in REGISTRY.collect() for s in family.samples
                  if s.name == "pgfleet_jobs_finished_total" and s.labels["queue"] == "chosen"}
    finally:
        metrics._task_labels.clear()  # this process's other tests start afresh
    assert states(dsn) == {"queued": 600}
    assert len(labels) <= metrics.TASK_LABEL_LIMIT + 1
    assert metrics.UNKNOWN_TASK_LABEL in labels


HOSTILE_QUEUE = "q\x1b]0;pwned\x07"
HOSTILE_TASK = "t\x1b[2J\u202eevil\x9b"


def cli_out(dsn: str, *argv: str) -> str:
    out = subprocess.run([sys.executable, "-m", "pgfleet", *argv], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PGFLEET_DATABASE_URL": dsn})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_control_characters_from_the_database_are_escaped_in_cli_output(dsn: str) -> None:
    # Written as an older pgfleet could (migration 0009 refuses such names since): past the
    # Python checks and, as a superuser, past the names trigger.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        row = conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, state, last_error, errors, attempt)"
            " VALUES (%s, %s, %s, 'dead', %s, %s, 1) RETURNING id",
            (HOSTILE_QUEUE, HOSTILE_TASK, Jsonb({"k": "\x1b[1mbold"}), "boom\x1b[31m\nline2",
             Jsonb([{"attempt": 1, "error": "boom\x1b[31m\nline2", "at": "2026-01-01"}])),
        ).fetchone()
    assert row is not None
    outputs = {argv: cli_out(dsn, *argv)
               for argv in (("status",), ("jobs", "list"), ("jobs", "show", str(row[0])))}
    for argv, text in outputs.items():
        assert not any(c in text for c in "\x1b\x07\x9b\u202e"), (argv, text)
        assert "\\x1b" in text, (argv, text)
    assert "q\\x1b]0;pwned" in outputs[("jobs", "list")]
    assert "t\\x1b[2J\\u202eevil\\x9b" in outputs[("jobs", "show", str(row[0]))]
    # A name cannot forge a line of its own.
    assert "line2" not in outputs[("jobs", "show", str(row[0]))].splitlines()


def test_enqueue_refuses_control_characters_in_names(dsn: str) -> None:
    for field, value in (("queue", HOSTILE_QUEUE), ("task", "t\x9b2J"), ("queue", "q\nx")):
        kwargs = {"queue": value} if field == "queue" else {}
        task = value if field == "task" else "noop"
        with pytest.raises(PayloadError, match=f"^{field}: must not contain control"):
            pgfleet.enqueue(dsn, task, **kwargs)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


def test_jobs_show_prints_a_bounded_glimpse_of_a_huge_error_history(dsn: str) -> None:
    # Outside trial: a hand-written row with 100,000 error entries and a 5 MB last error
    # made `jobs show` print 12 MB to the terminal.
    errors = [{"attempt": n, "error": f"boom {n} " + "x" * 3000, "at": "2026-01-01"}
              for n in range(1, 5001)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, last_error, errors, attempt)"
            " VALUES ('default', 'noop', 'dead', %s, %s, 1) RETURNING id",
            ("y" * 5_000_000, Jsonb(errors))).fetchone()
    assert row is not None
    text = cli_out(dsn, "jobs", "show", str(row[0]))
    assert len(text) < 100_000
    assert "4980 earlier entries not shown; --json shows all" in text
    assert "boom 5000 " in text and "boom 4980 " not in text
    assert "[5000000 characters; --json shows all]" in text


def test_invisible_and_look_alike_characters_are_escaped_in_cli_output(dsn: str) -> None:
    # The names trigger refuses C0 and C1 controls only: these pass it and the SQL enqueue.
    with psycopg.connect(dsn, autocommit=True) as conn:
        for task in ("send\u200bmail", "sendmail", "invoice\u202etxt.exe"):
            conn.execute("SELECT pgfleet.enqueue(%s, queue => %s)", (task, "q\u00a0x"))
    listed = cli_out(dsn, "jobs", "list")
    status = cli_out(dsn, "status")
    for text in (listed, status):
        assert not any(c in text for c in "\u200b\u202e\u00a0"), text
    # Two names that look alike raw differ on the terminal.
    assert "send\\u200bmail" in listed and "sendmail" in listed
    assert "invoice\\u202etxt.exe" in listed
    assert "q\\xa0x" in status


def test_jobs_show_prints_args_as_json_and_a_traceback_as_lines(dsn: str) -> None:
    # Outside trial T6: args came out as Python's repr ({'to': 'a'}, True, None) and a
    # traceback as one line with literal \n between its lines.
    error = "Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: bad\\n"
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, args, state, last_error, errors, attempt)"
            " VALUES ('default', 'noop', %s, 'dead', %s, %s, 1) RETURNING id",
            (Jsonb({"to": "a", "ok": True, "none": None}),
             error + "\nstate: succeeded\x1b[2J",
             Jsonb([{"attempt": 1, "error": error}, ["not", "ours"]]))).fetchone()
    assert row is not None
    lines = cli_out(dsn, "jobs", "show", str(row[0])).splitlines()
    assert 'args: {"ok": true, "to": "a", "none": null}' in lines, lines  # jsonb's key order
    assert "last_error: Traceback (most recent call last):" in lines, lines
    assert '  |   File "t.py", line 1' in lines, lines
    # A backslash the message really holds stays one; only line breaks make lines.
    assert "  | ValueError: bad\\n" in lines, lines
    # A line of the message cannot pass for a field of pgfleet's own, nor reach the terminal.
    assert "state: succeeded" not in [line for line in lines if line != "state: dead"]
    assert "  | state: succeeded\\x1b[2J" in lines, lines
    assert "error (attempt 1): Traceback (most recent call last):" in lines, lines
    assert 'error: ["not", "ours"]' in lines, lines


@pytest.mark.parametrize(("errors", "line"), [
    ('{"not": "a list"}', 'errors: {"not": "a list"}'), ("null", "errors: null"),
    ('"text"', 'errors: "text"')])
def test_jobs_show_prints_an_errors_column_that_is_not_a_list_as_one_line(
        dsn: str, errors: str, line: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, errors, attempt)"
            " VALUES ('default', 'noop', 'dead', %s::jsonb, 1) RETURNING id",
            (errors,)).fetchone()
    assert row is not None
    lines = cli_out(dsn, "jobs", "show", str(row[0])).splitlines()
    assert line in lines, lines
    assert "e" not in lines and "{" not in lines, lines  # not one character a line


def test_jobs_show_keeps_the_tail_of_a_very_long_traceback(dsn: str) -> None:
    error = "\n".join(f"frame {n}" for n in range(1, 1001))
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO pgfleet.jobs (queue, task, state, last_error, attempt)"
            " VALUES ('default', 'noop', 'dead', %s, 1) RETURNING id", (error,)).fetchone()
    assert row is not None
    lines = cli_out(dsn, "jobs", "show", str(row[0])).splitlines()
    assert "last_error: frame 1" in lines
    assert "  | … 941 lines not shown; --json shows all" in lines, lines
    assert "  | frame 1000" in lines and "  | frame 943" in lines
    assert "  | frame 942" not in lines and "  | frame 2" not in lines


def test_a_claim_failing_on_a_row_does_not_take_finished_jobs_down_with_it(dsn: str) -> None:
    # Outside trial T6: a row that made the claim fail (attempt at the integer limit, since
    # bounded by migration 0022) failed the statement that also committed the batch's
    # completions, so jobs that had ended ran again. Any row the claim cannot lease stands
    # in here: a trigger refuses to lease it.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""
            CREATE FUNCTION public.refuse_lease() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'this row cannot be leased' USING ERRCODE = '22003'; END $$;
            CREATE TRIGGER refuse_lease BEFORE UPDATE ON pgfleet.jobs FOR EACH ROW
              WHEN (NEW.task = 'unleasable' AND NEW.state = 'running')
              EXECUTE FUNCTION public.refuse_lease();""")
    job_id = pgfleet.enqueue(dsn, "sleep", {"seconds": 0.5})
    with worker_thread(dsn, threads=1, prefetch=0, poll_interval=30.0) as worker:
        wait_for(lambda: scalar(dsn, "SELECT state FROM pgfleet.jobs WHERE id = %s",
                                (job_id,)) == "running")
        # Its notification asks the busy worker to claim when its slot frees up: the claim
        # then rides with the sleeper's completion.
        pgfleet.enqueue(dsn, "unleasable", {})
        wait_for(lambda: worker.abandoned)  # the claim's error ends the worker, as before
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state, attempt, lease_holder FROM pgfleet.jobs"
                           " WHERE id = %s", (job_id,)).fetchone()
    assert row == ("succeeded", 1, None), row

