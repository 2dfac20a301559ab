from __future__ import annotations

import itertools
import logging
import re
import subprocess
import sys
import threading
from typing import Any

import psycopg
import pytest

import pgfleet
from pgfleet.sql import store
from tests.support.workers import (
    TASKS,
    scalar,
    states,
    wait_for,
    worker_process,
    worker_thread,
)


def audit_counts(dsn: str) -> dict[int, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT job_id, count(*) FROM audit WHERE event = 'finished'"
                            " GROUP BY job_id").fetchall()
    return {r[0]: r[1] for r in rows}


def test_sixteen_workers_drain_twenty_thousand_jobs_exactly_once(dsn: str) -> None:
    ids = pgfleet.enqueue_many(dsn, [{"task": "noop", "args": {"i": i}, "max_attempts": 3}
                                     for i in range(20_000)])
    procs = [worker_process(dsn, "default", "--threads", "2") for _ in range(8)]
    try:
        wait_for(lambda: states(dsn).get("succeeded") == 20_000, timeout=240, interval=0.5)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            assert p.wait(30) == 0, p.stderr.read() if p.stderr else ""
    counts = audit_counts(dsn)
    assert set(counts) == set(ids)
    assert set(counts.values()) == {1}
    assert scalar(dsn, "SELECT max(attempt) FROM pgfleet.jobs") == 1
    assert scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE attempt > max_attempts") == 0
    assert scalar(dsn, "SELECT count(DISTINCT pid) FROM audit") > 1


def test_notify_wakes_a_worker_whose_poll_interval_is_a_minute(dsn: str) -> None:
    with worker_thread(dsn, poll_interval=60.0) as worker:
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.processes") == 1)
        wait_for(lambda: worker.listener is not None and worker.listener.conn is not None)
        job_id = pgfleet.enqueue(dsn, "noop")
        # Polling alone would take 60 s; 10 s only guards against a hang.
        wait_for(lambda: audit_counts(dsn).get(job_id) == 1, timeout=10)


def test_polling_alone_picks_up_jobs_when_notifications_are_off(dsn: str) -> None:
    with worker_thread(dsn, notify=False, poll_interval=0.2) as worker:
        assert worker.listener is None
        job_id = pgfleet.enqueue(dsn, "noop")
        wait_for(lambda: audit_counts(dsn).get(job_id) == 1, timeout=10)


def test_async_task_runs(dsn: str) -> None:
    with worker_thread(dsn, threads=4):
        ids = pgfleet.enqueue_many(dsn, [{"task": "async_noop", "args": {"value": i}}
                                         for i in range(20)])
        wait_for(lambda: states(dsn).get("succeeded") == 20)
    assert set(audit_counts(dsn)) == set(ids)


def test_retry_backoff_dead_then_manual_retry(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "fail", {"message": "always"}, max_attempts=3)
    with worker_thread(dsn):
        wait_for(lambda: states(dsn).get("dead") == 1)
    job = store.get_job(psycopg.connect(dsn, autocommit=True), job_id)
    assert job is not None
    assert job["attempt"] == 3 and job["state"] == "dead"
    assert [e["attempt"] for e in job["errors"]] == [1, 2, 3]
    assert all("RuntimeError: always" in e["error"] for e in job["errors"])
    assert job["last_error"].startswith("RuntimeError: always")
    starts = [r[0] for r in psycopg.connect(dsn).execute(
        "SELECT at FROM audit WHERE job_id = %s ORDER BY at", (job_id,)).fetchall()]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    # The task's backoff: 0.05 s then 0.1 s (no jitter); each retry waits at least that.
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1

    out = subprocess.run([sys.executable, "-m", "pgfleet", "jobs", "retry", str(job_id)],
                         capture_output=True, text=True, check=True)
    assert "queued again" in out.stdout
    assert scalar(dsn, "SELECT attempt FROM pgfleet.jobs WHERE id = %s", (job_id,)) == 0
    with worker_thread(dsn):
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s",
                                (job_id,)) == 6)
        wait_for(lambda: states(dsn).get("dead") == 1)


def test_retry_all_dead_of_a_queue_and_a_failure_that_recovers(dsn: str) -> None:
    ok = pgfleet.enqueue(dsn, "fail_once", max_attempts=2)
    dead = [pgfleet.enqueue(dsn, "fail", queue="q", max_attempts=1) for _ in range(3)]
    with worker_thread(dsn), worker_thread(dsn, queue="q"):
        wait_for(lambda: states(dsn) == {"succeeded": 1, "dead": 3})
    assert scalar(dsn, "SELECT attempt FROM pgfleet.jobs WHERE id = %s", (ok,)) == 2
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert sorted(store.retry_dead_of_queue(conn, "q")) == sorted(dead)
    assert states(dsn) == {"succeeded": 1, "queued": 3}


