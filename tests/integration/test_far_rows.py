"""Rows no Python client would write, written straight into the table: 'infinity',
'-infinity', year 10000 and years BC in the timestamps. Every listing shows them (as
PostgreSQL spells them) and the CLI and the Python enqueue refuse to write such a run_at."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import psycopg
import pytest
from click.testing import CliRunner, Result

from pgfleet.cli import cli
from pgfleet.client import enqueue as client
from pgfleet.errors import PayloadError
from tests.support.workers import scalar

UNKNOWN = ("warning: queue 'nosuch' is unknown: no job or worker in the database has it; "
           "is the name mistyped?\n")


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


def far_job(dsn: str, run_at: str, created_at: str = "now", queue: str = "far") -> int:
    """A row from before migration 0009, which refuses such a run_at since: written past
    the triggers, as a superuser."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        row = conn.execute("INSERT INTO pgfleet.jobs (queue, task, run_at, created_at,"
                           " finished_at) VALUES (%s, 'noop', %s, %s, %s) RETURNING id",
                           (queue, run_at, created_at, run_at)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(("stored", "shown"), [
    ("infinity", "infinity"), ("-infinity", "-infinity"),
    ("10000-01-01 00:00:00+00", "10000-01-01 00:00:00+00"),
    ("0044-03-15 00:00:00+00 BC", "0044-03-15 00:00:00+00 BC"),
])
def test_jobs_list_and_show_print_a_far_timestamp(dsn: str, stored: str, shown: str) -> None:
    job = far_job(dsn, stored, created_at=stored)
    listed = invoke(["jobs", "list"])
    assert listed.exit_code == 0, listed.output
    assert f"{job:>10}  far" in listed.stdout
    text = invoke(["jobs", "show", str(job)])
    assert text.exit_code == 0, text.output
    assert f"run_at: {shown}\n" in text.stdout and f"created_at: {shown}\n" in text.stdout
    as_json = invoke(["jobs", "show", str(job), "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["run_at"] == shown
    assert json.loads(invoke(["jobs", "list", "--json"]).stdout)[0]["id"] == job


def test_status_counts_a_job_waiting_since_minus_infinity(dsn: str) -> None:
    far_job(dsn, "-infinity")
    result = invoke(["status", "--json"])
    assert result.exit_code == 0, result.output
    (queue,) = json.loads(result.stdout)["queues"]
    assert queue["waiting"] == 1 and queue["oldest_waiting_age"] > 60 * 60 * 24 * 365 * 2000


@pytest.mark.parametrize("run_at", ["9999-12-31T23:59:59-14:00", "3000-01-01T00:00:00+00:00",
                                    "0001-01-01T00:00:00+14:00", "1969-12-31T23:59:59+00:00"])
def test_enqueue_refuses_a_run_at_out_of_range(dsn: str, run_at: str) -> None:
    result = invoke(["enqueue", "noop", "--run-at", run_at])
    assert result.exit_code == 1
    assert result.stderr == (f"pgfleet: error: run_at: {run_at} is outside the accepted "
                             "range 1970-01-01 to 3000-01-01 UTC\n")
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


def test_the_python_enqueue_shares_the_bound(dsn: str) -> None:
    with pytest.raises(PayloadError, match=r"run_at: .* is outside the accepted range"):
        client.enqueue(dsn, "noop", {}, run_at=datetime(3000, 1, 1, tzinfo=UTC))
    edge = datetime(2999, 12, 31, 23, 59, tzinfo=UTC)
    job = client.enqueue(dsn, "noop", {}, run_at=edge)
    assert scalar(dsn, "SELECT run_at FROM pgfleet.jobs WHERE id = %s", (job,)) == edge


def test_retry_of_a_queue_no_job_has_warns(dsn: str) -> None:
    client.enqueue(dsn, "noop", {}, queue="mail")
    result = invoke(["jobs", "retry", "--queue", "nosuch"])
    assert result.exit_code == 0, result.output
    assert result.stderr == UNKNOWN
    assert result.stdout == "0 dead job(s) of queue 'nosuch' queued again\n"
    known = invoke(["jobs", "retry", "--queue", "mail"])
    assert known.exit_code == 0 and known.stderr == ""


def test_a_delay_past_the_bound_is_refused_naming_it(dsn: str) -> None:
    result = invoke(["enqueue", "noop", "--delay", "99999999999999s"])
    assert result.exit_code == 1
    assert result.stderr == ("pgfleet: error: delay: 1e+14 seconds ends after 3000-01-01 "
                             "UTC, the latest run_at accepted\n")
    with pytest.raises(PayloadError, match=r"delay: .* ends after 3000-01-01"):
        client.enqueue(dsn, "noop", {}, delay=1e12)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0
    assert invoke(["enqueue", "noop", "--delay", "3650d"]).exit_code == 0
