"""The measurements of issue 6, one function per scenario. Each returns plain numbers."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from typing import Any

import pgfleet
from bench.common import (
    BENCH_DIR,
    WORK,
    Database,
    Supervisor,
    children_of,
    log,
    ms,
    pss_kib,
    rss_kib,
    supervisor,
    title,
    write_config,
)
from bench.sqlloop import explain_named

MAINTENANCE_QUERIES = ["queue_counts", "oldest_waiting", "finished_last_minute"]
PGBENCH = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
UNFINISHED = "SELECT count(*) FROM pgfleet.jobs WHERE state IN ('queued', 'running')"


# ---- 1. drain -----------------------------------------------------------------------


def drain_pgfleet(db: Database, n: int, task: str = "bench.noop",
                  queue_overrides: dict[str, Any] | None = None,
                  during: Any = None) -> dict[str, Any]:
    """Workers up and idle; n jobs land in one transaction; rate from that commit to the
    last finished_at (both database clocks)."""
    db.reset()
    overrides = queue_overrides or {}
    config = write_config("drain", overrides)
    processes = int(overrides.get("processes", 2))
    with supervisor(db, config, processes) as sup:
        time.sleep(0.3)  # let the listeners LISTEN and the first polls pass
        commits0 = db.commits()
        t0 = db.insert_jobs(n, task)
        if during is not None:
            during(sup)
        db.wait_for(UNFINISHED, 0, timeout=600, interval=0.05)
        commits = db.commits() - commits0
        with db.connect() as conn:
            row = conn.execute("SELECT count(*), max(finished_at) FROM pgfleet.jobs"
                               " WHERE state = 'succeeded'").fetchone()
    assert row is not None
    done, t_end = row
    if done != n:
        raise RuntimeError(f"drain: {done} of {n} jobs succeeded")
    seconds = (t_end - t0).total_seconds()
    return {"jobs_per_s": n / seconds, "seconds": seconds,
            "commits_per_job": commits / n}


def pgbench_ceiling(db: Database, n: int, batch: int, clients: int) -> dict[str, Any]:
    """bench/lifecycle.sql over n jobs: claim a batch + finish it, per transaction."""
    db.reset()
    per_client = n // (batch * clients)
    db.insert_jobs(int(n * 1.1))  # a margin, so no transaction finds the queue empty
    db.vacuum()
    out = subprocess.run(
        [PGBENCH, "-n", "-M", "prepared", "-c", str(clients), "-j", str(clients),
         "-t", str(per_client), "-D", f"batch={batch}", "-f", str(BENCH_DIR / "lifecycle.sql"),
         db.dsn], capture_output=True, text=True, check=True).stdout
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if match is None:
        raise RuntimeError(f"cannot read pgbench output:\n{out}")
    done = db.scalar("SELECT count(*) FROM pgfleet.jobs WHERE state = 'succeeded'")
    expected = per_client * batch * clients
    if done != expected:
        raise RuntimeError(f"pgbench finished {done} jobs, expected {expected}")
    return {"jobs_per_s": float(match.group(1)) * batch, "batch": batch, "clients": clients}


# ---- 2. enqueue ---------------------------------------------------------------------


def enqueue_single(db: Database, seconds: float, mode: str = "autocommit") -> float:
    """One `pgfleet.enqueue` per call from one client. mode: "autocommit" (each enqueue
    commits and waits for its WAL flush), "sync_off" (the same with the session's
    synchronous_commit = off: the opt-in documented in docs/performance.md) or
    "one_txn" (all calls in one transaction: the per-call cost without the commit)."""
    with db.connect(autocommit=mode != "one_txn") as conn:
        if mode == "sync_off":
            conn.execute("SET synchronous_commit = off")
        count = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            pgfleet.enqueue(conn, "bench.noop", {}, queue="enqueue")
            count += 1
        rate = count / (time.perf_counter() - start)
        if mode == "one_txn":
            conn.commit()
        return rate


def enqueue_bulk(db: Database, n: int) -> float:
    jobs = [{"task": "bench.noop", "args": {"i": i}, "queue": "enqueue"} for i in range(n)]
    with db.connect(autocommit=False) as conn:
        start = time.perf_counter()
        pgfleet.enqueue_many(conn, jobs)
        conn.commit()
        return n / (time.perf_counter() - start)


# ---- 3. latency ---------------------------------------------------------------------


def latency(db: Database, n: int, background_rate: int = 0) -> dict[str, Any]:
    """Enqueue -> task start (bench_started.started_at - jobs.created_at), one job every
    ~10 ms; with background_rate, a second client feeds that many no-op jobs/s meanwhile."""
    db.reset()
    config = write_config("latency")
    stop = threading.Event()
    background_done = [0, 0.0]

    def feed() -> None:
        with db.connect() as conn:
            tick = 0.01
            per_tick = max(1, round(background_rate * tick))
            next_at = began = time.monotonic()
            while not stop.is_set():
                pgfleet.enqueue_many(conn, [{"task": "bench.noop"}] * per_tick)
                background_done[0] += per_tick
                next_at += tick
                time.sleep(max(0.0, next_at - time.monotonic()))
            background_done[1] = time.monotonic() - began

    with supervisor(db, config, 2), db.connect() as conn:
        for _ in range(40):  # warm up: each worker opens its recording connection
            pgfleet.enqueue(conn, "bench.record", {})
            time.sleep(0.005)
        db.wait_for("SELECT count(*) FROM bench_started", 40, timeout=30)
        conn.execute("TRUNCATE bench_started")
        feeder = None
        if background_rate:
            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            time.sleep(1.0)
        ids = []
        start = time.monotonic()
        for _ in range(n):
            ids.append(pgfleet.enqueue(conn, "bench.record", {}))
            time.sleep(random.uniform(0.005, 0.015))
        elapsed = time.monotonic() - start
        db.wait_for("SELECT count(*) FROM bench_started", n, timeout=60)
        stop.set()
        if feeder is not None:
            feeder.join()
        row = conn.execute(
            """SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.ms),
                      percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.claim_ms),
                      max(s.ms)
                 FROM (SELECT extract(epoch FROM b.started_at - j.created_at) * 1000 AS ms,
                              extract(epoch FROM j.started_at - j.created_at) * 1000 AS claim_ms
                         FROM bench_started b JOIN pgfleet.jobs j ON j.id = b.job_id
                        WHERE j.id = ANY(%s)) s""", (ids,)).fetchone()
    assert row is not None
    start_p, claim_p, worst = row
    return {"p50_ms": start_p[0], "p95_ms": start_p[1], "p99_ms": start_p[2],
            "max_ms": float(worst),
            "claim_p50_ms": claim_p[0], "claim_p99_ms": claim_p[2], "jobs": n,
            "enqueue_seconds": elapsed,
            "background_jobs_per_s": background_done[0] / background_done[1]
            if background_rate else 0}


# ---- 4. recovery --------------------------------------------------------------------


def recovery(db: Database, runs: int) -> dict[str, Any]:
    """One worker process (the worst case: nobody else can pick the job up)."""
    db.reset()
    config = write_config("recovery", {"processes": 1, "threads": 4, "prefetch": 0})
    replacement, claim_after_kill, rerun = [], [], []
    with supervisor(db, config, 1) as sup, db.connect() as conn:
        for _ in range(runs):
            # (a) idle worker killed; a job enqueued right after can only be claimed by
            # its replacement: kill -> that claim (jobs.started_at), and -> task start.
            (victim,) = sup.wait_workers(30)
            time.sleep(0.5)
            t_kill = db.now()
            os.kill(victim, signal.SIGKILL)
            job = pgfleet.enqueue(conn, "bench.record", {})
            db.wait_for("SELECT count(*) FROM bench_started WHERE job_id = %s", 1, 30,
                        params=(job,))
            row = conn.execute(
                "SELECT j.started_at, b.started_at FROM pgfleet.jobs j"
                " JOIN bench_started b ON b.job_id = j.id WHERE j.id = %s", (job,)).fetchone()
            assert row is not None
            claim_after_kill.append(ms(row[0] - t_kill))
            replacement.append(ms(row[1] - t_kill))
            # (b) a worker SIGKILLed in the middle of a job: kill -> that job's next start.
            sup.wait_workers(30, exclude=[victim])
            time.sleep(0.5)
            job = pgfleet.enqueue(conn, "bench.hang_first", {})
            pid = db.wait_for("SELECT pid FROM bench_started WHERE job_id = %s AND attempt = 1",
                              lambda v: v is not None, 30, params=(job,))
            t_kill = db.now()
            os.kill(pid, signal.SIGKILL)
            again = db.wait_for(
                "SELECT started_at FROM bench_started WHERE job_id = %s AND attempt = 2",
                lambda v: v is not None, 30, params=(job,))
            rerun.append(ms(again - t_kill))
            sup.wait_workers(30, exclude=[pid])
    return {"replacement_claim_ms": claim_after_kill, "replacement_task_start_ms": replacement,
            "killed_job_rerun_ms": rerun}


# ---- 5. scale -----------------------------------------------------------------------


def _window(db: Database, n: int) -> float:
    """Unpause, time n completions from the unpause (database clocks), pause again."""
    t0 = db.set_paused(False)
    db.wait_for("SELECT count(*) FROM pgfleet.jobs WHERE state = 'succeeded'"
                " AND finished_at >= %s", lambda v: v >= n, 600, 0.05, params=(t0,))
    t_n = db.scalar("SELECT finished_at FROM pgfleet.jobs WHERE state = 'succeeded'"
                    " AND finished_at >= %s ORDER BY finished_at OFFSET %s LIMIT 1",
                    (t0, n - 1))
    db.set_paused(True)
    db.wait_for("SELECT count(*) FROM pgfleet.jobs WHERE state = 'running'", 0, 60)
    return float(n / (t_n - t0).total_seconds())


def explain_claim(db: Database) -> dict[str, Any]:
    with db.connect(autocommit=False) as conn:
        from pgfleet.sql.store import q

        sql = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + q("claim").decode()
        plans = []
        for _ in range(5):
            row = conn.execute(sql, {"queue": "default", "limit": 32, "worker": "explain",
                                     "lease": 60}).fetchone()
            conn.rollback()
            assert row is not None
            plans.append(row[0][0])
    best = min(plans, key=lambda p: p["Execution Time"])
    index_names = sorted(set(re.findall(r'"Index Name": "(\w+)"', str(best).replace("'", '"'))))
    return {"execution_ms": best["Execution Time"], "planning_ms": best["Planning Time"],
            "indexes": index_names}


def _fresh_windows(db: Database, baseline: int, window: int, runs: int) -> list[float]:
    """`runs` drains, each of `baseline` freshly inserted jobs (measured over `window`)."""
    rates = []
    for _ in range(runs):
        db.insert_jobs(baseline)
        db.vacuum()
        rates.append(_window(db, min(window, baseline)))
    return rates


def scale(db: Database, window: int, baseline: int, backlog: int, history: int,
          runs: int) -> dict[str, Any]:
    db.reset()
    db.set_paused(True)
    config = write_config("scale")
    result: dict[str, Any] = {"window_jobs": window, "baseline_waiting": baseline,
                              "backlog_waiting": backlog, "history_finished": history}
    with supervisor(db, config, 2):
        result["baseline_jobs_per_s"] = _fresh_windows(db, baseline, window, runs)
        result["explain_baseline"] = explain_claim(db)
        result["maintenance_queries_ms_baseline"] = explain_named(db, MAINTENANCE_QUERIES)
        log(f"scale: inserting {backlog:,} waiting jobs")
        with db.connect() as conn:
            conn.execute("DELETE FROM pgfleet.jobs")
        db.insert_jobs(backlog)
        db.vacuum()
        result["explain_backlog"] = explain_claim(db)
        result["backlog_jobs_per_s"] = [_window(db, window) for _ in range(runs)]
        log(f"scale: inserting {history:,} finished jobs")
        with db.connect() as conn:
            conn.execute("TRUNCATE pgfleet.jobs")
        db.insert_jobs(history, state="succeeded")
        result["history_jobs_per_s"] = _fresh_windows(db, baseline, window, runs)
        result["explain_history"] = explain_claim(db)
        result["maintenance_queries_ms_history"] = explain_named(db, MAINTENANCE_QUERIES)
    return result


# ---- 6. memory ----------------------------------------------------------------------


def memory(db: Database, restarts: int) -> dict[str, Any]:
    db.reset()
    result: dict[str, Any] = {}
    with supervisor(db, write_config("memory"), 2) as sup:
        time.sleep(3.0)
        workers = sup.workers()
        result["supervisor_rss_kib"] = rss_kib(sup.pid)
        result["idle_worker_rss_kib"] = [rss_kib(p) for p in workers]
        result["idle_worker_pss_kib"] = [pss_kib(p) for p in workers]
        result["children"] = {title(p): rss_kib(p) for p in children_of(sup.pid)}
    # Recycling after every job: max_jobs 1, one thread, no prefetch.
    db.reset()
    config = write_config("restarts", {"processes": 2, "threads": 1, "prefetch": 0,
                                       "max_jobs": 1})
    with supervisor(db, config, 2) as sup:
        time.sleep(1.0)
        before = rss_kib(sup.pid)
        db.insert_jobs(restarts)
        warm_n = min(50, restarts // 10)
        db.wait_for("SELECT count(*) FROM pgfleet.jobs WHERE state = 'succeeded'",
                    lambda v: v >= warm_n, 600, 0.01)
        warm = rss_kib(sup.pid)
        start = time.monotonic()
        db.wait_for("SELECT count(*) FROM pgfleet.jobs WHERE state = 'succeeded'",
                    restarts, 3600, 0.2)
        elapsed = time.monotonic() - start
        time.sleep(1.0)
        after = rss_kib(sup.pid)
        with open(sup.log_path) as fh:
            recycled = sum(1 for line in fh if "exited: recycled" in line)
    result.update({"restarts": recycled, "supervisor_rss_before_kib": before,
                   f"supervisor_rss_after_{warm_n}_kib": warm,
                   "supervisor_rss_after_kib": after,
                   "rss_change_pct": 100.0 * (after - before) / before,
                   "rss_change_after_warmup_pct": 100.0 * (after - warm) / warm,
                   "restarts_per_s": (restarts - warm_n) / elapsed})
    return result


def profile_drain(db: Database, n: int, seconds: float) -> dict[str, Any]:
    """py-spy on one worker during a drain: where its main thread spends the time."""
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        return {"error": "py-spy is not installed (pip install py-spy)"}
    out_path = WORK / "pyspy.txt"
    collected: dict[str, Any] = {}

    def during(sup: Supervisor) -> None:
        worker = sup.workers()[0]
        proc = subprocess.run(
            [pyspy, "record", "-p", str(worker), "-d", str(seconds), "-r", "200",
             "-f", "raw", "-o", str(out_path), "--nonblocking", "--idle", "--threads"],
            capture_output=True, text=True)
        collected["returncode"] = proc.returncode
        collected["stderr"] = proc.stderr[-400:]

    drain = drain_pgfleet(db, n, during=during)
    result: dict[str, Any] = {"drain_jobs_per_s": drain["jobs_per_s"]}
    if collected.get("returncode") != 0 or not out_path.exists():
        result["error"] = collected.get("stderr", "py-spy failed")
        return result
    shutil.copy(out_path, BENCH_DIR / "results" / "pyspy-worker.txt")
    result["main_thread"] = _summarise_pyspy(out_path.read_text())
    return result


# What the worker's main thread is doing, by the innermost pgfleet/psycopg frame of interest.
_BUCKETS = [
    ("claim (store.claim)", "claim (pgfleet/store.py"),
    ("complete (store.complete_succeeded)", "complete_succeeded (pgfleet/store.py"),
    ("complete_failed", "complete_failed (pgfleet/store.py"),
    ("heartbeat", "renew (pgfleet/worker/leases.py"),
    ("idle wait (wakeup.wait)", "wait (pgfleet/child.py"),
    ("dispatch/metrics", "_hand_out (pgfleet/worker/loop.py"),
    ("account/metrics", "_account (pgfleet/worker/completer.py"),
]


def _summarise_pyspy(raw: str) -> dict[str, Any]:
    total = 0
    buckets: dict[str, int] = {}
    leaf: dict[str, int] = {}
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or "MainThread" not in stack.split(";")[0]:
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        name = "other"
        for label, needle in _BUCKETS:
            if any(needle in f for f in frames):
                name = label
                break
        if name == "idle wait (wake.wait)" and not any("wait (threading.py" in f
                                                       for f in frames):
            name = "loop bookkeeping"
        buckets[name] = buckets.get(name, 0) + count
        leaf[frames[-1]] = leaf.get(frames[-1], 0) + count
    if not total:
        return {}
    top = sorted(leaf.items(), key=lambda kv: -kv[1])[:8]
    return {"samples": total,
            "share_pct": {k: round(100.0 * v / total, 1)
                          for k, v in sorted(buckets.items(), key=lambda kv: -kv[1])},
            "top_leaf_frames_pct": {k: round(100.0 * v / total, 1) for k, v in top}}
