"""Outside trial T12: a worker retiring after a reload had already had its TERM, and the
supervisor sent it another one on the next stop signal or reload, which a worker takes as
"stop quickly": a `reload` then a `stop` (or two reloads) interrupted running jobs at once
instead of letting them finish, and repeated pairs ended an innocent job dead once its
refunds were spent. A retiring worker is now asked to stop once."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pgfleet
from tests.acceptance.test_supervisor import job, started
from tests.support.fleet import Fleet
from tests.support.workers import wait_for

# Busy Python code: an interrupt would land at once, so a job that finishes was not cut.
SPIN = 4.0
INTERRUPTED = "the worker is stopping; interrupting it"


def _reloaded_with_a_job_running(dsn: str, fleet: Callable[..., Fleet]) -> tuple[Fleet, int]:
    f = fleet({"default": {"processes": 1}}, supervisor={"shutdown_timeout": "60s"})
    f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, "spin", {"seconds": SPIN}, max_attempts=1)
    wait_for(lambda: started(dsn, job_id) == 1)
    f.signal(signal.SIGHUP)
    wait_for(lambda: "retiring worker" in f.log())
    return f, job_id


def test_a_stop_right_after_a_reload_lets_the_retiring_workers_jobs_finish(
        dsn: str, fleet: Callable[..., Fleet]) -> None:
    f, job_id = _reloaded_with_a_job_running(dsn, fleet)
    f.signal(signal.SIGTERM)
    assert f.wait(60) == 0, f.log()[-3000:]
    record = job(dsn, job_id)
    assert (record["state"], record["attempt"]) == ("succeeded", 1), record
    assert INTERRUPTED not in f.log(), f.log()[-3000:]


def test_a_second_reload_does_not_hurry_the_workers_the_first_one_retired(
        dsn: str, fleet: Callable[..., Fleet]) -> None:
    f, job_id = _reloaded_with_a_job_running(dsn, fleet)
    f.signal(signal.SIGHUP)
    wait_for(lambda: f.log().count("reloading") == 2)
    wait_for(lambda: job(dsn, job_id)["state"] != "running", timeout=60)
    record = job(dsn, job_id)
    assert (record["state"], record["attempt"]) == ("succeeded", 1), record
    assert INTERRUPTED not in f.log(), f.log()[-3000:]
    f.signal(signal.SIGTERM)
    assert f.wait(60) == 0, f.log()[-3000:]
