"""`pgfleet run` as a real process, real signals, real PostgreSQL (issue 3, FAULTS A)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet.runtime.exit_codes import EXIT_CRASHED
from tests.support.fleet import Fleet, alive, config_text, settle
from tests.support.workers import scalar, states, wait_for


def job(dsn: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute("SELECT state::text, attempt, last_error, errors FROM pgfleet.jobs"
                           " WHERE id = %s", (job_id,))
        row = cur.fetchone()
        assert row is not None
        return dict(zip(("state", "attempt", "last_error", "errors"), row, strict=True))


def started(dsn: str, job_id: int) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s AND event = 'started'",
                      (job_id,)))


def test_sigkill_of_a_worker_mid_job(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"default": {"processes": 1}})
    [old] = f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, "sleep", {"seconds": 1.5})
    wait_for(lambda: started(dsn, job_id) == 1)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not alive(old))
    [new] = f.wait_workers(1)
    assert new != old
    wait_for(lambda: job(dsn, job_id)["state"] == "succeeded")
    record = job(dsn, job_id)
    assert record["attempt"] == 2
    assert record["errors"][0]["error"] == "worker died: SIGKILL"
    assert "exited: SIGKILL" in f.log()


def test_a_realtime_signal_on_a_worker_does_not_take_the_supervisor_down(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    """Issue 13 item 2: `kill -35` on a worker made the reaper raise on signal.Signals(35);
    the supervisor died and the worker's jobs were never sent to rescue."""
    f = fleet({"default": {"processes": 1}})
    [old] = f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, "sleep", {"seconds": 1.5})
    wait_for(lambda: started(dsn, job_id) == 1)
    realtime = signal.SIGRTMIN + 1  # 35 on Linux; its default action ends the process
    os.kill(old, realtime)
    wait_for(lambda: not alive(old))
    [new] = f.wait_workers(1)
    assert new != old
    assert f.proc is not None and f.proc.poll() is None
    # The rescue came from the reaped worker, not from a lease expiry (30 s away).
    wait_for(lambda: job(dsn, job_id)["state"] == "succeeded")
    record = job(dsn, job_id)
    assert record["attempt"] == 2
    assert record["errors"][0]["error"] == "worker died: SIGRTMIN+1"
    assert "exited: SIGRTMIN+1" in f.log()
    assert "Traceback" not in f.log()


def test_sigkill_of_the_supervisor(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"default": {"processes": 2, "threads": 2}})
    f.wait_workers(2)
    ids = pgfleet.enqueue_many(dsn, [{"task": "sleep", "args": {"seconds": 1.0}}] * 8)
    wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE event = 'started'") >= 2)
    kids = list(f.children())
    f.signal(signal.SIGKILL)
    f.wait(10)
    # PR_SET_PDEATHSIG and the getppid() check: every child goes quickly.
    wait_for(lambda: not any(alive(pid) for pid in kids), timeout=5)
    second = fleet({"default": {"processes": 2, "threads": 2}}, name="second")
    second.wait_workers(2)
    wait_for(lambda: states(dsn) == {"succeeded": 8}, timeout=60)
    finished = psycopg.connect(dsn).execute(
        "SELECT job_id FROM audit WHERE event = 'finished'").fetchall()
    assert {r[0] for r in finished} == set(ids)


def test_sigterm_lets_a_short_job_finish(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"default": {"processes": 1}})
    f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, "sleep", {"seconds": 1.0})
    wait_for(lambda: started(dsn, job_id) == 1)
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0
    assert job(dsn, job_id)["state"] == "succeeded"
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE state = 'running'") == 0
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.processes") == 0


def test_sigterm_gives_back_a_job_longer_than_the_shutdown_timeout(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"default": {"processes": 1}}, supervisor={"shutdown_timeout": "1s"})
    f.wait_workers(1)
    # Busy Python code: the stop's interrupt lands, so the thread is known stopped.
    job_id = pgfleet.enqueue(dsn, "spin", {"seconds": 60})
    wait_for(lambda: started(dsn, job_id) == 1)
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0
    record = job(dsn, job_id)
    # The attempt number stays (the fence); the attempt is refunded instead.
    assert record["state"] == "queued" and record["attempt"] == 1
    assert scalar(dsn, "SELECT refunds FROM pgfleet.jobs WHERE id = %s", (job_id,)) == 1
    assert record["last_error"] == "given back: the worker stopped (attempt refunded)"
    assert "gave back 1 unfinished job" in f.log()