def test_cancel_a_queued_job(dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "noop", delay=3600)
    out = subprocess.run([sys.executable, "-m", "pgfleet", "jobs", "cancel", str(job_id)],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "cancelled" in out.stdout
    again = subprocess.run([sys.executable, "-m", "pgfleet", "jobs", "cancel", str(job_id)],
                           capture_output=True, text=True)
    assert again.returncode == 1 and "only queued and running jobs cancel" in again.stderr
    assert states(dsn) == {"cancelled": 1}


def test_pause_and_resume_a_queue(dsn: str) -> None:
    run = [sys.executable, "-m", "pgfleet", "queues"]
    subprocess.run([*run, "pause", "default"], check=True, capture_output=True)
    job_id = pgfleet.enqueue(dsn, "noop")
    with worker_thread(dsn, poll_interval=0.1) as worker:
        wait_for(lambda: worker.events.polls > 0)
        # Several polls pass; the paused queue yields nothing.
        threading.Event().wait(1.0)
        assert states(dsn) == {"queued": 1}
        subprocess.run([*run, "resume", "default"], check=True, capture_output=True)
        wait_for(lambda: audit_counts(dsn).get(job_id) == 1, timeout=10)


def test_a_worker_that_lost_its_lease_cannot_complete(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = pgfleet.enqueue(dsn, "sleep", {"seconds": 1.0})
    caplog.set_level(logging.WARNING, logger="pgfleet.worker")
    with worker_thread(dsn):
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE event = 'started'"))
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Another worker took it over (as the rescue would after an expired lease).
            conn.execute("UPDATE pgfleet.jobs SET lease_holder = 'host-b:1:ff', "
                         "attempt = attempt + 1 WHERE id = %s", (job_id,))
        wait_for(lambda: audit_counts(dsn).get(job_id) == 1)
        wait_for(lambda: "lease lost" in caplog.text)
    row = psycopg.connect(dsn).execute(
        "SELECT state::text, lease_holder, attempt FROM pgfleet.jobs WHERE id = %s",
        (job_id,)).fetchone()
    assert row == ("running", "host-b:1:ff", 2)


def test_fenced_completion_touches_no_row(conn: psycopg.Connection[Any], dsn: str) -> None:
    job_id = pgfleet.enqueue(dsn, "noop")
    [job] = store.claim(conn, queue="default", limit=5, worker="a", lease=60)
    assert job.id == job_id and job.attempt == 1
    assert store.complete_succeeded(conn, worker="b", done=[(job_id, job.fence)]) == set()
    assert store.complete_succeeded(conn, worker="a", done=[(job_id, job.fence ^ 1)]) == set()
    assert store.complete_succeeded(conn, worker="a", done=[(job_id, job.fence)]) == {job_id}


def test_fused_completion_is_fenced_and_stores_results(conn: psycopg.Connection[Any],
                                                       dsn: str) -> None:
    """complete_and_claim: only the rows still held under their fence are completed (and
    reported), each with its own result, and the claim rides along."""
    ids = pgfleet.enqueue_many(dsn, [{"task": "noop"}] * 5)
    jobs = store.claim(conn, queue="default", limit=3, worker="a", lease=60, held=0,
                       held_solo=False)
    first, second, third = sorted(jobs, key=lambda j: j.id)
    conn.execute("UPDATE pgfleet.jobs SET lease_holder = 'b' WHERE id = %s", (second.id,))
    done, claimed = store.complete_and_claim(
        conn, queue="default", limit=5, worker="a", lease=60, held=0, held_solo=False,
        done=[(first.id, first.fence), (second.id, second.fence), (third.id, third.fence ^ 1)],
        results=['{"n": 1}', "[2]", None])
    assert done == {first.id}
    assert sorted(j.id for j in claimed) == sorted(set(ids) - {j.id for j in jobs})
    rows = dict(conn.execute("SELECT id, result FROM pgfleet.jobs WHERE state = 'succeeded'"
                             ).fetchall())
    assert rows == {first.id: {"n": 1}}
    done, again = store.complete_and_claim(
        conn, queue="default", limit=5, worker="a", lease=60, held=0, held_solo=False,
        done=[(third.id, third.fence), *((j.id, j.fence) for j in claimed)],
        results=["[3]", *([None] * len(claimed))])
    assert done == {third.id, *(j.id for j in claimed)} and again == []
    assert conn.execute("SELECT result FROM pgfleet.jobs WHERE id = %s",
                        (third.id,)).fetchone() == ([3],)


def test_skip_locked_claims_never_overlap(dsn: str) -> None:
    pgfleet.enqueue_many(dsn, [{"task": "noop"}] * 2000)
    claimed: list[list[int]] = [[] for _ in range(6)]
    barrier = threading.Barrier(6)

    def claimer(index: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            barrier.wait()
            while batch := store.claim(c, queue="default", limit=7, worker=f"w{index}",
                                       lease=60):
                claimed[index].extend(j.id for j in batch)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for part in claimed for i in part]
    assert len(every) == 2000 and len(set(every)) == 2000
    assert sum(1 for part in claimed if part) > 1


def test_claim_order_is_priority_then_due_time(conn: psycopg.Connection[Any], dsn: str) -> None:
    low = pgfleet.enqueue(dsn, "noop", priority=5)
    high = pgfleet.enqueue(dsn, "noop", priority=-5)
    later = pgfleet.enqueue(dsn, "noop", priority=-5, delay=3600)
    mid = pgfleet.enqueue(dsn, "noop")
    got = [j.id for j in store.claim(conn, queue="default", limit=10, worker="w", lease=60)]
    assert got == [high, mid, low] and later not in got


def test_unknown_and_importable_task_names_fail_without_importing(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in ("no_such_task", "antigravity.geohash", "this"):
            conn.execute("INSERT INTO pgfleet.jobs (queue, task, max_attempts)"
                         " VALUES ('default', %s, 2)", (name,))
        # Args that are not an object are refused on insert (migration 0023): args the
        # task's signature does not take stand for a bad payload here.
        conn.execute("INSERT INTO pgfleet.jobs (queue, task, args) VALUES"
                     " ('default', 'sleep', '{\"rm\": \"-rf /\"}')")
    before = set(sys.modules)
    with worker_thread(dsn):
        wait_for(lambda: states(dsn).get("dead") == 4)
    assert not {"antigravity", "this"} & (set(sys.modules) - before)
    errors = dict(psycopg.connect(dsn).execute(
        "SELECT task, last_error FROM pgfleet.jobs").fetchall())
    assert "unknown task 'no_such_task'" in errors["no_such_task"]
    assert "unknown task 'antigravity.geohash'" in errors["antigravity.geohash"]
    assert "invalid arguments" in errors["sleep"]
    assert scalar(dsn, "SELECT attempt FROM pgfleet.jobs WHERE task = 'this'") == 2
    assert scalar(dsn, "SELECT attempt FROM pgfleet.jobs WHERE task = 'sleep'") == 1


def test_worker_reconnects_after_its_connections_are_killed(dsn: str) -> None:
    pgfleet.enqueue_many(dsn, [{"task": "sleep", "args": {"seconds": 0.02}}] * 300)
    with worker_thread(dsn, threads=4):
        for _ in range(3):
            wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit") > 0)
            with psycopg.connect(dsn, autocommit=True) as conn:
                killed = conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND application_name <> 'audit'").fetchone()
            assert killed and killed[0] >= 1
            threading.Event().wait(0.3)
        wait_for(lambda: states(dsn).get("succeeded") == 300, timeout=60)
    # Outcomes wait in memory across the reconnect: no job ran twice or used a second attempt.
    assert set(audit_counts(dsn).values()) == {1} and len(audit_counts(dsn)) == 300
    assert scalar(dsn, "SELECT max(attempt) FROM pgfleet.jobs") == 1


def test_a_worker_cut_off_from_the_database_stops_before_its_lease_expires(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from pgfleet.runtime.exit_codes import EXIT_LEASE_LOST
    from pgfleet.tasks import load_registry
    from pgfleet.worker import Worker, build_settings
    from tests.support.proxy import Proxy
    from tests.support.workers import TASKS

    proxy = Proxy()
    params = conninfo_to_dict(dsn)
    params.update(host="127.0.0.1", port=proxy.port)
    job_id = pgfleet.enqueue(dsn, "sleep", {"seconds": 30})
    worker = Worker(build_settings(
        None, "default", dsn=make_conninfo(**params),
        registry=load_registry([TASKS]),
        lease=3.0, heartbeat_interval=0.5, poll_interval=0.2, notify=False))
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
    caplog.set_level(logging.ERROR, logger="pgfleet.worker")
    try:
        thread.start()
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s",
                                (job_id,)) == 1)
        proxy.cut()
        thread.join(30)
        assert result == [EXIT_LEASE_LOST]
        assert "could not renew its leases" in caplog.text
        # The database never heard of the exit: the lease runs out and a rescue follows.
        assert scalar(dsn, "SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                      (job_id,)) == "running"
        wait_for(lambda: scalar(dsn, "SELECT lease_expires_at < now() FROM pgfleet.jobs"
                                     " WHERE id = %s", (job_id,)), timeout=10)
    finally:
        proxy.close()


@pytest.mark.parametrize("change", [
    "UPDATE pgfleet.jobs SET lease_holder = 'host-b:1:ff', attempt = attempt + 1 WHERE id = %s",
    "DELETE FROM pgfleet.jobs WHERE id = %s",
])
def test_a_job_whose_row_is_taken_away_is_stopped(
    dsn: str, caplog: pytest.LogCaptureFixture, change: str
) -> None:
    job_id = pgfleet.enqueue(dsn, "spin", {"seconds": 60})
    caplog.set_level(logging.WARNING, logger="pgfleet.worker")
    with worker_thread(dsn, heartbeat_interval=0.2) as worker:
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE event = 'started'"))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(change, (job_id,))
        wait_for(lambda: "is no longer held by this worker" in caplog.text, timeout=10)
        wait_for(lambda: not worker.running, timeout=10)  # the spin ended long before 60 s
        # Logged as its outcome is dropped, which may come just after the slot is freed.
        wait_for(lambda: "lease lost" in caplog.text, timeout=10)
    assert scalar(dsn, "SELECT count(*) FROM audit WHERE event = 'finished'") == 0


def test_a_timeout_is_enforced_while_the_database_is_unreachable(dsn: str) -> None:
    """Issue 13 item 3: the loop once skipped timeout enforcement while its database step
    failed, so a 1 s job ran on for as long as the outage lasted."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from pgfleet.tasks import load_registry
    from pgfleet.worker import Worker, build_settings
    from tests.support.proxy import Proxy
    from tests.support.workers import TASKS

    proxy = Proxy()
    params = conninfo_to_dict(dsn)
    params.update(host="127.0.0.1", port=proxy.port)
    job_id = pgfleet.enqueue(dsn, "spin", {"seconds": 60}, max_attempts=1)
    worker = Worker(build_settings(
        None, "default", dsn=make_conninfo(**params), registry=load_registry([TASKS]),
        timeout=1.0, heartbeat_interval=0.2, poll_interval=0.2, notify=False))
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        thread.start()
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s",
                                (job_id,)) == 1)
        proxy.cut()
        # Only the proxy's refusals answer the worker now; the job is stopped regardless.
        wait_for(lambda: worker.events.timeouts == 1, timeout=20)
        wait_for(lambda: not worker.running or worker.completer.pending, timeout=20)
        assert scalar(dsn, "SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                      (job_id,)) == "running"
        proxy.restore()
        wait_for(lambda: scalar(dsn, "SELECT state::text FROM pgfleet.jobs WHERE id = %s",
                                (job_id,)) == "dead", timeout=30)
        assert scalar(dsn, "SELECT last_error FROM pgfleet.jobs WHERE id = %s",
                      (job_id,)).startswith("timed out after 1.0s")
        assert scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = %s AND event = 'finished'",
                      (job_id,)) == 0
    finally:
        worker.request_stop("quick")
        thread.join(15)
        proxy.close()
    assert not thread.is_alive()


def test_auto_prefetch_holds_big_args_within_its_memory_bound(dsn: str) -> None:
    """prefetch auto lets a worker of tiny jobs claim up to 1,000 at once; with 128 KiB of
    args per job that would hold 125 MiB in one process. The worker measures the args it
    claims and keeps the prefetch within PREFETCH_BYTES."""
    from pgfleet.worker.prefetch import AUTO_CLAIM_CAP, PREFETCH_BYTES

    size = 128 * 1024
    pgfleet.enqueue_many(dsn, [{"task": "noop", "args": {"blob": "x" * size}}] * 300)
    with worker_thread(dsn, threads=2) as worker:
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                                     " WHERE state = 'succeeded'") == 300)
        assert worker.batching.auto.args_bytes is not None
        assert worker.batching.auto.args_bytes > size
        prefetch = worker.batching.prefetch()
    assert prefetch <= PREFETCH_BYTES // size < AUTO_CLAIM_CAP - 2


def test_after_a_quiet_spell_slow_jobs_are_not_all_claimed_by_one_worker(dsn: str) -> None:
    """Outside trial T9: a worker that had measured tiny jobs, then a burst of 1 s jobs
    after the queue went quiet: prefetch auto sized the claim by the old measure and one
    process took 92 of 100 while the other idled. Idle for a while, a worker forgets its
    measures and claims no more than its threads until it has measured the new jobs."""
    from pgfleet.worker.prefetch import STALE_AFTER

    pgfleet.enqueue_many(dsn, [{"task": "noop"}] * 400)
    with worker_thread(dsn, threads=2) as first, worker_thread(dsn, threads=2) as second:
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                                     " WHERE state = 'succeeded'") == 400)
        assert first.batching.auto.job_seconds is not None  # tiny jobs measured
        threading.Event().wait(STALE_AFTER + 0.5)  # the queue is quiet
        pgfleet.enqueue_many(dsn, [{"task": "sleep", "args": {"seconds": 0.3}}] * 8)
        most = 0
        while scalar(dsn, "SELECT count(*) FROM pgfleet.jobs WHERE state = 'succeeded'") < 408:
            most = max(most, len(first.running), len(second.running))
            threading.Event().wait(0.01)
    assert most <= 2  # never more than a worker's threads: the 8 jobs were spread


def test_slow_jobs_claimed_ahead_behind_tiny_ones_are_given_back(
        dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """Outside trials T9 and T10: slow jobs right behind a backlog of tiny ones were
    claimed in one large claim, sized by the tiny jobs, and ran one after another in that
    process while another idled (100 jobs of 1 s: 111 s instead of ~55). Once the jobs it
    holds turn out slow, prefetch auto gives back those no thread has started."""
    ids = pgfleet.enqueue_many(dsn, [*[{"task": "tiny"}] * 3000,
                                     *[{"task": "sleep", "args": {"seconds": 0.5}}] * 12])
    slow = set(ids[3000:])
    caplog.set_level(logging.INFO, logger="pgfleet.worker")
    with worker_thread(dsn, threads=1, modules=(TASKS, "tests.support.tinytasks")):
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                                     " WHERE state = 'succeeded'") == len(ids), timeout=60)
    given = [set(map(int, re.findall(r"\d+", r.getMessage().split(":", 1)[1])))
             for r in caplog.records if r.getMessage().startswith("withdrew ")]
    assert given and all(back <= slow for back in given), given
    assert len(given[0]) >= 5  # the rest of its claim, after the first slow jobs
    # Given back uncharged, and each ran once.
    assert scalar(dsn, "SELECT max(attempt) FROM pgfleet.jobs WHERE id = ANY(%s)",
                  (list(slow),)) == 1
    assert scalar(dsn, "SELECT count(*) FROM audit WHERE job_id = ANY(%s)"
                       " AND event = 'started'", (list(slow),)) == len(slow)


def test_the_first_claim_of_big_args_behind_tiny_jobs_stays_within_the_claim_budget(
        dsn: str) -> None:
    """Outside trial T10b: big-args jobs right behind a backlog of tiny ones were claimed
    by the claim sized for the tiny ones, all of them at once (545 MB of args in one
    worker). The database now stops a claim once its args reach the budget of prefetch
    auto. Jobs leased by one claim share their started_at (the claim's now())."""
    from pgfleet.worker.prefetch import claim_bytes

    size = 256 * 1024
    pgfleet.enqueue_many(dsn, [*[{"task": "tiny"}] * 3000,
                               *[{"task": "noop", "args": {"blob": "x" * size}}] * 200])
    with worker_thread(dsn, threads=1, modules=(TASKS, "tests.support.tinytasks")):
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgfleet.jobs"
                                     " WHERE state = 'succeeded'") == 3200, timeout=60)
    most = scalar(dsn, "SELECT max(n) FROM (SELECT count(*) AS n FROM pgfleet.jobs"
                       " WHERE task = 'noop' GROUP BY started_at) c")
    assert most <= claim_bytes(1) // size + 1
    assert scalar(dsn, "SELECT max(attempt) FROM pgfleet.jobs") == 1
