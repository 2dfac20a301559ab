"""PgBouncer in transaction mode (Debian's `pgbouncer`) in front of the throwaway cluster.

With `notify: false` (workers poll) the core flow passes through it: enqueue from Python
and from the command line, a supervisor draining jobs with retries and dead jobs,
`jobs retry`, `queues pause/resume` and `status`; the books balance. With `notify: true`
LISTEN does not work through a transaction pooler, and jobs must still run (polling is
always on). A pooler pointing at a missing database or a closed port gives one clear line,
not a hang.

Server connections are shared between clients here (a pool smaller than the number of
clients), so a prepared statement left on a server connection by one client is seen by
the next: PgBouncer before 1.21 cannot track them, and psycopg prepares a query after its
fifth execution on a connection unless told not to (`prepare_threshold=None`).
PGFLEET_DATABASE_POOLER=transaction is how pgfleet is told so (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

import pgfleet
from tests.faults import books
from tests.faults.conftest import Db, faults_config
from tests.faults.helpers import enqueue, mixed_batch, wait_settled
from tests.faults.pgbouncer import Bouncer, version
from tests.support.cluster import Cluster, free_port
from tests.support.fleet import Fleet
from tests.support.workers import scalar

pytestmark = pytest.mark.faults

POOL_SIZE = 3  # server connections per database, for more clients than that


@pytest.fixture(scope="module")
def bouncer(cluster: Cluster) -> Iterator[Bouncer]:
    b = Bouncer(cluster.port, ["postgres"], pool_size=POOL_SIZE).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tell pgfleet (its commands, its Python API and every process of `pgfleet run`)
    that it talks to a transaction pooler: no prepared statements."""
    if version() < (1, 21):
        monkeypatch.setenv("PGFLEET_DATABASE_POOLER", "transaction")


def cli(dsn: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfleet", *argv], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "PGFLEET_DATABASE_URL": dsn})


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def server_backends(db: Db) -> int:
    """Server connections of pgfleet's processes to the test's database (not the tasks'
    audit connections, which go direct)."""
    return int(scalar(db.cluster.dsn(), "SELECT count(*) FROM pg_stat_activity"
                      " WHERE datname = %s AND backend_type = 'client backend'"
                      " AND application_name <> 'audit'", (db.name,)))


def test_core_flow_through_pgbouncer_in_transaction_mode(
        db: Db, bouncer: Bouncer, pooled: None, cfleet: Callable[..., Fleet]) -> None:
    direct, pooled_url = db.dsn, bouncer.url(db.name)
    # 3 + 2 workers, maintenance and scheduler: 7 clients on 3 server connections.
    f = cfleet({"default": {"processes": 3, "threads": 2}, "other": {"processes": 2}},
               dsn=pooled_url, notify=False,
               schedules={"tick": {"cron": "* * * * * *", "task": "noop"}})
    f.wait_workers(5)

    # The Python API: enqueue_many, enqueue with a URL, and enqueue in the application's
    # own transaction (its connection must not prepare either).
    ids = enqueue(pooled_url, mixed_batch(300, n_sleep=10, n_fail_once=20))
    ids += [pgfleet.enqueue(pooled_url, "noop", {"i": i}) for i in range(20)]
    with psycopg.connect(pooled_url, prepare_threshold=None) as conn:
        ids += [pgfleet.enqueue(conn, "noop", {"i": i}, queue="other") for i in range(20)]
    failing = enqueue(pooled_url, [{"task": "fail", "queue": "other", "max_attempts": 2}] * 3)
    ids += failing

    # The command line through the pooler: pause, enqueue, status, resume.
    ok(cli(pooled_url, "queues", "pause", "other"))
    paused_job = int(ok(cli(pooled_url, "enqueue", "noop", "--queue", "other",
                            "--args", '{"i": -1}')))
    ids.append(paused_job)
    status = json.loads(ok(cli(pooled_url, "status", "--json")))
    assert {q["queue"]: q["paused"] for q in status["queues"]}["other"] is True
    time.sleep(1.0)  # several polls: a paused queue is not claimed from
    assert scalar(direct, "SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                  (paused_job,)) == "queued"
    assert server_backends(db) <= POOL_SIZE
    ok(cli(pooled_url, "queues", "resume", "other"))
    wait_settled(direct, log=f.log)

    retry = ok(cli(pooled_url, "jobs", "retry", "--queue", "other"))
    assert "3 dead job(s)" in retry, retry
    wait_settled(direct, log=f.log)
    ids += enqueue(pooled_url, mixed_batch(200, n_fail_once=10, queue="other"))
    wait_settled(direct, log=f.log)
    status = json.loads(ok(cli(pooled_url, "status", "--json")))
    assert {q["queue"] for q in status["queues"]} >= {"default", "other"}
    assert ok(cli(pooled_url, "jobs", "show", str(failing[0])))

    log = f.log()
    for bad in ("prepared statement", "Traceback", "lost its database connection",
                "maintenance pass failed", " exited:"):
        assert bad not in log, log[-3000:]
    # The every-second schedule keeps enqueueing: stop the supervisor (TERM lets running
    # jobs finish) so that nothing arrives between reading the books and checking them.
    f.signal(signal.SIGTERM)
    assert f.wait(60) == 0, f.log()[-3000:]
    schedule_jobs = [j for j in books.read(direct) if j not in ids]
    assert schedule_jobs, "the scheduler enqueued nothing through the pooler"
    result = books.check(direct, ids + schedule_jobs, retried=failing, waiting_ok=True)
    print("through pgbouncer:", result.summary())
    assert Counter(result.jobs[i].state for i in ids) == {"succeeded": len(ids) - 3, "dead": 3}
    # A fire just before the stop may still wait; every other one ran.
    assert {result.jobs[j].state for j in schedule_jobs} <= {"succeeded", "queued"}
    assert [result.jobs[j].state for j in schedule_jobs].count("queued") <= 1
    assert "prepared statement" not in bouncer.log()


def test_notify_on_behind_a_transaction_pooler_still_runs_jobs(
        db: Db, bouncer: Bouncer, pooled: None, cfleet: Callable[..., Fleet]) -> None:
    """A misconfiguration: LISTEN through a transaction pooler. The LISTEN lands on
    whichever server connection ran it, which goes back to the pool, so notifications
    never reach the worker. Polling is always on: every job still runs."""
    direct, pooled_url = db.dsn, bouncer.url(db.name)
    f = cfleet({"default": {"processes": 2, "threads": 2}}, dsn=pooled_url, notify=True,
               poll_interval="0.5s")
    f.wait_workers(2)
    ids: list[int] = []
    for _ in range(3):
        ids += enqueue(pooled_url, mixed_batch(100, n_sleep=5, n_fail_once=5))
        wait_settled(direct, log=f.log)
    result = books.check(direct, ids)
    assert result.states == {"succeeded": len(ids)}
    log = f.log()
    assert "Traceback" not in log and " exited:" not in log, log[-3000:]
    # Whether a notification reaches a server connection no client is linked to (PgBouncer
    # then logs "got packet 'A' from server when not linked") depends on timing, so it is
    # not asserted: what matters is that every job ran.


def timed_failure(dsn: str, *argv: str) -> tuple[str, float]:
    started = time.monotonic()
    done = cli(dsn, *argv, timeout=60)
    elapsed = time.monotonic() - started
    assert done.returncode != 0, done
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0], elapsed


def test_a_misconfigured_pooler_fails_fast_with_one_line(
        db: Db, bouncer: Bouncer, pooled: None, tmp_path: Path) -> None:
    config = tmp_path / "check.yaml"
    commands = (("check", "-c", str(config)), ("status",),
                ("enqueue", "noop", "--args", "{}"))

    # The pooler forwards to a database that does not exist: the server's error, at once.
    missing = bouncer.url("no_such_database")
    config.write_text(faults_config({"default": {"processes": 1}}, database_url=missing))
    for argv in commands:
        line, elapsed = timed_failure(missing, *argv)
        assert line.startswith("pgfleet: error: cannot connect to the database"), line
        assert 'database "no_such_database" does not exist' in line, line
        assert elapsed < 5, (argv, elapsed)

    # The pooler forwards to a closed port. PgBouncer keeps the client waiting for a
    # server (up to its query_wait_timeout, 120 s by default); pgfleet gives up after its
    # connect timeout (10 s, 5 s for `check`) with one line.
    nowhere = Bouncer(free_port(), ["postgres"]).start()
    try:
        url = nowhere.url(db.name)
        config.write_text(faults_config({"default": {"processes": 1}}, database_url=url))
        started = time.monotonic()
        procs = [subprocess.Popen([sys.executable, "-m", "pgfleet", *argv],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "PGFLEET_DATABASE_URL": url})
                 for argv in commands]
        for argv, proc in zip(commands, procs, strict=True):
            out, err = proc.communicate(timeout=60)
            assert proc.returncode != 0 and out == "", (argv, out, err)
            lines = err.strip().splitlines()
            assert len(lines) == 1, err
            assert lines[0].startswith("pgfleet: error: cannot connect to the database"), err
            assert "timeout" in lines[0], err
        assert time.monotonic() - started < 20  # 10 s connect timeout, plus start-up
        assert "connect failed" in nowhere.log()
    finally:
        nowhere.stop()
    # Nothing reached the real database.
    assert scalar(db.dsn, "SELECT count(*) FROM pgfleet.jobs") == 0


