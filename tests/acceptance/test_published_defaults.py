"""Issue 13 item 6 end to end: a real `pgfleet run` publishes its queues' max_attempts and
its tasks' declared queue and max_attempts, so enqueues by name from the CLI, SQL and
Python get them; a HUP with a changed config (or task code) publishes again, and workers
started later under the same config (TTIN, restarts) do not overwrite another host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgfleet.client.enqueue import enqueue, enqueue_many
from tests.support.fleet import Fleet, config_text
from tests.support.workers import wait_for

TASK_MODULE = '''
import pgfleet

@pgfleet.task(name="pay", queue="payments", max_attempts={attempts})
def pay(**_):
    pass

@pgfleet.task(name="plain")
def plain(**_):
    pass

@pgfleet.task(name="crash_slowly", backoff={{"initial": 3600, "max": 7200, "jitter": 0}})
def crash_slowly():
    import ctypes
    ctypes.string_at(0)
'''


def rows(dsn: str, query: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0]: r[1:] for r in conn.execute(query).fetchall()}


def task_defaults(dsn: str) -> dict[str, Any]:
    return rows(dsn, "SELECT task, queue, max_attempts FROM pgfleet.task_defaults")


def queue_defaults(dsn: str) -> dict[str, Any]:
    return {q: v[0] for q, v in rows(dsn, "SELECT queue, max_attempts"
                                          " FROM pgfleet.queue_defaults").items()}


def placed(dsn: str, job_id: int) -> tuple[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT queue, max_attempts FROM pgfleet.jobs WHERE id = %s",
                           (job_id,)).fetchone()
    assert row is not None
    return row[0], row[1]


def cli_enqueue(dsn: str, task: str) -> int:
    done = subprocess.run([sys.executable, "-m", "pgfleet", "enqueue", task],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PGFLEET_DATABASE_URL": dsn})
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def sql_enqueue(dsn: str, task: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pgfleet.enqueue(%s)", (task,)).fetchone()
    assert row is not None
    return int(row[0])


def python_enqueue(dsn: str, task: str, **options: Any) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue(conn, task, **options)


QUEUES = {"default": {"processes": 1}, "payments": {"processes": 1},
          "bulk": {"processes": 1, "max_attempts": 7}}


@pytest.fixture
def fleet(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    (tmp_path / "paytasks.py").write_text(TASK_MODULE.format(attempts=5))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ['PYTHONPATH']}")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    f = Fleet(dsn, tmp_path, config_text(QUEUES, tasks=["paytasks"])).start()
    try:
        yield f
    finally:
        f.stop()


def test_published_defaults_reach_every_enqueue_path_and_follow_a_reload(
        dsn: str, fleet: Fleet, tmp_path: Path) -> None:
    assert task_defaults(dsn) == {} and queue_defaults(dsn) == {}
    wait_for(lambda: task_defaults(dsn).get("pay") == ("payments", 5), timeout=60)
    wait_for(lambda: queue_defaults(dsn) == {"default": 20, "payments": 20, "bulk": 7},
             timeout=60)
    # Undeclared fields are published as NULL: the queue's setting applies.
    assert task_defaults(dsn)["plain"] == (None, None)

    # The task's declaration, by name, from the CLI and from SQL.
    assert placed(dsn, cli_enqueue(dsn, "pay")) == ("payments", 5)
    assert placed(dsn, sql_enqueue(dsn, "pay")) == ("payments", 5)
    [bulk_id] = enqueue_many(dsn, [{"task": "pay"}])
    assert placed(dsn, bulk_id) == ("payments", 5)
    # A queue's max_attempts reaches a Python enqueue by name; the call still wins.
    assert placed(dsn, python_enqueue(dsn, "plain", queue="bulk")) == ("bulk", 7)
    assert placed(dsn, python_enqueue(dsn, "pay", max_attempts=2)) == ("payments", 2)

    # Another host published something else since: a worker started later under the
    # same config (TTIN) does not overwrite it.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgfleet.queue_defaults SET max_attempts = 3 WHERE queue = 'bulk'")
    fleet.signal(signal.SIGTTIN)
    fleet.wait_workers(2, "bulk", timeout=60)
    assert queue_defaults(dsn)["bulk"] == 3

    # A HUP with a changed config and changed task code publishes both again.
    fleet.config.write_text(config_text(
        {**QUEUES, "bulk": {"processes": 1, "max_attempts": 9}}, tasks=["paytasks"]))
    (tmp_path / "paytasks.py").write_text(TASK_MODULE.format(attempts=4))
    fleet.signal(signal.SIGHUP)
    wait_for(lambda: queue_defaults(dsn).get("bulk") == 9, timeout=60)
    wait_for(lambda: task_defaults(dsn).get("pay") == ("payments", 4), timeout=60)
    assert placed(dsn, cli_enqueue(dsn, "pay")) == ("payments", 4)
    assert placed(dsn, python_enqueue(dsn, "plain", queue="bulk")) == ("bulk", 9)
    assert "published the enqueue defaults" in fleet.log()


def test_entries_of_a_queue_no_longer_configured_are_kept(dsn: str, fleet: Fleet) -> None:
    wait_for(lambda: queue_defaults(dsn).get("bulk") == 7, timeout=60)
    fleet.config.write_text(config_text({"default": {"processes": 1, "max_attempts": 6}},
                                        tasks=["paytasks"]))
    fleet.signal(signal.SIGHUP)
    wait_for(lambda: queue_defaults(dsn).get("default") == 6, timeout=60)
    # Another host may still run `bulk` and `payments`: their entries stay.
    assert queue_defaults(dsn) == {"default": 6, "payments": 20, "bulk": 7}
    assert task_defaults(dsn)["pay"] == ("payments", 5)


def test_a_crashed_attempt_waits_for_its_tasks_backoff(dsn: str, fleet: Fleet) -> None:
    """The queue's backoff would retry within seconds; the task's says an hour."""
    wait_for(lambda: "crash_slowly" in task_defaults(dsn), timeout=60)
    job_id = python_enqueue(dsn, "crash_slowly", max_attempts=3)
    # clock_timestamp(), not now(): now() is when this statement's transaction began,
    # which can precede the rescue's own now() though the rescue committed before this
    # statement's snapshot (seen once under load: 3600.0016 s).
    query = ("SELECT state::text, crashes, extract(epoch FROM run_at - clock_timestamp())"
             " FROM pgfleet.jobs WHERE id = %s")

    def crashed() -> tuple[Any, ...] | None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(query, (job_id,)).fetchone()
        return tuple(row) if row is not None and row[1] == 1 else None

    state, _, due_in = wait_for(crashed, timeout=60)
    assert state == "queued"
    assert 3000 < due_in <= 3600


def test_of_two_hosts_with_different_files_the_last_to_start_or_reload_wins(
        dsn: str, fleet: Fleet, tmp_path: Path) -> None:
    wait_for(lambda: queue_defaults(dsn).get("bulk") == 7, timeout=60)
    other = Fleet(dsn, tmp_path, config_text(
        {"bulk": {"processes": 1, "max_attempts": 3}}, tasks=["paytasks"]), name="other")
    try:
        other.start()
        wait_for(lambda: queue_defaults(dsn).get("bulk") == 3, timeout=60)
        assert placed(dsn, python_enqueue(dsn, "plain", queue="bulk")) == ("bulk", 3)
        fleet.signal(signal.SIGHUP)
        wait_for(lambda: queue_defaults(dsn).get("bulk") == 7, timeout=60)
        assert placed(dsn, python_enqueue(dsn, "plain", queue="bulk")) == ("bulk", 7)
    finally:
        other.stop()
