"""A worker that dies charges an attempt only to the jobs whose task code it ran last.
The jobs it had claimed ahead (prefetch) and not started go back uncharged: with
max_attempts 1 they used to end `dead` without ever running, after a SIGKILL from outside
(an operator, the OOM killer) or a poison job's crashes (found by an outside trial)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgfleet
from tests.faults import books
from tests.support.fleet import Fleet, alive, settle
from tests.support.workers import scalar, wait_for

NOT_CHARGED = "(not running its task: not charged)"


def rows(dsn: str, ids: list[int]) -> dict[int, tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT id, state::text, attempt, refunds, crashes, errors"
                             " FROM pgfleet.jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    return {r[0]: tuple(r[1:]) for r in found}


def test_a_sigkill_charges_the_running_job_and_refunds_the_prefetched_ones(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"default": {"processes": 1, "threads": 1, "prefetch": 10}})
    [worker] = f.wait_workers(1)
    # One transaction, claimed by id: the sleeper runs, the ten behind it wait in the
    # worker's own queue (threads 1 + prefetch 10 = one claim of eleven).
    ids = pgfleet.enqueue_many(dsn, [{"task": "sleep", "args": {"seconds": 1.5},
                                      "max_attempts": 2},
                                     *[{"task": "noop", "max_attempts": 1}] * 10])
    sleeper, prefetched = ids[0], ids[1:]
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s"
                                 " AND event = 'started'", (sleeper,)) == 1)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE state = 'running'") == 11
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: not alive(worker))
    wait_for(lambda: all(r[0] in ("succeeded", "dead") for r in rows(dsn, ids).values()),
             timeout=60)

    found = rows(dsn, ids)
    state, attempt, refunds, crashes, errors = found[sleeper]
    assert (state, attempt, refunds, crashes) == ("succeeded", 2, 0, 1)
    assert [e["error"] for e in errors] == ["worker died: SIGKILL"]
    for job_id in prefetched:
        state, attempt, refunds, crashes, errors = found[job_id]
        # Given back with its attempt number back by one: the run that succeeded is 1.
        assert (state, attempt, refunds, crashes) == ("succeeded", 1, 0, 0), job_id
        assert [e["error"] for e in errors] == [f"worker died: SIGKILL {NOT_CHARGED}"], job_id
    log = f.log()
    assert log.count("before running it") == 10
    # `jobs show` says how many crashes a job was in and how many give-backs it was
    # refunded (what explains an attempt above max_attempts).
    shown = subprocess.run([sys.executable, "-m", "pgfleet", "jobs", "show", str(sleeper)],
                           capture_output=True, text=True, timeout=60, check=True,
                           env={**os.environ, "PGFLEET_DATABASE_URL": dsn}).stdout
    assert "crashes: 1" in shown and "refunds: 0" in shown, shown
    books.check(dsn, ids)


def test_a_poison_job_ahead_of_prefetched_jobs_never_charges_them(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    """Each of the poison job's four crashes gives the three jobs claimed behind it back
    uncharged; they run once it is dead. (A refund cap of 3, as for give-backs, ended them
    dead at the fourth crash without running.)"""
    f = fleet({"default": {"processes": 1, "threads": 1, "prefetch": 10}})
    f.wait_workers(1)
    ids = pgfleet.enqueue_many(dsn, [{"task": "crash", "max_attempts": 4},
                                     *[{"task": "noop", "max_attempts": 1}] * 3])
    poison, behind = ids[0], ids[1:]
    wait_for(lambda: all(r[0] in ("succeeded", "dead") for r in rows(dsn, ids).values()),
             timeout=120)
    found = rows(dsn, ids)
    assert found[poison][:4] == ("dead", 4, 0, 4)
    for job_id in behind:
        state, attempt, refunds, crashes, errors = found[job_id]
        assert (state, attempt, refunds, crashes) == ("succeeded", 1, 0, 0), job_id
        assert errors and all(e["error"].endswith(NOT_CHARGED) for e in errors), errors
        assert scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s"
                           " AND event = 'finished'", (job_id,)) == 1
    books.check(dsn, ids)


def test_a_task_that_signals_its_own_process_is_the_one_charged(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    """os.kill(os.getpid(), SIGSEGV) returns in the task's thread before the signal ends
    the process on another thread: the task may have returned by then. It is still the
    job charged (it ran last on its thread), not refunded as if it had never run."""
    f = fleet({"default": {"processes": 1, "threads": 1}})
    f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, "self_segv", {}, max_attempts=1)
    wait_for(lambda: rows(dsn, [job_id])[job_id][0] == "dead", timeout=60)
    state, attempt, refunds, crashes, errors = rows(dsn, [job_id])[job_id]
    assert (state, attempt, refunds, crashes) == ("dead", 1, 0, 1)
    assert [e["error"] for e in errors] == ["worker died: SIGSEGV"]
    assert scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s AND event = 'started'",
                  (job_id,)) == 1


def test_a_graceful_stop_withdraws_prefetched_jobs_uncharged(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    """Outside trial: jobs claimed ahead went back through the give-back, whose refunds
    are capped at 3, so four stops (deploys) ended them `dead` without ever running. A
    stopping worker now withdraws them: attempt back by one, no refund spent. The job in
    front sleeps in C past shutdown_timeout, so its thread is still busy when the stop
    withdraws the others."""
    # The sleeper first in claim order at every start (priority -1; a give-back is due
    # 1 s later, so each start waits until it is due), the others claimed behind it.
    ids = pgfleet.enqueue_many(dsn, [{"task": "sleep", "args": {"seconds": 2.5},
                                      "priority": -1},
                                     *[{"task": "noop", "max_attempts": 1}] * 5])
    sleeper, prefetched = ids[0], ids[1:]
    for stop in range(4):
        wait_for(lambda: scalar(dsn, "SELECT run_at <= now() FROM pgfleet.jobs WHERE id = %s",
                                (sleeper,)))
        f = fleet({"default": {"processes": 1, "threads": 1, "prefetch": 10,
                               "kill_grace": "5s"}},
                  supervisor={"shutdown_timeout": "1s"}, name=f"stop{stop}")
        f.wait_workers(1)
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s"
                                     " AND event = 'started'", (sleeper,))
                 == stop + 1)  # noqa: B023 - read within this iteration
        f.signal(signal.SIGTERM)
        assert f.wait(30) == 0
        assert "withdrew 5 job(s) no thread had started" in f.log(), f.log()[-2000:]
    found = rows(dsn, ids)
    for job_id in prefetched:
        assert found[job_id][:4] == ("queued", 0, 0, 0), (job_id, found[job_id])
    # The sleeper was started and given back four times: its refunds are capped at 3.
    assert found[sleeper][2] == 3, found[sleeper]
    assert scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = ANY(%s)", (prefetched,)) == 0


def test_a_graceful_stop_gives_back_prefetched_jobs_at_once_and_finishes_the_running_one(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    """Outside trial T9: a TERM let a worker run the jobs it had claimed ahead within
    shutdown_timeout, so a stop (a deploy) waited for up to 1,000 of them while other
    workers could have taken them. Now they go back when the stop is asked for; the job a
    thread is running still gets shutdown_timeout to finish."""
    ids = pgfleet.enqueue_many(dsn, [{"task": "sleep", "args": {"seconds": 3},
                                      "priority": -1},
                                     *[{"task": "noop"}] * 5])
    sleeper, prefetched = ids[0], ids[1:]
    f = fleet({"default": {"processes": 1, "threads": 1, "prefetch": 10}},
              supervisor={"shutdown_timeout": "30s"})
    f.wait_workers(1)
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s"
                                 " AND event = 'started'", (sleeper,)) == 1)
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE state = 'running'") == 6
    f.signal(signal.SIGTERM)
    # Back in the queue while the sleeper still runs: not after it.
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                                 " WHERE id = ANY(%s) AND state = 'queued'", (prefetched,)) == 5)
    assert rows(dsn, [sleeper])[sleeper][0] == "running"
    assert f.wait(30) == 0
    found = rows(dsn, ids)
    assert found[sleeper][:2] == ("succeeded", 1), found[sleeper]
    for job_id in prefetched:
        assert found[job_id][:4] == ("queued", 0, 0, 0), (job_id, found[job_id])
    assert scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = ANY(%s)", (prefetched,)) == 0
    assert "withdrew 5 job(s) no thread had started" in f.log(), f.log()[-2000:]


def test_a_job_still_running_when_a_stop_ends_goes_back_refunded_not_as_a_crash(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    """Outside trial T11: a task blocked in C (time.sleep) past shutdown_timeout and
    kill_grace kept its thread; the worker exited 0 leaving it leased, the supervisor read
    that as a crash ("worker died: exit code 0") and the lone job, the presumed culprit,
    was charged: with max_attempts 1 it ended dead. The stop was the operator's, not the
    job's: it goes back refunded."""
    job_id = pgfleet.enqueue(dsn, "stubborn", {"seconds": 30.0}, max_attempts=1)
    f = fleet({"default": {"processes": 1, "threads": 1, "kill_grace": "1s"}},
              supervisor={"shutdown_timeout": "1s"})
    f.wait_workers(1)
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s"
                                 " AND event = 'started'", (job_id,)) == 1)
    f.signal(signal.SIGTERM)
    assert f.wait(60) == 0
    wait_for(lambda: rows(dsn, [job_id])[job_id][0] == "queued", timeout=30)
    state, _attempt, refunds, crashes, _errors = rows(dsn, [job_id])[job_id]
    assert (state, refunds, crashes) == ("queued", 1, 0), rows(dsn, [job_id])
    assert "stopped with jobs it could not give back" in f.log(), f.log()[-3000:]


