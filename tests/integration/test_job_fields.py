"""Migration 0009: meta and concurrency keys on every enqueue path, names and meta checked
in SQL too, configured defaults applied to enqueues by name, and grants kept across it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgfleet
from pgfleet import PayloadError
from pgfleet.sql import migrate as migrations
from tests.support import pg
from tests.support.roles import login_roles, role_dsn
from tests.support.workers import wait_for, worker_process


def one(dsn: str, query: str, params: Any = None) -> tuple[Any, ...]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return tuple(row)


def cli(dsn: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfleet", *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PGFLEET_DATABASE_URL": dsn})


def job(dsn: str, job_id: int) -> tuple[Any, ...]:
    return one(dsn, "SELECT queue, max_attempts, meta, concurrency_key FROM pgfleet.jobs"
                    " WHERE id = %s", (job_id,))


def test_meta_and_concurrency_key_travel_from_python_sql_cli_and_bulk(dsn: str) -> None:
    from_python = pgfleet.enqueue(dsn, "noop", meta={"customer": 42, "tags": ["a"]},
                                  concurrency_key="customer-42")
    from_sql = one(dsn, "SELECT pgfleet.enqueue('noop', meta => %s, concurrency_key => 'k')",
                   (Jsonb({"from": "sql"}),))[0]
    printed = cli(dsn, "enqueue", "noop", "--meta", '{"from": "cli"}',
                  "--concurrency-key", "c")
    assert printed.returncode == 0, printed.stderr
    bulk = pgfleet.enqueue_many(dsn, [{"task": "noop", "meta": {"n": 1}},
                                      {"task": "noop", "concurrency_key": "b"},
                                      {"task": "noop"}])
    assert job(dsn, from_python)[2:] == ({"customer": 42, "tags": ["a"]}, "customer-42")
    assert job(dsn, from_sql)[2:] == ({"from": "sql"}, "k")
    assert job(dsn, int(printed.stdout))[2:] == ({"from": "cli"}, "c")
    assert [job(dsn, i)[2:] for i in bulk] == [({"n": 1}, None), ({}, "b"), ({}, None)]


@pytest.mark.parametrize(("meta", "problem"), [
    (["not", "an", "object"], "meta: must be a JSON object"),
    ({"blob": "x" * 70_000}, "meta: is 70011 bytes, over the limit of 65536 bytes"),
    ({"deep": json.loads("[" * 20 + "]" * 20)}, "meta: nested deeper than 16 levels"),
    ({"nul": "a\x00b"}, "meta.nul: a NUL character cannot be stored"),
])
def test_bad_meta_is_refused_by_python_naming_the_field(dsn: str, meta: Any,
                                                        problem: str) -> None:
    with pytest.raises(PayloadError) as caught:
        pgfleet.enqueue(dsn, "noop", meta=meta)
    assert str(caught.value).startswith(problem)
    assert one(dsn, "SELECT count(*) FROM pgfleet.jobs")[0] == 0


@pytest.mark.parametrize(("statement", "params", "message"), [
    ("SELECT pgfleet.enqueue('noop', meta => %s)", (Jsonb([1]),),
     "meta must be a JSON object, got array"),
    ("SELECT pgfleet.enqueue('noop', meta => %s)", (Jsonb({"b": "x" * 70_000}),),
     "over the limit of 65536 bytes"),
    ("SELECT pgfleet.enqueue(%s)", ("t\x1b[2J",), "must not contain control characters"),
    ("SELECT pgfleet.enqueue('noop', queue => %s)", ("q\u009b",),
     "must not contain control characters"),
    ("SELECT pgfleet.enqueue('noop', concurrency_key => %s)", ("k\n",),
     "must not contain control characters"),
    ("SELECT pgfleet.enqueue('noop', queue => ' ')", None, "queue must not be empty"),
    ("INSERT INTO pgfleet.jobs (queue, task) VALUES ('default', E'evil\\x07')", None,
     "must not contain control characters"),
    ("INSERT INTO pgfleet.jobs (queue, task, meta) VALUES ('default', 'noop', '3')", None,
     "meta must be a JSON object, got number"),
])
def test_sql_refuses_bad_names_and_meta_from_any_client(dsn: str, statement: str,
                                                       params: Any, message: str) -> None:
    with (psycopg.connect(dsn, autocommit=True) as conn,
          pytest.raises(psycopg.errors.InvalidParameterValue, match=message)):
        conn.execute(statement, params)
    assert one(dsn, "SELECT count(*) FROM pgfleet.jobs")[0] == 0


def publish(dsn: str) -> None:
    """What a supervisor publishes: task `charge` belongs to `payments` with 5 attempts,
    `report` has no attempts of its own, `payments` and `default` have queue settings."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgfleet.task_defaults (task, queue, max_attempts)"
                     " VALUES ('charge', 'payments', 5), ('report', 'reports', NULL)")
        conn.execute("INSERT INTO pgfleet.queue_defaults (queue, max_attempts)"
                     " VALUES ('payments', 7), ('reports', 2), ('default', 3)")