def test_a_segfaulting_job_ends_dead_while_others_flow(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"default": {"processes": 1, "threads": 2}})
    f.wait_workers(1)
    bad = pgfleet.enqueue(dsn, "crash", max_attempts=3)
    good = pgfleet.enqueue_many(dsn, [{"task": "noop"}] * 50)
    wait_for(lambda: job(dsn, bad)["state"] == "dead", timeout=60)
    wait_for(lambda: states(dsn).get("succeeded") == 50, timeout=60)
    record = job(dsn, bad)
    assert record["attempt"] == 3
    assert record["last_error"] == "worker died: SIGSEGV"
    # Every crash is counted; a crash beside other jobs (at most the first) is not charged.
    crashes = scalar(dsn, "SELECT crashes FROM pgfleet.jobs WHERE id = %s", (bad,))
    assert crashes in (3, 4)
    assert started(dsn, bad) == crashes
    assert len(good) == 50
    assert f.log().count("exited: SIGSEGV") == crashes


def test_a_job_past_its_timeout_is_killed_and_recorded(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"default": {"processes": 1, "timeout": "1s", "kill_grace": "1s"}})
    [old] = f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, "sleep", {"seconds": 60}, max_attempts=1)
    wait_for(lambda: job(dsn, job_id)["state"] == "dead", timeout=30)
    record = job(dsn, job_id)
    # Its thread may run until the process is gone, so the supervisor records it then.
    assert record["last_error"] == "worker died: job timeout"
    [new] = f.wait_workers(1)
    assert new != old
    assert "exited: job timeout" in f.log()


def test_an_interruptible_job_past_its_timeout_fails_without_a_restart(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"default": {"processes": 1, "timeout": "1s", "kill_grace": "5s"}})
    [old] = f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, "spin", {"seconds": 30}, max_attempts=1)
    wait_for(lambda: job(dsn, job_id)["state"] == "dead", timeout=30)
    assert job(dsn, job_id)["last_error"].startswith("timed out after 1.0s")
    assert list(f.workers()) == [old]


def test_unimportable_queue_fails_while_another_runs(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"broken": {"tasks": ["tests.support.broken_tasks"]},
               "default": {"processes": 1}})
    wait_for(lambda: "queue 'broken' failed" in f.log(), timeout=60)
    job_id = pgfleet.enqueue(dsn, "noop")
    wait_for(lambda: job(dsn, job_id)["state"] == "succeeded")
    assert f.workers("broken") == {}
    assert "cannot import its tasks" in f.log()


def test_hup_applies_a_new_process_count_and_survives_a_broken_file(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    f = fleet({"default": {"processes": 2}})
    before = set(f.wait_workers(2))
    f.config.write_text(config_text({"default": {"processes": 4}}))
    f.signal(signal.SIGHUP)
    after = f.wait_workers(4)
    assert not before & set(after)
    f.config.write_text("queues: [unclosed\n")
    f.signal(signal.SIGHUP)
    wait_for(lambda: "reload refused" in f.log())
    settle(1.0)  # a window in which the refused reload must replace no worker
    assert set(f.workers()) == set(after)
    job_id = pgfleet.enqueue(dsn, "noop")
    wait_for(lambda: job(dsn, job_id)["state"] == "succeeded")


def titles(f: Fleet, queue: str) -> list[str]:
    """The `pgfleet worker QUEUE i/n` part of each worker's /proc/PID/cmdline."""
    return sorted(title.split(":")[0] for title in f.workers(queue).values())


def expect_titles(f: Fleet, queue: str, count: int) -> None:
    want = [f"pgfleet worker {queue} {i}/{count}" for i in range(1, count + 1)]
    f.wait_workers(count, queue)
    try:
        wait_for(lambda: titles(f, queue) == want, timeout=30)
    except AssertionError:
        raise AssertionError(f"titles {titles(f, queue)}, expected {want}") from None


def test_ttin_and_ttou_change_the_worker_count(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"default": {"processes": 1}, "other": {"processes": 2}})
    f.wait_workers(3)
    expect_titles(f, "other", 2)
    f.signal(signal.SIGTTIN)
    expect_titles(f, "default", 2)
    expect_titles(f, "other", 3)
    # One at a time: Linux folds a second identical signal that arrives before the first
    # is handled into one.
    f.signal(signal.SIGTTOU)
    expect_titles(f, "default", 1)
    expect_titles(f, "other", 2)
    f.signal(signal.SIGTTOU)
    expect_titles(f, "other", 1)
    expect_titles(f, "default", 1)