@pytest.mark.parametrize("upset", ["maintenance killed after the TERM", "HUP just before"])
def test_a_stop_without_a_maintenance_process_at_its_end_starts_one_for_its_rescue(
    dsn: str, fleet: Callable[..., Fleet], upset: str
) -> None:
    """Outside trial T11b: the maintenance process SIGKILLed 0.1 s after the TERM, or
    retired by a HUP 50 ms before it, was not replaced during the stop: the workers' jobs
    left leased were given back by nobody, the supervisor exited 0, and the jobs ended dead
    by lease expiry. A stop now ends with a maintenance process that gives them back."""
    ids = pgfleet.enqueue_many(dsn, [{"task": "stubborn", "args": {"seconds": 30.0},
                                      "max_attempts": 1}] * 2)
    f = fleet({"default": {"processes": 1, "threads": 2, "kill_grace": "1s"}},
              supervisor={"shutdown_timeout": "1s"})
    f.wait_workers(1)
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = ANY(%s)"
                                 " AND event = 'started'", (ids,)) == 2)
    maintenance = [pid for pid, title in f.children().items() if "maintenance" in title]
    assert len(maintenance) == 1, f.children()
    if upset == "HUP just before":
        f.signal(signal.SIGHUP)
        settle(0.05)  # the retiring maintenance exits during the stop; none follows it
        f.signal(signal.SIGTERM)
    else:
        f.signal(signal.SIGTERM)
        os.kill(maintenance[0], signal.SIGKILL)
    assert f.wait(60) == 0, f.log()[-3000:]
    found = rows(dsn, ids)
    for job_id in ids:
        assert found[job_id][:4] == ("queued", 1, 1, 0), (job_id, found[job_id])