def test_flow_control_through_pgbouncer_in_transaction_mode(
        db: Db, bouncer: Bouncer, pooled: None, cfleet: Callable[..., Fleet]) -> None:
    """Two supervisors behind the pooler share global_concurrency 2 and one running job
    per key: the limited claim keeps no session state (its lock is a row lock that ends
    with the transaction), so it works through a transaction pooler as it does direct."""
    from tests.acceptance.test_flow_control import depth, intervals

    direct, pooled_url = db.dsn, bouncer.url(db.name)
    queue = {"limited": {"processes": 1, "threads": 4, "global_concurrency": 2}}
    fleets = [cfleet(queue, dsn=pooled_url, notify=False, name=name)
              for name in ("host-a", "host-b")]
    for f in fleets:
        f.wait_workers(1)
    jobs = [{"task": "sleep", "queue": "limited", "concurrency_key": f"k{i % 3}",
             "args": {"seconds": 0.1}} for i in range(30)]
    ids = enqueue(pooled_url, jobs)
    wait_settled(direct, log=fleets[0].log)
    ran = intervals(direct)
    assert set(ran) == set(ids)
    assert depth([span for span, _ in ran.values()]) == 2
    for key in ("k0", "k1", "k2"):
        mine = [ran[j][0] for j, job in zip(ids, jobs, strict=True)
                if job["concurrency_key"] == key]
        assert depth(mine) == 1, key
    assert scalar(direct, "SELECT count(*) FROM pgfleet.jobs WHERE state = 'succeeded'"
                          " AND id = ANY(%s)", (ids,)) == 30
    for f in fleets:
        log = f.log()
        for bad in ("prepared statement", "Traceback", "maintenance pass failed", " exited:"):
            assert bad not in log, log[-3000:]
    assert "prepared statement" not in bouncer.log()