def test_published_defaults_reach_enqueues_by_name_on_every_path(dsn: str) -> None:
    publish(dsn)
    by_python = pgfleet.enqueue(dsn, "charge")
    by_sql = one(dsn, "SELECT pgfleet.enqueue('charge')")[0]
    by_cli = cli(dsn, "enqueue", "charge")
    assert by_cli.returncode == 0, by_cli.stderr
    bulk = pgfleet.enqueue_many(dsn, [{"task": "charge"}, {"task": "report"},
                                      {"task": "other"}, {"task": "charge", "queue": "q",
                                                          "max_attempts": 9}])
    task_defaults = ("payments", 5)
    for job_id in (by_python, by_sql, int(by_cli.stdout), bulk[0]):
        assert job(dsn, job_id)[:2] == task_defaults
    # The task has no attempts of its own: its queue's. No task entry: the default queue's.
    assert job(dsn, bulk[1])[:2] == ("reports", 2)
    assert job(dsn, bulk[2])[:2] == ("default", 3)
    # The call wins over everything; a queue given by the call brings its own attempts.
    assert job(dsn, bulk[3])[:2] == ("q", 9)
    assert job(dsn, pgfleet.enqueue(dsn, "charge", queue="reports"))[:2] == ("reports", 5)
    assert job(dsn, pgfleet.enqueue(dsn, "other", queue="reports"))[:2] == ("reports", 2)


def test_without_published_defaults_the_builtin_ones_apply(dsn: str) -> None:
    assert job(dsn, pgfleet.enqueue(dsn, "charge"))[:2] == ("default", 20)
    assert job(dsn, one(dsn, "SELECT pgfleet.enqueue('x')")[0])[:2] == ("default", 20)


def test_enqueue_job_says_whether_it_created_the_job(dsn: str) -> None:
    first = pgfleet.enqueue_job(dsn, "noop", unique_key="k")
    second = pgfleet.enqueue_job(dsn, "noop", unique_key="k")
    other_task = pgfleet.enqueue_job(dsn, "other", unique_key="k")
    assert first.created and not second.created and other_task.created
    assert second.job_id == first.job_id != other_task.job_id
    found = cli(dsn, "enqueue", "noop", "--unique-key", "k")
    assert found.returncode == 0 and int(found.stdout) == first.job_id
    assert "already holds unique key 'k': nothing added" in found.stderr


@pytest.fixture
def old_schema() -> Iterator[str]:
    with pg.fresh_database(None) as url:
        yield url


def test_grants_on_the_old_enqueue_functions_survive_the_upgrade(old_schema: str) -> None:
    migrations.migrate(old_schema, target=8)
    with login_roles(old_schema) as make:
        producer = make("producer")
        with psycopg.connect(old_schema, autocommit=True) as conn:
            conn.execute(f'GRANT USAGE ON SCHEMA pgfleet TO "{producer}"')
            conn.execute("GRANT EXECUTE ON FUNCTION pgfleet.enqueue(text, jsonb, text, integer,"
                         f' timestamptz, integer, text) TO "{producer}"')
        migrations.migrate(old_schema)
        as_producer = role_dsn(old_schema, producer)
        job_id = one(as_producer, "SELECT pgfleet.enqueue('noop', meta => '{\"a\": 1}')")[0]
        assert pgfleet.enqueue_many(as_producer, [{"task": "noop"}])[0] > job_id


@pytest.mark.parametrize("run_at", ["infinity", "-infinity", "10000-01-01", "1969-12-31"])
def test_sql_refuses_a_run_at_no_reader_can_handle(dsn: str, run_at: str) -> None:
    # Outside trial: a producer's run_at => '-infinity' crash-looped the queue's workers
    # and broke `pgfleet status`; year 10000 broke `jobs list`.
    for statement in ("SELECT pgfleet.enqueue('noop', run_at => %s::timestamptz)",
                      "INSERT INTO pgfleet.jobs (queue, task, run_at)"
                      " VALUES ('default', 'noop', %s::timestamptz)"):
        with (psycopg.connect(dsn, autocommit=True) as conn,
              pytest.raises(psycopg.errors.InvalidParameterValue,
                            match="is outside the accepted range 1970-01-01 to 3000-01-01")):
            conn.execute(statement, (run_at,))
    assert one(dsn, "SELECT count(*) FROM pgfleet.jobs")[0] == 0