def test_a_worker_over_max_memory_is_recycled(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"default": {"processes": 1, "max_memory": "100MiB"}})
    [old] = f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, "hog", {"megabytes": 200, "seconds": 0.2})
    wait_for(lambda: job(dsn, job_id)["state"] == "succeeded")
    wait_for(lambda: "exited: recycled" in f.log())
    [new] = f.wait_workers(1)
    assert new != old


def test_max_jobs_recycles_a_worker(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"default": {"processes": 1, "max_jobs": 10}})
    f.wait_workers(1)
    pgfleet.enqueue_many(dsn, [{"task": "noop"}] * 40)
    wait_for(lambda: states(dsn) == {"succeeded": 40}, timeout=60)
    wait_for(lambda: "exited: recycled" in f.log())
    assert int(scalar(dsn, "SELECT count(DISTINCT pid) FROM audit")) >= 3


def test_two_supervisors_share_the_queues_without_running_a_job_twice(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    a = fleet({"default": {"processes": 2, "threads": 2}}, name="a")
    b = fleet({"default": {"processes": 2, "threads": 2}}, name="b")
    a.wait_workers(2)
    b.wait_workers(2)
    ids = pgfleet.enqueue_many(dsn, [{"task": "sleep", "args": {"seconds": 0.005}}] * 2000)
    wait_for(lambda: states(dsn) == {"succeeded": 2000}, timeout=120)
    rows = psycopg.connect(dsn).execute(
        "SELECT job_id, count(*) FROM audit WHERE event = 'finished' GROUP BY 1").fetchall()
    assert {r[0] for r in rows} == set(ids) and {r[1] for r in rows} == {1}
    pids = {r[0] for r in psycopg.connect(dsn).execute("SELECT DISTINCT pid FROM audit")}
    assert pids & set(a.workers()) and pids & set(b.workers())


def test_json_logs_have_one_event_per_line(dsn: str, fleet: Callable[..., Fleet]) -> None:
    f = fleet({"default": {"processes": 1}}, args=("--log-format", "json"))
    [old] = f.wait_workers(1)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not alive(old))
    f.wait_workers(1)
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0
    entries = [json.loads(line) for line in f.log().splitlines() if line.strip()]
    messages = [e["message"] for e in entries]
    assert all({"time", "level", "pid", "message"} <= set(e) for e in entries)
    assert any(m.startswith("supervisor ") and "starting" in m for m in messages)
    assert any(m.startswith("spawned worker default#1") for m in messages)
    assert any("exited: SIGKILL" in m for m in messages)
    assert any(m == "supervisor stopped" for m in messages)


BREAKABLE_SUPERVISOR = """
import os, sys
from pgfleet.runtime import logs
from pgfleet.config import load_config
from pgfleet.supervisor.arbiter import Supervisor

logs.setup()
path, dsn, trigger = sys.argv[1:4]
supervisor = Supervisor(path, load_config(path), dsn)
spawn = supervisor._spawn_missing

def spawn_then_break():
    spawn()
    if os.path.exists(trigger):
        raise RuntimeError("injected arbiter failure")

supervisor._spawn_missing = spawn_then_break
sys.exit(supervisor.run())
"""


