from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgfleet
from pgfleet import PayloadError
from pgfleet.sql import store
from pgfleet.worker.listener import CHANNEL
from tests.support.workers import scalar, wait_for, worker_process


def listen(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
    return conn


def drain_notifications(conn: psycopg.Connection[Any], wait: float = 0.3) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=wait)]


def test_rolled_back_enqueue_leaves_nothing_and_wakes_nobody(dsn: str) -> None:
    listener = listen(dsn)
    with psycopg.connect(dsn) as conn:
        pgfleet.enqueue(conn, "noop", {"x": 1})
        conn.rollback()
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0
    assert drain_notifications(listener) == []


def test_committed_transaction_notifies_once_per_queue(dsn: str) -> None:
    listener = listen(dsn)
    with psycopg.connect(dsn) as conn:
        for i in range(50):
            pgfleet.enqueue(conn, "noop", {"i": i}, queue="a")
        pgfleet.enqueue_many(conn, [{"task": "noop", "queue": "b"}] * 1000)
        pgfleet.enqueue_many(conn, [{"task": "noop", "queue": "a"}] * 10)
        assert drain_notifications(listener, 0.2) == []  # nothing before the commit
        conn.commit()
    assert sorted(drain_notifications(listener)) == ["a", "b"]


def test_one_statement_notifies_each_due_queue_once(dsn: str) -> None:
    """notify_jobs (migration 0019): one queue without a sort, several through DISTINCT,
    jobs not yet due wake nobody."""
    listener = listen(dsn)
    pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": q} for q in "cabbac"]
                         + [{"task": "noop", "queue": "later", "delay": 60}])
    assert sorted(drain_notifications(listener)) == ["a", "b", "c"]
    pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": "one"}] * 3)
    assert drain_notifications(listener) == ["one"]
    pgfleet.enqueue_many(dsn, [{"task": "noop", "queue": "later", "delay": 60}] * 3)
    assert drain_notifications(listener) == []


def test_the_database_notifies_on_the_channel_workers_listen_on(dsn: str) -> None:
    """pgfleet.notify_queue (migration 0004) holds the SQL side's channel name, used by the
    insert trigger and the wake-up queries; the listener holds Python's."""
    listener = listen(dsn)
    pgfleet.enqueue(dsn, "noop", queue="by-trigger")
    with psycopg.connect(dsn, autocommit=True) as conn:
        store.set_paused(conn, "by-query", False)
        store.notify_queue(conn, "by-function")
    assert drain_notifications(listener) == ["by-trigger", "by-query", "by-function"]


def test_delayed_job_does_not_notify(dsn: str) -> None:
    listener = listen(dsn)
    pgfleet.enqueue(dsn, "noop", delay=60)
    assert drain_notifications(listener) == []


def test_enqueue_with_dsn_commits_and_fills_the_row(dsn: str) -> None:
    run_at = datetime.now(UTC) + timedelta(hours=1)
    job_id = pgfleet.enqueue(dsn, "noop", {"to": "a@b"}, queue="mail", priority=-5,
                             run_at=run_at, max_attempts=3)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT queue, task, args, state::text, priority, run_at, attempt, max_attempts"
            " FROM pgfleet.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == ("mail", "noop", {"to": "a@b"}, "queued", -5, run_at, 0, 3)


def test_delay_counts_from_the_database_clock(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "noop", delay=timedelta(seconds=10))
    gap = scalar(dsn, "SELECT extract(epoch FROM run_at - created_at) FROM pgfleet.jobs"
                      " WHERE id = %s", (job_id,))
    assert 9.9 <= float(gap) <= 10.1


def test_unique_key_returns_the_unfinished_job(dsn: str) -> None:
    first = pgfleet.enqueue(dsn, "noop", unique_key="report-42")
    again = pgfleet.enqueue(dsn, "noop", {"other": 1}, unique_key="report-42")
    assert again == first
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgfleet.jobs SET state = 'succeeded' WHERE id = %s", (first,))
    third = pgfleet.enqueue(dsn, "noop", unique_key="report-42")
    assert third != first


def test_sql_enqueue_from_any_language(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        a = conn.execute("SELECT pgfleet.enqueue('noop', '{\"n\": 1}')").fetchone()
        b = conn.execute(
            "SELECT pgfleet.enqueue('noop', '{}', queue => 'q2', priority => 3,"
            " run_at => now() + interval '1 hour', unique_key => 'k')").fetchone()
        c = conn.execute("SELECT pgfleet.enqueue('noop', '{}', unique_key => 'k')").fetchone()
        assert a and b and c and b[0] == c[0]
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="JSON object"):
            conn.execute("SELECT pgfleet.enqueue('noop', '[1, 2]')")
        row = conn.execute("SELECT queue, priority FROM pgfleet.jobs WHERE id = %s",
                           (b[0],)).fetchone()
    assert row == ("q2", 3)


def test_enqueue_many_returns_ids_in_order_and_honours_unique_keys(dsn: str) -> None:
    existing = pgfleet.enqueue(dsn, "noop", unique_key="dup")
    jobs: list[dict[str, Any]] = [{"task": "noop", "args": {"i": i}} for i in range(12000)]
    jobs.insert(5, {"task": "noop", "unique_key": "dup"})
    jobs.insert(7, {"task": "noop", "unique_key": "fresh", "delay": 30})
    ids = pgfleet.enqueue_many(dsn, jobs)
    assert len(ids) == len(jobs) and ids[5] == existing
    with psycopg.connect(dsn) as conn:
        rows = dict(conn.execute("SELECT id, args FROM pgfleet.jobs").fetchall())
    assert rows[ids[0]] == {"i": 0} and rows[ids[-1]] == {"i": 11999}
    assert rows[ids[8]] == {"i": 6}
    assert len(rows) == 12000 + 2