def test_a_legacy_row_with_an_infinite_run_at_is_claimed_and_run(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # a row from before 0009
        legacy = conn.execute("INSERT INTO pgfleet.jobs (queue, task, run_at) VALUES"
                              " ('default', 'noop', '-infinity') RETURNING id").fetchone()
    assert legacy is not None
    after = pgfleet.enqueue(dsn, "noop")
    status = cli(dsn, "status")
    assert status.returncode == 0, status.stderr
    worker = worker_process(dsn)
    try:
        wait_for(lambda: one(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE id IN (%s, %s)"
                                  " AND state = 'succeeded'", (legacy[0], after))[0] == 2,
                 timeout=30)
        assert worker.poll() is None
    finally:
        worker.terminate()
        worker.wait(30)


def test_batches_of_one_task_and_one_queue_take_the_same_defaults(dsn: str) -> None:
    """Migration 0019 resolves the defaults once for a batch whose rows share a task and a
    queue (or give none): the same precedence as a mixed batch, row by row."""
    publish(dsn)
    cases: list[tuple[dict[str, Any], tuple[str, int]]] = [
        ({"task": "charge"}, ("payments", 5)),
        ({"task": "report"}, ("reports", 2)),
        ({"task": "other"}, ("default", 3)),
        ({"task": "charge", "queue": "reports"}, ("reports", 5)),
        ({"task": "other", "queue": "reports"}, ("reports", 2)),
        ({"task": "other", "queue": "nowhere"}, ("nowhere", 20)),
    ]
    for fields, expected in cases:
        ids = pgfleet.enqueue_many(dsn, [fields] * 3)
        assert [job(dsn, i)[:2] for i in ids] == [expected] * 3, fields
    # Attempts given by some rows only: theirs where given, the defaults elsewhere.
    ids = pgfleet.enqueue_many(dsn, [{"task": "charge"}, {"task": "charge", "max_attempts": 9}])
    assert [job(dsn, i)[:2] for i in ids] == [("payments", 5), ("payments", 9)]
    # Queues given by some rows only: not one queue, each row resolved on its own.
    ids = pgfleet.enqueue_many(dsn, [{"task": "report"}, {"task": "report", "queue": "payments"}])
    assert [job(dsn, i)[:2] for i in ids] == [("reports", 2), ("payments", 7)]
    ids = pgfleet.enqueue_many(dsn, [{"task": "charge", "priority": p} for p in range(5)])
    assert ids == sorted(ids)


@pytest.mark.parametrize(("task", "queue", "refused"), [
    ("", "q", "task must not be empty"),
    ("   ", "q", "task must not be empty"),
    (" t", "q", None),
    ("t", "\u3000", None),                  # an ideographic space is not a space to btrim
    ("t", " ", "queue must not be empty"),
    ("é" * 255, "q", None),                 # 510 bytes, 255 characters
    ("é" * 256, "q", "task is over 255 characters"),
    ("t", "é" * 128, None),
    ("t", "é" * 129, "queue is over 128 characters"),
])
def test_the_names_trigger_counts_characters_and_spaces(dsn: str, task: str, queue: str,
                                                         refused: str | None) -> None:
    """Migration 0019 guards each test of jobs_names_limits with a cheaper one (bytes
    before characters, the first character before btrim): the same rows are refused."""
    insert = "INSERT INTO pgfleet.jobs (task, queue) VALUES (%s, %s)"
    with psycopg.connect(dsn, autocommit=True) as conn:
        if refused is None:
            conn.execute(insert, (task, queue))
            assert one(dsn, "SELECT count(*) FROM pgfleet.jobs")[0] == 1
            return
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=refused):
            conn.execute(insert, (task, queue))
        for key in ("unique_key", "concurrency_key"):
            if len(task) == 256:
                with pytest.raises(psycopg.errors.InvalidParameterValue,
                                   match=f"{key} is over 255 characters"):
                    conn.execute(f"INSERT INTO pgfleet.jobs (task, queue, {key})"
                                 " VALUES ('t', 'q', %s)", (task,))
    assert one(dsn, "SELECT count(*) FROM pgfleet.jobs")[0] == 0