def test_an_arbiter_failure_stops_the_children_and_exits_non_zero(
    dsn: str, tmp_path: Path
) -> None:
    """Issue 13: a bug in the arbiter's loop must not leave its workers orphaned."""
    config = tmp_path / "fleet.yaml"
    config.write_text(config_text({"default": {"processes": 2}}))
    trigger = tmp_path / "break"
    with open(tmp_path / "fleet.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", BREAKABLE_SUPERVISOR, str(config), dsn, str(trigger)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            fleet = Fleet(dsn, tmp_path, config.read_text(), name="probe")
            fleet.proc = proc
            kids = list(fleet.wait_workers(2))
            trigger.touch()
            assert proc.wait(30) == EXIT_CRASHED
            wait_for(lambda: not any(alive(pid) for pid in kids), timeout=10)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    text = (tmp_path / "fleet.log").read_text()
    assert "supervisor failed; stopping its children" in text
    assert text.count("RuntimeError: injected arbiter failure") == 1


def stopping_gracefully(dsn: str, f: Fleet, task: str, *, max_attempts: int) -> int:
    """Start a 120 s job of `task`, TERM the supervisor once it runs, and wait for the
    graceful stop to begin; returns the job's id."""
    f.wait_workers(1)
    job_id = pgfleet.enqueue(dsn, task, {"seconds": 120}, max_attempts=max_attempts)
    wait_for(lambda: started(dsn, job_id) == 1)
    f.signal(signal.SIGTERM)
    wait_for(lambda: "stopping gracefully" in f.log())
    return job_id


def test_an_int_after_a_term_is_a_quick_stop_not_a_kill(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    """Outside trial T10: an INT during a graceful stop was taken for a second signal and
    SIGKILLed every child, so the running job stayed leased until another host's lease
    watch charged it. Each stop signal now goes one step harder: TERM, then quick."""
    f = fleet({"default": {"processes": 1}}, supervisor={"shutdown_timeout": "60s"})
    job_id = stopping_gracefully(dsn, f, "spin", max_attempts=1)
    f.signal(signal.SIGINT)
    assert f.wait(30) == 0
    record = job(dsn, job_id)
    # Given back at once, refunded, as a quick stop does: not dead, not left running.
    assert (record["state"], record["attempt"]) == ("queued", 1), record
    assert record["last_error"] == "given back: the worker stopped (attempt refunded)"
    log = f.log()
    assert "SIGINT: quick stop" in log and "killing every child" not in log, log[-2000:]


def test_a_third_stop_signal_kills_the_workers_and_their_jobs_are_given_back(
    dsn: str, fleet: Callable[..., Fleet]
) -> None:
    """A job blocked in C ignores the quick stop's interrupt; one more signal kills the
    workers, and the maintenance process gives their jobs back (charged: a killed thread
    may have been anywhere) instead of leaving them leased for a whole lease."""
    f = fleet({"default": {"processes": 1, "kill_grace": "60s"}},
              supervisor={"shutdown_timeout": "60s", "lease": "120s"})
    job_id = stopping_gracefully(dsn, f, "sleep", max_attempts=3)
    f.signal(signal.SIGTERM)
    wait_for(lambda: "quick stop" in f.log())
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0
    record = job(dsn, job_id)
    assert (record["state"], record["attempt"]) == ("queued", 1), record
    assert record["last_error"] == "worker died: SIGKILL (stop signal repeated)", record
    assert "killing the workers" in f.log(), f.log()[-2000:]


def test_hups_during_a_stop_and_after_it_do_not_change_its_exit(
    dsn: str, fleet: Callable[..., Fleet],
) -> None:
    """Re-trial T11c: a HUP that landed as the supervisor finished a clean stop ended it by
    the default action (exit 129 after "supervisor stopped"): a reload or a log rotation
    during `systemctl stop` would record the stop as failed."""
    f = fleet({"default": {"processes": 1}})
    f.wait_workers(1)
    assert f.proc is not None
    f.signal(signal.SIGTERM)
    while f.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            f.signal(signal.SIGHUP)
        settle(0.01)
    assert f.wait(30) == 0, f.log()[-2000:]


def test_a_stop_that_reaches_a_worker_while_it_imports_its_tasks_is_kept(
    dsn: str, fleet: Callable[..., Fleet], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outside trial T10b: a TERM that reached a worker while it was importing its task
    modules went to the handler it inherited from the supervisor and was lost: the worker
    started, claimed and ran jobs until the stop deadline killed it. It now stops as soon
    as it is up, without claiming."""
    marker = tmp_path / "importing"
    monkeypatch.setenv("PGFLEET_TEST_SLOW_IMPORT", str(marker))
    job_id = pgfleet.enqueue(dsn, "sleep", {"seconds": 0.1})
    f = fleet({"default": {"processes": 1}},
              tasks=["tests.support.jobtasks", "tests.support.slow_import"],
              supervisor={"shutdown_timeout": "60s"})
    wait_for(marker.exists)  # the worker is importing its tasks
    f.signal(signal.SIGTERM)
    assert f.wait(30) == 0, f.log()[-2000:]  # not at the deadline, 65 s on
    assert job(dsn, job_id)["state"] == "queued"
    assert started(dsn, job_id) == 0
    assert "stop deadline" not in f.log(), f.log()[-2000:]