BAD_ARGS: list[tuple[Any, str]] = [
    ({"x": float("nan")}, "args.x"),
    ({"x": b"bytes"}, "args.x"),
    ({1: "non-string key"}, "args"),
    ({"x": "\ud800"}, "args.x"),
    ({"x": "nul\x00"}, "args.x"),
    ({"x": Decimal("1.5")}, "args.x"),
    ({"x": {1, 2}}, "args.x"),
    ({"x": datetime.now(UTC)}, "args.x"),
    ({"x": "y" * (1024 * 1024 + 1)}, "args"),
    (["not", "an", "object"], "args"),
]


@pytest.mark.parametrize(("args", "field"), BAD_ARGS)
def test_bad_payload_refused_before_sql(dsn: str, args: Any, field: str) -> None:
    with pytest.raises(PayloadError) as info:
        pgfleet.enqueue(dsn, "noop", args)
    assert info.value.field == field
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


def test_deeply_nested_payload_refused(dsn: str) -> None:
    deep: Any = {}
    for _ in range(100_000):
        deep = {"d": deep}
    with pytest.raises(PayloadError, match="nested deeper"):
        pgfleet.enqueue(dsn, "noop", deep)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"task": ""}, "task"),
    ({"task": "t" * 256}, "task"),
    ({"queue": ""}, "queue"),
    ({"queue": "q" * 129}, "queue"),
    ({"priority": 1001}, "priority"),
    ({"priority": "high"}, "priority"),
    ({"run_at": "tomorrow"}, "run_at"),
    ({"run_at": datetime(2030, 1, 1)}, "run_at"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"unique_key": ""}, "unique_key"),
    ({"delay": -1}, "delay"),
])
def test_bad_fields_refused(dsn: str, kwargs: dict[str, Any], field: str) -> None:
    task = kwargs.pop("task", "noop")
    with pytest.raises(PayloadError) as info:
        pgfleet.enqueue(dsn, task, {}, **kwargs)
    assert info.value.field == field
    assert field in str(info.value)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


def test_bulk_with_one_bad_job_writes_nothing(dsn: str) -> None:
    jobs = [{"task": "noop"}] * 10 + [{"task": "noop", "args": {"x": float("inf")}}]
    with pytest.raises(PayloadError, match=r"jobs\[10\]\.args\.x"):
        pgfleet.enqueue_many(dsn, jobs)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


def run_cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfleet", "--database-url", dsn, *args],
                          capture_output=True, text=True, timeout=60)


def test_cli_enqueue_prints_the_id(dsn: str) -> None:
    out = run_cli(dsn, "enqueue", "noop", "--args", '{"a": 1}', "--queue", "q",
                  "--priority", "2", "--delay", "10s", "--unique-key", "k1")
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout)
    again = run_cli(dsn, "enqueue", "noop", "--unique-key", "k1")
    assert int(again.stdout) == job_id
    shown = json.loads(run_cli(dsn, "jobs", "show", str(job_id), "--json").stdout)
    assert shown["queue"] == "q" and shown["args"] == {"a": 1} and shown["priority"] == 2
    at = run_cli(dsn, "enqueue", "noop", "--run-at", "2031-01-01T00:00:00+00:00")
    assert at.returncode == 0
    assert scalar(dsn, "SELECT run_at FROM pgfleet.jobs WHERE id = %s", (int(at.stdout),)) \
        == datetime(2031, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("args", "message"), [
    (["--args", "{not json"], "--args: not valid JSON"),
    (["--args", "[1]"], "args: must be a JSON object"),
    (["--priority", "5000"], "priority: 5000 is out of range"),
    (["--run-at", "soon"], "--run-at: 'soon' is not an ISO-8601 time"),
    (["--delay", "ten"], "expected a duration"),
])
def test_cli_enqueue_bad_input(dsn: str, args: list[str], message: str) -> None:
    out = run_cli(dsn, "enqueue", "noop", *args)
    assert out.returncode != 0
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 3
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


def test_unreachable_database_error_hides_the_password() -> None:
    dsn = "postgresql://someone:s3cr3t!@127.0.0.1:1/nowhere"
    out = run_cli(dsn, "enqueue", "noop")
    assert out.returncode == 1
    assert "cannot connect to the database" in out.stderr
    assert "s3cr3t" not in out.stderr and "***" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_enqueue_many_survives_key_holders_finishing_meanwhile(dsn: str) -> None:
    """Workers finish the holders of the keys while enqueue_many runs: each call returns
    an id for every row (the existing job, or a new one once the key is free again)."""
    procs = [worker_process(dsn, "default", "--threads", "4") for _ in range(2)]
    try:
        keys = [f"k{i}" for i in range(20)]
        for _ in range(300):
            ids = pgfleet.enqueue_many(dsn, [{"task": "noop", "unique_key": key}
                                             for key in keys])
            assert len(ids) == len(keys) and all(ids)
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                                     " WHERE state <> 'succeeded'") == 0, timeout=120)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            assert p.wait(30) == 0, p.stderr.read() if p.stderr else ""
