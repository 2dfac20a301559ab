"""Middleware named in the configuration wraps every job a supervised worker runs: each
attempt of each job, failed, retried, dead or of an unknown task, with its outcome."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
import pytest

import pgfleet
from pgfleet import middleware
from pgfleet.errors import PgfleetError
from tests.support.fleet import Fleet, config_text
from tests.support.workers import wait_for


def audit_events(dsn: str) -> dict[tuple[int, int], list[str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT job_id, attempt, event FROM audit"
                            " WHERE event LIKE 'mw:%' ORDER BY at").fetchall()
    seen: dict[tuple[int, int], list[str]] = {}
    for job_id, attempt, event in rows:
        seen.setdefault((job_id, attempt), []).append(event)
    return seen


def test_a_configured_middleware_sees_every_attempt_of_every_job(
        dsn: str, tmp_path: Path) -> None:
    ok = pgfleet.enqueue_many(dsn, [{"task": "noop"} for _ in range(5)])
    retried = pgfleet.enqueue(dsn, "fail_once", max_attempts=3)
    dead = pgfleet.enqueue(dsn, "fail", max_attempts=2)
    unknown = pgfleet.enqueue(dsn, "no.such.task", max_attempts=1)
    text = config_text({"default": {"processes": 2, "threads": 2}},
                       middleware=["tests.integrations.recorder.record"])
    fleet = Fleet(dsn, tmp_path, text).start()
    try:
        expected = 5 + 2 + 2 + 1
        wait_for(lambda: sum(len(v) for v in audit_events(dsn).values()) >= expected,
                 timeout=60)
    finally:
        fleet.stop()
    seen = audit_events(dsn)
    wanted = {(job_id, 1): ["mw:noop:succeeded"] for job_id in ok}
    wanted |= {(retried, 1): ["mw:fail_once:failed"], (retried, 2): ["mw:fail_once:succeeded"],
               (dead, 1): ["mw:fail:failed"], (dead, 2): ["mw:fail:failed"],
               (unknown, 1): ["mw:no.such.task:failed"]}
    assert seen == wanted


def test_a_middleware_that_swallows_an_exception_cannot_hide_a_failure() -> None:
    @contextmanager
    def swallow(event: object) -> Iterator[None]:
        with suppress(RuntimeError):
            yield

    middleware.register(swallow)
    try:
        with pytest.raises(RuntimeError, match="boom"), middleware.around(
                middleware.Enqueueing(jobs=[])):
            raise RuntimeError("boom")
    finally:
        middleware.unregister(swallow)


def test_an_unknown_middleware_name_is_one_clear_line() -> None:
    with pytest.raises(PgfleetError, match=r"middleware 'tests\.nowhere\.mw': cannot import"):
        middleware.resolve("tests.nowhere.mw")
    with pytest.raises(PgfleetError, match="has no callable 'missing'"):
        middleware.resolve("tests.integrations.recorder.missing")


def test_check_reports_a_middleware_that_is_not_there(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "pgfleet.yaml"
    config.write_text("tasks: [tests.support.jobtasks]\n"
                      "middleware: [tests.integrations.recorder.record,"
                      " tests.integrations.recorder.nothing]\n"
                      "queues: {default: {}}\n")
    done = subprocess.run([sys.executable, "-m", "pgfleet", "check", "-c", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert (f"{config}:2: middleware[1]: middleware 'tests.integrations.recorder.nothing':"
            " 'tests.integrations.recorder' has no callable 'nothing'") in done.stdout + done.stderr


def test_the_first_middleware_registered_is_the_outermost() -> None:
    order: list[str] = []

    def named(name: str) -> middleware.Middleware:
        @contextmanager
        def wrap(event: object) -> Iterator[None]:
            order.append(f"enter {name}")
            try:
                yield
            finally:
                order.append(f"exit {name}")
        return wrap

    outer, inner = named("outer"), named("inner")
    middleware.register(outer)
    middleware.register(inner)
    middleware.register(outer)  # registered once only
    try:
        with middleware.around(middleware.Enqueueing(jobs=[])):
            order.append("body")
    finally:
        middleware.unregister(outer)
        middleware.unregister(inner)
    assert order == ["enter outer", "enter inner", "body", "exit inner", "exit outer"]


def test_pgfleet_worker_refuses_a_middleware_that_is_not_there(dsn: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pgfleet", "worker", "--queue", "default",
         "--tasks", "tests.support.jobtasks", "--middleware", "tests.integrations.nowhere.mw"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "pgfleet: error: --middleware: middleware 'tests.integrations.nowhere.mw': cannot import "
        "'tests.integrations.nowhere': ModuleNotFoundError: No module named "
        "'tests.integrations.nowhere'"]


def test_an_exception_raised_by_a_middleware_replaces_the_bodys() -> None:
    left: list[str] = []

    @contextmanager
    def outer(event: object) -> Iterator[None]:
        try:
            yield
        finally:
            left.append("outer")

    @contextmanager
    def failing(event: object) -> Iterator[None]:
        yield
        raise KeyError("from the middleware")

    middleware.register(outer)
    middleware.register(failing)
    try:
        with pytest.raises(KeyError, match="from the middleware"), middleware.around(
                middleware.Enqueueing(jobs=[])):
            pass
    finally:
        middleware.unregister(outer)
        middleware.unregister(failing)
    assert left == ["outer"]  # the outer one was still left, seeing the new exception


@pytest.mark.parametrize("interrupt", ["stop", "timeout"])
def test_an_interrupt_that_lands_after_the_task_returned_does_not_undo_the_run(
        dsn: str, interrupt: str) -> None:
    # Outside trial T6: a stop gave back a job whose task had returned 50 ms
    # earlier, and it ran again. The interrupt landed on the way out (here: a middleware
    # that takes its time after the run), after the task's work was done. A timeout landing
    # there failed a job that had done its work.
    import threading
    import time

    from tests.support.workers import scalar, worker_thread

    leaving = threading.Event()

    @contextmanager
    def slow_exit(event: object) -> Iterator[None]:
        yield
        if isinstance(event, middleware.JobRun):
            leaving.set()
            for _ in range(200):  # Python-level waits, where an interrupt lands at once
                time.sleep(0.01)

    job_id = pgfleet.enqueue(dsn, "noop")
    middleware.register(slow_exit)
    try:
        with worker_thread(dsn, threads=1, kill_grace=10.0,
                           timeout=0.5 if interrupt == "timeout" else 60.0) as worker:
            assert leaving.wait(30)
            if interrupt == "stop":
                worker.request_stop("quick")  # interrupts what runs, then gives it back
                assert worker.events.stopped.wait(30)
            else:
                wait_for(lambda: scalar(dsn, "SELECT state::text FROM pgfleet.jobs"
                                             " WHERE id = %s", (job_id,)) != "running")
    finally:
        middleware.unregister(slow_exit)
    assert scalar(dsn, "SELECT state::text || ' ' || attempt FROM pgfleet.jobs WHERE id = %s",
                  (job_id,)) == "succeeded 1"
